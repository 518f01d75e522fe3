"""``--algorithm best``: the fastest of TACOS and the baselines, with provably-losing baselines skipped."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jsonschema
import pytest

from chakra_collectives.ir import Collective, OpKind
from chakra_collectives.network import predict_time
from chakra_collectives.processes import can_fork
from chakra_collectives.synth import BEST_WITHIN, auto_chunk_counts, synthesize
from chakra_collectives.synth.baselines import baseline_messages
from chakra_collectives.synth.registry import SynthesisOptions, get
from chakra_collectives.synth.best import applicable, baseline_bound_ns, endpoint_load_ns, forest_estimate_ns, link_load_ns
from chakra_collectives.bounds import lower_bounds
from chakra_collectives.topology import Topology, load_topology
from network_helpers import transfer_ns
from schema_helpers import schema

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
        # the endpoint bound (no routing) is weaker than the routed one and bounds under both models
        src, dst, nbytes = get(name).messages(collective, topo.num_npus, SynthesisOptions(size_bytes=2**22, chunks_per_npu=2))
        assert 0 < endpoint_load_ns(topo, src, dst, nbytes) <= bound * (1 + 1e-12)
        astra = endpoint_load_ns(topo, src, dst, nbytes, network_model="astra-sim")
        assert 0 < astra <= predict_time(algo, topo, network_model="astra-sim") * (1 + 1e-12)


def test_forestcoll_skipped_by_its_estimate_on_mesh2d_8x8(cli):
    """All-Gather 64 MiB: TACOS's 641 µs is below ForestColl's estimate (floor 615.2 µs plus its
    pipeline over the 14-hop diameter), so ForestColl (677.5 µs when built) is not built."""
    summary = json.loads(cli("synth", "-t", "mesh2d:8x8", "-c", "all-gather", "--json").stdout)
    forest = summary["candidates"]["forestcoll"]
    assert summary["algorithm"] == "tacos" and forest["predicted_ns"] is None
    assert forest["at_least_ns"] < summary["predicted_ns"] <= forest["estimated_ns"]
    assert forest["estimated_ns"] == pytest.approx(forest_estimate_ns(load_topology("mesh2d:8x8"), AG, 2**26, forest["at_least_ns"]))


def test_link_load_closed_form():
    # a one-way ring's link i -> i+1 carries N-1 messages of the ring All-Gather
    topo = load_topology("ring:5,bidirectional=false")
    src, dst, chunks = baseline_messages("ring", AG, 5)
    assert link_load_ns(topo, src, dst, chunks * 1000) == pytest.approx(4 * transfer_ns(topo.links[0], 1000))


@pytest.mark.parametrize("spec, collective, k", [("ring:8", AG, 1), ("switch:8", AR, 1), ("mesh2d:2x4", AR, 2), ("torus2d:3x3", RS, 1)])
def test_best_is_the_fastest_of_all_candidates(spec, collective, k):
    topo = load_topology(spec)
    best = synthesize(topo, collective, 2**22, chunks_per_npu=k, algorithm="best")
    names = applicable(collective, topo.num_npus, topo)
    assert set(names) <= {c.name for c in best.candidates} <= {*names, "milp"}  # milp too on small fabrics
    exhaustive = {name: synthesize(topo, collective, 2**22, chunks_per_npu=k, algorithm=name).predicted_ns for name in names}
    fastest = min(exhaustive.values())
    if best.algorithm_name == "milp":  # its time limit makes it load-dependent: it only has to beat the others
        assert best.predicted_ns < fastest
    else:  # the fastest, or within BEST_WITHIN of it (a candidate that could gain no more is skipped)
        assert fastest <= best.predicted_ns <= fastest * (1 + BEST_WITHIN)
        if best.predicted_ns == fastest:
            assert best.algorithm_name == next(name for name, t in exhaustive.items() if t == fastest)  # ties: first
    for c in best.candidates:  # every candidate is timed exactly, skipped with a valid bound, or by an estimate above the winner
        if c.name == "milp":
            continue
        if c.estimated_ns is not None:
            assert c.predicted_ns is None and c.at_least_ns <= exhaustive[c.name] * (1 + 1e-12) and c.estimated_ns >= fastest
        elif c.predicted_ns is None:
            assert best.predicted_ns <= c.at_least_ns * (1 + BEST_WITHIN) and c.at_least_ns <= exhaustive[c.name] * (1 + 1e-12)
        else:
            assert c.predicted_ns == exhaustive[c.name]


def test_best_beats_tacos_where_granularity_caps_it():
    # 7 chunks over 2 links: TACOS needs 4 steps of 8 MiB; the bidirectional ring halves the shares,
    # and BFB halves only the last step's (3 steps of 8 MiB, 1 of 4 MiB: 4 latencies, not 7)
    topo = load_topology("ring:8")
    best = synthesize(topo, AG, "64MiB", algorithm="best")
    assert best.algorithm_name == "bfb" and best.efficiency > 0.99
    assert {c.name for c in best.candidates} == {"tacos", "ring", "biring", "direct", "rhd", "bfb", "forestcoll", "milp"}
    milp = next(c for c in best.candidates if c.name == "milp")  # within 1% of the bound: the MILP could gain at most that
    assert milp.predicted_ns is None and best.predicted_ns <= milp.at_least_ns * (1 + BEST_WITHIN)


def test_best_on_the_command_line(cli):
    result = cli("synth", "-t", "ring:8", "-c", "all-gather", "-a", "best", "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["algorithm"] == "bfb" and summary["requested_algorithm"] == "best"
    times = {name: c["predicted_ns"] or c.get("estimated_ns") or c["at_least_ns"] for name, c in summary["candidates"].items()}
    produced = [c["predicted_ns"] for c in summary["candidates"].values() if c["predicted_ns"] is not None]
    assert summary["predicted_ns"] == min(produced)
    assert summary["predicted_ns"] <= min(times.values()) * (1 + BEST_WITHIN)  # skipped ones: a bound or an estimate no better (or within 1%)
    # TACOS: 7 chunks of 8 MiB over 2 in-links take 4 steps; biring: 7 steps of 4 MiB per direction
    hop = lambda nbytes: transfer_ns(load_topology("ring:8").links[0], nbytes)  # noqa: E731
    assert summary["candidates"]["tacos"]["chunks_per_npu_tried"]["1"] == pytest.approx(4 * hop(2**23))
    assert times["tacos"] <= 4 * hop(2**23)  # its best K: more chunks pipeline
    assert times["biring"] == pytest.approx(7 * hop(2**22))
    # BFB: shards 1, 1, 1 and 1/2 per link in its 4 steps
    assert summary["predicted_ns"] == pytest.approx(3 * hop(2**23) + hop(2**22))
    text = cli("synth", "-t", "ring:8", "-c", "all-gather", "-a", "best")
    assert "bfb, fastest of 8 (others: tacos" in text.stdout and ("milp ~" in text.stdout or "(within 1%, skipped)" in text.stdout)


# ---------------------------------------------------------------------- the search (issue 25)
from chakra_collectives.synth.best import BOUND_PAIRS, search  # noqa: E402
from chakra_collectives.synth.milp import model_variables  # noqa: E402
from chakra_collectives.synth.synthesis import BEST_MILP_CHUNKS, BEST_MILP_VARIABLES  # noqa: E402
import chakra_collectives.synth.best as best_module  # noqa: E402


def _recorder(times):
    made = []

    def produce(name, k):
        made.append((name, k))
        return times[name, k]

    return made, produce


def test_search_skips_what_cannot_win_and_says_by_what():
    times = {("a", 1): 10.0, ("a", 2): 8.0, ("b", 1): 20.0, ("b", 2): 19.0}
    made, produce = _recorder(times)
    found = search(["a", "b"], [1, 2], produce=produce, bound=lambda n, k: {"a": 0.0, "b": 15.0}[n], chunked=lambda n: True)
    assert (found.name, found.chunks_per_npu, found.predicted_ns) == ("a", 2, 8.0)
    assert ("b", 1) not in made and ("b", 2) not in made
    b = found.candidates[1]
    assert b.predicted_ns is None and b.at_least_ns == 15.0 and b.skipped is None


def test_search_brackets_chunk_counts_per_producer():
    # a improves up to K=4 then stops paying; K=16 is never built
    times = {("a", 1): 9.0, ("a", 2): 7.0, ("a", 4): 6.0, ("a", 8): 6.5, ("a", 16): 1.0}
    made, produce = _recorder(times)
    found = search(["a"], [1, 2, 4, 8, 16], produce=produce, bound=lambda n, k: 0.0, chunked=lambda n: True)
    assert made == [("a", 1), ("a", 2), ("a", 4), ("a", 8)]
    assert found.chunks_per_npu == 4 and found.candidates[0].stopped == "K=8 slower than K=4"
    # the exhaustive search is the oracle: it builds every K and finds the outlier
    exhaustive = search(["a"], [1, 2, 4, 8, 16], produce=lambda n, k: times[n, k], bound=lambda n, k: 0.0, chunked=lambda n: True, exhaustive=True)
    assert (exhaustive.chunks_per_npu, exhaustive.predicted_ns) == (16, 1.0)


def test_search_goes_on_through_equal_times():
    # TACOS on mesh2d:4x4 at 1 MiB: K = 1..8 merge into the same schedule, 16 is faster
    times = {("a", 1): 5.0, ("a", 2): 5.0, ("a", 4): 5.0, ("a", 8): 5.0, ("a", 16): 4.8}
    made, produce = _recorder(times)
    found = search(["a"], [1, 2, 4, 8, 16], produce=produce, bound=lambda n, k: 0.0, chunked=lambda n: True)
    assert (found.chunks_per_npu, len(made)) == (16, 5)


def test_search_unchunked_producers_are_built_once():
    made, produce = _recorder({("f", 1): 3.0, ("t", 1): 4.0, ("t", 2): 3.5, ("t", 4): 3.2})
    search(["t", "f"], [1, 2, 4], produce=produce, bound=lambda n, k: 0.0, chunked=lambda n: n == "t", exhaustive=True)
    assert made.count(("f", 1)) == 1 and ("f", 2) not in made


def _chain_runner(times, made, chains_seen):
    """``produce_chains`` run serially here: each chain in order while ``go_on``; after the
    first chain's first result, the chains ``judge`` rules out are not run."""
    def produce_chains(chains, go_on, judge):
        chains_seen.append([list(chain) for chain in chains])
        out = []
        for i, chain in enumerate(chains):
            got = []
            for pair in chain:
                if got and not go_on(got):
                    break
                made.append(pair)
                got.append(times[pair])
                if i == 0 and len(got) == 1:
                    keep = judge(got[0])
                    if not any(keep):
                        break
            out.append(got if i == 0 or keep[i - 1] else [])
        return out
    return produce_chains


