"""Time one collective algorithm on a topology: the synthesizer's cost model.

Algorithm rank ``r`` runs on NPU ``placement[r]`` (default: the algorithm's own
:attr:`~chakra_collectives.ir.CollectiveAlgorithm.placement`, else NPU ``r``). Every operation is
timed under the shared network model (:mod:`~chakra_collectives.network.model`): SENDs inject
their message when their dependencies are done and complete when it has arrived, RECVs
complete when their message has arrived and their dependencies are done, REDUCE / COPY take
their duration or ``bytes / reduce_bandwidth``.

>>> from chakra_collectives.topology import Topology
>>> from chakra_collectives.ir import Collective
>>> from chakra_collectives.synth.baselines import ring
>>> t = Topology(4)
>>> for i in range(4):
...     t.add_link(i, (i + 1) % 4, 50.0, 500.0)
>>> algo = ring(Collective.ALL_GATHER, 4, size_bytes=4 * 2**20)
>>> predict_time(algo, t) == 3 * (500.0 + 2**20 / (50 * 2**30 / 1e9))
True
>>> predict_time(algo, t, network_model="astra-sim")   # 3 * int(500 + 19531.25); whole ns
60093.0
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from chakra_collectives.deprecation import renamed_keyword
from chakra_collectives.errors import AlgorithmError, InputError
from chakra_collectives.ir import CollectiveAlgorithm, OpKind
from chakra_collectives.network.engine import LinkUse, Timing, run
from chakra_collectives.network.graph import LOCAL, TaskGraph
from chakra_collectives.network.model import LOCAL_OPS, Mode, NetworkModel
from chakra_collectives.topology import Topology
from chakra_collectives.ir.matching import match_messages


@dataclass
class CollectiveTiming:
    """Per-operation times of one algorithm run (arrays aligned with ``algo.ops``)."""

    algorithm: CollectiveAlgorithm
    size_bytes: int
    model: NetworkModel
    start_ns: np.ndarray
    """When each operation's dependencies were done (a RECV: when it was posted)."""
    end_ns: np.ndarray
    """When each operation completed (a SEND: when its message arrived)."""
    links: LinkUse

    @property
    def time_ns(self) -> float:
        """Makespan: when the last operation completed."""
        return float(self.end_ns.max()) if len(self.end_ns) else 0.0

    def algorithm_bandwidth_gbps(self) -> float:
        """``size / time`` in GB/s (NCCL's "algbw")."""
        from chakra_collectives.units import gbps_from_bytes_per_ns

        return gbps_from_bytes_per_ns(self.size_bytes / self.time_ns) if self.time_ns > 0 else float("inf")


def collective_task_graph(
    algo: CollectiveAlgorithm,
    model: NetworkModel,
    *,
    size_bytes: int | None = None,
    placement: np.ndarray | None = None,
) -> TaskGraph:
    """The one lowering of an algorithm to engine tasks: one task per operation, same order.

    SEND / RECV become message tasks paired by :func:`~chakra_collectives.ir.matching.match_messages`,
    of :meth:`~chakra_collectives.ir.CollectiveAlgorithm.op_bytes` at ``size_bytes``; REDUCE /
    COPY / COMPUTE become local tasks that take what the model charges for their duration
    (:meth:`NetworkModel.local_ns`). Rank ``r`` runs on NPU ``placement[r]`` (default:
    :func:`own_placement`). A SEND that names a route (``algo.routes``) takes it
    (:meth:`NetworkModel.path_links`); the others take the model's. Routes name fabric nodes, so
    an algorithm with routes runs only where it was made for.
    :func:`simulate_collective` runs one algorithm alone; the replayer stamps the same tasks
    out once per collective call of a workload.

    >>> from chakra_collectives.ir import Collective
    >>> from chakra_collectives.synth.baselines import ring
    >>> from chakra_collectives.topology import ring as ring_topology
    >>> graph = collective_task_graph(ring(Collective.ALL_GATHER, 2, size_bytes=64), NetworkModel(ring_topology(2)))
    >>> graph.kind.tolist(), graph.partner.tolist(), graph.nbytes.tolist()   # 0 SEND, 1 RECV, 2 local
    ([0, 1, 2, 1, 0, 2], [3, 4, -1, 0, 1, -1], [32, 32, 32, 32, 32, 32])

    Raises
    ------
    AlgorithmError
        A SEND without its RECV (or the reverse), or a pair of unequal sizes.
    """
    size = algo.size_bytes if size_bytes is None else size_bytes
    ops = algo.ops
    npus = own_placement(algo) if placement is None else np.asarray(placement)
    routes = ()
    if algo.routes:
        if not np.array_equal(npus, own_placement(algo)):
            where = f"on NPUs {list(algo.placement)}" if algo.placement else "rank r on NPU r"
            raise AlgorithmError(
                f"{algo.name or 'the algorithm'} names the network paths of its messages: its ranks must run {where}"
            )
        routes = tuple(model.path_links(path) for path in algo.routes)
    matching = match_messages(algo, limit=1)
    if matching.problems:
        raise AlgorithmError(f"cannot time {algo.name or 'the algorithm'}: {matching.problems[0]}")
    nbytes = algo.op_bytes(size)
    kind = ops.kind.astype(np.int8)
    local = kind > OpKind.RECV
    kind[local] = LOCAL
    costed = model.local_ns(algo.local_durations(nbytes, model.reduce_bandwidth_gbps)[local])
    if costed.any():
        duration = np.zeros(len(ops), dtype=costed.dtype)
        duration[local] = costed
    else:  # local operations take no time (no reduce bandwidth): a zero column that holds no memory
        duration = np.broadcast_to(np.zeros(1, dtype=costed.dtype), (len(ops),))
    return TaskGraph.build(
        kind=kind,
        npu=npus[ops.rank],
        partner=matching.partner,
        nbytes=nbytes,
        duration=duration,
        dep_ptr=ops.dep_ptr,
        dep_idx=ops.dep_idx,
        route=ops.route if routes else None,
        routes=routes,
    )


