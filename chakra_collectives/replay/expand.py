"""Lower a workload and its collectives' algorithms to one engine TaskGraph.

Task layout (all integer ids, flat arrays):

* one task per workload node, in workload order. For a COMM_COLL node this task is the
  collective's **end** on that rank: it waits for the rank's last operations of the algorithm,
  and the node's dependents wait for it;
* one **begin** task per COMM_COLL node: it waits for the node's dependencies, and the
  algorithm's first operations on that rank wait for it;
* per collective instance, one block of tasks: its algorithm's operations, rank ``i`` of the
  algorithm placed on the group's ``i``-th member (workload rank ``r`` runs on NPU ``r``).

The k-th COMM_COLL of a process group on one rank is the same collective as the k-th of that
group on every other member (program order, as ASTRA-sim matches them). Point-to-point
COMM_SEND / COMM_RECV pair on ``(src, dst, tag)`` in program order.

A COMM_COLL's ``comm_size`` is what ASTRA-sim reads it as: each rank's *input*. For an
all-gather that is the rank's shard, so the algorithm runs at ``group size x comm_size`` (the
output buffer, the IR's size); for all-reduce, reduce-scatter and all-to-all it is the whole
per-rank buffer. An algorithm given with ``--collective`` runs at that size, or -- with the
catalog's ``written_size`` (``--network-model astra-sim`` without ``--rescale``) -- at the size its files
were written for, as ASTRA-sim runs a custom collective, with a warning where the two differ.

Per-rank limits (``concurrency="astra-sim"``): each rank has three units -- GPU compute, CPU,
communication -- each held by one task at a time: a COMP node holds its unit while it runs, a
workload SEND holds the communication unit until its message arrives, a collective holds it
from its begin to its end. Receives hold nothing. ``concurrency="unlimited"`` (default) has no
units: dependencies are the only constraint, so independent collectives overlap and contend
for links.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from chakra_collectives.errors import AlgorithmError, InputError
from chakra_collectives.resources import Estimate, count, require
from chakra_collectives.ir import Collective
from chakra_collectives.network.collective import collective_task_graph, own_placement
from chakra_collectives.network.graph import LOCAL, RECV, SEND, TaskGraph
from chakra_collectives.network.model import NetworkModel
from chakra_collectives.replay.algorithms import AlgorithmCatalog
from chakra_collectives.replay.caveats import caveats
from chakra_collectives.replay.groups import ProcessGroups
from chakra_collectives.ir.matching import pair_in_order
from chakra_collectives.ir.workload import BARRIER_COMM_TYPE, NO_UNIT, UNITS_PER_RANK, NodeKind, Workload, collective_name, execution_units

CONCURRENCY = ("unlimited", "astra-sim")


@dataclass
class CollectiveInstance:
    """One collective call: its members' nodes and where its operations live among the tasks."""

    index: int
    collective: str
    """Collective name (``all-reduce``... or ``barrier``)."""
    size_bytes: int
    group: str | None
    members: tuple[int, ...]
    nodes: list[int]
    """Workload node index of each member (aligned with ``members``)."""
    algorithm: str
    first_task: int = 0
    num_tasks: int = 0


@dataclass
class ExpandedWorkload:
    """A workload with every collective call expanded into its algorithm's tasks: one TaskGraph."""

    graph: TaskGraph
    workload: Workload
    instances: list[CollectiveInstance]
    begin_task: np.ndarray
    """Per workload node: its begin task (the node's own task unless it is a COMM_COLL)."""
    instance_of_task: np.ndarray
    """Per task: the collective instance it belongs to (-1: a workload node's own task)."""
    warnings: list[str] = field(default_factory=list)


TASK_BYTES = 360
"""Peak bytes per task of an expanded workload, from expansion through the engine's run
(measured 254-270 above the process's start on data-parallel steps of 64, 256 and 1,024 ranks
on tori since templates are copied into the task columns in place; 330-440 before), with a
third to spare for messages that cross more links (``bench/bench_estimates.py``)."""
EDGE_BYTES = 16
"""Further bytes per dependency edge beyond the first per task."""
REPLAY_ADVICE = (
    "replay fewer ranks or collective calls, or give algorithms with fewer operations "
    "(--default-algorithm rhd, or --algorithm with a smaller chunk count)"
)