def test_search_on_two_cores_produces_ahead_but_counts_only_what_the_bracket_reaches():
    # K=2 is slower than K=1: the serial search stops there, so K=4 (made on the idle core
    # while K=1 was) must not count although it is the fastest of all
    times = {("a", 1): 5.0, ("a", 2): 6.0, ("a", 4): 1.0}
    made, chains = [], []
    found = search(["a"], [1, 2, 4], produce=lambda n, k: made.append((n, k)) or times[n, k], bound=lambda n, k: 0.0,
                   chunked=lambda n: True, workers=2, produce_chains=_chain_runner(times, made, chains), speculate=True)
    assert chains == [[[("a", 1)], [("a", 2), ("a", 4)]]] and sorted(made) == [("a", 1), ("a", 2), ("a", 4)]
    assert (found.name, found.chunks_per_npu, found.predicted_ns) == ("a", 1, 5.0)
    assert found.candidates[0].tried == {1: 5.0, 2: 6.0} and found.candidates[0].stopped == "K=2 slower than K=1"


def test_search_on_two_cores_chains_each_producer_through_its_chunk_counts():
    # two producers without bounds run side by side, each through its K's (bracketing inside
    # the chain: b stops after its slower K=2); the winner is the serial search's
    times = {("a", 1): 9.0, ("a", 2): 8.0, ("a", 4): 7.0, ("b", 1): 3.0, ("b", 2): 4.0, ("b", 4): 0.5}
    made, chains = [], []
    found = search(["a", "b"], [1, 2, 4], produce=lambda n, k: times[n, k], bound=lambda n, k: 0.0,
                   chunked=lambda n: True, workers=2, produce_chains=_chain_runner(times, made, chains), speculate=True)
    serial = search(["a", "b"], [1, 2, 4], produce=lambda n, k: times[n, k], bound=lambda n, k: 0.0, chunked=lambda n: True)
    assert chains == [[[("a", 1), ("a", 2), ("a", 4)], [("b", 1), ("b", 2), ("b", 4)]]]  # one batch: both chains at once
    assert ("b", 4) not in made  # go_on stopped b's chain: K=2 slower than K=1
    assert (found.name, found.chunks_per_npu, found.predicted_ns) == (serial.name, serial.chunks_per_npu, serial.predicted_ns) == ("b", 1, 3.0)
    assert [c.tried for c in found.candidates] == [{1: 9.0, 2: 8.0, 4: 7.0}, {1: 3.0, 2: 4.0}]


