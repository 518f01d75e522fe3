"""The model of ASTRA-sim timed level by level, where its rules leave nothing to the event order.

A workload of COMP, SEND, RECV and *custom* collective nodes (what ``synth --astra-sim`` writes,
and any workload whose collectives all run ``*-implementation-custom`` ETs outside process
groups) needs none of the system layer's queues or phases: a custom collective is one stream
that starts when it is issued and issues its own nodes as their dependencies finish. When, in
addition, no message ever waits for a link, every time follows from the dependencies alone --
what :func:`~chakra_collectives.network.levels.contention_free_times` computes for all tasks of
one topological level at once. The expansion is columnar, like the network model's replay:

* one task per workload node (for a COMM_COLL, the collective's *end*: it waits for the last
  nodes of the rank's program) and one *begin* task per COMM_COLL (it waits for the node's
  dependencies; the program's first nodes wait for it);
* per COMM_COLL, the custom program of its rank (``PREFIX.{rank}.et``): SEND, RECV and COMP
  nodes with their dependencies. A COMP takes ``duration_micros * 1000`` ns, 1 ns when 0.

Messages are matched as :class:`~chakra_collectives.astra_system.kernel.Kernel` matches them --
the k-th send and the k-th receive of one ``(tag, src, dst, bytes)`` -- assuming program order;
:func:`level_timed` then checks what the event order could change, and returns ``None`` (the
event simulation runs instead) unless all of these hold:

* no message waits for a link (the premise of the level timing);
* within each ``(tag, src, dst, bytes)``, sends are issued at strictly increasing times, and so
  are receives (so the order the kernel numbers them in is the program order assumed);
* per rank and unit (one GPU COMP, one CPU op, one communication in flight), the nodes holding
  it take time and never overlap (so the rule never delays one);
* every hop takes time (ASTRA-sim aborts on an event at time 0: the event simulation says so).

>>> import tempfile, pathlib
>>> from chakra_collectives.astra_sim import write_astra_sim_dir
>>> from chakra_collectives.converters.astra_sim import AnalyticalNetwork, Dimension
>>> from chakra_collectives.converters.astra_sim.system import SystemConfig
>>> from chakra_collectives.converters.chakra_et.workload_reader import read_workload
>>> from chakra_collectives.ir import Collective
>>> from chakra_collectives.synth.baselines import ring
>>> from chakra_collectives.topology import load_topology
>>> with tempfile.TemporaryDirectory() as tmp:
...     d = write_astra_sim_dir(pathlib.Path(tmp), load_topology("ring:4"), ring(Collective.ALL_GATHER, 4, size_bytes=2**20))
...     config = SystemConfig.from_file(d.directory / "system.json")
...     timed = level_timed(read_workload(d.directory / d.workload), d.network, config, "aware", {}, CustomLibrary(d.directory))
>>> max(timed.finish_ns)        # 3 steps of int(500 + 256 KiB / 50 GB/s) ns
16146
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

import numpy as np

from chakra_collectives.astra_system.backends import AwareBackend, UnawareBackend, make_backend
from chakra_collectives.astra_system.custom import CustomLibrary
from chakra_collectives.astra_system.driver import COLLECTIVE_TYPES
from chakra_collectives.astra_system.system import COLLECTIVE_TAG
from chakra_collectives.converters.astra_sim import AnalyticalNetwork
from chakra_collectives.converters.astra_sim.system import SystemConfig
from chakra_collectives.errors import InputError
from chakra_collectives.ir.workload import NO_UNIT, NodeKind, Workload, execution_units
from chakra_collectives.network.graph import LOCAL, RECV, SEND, TaskGraph, task_id_type
from chakra_collectives.network.levels import HopCosts, LevelTimes, contention_free_times

_TASK_KIND = {NodeKind.COMP: LOCAL, NodeKind.COMM_SEND: SEND, NodeKind.COMM_RECV: RECV}


@dataclass
class LevelRun:
    """Per rank the finish and the exposed communication; per workload node when it started and ended."""

    finish_ns: list[int]
    exposed_ns: list[int]
    start_ns: np.ndarray
    end_ns: np.ndarray


@dataclass
class _Messages:
    """Sends and receives in the order they are matched: ``sends[k]`` with ``recvs[k]``;
    ``same_key[k]``: entry ``k`` has the ``(tag, src, dst, bytes)`` of entry ``k - 1``."""

    sends: np.ndarray
    recvs: np.ndarray
    same_key: np.ndarray


def level_timed(
    workload: Workload, network: AnalyticalNetwork, config: SystemConfig, backend: str, groups: dict[int, list[int]], library: CustomLibrary
) -> LevelRun | None:
    """The run timed level by level, or ``None`` where the event order could matter (module docstring)."""
    if groups or config.active_chunks < 1:
        return None
    kind = workload.node_type
    if not np.isin(kind, [*_TASK_KIND, NodeKind.COMM_COLL]).all():
        return None
    calls = np.flatnonzero(kind == NodeKind.COMM_COLL)
    prefixes = _custom_prefixes(workload, calls, config)
    if prefixes is None:
        return None
    try:
        programs = [library.files(prefix, workload.num_ranks) for prefix in prefixes]
    except InputError:
        return None  # the event simulation raises it when the call is issued, as ASTRA-sim fails
    distinct = {id(files): files for files in programs}.values()  # calls of one collective share its files
    if any(len(files) == 0 or not np.isin(files.node_type, list(_TASK_KIND)).all() for files in distinct):
        return None
    expanded = _expand(workload, calls, programs)
    if expanded is None:
        return None
    graph, begins, messages = expanded
    costs = _hop_costs(graph, make_backend(backend, network))
    if costs is None:
        return None
    timed = _timed(graph, costs)
    if timed is None or not _issued_in_order(messages, timed.start):
        return None
    size = len(workload)
    start = timed.start[:size].copy()
    end = timed.end[:size].copy()
    start[calls] = timed.start[begins]  # a collective starts when it is issued: its begin task
    if not _units_never_wait(workload, start, end):
        return None
    runtime = np.where(kind == NodeKind.COMP, graph.duration[:size], 0)
    finish: list[int] = []
    exposed: list[int] = []
    bounds = workload.rank_bounds().tolist()
    for lo, hi in zip(bounds, bounds[1:]):
        last = int(end[lo:hi].max()) if hi > lo else 0
        finish.append(last)
        exposed.append(last - int(runtime[lo:hi].sum()))
    return LevelRun(finish_ns=finish, exposed_ns=exposed, start_ns=start, end_ns=end)


COMPILED_TASKS = 2**19
"""Task graphs of at least this many tasks are timed by the compiled walk
(:func:`~chakra_collectives.network.level_kernel.compiled_contention_free_times`, numba, when
installed), smaller ones level by level in numpy; the times are the same. Importing numba costs
about 0.25 CPU s, what the walk saves on about half a million tasks."""


def _timed(graph: TaskGraph, costs: HopCosts) -> LevelTimes | None:
    """The graph's times when no message waits for a link (``None`` otherwise), by the compiled
    walk from :data:`COMPILED_TASKS` tasks on (numba installed), else level by level."""
    if len(graph) >= COMPILED_TASKS and importlib.util.find_spec("numba") is not None:
        from chakra_collectives.network.level_kernel import compiled_contention_free_times  # numba imported when used

        return compiled_contention_free_times(graph, costs)
    return contention_free_times(graph, costs, keep_hops=False)


def _custom_prefixes(workload: Workload, calls: np.ndarray, config: SystemConfig) -> list[str] | None:
    """Per COMM_COLL, the custom ETs it runs (``None``: some call is native, in a group, or not one ASTRA-sim runs)."""
    prefixes = []
    for g, comm_type, comm_size in zip(calls.tolist(), workload.comm_type[calls].tolist(), workload.comm_size[calls].tolist()):
        collective = COLLECTIVE_TYPES.get(comm_type)
        if collective is None or workload.pg_name[g] not in (None, "", "0") or collective not in config.custom:
            return None
        prefixes.append(config.custom.get(f"{collective}@{comm_size}", config.custom[collective]))  # "@size": a copy written for that size
    return prefixes


def _runtime(duration_ns: np.ndarray, comp: np.ndarray) -> np.ndarray | None:
    """A COMP's ``duration_micros * 1000`` ns truncated, 1 ns when 0; 0 for the rest (``None``: a negative one)."""
    runtime = np.zeros(len(duration_ns), dtype=np.int64)
    np.copyto(runtime, duration_ns, casting="unsafe", where=comp)  # truncated, as astype: no float temporary
    if (runtime < 0).any():
        return None
    runtime[comp & (runtime == 0)] = 1
    return runtime


