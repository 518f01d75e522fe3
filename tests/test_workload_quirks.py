"""Workload files other tools write: each quirk is repaired by default (and said so in one line),
refused with --strict; deadlock and cycle reports name the nodes; warnings for replays that may
not mean what they seem."""

from __future__ import annotations

import json

import numpy as np
import pytest
from chakra.schema.protobuf.et_def_pb2 import (
    COMM_COLL_NODE,
    COMP_NODE,
    INVALID_NODE,
    MEM_LOAD_NODE,
    METADATA_NODE,
    AttributeProto,
    Node,
)

from chakra_collectives.converters.chakra_et import read_workload
from chakra_collectives.converters.chakra_et.read_policy import ReadPolicy
from chakra_collectives.converters.chakra_et.workload_writer import WorkloadBuilder
from chakra_collectives.errors import AlgorithmError, InputError
from chakra_collectives.replay import ReplayDeadlock, replay
from chakra_collectives.topology import load_topology
from et_edit import attr, edit

US = 1000.0


def chain(tmp_path, ranks: int = 2, durations=(10, 20, 30)):
    """Per rank: COMP 0 -> COMP 1 -> COMP 2 (durations in µs), written to ``tmp_path/w``."""
    b = WorkloadBuilder(ranks)
    for r in range(ranks):
        last = []
        for d in durations:
            last = [b.comp(r, duration_ns=d * US, deps=last)]
    b.write(tmp_path / "w")
    return tmp_path / "w"


def on_every_rank(prefix, ranks, change):
    for r in range(ranks):
        edit(prefix.parent / f"{prefix.name}.{r}.et", change)


def total(prefix, topology="switch:2", **options):
    return replay(prefix, load_topology(topology), **options).total_ns


# ---------------------------------------------------------------------- dependencies
def test_dependencies_on_absent_nodes_are_dropped_or_refused(tmp_path):
    w = chain(tmp_path)
    on_every_rank(w, 2, lambda nodes: nodes[2].ctrl_deps.append(99))
    workload = read_workload(w)
    assert workload.repairs.summary() == "repaired: dropped 2 ctrl_deps to absent nodes"
    assert total(w) == 60 * US
    with pytest.raises(AlgorithmError, match=r"w\.0\.et: rank 0: node 2: depends on node 99, which is not in the file"):
        read_workload(w, ReadPolicy.strict())


def test_self_dependencies_are_dropped_or_deadlock_with_the_node_named(tmp_path):
    w = chain(tmp_path)
    on_every_rank(w, 2, lambda nodes: nodes[1].ctrl_deps.append(1))
    assert read_workload(w).repairs.describe() == ["dropped 2 self-dependencies"]
    assert total(w) == 60 * US
    with pytest.raises(ReplayDeadlock, match=r"deadlock: 4 of 6 workload nodes never complete; rank 0 node 1 waits for itself"):
        replay(read_workload(w, ReadPolicy.strict()), load_topology("switch:2"))


def test_call_tree_ctrl_deps_closing_a_cycle_are_ignored_unless_asked_to_wait(tmp_path):
    w = chain(tmp_path)
    on_every_rank(w, 2, lambda nodes: nodes[0].ctrl_deps.append(2))  # "parent" 2 of node 0: 0 -> 1 -> 2 -> 0
    summary = read_workload(w).repairs.summary()
    assert summary == "repaired: ignored 2 ctrl_deps (call-tree links: with them rank 0 node 0 -> node 2 -> node 1 -> node 0 is a cycle)"
    assert total(w) == 60 * US
    with pytest.raises(ReplayDeadlock) as error:
        replay(read_workload(w, ReadPolicy(ctrl_deps="wait")), load_topology("switch:2"))
    assert "cycle on rank 0: node 0 -> node 2 -> node 1 -> node 0 (each waits for the next)" in str(error.value)
    assert error.value.cycle == [(0, 0), (0, 2), (0, 1)]


def test_ctrl_deps_that_order_are_waited_for(tmp_path):
    b = WorkloadBuilder(1)
    first = b.comp(0, duration_ns=10 * US)
    b.comp(0, duration_ns=20 * US, ctrl_deps=[first])
    b.write(tmp_path / "w")
    assert read_workload(tmp_path / "w").repairs.summary() is None
    assert total(tmp_path / "w", "switch:1") == 30 * US
    unordered = replay(read_workload(tmp_path / "w", ReadPolicy(ctrl_deps="ignore")), load_topology("switch:1"))
    assert unordered.total_ns == 20 * US


# ---------------------------------------------------------------------- node attributes
def _cpu_side_collective(nodes):
    node = Node(id=7, name="c10d::allreduce_(0)", type=COMM_COLL_NODE, duration_micros=15, data_deps=[2])
    node.attr.append(AttributeProto(name="is_cpu_op", bool_val=True))
    nodes.append(node)