def replay_estimate(what: str, workload_nodes: int, templates: list[TaskGraph | None]) -> Estimate:
    """Memory to expand a workload of ``workload_nodes`` nodes whose collective calls run
    ``templates`` (None: a call with nothing to run) and to time it: :data:`TASK_BYTES` per
    task, :data:`EDGE_BYTES` per further dependency.

    >>> e = replay_estimate("replaying out/step", 4, [None, None])
    >>> e.work, e.nbytes
    ('8 tasks for 2 collective calls', 2880.0)
    """
    tasks = workload_nodes + len(templates) + sum(1 if t is None else len(t) for t in templates)
    edges = sum(0 if t is None else len(t.dep_idx) for t in templates)
    nbytes = float(TASK_BYTES * tasks + EDGE_BYTES * max(0, edges - tasks))
    calls = f"{len(templates):,} collective call{'s' if len(templates) != 1 else ''}"
    return Estimate(what, nbytes, f"{count(tasks)} tasks for {calls}", REPLAY_ADVICE)


def _rank_of(placed: np.ndarray, npus: np.ndarray) -> np.ndarray:
    """The algorithm rank of each task whose NPU is in ``npus``, the ranks running on ``placed``."""
    inverse = np.full(int(placed.max()) + 1, -1, dtype=np.int64)
    inverse[placed] = np.arange(len(placed))
    return inverse[npus]


def _sinks(graph: TaskGraph) -> np.ndarray:
    """Tasks no other task of the collective waits for (a rank is done when its sinks are)."""
    has_successor = np.zeros(len(graph), dtype=bool)
    has_successor[graph.dep_idx] = True
    return np.flatnonzero(~has_successor)


@dataclass
class _Template:
    """An algorithm lowered at one size, with what every call of it shares: worked out once per
    template, not once per call (a step's hundreds of all-reduces of one size, or one call of
    millions of operations, where a sort of its tasks' ranks cost a second)."""

    tasks: TaskGraph
    sinks: np.ndarray
    first_ops: np.ndarray
    """Operations that wait for nothing in the algorithm (they wait for their rank's begin)."""
    placed: np.ndarray | None
    """The NPUs its ranks must run on (made for a process group, or with routes); None: any members."""
    rank_of: np.ndarray
    """Per task, the algorithm rank (the member) it runs on."""
    has_ops: np.ndarray
    """Per algorithm rank, whether it runs any operation."""

    @classmethod
    def of(cls, tasks: TaskGraph, placed: np.ndarray | None) -> "_Template":
        rank_of = tasks.npu if placed is None else _rank_of(placed, tasks.npu)
        has_ops = np.zeros(int(rank_of.max(initial=-1)) + 1, dtype=bool)
        has_ops[rank_of] = True
        return cls(tasks, _sinks(tasks), np.flatnonzero(np.diff(tasks.dep_ptr) == 0), placed, rank_of, has_ops)

    def idle(self, members: int) -> np.ndarray:
        """The ranks ``0 .. members - 1`` that run no operation (those of ``np.setdiff1d(np.arange(members), rank_of)``).

        >>> from chakra_collectives.network.graph import LOCAL
        >>> tasks = TaskGraph.build(kind=[LOCAL, LOCAL], npu=[0, 2], partner=[-1, -1], nbytes=[0, 0], duration=[0.0, 0.0], dep_ptr=[0, 0, 0], dep_idx=[])
        >>> _Template.of(tasks, None).idle(4).tolist()
        [1, 3]
        """
        busy = np.zeros(members, dtype=bool)
        shared = min(members, len(self.has_ops))
        busy[:shared] = self.has_ops[:shared]
        return np.flatnonzero(~busy)


