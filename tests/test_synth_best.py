"""``--algorithm best``: the fastest of TACOS and the baselines, with provably-losing baselines skipped."""

from __future__ import annotations

import json

import pytest

from chakra_collectives.ir import Collective, OpKind
from chakra_collectives.network import predict_time
from chakra_collectives.synth import synthesize
from chakra_collectives.synth.baselines import baseline_messages
from chakra_collectives.synth.registry import SynthesisOptions, get
from chakra_collectives.synth.best import applicable, baseline_bound_ns, link_load_ns
from chakra_collectives.topology import Topology, load_topology
from network_helpers import transfer_ns

AG, RS, AR = Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_REDUCE


@pytest.mark.parametrize("name", ["ring", "biring", "direct", "rhd"])
@pytest.mark.parametrize("collective", [AG, RS, AR])
@pytest.mark.parametrize("ranks, k", [(2, 1), (4, 3), (8, 2)])
def test_message_lists_match_the_built_baselines(name, collective, ranks, k):
    algo = get(name).make(Topology(ranks), collective, ranks, SynthesisOptions(size_bytes=2**20, chunks_per_npu=k)).algorithm
    ops = algo.ops
    send = ops.kind == OpKind.SEND
    built = sorted(zip(ops.rank[send].tolist(), ops.peer[send].tolist(), ops.count[send].tolist()))
    src, dst, chunks = baseline_messages(name, collective, ranks, chunks_per_npu=k)
    assert built == sorted(zip(src.tolist(), dst.tolist(), chunks.tolist()))


@pytest.mark.parametrize("spec", ["ring:8", "mesh2d:2x4", "switch:8", "dgx:2x4", "hetero-mesh2d:4x2"])
@pytest.mark.parametrize("collective", [AG, AR])
def test_link_load_bounds_every_baseline(spec, collective):
    topo = load_topology(spec)
    for name in ("ring", "biring", "direct", "rhd"):
        algo = get(name).make(topo, collective, topo.num_npus, SynthesisOptions(size_bytes=2**22, chunks_per_npu=2)).algorithm
        bound = baseline_bound_ns(name, topo, collective, 2**22, 2)
        assert 0 < bound <= predict_time(algo, topo) * (1 + 1e-12)


def test_link_load_closed_form():
    # a one-way ring's link i -> i+1 carries N-1 messages of the ring All-Gather
    topo = load_topology("ring:5,bidirectional=false")
    src, dst, chunks = baseline_messages("ring", AG, 5)
    assert link_load_ns(topo, src, dst, chunks * 1000) == pytest.approx(4 * transfer_ns(topo.links[0], 1000))


@pytest.mark.parametrize("spec, collective, k", [("ring:8", AG, 1), ("switch:8", AR, 1), ("mesh2d:2x4", AR, 2), ("torus2d:3x3", RS, 1)])
def test_best_is_the_fastest_of_all_candidates(spec, collective, k):
    topo = load_topology(spec)
    exhaustive = {name: synthesize(topo, collective, 2**22, chunks_per_npu=k, algorithm=name).predicted_ns for name in applicable(collective, topo.num_npus, topo)}
    best = synthesize(topo, collective, 2**22, chunks_per_npu=k, algorithm="best")
    fastest = min(exhaustive.values())
    assert best.predicted_ns == fastest
    assert best.algorithm_name == next(name for name, t in exhaustive.items() if t == fastest)  # ties: first
    for c in best.candidates:  # every candidate is either timed exactly or skipped with a valid bound
        if c.predicted_ns is None:
            assert fastest <= c.at_least_ns <= exhaustive[c.name] * (1 + 1e-12)
        else:
            assert c.predicted_ns == exhaustive[c.name]


def test_best_beats_tacos_where_granularity_caps_it():
    # 7 chunks over 2 links: TACOS needs 4 steps of 8 MiB; the bidirectional ring halves the shares,
    # and BFB halves only the last step's (3 steps of 8 MiB, 1 of 4 MiB: 4 latencies, not 7)
    topo = load_topology("ring:8")
    best = synthesize(topo, AG, "64MiB", algorithm="best")
    assert best.algorithm_name == "bfb" and best.efficiency > 0.99
    assert {c.name for c in best.candidates} == {"tacos", "ring", "biring", "direct", "rhd", "bfb", "forestcoll"}


def test_best_on_the_command_line(cli):
    result = cli("synth", "-t", "ring:8", "-c", "all-gather", "-a", "best", "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["algorithm"] == "bfb" and summary["requested_algorithm"] == "best"
    times = {name: c["predicted_ns"] or c["at_least_ns"] for name, c in summary["candidates"].items()}
    assert summary["predicted_ns"] == min(times.values())
    # TACOS: 7 chunks of 8 MiB over 2 in-links take 4 steps; biring: 7 steps of 4 MiB per direction
    hop = lambda nbytes: transfer_ns(load_topology("ring:8").links[0], nbytes)  # noqa: E731
    assert summary["candidates"]["tacos"]["chunks_per_npu_tried"]["1"] == pytest.approx(4 * hop(2**23))
    assert times["tacos"] <= 4 * hop(2**23)  # its best K: more chunks pipeline
    assert times["biring"] == pytest.approx(7 * hop(2**22))
    # BFB: shards 1, 1, 1 and 1/2 per link in its 4 steps
    assert summary["predicted_ns"] == pytest.approx(3 * hop(2**23) + hop(2**22))
    text = cli("synth", "-t", "ring:8", "-c", "all-gather", "-a", "best")
    assert "bfb, fastest of 7 (others: tacos" in text.stdout
