"""TACOS beyond all-gather: all-to-all, gather, scatter and pattern files (forwarding matcher with
relays), TACOS for process groups, and the bounds of collectives that only move data."""

from __future__ import annotations

import json
from dataclasses import replace

import jsonschema
import networkx as nx
import numpy as np
import pytest

from chakra_collectives.bounds import lower_bounds, moving_lower_bounds
from chakra_collectives.flow.multicommodity import flow_bound
from chakra_collectives.ir.demand import chunk_demand
from chakra_collectives.converters.chakra_et import read_algorithm, write_algorithm
from chakra_collectives.errors import InputError
from chakra_collectives.ir import Collective, OpKind
from chakra_collectives.ir.pattern import ChunkPattern, load_pattern
from chakra_collectives.network import predict_time, simulate_collective
from chakra_collectives.synth import synthesize
from chakra_collectives.synth.tacos import tacos, tacos_for_group
from chakra_collectives.topology import load_topology, mesh2d, ring, switch, torus2d
from chakra_collectives.verify import verify_algorithm
from schema_helpers import SCHEMAS, schema

MIB = 2**20


def _hops(topology, a: int, b: int) -> int:
    return nx.shortest_path_length(topology.graph, a, b)


@pytest.mark.parametrize("spec", ["ring:5", "mesh2d:3x3", "torus2d:4x4", "hypercube:2x2x2"])
def test_all_to_all_is_verified_and_sends_each_piece_only_closer(spec):
    topology = load_topology(spec)
    n = topology.num_npus
    found = tacos(topology, Collective.ALL_TO_ALL, 16 * MIB, chunks_per_npu=2)
    algo = found.algorithm
    assert verify_algorithm(algo).ok
    # unicast: every piece crosses exactly the hops of a shortest path, never a link it does not need
    sends = algo.ops.kind == OpKind.SEND
    moved = int(algo.ops.count[sends].sum())
    assert moved == 2 * sum(_hops(topology, a, b) for a in range(n) for b in range(n) if a != b)
    # the network model replays the matcher's schedule exactly (no switches)
    assert predict_time(algo, topology) == pytest.approx(found.schedule_ns)


def test_all_to_all_through_a_switch_staggers_receivers():
    found = tacos(switch(8), Collective.ALL_TO_ALL, 64 * MIB, chunks_per_npu=1)
    assert verify_algorithm(found.algorithm).ok
    # 7 messages of 8 MiB leave each NPU over its one uplink; a staggered order lets the last one
    # pay only one more hop: far from the 2x of every sender aiming at the same receiver
    hop = 500 + 8 * MIB / (50 * 2**30 / 1e9)
    assert predict_time(found.algorithm, switch(8)) == pytest.approx(8 * hop, rel=1e-9)


@pytest.mark.parametrize("collective, root", [(Collective.GATHER, 5), (Collective.SCATTER, 7), (Collective.GATHER, 0)])
def test_gather_and_scatter(collective, root):
    topology = mesh2d(3, 3)
    algo = tacos(topology, collective, 9 * MIB, chunks_per_npu=2, root=root).algorithm
    assert algo.root == root and verify_algorithm(algo).ok
    assert list(algo.output_chunks) == ([18 if r == root else 0 for r in range(9)] if collective is Collective.GATHER else [2] * 9)


def test_verifier_proves_a_patterns_postcondition_and_finds_a_wrong_one():
    pattern = ChunkPattern(9, holders=((0,), (2, 6), (4,)), targets=((8, 5, 0), (0, 8), (1, 3, 5, 7)))
    algo = tacos(mesh2d(3, 3), Collective.PATTERN, 3 * MIB, pattern=pattern).algorithm
    assert verify_algorithm(algo).ok
    # held to a pattern that also wants chunk 2 on rank 0, the same operations are wrong
    stricter = ChunkPattern(9, holders=pattern.holders, targets=((8, 5, 0), (0, 8), (0, 1, 3, 5, 7)))
    report = verify_algorithm(replace(algo, pattern=stricter))
    assert not report.ok and "rank 0, buffer output, slot 2" in report.checks[-1].summary