def _task_kinds(node_type: np.ndarray) -> np.ndarray:
    """Each node's task kind, looked up in one table (LOCAL for the kinds :data:`_TASK_KIND` does not name).

    >>> _task_kinds(np.array([NodeKind.COMM_RECV, NodeKind.COMP, NodeKind.COMM_SEND], dtype=np.int8)).tolist() == [RECV, LOCAL, SEND]
    True
    """
    table = np.full(max(NodeKind) + 1, LOCAL, dtype=np.int8)
    for node_kind, task_kind in _TASK_KIND.items():
        table[node_kind] = task_kind
    return table[node_type]


@dataclass
class _Library:
    """The rank files of every distinct custom collective of the calls as one set of columns
    (``node_type``... ``dep_idx``: dependencies as positions in these columns), and per call
    its rank and the rows ``lo:hi`` of its program."""

    node_type: np.ndarray
    peer: np.ndarray
    comm_size: np.ndarray
    tag: np.ndarray
    duration_ns: np.ndarray
    dep_ptr: np.ndarray
    dep_idx: np.ndarray
    rank: np.ndarray
    lo: np.ndarray
    hi: np.ndarray


def _programs(call_ranks: np.ndarray, programs: list[Workload]) -> _Library:
    """Each call's program (the rank file of its rank in its custom collective), as rows of
    the distinct collectives' columns laid end to end (one collective: its own columns)."""
    distinct = list({id(files): files for files in programs}.values())
    which = {id(files): i for i, files in enumerate(distinct)}
    base = np.cumsum([0] + [len(files) for files in distinct])
    bounds = [files.rank_bounds().astype(np.int64) + offset for files, offset in zip(distinct, base.tolist())]
    chosen = np.array([which[id(files)] for files in programs], dtype=np.int64)
    lo = np.zeros(len(programs), dtype=np.int64)
    hi = np.zeros(len(programs), dtype=np.int64)
    for i, files_bounds in enumerate(bounds):
        mine = chosen == i
        lo[mine] = files_bounds[call_ranks[mine]]
        hi[mine] = files_bounds[call_ranks[mine] + 1]

    def column(name: str) -> np.ndarray:
        return getattr(distinct[0], name) if len(distinct) == 1 else np.concatenate([getattr(files, name) for files in distinct])

    dep_base = np.cumsum([0] + [len(files.dep_idx) for files in distinct])
    dep_ptr = distinct[0].dep_ptr if len(distinct) == 1 else np.concatenate(
        [files.dep_ptr[:-1] + offset for files, offset in zip(distinct, dep_base.tolist())] + [dep_base[-1:]])
    dep_idx = distinct[0].dep_idx if len(distinct) == 1 else np.concatenate(
        [files.dep_idx + offset for files, offset in zip(distinct, base.tolist())])
    return _Library(node_type=column("node_type"), peer=column("peer"), comm_size=column("comm_size"), tag=column("tag"),
                    duration_ns=column("duration_ns"), dep_ptr=dep_ptr.astype(np.int64, copy=False), dep_idx=dep_idx.astype(np.int64, copy=False),
                    rank=call_ranks.astype(np.int64), lo=lo, hi=hi)