def own_placement(algo: CollectiveAlgorithm) -> np.ndarray:
    """The NPU each rank of ``algo`` runs on unless told otherwise: its ``placement`` (a process
    group's), else rank ``r`` on NPU ``r``.

    >>> from dataclasses import replace
    >>> from chakra_collectives.ir import Collective
    >>> from chakra_collectives.synth.baselines import ring
    >>> algo = ring(Collective.ALL_GATHER, 2, size_bytes=64)
    >>> own_placement(algo).tolist(), own_placement(replace(algo, placement=(4, 9))).tolist()
    ([0, 1], [4, 9])
    """
    if algo.placement:
        return np.asarray(algo.placement, dtype=np.int64)
    return np.arange(algo.num_ranks, dtype=np.int64)


@renamed_keyword("mode", "network_model")
def simulate_collective(
    algo: CollectiveAlgorithm,
    topology: Topology,
    *,
    size_bytes: int | None = None,
    network_model: str | Mode = Mode.TACOS,
    reduce_bandwidth_gbps: float | None = None,
    local_ops: str = "parallel",
    placement: "np.ndarray | list[int] | None" = None,
    record_links: bool = False,
) -> CollectiveTiming:
    """Run ``algo`` alone on ``topology`` and return every operation's start and end.

    Parameters
    ----------
    size_bytes:
        Collective size (default ``algo.size_bytes``); chunk-identified operations scale exactly.
    network_model:
        ``"default"`` or ``"astra-sim"`` (old name: ``mode``) (see :mod:`~chakra_collectives.network.model`).
    reduce_bandwidth_gbps:
        Cost of a REDUCE / COPY without a duration: ``bytes / bandwidth`` (default: 0 ns).
    local_ops:
        ``"parallel"`` (default) or ``"serial"``: one local operation at a time per NPU.
    placement:
        NPU of each algorithm rank (default: :func:`own_placement`, the algorithm's own
        placement or rank ``r`` on NPU ``r``).
    record_links:
        Keep every hop (its link, begin, end and SEND) in ``links.intervals`` (for traces).

    Raises
    ------
    InputError
        The topology has fewer NPUs than the algorithm has ranks, or a bad option.
    AlgorithmError
        A SEND without its RECV (or the reverse), or the algorithm deadlocks.
    """
    if local_ops not in LOCAL_OPS:
        raise InputError(f"unknown local_ops {local_ops!r} (valid: {', '.join(LOCAL_OPS)})")
    npus = own_placement(algo) if placement is None else np.asarray(placement, dtype=np.int64)
    if len(npus) != algo.num_ranks:
        raise InputError(f"placement names {len(npus)} NPUs for {algo.num_ranks} ranks")
    if algo.num_ranks > topology.num_npus:
        raise InputError(
            f"{topology.name} has {topology.num_npus} NPUs, too few for the algorithm's {algo.num_ranks} ranks"
        )
    if len(npus) and (npus.min() < 0 or npus.max() >= topology.num_npus):
        outside = int(npus[(npus < 0) | (npus >= topology.num_npus)][0])
        raise InputError(f"the algorithm's ranks run on NPU {outside}, which {topology.name} does not have (0..{topology.num_npus - 1})")
    model = NetworkModel(topology, network_model=network_model, reduce_bandwidth_gbps=reduce_bandwidth_gbps)
    size = algo.size_bytes if size_bytes is None else size_bytes
    if size <= 0:
        raise InputError(f"collective size must be positive, got {size}")
    graph = collective_task_graph(algo, model, size_bytes=size, placement=npus)
    if local_ops == "serial":
        local = graph.kind == LOCAL
        unit = np.where(local, graph.npu, -1).astype(np.int32)
        graph = TaskGraph.build(**{**_columns(graph), "unit": unit, "release": unit})
    timing = run(graph, model, record_links=record_links)
    if not timing.finished:
        raise _deadlock(algo, timing)
    return CollectiveTiming(
        algorithm=algo,
        size_bytes=size,
        model=model,
        start_ns=timing.start,
        end_ns=timing.end,
        links=timing.links,
    )


