"""``chakra-coll synth``: summary, JSON, written files, and one-line errors for bad input."""

from __future__ import annotations

import json

import pytest

from chakra_collectives.converters.chakra_et import read_algorithm
from chakra_collectives.synth import synthesize
from chakra_collectives.topology import load_topology
from chakra_collectives.verify import verify_algorithm


def test_synth_writes_verified_files_and_summary(cli, tmp_path):
    result = cli("synth", "--topology", "torus2d:3x3", "--collective", "all-reduce", "--size", "9MiB", "--chunks-per-npu", "2", "-o", tmp_path / "ar")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"ar.{r}.et" for r in range(9))
    assert verify_algorithm(read_algorithm(tmp_path / "ar")).ok
    for word in ("9 NPUs", "36 links", "18 (2 per NPU)", "predicted", "efficiency", "written"):
        assert word in result.stdout


def test_synth_json_matches_the_library(cli):
    result = cli("synth", "-t", "dgx:2x2", "-c", "all-gather", "-s", "1MiB", "-a", "tacos", "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    expected = synthesize(load_topology("dgx:2x2"), "all-gather", 2**20, algorithm="tacos")
    assert summary["predicted_ns"] == pytest.approx(expected.predicted_ns)
    assert summary["efficiency"] == pytest.approx(expected.bounds.best_ns / expected.predicted_ns)
    assert summary["switch_handling"].startswith("switches are routed, not unwound")
    assert (summary["npus"], summary["switches"], summary["chunks"]) == (4, 1, 4)


def test_default_is_the_best_of_all(cli):
    summary = json.loads(cli("synth", "-t", "dgx:2x2", "-c", "all-gather", "-s", "1MiB", "--json").stdout)
    assert summary["requested_algorithm"] == "best"
    assert set(summary["candidates"]) == {"tacos", "ring", "biring", "direct", "rhd", "forestcoll", "milp"}  # milp: 4 NPUs
    timed = [c["predicted_ns"] for c in summary["candidates"].values() if c["predicted_ns"] is not None]
    assert summary["predicted_ns"] == min(timed)


def test_bounds_fast_and_none(cli):
    run = lambda *extra: json.loads(cli("synth", "-t", "mesh2d:4x4", "-c", "all-gather", "-s", "1MiB", "-a", "ring", "--json", *extra).stdout)  # noqa: E731
    exact, fast, none = run("--bounds", "exact"), run("--bounds", "fast"), run("--bounds", "none")
    assert (exact["bounds_method"], fast["bounds_method"], none["bounds_method"]) == ("exact", "fast", None)
    assert fast["bounds"] == exact["bounds"]  # a mesh: the fast candidates find the exact cut
    assert none["bounds"] is None and none["efficiency"] is None
    assert run()["bounds_method"] == "exact"  # auto, 16 NPUs


@pytest.mark.parametrize("algorithm", ["ring", "biring", "direct", "rhd"])
def test_synth_baselines(cli, algorithm):
    result = cli("synth", "-t", "ring:4", "-c", "reduce-scatter", "-s", "1MiB", "-a", algorithm, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["algorithm"] == algorithm


@pytest.mark.parametrize(
    "args, message",
    [
        (["-t", "donut:4"], "unknown topology 'donut' (valid: a100, circulant, debruijn, dgx, fattree, fully-connected,"),
        (["-t", "ring:4", "-s", "12 parsecs"], "malformed size"),
        (["-t", "ring:4", "-s", "0"], "must be positive"),
        (["-t", "ring:4,bw=0"], "bandwidth 0.0 GB/s; it must be a finite number"),
        (["-t", "ring:4", "-k", "0"], "chunks per NPU must be positive, got 0"),  # the registry's check, not a copy in the CLI
        (["-t", "ring:4", "--trials", "0"], "trials must be positive, got 0"),
        (["-t", "ring:4", "-a", "forestcoll", "--trees-per-npu", "0"], "trees per NPU must be positive, got 0"),
        (["-t", "ring:4", "-a", "forestcoll", "--chunks-per-tree", "0"], "chunks per tree must be positive, got 0"),
        (["-t", "ring:4", "-a", "magic"], "unknown algorithm 'magic'"),
        (["-t", "ring:6", "-a", "rhd"], "power-of-two"),
        (["-t", "ring:4", "-c", "gossip"], "unknown collective 'gossip'"),
        (["-t", "ring:4", "-c", "broadcast", "-a", "tacos"], "TACOS synthesizes all-gather, reduce-scatter, all-reduce"),
        (["-t", "ring:4", "--bounds", "maybe"], "unknown bounds 'maybe' (valid: auto, exact, fast, none)"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(cli, tmp_path, args, message):
    result = cli("synth", *args, "-o", tmp_path / "out")
    assert result.exit_code == 2
    assert message in result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_disconnected_topology_file_names_the_npu(cli, tmp_path):
    (tmp_path / "t.yaml").write_text("npus: 3\nlinks:\n  - {src: 0, dst: 1, bidirectional: true}\n  - {src: 1, dst: 2}\n")
    result = cli("synth", "-t", tmp_path / "t.yaml", "-o", tmp_path / "out")
    assert result.exit_code == 2
    assert "t.yaml: NPU 0 cannot be reached from NPU 2" in result.stderr or "NPU 2 cannot reach NPU 0" in result.stderr
    assert not (tmp_path / "out.0.et").exists()


def test_broken_topology_file_reports_its_line(cli, tmp_path):
    (tmp_path / "t.yaml").write_text("npus: 2\nlinks:\n  - {src: 0, dst: 1, latency_ns: -3}\n")
    result = cli("synth", "-t", tmp_path / "t.yaml")
    assert result.exit_code == 2
    assert f"{tmp_path / 't.yaml'}:3: " in result.stderr


def test_all_to_all_summary_says_what_applies(cli):
    """TACOS and direct make all-to-all here: the summary lists the other, never an empty list; the bounds are shown."""
    result = cli("synth", "-t", "mesh2d:4x4", "-c", "all-to-all")
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "others: )" not in text and "fastest of 1" not in text
    assert "chosen tacos, fastest of 2 (others: direct >=" in text
    assert "bounds ingress 585.9 µs, cut 1.25 ms" in text  # 15/16 x 64 MiB into a corner's 100 GB/s; 4 x 64 MiB over the 200 GB/s bisection
    document = json.loads(cli("synth", "-t", "mesh2d:4x4", "-c", "all-to-all", "--json").stdout)
    assert document["bounds"]["cut_ns"] == pytest.approx(1.25e6) and 0 < document["efficiency"] <= 1
