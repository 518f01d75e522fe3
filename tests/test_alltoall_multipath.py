"""A process group's all-to-all over several routes per pair (:mod:`chakra_collectives.synth.multipath`):
the multicommodity-flow optimum's paths, proved, replayed as planned, faster than one route per pair."""

from __future__ import annotations

import numpy as np
import pytest

from chakra_collectives.flow.multicommodity import commodity_flows
from chakra_collectives.ir import Collective, OpKind
from chakra_collectives.ir.demand import demand_for
from chakra_collectives.network.collective import simulate_collective
from chakra_collectives.synth import synthesize
from chakra_collectives.synth.channels import build_channels
from chakra_collectives.synth.multipath import spread_paths
from chakra_collectives.synth.tacos import tacos, tacos_for_group
from chakra_collectives.topology import load_topology, mesh2d
from chakra_collectives.topology.groups import group_view
from chakra_collectives.verify import verify_algorithm

MIB = 2**20
ROW = tuple(range(8))


def test_every_piece_gets_a_chain_of_channels_from_its_origin_to_its_destination():
    view = group_view(mesh2d(8, 8), ROW).topology
    channels = build_channels(view, chunk_bytes=MIB)
    demand = demand_for(Collective.ALL_TO_ALL, num_npus=8, chunks_per_npu=4)
    plan = spread_paths(channels, demand)
    ch = plan.channels
    src = np.concatenate([ch.direct_src, [c.src for c in ch.routed]])
    dst = np.concatenate([ch.direct_dst, [c.dst for c in ch.routed]])
    assert sorted(plan.paths) == list(range(demand.num_pieces))
    for piece, hops in plan.paths.items():
        assert src[hops[0]] == demand.origin[piece] and dst[hops[-1]] == demand.destinations(piece)[0]
        assert all(dst[a] == src[b] for a, b in zip(hops, hops[1:]))
    # a routed channel crosses non-members only, link after link
    for c in ch.routed:
        nodes = [c.src, *(view.links[l].dst for l in c.links)]
        assert all(view.links[l].src == a for l, a in zip(c.links, nodes)) and all(v >= 8 for v in nodes[1:-1])
    # the flow takes rows a detour through the next row never reaches
    depth = {int(group_fabric_row(plan, c)) for hops in plan.paths.values() for c in hops if c >= ch.num_direct}
    assert max(depth) >= 2