def test_search_chain_stops_when_another_chains_result_rules_out_its_next_count():
    # b (beside a, on the other core) finishes first with 4.0; a's K=2 could gain at most 0.5%
    # on it (bound 3.98): a's chain stops there instead of producing K=2 and K=4
    times = {("a", 1): 9.0, ("a", 2): 8.0, ("a", 4): 7.0, ("b", 1): 4.0}
    made = []

    def produce_chains(chains, go_on, judge):
        (a_chain, b_chain) = chains
        b_times = [times[pair] for pair in b_chain]
        made.extend(b_chain)
        got = []
        for pair in a_chain:
            if got and not go_on(got, pair, list(zip(b_chain, b_times))):
                break
            made.append(pair)
            got.append(times[pair])
        return [got, b_times]

    found = search(["a", "b"], [1, 2, 4], produce=lambda n, k: times[n, k], bound=lambda n, k: 3.98, chunked=lambda n: n == "a",
                   workers=2, produce_chains=produce_chains, speculate=True, within=0.01)
    assert made == [("b", 1), ("a", 1)]
    assert (found.name, found.predicted_ns) == ("b", 4.0)
    assert found.candidates[0].tried == {1: 9.0} and found.candidates[0].stopped == "K=2 >= 3.98 ns"
    exact = search(["a", "b"], [1, 2, 4], produce=lambda n, k: times[n, k], bound=lambda n, k: 3.98, chunked=lambda n: n == "a")
    assert exact.candidates[0].tried == {1: 9.0, 2: 8.0, 4: 7.0}  # within=0: every K that could still win


