"""Built-in algorithms per collective type; the real traces replay with the defaults."""

from __future__ import annotations

import shutil

import pytest

from chakra_collectives.converters.chakra_et import read_workload
from chakra_collectives.converters.chakra_et.workload_writer import WorkloadBuilder, single_collective_workload
from chakra_collectives.converters.pytorch.convert import convert_pytorch
from chakra_collectives.converters.chakra_et.read_policy import ReadPolicy
from chakra_collectives.errors import AlgorithmError, InputError
from chakra_collectives.ir import Collective
from chakra_collectives.replay import ReplayDeadlock, replay
from chakra_collectives.replay.algorithms import DEFAULT_ALGORITHMS, DefaultAlgorithms
from chakra_collectives.topology import load_topology

MICRO = "astra-sim/examples/workload/microbenchmarks"
FEEDER_COLLECTIVES = [("broadcast", 212480), ("broadcast", 424), ("all-reduce", 8196000), ("all-reduce", 31502336),
                      ("all-reduce", 26255360), ("all-reduce", 26550272), ("all-reduce", 9724160)]
"""The feeder trace's collectives (Chakra's test data README: 5 all-reduces of 7.8-30 MiB, 2 broadcasts)."""


@pytest.mark.parametrize(
    ("spec", "collective", "chain"),
    [
        (DEFAULT_ALGORITHMS, Collective.BROADCAST, ("tree",)),
        (DEFAULT_ALGORITHMS, Collective.ALL_TO_ALL, ("direct",)),
        (DEFAULT_ALGORITHMS, Collective.ALL_REDUCE, ("ring",)),
        ("tacos", Collective.ALL_GATHER, ("tacos",)),
        ("tacos", Collective.BROADCAST, ("tree",)),  # the catch-all serves only what tacos implements
        ("tacos", Collective.ALL_TO_ALL, ("tacos",)),  # tacos synthesizes all-to-all (forwarding matcher)
        ("direct", Collective.ALL_TO_ALL, ("direct",)),
        ("all-to-all=direct, *=tacos|ring", Collective.REDUCE_SCATTER, ("tacos", "ring")),
        ("broadcast=tree,allreduce=rhd", Collective.ALL_REDUCE, ("rhd",)),
    ],
)
def test_default_algorithms_per_collective_type(spec, collective, chain):
    assert DefaultAlgorithms(spec).chain(collective) == chain


@pytest.mark.parametrize(("spec", "message"), [("donut", "unknown default algorithm 'donut'"), ("donut=ring", "unknown collective 'donut'"),
                                               ("all-reduce=", "empty algorithm name")])
def test_bad_default_algorithms_are_named(spec, message):
    with pytest.raises(InputError, match=message):
        DefaultAlgorithms(spec)


def test_a_fallback_chain_takes_the_next_producer_and_says_why(tmp_path):
    b = WorkloadBuilder(4)
    for r in range(4):
        b.collective(r, "all-reduce", 2**20)
    b.write(tmp_path / "w")
    result = replay(tmp_path / "w", load_topology("ring:8"), default_algorithm="bfb|ring")
    assert result.collectives[0].algorithm == "ring (built-in)"
    assert any("ring used for all-reduce over 4 ranks (bfb: bfb synthesizes for the whole topology (8 NPUs) and does not serve process groups" in w
               for w in result.warnings)
    with pytest.raises(InputError, match=r"the built-in bfb cannot make one \(bfb synthesizes for the whole topology"):
        replay(tmp_path / "w", load_topology("ring:8"), default_algorithm="bfb")
    served = replay(tmp_path / "w", load_topology("ring:8"), default_algorithm="tacos|ring", in_step_choice=False)
    assert served.collectives[0].algorithm == "tacos (built-in)"  # TACOS serves the group


def test_a_data_parallel_step_with_broadcasts_replays_with_the_defaults(tmp_path):
    b = WorkloadBuilder(4)
    for r in range(4):
        bcast = b.collective(r, "broadcast", 2**20)
        fwd = b.comp(r, duration_ns=50_000, deps=[bcast])
        b.collective(r, "all-reduce", 8 * 2**20, deps=[fwd])
    b.write(tmp_path / "w")
    result = replay(tmp_path / "w", load_topology("switch:4"))
    assert [(c.collective, c.algorithm) for c in result.collectives] == [("broadcast", "tree (built-in)"), ("all-reduce", "ring (built-in)")]