def test_pattern_chunks_cut_into_k_and_round_trip_through_ets(tmp_path):
    pattern = ChunkPattern(4, holders=((0,), (3,)), targets=((1, 2), (0,)))
    algo = tacos(ring(4), Collective.PATTERN, 4 * MIB, pattern=pattern, chunks_per_npu=2).algorithm
    assert algo.chunk_count == 4 and algo.pattern.targets == ((1, 2), (1, 2), (0,), (0,))
    write_algorithm(algo, tmp_path / "p")
    back = read_algorithm(tmp_path / "p")
    assert back.pattern == algo.pattern and verify_algorithm(back).ok


def test_pattern_file_bad_inputs(cli, tmp_path):
    cases = {
        "nobody.yaml": ("chunks:\n  - {from: [], to: [1]}\n", "chunk 0: no rank holds it before"),
        "outside.yaml": ("chunks:\n  - {from: 0, to: [1]}\n  - {from: 2, to: [16]}\n", "chunk 1: rank 16 is not one of the 16 ranks"),
        "twice.json": ('{"chunks": [{"from": [1, 1], "to": 2}]}', "chunk 0: a rank is named twice"),
        "ranks.json": ('{"ranks": 8, "chunks": [{"from": 1, "to": 2}]}', "the pattern is for 8 ranks, the fabric (or group) has 16"),
        "broken.json": ('{"chunks": [', "not valid JSON"),
        "shape.yaml": ("- 1\n- 2\n", "a pattern file is a mapping"),
    }
    for name, (text, message) in cases.items():
        (tmp_path / name).write_text(text)
        result = cli("synth", "-t", "mesh2d:4x4", "--pattern", tmp_path / name, "-o", tmp_path / "out" / "x")
        assert result.exit_code == 2, name
        assert message in result.stderr and name in result.stderr and len(result.stderr.strip().splitlines()) == 1
        assert not (tmp_path / "out").exists()
    assert cli("synth", "-t", "ring:4", "-c", "pattern").exit_code == 2