def group_fabric_row(plan, c):
    """The deepest mesh row (8 wide) routed channel ``c`` reaches."""
    view = group_view(mesh2d(8, 8), ROW)
    links = plan.channels.routed[c - plan.channels.num_direct].links
    return max(view.fabric_node[plan.channels.model.link_dst[l]] // 8 for l in links)


def test_the_flows_deliver_what_each_commodity_needs():
    fabric = mesh2d(3, 3)
    need = np.zeros((1, fabric.num_nodes))
    need[0, [2, 6, 8]] = 2.0
    t, flows = commodity_flows(fabric, np.array([0]), need, 2**20)
    arrays = fabric.link_arrays
    net = np.bincount(arrays["dst"], weights=flows[0], minlength=9) - np.bincount(arrays["src"], weights=flows[0], minlength=9)
    assert net[[2, 6, 8]] == pytest.approx([2.0, 2.0, 2.0], abs=1e-6) and net[0] == pytest.approx(-6.0, abs=1e-6)
    assert t > 0


@pytest.mark.parametrize("spec, group, k", [("mesh2d:8x8", ROW, 8), ("dgx:4x8", (0, 8, 16, 24), 8), ("torus2d:8x8", tuple(range(0, 64, 8)), 8)])
def test_a_groups_all_to_all_spreads_over_the_fabric(spec, group, k):
    """One route per pair keeps a mesh row's pieces on the row, a DGX column's on each member's own
    NIC; the flow's paths go through other rows and other GPUs' NICs, at least 1.4 times as fast,
    and the model replays the plan (every SEND names its route)."""
    fabric = load_topology(spec)
    found = tacos_for_group(fabric, group, Collective.ALL_TO_ALL, 64 * MIB, chunks_per_npu=k)
    algo = found.algorithm
    assert verify_algorithm(algo).ok
    predicted = simulate_collective(algo, fabric, placement=list(group)).time_ns
    assert predicted <= found.schedule_ns * (1 + 1e-9)
    sends = np.flatnonzero(algo.ops.kind == OpKind.SEND)
    used = {algo.routes[r] for r in algo.ops.route[sends].tolist() if r >= 0}
    assert used  # some pieces cross non-members
    for path in used:
        assert path[0] in group and path[-1] in group and not set(path[1:-1]) & set(group)
        assert all(fabric.graph.has_edge(a, b) for a, b in zip(path, path[1:]))
    one_route = tacos(group_view(fabric, group).topology, Collective.ALL_TO_ALL, 64 * MIB, chunks_per_npu=k)
    assert predicted * 1.4 < one_route.schedule_ns


def test_synth_group_all_to_all_efficiency_against_the_flow_bound():
    found = synthesize(mesh2d(8, 8), Collective.ALL_TO_ALL, 64 * MIB, algorithm="tacos", group=ROW, bounds="exact")
    assert found.bounds.flow_ns is not None and found.efficiency > 0.6  # one route per pair: 0.25


def test_the_k_search_goes_on_until_pairs_spread_over_their_paths():
    """A mesh2d:4x4 row's pieces spread over the flow's paths only once a pair has several: at
    K = 1 the one-route plan is all there is (1.252 ms); the row's own links alone allow 0.374 of
    the bound, so the search must go on to the K = 16-32 that spread them (a flat start used to
    stop it: :data:`~chakra_collectives.synth.synthesis.GROUP_MULTIPATH_SLACK`)."""
    found = synthesize(mesh2d(4, 4), Collective.ALL_TO_ALL, 64 * MIB, algorithm="tacos", group=(0, 1, 2, 3), bounds="exact")
    assert found.chunks_tried[1] * 0.45 > found.predicted_ns
    assert found.chunks_per_npu >= 8 and found.efficiency > 0.8


def test_joint_flows_deliver_every_groups_pieces_and_share_the_links():
    """The joint LP over two columns of torus2d:4x4: each group's flows deliver its own pieces (net
    inflow at every other member = its pieces for it), and no link carries more than its time allows."""
    from chakra_collectives.synth.multipath import joint_flows

    fabric = load_topology("torus2d:4x4")
    groups = {"a": (0, 4, 8, 12), "b": (1, 5, 9, 13)}
    views = {g: group_view(fabric, m) for g, m in groups.items()}
    demands = {g: demand_for(Collective.ALL_TO_ALL, num_npus=4, chunks_per_npu=2) for g in groups}
    time_ns, flows = joint_flows(fabric, views, demands, {g: float(MIB) for g in groups})
    arrays = fabric.link_arrays
    load = np.zeros(len(arrays["src"]))
    for g, members in groups.items():
        for s, flow in flows[g].items():
            net = np.bincount(arrays["dst"], weights=flow, minlength=16) - np.bincount(arrays["src"], weights=flow, minlength=16)
            others = [m for i, m in enumerate(members) if i != s]
            assert net[others] == pytest.approx([2.0] * 3, abs=1e-6)  # K = 2 pieces to each other member
            assert net[members[s]] == pytest.approx(-6.0, abs=1e-6)
            load += flow
    seconds_per_chunk = MIB / (arrays["bandwidth_gbps"] * 2**30 / 1e9)
    assert (load * seconds_per_chunk).max() <= time_ns * (1 + 1e-6)


def test_concurrent_all_to_all_plans_the_groups_on_one_joint_flow():
    """Four torus2d:4x4 columns at once: the separate syntheses each spread over the whole fabric
    and collide; the joint flow plan keeps them apart, never slower than separate together, at
    most a little above the joint LP's bound (the columns' own links carry it all)."""
    from chakra_collectives.synth.concurrent import synthesize_concurrent

    columns = {str(c): (c, c + 4, c + 8, c + 12) for c in range(4)}
    result = synthesize_concurrent(load_topology("torus2d:4x4"), columns, Collective.ALL_TO_ALL, 64 * MIB, algorithm="tacos")
    flow = result.plans["flow"]
    assert flow.together_ns <= result.plans["separate"].together_ns
    assert result.together_bound_ns <= result.joint_ns <= flow.together_ns
    assert flow.together_ns <= result.together_bound_ns * 1.05
    for name, algo in flow.algorithms.items():
        assert algo.placement == columns[name] and verify_algorithm(algo).ok


def test_synth_groups_all_to_all_json_names_the_flow_plan_and_its_bound(cli, tmp_path):
    import json

    import jsonschema
    from schema_helpers import schema

    from chakra_collectives.converters.chakra_et import read_algorithm

    (tmp_path / "ep.json").write_text(json.dumps({"a": [0, 4, 8, 12], "b": [1, 5, 9, 13]}))
    result = cli("synth", "-t", "torus2d:4x4", "-c", "all-to-all", "-s", "4MiB", "-a", "tacos", "--groups", tmp_path / "ep.json",
                 "-o", tmp_path / "out", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    jsonschema.validate(document, schema("synth-groups"))
    assert "flow" in document["plans"] and document["together_bound_ns"] <= document["joint_ns"]
    assert document["joint_ns"] <= document["plans"]["separate"]["together_ns"]
    assert read_algorithm(tmp_path / "out_b").placement == (1, 5, 9, 13)