def _expand(workload: Workload, calls: np.ndarray, programs: list[Workload]) -> tuple[TaskGraph, np.ndarray, _Messages] | None:
    """The task graph (module docstring), each call's begin task and the matched messages
    (``None``: a negative COMP time, a message to oneself or nobody, or one never matched).

    Task ids, ranks and dependency pointers are built in the graph's own narrow types (int32
    below 2**31 tasks): at 1,024 ranks each column is 5M tasks, and an int64 column of that
    size is a fresh mapping of 40 MB (page faults on every first touch) where an int32 one is
    half of it, reused from the heap."""
    size = len(workload)
    rank_of = np.repeat(np.arange(workload.num_ranks, dtype=np.int32), np.diff(workload.rank_bounds()))
    program = _programs(rank_of[calls], programs)
    counts = program.hi - program.lo
    total = int(counts.sum())
    first = size + len(calls)
    task = task_id_type(first + total)
    is_call = np.zeros(size, dtype=bool)
    is_call[calls] = True
    node_kind = _task_kinds(workload.node_type)
    node_kind[is_call] = LOCAL
    begins = np.arange(size, first, dtype=task)
    begin_of = np.full(size, -1, dtype=task)
    begin_of[calls] = begins
    blocks = [
        (node_kind, rank_of, workload.peer, workload.comm_size, workload.tag, workload.duration_ns, workload.node_type == NodeKind.COMP),
        (np.full(len(calls), LOCAL, dtype=np.int8), rank_of[calls], *(np.zeros(len(calls), dtype=np.int64) for _ in range(4)), np.zeros(len(calls), dtype=bool)),
    ]
    # dependency edges (owner task, the task it waits for); a call's own dependencies go to its begin task
    owner = np.repeat(np.arange(size, dtype=task), np.diff(workload.dep_ptr))
    owners = [np.where(is_call[owner], begin_of[owner], owner)]
    targets = [workload.dep_idx.astype(task)]
    del owner, begin_of, rank_of
    # the calls' programs, one after another in call order: program[j] is node rows[j] of the library
    ends = np.cumsum(counts)
    starts = ends - counts  # each call's first row among the rows
    whole = bool(len(calls)) and int(program.lo[0]) == 0 and int(program.hi[-1]) == len(program.node_type) and np.array_equal(program.lo[1:], program.hi[:-1])
    rows = slice(None) if whole else np.repeat(program.lo - starts, counts) + np.arange(total, dtype=np.int64)  # whole: the library in order
    program_kind = _task_kinds(program.node_type[rows])
    blocks.append((program_kind, np.repeat(program.rank.astype(np.int32), counts), program.peer[rows], program.comm_size[rows], program.tag[rows],
                   program.duration_ns[rows], program_kind == LOCAL))
    del program_kind
    degree = _narrow_diff(program.dep_ptr, np.int32)[rows]
    if whole:  # each call's first row is its first node in the library: one shift for all
        inner = program.dep_idx[program.dep_ptr[0] : program.dep_ptr[-1]].astype(task)
        inner += task(first)
    else:
        lo = program.dep_ptr[rows]
        inner = program.dep_idx[np.repeat(lo - (np.cumsum(degree) - degree), degree) + np.arange(int(degree.sum()), dtype=np.int64)].astype(task)
        inner += np.repeat(np.repeat(first + starts - program.lo, counts), degree).astype(task)  # a row's library node + shift = its task
        del lo
    roots = np.flatnonzero(degree == 0)
    has_child = np.zeros(total, dtype=bool)
    has_child[inner - task(first)] = True
    sinks = np.flatnonzero(~has_child)
    del has_child
    owners.append(calls.astype(task)[np.searchsorted(ends, sinks, side="right")])  # a call ends when its program's last nodes have
    targets.append((first + sinks).astype(task))
    # a program task waits for its dependencies in the file, or (none) for its call's begin task
    edges = int(degree.sum()) + len(roots)
    pointer = np.int32 if len(workload.dep_idx) + len(sinks) + edges < 2**31 else np.int64
    program_ptr = np.zeros(total + 1, dtype=pointer)
    np.cumsum(np.maximum(degree, 1), out=program_ptr[1:])
    program_idx = np.empty(edges, dtype=task)
    is_root = np.zeros(edges, dtype=bool)
    is_root[program_ptr[roots]] = True
    program_idx[is_root] = begins[np.searchsorted(ends, roots, side="right")]
    program_idx[~is_root] = inner
    del inner, roots, sinks, degree, is_root
    # every temporary is released as soon as it is used: at 1,024 ranks each column is 5M tasks
    # the graph's columns whole; peers and tags only where messages are matched (no 40 MB copies)
    kind, npu, nbytes = (np.concatenate([block[i] for block in blocks]) for i in (0, 1, 3))
    runtimes = [_runtime(block[5], block[6]) for block in blocks]
    if any(runtime is None for runtime in runtimes):
        return None
    runtime = np.concatenate(runtimes)
    peer, tag = (_Stacked([block[i] for block in blocks]) for i in (2, 4))
    del blocks, runtimes
    owner = np.concatenate(owners)  # the workload's nodes and the begin tasks: few
    del owners
    head_ptr = np.zeros(first + 1, dtype=pointer)
    np.cumsum(np.bincount(owner, minlength=first), out=head_ptr[1:])
    program_ptr += head_ptr[-1]
    dep_ptr = np.concatenate([head_ptr, program_ptr[1:]])
    dep_idx = np.concatenate([np.concatenate(targets)[np.argsort(owner, kind="stable")], program_idx])
    del owner, targets, head_ptr, program_ptr, program_idx
    first += total
    messages = _match(kind, npu, peer, nbytes, tag, workload.num_ranks)
    del peer, tag
    if messages is None:
        return None
    partner = np.full(first, -1, dtype=task)
    partner[messages.sends] = messages.recvs
    partner[messages.recvs] = messages.sends
    nbytes = nbytes.astype(np.int64, copy=False)
    nbytes[kind == LOCAL] = 0
    graph = TaskGraph.build(kind=kind, npu=npu, partner=partner, nbytes=nbytes, duration=runtime, dep_ptr=dep_ptr, dep_idx=dep_idx)
    return graph, begins.astype(np.int64), messages


