"""Several routes per pair for a process group's unicast pieces, as the multicommodity-flow LP spreads them.

A group's all-to-all over one route per pair (the network model's) leaves most of the fabric idle:
a mesh row's pairs all cross the row's own links, a DGX column's the one NIC of each member. The
exact bandwidth bound (:func:`~chakra_collectives.flow.multicommodity.commodity_flows`, of its
optimal flows one crossing the fewest links) spreads the pieces over every link. Here its flow is taken apart into paths per (origin, destination)
pair, each piece put on one of its pair's paths (at most as many as the path's share of the flow, the
one whose busiest link is least busy so far), and every path cut
at the members it crosses into channels: a member-to-member link is a direct channel, a stretch
through non-members a routed channel of its own. The forwarding matcher then follows these paths
(:func:`~chakra_collectives.synth.forwarding.match_demand`'s ``paths``), each SEND naming its route.

>>> from chakra_collectives.ir import Collective
>>> from chakra_collectives.ir.demand import demand_for
>>> from chakra_collectives.synth.channels import build_channels
>>> from chakra_collectives.topology import mesh2d
>>> from chakra_collectives.topology.groups import group_view
>>> view = group_view(mesh2d(2, 2), (0, 1)).topology       # a row: the other row is a second way
>>> plan = spread_paths(build_channels(view, chunk_bytes=2**20), demand_for(Collective.ALL_TO_ALL, num_npus=2, chunks_per_npu=2))
>>> sorted(len(plan.channels.routed[c - plan.channels.num_direct].links) if c >= plan.channels.num_direct else 1 for c in plan.paths.values() for c in c)
[1, 1, 3, 3]
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace
from typing import Mapping

import numpy as np

from chakra_collectives.flow.multicommodity import FLOW_TOLERANCE, commodity_flows
from chakra_collectives.flow.symmetric import symmetric_commodity_flows
from chakra_collectives.ir.demand import Demand
from chakra_collectives.synth.channels import Channels, RoutedChannel
from chakra_collectives.topology.core import Topology
from chakra_collectives.topology.groups import GroupView

FLOW_EPSILON = 1e-6
"""Chunks of flow below which a link counts as unused (the LP's tolerances)."""


@dataclass(frozen=True)
class SpreadPaths:
    """The channels the paths run over (the given ones, then a routed channel per stretch through
    non-members) and each unicast piece's channels in order."""

    channels: Channels
    paths: dict[int, list[int]]


def spread_paths(
    channels: Channels, demand: Demand, flows: Mapping[int, np.ndarray] | None = None, *, direct: bool = True, timed: bool = False
) -> SpreadPaths | None:
    """Paths for ``demand``'s unicast pieces from the multicommodity-flow optimum on ``channels``'
    topology (see the module docstring); ``None`` when the LP is too large or no piece is unicast.
    ``flows``: the chunks each source NPU sends over each link, solved elsewhere (:func:`demand_flows`,
    or :func:`joint_flows`: every concurrent group's demands at once) instead of this demand's own
    LP (``timed``: see :func:`demand_flows`). ``direct=False``: a member-to-member link is a routed
    channel of one link too (no direct channel is used: what
    :func:`~chakra_collectives.synth.flowpipe.pipeline_demand` schedules)."""
    model = channels.model
    found = _unicast_pieces(demand)
    if found is None:
        return None
    unicast, target, sources, source_index = found
    if flows is None:
        flows = demand_flows(channels, demand, timed=timed)
        if flows is None:
            return None
    n = channels.num_npus
    direct_of = {(int(a), int(b)): i for i, (a, b) in enumerate(zip(channels.direct_src.tolist(), channels.direct_dst.tolist()))} if direct else {}
    routed_of: dict[tuple[int, ...], int] = {}
    extra: list[RoutedChannel] = []
    paths: dict[int, list[int]] = {}
    pairs: list[tuple[np.ndarray, list[tuple[list[int], float]], int]] = []  # (pieces, routes, origin)
    for i, s in enumerate(sources.tolist()):
        flow = flows[s].copy()
        mine = np.flatnonzero(source_index == i)
        for w in np.unique(target[mine]).tolist():
            pieces = unicast[mine[target[mine] == w]]
            routes = _take_paths(flow, model.link_src, model.link_dst, s, w, float(len(pieces)))
            if routes:
                pairs.append((pieces, routes, s))
    # the pairs with the fewest ways first; each piece takes, of its pair's routes still under
    # their share of the flow, the one whose busiest link would be least busy
    serial = channels.chunk_bytes / model.link_rate
    load = np.zeros(len(serial))
    for pieces, routes, s in sorted(pairs, key=lambda pair: len(pair[1])):
        hops = [_channels_of(links, model.link_dst, n, direct_of, routed_of, extra, len(channels.routed), channels.num_direct, s) for links, _ in routes]
        quota = [np.ceil(amount - FLOW_EPSILON) for _, amount in routes]
        for piece in pieces.tolist():
            open_routes = [j for j in range(len(routes)) if quota[j] > 0] or list(range(len(routes)))
            j = min(open_routes, key=lambda j: (float((load[routes[j][0]] + serial[routes[j][0]]).max()), j))
            load[routes[j][0]] += serial[routes[j][0]]
            quota[j] -= 1
            paths[piece] = hops[j]
    return SpreadPaths(replace(channels, routed=[*channels.routed, *extra]), paths)


def demand_flows(channels: Channels, demand: Demand, *, timed: bool = False) -> dict[int, np.ndarray] | None:
    """The multicommodity-flow optimum of ``demand``'s unicast pieces on ``channels``' topology, of
    its optimal flows one crossing the fewest links: per source NPU, the chunks it sends over each
    link; ``None`` when the LP is too large or no piece is unicast. ``timed``: the LP plans with
    each chunk a message (latency and bytes) and each link's fill and drain
    (:func:`fill_and_drain_ns`) kept free, so that links the first pieces reach late carry less.

    >>> from chakra_collectives.ir import Collective
    >>> from chakra_collectives.ir.demand import demand_for
    >>> from chakra_collectives.synth.channels import build_channels
    >>> from chakra_collectives.topology import ring
    >>> flows = demand_flows(build_channels(ring(4), chunk_bytes=2**20), demand_for(Collective.SCATTER, num_npus=4))
    >>> sorted(flows), round(float(flows[0].sum()), 6)   # from the root: 1 + 2 + 1 hops
    ([0], 4.0)
    """
    timing = {}
    if timed:
        model = channels.model
        hold = model.hop_ns(np.arange(model.num_links), channels.chunk_bytes)
        timing = {"hold_ns": hold, "unusable_ns": fill_and_drain_ns(model.link_src, model.link_dst, hold, channels.num_npus, model.topology.num_nodes)}
    solved = _demand_lp(channels, demand, fewest_hops=True, **timing)
    return None if solved is None else solved[1]


def piece_message_floor_ns(channels: Channels, demand: Demand) -> float | None:
    """A floor (ns) on every schedule of ``demand``'s unicast pieces in which each message carries
    one piece of ``channels.chunk_bytes`` (what :mod:`~chakra_collectives.synth.flowpipe` sends),
    whatever its paths and order; ``None`` when the LP is too large or no piece is unicast.

    Such a message holds each link of its route ``latency + chunk / bandwidth`` and arrives
    after it, store-and-forward, so in a schedule of makespan ``T`` link ``l`` carries pieces only
    between the soonest one can reach it from a member and the latest one can leave it and still
    reach another member (``u_l`` of :func:`fill_and_drain_ns` in all): at most
    ``(T - u_l) / hold_l`` of them, and none when ``u_l >= T``. For each distinct ``u`` the flow
    LP over the links with ``u_l <= u`` (each with that capacity) gives the least ``T`` of the
    schedules that use no other link; the floor is the least of these. Against the exact flow
    bound it says how far one-piece messages can get at this chunk size: latency per message and
    the fill and drain of links through non-members, not bandwidth.

    >>> from chakra_collectives.ir import Collective
    >>> from chakra_collectives.ir.demand import demand_for
    >>> from chakra_collectives.synth.channels import build_channels
    >>> from chakra_collectives.topology import ring
    >>> channels = build_channels(ring(2), chunk_bytes=2**20)     # 2 NPUs, a link each way
    >>> hop = float(channels.model.hop_ns([0], 2**20)[0])
    >>> floor = piece_message_floor_ns(channels, demand_for(Collective.ALL_TO_ALL, num_npus=2, chunks_per_npu=3))
    >>> round(floor / hop, 6)                                        # 3 pieces each way, one link each
    3.0
    """
    model = channels.model
    hold = model.hop_ns(np.arange(model.num_links), channels.chunk_bytes)
    unusable = fill_and_drain_ns(model.link_src, model.link_dst, hold, channels.num_npus, model.topology.num_nodes)
    best = None
    for limit in np.unique(unusable[np.isfinite(unusable)]).tolist():
        if best is not None and limit >= best:
            break  # every link so far usable: T >= limit
        usable = unusable <= limit
        solved = _demand_lp(channels, demand, fewest_hops=False, hold_ns=np.where(usable, hold, np.inf), unusable_ns=np.where(usable, unusable, 0.0))
        if solved is not None and (best is None or solved[0] < best):
            best = solved[0]
    return None if best is None else best * (1 - FLOW_TOLERANCE)


def _demand_lp(
    channels: Channels, demand: Demand, *, fewest_hops: bool, hold_ns: np.ndarray | None = None, unusable_ns: np.ndarray | None = None
) -> tuple[float, dict[int, np.ndarray]] | None:
    """The flow LP of ``demand``'s unicast pieces (``hold_ns``, ``unusable_ns``: see
    :func:`~chakra_collectives.flow.multicommodity.commodity_flows`): its least time (ns) and per
    source NPU the chunks over each link; ``None`` when too large, infeasible or nothing is unicast."""
    model = channels.model
    found = _unicast_pieces(demand)
    if found is None:
        return None
    _, target, sources, source_index = found
    need = np.zeros((len(sources), model.topology.num_nodes))
    np.add.at(need, (source_index, target), 1.0)
    solved = commodity_flows(model.topology, sources, need, channels.chunk_bytes, fewest_hops=fewest_hops, hold_ns=hold_ns, unusable_ns=unusable_ns)
    return None if solved is None else (solved[0], dict(zip(sources.tolist(), solved[1])))


def joint_flows(
    topology: Topology, views: Mapping[str, GroupView], demands: Mapping[str, Demand], chunk_bytes: Mapping[str, float]
) -> tuple[float, dict[str, dict[int, np.ndarray]]] | None:
    """One multicommodity-flow LP for the unicast pieces of every concurrent group on ``topology``
    (group ``g``'s ``demands[g]`` over its view ``views[g]``, pieces of ``chunk_bytes[g]``): its
    optimum (ns: the least time in which the links carry every group's pieces at once) and per
    group, per source (its view's node id), the chunks of that group it sends over each link
    (one commodity per class of sources when the fabric's symmetries carry the groups' demands
    onto one another: :func:`~chakra_collectives.flow.symmetric.symmetric_commodity_flows`).
    A group's view keeps the fabric's link ids, so the flows serve :func:`spread_paths` as they
    are. ``None`` when the LP is too large, or no group has a unicast piece.

    >>> from chakra_collectives.ir import Collective
    >>> from chakra_collectives.ir.demand import demand_for
    >>> from chakra_collectives.topology import ring
    >>> from chakra_collectives.topology.groups import group_view
    >>> views = {"a": group_view(ring(4), (0, 2)), "b": group_view(ring(4), (1, 3))}
    >>> demands = {g: demand_for(Collective.ALL_TO_ALL, num_npus=2, chunks_per_npu=1) for g in views}
    >>> time_ns, flows = joint_flows(ring(4), views, demands, {"a": 1.0, "b": 1.0})
    >>> sorted(flows), sorted(flows["a"]), round(float(sum(f.sum() for f in flows["a"].values())), 6)   # 2 pieces, 2 hops each
    (['a', 'b'], [0, 1], 4.0)
    """
    reference = max(chunk_bytes.values())
    sources: list[int] = []
    rows: list[np.ndarray] = []
    owner: list[tuple[str, int]] = []
    for g, demand in demands.items():
        counts = np.diff(demand.dest_ptr)
        unicast = np.flatnonzero(counts == 1)
        fabric = views[g].fabric_node
        origin = demand.origin[unicast].astype(np.int64)
        target = demand.dest[demand.dest_ptr[unicast]].astype(np.int64)
        for s in np.unique(origin).tolist():
            need = np.zeros(topology.num_nodes)
            np.add.at(need, fabric[target[origin == s]], chunk_bytes[g] / reference)
            sources.append(int(fabric[s]))
            rows.append(need)
            owner.append((g, s))
    if not sources:
        return None
    commodities = (topology, np.array(sources, dtype=np.int64), np.array(rows), reference)
    solved = symmetric_commodity_flows(*commodities, fewest_hops=True) or commodity_flows(*commodities, fewest_hops=True)
    if solved is None:
        return None
    found: dict[str, dict[int, np.ndarray]] = {g: {} for g in demands}
    for (g, s), flow in zip(owner, solved[1]):
        found[g][s] = flow * (reference / chunk_bytes[g])
    return solved[0], found


def fill_and_drain_ns(link_src: np.ndarray, link_dst: np.ndarray, hop_ns: np.ndarray, num_members: int, num_nodes: int) -> np.ndarray:
    """Per link, the least time a piece from one member (nodes ``0 .. num_members - 1``) to another
    spends before the link plus after it, each hop taking ``hop_ns``: none for a link between
    members, two hops for a link that leaves a member for a non-member a hop from another member
    (a piece that came back to where it started would not have left).

    >>> from chakra_collectives.topology import ring
    >>> a = ring(4).link_arrays                       # members 0, 1; links 0->1 1->2 2->3 3->0, then 1->0 2->1 3->2 0->3
    >>> fill_and_drain_ns(a["src"], a["dst"], np.ones(8), 2, 4).tolist()   # 1 -> 2 -> 3 -> 0: 2 hops besides 2 -> 3
    [0.0, 2.0, 2.0, 2.0, 0.0, 2.0, 2.0, 2.0]
    """
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import dijkstra

    hop_ns = np.asarray(hop_ns, dtype=np.float64)
    fastest = np.lexsort((hop_ns, link_dst, link_src))  # of parallel links the fastest (a sparse matrix would add them up)
    keep = fastest[np.unique(np.asarray(link_src)[fastest] * num_nodes + np.asarray(link_dst)[fastest], return_index=True)[1]]
    graph = coo_matrix((hop_ns[keep], (link_src[keep], link_dst[keep])), shape=(num_nodes, num_nodes)).tocsr()
    members = np.arange(num_members)
    fill = dijkstra(graph, indices=members)[:, link_src]  # (member s, link): from s to the link
    drain = dijkstra(graph.T.tocsr(), indices=members)[:, link_dst]  # (member w, link): from the link on to w
    total = fill[:, None, :] + drain[None, :, :]
    total[members, members, :] = np.inf
    return total.min(axis=(0, 1))


def _unicast_pieces(demand: Demand) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """``demand``'s pieces with one destination: their ids, destinations, the distinct origins
    and each piece's index among them; ``None`` when there is none."""
    unicast = np.flatnonzero(np.diff(demand.dest_ptr) == 1)
    if not len(unicast):
        return None
    origin = demand.origin[unicast].astype(np.int64)
    target = demand.dest[demand.dest_ptr[unicast]].astype(np.int64)
    sources, source_index = np.unique(origin, return_inverse=True)
    return unicast, target, sources, source_index


def _take_paths(flow: np.ndarray, link_src: np.ndarray, link_dst: np.ndarray, s: int, w: int, amount: float) -> list[tuple[list[int], float]]:
    """Up to ``amount`` chunks of ``flow`` from ``s`` to ``w`` as paths (fewest hops first, each as
    much as its thinnest link carries), taken out of ``flow``."""
    found: list[tuple[list[int], float]] = []
    while amount > FLOW_EPSILON:
        links = _shortest(flow, link_src, link_dst, s, w)
        if links is None:
            break
        carried = min(float(flow[links].min()), amount)
        flow[links] -= carried
        amount -= carried
        found.append((links, carried))
    return found


def _shortest(flow: np.ndarray, link_src: np.ndarray, link_dst: np.ndarray, s: int, w: int) -> list[int] | None:
    """The fewest-hop path from ``s`` to ``w`` over links still carrying flow (breadth first)."""
    used = np.flatnonzero(flow > FLOW_EPSILON)
    out: dict[int, list[int]] = {}
    for link, a in zip(used.tolist(), link_src[used].tolist()):
        out.setdefault(a, []).append(link)
    came: dict[int, int] = {s: -1}
    frontier = deque([s])
    while frontier:
        u = frontier.popleft()
        if u == w:
            break
        for link in out.get(u, ()):
            v = int(link_dst[link])
            if v not in came:
                came[v] = link
                frontier.append(v)
    if w not in came:
        return None
    links = []
    node = w
    while came[node] >= 0:
        links.append(came[node])
        node = int(link_src[came[node]])
    return links[::-1]


def _channels_of(
    links: list[int], link_dst: np.ndarray, n: int, direct_of: dict, routed_of: dict, extra: list[RoutedChannel], base: int, num_direct: int, s: int
) -> list[int]:
    """A path's channels (forwarding matcher ids: direct ``i``, routed ``num_direct + j``): cut at every member it crosses."""
    hops: list[int] = []
    start, stretch = s, []
    for link in links:
        stretch.append(link)
        v = int(link_dst[link])
        if v >= n:  # a non-member: the stretch goes on
            continue
        if len(stretch) == 1 and (start, v) in direct_of:
            hops.append(direct_of[start, v])
        else:
            key = tuple(stretch)
            if key not in routed_of:
                routed_of[key] = base + len(extra)
                extra.append(RoutedChannel(start, v, key))
            hops.append(num_direct + routed_of[key])
        start, stretch = v, []
    return hops


__all__ = ["SpreadPaths", "demand_flows", "fill_and_drain_ns", "joint_flows", "piece_message_floor_ns", "spread_paths"]