def expand_workload(
    workload: Workload,
    model: NetworkModel,
    catalog: AlgorithmCatalog,
    groups: ProcessGroups,
    *,
    concurrency: str = "unlimited",
) -> ExpandedWorkload:
    """Lower ``workload`` and the algorithm of every collective call to one engine TaskGraph.

    Collective calls are matched across ranks (per process group, in program order); each
    gets its algorithm from ``catalog``, lowered by the network model's
    :func:`~chakra_collectives.network.collective.collective_task_graph` (once per algorithm
    and size) and placed on the group's members; see the module docstring for the layout.

    >>> import tempfile, pathlib
    >>> from chakra_collectives.converters.chakra_et import WorkloadBuilder, read_workload
    >>> from chakra_collectives.replay.algorithms import AlgorithmCatalog
    >>> from chakra_collectives.topology import ring
    >>> b = WorkloadBuilder(2)
    >>> for r in range(2):
    ...     _ = b.collective(r, "all-gather", 2**20, deps=[b.comp(r, duration_ns=1000)])
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     _ = b.write(pathlib.Path(tmp) / "w")
    ...     workload = read_workload(pathlib.Path(tmp) / "w")
    >>> expanded = expand_workload(workload, NetworkModel(ring(2)), AlgorithmCatalog({}), ProcessGroups.world(2))
    >>> len(expanded.graph), expanded.instances[0].algorithm, expanded.instances[0].num_tasks   # 4 nodes, 2 begins, 6 ops
    (12, 'ring (built-in)', 6)

    Raises
    ------
    InputError
        Collective calls or messages that do not match across ranks, too small a topology.
    AlgorithmError
        An algorithm whose messages do not pair.
    """
    if concurrency not in CONCURRENCY:
        raise InputError(f"unknown concurrency {concurrency!r} (valid: {', '.join(CONCURRENCY)})")
    if workload.num_ranks > model.topology.num_npus:
        raise InputError(
            f"the workload has {workload.num_ranks} ranks but topology {model.topology.name} has only {model.topology.num_npus} NPUs"
        )
    w = len(workload)
    node_type = workload.node_type
    coll_nodes = np.flatnonzero(node_type == NodeKind.COMM_COLL)
    begin_task = np.arange(w, dtype=np.int64)
    begin_task[coll_nodes] = w + np.arange(len(coll_nodes))
    next_task = w + len(coll_nodes)
    warnings: list[str] = []

    # ---- workload tasks
    kind = np.full(w, LOCAL, dtype=np.int8)
    kind[node_type == NodeKind.COMM_SEND] = SEND
    kind[node_type == NodeKind.COMM_RECV] = RECV
    duration = _workload_durations(workload, model)
    partner = _match_p2p(workload)
    npu = workload.rank.astype(np.int32)
    nbytes = workload.comm_size.copy()
    nbytes[node_type == NodeKind.COMM_COLL] = 0

    # dependencies of each node (or of its begin task) on its dependencies' (end) tasks
    owner = np.repeat(np.arange(w, dtype=np.int64), np.diff(workload.dep_ptr))
    edge_src = [workload.dep_idx]
    edge_dst = [begin_task[owner]]

    routes: list[tuple[int, ...]] = []
    route_base: dict[tuple[int, int], int] = {}
    instances = _instances(workload, groups, catalog)
    templates: dict[tuple[int, int], _Template] = {}
    # pass 1: every call's algorithm and template, so the whole graph is known before it is built
    planned: list[tuple[CollectiveInstance, tuple[int, int] | None]] = []
    for inst in instances:
        if inst.algorithm == "":  # nothing to run: a barrier, or a group of one
            planned.append((inst, None))
            continue
        collective = Collective.parse(inst.collective)
        algo, label = catalog.get(collective, inst.members, model.topology, inst.size_bytes)
        inst.algorithm = label
        size, note = catalog.run_size(collective, inst.size_bytes, algo, label)
        key = (id(algo), size)
        if key not in templates:
            if note is not None:
                warnings.append(note)
            if not algo.has_chunk_identity and size != algo.size_bytes:
                warnings.append(
                    f"{label}: the algorithm files carry bytes only (no chunk identity); scaled proportionally "
                    f"from {algo.size_bytes} to {size} bytes"
                )
            tasks = collective_task_graph(algo, model, size_bytes=size)  # rank r on own_placement(algo)[r]
            templates[key] = _Template.of(tasks, own_placement(algo) if (algo.routes or algo.placement) else None)
            route_base[key] = len(routes)
            routes.extend(tasks.routes)
        planned.append((inst, key))
    require(replay_estimate(f"replaying {workload.prefix}", len(workload), [templates[key].tasks if key else None for _, key in planned]))

    # pass 2: the tasks of every call, written in place into the graph's columns
    total = next_task + sum(1 if key is None else len(templates[key].tasks) for _, key in planned)
    columns = {
        "kind": np.full(total, LOCAL, dtype=kind.dtype),
        "npu": np.empty(total, dtype=npu.dtype),
        "partner": np.full(total, -1, dtype=partner.dtype),
        "nbytes": np.zeros(total, dtype=nbytes.dtype),
        "duration": np.zeros(total, dtype=duration.dtype),
        "route": np.full(total, -1, dtype=np.int32),
    }
    for name, head in (("kind", kind), ("npu", npu), ("partner", partner), ("nbytes", nbytes), ("duration", duration)):
        columns[name][:w] = head
    columns["npu"][w:next_task] = workload.rank[coll_nodes]  # begin tasks: local, no time
    instance_of_task = np.full(total, -1, dtype=np.int64)
    blocks: list[tuple[int, TaskGraph, np.ndarray]] = []
    for inst, key in planned:
        begins = begin_task[inst.nodes]
        ends = np.asarray(inst.nodes, dtype=np.int64)
        members = np.asarray(inst.members, dtype=np.int64)
        if key is None:
            inst.algorithm = "synchronization only" if inst.collective == "barrier" else "none (group of one)"
            inst.first_task, inst.num_tasks = next_task, 1
            columns["npu"][next_task] = members[0]  # one local task of no time
            edge_src += [begins, np.full(len(ends), next_task)]
            edge_dst += [np.full(len(begins), next_task), ends]
            instance_of_task[next_task] = inst.index
            next_task += 1
            continue
        label = inst.algorithm
        template = templates[key]
        tpl, sinks, placed, rank_of, first_ops = template.tasks, template.sinks, template.placed, template.rank_of, template.first_ops
        if placed is not None and not np.array_equal(members, placed):
            raise AlgorithmError(
                f"{label} was made for NPUs {placed.tolist()} (its messages follow paths it chose); "
                f"this call's group is {list(inst.members)}"
            )
        base = next_task
        count = len(tpl)
        inst.first_task, inst.num_tasks = base, count
        block = slice(base, base + count)
        columns["kind"][block] = tpl.kind
        columns["npu"][block] = members[rank_of]
        np.add(tpl.partner, base, out=columns["partner"][block], where=tpl.partner >= 0)
        columns["nbytes"][block] = tpl.nbytes
        columns["duration"][block] = tpl.duration
        np.add(tpl.route, route_base[key], out=columns["route"][block], where=tpl.route >= 0, casting="unsafe")
        instance_of_task[block] = inst.index
        blocks.append((base, tpl, first_ops))
        edge_src.append(begins[rank_of[first_ops]])
        edge_dst.append(first_ops + base)
        edge_src.append(sinks + base)
        edge_dst.append(ends[rank_of[sinks]])
        idle = template.idle(len(members))
        if len(idle):  # a member with no operations is done as soon as it begins
            edge_src.append(begins[idle])
            edge_dst.append(ends[idle])
        next_task += count

    dep_ptr, dep_idx = _dependencies(total, np.concatenate(edge_src).astype(np.int64), np.concatenate(edge_dst).astype(np.int64), blocks)
    unit, release = _units(workload, coll_nodes, begin_task, total, concurrency)
    graph = TaskGraph.build(dep_ptr=dep_ptr, dep_idx=dep_idx, unit=unit, release=release, routes=routes, **columns)
    if groups.unknown_names:
        warnings.append(
            f"pg_name {', '.join(sorted(groups.unknown_names))} not defined (no --comm-groups file): those collectives run over all ranks"
        )
    warnings.extend(catalog.warnings)
    collapsed = sum(1 for inst in instances if len(inst.members) == 1 and inst.collective != "barrier")
    warnings.extend(caveats(workload, num_npus=model.topology.num_npus, topology=model.topology.name, collapsed=collapsed))
    return ExpandedWorkload(
        graph=graph,
        workload=workload,
        instances=instances,
        begin_task=begin_task,
        instance_of_task=instance_of_task,
        warnings=warnings,
    )