class _Stacked:
    """Columns laid end to end without copying them: ``stacked[tasks]`` is
    ``np.concatenate(columns)[tasks]``.

    >>> _Stacked([np.array([5, 6]), np.array([7]), np.array([8, 9])])[np.array([0, 2, 4])].tolist()
    [5, 7, 9]
    """

    def __init__(self, columns: list[np.ndarray]) -> None:
        self.columns = columns
        self.offsets = np.cumsum([0] + [len(column) for column in columns])

    def __getitem__(self, tasks: np.ndarray) -> np.ndarray:
        """``tasks`` in increasing order (as :func:`numpy.flatnonzero` finds them): each column's run of them is one slice."""
        cuts = np.searchsorted(tasks, self.offsets).tolist()
        out = np.empty(len(tasks), dtype=np.result_type(*self.columns))
        for i, column in enumerate(self.columns):
            out[cuts[i] : cuts[i + 1]] = column[tasks[cuts[i] : cuts[i + 1]] - self.offsets[i]]
        return out


def _narrow_diff(pointers: np.ndarray, dtype: type) -> np.ndarray:
    """``np.diff(pointers)`` computed straight into ``dtype`` (no wide temporary).

    >>> _narrow_diff(np.array([0, 2, 2, 5]), np.int32)
    array([2, 0, 3], dtype=int32)
    """
    return np.subtract(pointers[1:], pointers[:-1], dtype=dtype, casting="same_kind")