def test_pattern_file_cli_json_and_schema(cli, tmp_path):
    document = {"name": "moves", "chunks": [{"from": 0, "to": [5, 10, 15]}, {"from": [3, 12], "to": [0, 15, 6]}, {"from": 7, "to": 8}]}
    jsonschema.validate(document, json.loads((SCHEMAS / "pattern.schema.json").read_text()))
    (tmp_path / "p.json").write_text(json.dumps(document))
    assert load_pattern(tmp_path / "p.json", num_ranks=16).holders == ((0,), (3, 12), (7,))
    result = cli("synth", "-t", "mesh2d:4x4", "--pattern", tmp_path / "p.json", "-k", "2", "-o", tmp_path / "out" / "p", "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    jsonschema.validate(summary, schema("synth"))
    assert summary["collective"] == "pattern" and summary["algorithm"] == "tacos"
    assert cli("verify", tmp_path / "out" / "p").exit_code == 0


def test_all_to_all_cli_reports_the_exact_flow_bound(cli):
    result = cli("synth", "-t", "torus2d:4x4", "-c", "all-to-all", "-a", "tacos", "--json")
    summary = json.loads(result.stdout)
    jsonschema.validate(summary, schema("synth"))
    # 16 x 8 pairs cross the bisection (8 links each way) with 4 MiB each: 0.625 ms
    assert summary["bounds"]["flow_ns"] == pytest.approx(625_000, rel=1e-6)
    assert summary["bounds"]["cut_ns"] == pytest.approx(625_000)
    assert summary["efficiency"] >= 0.90
    assert summary["predicted_ns"] < 2_123_000 / 2  # the direct baseline's 2.123 ms


# ---------------------------------------------------------------------------- bounds
def test_all_to_all_bounds_by_hand():
    # ring of 4, both ways, 1 GB/s (2**30 bytes/s) and 10 ns per link; 4 KiB per pair
    b = lower_bounds(ring(4, bandwidth_gbps=1.0, latency_ns=10.0), Collective.ALL_TO_ALL, 4 * 4096)
    rate = 2**30 / 1e9
    # 4 ranks x (1 + 2 + 1) hops = 16 pair-hops over 8 links: 2 per link
    assert b.flow_ns == pytest.approx(2 * 4096 / rate, rel=1e-6)
    assert b.cut_ns == pytest.approx(2 * 4096 / rate)  # S = {0, 1}: 4 chunks leave over 2 links
    assert b.latency_ns == 20.0 and b.ingress_ns == pytest.approx(3 * 4096 / (2 * rate))  # 3 pieces in over 2 links


def test_flow_bound_is_at_least_every_cut_and_below_what_tacos_achieves():
    for topology in (mesh2d(3, 4), torus2d(3, 3), switch(6)):
        b = lower_bounds(topology, Collective.ALL_TO_ALL, 12 * MIB)
        assert b.flow_ns is not None and b.flow_ns >= b.cut_ns * (1 - 1e-6) and b.flow_ns >= b.ingress_ns * (1 - 1e-6)
        predicted = predict_time(tacos(topology, Collective.ALL_TO_ALL, 12 * MIB, chunks_per_npu=2).algorithm, topology)
        assert b.best_ns <= predicted


def test_gather_bound_is_the_roots_ingress_and_multicast_has_no_flow_bound():
    b = lower_bounds(mesh2d(3, 3), Collective.GATHER, 9 * MIB, root=4)
    # the centre receives 8 MiB over 4 links of 50 GB/s
    assert b.ingress_ns == pytest.approx(8 * MIB / (4 * 50 * 2**30 / 1e9)) and b.best_ns == pytest.approx(b.ingress_ns, rel=1e-6)
    multicast = ChunkPattern(4, holders=((0,),), targets=((1, 2, 3),))
    assert lower_bounds(ring(4), Collective.PATTERN, MIB, pattern=multicast).flow_ns is None


def test_group_demand_bounds_count_only_the_groups_pairs():
    fabric = mesh2d(4, 4)
    row = chunk_demand(Collective.ALL_TO_ALL, num_ranks=4, chunk_bytes=MIB, placement=(0, 1, 2, 3), num_npus=16)
    b = moving_lower_bounds(fabric, row, Collective.ALL_TO_ALL, 4 * MIB)
    # the row's middle cut: 4 pieces each way, and the rest of the mesh offers 3 more paths round
    assert b.flow_ns == pytest.approx(flow_bound(fabric, row))
    assert b.flow_ns < b.cut_ns * 4


# ---------------------------------------------------------------------------- groups
GROUPS = {"row": (4, 5, 6, 7), "column": (1, 5, 9, 13), "strided": (0, 2, 8, 10), "random": (14, 3, 6, 9, 12)}


@pytest.mark.parametrize("collective", [Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_REDUCE, Collective.ALL_TO_ALL])
@pytest.mark.parametrize("name", sorted(GROUPS))
def test_tacos_for_a_group(collective, name):
    fabric, group = mesh2d(4, 4), GROUPS[name]
    found = tacos_for_group(fabric, group, collective, 8 * MIB, chunks_per_npu=2)
    algo = found.algorithm
    assert algo.num_ranks == len(group) and algo.placement == group
    assert verify_algorithm(algo).ok
    # routes run from a member to a member through non-members only
    for path in algo.routes:
        assert path[0] in group and path[-1] in group and not set(path[1:-1]) & set(group)
        assert all(fabric.graph.has_edge(a, b) for a, b in zip(path, path[1:]))
    predicted = simulate_collective(algo, fabric, placement=list(group)).time_ns
    if collective in (Collective.ALL_GATHER, Collective.ALL_TO_ALL):  # the matcher plans what the model replays
        assert predicted == pytest.approx(found.schedule_ns)
    elif collective is Collective.REDUCE_SCATTER:  # mirrored through relays: judged by the model
        assert predicted == pytest.approx(found.phases[0].time_ns)
    if collective is Collective.ALL_TO_ALL:
        demand = chunk_demand(collective, num_ranks=len(group), chunk_bytes=8 * MIB / len(group), placement=group, num_npus=16)
        assert moving_lower_bounds(fabric, demand, collective, 8 * MIB).best_ns <= predicted


def test_a_row_takes_detours_through_the_next_row():
    """A corner of a mesh row has one link from a member and one from a non-member; the group's
    bound counts both, so one route per pair (each pair's own, along the row) is at most half as
    fast as the bound. Detours through the next row bring the other half."""
    fabric, row = mesh2d(4, 4), (0, 1, 2, 3)
    result = synthesize(fabric, Collective.ALL_GATHER, 16 * MIB, algorithm="tacos", group=row, chunks_per_npu=8)
    algo = result.algorithm
    assert verify_algorithm(algo).ok
    sends = np.flatnonzero(algo.ops.kind == OpKind.SEND)
    used = {algo.routes[r] for r in algo.ops.route[sends].tolist() if r >= 0}
    assert any(set(path[1:-1]) - set(row) for path in used)  # some message crosses the next row
    into_corner = {path for path in used if path[-1] == 0}
    assert into_corner and all(path[-2] == 4 for path in into_corner)  # 4 -> 0: the corner's other link
    assert result.efficiency > 0.6


@pytest.mark.parametrize("group", [(0, 4), (1, 3, 5, 7), (0, 2, 3, 5)])
@pytest.mark.parametrize("collective", [Collective.ALL_GATHER, Collective.ALL_REDUCE])
def test_groups_of_a_dgx_are_served_over_the_other_gpus(group, collective):
    """Across servers a group's members reach each other through other GPUs' NVLinks and NICs;
    every (member, chunk) pair is served, the algorithm is proved, and it beats the ring."""
    fabric = load_topology("dgx:2x4")
    found = tacos_for_group(fabric, group, collective, 8 * MIB, chunks_per_npu=4)
    assert verify_algorithm(found.algorithm).ok
    predicted = simulate_collective(found.algorithm, fabric, placement=list(group)).time_ns
    ring_time = synthesize(fabric, collective, 8 * MIB, algorithm="ring", group=group, chunks_per_npu=1).predicted_ns
    assert predicted < ring_time


def test_group_errors():
    with pytest.raises(InputError, match="rank 16 is not an NPU of the fabric"):
        tacos_for_group(mesh2d(4, 4), (0, 16), Collective.ALL_GATHER, MIB)
    with pytest.raises(InputError, match="rank 3 appears twice"):
        tacos_for_group(mesh2d(4, 4), (3, 3), Collective.ALL_GATHER, MIB)


def test_any_size_all_to_all_sends_single_chunks():
    """Rescaled to other sizes (replay), the schedule must not depend on the size: no merged messages."""
    from chakra_collectives.synth.registry import SynthesisOptions, get

    made = get("tacos").make(torus2d(4, 4), Collective.ALL_TO_ALL, 16, SynthesisOptions(size_bytes=MIB, any_size=True))
    sends = made.algorithm.ops.kind == OpKind.SEND
    assert set(made.algorithm.ops.count[sends].tolist()) == {1} and verify_algorithm(made.algorithm).ok
    merged = tacos(torus2d(4, 4), Collective.ALL_TO_ALL, MIB).algorithm  # 4 KiB chunks: latency dominates, messages merge
    assert merged.ops.count[merged.ops.kind == OpKind.SEND].max() > 1
