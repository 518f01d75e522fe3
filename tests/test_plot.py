"""Pictures: valid, non-trivial PNG and SVG files; the replay timeline they draw; bad input."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ElementTree

import numpy as np
import pytest
from matplotlib.image import imread

from chakra_collectives.converters.chakra_et import single_collective_workload
from chakra_collectives.replay import replay
from chakra_collectives.replay.timeline import timeline_document
from chakra_collectives.topology import load_topology
from chakra_collectives.workload import data_parallel, uniform_model

from conftest import REPO

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SAMPLES = REPO / "sample_traces"
TOPOLOGY = SAMPLES / "topology/two_servers.yaml"


def assert_picture(path, *, min_colors: int = 4) -> None:
    """A real image: PNG signature and several colours over a good part of it, or an SVG document with drawing in it."""
    data = path.read_bytes()
    if path.suffix == ".png":
        assert data.startswith(PNG_SIGNATURE)
        pixels = imread(path)[..., :3]
        height, width = pixels.shape[:2]
        assert width >= 800 and height >= 300
        rgb = (pixels * 255).astype(np.uint32).reshape(-1, 3)
        colors = np.unique(rgb[:, 0] << 16 | rgb[:, 1] << 8 | rgb[:, 2])
        assert len(colors) >= min_colors
        not_white = np.any(pixels < 0.95, axis=2).mean()
        assert not_white > 0.05  # bars, not an empty frame
    else:
        root = ElementTree.fromstring(data)
        assert root.tag.endswith("svg")
        drawn = [e for e in root.iter() if e.tag.endswith(("path", "rect", "use"))]
        assert len(drawn) > 50


@pytest.fixture(scope="module")
def replay_json(tmp_path_factory):
    """``replay --json`` of the sample training iteration with the sample TACOS all-reduce."""
    from typer.testing import CliRunner

    from chakra_collectives.cli.app import app

    out = tmp_path_factory.mktemp("replay") / "replay.json"
    result = CliRunner().invoke(app, ["replay", str(SAMPLES / "workload/train_step"), "-t", str(TOPOLOGY),
                                      "-a", f"all-reduce={SAMPLES / 'collectives/all_reduce_tacos'}", "--json"])
    assert result.exit_code == 0, result.output
    out.write_text(result.stdout)
    return out


@pytest.mark.parametrize("kind", ["timeline", "links"])
@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_replay_pictures(cli, replay_json, tmp_path, kind, suffix):
    out = tmp_path / f"{kind}{suffix}"
    result = cli("plot", kind, replay_json, "-o", out)
    assert result.exit_code == 0, result.output
    assert_picture(out)
    assert [p.name for p in tmp_path.iterdir()] == [out.name]  # no temporary file left


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_algorithm_picture(cli, tmp_path, suffix):
    out = tmp_path / f"algorithm{suffix}"
    result = cli("plot", "algorithm", SAMPLES / "collectives/all_reduce_tacos", "-t", TOPOLOGY, "-o", out)
    assert result.exit_code == 0, result.output
    assert_picture(out, min_colors=8)  # one colour per chunk at least


def test_timeline_document_agrees_with_the_replay(tmp_path):
    """Invariants: a COMP node's interval is its duration; a link's utilization over all bins is its busy time."""
    topology = load_topology("torus2d:2x2")
    model = uniform_model(layers=3, forward="20us", gradient="4MiB", optimizer="5us")
    data_parallel(model, 4).write(tmp_path / "w")
    result = replay(tmp_path / "w", topology, record_links=True)
    doc = timeline_document(result, bins=37)
    nodes = {k: np.asarray(v) for k, v in doc["nodes"].items()}
    comp = nodes["kind"] == doc["kinds"].index("compute")
    durations = sorted(set((nodes["end_ns"][comp] - nodes["start_ns"][comp]).tolist()))
    assert durations == [5_000, 20_000, 40_000]
    calls = nodes["collective"][nodes["collective"] >= 0]
    assert sorted(set(calls.tolist())) == list(range(len(result.collectives)))
    links = doc["links"]
    assert links["bins"] * links["bin_ns"] == pytest.approx(result.total_ns)
    busy = {l.link: l.busy_ns for l in result.links}
    assert {row["link"] for row in links["rows"]} == set(busy)
    for row in links["rows"]:
        assert len(row["utilization"]) == 37 and all(0 <= u <= 1 for u in row["utilization"])
        assert sum(row["utilization"]) * links["bin_ns"] == pytest.approx(busy[row["link"]], rel=1e-9)


def test_replay_json_timeline_switches(cli, tmp_path):
    single_collective_workload(tmp_path / "w", "all-gather", 4, 2**20)
    on = json.loads(cli("replay", tmp_path / "w", "-t", "ring:4", "--json").stdout)
    off = json.loads(cli("replay", tmp_path / "w", "-t", "ring:4", "--json", "--no-timeline").stdout)
    assert len(on["timeline"]["nodes"]["rank"]) == 4 and on["timeline"]["links"]["rows"]
    assert "timeline" not in off
    (tmp_path / "off.json").write_text(json.dumps(off))
    result = cli("plot", "timeline", tmp_path / "off.json", "-o", tmp_path / "t.png")
    assert result.exit_code == 2 and "has no timeline" in result.stderr and "--json --timeline" in result.stderr
    assert not (tmp_path / "t.png").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["timeline", "{bad_json}"], "bad.json:2: invalid JSON"),
        (["timeline", "{other_json}"], "not the output of chakra-coll replay --json"),
        (["timeline", "{missing}"], "cannot read replay JSON: No such file or directory"),
        (["timeline", "{replay}", "-o", "{out}.jpg"], "cannot tell the image format from '.jpg': name the file .png or .svg"),
        (["algorithm", "{tacos}", "-t", "torus2d:8x8"], "torus2d:8x8 has 64 NPUs, more than the 16 that stay readable"),
        (["algorithm", "{tacos}", "-t", "ring:4"], "ring:4 has 4 NPUs, too few for the algorithm's 8 ranks"),
        (["algorithm", "{tacos}", "-t", "ring:8", "--network-model", "fast"], "unknown network model 'fast'"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(cli, tmp_path, replay_json, args, message):
    (tmp_path / "bad.json").write_text('{"total_ns": 1,\n "ranks": [}\n')
    (tmp_path / "other.json").write_text('{"topology": "ring:4"}\n')
    names = dict(bad_json=tmp_path / "bad.json", other_json=tmp_path / "other.json", missing=tmp_path / "nope.json",
                 replay=replay_json, out=tmp_path / "pic", tacos=SAMPLES / "collectives/all_reduce_tacos")
    args = [a.format(**names) for a in args]
    if "-o" not in args:
        args += ["-o", str(tmp_path / "pic.png")]
    result = cli("plot", *args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert not list(tmp_path.glob("pic*")) and not list(tmp_path.glob(".pic*"))