def _match(kind: np.ndarray, npu: np.ndarray, peer: np.ndarray | _Stacked, nbytes: np.ndarray, tag: np.ndarray | _Stacked, num_ranks: int) -> _Messages | None:
    """The k-th send and the k-th receive of each ``(tag, src, dst, bytes)``, in task order."""
    sends = np.flatnonzero(kind == SEND)
    recvs = np.flatnonzero(kind == RECV)
    if len(sends) != len(recvs):
        return None
    keys = []
    for tasks in (sends, recvs):
        own, other = npu[tasks], peer[tasks]
        if len(tasks) and ((other < 0).any() or (other >= num_ranks).any() or (other == own).any()):
            return None
        keys.append((tag[tasks], own, other, nbytes[tasks]))
    (send_tag, sender, receiver, send_bytes), (recv_tag, receiving, source, recv_bytes) = keys
    del keys
    send_keys = _match_keys(send_tag, sender, receiver, send_bytes, num_ranks)
    recv_keys = _match_keys(recv_tag, source, receiving, recv_bytes, num_ranks)
    send_order = np.lexsort(tuple(reversed(send_keys)))  # stable: within one key, task order
    recv_order = np.lexsort(tuple(reversed(recv_keys)))
    same = np.ones(max(len(sends) - 1, 0), dtype=bool)
    for send_column, recv_column in zip(send_keys, recv_keys):  # one sorted column at a time
        column = send_column[send_order]
        if not np.array_equal(column, recv_column[recv_order]):
            return None
        same &= column[1:] == column[:-1]
    return _Messages(sends=sends[send_order], recvs=recvs[recv_order], same_key=np.concatenate([[False], same]) if len(sends) else same)


