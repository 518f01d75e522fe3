"""Time one collective algorithm on a topology: the synthesizer's cost model.

Algorithm rank ``r`` runs on NPU ``placement[r]`` (default: NPU ``r``). Every operation is
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
    (:meth:`NetworkModel.local_ns`). Rank ``r`` runs on NPU ``placement[r]`` (default ``r``).
    A SEND that names a route (``algo.routes``) takes it (:meth:`NetworkModel.path_links`);
    the others take the model's.
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
    npus = np.arange(algo.num_ranks) if placement is None else np.asarray(placement)
    routes = ()
    if algo.routes:
        if not np.array_equal(npus, np.arange(algo.num_ranks)):
            raise AlgorithmError(
                f"{algo.name or 'the algorithm'} names the network paths of its messages: its rank r must run on NPU r"
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
    duration = np.zeros(len(ops), dtype=costed.dtype)
    duration[local] = costed
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
        NPU of each algorithm rank (default: rank ``r`` on NPU ``r``).
    record_links:
        Keep every hop's ``(link, start, end, send)`` in ``links.intervals`` (for traces).

    Raises
    ------
    InputError
        The topology has fewer NPUs than the algorithm has ranks, or a bad option.
    AlgorithmError
        A SEND without its RECV (or the reverse), or the algorithm deadlocks.
    """
    if local_ops not in LOCAL_OPS:
        raise InputError(f"unknown local_ops {local_ops!r} (valid: {', '.join(LOCAL_OPS)})")
    npus = np.arange(algo.num_ranks) if placement is None else np.asarray(placement, dtype=np.int64)
    if len(npus) != algo.num_ranks:
        raise InputError(f"placement names {len(npus)} NPUs for {algo.num_ranks} ranks")
    if algo.num_ranks > topology.num_npus or (len(npus) and (npus.min() < 0 or npus.max() >= topology.num_npus)):
        raise InputError(
            f"{topology.name} has {topology.num_npus} NPUs, too few for the algorithm's {algo.num_ranks} ranks"
        )
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
) -> float:
    """Predicted time (ns) of ``algo`` alone on ``topology``; algorithm rank ``r`` on NPU ``r``.

    See :func:`simulate_collective` for the parameters; in ``"astra-sim"`` mode the result is a
    whole number of ns, as ASTRA-sim reports.
    """
    timing = simulate_collective(
        algo, topology, size_bytes=size_bytes, network_model=network_model, reduce_bandwidth_gbps=reduce_bandwidth_gbps
    )
    return timing.time_ns


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