@pytest.mark.parametrize("estimate, kept", [(6.0, False), (4.0, True)])
def test_search_on_two_cores_speculates_on_what_the_first_result_may_rule_out(estimate, kept):
    # f has an estimate: the serial search judges it against a's first result, so it runs
    # beside a only speculatively and counts only when that judgement would have run it
    times = {("a", 1): 5.0, ("a", 2): 5.0, ("f", 1): 4.5}
    made, chains = [], []
    found = search(["a", "f"], [1, 2], produce=lambda n, k: times[n, k], bound=lambda n, k: 0.0, chunked=lambda n: n == "a",
                   estimate=lambda n, k: estimate if n == "f" else 0.0, workers=2, produce_chains=_chain_runner(times, made, chains), speculate=True)
    serial = search(["a", "f"], [1, 2], produce=lambda n, k: times[n, k], bound=lambda n, k: 0.0, chunked=lambda n: n == "a",
                    estimate=lambda n, k: estimate if n == "f" else 0.0)
    assert chains[0] == [[("a", 1), ("a", 2)], [("f", 1)]]
    assert (found.name, found.predicted_ns) == (serial.name, serial.predicted_ns) == (("f", 4.5) if kept else ("a", 5.0))
    f = found.candidates[1]
    assert (f.predicted_ns, f.estimated_ns) == ((4.5, None) if kept else (None, 6.0))
    assert found.candidates[0].tried == {1: 5.0, 2: 5.0}