def _dependencies(total: int, src: np.ndarray, dst: np.ndarray, blocks: list[tuple[int, TaskGraph, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """The expanded graph's dependencies in CSR form: the edges ``src -> dst`` (each task's in
    the order given) and every block's template dependencies, ``(base, template, first_ops)``:
    the template's own edges shifted by ``base``, written in place.

    A task waits either for edges of the list (workload and begin tasks, the ends of calls, the
    first operations of a block, which wait for their begin) or for its template's, never for
    both: each template's dependencies are copied as one array, and only the list is sorted.
    """
    counts = np.bincount(dst, minlength=total)
    for base, tpl, _ in blocks:
        counts[base : base + len(tpl)] += np.diff(tpl.dep_ptr)
    dep_ptr = np.zeros(total + 1, dtype=np.int64)
    np.cumsum(counts, out=dep_ptr[1:])
    del counts
    dep_idx = np.empty(int(dep_ptr[-1]), dtype=np.int64)
    order = np.argsort(dst, kind="stable")
    waiting = dst[order]
    first_of_task = np.searchsorted(waiting, waiting, side="left")
    dep_idx[dep_ptr[waiting] + np.arange(len(order)) - first_of_task] = src[order]
    for base, tpl, first_ops in blocks:
        lo, hi = int(dep_ptr[base]), int(dep_ptr[base + len(tpl)])
        from_template = np.ones(hi - lo, dtype=bool)
        from_template[dep_ptr[base + first_ops] - lo] = False  # the first operations' begin edges
        dep_idx[lo:hi][from_template] = tpl.dep_idx + base
    return dep_ptr, dep_idx


def _workload_durations(workload: Workload, model: NetworkModel) -> np.ndarray:
    """COMP nodes take ``duration_micros`` as the model charges it, and so do MEM / METADATA
    nodes the read policy gave a duration; other nodes take no time."""
    timed = (workload.node_type == NodeKind.COMP) | ((workload.duration_ns > 0) & ~_COMM_TYPES[workload.node_type])
    costed = model.local_ns(workload.duration_ns[timed])
    out = np.zeros(len(workload), dtype=costed.dtype)
    out[timed] = costed
    return out


_COMM_TYPES = np.zeros(8, dtype=bool)
_COMM_TYPES[[NodeKind.COMM_COLL, NodeKind.COMM_SEND, NodeKind.COMM_RECV]] = True


def _match_p2p(workload: Workload) -> np.ndarray:
    """Pair workload COMM_SEND / COMM_RECV on (src, dst, tag), k-th with k-th (the IR's matcher).

    Errors name the first offending node: a RECV from no other rank, then the first SEND (in
    workload order) to no other rank, without a RECV or of another size, then the first RECV
    left over.
    """
    partner = np.full(len(workload), -1, dtype=np.int64)
    sends = np.flatnonzero(workload.node_type == NodeKind.COMM_SEND)
    recvs = np.flatnonzero(workload.node_type == NodeKind.COMM_RECV)
    rank, peer, tag, size = workload.rank.astype(np.int64), workload.peer, workload.tag, workload.comm_size
    valid = (peer >= 0) & (peer < workload.num_ranks) & (peer != rank)
    bad = recvs[~valid[recvs]]
    if len(bad):
        i = int(bad[0])
        raise InputError(f"comm_src {int(peer[i])} is not another rank of the workload", **workload.where(i))
    in_send, in_recv = pair_in_order(
        np.column_stack([rank[sends], peer[sends], tag[sends]]), np.column_stack([peer[recvs], rank[recvs], tag[recvs]])
    )
    partner[sends[in_send]] = recvs[in_recv]
    partner[recvs[in_recv]] = sends[in_send]
    other = np.maximum(partner, 0)
    wrong = sends[~valid[sends] | (partner[sends] < 0) | (size[sends] != size[other[sends]])]
    if len(wrong):
        i = int(wrong[0])
        j = int(partner[i])
        if not valid[i]:
            raise InputError(f"comm_dst {int(peer[i])} is not another rank of the workload", **workload.where(i))
        if j < 0:
            raise InputError(f"COMM_SEND to rank {int(peer[i])} tag {int(tag[i])} has no matching COMM_RECV on rank {int(peer[i])}", **workload.where(i))
        raise InputError(
            f"COMM_SEND of {int(size[i])} bytes to rank {int(peer[i])} tag {int(tag[i])} meets a COMM_RECV of {int(size[j])} bytes "
            f"(node {int(workload.node_id[j])} on rank {int(peer[i])})",
            **workload.where(i),
        )
    left = recvs[partner[recvs] < 0]
    if len(left):
        # the first left-over RECV of the (src, dst, tag) whose first RECV comes first
        keys = np.column_stack([peer[recvs], rank[recvs], tag[recvs]])
        _, first_of_key, key_of = np.unique(keys, axis=0, return_index=True, return_inverse=True)
        key_of = key_of.reshape(-1)
        unmatched = partner[recvs] < 0
        j = int(recvs[unmatched][np.argmin(first_of_key[key_of[unmatched]])])
        raise InputError(f"COMM_RECV from rank {int(peer[j])} tag {int(tag[j])} has no matching COMM_SEND on rank {int(peer[j])}", **workload.where(j))
    return partner


def _instances(workload: Workload, groups: ProcessGroups, catalog: AlgorithmCatalog) -> list[CollectiveInstance]:
    """Match the COMM_COLL nodes of every rank into collective calls."""
    calls: dict[tuple[str | None, int], dict[int, int]] = {}
    count: dict[tuple[int, str | None], int] = {}
    rank = workload.rank.tolist()
    order: list[tuple[str | None, int]] = []
    for i in np.flatnonzero(workload.node_type == NodeKind.COMM_COLL).tolist():
        pg = workload.pg_name[i]
        members = groups.members(pg)
        r = rank[i]
        if r not in members:
            raise InputError(f"rank {r} calls a collective of group {pg!r}, which it is not a member of", **workload.where(i))
        k = count.get((r, pg), 0)
        count[(r, pg)] = k + 1
        key = (pg, k)
        if key not in calls:
            calls[key] = {}
            order.append(key)
        calls[key][r] = i
    instances = []
    for index, key in enumerate(order):
        pg, k = key
        members = groups.members(pg)
        found = calls[key]
        missing = [m for m in members if m not in found]
        first = found[min(found)]
        if missing:
            group = "all ranks" if pg is None else f"group {pg!r}"
            undefined = pg in groups.unknown_names
            raise InputError(
                f"collective #{k + 1} of {group} ({workload.describe(first)}) is never called by rank {missing[0]}"
                + (f" and {len(missing) - 1} more" if len(missing) > 1 else "")
                + (f": no communicator-group file defines group {pg!r}, so it spans all ranks -- give its members with --comm-groups FILE" if undefined else ""),
                **workload.where(first),
            )
        nodes = [found[m] for m in members]
        comm_type = int(workload.comm_type[first])
        size = int(workload.comm_size[first])
        for i in nodes:
            if int(workload.comm_type[i]) != comm_type or int(workload.comm_size[i]) != size:
                raise InputError(
                    f"collective #{k + 1} mismatch: {workload.describe(i)} of {int(workload.comm_size[i])} bytes, but rank "
                    f"{rank[first]} calls {collective_name(comm_type)} of {size} bytes",
                    **workload.where(i),
                )
        trivial = comm_type == BARRIER_COMM_TYPE or len(members) == 1
        if comm_type == Collective.ALL_GATHER.chakra_comm_type:  # comm_size is each rank's input shard (ASTRA-sim's Ring.cc: output = N x input)
            size = Collective.ALL_GATHER.size_of_call(size, len(members))
        instances.append(
            CollectiveInstance(
                index=index,
                collective=collective_name(comm_type),
                size_bytes=size,
                group=pg,
                members=members,
                nodes=nodes,
                algorithm="" if trivial else "?",
            )
        )
    return instances


def _units(workload: Workload, coll_nodes: np.ndarray, begin_task: np.ndarray, total: int, concurrency: str) -> tuple[np.ndarray, np.ndarray]:
    unit = np.full(total, -1, dtype=np.int32)
    release = np.full(total, -1, dtype=np.int32)
    if concurrency == "unlimited":
        return unit, release
    held = execution_units(workload).astype(np.int32)
    node_unit = np.where(held != NO_UNIT, workload.rank.astype(np.int32) * UNITS_PER_RANK + held, -1).astype(np.int32)
    # a node holds its unit while it runs; a collective from its begin task to its node
    nodes = np.flatnonzero(workload.node_type != NodeKind.COMM_COLL)
    unit[nodes] = release[nodes] = node_unit[nodes]
    unit[begin_task[coll_nodes]] = node_unit[coll_nodes]
    release[coll_nodes] = node_unit[coll_nodes]
    return unit, release