def _match_keys(tag: np.ndarray, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray, num_ranks: int) -> tuple[np.ndarray, ...]:
    """The columns messages are matched by, most significant first: the kernel's tag
    (``native_tag``), source, destination, bytes -- the first three folded into one integer
    where it fits (one sort key instead of three; ``src`` and ``dst`` are ranks).

    >>> [k.tolist() for k in _match_keys(np.array([COLLECTIVE_TAG + 2]), np.array([1]), np.array([0]), np.array([64]), 4)]
    [[36], [64]]
    """
    native = (tag % COLLECTIVE_TAG).astype(np.int64, copy=False)
    if COLLECTIVE_TAG * num_ranks * num_ranks >= 2**63:
        return native, src, dst, nbytes
    return (native * num_ranks + src) * num_ranks + dst, nbytes


def _hop_costs(graph: TaskGraph, backend: AwareBackend | UnawareBackend) -> HopCosts | None:
    """Every SEND's hops as the backend moves it (``None``: a hop that takes no time)."""
    sends = np.flatnonzero(graph.kind == SEND)
    sizes, size_id = np.unique(graph.nbytes[sends], return_inverse=True)
    npus = int(graph.npu.max(initial=0)) + 1
    key = (graph.npu[sends].astype(np.int64) * npus + graph.npu[graph.partner[sends]]) * len(sizes) + size_id.reshape(-1)
    keys, kind_of_send = np.unique(key, return_inverse=True)
    unique = np.stack([keys // len(sizes) // npus, keys // len(sizes) % npus, sizes[keys % len(sizes)]], axis=1) if len(keys) else np.zeros((0, 3), np.int64)
    links: list[int] = []
    busy: list[int] = []
    delivered: list[int] = []
    lengths: list[int] = []
    aware = isinstance(backend, AwareBackend)
    for src, dst, nbytes in unique.tolist():
        # the unaware backend has no links: one "hop" on a link that is never busy
        path = backend.path(src, dst, nbytes) if aware else ((0, backend.delay(src, dst, nbytes), 0),)  # type: ignore[union-attr]
        lengths.append(len(path))
        for link, arrive, hold in path:
            if arrive <= 0 or (aware and hold <= 0):
                return None
            links.append(link)
            delivered.append(arrive)
            busy.append(hold)
    hop_ptr = np.zeros(len(unique) + 1, dtype=np.int64)
    np.cumsum(lengths, out=hop_ptr[1:])
    return HopCosts(kind_of_send=kind_of_send.reshape(-1), hop_ptr=hop_ptr, hop_link=np.asarray(links, dtype=np.int64),
                    hop_busy=np.asarray(busy, dtype=np.int64), hop_delivered=np.asarray(delivered, dtype=np.int64))


def _issued_in_order(messages: _Messages, start: np.ndarray) -> bool:
    """Whether sends (and receives) of one ``(tag, src, dst, bytes)`` start at strictly increasing
    times in the order matched -- the order the kernel numbers them in."""
    for tasks in (messages.sends, messages.recvs):
        issued = start[tasks]
        if (messages.same_key[1:] & (issued[1:] <= issued[:-1])).any():
            return False
    return True


def _units_never_wait(workload: Workload, start: np.ndarray, end: np.ndarray) -> bool:
    """Whether, per rank and unit, the nodes holding it take time and never overlap."""
    unit = execution_units(workload)
    holders = np.flatnonzero(unit != NO_UNIT)
    if not len(holders):
        return True
    rank_of = np.repeat(np.arange(workload.num_ranks), np.diff(workload.rank_bounds()))[holders]
    begin, finish, held = start[holders], end[holders], unit[holders]
    if (finish <= begin).any():
        return False
    order = np.lexsort((begin, held, rank_of))
    same = (rank_of[order][1:] == rank_of[order][:-1]) & (held[order][1:] == held[order][:-1])
    return not (same & (begin[order][1:] < finish[order][:-1])).any()


__all__ = ["LevelRun", "level_timed"]