def test_cpu_side_communication_nodes_are_timed_as_cpu_ops_or_refused(tmp_path):
    w = chain(tmp_path)
    on_every_rank(w, 2, _cpu_side_collective)
    workload = read_workload(w)
    assert workload.repairs.describe() == ["2 CPU-side COMM_COLL without comm_type timed as CPU ops"]
    assert int(workload.node_type[3]) == COMP_NODE and bool(workload.is_cpu_op[3])
    assert total(w) == 75 * US
    with pytest.raises(InputError, match=r"node 7: a communication node has is_cpu_op = true \(ASTRA-sim throws\)"):
        read_workload(w, ReadPolicy.strict())


def test_is_cpu_op_written_as_an_integer(tmp_path):
    w = chain(tmp_path)

    def to_int(nodes):
        a = attr(nodes[0], "is_cpu_op")
        a.ClearField("bool_val")
        a.int32_val = 1

    on_every_rank(w, 2, to_int)
    workload = read_workload(w)
    assert workload.is_cpu_op.tolist() == [True, False, False] * 2
    assert workload.repairs.describe() == ["read 2 integer is_cpu_op as booleans"]
    with pytest.raises(InputError, match="node 0: attribute is_cpu_op is int32_val; expected bool_val"):
        read_workload(w, ReadPolicy.strict())


def test_collectives_without_comm_size_are_named_or_skipped(tmp_path):
    b = WorkloadBuilder(2)
    for r in range(2):
        b.collective(r, "all-reduce", 2**20, deps=[b.comp(r, duration_ns=5 * US)])
    b.write(tmp_path / "w")
    on_every_rank(tmp_path / "w", 2, lambda nodes: nodes[1].attr.remove(attr(nodes[1], "comm_size")))
    with pytest.raises(InputError, match=r"rank 0: node 1: COMM_COLL node has no attribute comm_size \(--incomplete skip"):
        read_workload(tmp_path / "w")
    skipped = read_workload(tmp_path / "w", ReadPolicy(incomplete="skip"))
    assert skipped.repairs.describe() == ["2 COMM_COLL without comm_size replayed as no-ops"]
    assert replay(skipped, load_topology("switch:2")).collectives == []


def test_invalid_nodes_are_skipped_as_astra_sim_does(tmp_path):
    w = chain(tmp_path)
    on_every_rank(w, 2, lambda nodes: setattr(nodes[1], "type", INVALID_NODE))
    workload = read_workload(w)
    assert workload.repairs.describe() == ["skipped 2 INVALID_NODEs (as ASTRA-sim does)"]
    assert total(w) == 40 * US  # 10 + (skipped) + 30: the dependency still holds
    with pytest.raises(InputError, match="node 1: INVALID_NODE"):
        read_workload(w, ReadPolicy.strict())


@pytest.mark.parametrize("node_type", [MEM_LOAD_NODE, METADATA_NODE])
def test_memory_and_metadata_nodes_take_their_duration(tmp_path, node_type):
    w = chain(tmp_path)
    on_every_rank(w, 2, lambda nodes: setattr(nodes[1], "type", node_type))
    assert total(w) == 60 * US
    strict = replay(read_workload(w, ReadPolicy(other_times=False)), load_topology("switch:2"))
    assert strict.total_ns == 40 * US
    assert any("2 " + ("MEM_LOAD" if node_type == MEM_LOAD_NODE else "METADATA") + " nodes take 0 ns" in w for w in strict.warnings)


# ---------------------------------------------------------------------- warnings
def test_warnings_for_replays_that_may_mislead(tmp_path):
    b = WorkloadBuilder(1)
    b.collective(0, "all-reduce", 2**20, deps=[b.comp(0, duration_ns=0)])
    b.write(tmp_path / "w")
    result = replay(tmp_path / "w", load_topology("ring:4"))
    assert result.warnings == [
        "the workload has 1 rank but ring:4 has 4 NPUs: rank r runs on NPU r, the other 3 NPUs only carry traffic",
        "1 collective runs over a group of one rank and takes no time",
        "every COMP node has duration 0: compute takes no time (a trace converted without device times?)",
    ]


# ---------------------------------------------------------------------- command line
def test_replay_prints_one_repair_line_and_strict_refuses(tmp_path, cli):
    w = chain(tmp_path)
    on_every_rank(w, 2, lambda nodes: nodes[2].ctrl_deps.extend([99, 2]))
    result = cli("replay", w, "-t", "switch:2")
    assert result.exit_code == 0
    assert "chakra-coll: repaired: dropped 2 ctrl_deps to absent nodes; dropped 2 self-dependencies\n" in result.stderr
    strict = cli("replay", w, "-t", "switch:2", "--strict")
    assert strict.exit_code == 1 and "depends on node 99" in strict.stderr and strict.stderr.count("\n") == 1
    keep = cli("replay", w, "-t", "switch:2", "--self-deps", "keep", "--ctrl-deps", "wait", "--json")
    assert keep.exit_code == 1 and "waits for itself" in keep.stderr
    bad = cli("replay", w, "-t", "switch:2", "--ctrl-deps", "sometimes")
    assert bad.exit_code == 2 and "unknown ctrl-deps policy 'sometimes' (valid: auto, wait, ignore)" in bad.stderr