@renamed_keyword("mode", "network_model")
def predict_time(
    algo: CollectiveAlgorithm,
    topology: Topology,
    *,
    size_bytes: int | None = None,
    network_model: str | Mode = Mode.TACOS,
    reduce_bandwidth_gbps: float | None = None,
    placement: "np.ndarray | list[int] | tuple[int, ...] | None" = None,
) -> float:
    """Predicted time (ns) of ``algo`` alone on ``topology``, its ranks on ``placement``
    (default: :func:`own_placement`).

    See :func:`simulate_collective` for the parameters; in ``"astra-sim"`` mode the result is a
    whole number of ns, as ASTRA-sim reports.
    """
    timing = simulate_collective(
        algo, topology, size_bytes=size_bytes, network_model=network_model, reduce_bandwidth_gbps=reduce_bandwidth_gbps, placement=placement,
    )
    return timing.time_ns


def simulate_together(
    algorithms: "list[CollectiveAlgorithm]", topology: Topology, *, network_model: str | Mode = Mode.TACOS,
) -> list[float]:
    """Run ``algorithms`` at the same time on ``topology``, each on its own placement
    (:func:`own_placement`), sharing its links; the time (ns) each one finishes.

    Concurrent process groups of one collective call (the data-parallel groups of a TP x DP
    job) run so: alone each takes :func:`predict_time`, together they queue on the links both use.

    >>> from dataclasses import replace
    >>> from chakra_collectives.ir import Collective
    >>> from chakra_collectives.synth.baselines import ring
    >>> from chakra_collectives.topology import torus2d
    >>> algo = ring(Collective.ALL_GATHER, 4, size_bytes=2**20)
    >>> rows = [replace(algo, placement=tuple(range(4 * r, 4 * r + 4))) for r in range(4)]
    >>> alone = predict_time(rows[0], torus2d(4, 4))
    >>> [t == alone for t in simulate_together(rows, torus2d(4, 4))]   # the rows share no link
    [True, True, True, True]
    """
    model = NetworkModel(topology, network_model=network_model)
    for algo in algorithms:
        npus = own_placement(algo)
        if len(npus) and (npus.max() >= topology.num_npus or algo.num_ranks > topology.num_npus):
            raise InputError(f"{topology.name} has {topology.num_npus} NPUs, too few for an algorithm on NPUs {npus.tolist()}")
    graphs = [collective_task_graph(algo, model) for algo in algorithms]
    offsets = np.cumsum([0, *(len(g) for g in graphs)])
    dep_offsets = np.cumsum([0, *(len(g.dep_idx) for g in graphs)])
    route_offsets = np.cumsum([0, *(len(g.routes) for g in graphs)])

    def shifted(column: str, base: np.ndarray) -> np.ndarray:
        return np.concatenate([np.where(getattr(g, column) >= 0, getattr(g, column) + b, -1) for g, b in zip(graphs, base)])

    graph = TaskGraph.build(
        kind=np.concatenate([g.kind for g in graphs]),
        npu=np.concatenate([g.npu for g in graphs]),
        partner=shifted("partner", offsets),
        nbytes=np.concatenate([g.nbytes for g in graphs]),
        duration=np.concatenate([g.duration for g in graphs]),
        dep_ptr=np.concatenate([[0], *(g.dep_ptr[1:].astype(np.int64) + d for g, d in zip(graphs, dep_offsets))]),
        dep_idx=np.concatenate([g.dep_idx.astype(np.int64) + o for g, o in zip(graphs, offsets)]),
        route=shifted("route", route_offsets),
        routes=tuple(r for g in graphs for r in g.routes),
    )
    timing = run(graph, model)
    if not timing.finished:
        raise AlgorithmError(f"the {len(algorithms)} algorithms deadlock when run together")
    return [float(timing.end[offsets[i] : offsets[i + 1]].max(initial=0.0)) for i in range(len(graphs))]


def _columns(graph: TaskGraph) -> dict[str, np.ndarray]:
    return {name: getattr(graph, name) for name in graph.__dataclass_fields__}


def _deadlock(algo: CollectiveAlgorithm, timing: Timing) -> AlgorithmError:
    ops = algo.ops
    stuck = timing.stuck
    first_per_rank: dict[int, int] = {}
    for i in stuck.tolist():
        first_per_rank.setdefault(int(ops.rank[i]), i)
    shown = ", ".join(
        f"rank {r} node {int(ops.node_id[i])} {OpKind(int(ops.kind[i])).name}" for r, i in list(first_per_rank.items())[:4]
    )
    more = "" if len(first_per_rank) <= 4 else f" and {len(first_per_rank) - 4} more ranks"
    return AlgorithmError(f"deadlock: {len(stuck)} of {len(ops)} operations never complete (first stuck: {shown}{more})")
