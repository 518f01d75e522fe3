"""An algorithm planned on a process group's view of the fabric, put back on the fabric.

A producer that plans for a topology's links serves a process group by planning on the group's
view (:func:`~chakra_collectives.topology.groups.group_view`: the members as NPUs ``0 .. g-1``,
every other node a switch that relays). :func:`embed` turns its result into an algorithm of the
fabric: ranks placed on the group's NPUs (``placement``), every route renamed to fabric node ids,
and every SEND the view's network would route one way and the fabric's another given the view's
path as its route -- so the messages cross exactly the links the producer planned with.

>>> from chakra_collectives.ir import Collective
>>> from chakra_collectives.synth.baselines import ring
>>> from chakra_collectives.topology import torus2d
>>> from chakra_collectives.topology.groups import group_view
>>> fabric = torus2d(4, 4)
>>> view = group_view(fabric, (0, 5, 10, 15))
>>> algo = embed(ring(Collective.ALL_GATHER, 4, size_bytes=2**20), view, fabric)
>>> algo.placement, all(path[0] in algo.placement and path[-1] in algo.placement for path in algo.routes)
((0, 5, 10, 15), True)
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from chakra_collectives.ir import CollectiveAlgorithm, OpKind
from chakra_collectives.network.collective import own_placement
from chakra_collectives.network.model import NetworkModel
from chakra_collectives.topology import Topology
from chakra_collectives.topology.groups import GroupView


def embed(algo: CollectiveAlgorithm, view: GroupView, fabric: Topology) -> CollectiveAlgorithm:
    """``algo`` (ranks = NPUs of ``view.topology``) as an algorithm of ``fabric`` (see the module docstring)."""
    routes = tuple(view.to_fabric(path) for path in algo.routes)
    pinned = pin_routes(replace(algo, routes=routes, placement=()), view.topology, fabric, node_map=view.fabric_node)
    return replace(pinned, placement=tuple(int(v) for v in view.fabric_node[: algo.num_ranks]))


def carried(algo: CollectiveAlgorithm, perm: np.ndarray, fabric: Topology) -> CollectiveAlgorithm:
    """``algo`` (placed on the fabric) moved by the fabric symmetry ``perm`` (a node permutation,
    :func:`~chakra_collectives.topology.groups.carrying_symmetry`): its ranks on the images of
    their NPUs, every route and every planned network path mapped the same way -- the algorithm
    the producer would plan for the image group, without planning it again."""
    routes = tuple(tuple(int(perm[v]) for v in path) for path in algo.routes)
    pinned = pin_routes(replace(algo, routes=routes), fabric, fabric, node_map=perm)
    return replace(pinned, placement=tuple(int(perm[v]) for v in own_placement(algo)))


def pin_routes(
    algo: CollectiveAlgorithm, planned_on: Topology, fabric: Topology, *, node_map: np.ndarray | None = None,
) -> CollectiveAlgorithm:
    """``algo``, planned on ``planned_on`` (its ranks on their own placement there), with an explicit
    route on every SEND without one whose network route on ``planned_on`` (node ids mapped to
    ``fabric``'s by ``node_map``; default: the same ids) differs from ``fabric``'s own route."""
    ops = algo.ops
    routes = list(algo.routes)
    route = np.asarray(ops.route, dtype=np.int64).copy()
    index = {path: i for i, path in enumerate(routes)}
    unrouted = np.flatnonzero((ops.kind == OpKind.SEND) & (route < 0))
    if not len(unrouted):
        return algo
    npu = own_placement(algo)
    mapped = np.arange(planned_on.num_nodes) if node_map is None else np.asarray(node_map)
    pairs = np.unique(np.stack([ops.rank[unrouted], ops.peer[unrouted]], axis=1), axis=0)
    planned_by, fabric_model = NetworkModel(planned_on), NetworkModel(fabric)
    pinned = False
    for src, dst in pairs.tolist():
        planned = tuple(int(mapped[v]) for v in _node_path(planned_by, int(npu[src]), int(npu[dst])))
        if planned == _node_path(fabric_model, planned[0], planned[-1]):
            continue
        i = index.setdefault(planned, len(index))
        if len(routes) < len(index):
            routes.append(planned)
        route[unrouted[(ops.rank[unrouted] == src) & (ops.peer[unrouted] == dst)]] = i
        pinned = True
    if not pinned:
        return algo
    return replace(algo, ops=replace(ops, route=route.astype(np.int32)), routes=tuple(routes))


def _node_path(model: NetworkModel, src: int, dst: int) -> tuple[int, ...]:
    """The nodes of the network model's own route from NPU ``src`` to NPU ``dst``."""
    links = model.topology.links
    return (src, *(links[i].dst for i in model.route(src, dst)))


__all__ = ["carried", "embed", "pin_routes"]