@pytest.mark.parametrize("realised, built", [(100.5, [("f", 1)]), (101.5, [("f", 1), ("t", 1)])])
def test_search_tries_first_the_producer_whose_estimate_would_rule_out_the_rest(realised, built):
    # t has only the floor (100) as its bound, f an estimate 0.5% above it: realised within 1%
    # of the floor, f leaves t nothing to gain, so f goes first and t is never built; realised
    # further off, t is built after it (its K=2 then within 1% of t's K=1), the winner within 1% of the exhaustive search's
    times = {("t", 1): 101.0, ("t", 2): 101.2, ("f", 1): realised}
    made, produce = _recorder(times)
    found = search(["t", "f"], [1, 2], produce=produce, bound=lambda n, k: 100.0, chunked=lambda n: n == "t",
                   estimate=lambda n, k: 100.5 if n == "f" else 0.0, within=0.01)
    exhaustive = search(["t", "f"], [1, 2], produce=lambda n, k: times[n, k], bound=lambda n, k: 100.0, chunked=lambda n: n == "t", exhaustive=True)
    assert made == built and found.predicted_ns <= exhaustive.predicted_ns * 1.01
    # an estimate 2% above the floor would not rule t out: the order is the bounds' (t first)
    made.clear()
    search(["t", "f"], [1, 2], produce=produce, bound=lambda n, k: 100.0, chunked=lambda n: n == "t",
           estimate=lambda n, k: 102.0 if n == "f" else 0.0, within=0.01)
    assert made[0] == ("t", 1)


def test_switch_all_reduce_default_builds_only_forestcoll(cli):
    """A 64-NPU switch, All-Reduce of 1 GiB: ForestColl's estimate is 0.2% above the cut bound, so
    it goes first; it realises 0.7% above it, within 1% of every other candidate's bound, and
    TACOS's routed matchings (about 15 s of CPU at three K) are not built."""
    summary = json.loads(cli("synth", "-t", "switch:64", "-c", "all-reduce", "-s", "1GiB", "--json").stdout)
    assert summary["algorithm"] == "forestcoll"
    others = {name: c for name, c in summary["candidates"].items() if name != "forestcoll"}
    assert others and all(c["predicted_ns"] is None for c in others.values())
    assert all(summary["predicted_ns"] <= c["at_least_ns"] * (1 + BEST_WITHIN) for c in others.values())


def test_search_asks_dearer_bounds_for_the_leader_and_speculates_nothing_beside_it():
    # b's cheap bound (the floor) would keep f from leading; its dearer one (150) does not: f goes
    # first, alone on two workers (nothing speculated beside it), and rules b out when realised
    times = {("b", 1): 160.0, ("f", 1): 106.0}
    made, produce = _recorder(times)
    chains: list = []
    found = search(["b", "f"], [1], produce=produce, bound=lambda n, k: 100.0, chunked=lambda n: False,
                   refine=lambda n, k, enough: 150.0 if n == "b" else 0.0, estimate=lambda n, k: 105.0 if n == "f" else 0.0,
                   within=0.01, workers=2, produce_chains=_chain_runner(times, made, chains), speculate=True)
    assert made == [("f", 1)] and not chains
    assert (found.name, found.candidates[0].at_least_ns) == ("f", 150.0)


@pytest.mark.parametrize("spec", ["ring:8", "mesh2d:4x4", "torus2d:4x4", "hypercube:2x2x2"])
@pytest.mark.parametrize("k", [1, 2])
def test_tacos_all_reduce_takes_at_least_its_phases_bounds(spec, k):
    """``best``'s floor for TACOS's All-Reduce without switches (synthesis.PHASED_ALL_REDUCE): its
    Reduce-Scatter and then its All-Gather, each at least its own bound."""
    topo = load_topology(spec)
    phases = lower_bounds(topo, AR, 2**22).reduce_scatter_all_gather_ns
    assert synthesize(topo, AR, "4MiB", algorithm="tacos", chunks_per_npu=k).predicted_ns >= phases >= lower_bounds(topo, AR, 2**22).best_ns


