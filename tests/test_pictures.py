"""What the pictures say, checked on the drawn matplotlib artists: labels, titles, legends, colours."""

from __future__ import annotations

import json
import warnings
from collections import Counter, defaultdict

import numpy as np
import pytest
from matplotlib.collections import PolyCollection
from matplotlib.colors import to_hex

from chakra_collectives.converters.chakra_et import single_collective_workload
from chakra_collectives.converters.msccl import read_msccl, write_msccl
from chakra_collectives.ir import Collective
from chakra_collectives.ir.chunks import sent_chunks
from chakra_collectives.ir.execution import execute
from chakra_collectives.ir.matching import match_messages
from chakra_collectives.plot import algorithm_figure, links_figure, timeline_figure
from chakra_collectives.plot.algorithm import KELLY
from chakra_collectives.replay import replay
from chakra_collectives.synth import synthesize
from chakra_collectives.synth.baselines import ring
from chakra_collectives.topology import load_topology
from chakra_collectives.workload import data_parallel, load_model_spec

from conftest import REPO

SAMPLES = REPO / "sample_traces"


def _bars(axes):
    return [c for c in axes.collections if isinstance(c, PolyCollection)]


def _labels_by_row(axes):
    rows = defaultdict(list)
    for text in axes.texts:
        rows[int(text.get_position()[1] - 0.5)].append(text.get_text())
    return rows


def _replay_document(workload, topology, **options):
    result = replay(workload, topology, record_links=True, **options)
    return json.loads(json.dumps(result.as_dict(timeline=True)))


# ---------------------------------------------------------------------------- plot algorithm
def test_partial_sums_sent_from_scratch_are_labelled_with_their_chunk(tmp_path):
    """An imported ring all-reduce keeps received partial sums in scratch and forwards them from
    there (rrs steps): every label must be the chunk the message carries, not the scratch slot."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        write_msccl(ring(Collective.ALL_REDUCE, 4, size_bytes=4 * 2**20), tmp_path / "ring.xml")
        algo = read_msccl(tmp_path / "ring.xml", 4 * 2**20)
    assert np.any(algo.ops.src_buf == 2)  # sends from scratch
    topology = load_topology("ring:4,bidirectional=false")
    figure = algorithm_figure(algo, topology)
    axes = figure.axes[0]
    partner = match_messages(algo).partner
    first, _ = sent_chunks(algo, partner, execute(algo, partner).order)
    sends = algo.ops.kind == 0
    assert sorted(Counter(t.get_text() for t in axes.texts).items()) == sorted(Counter(str(c) for c in first[sends]).items())
    for row, labels in _labels_by_row(axes).items():
        assert len(set(labels)) == 4, (row, labels)  # each link carries every chunk once in each phase
    title = axes.get_title()
    assert "label: the chunk a message carries" in title and "default network model" in title


def test_the_subtitle_says_when_labels_are_left_out():
    topology = load_topology("hypercube:4x4")
    algo = synthesize(topology, "all-gather", "16MiB", algorithm="tacos", chunks_per_npu=2).algorithm
    axes = algorithm_figure(algo, topology).axes[0]
    hops = sum(len(c.get_paths()) for c in _bars(axes))
    title = axes.get_title()
    if len(axes.texts) == hops:
        assert "label: the chunk a message carries" in title
    else:
        assert f"on {len(axes.texts)} of {hops} bars" in title or "too narrow" in title


def test_sixteen_owners_get_sixteen_distinct_colours():
    topology = load_topology("hypercube:4x4")
    algo = synthesize(topology, "all-gather", "16MiB", algorithm="tacos", chunks_per_npu=1).algorithm
    axes = algorithm_figure(algo, topology).axes[0]
    colours = {to_hex(c) for collection in _bars(axes) for c in collection.get_facecolors()}
    assert colours == {c.lower() for c in KELLY}
    legend = [t.get_text() for t in axes.get_legend().get_texts()]
    assert legend == [f"chunk {r} (rank {r}'s)" for r in range(16)]


def test_the_demo_picture_is_the_algorithm_the_tables_report(tmp_path):
    from chakra_collectives.demo import run_demo

    demo = run_demo(tmp_path / "d")
    tacos = demo.run("tacos").synthesis
    # the title names the time of the reported algorithm; its chunk count is the reported K's
    assert demo.pictures[-1].name == "algorithm.png"
    topology = demo.topology
    axes = algorithm_figure(tacos.algorithm, topology).axes[0]
    assert f"in {tacos.algorithm.chunk_count} chunks" in axes.get_title()


# ---------------------------------------------------------------------------- plot links
def test_links_title_counts_every_busy_link_and_says_which_are_drawn(tmp_path):
    single_collective_workload(tmp_path / "w", "all-reduce", 128, 2**20)
    document = _replay_document(tmp_path / "w", load_topology("torus2d:8x16"))
    rows = document["timeline"]["links"]["rows"]
    assert len(rows) > 64
    axes = links_figure(document).axes[0]
    mean = np.mean([np.mean(r["utilization"]) for r in rows])
    assert f"{len(rows)} links carried traffic (the 64 busiest drawn)" in axes.get_title()
    assert f"their mean utilization over the run: {mean:.0%}" in axes.get_title()
    assert len(axes.get_yticklabels()) == 64


def test_links_title_for_a_small_replay(tmp_path):
    single_collective_workload(tmp_path / "w", "all-gather", 4, 2**20)
    document = _replay_document(tmp_path / "w", load_topology("ring:4,bidirectional=false"))
    title = links_figure(document).axes[0].get_title()
    assert "4 links carried traffic (all 4 drawn)" in title and "100%" in title  # a one-way ring keeps every link busy


# ---------------------------------------------------------------------------- plot timeline
@pytest.fixture(scope="module")
def step_document():
    model = load_model_spec(SAMPLES / "workload/train_step.yaml")
    return model


def test_timeline_tells_phases_apart_and_uses_microseconds(tmp_path, step_document):
    data_parallel(step_document, 8).write(tmp_path / "step")
    document = _replay_document(tmp_path / "step", load_topology(str(SAMPLES / "topology/two_servers.yaml")))
    figure = timeline_figure(document)
    axes = figure.axes[0]
    legend = [t.get_text() for t in figure.legends[0].get_texts()]
    assert legend[:3] == ["forward", "backward", "optimizer"] and "all-reduce (all ranks)" in legend
    assert axes.get_xlabel() in ("time (µs)", "time (ms)")
    assert [t.get_text() for t in axes.get_yticklabels()] == [f"rank {r}" for r in range(8)]


def test_timeline_of_many_ranks_draws_a_readable_selection(tmp_path, step_document):
    data_parallel(step_document, 64).write(tmp_path / "step")
    document = _replay_document(tmp_path / "step", load_topology("torus2d:8x8"))
    axes = timeline_figure(document).axes[0]
    ticks = [t.get_text() for t in axes.get_yticklabels()]
    slowest = max(document["ranks"], key=lambda r: r["finish_ns"])["rank"]
    assert len(ticks) == 16 and ticks[0] == "rank 0" and ticks[-1] == "rank 63" and f"rank {slowest}" in ticks
    assert "16 of 64 ranks" in axes.get_title() and "--ranks to choose" in axes.get_title()
    chosen = timeline_figure(document, ranks="4-7").axes[0]
    assert [t.get_text() for t in chosen.get_yticklabels()] == [f"rank {r}" for r in range(4, 8)]
    assert "ranks 4-7 of 64" in chosen.get_title()