@pytest.mark.interop
@pytest.mark.parametrize("workload", ["all_reduce/8npus_1MB/all_reduce", "all_gather/8npus_1MB/all_gather", "all_gather/16npus_1MB/all_gather",
                                      "reduce_scatter/8npus_1MB/reduce_scatter", "all_to_all/8npus_1MB/all_to_all"])
def test_every_astra_sim_microbenchmark_replays_with_the_defaults(interop, workload):
    n = 16 if "16npus" in workload else 8
    result = replay(interop / MICRO / workload, load_topology(f"switch:{n}"))
    runs_at = n * 2**20 if "all_gather" in workload else 2**20  # an all-gather's comm_size is each rank's shard
    assert len(result.collectives) == 1 and result.collectives[0].size_bytes == runs_at and result.total_ns > 0
    assert result.warnings == []


# ---------------------------------------------------------------------- the real traces
@pytest.mark.interop
def test_feeder_trace_replays_with_the_defaults(interop):
    """Chakra's feeder test trace: the compute critical path is 46,140 us (its README)."""
    workload = read_workload(interop / "chakra" / "feeder_chakra.0.et")
    assert workload.repairs.describe()[:2] == ["dropped 1,277 ctrl_deps to absent nodes", "dropped 383 self-dependencies"]
    assert workload.repairs.describe()[3] == "14 CPU-side COMM_COLL without comm_type timed as CPU ops"
    result = replay(workload, load_topology("switch:1"))
    assert result.total_ns == 46_140_000
    assert [(c.collective, c.size_bytes) for c in result.collectives] == FEEDER_COLLECTIVES


@pytest.mark.interop
def test_feeder_trace_as_astra_sim_reads_it_deadlocks_with_the_cycle_named(interop):
    """Waiting for its ctrl_deps (ASTRA-sim's feeder does) it cannot run: the report says why."""
    workload = read_workload(interop / "chakra" / "feeder_chakra.0.et", ReadPolicy(ctrl_deps="wait"))
    with pytest.raises(ReplayDeadlock, match=r"never complete; cycle on rank 0: node 3317 -> node 3318 -> node 3317"):
        replay(workload, load_topology("switch:1"))
    with pytest.raises(AlgorithmError, match="node 216: depends on node 3, which is not in the file"):
        read_workload(interop / "chakra" / "feeder_chakra.0.et", ReadPolicy.strict())


@pytest.mark.interop
def test_feeder_trace_on_eight_ranks_expands_its_collectives(interop, tmp_path):
    for rank in range(8):
        shutil.copy(interop / "chakra" / "feeder_chakra.0.et", tmp_path / f"feeder.{rank}.et")
    result = replay(tmp_path / "feeder", load_topology("switch:8"))
    assert [(c.collective, c.size_bytes, c.members) for c in result.collectives] == [(k, s, 8) for k, s in FEEDER_COLLECTIVES]
    assert {c.algorithm for c in result.collectives} == {"tree (built-in)", "ring (built-in)"}
    assert all(c.time_ns > 0 for c in result.collectives)
    assert result.total_ns >= 46_140_000
    assert result.num_tasks > 8 * 3664 + 7 * 8  # every collective became its algorithm's operations


@pytest.mark.interop
def test_host_trace_1_0_2_converts_and_replays_with_the_defaults(interop, tmp_path):
    convert_pytorch([interop / "chakra" / "pytorch_host_1.0.2-chakra.0.0.4.json"], None, tmp_path / "w", replicate=2)
    result = replay(tmp_path / "w", load_topology("switch:2"))
    # comm_size 4 (one float per rank): the all-gather runs at 2 x 4 bytes
    assert [(c.collective, c.size_bytes, c.algorithm) for c in result.collectives] == [("all-gather", 8, "ring (built-in)")] * 10
    assert "every COMP node has duration 0" not in " ".join(result.warnings)  # no COMP nodes at all: nothing to warn about