def test_mesh_all_reduce_default_builds_only_forestcoll(cli):
    """mesh2d:8x8 All-Reduce 64 MiB (the default command): ForestColl's estimate (0.766 ms) is
    below every other candidate's floor -- TACOS's its phases' bounds, BFB's its step model --
    so it goes first; realised (1.098 ms), it rules them all out: none is built."""
    summary = json.loads(cli("synth", "-t", "mesh2d:8x8", "--json").stdout)
    assert summary["algorithm"] == "forestcoll"
    others = {name: c for name, c in summary["candidates"].items() if name != "forestcoll"}
    assert all(c["predicted_ns"] is None and c["at_least_ns"] >= summary["predicted_ns"] for c in others.values())
    assert others["tacos"]["at_least_ns"] == summary["bounds"]["reduce_scatter_all_gather_ns"]


def test_search_time_budget_lists_what_was_not_tried():
    clock = iter([0.0, 5.0, 5.0, 5.0, 5.0, 5.0])
    made, produce = _recorder({("a", 1): 4.0, ("b", 1): 3.0, ("c", 1): 2.0})
    found = search(["a", "b", "c"], [1], produce=produce, bound=lambda n, k: 0.0, chunked=lambda n: False, deadline=1.0, clock=lambda: next(clock))
    assert made == [("a", 1)] and found.name == "a" and found.budget_ran_out and not found.fell_back
    assert [c.skipped for c in found.candidates] == [None, "time budget", "time budget"]


def test_search_budget_too_small_for_anything_returns_the_fallback():
    made, produce = _recorder({("a", 1): 4.0, ("b", 1): 9.0})
    found = search(["a", "b"], [1], produce=produce, bound=lambda n, k: 0.0, chunked=lambda n: False, deadline=0.0, fallback=lambda: "b", clock=lambda: 1.0)
    assert made == [("b", 1)] and (found.name, found.fell_back, found.budget_ran_out) == ("b", True, True)
    assert found.candidates[0].skipped == "time budget" and found.candidates[1].skipped is None


@pytest.mark.parametrize("spec, collective", [("ring:8", AG), ("mesh2d:4x4", AR), ("switch:8", RS), ("torus2d:3x3", AG)])
def test_default_search_matches_the_exhaustive_one(spec, collective):
    topo = load_topology(spec)
    default = synthesize(topo, collective, "64MiB", bounds="none")
    exhaustive = synthesize(topo, collective, "64MiB", bounds="none", exhaustive=True)
    assert default.predicted_ns <= exhaustive.predicted_ns * 1.01
    # the oracle really tried everything: every candidate timed, at every K when it reads K
    for c in exhaustive.candidates:
        assert c.predicted_ns is not None
        counts = auto_chunk_counts(topo.num_npus)
        affordable = [k for k in counts if k in BEST_MILP_CHUNKS and model_variables(topo, k, 2**26) <= BEST_MILP_VARIABLES]
        assert sorted(c.tried) == (affordable if c.name == "milp" else counts if get(c.name).chunked else counts[:1])
    assert exhaustive.predicted_ns == min(c.predicted_ns for c in exhaustive.candidates)
    # every candidate the default skipped had a floor (or an estimate) no better than what it found, or within 1%
    for c in default.candidates:
        if c.predicted_ns is None:
            assert (c.at_least_ns if c.estimated_ns is None else c.estimated_ns) * (1 + BEST_WITHIN) >= default.predicted_ns


@pytest.mark.parametrize("spec", ["ring:8", "mesh2d:4x4", "torus2d:4x4", "hypercube:3", "hetero-mesh2d:4x2", "mesh2d:3x5"])
@pytest.mark.parametrize("collective", [AG, RS, AR])
def test_bfb_step_model_is_below_its_predicted_time(spec, collective):
    # best skips BFB by this floor, so it must not exceed what BFB achieves
    from chakra_collectives.synth.bfb import step_model_ns

    topo = load_topology(spec)
    options = SynthesisOptions(size_bytes=2**26)
    made = get("bfb").make(topo, collective, topo.num_npus, options).algorithm
    assert 0 < step_model_ns(topo, collective, options) <= predict_time(made, topo) * (1 + 1e-9)