def test_inspect_reads_workloads(tmp_path, cli):
    b = WorkloadBuilder(2)
    for r in range(2):
        fwd = b.comp(r, duration_ns=40 * US)
        host = b.comp(r, duration_ns=5 * US, cpu=True)
        ar = b.collective(r, "all-reduce", 4 * 2**20, deps=[fwd, host], pg_name="1")
        b.comp(r, duration_ns=20 * US, deps=[ar])
    b.write(tmp_path / "w")
    result = cli("inspect", tmp_path / "w", "--json")
    assert result.exit_code == 0, result.stderr
    stats = json.loads(result.stdout)
    assert [r["critical_path_ns"] for r in stats["ranks"]] == [60 * US, 60 * US]
    assert [r["compute_ns"] for r in stats["ranks"]] == [65 * US, 65 * US]
    assert stats["ranks"][0]["types"] == {"COMP": 3, "COMM_COLL": 1} and stats["ranks"][0]["cpu_comp_nodes"] == 1
    assert stats["collectives"] == [{"collective": "all-reduce", "group": "1", "size_bytes": 4 * 2**20, "calls": 2, "ranks": 2}]
    assert stats["groups"] == ["1"]
    human = cli("inspect", tmp_path / "w")
    assert "workload, 2 rank(s), 8 nodes" in " ".join(human.stdout.split()) and "60 µs" in human.stdout
    assert max(len(line) for line in human.stdout.splitlines()) <= 80


def test_inspect_still_reads_algorithms(tmp_path, cli):
    from chakra_collectives.converters.chakra_et import write_algorithm
    from chakra_collectives.ir import Collective
    from chakra_collectives.synth.baselines import ring

    write_algorithm(ring(Collective.ALL_GATHER, 4, size_bytes=4096), tmp_path / "ag")
    result = cli("inspect", tmp_path / "ag", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["collective"] == "all-gather"
    forced = cli("inspect", tmp_path / "ag", "--as", "workload", "--json")
    assert forced.exit_code == 0 and json.loads(forced.stdout)["ranks"][0]["types"] == {"COMP": 1, "COMM_SEND": 3, "COMM_RECV": 3}


def test_critical_path_is_nan_free_and_marks_cycles(tmp_path):
    w = chain(tmp_path, ranks=1)
    edit(w.parent / "w.0.et", lambda nodes: nodes[0].data_deps.append(2))
    from chakra_collectives.workload.summary import summarize_workload

    stats = summarize_workload(read_workload(w))
    assert stats["ranks"][0]["blocked_by_cycles"] == 3 and not np.isnan(stats["ranks"][0]["critical_path_ns"])


def test_each_file_decides_its_own_ctrl_deps_and_alike_files_share_the_decision(tmp_path):
    w = chain(tmp_path, ranks=3)
    edit(w.parent / "w.0.et", lambda nodes: nodes[0].ctrl_deps.append(2))  # a call-tree cycle

    def same_structure_other_times(nodes):
        nodes[0].ctrl_deps.append(2)
        nodes[2].duration_micros = 99

    edit(w.parent / "w.1.et", same_structure_other_times)

    def ordering_only(nodes):
        del nodes[2].data_deps[:]
        nodes[2].ctrl_deps.append(0)  # an ordering: kept

    edit(w.parent / "w.2.et", ordering_only)
    workload = read_workload(w)
    assert workload.repairs.dependencies.ignored_ctrl == 2
    deps = [workload.dep_idx[workload.dep_ptr[i] : workload.dep_ptr[i + 1]].tolist() for i in range(len(workload))]
    assert deps == [[], [0], [1], [], [3], [4], [], [6], [6]]


def test_the_reader_translates_every_chakra_node_type():
    """Every Chakra ``NodeType`` has a :class:`NodeKind` of the same name (without ``_NODE``)."""
    from chakra.schema.protobuf.et_def_pb2 import BARRIER, NodeType

    from chakra_collectives.converters.chakra_et.workload_reader import NODE_KINDS
    from chakra_collectives.ir.workload import BARRIER_COMM_TYPE

    assert set(NODE_KINDS) == set(NodeType.values())
    assert all(NodeType.Name(code).removesuffix("_NODE") == kind.name for code, kind in NODE_KINDS.items())
    assert BARRIER_COMM_TYPE == BARRIER


def test_groups_and_dimensions_are_read_on_collectives_and_a_bad_dimension_list_is_refused(tmp_path):
    b = WorkloadBuilder(2)
    for r in range(2):
        first = b.comp(r, duration_ns=US)
        b.collective(r, "all-reduce", 2**20, pg_name="1", involved_dim=[True, False], deps=[first])
    b.write(tmp_path / "g")
    workload = read_workload(tmp_path / "g")
    assert workload.pg_name == [None, "1", None, "1"]
    assert workload.involved_dim == [None, (True, False), None, (True, False)]
    edit(tmp_path / "g.1.et", lambda nodes: attr(nodes[1], "involved_dim").CopyFrom(AttributeProto(name="involved_dim", int64_val=3)))
    with pytest.raises(InputError, match=r"g\.1\.et: rank 1: node 1: attribute involved_dim is int64_val; ASTRA-sim needs a bool_list"):
        read_workload(tmp_path / "g")