@pytest.mark.parametrize("spec", ["torus2d:4x8", "mesh2d:4x6", "torus3d:3x4x2", "hypercube:4", "ring:9"])
@pytest.mark.parametrize("collective", [AG, RS, AR])
def test_bfb_step_model_from_one_npu_per_symmetry_class_is_every_npus(spec, collective):
    # one breadth-first search per class of NPUs that look alike gives what every NPU's gives
    import copy

    from chakra_collectives.synth.bfb import step_model_ns

    topo = load_topology(spec)
    assert topo.symmetry is not None and len(topo.symmetry.npu_orbits()[0]) < topo.num_npus
    options = SynthesisOptions(size_bytes=3 * 2**20)
    plain = copy.copy(topo)
    plain.symmetry = None
    assert step_model_ns(topo, collective, options) == step_model_ns(plain, collective, options)


def test_link_load_stops_routing_once_the_bound_is_enough(monkeypatch):
    # recursive halving-doubling on a 1,024-NPU mesh: its full bound is far above a plausible
    # incumbent, so the first eighth of the sources already reaches it
    from chakra_collectives.network.model import NetworkModel
    import chakra_collectives.synth.best as best

    mesh = load_topology("mesh2d:32x32")
    src, dst, chunks = baseline_messages("rhd", AG, 1024)
    searched = []
    routes_from = NetworkModel.routes_from
    monkeypatch.setattr(NetworkModel, "routes_from", lambda self, s, d: searched.append(s) or routes_from(self, s, d))
    full = link_load_ns(mesh, src, dst, chunks * 2**16)
    everything, searched[:] = len(searched), []
    enough = transfer_ns(mesh.links[0], 2**16) * 8  # eight messages of one chunk on one link
    partial = link_load_ns(mesh, src, dst, chunks * 2**16, enough=enough)
    assert everything == 1024 and len(searched) == 1024 // best.PASSES
    assert enough <= partial <= full


def test_link_load_of_a_pair_subset_is_still_a_bound(monkeypatch):
    topo = load_topology("mesh2d:4x4")
    src, dst, chunks = baseline_messages("direct", AG, 16)
    full = link_load_ns(topo, src, dst, chunks * 2**20)
    monkeypatch.setattr(best_module, "BOUND_PAIRS", 40)
    part = link_load_ns(topo, src, dst, chunks * 2**20)
    assert 0 < part < full and BOUND_PAIRS >= 2**16


def test_time_budget_on_the_command_line(cli):
    for bad in ("0", "-1"):
        result = cli("synth", "-t", "ring:8", "--time-budget", bad)
        assert result.exit_code == 2 and "--time-budget must be a positive number" in result.output
        assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
    result = cli("synth", "-t", "mesh2d:4x4", "-c", "all-gather", "--time-budget", "1e-9", "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    jsonschema.validate(summary, schema("synth"))
    assert summary["budget_fallback"] and summary["budget_ran_out"]
    assert summary["algorithm"] in ("ring", "biring", "direct", "rhd")
    tacos = summary["candidates"]["tacos"]
    assert tacos == {"predicted_ns": None, "at_least_ns": tacos["at_least_ns"], "skipped": "time budget"}
    assert 0 < tacos["at_least_ns"] <= summary["predicted_ns"]  # the lower bound, every candidate's floor
    text = " ".join(cli("synth", "-t", "mesh2d:4x4", "-c", "all-gather", "--time-budget", "1e-9").stdout.split())
    assert "the time budget ran out; not tried: tacos" in text and "is the cheapest baseline" in text


def test_exhaustive_and_skips_on_the_command_line(cli):
    result = cli("synth", "-t", "mesh2d:4x4", "-c", "all-gather", "--json")
    summary = json.loads(result.stdout)
    jsonschema.validate(summary, schema("synth"))
    skipped = [c for c in summary["candidates"].values() if c["predicted_ns"] is None]
    assert skipped and all(c.get("estimated_ns", c["at_least_ns"]) * (1 + BEST_WITHIN) >= summary["predicted_ns"] for c in skipped)
    text = " ".join(cli("synth", "-t", "mesh2d:4x4", "-c", "all-gather").stdout.split())
    assert "ring >= " in text and "(skipped)" in text
    oracle = json.loads(cli("synth", "-t", "mesh2d:4x4", "-c", "all-gather", "--exhaustive", "--json").stdout)
    jsonschema.validate(oracle, schema("synth"))
    assert all(c["predicted_ns"] is not None for c in oracle["candidates"].values())
    assert summary["predicted_ns"] <= oracle["predicted_ns"] * 1.01


def _spied_jobs(monkeypatch) -> list:
    """Every ForkedJob ``best``'s prefetch starts, each recording whether it was ended unfinished."""
    import chakra_collectives.synth.synthesis as synthesis_module

    started = []

    class Spied(synthesis_module.ForkedJob):
        def __init__(self, job, **options):
            super().__init__(job, **options)
            self.cancelled = False
            started.append(self)

        def cancel(self):
            self.cancelled = True
            super().cancel()

    monkeypatch.setattr(synthesis_module, "ForkedJob", Spied)
    return started


def _choice(result) -> tuple:
    return result.algorithm_name, result.chunks_per_npu, result.predicted_ns, [c.as_dict() for c in result.candidates]


@pytest.mark.skipif((os.cpu_count() or 1) < 2 or not can_fork(), reason="best prefetches only with a second core")
def test_prefetched_forestcoll_is_the_one_the_search_would_build(monkeypatch):
    if not can_fork():  # an earlier test left a thread running in this process: best forks nothing
        pytest.skip("this process runs several threads: best does not fork")
    import chakra_collectives.synth.synthesis as synthesis_module

    topo = load_topology("mesh2d:4x4")
    started = _spied_jobs(monkeypatch)
    prefetched = synthesize(topo, AR, "64MiB")
    assert started and prefetched.algorithm_name == "forestcoll"  # the prefetched job's result won
    monkeypatch.setattr(synthesis_module, "PREFETCH_COLLECTIVES", ())  # nothing prefetched
    assert _choice(synthesize(topo, AR, "64MiB")) == _choice(prefetched)


def test_the_prefetch_starts_before_the_other_producers_load():
    """The default All-Reduce forks ForestColl as soon as it knows it wants it: in a fresh
    process, the other producers' modules (and best's search) load after the fork, beside it,
    not before it, where the forked work would wait for them."""
    code = (
        "import sys\n"
        "import chakra_collectives.synth.synthesis as synthesis\n"
        "from chakra_collectives.processes import can_fork\n"
        "loaded = []\n"
        "class Spied(synthesis.ForkedJob):\n"
        "    def __init__(self, job, **options):\n"
        "        loaded.append(sorted(m.rsplit('.', 1)[-1] for m in sys.modules if m.startswith('chakra_collectives.synth.')))\n"
        "        super().__init__(job, **options)\n"
        "synthesis.ForkedJob = Spied\n"
        "from chakra_collectives.topology import load_topology\n"
        "found = synthesis.synthesize(load_topology('mesh2d:8x8'), 'all-reduce', '64MiB')\n"
        "print('FORKS', can_fork(), bool(loaded), found.algorithm_name)\n"
        "print('AT FORK', loaded[0] if loaded else None)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    if "FORKS True True" not in out:
        pytest.skip("best did not prefetch here (one core, or a busy machine's load)")
    at_fork = out.split("AT FORK ")[1]
    assert "'producer'" in at_fork  # ForestColl's, which the fork runs
    for other in ("best", "bfb", "baselines", "milp", "gridpipe", "rails", "chains", "flowcast"):
        assert f"'{other}'" not in at_fork, other
    assert "forestcoll" in out


@pytest.mark.skipif((os.cpu_count() or 1) < 2 or not can_fork(), reason="best prefetches only with a second core")
def test_a_prefetch_the_search_does_not_want_is_ended_and_changes_nothing(monkeypatch):
    if not can_fork():  # an earlier test left a thread running in this process: best forks nothing
        pytest.skip("this process runs several threads: best does not fork")
    import chakra_collectives.synth.synthesis as synthesis_module

    topo = load_topology("mesh2d:4x4")
    plain = synthesize(topo, AR, "64MiB")
    started = _spied_jobs(monkeypatch)
    monkeypatch.setattr(synthesis_module, "PREFETCHED", "ring")  # ruled out by its bound: never produced
    assert _choice(synthesize(topo, AR, "64MiB")) == _choice(plain)
    assert len(started) >= 1 and started[0].cancelled
