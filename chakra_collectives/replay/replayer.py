"""Replay a workload with its collectives on a modeled topology: the library entry point.

>>> import tempfile, pathlib
>>> from chakra_collectives.converters.chakra_et import single_collective_workload
>>> from chakra_collectives.topology import ring
>>> with tempfile.TemporaryDirectory() as tmp:
...     _ = single_collective_workload(pathlib.Path(tmp) / "w", "all-gather", 4, 2**20)  # 1 MiB per rank
...     result = replay(pathlib.Path(tmp) / "w", ring(4, bidirectional=False))
>>> result.total_ns == 3 * (500 + 2**20 / (50 * 2**30 / 1e9))
True
>>> result.collectives[0].algorithm, round(result.collectives[0].bus_bandwidth_gbps, 2)
('ring (built-in)', 48.75)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from chakra_collectives import progress
from chakra_collectives.deprecation import renamed_argument
from chakra_collectives.errors import AlgorithmError
from chakra_collectives.ir.dag import find_cycle
from chakra_collectives.ir import Collective, CollectiveAlgorithm
from chakra_collectives.ir.workload import NodeKind, Workload
from chakra_collectives.network.engine import Timing, run
from chakra_collectives.network.model import Mode, NetworkModel
from chakra_collectives.replay.algorithms import DEFAULT_ALGORITHMS, AlgorithmCatalog, GroupAlgorithms
from chakra_collectives.replay.expand import ExpandedWorkload, expand_workload
from chakra_collectives.replay.groups import ProcessGroups
from chakra_collectives.replay.step_choice import StepChoice, keep_faster_in_step
from chakra_collectives.converters.chakra_et.workload_reader import read_workload
from chakra_collectives.topology import Topology
from chakra_collectives.units import gbps_from_bytes_per_ns

_BUS_FACTOR = {
    "all-reduce": lambda n: 2 * (n - 1) / n,
    "all-gather": lambda n: (n - 1) / n,
    "reduce-scatter": lambda n: (n - 1) / n,
    "all-to-all": lambda n: (n - 1) / n,
}
"""NCCL's bus-bandwidth factors (busbw = algbw x factor); 1 for the others."""


class ReplayDeadlock(AlgorithmError):
    """Nothing can progress: ``stuck`` lists, per rank, the blocked nodes whose own
    dependencies are done; ``cycle`` the ``(rank, node id)`` of a dependency cycle, if any."""

    def __init__(self, message: str, stuck: dict[int, list[str]]) -> None:
        super().__init__(message)
        self.stuck = stuck
        self.cycle: list[tuple[int, int]] = []


@dataclass
class CollectiveStats:
    index: int
    collective: str
    group: str | None
    members: int
    size_bytes: int
    algorithm: str
    start_ns: float
    end_ns: float

    @property
    def time_ns(self) -> float:
        return self.end_ns - self.start_ns

    @property
    def algorithm_bandwidth_gbps(self) -> float:
        """``size / time`` (NCCL's algbw), GB/s with 1 GB = 2^30 bytes."""
        return gbps_from_bytes_per_ns(self.size_bytes / self.time_ns) if self.time_ns > 0 else 0.0

    @property
    def bus_bandwidth_gbps(self) -> float:
        """algbw times NCCL's factor (2(n-1)/n for all-reduce, (n-1)/n for gathers/scatters)."""
        factor = _BUS_FACTOR.get(self.collective, lambda n: 1.0)(self.members)
        return self.algorithm_bandwidth_gbps * factor

    def as_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "collective": self.collective,
            "group": self.group,
            "members": self.members,
            "size_bytes": self.size_bytes,
            "algorithm": self.algorithm,
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "time_ns": self.time_ns,
            "algorithm_bandwidth_gbps": self.algorithm_bandwidth_gbps,
            "bus_bandwidth_gbps": self.bus_bandwidth_gbps,
        }


@dataclass
class RankStats:
    rank: int
    finish_ns: float
    compute_ns: float
    """Time at least one COMP node of the rank runs."""
    communication_ns: float
    """Time at least one collective or point-to-point message of the rank is in flight."""
    exposed_communication_ns: float
    """Communication time not hidden behind compute."""

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class LinkStats:
    link: int
    src: int
    dst: int
    busy_ns: float
    bytes: int
    messages: int
    utilization: float

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class ReplayResult:
    """Everything a replay measured (times in ns)."""

    workload: str
    topology: str
    network_model: str
    concurrency: str
    total_ns: float
    num_nodes: int
    """Workload nodes."""
    num_tasks: int
    """Tasks simulated: workload nodes plus every collective's operations."""
    ranks: list[RankStats]
    collectives: list[CollectiveStats]
    links: list[LinkStats]
    """Busiest first."""
    warnings: list[str] = field(default_factory=list)
    repairs: list[str] = field(default_factory=list)
    """What reading the workload repaired (:meth:`ReadingNotes.describe`)."""
    choices: list[StepChoice] = field(default_factory=list)
    """Each kind of call a default producer served, timed against the built-in in the step
    (:mod:`~chakra_collectives.replay.step_choice`)."""
    expanded: ExpandedWorkload | None = field(default=None, repr=False)
    timing: Timing | None = field(default=None, repr=False)

    def as_dict(self, *, top_links: int | None = 10, timeline: bool = False) -> dict[str, Any]:
        """The results as JSON-ready data; ``timeline`` adds every node's interval and the links'
        utilization over time (:mod:`~chakra_collectives.replay.timeline`)."""
        document = {
            "workload": self.workload,
            "topology": self.topology,
            "network_model": self.network_model,
            "concurrency": self.concurrency,
            "num_ranks": len(self.ranks),
            "total_ns": self.total_ns,
            "num_nodes": self.num_nodes,
            "num_tasks": self.num_tasks,
            "ranks": [r.as_dict() for r in self.ranks],
            "collectives": [c.as_dict() for c in self.collectives],
            "busiest_links": [l.as_dict() for l in self.links[:top_links]],
            "warnings": self.warnings,
            "step_choices": [c.as_dict() for c in self.choices],
            "mode": self.network_model,  # deprecated spelling of network_model, kept for one release
            "deprecated": {"mode": "network_model"},
        }
        if timeline:
            from chakra_collectives.replay.timeline import timeline_document

            document["timeline"] = timeline_document(self)
        document["repairs"] = self.repairs
        return document


def replay(
    workload: Workload | str | Path,
    topology: Topology,
    *,
    algorithms: Mapping[Collective, CollectiveAlgorithm | GroupAlgorithms] | None = None,
    default_algorithm: str | None = DEFAULT_ALGORITHMS,
    groups: ProcessGroups | None = None,
    network_model: str | Mode | None = None,
    reduce_bandwidth_gbps: float | None = None,
    concurrency: str = "unlimited",
    record_links: bool = False,
    rescale: bool | None = None,
    in_step_choice: bool = True,
    catalog: AlgorithmCatalog | None = None,
    **old_names: Any,
) -> ReplayResult:
    """Time ``workload`` (a :class:`Workload` or an ET prefix) on ``topology``.

    Parameters
    ----------
    algorithms:
        Algorithm per collective type (or a :class:`~chakra_collectives.replay.algorithms.GroupAlgorithms`:
        one per group, by placement); others use the built-ins ``default_algorithm`` names
        (``"broadcast=tree,*=ring"``...; see :mod:`~chakra_collectives.replay.algorithms`).
    groups:
        Process groups for ``pg_name`` (default: every collective over all ranks).
    network_model, reduce_bandwidth_gbps:
        The network model (:mod:`~chakra_collectives.network.model`; default ``default``; old
        name: ``mode``, still accepted with a DeprecationWarning).
    concurrency:
        ``"unlimited"`` (default: dependencies are the only limit) or ``"astra-sim"`` (per rank
        at most one GPU COMP, one CPU op and one communication in flight); see
        :mod:`~chakra_collectives.replay.expand`.
    record_links:
        Keep every hop's interval (needed for a trace's link tracks).
    rescale:
        Scale given ``algorithms`` to each call's size (default: yes, except in ``astra-sim``
        mode, where they run at the size their files were written for, as ASTRA-sim runs a
        custom collective, with a warning where a call differs).
    in_step_choice:
        Time every kind of call a ``default_algorithm`` producer other than the built-in serves
        against the built-in (ring, direct...) in the step, and run the built-in where the
        producer's is not faster (:mod:`~chakra_collectives.replay.step_choice`; the result's
        ``choices``).
    catalog:
        The :class:`~chakra_collectives.replay.algorithms.AlgorithmCatalog` to take algorithms from
        instead of one made of ``algorithms``, ``default_algorithm`` and ``groups``: the caller keeps
        its syntheses and in-step choices (``workload --astra-sim`` writes what the step chose).

    Raises
    ------
    InputError
        Unreadable files, mismatched collectives or messages, too small a topology...
    ReplayDeadlock
        Nothing can progress; the error lists the stuck nodes per rank.
    """
    network_model = renamed_argument(old_names, "mode", "network_model", network_model, None) or Mode.TACOS
    if not isinstance(workload, Workload):
        with progress.task("read the workload"):
            workload = read_workload(workload)
    model = NetworkModel(topology, network_model=network_model, reduce_bandwidth_gbps=reduce_bandwidth_gbps)
    if rescale is None:
        rescale = model.mode is not Mode.ASTRA_SIM
    if catalog is None:
        catalog = AlgorithmCatalog(algorithms or {}, default=default_algorithm, written_size=not rescale, groups=None if groups is None else groups.groups)
    del algorithms  # the catalog holds them until they are expanded into tasks

    def expand(chosen: AlgorithmCatalog) -> ExpandedWorkload:
        with progress.task("expand the collectives"):
            return expand_workload(workload, model, chosen, groups or ProcessGroups.world(workload.num_ranks), concurrency=concurrency)

    def simulate(expanded: ExpandedWorkload, links: bool) -> tuple[ExpandedWorkload, Timing]:
        with progress.task(f"simulate {len(expanded.graph):,} tasks"):
            timing = run(expanded.graph, model, record_links=links)
        if not timing.finished:
            raise _deadlock(expanded, timing)
        return expanded, timing

    expanded = expand(catalog)
    if not in_step_choice or not catalog.candidates:
        del catalog  # expanded into tasks: an algorithm of millions of operations need not stay while they run
        return _summarize(*simulate(expanded, record_links), model, concurrency)
    first = simulate(expanded, record_links)
    del expanded
    expanded, timing, choices = keep_faster_in_step(catalog, lambda: simulate(expand(catalog), False), first)
    if record_links and timing is not first[1]:
        expanded, timing = simulate(expand(catalog), True)
    catalog_untried = catalog.untried
    del catalog
    result = _summarize(expanded, timing, model, concurrency)
    result.choices = choices
    result.warnings.extend(c.describe() for c in choices if c.builtin_ns < c.producer_ns or c.builtin_step_ns < c.producer_step_ns)
    if catalog_untried:
        result.warnings.append(
            f"{len(catalog_untried)} kind{'s' if len(catalog_untried) > 1 else ''} of call kept the --default-algorithm's without the in-step "
            "choice: the step with the built-in would not fit the memory limit (--max-memory)"
        )
    return result


# ---------------------------------------------------------------------------- results
def _summarize(expanded: ExpandedWorkload, timing: Timing, model: NetworkModel, concurrency: str) -> ReplayResult:
    workload = expanded.workload
    w = len(workload)
    node_end = timing.end[:w]
    node_start = timing.start[expanded.begin_task]
    total = timing.makespan
    finish = np.zeros(workload.num_ranks)
    if w:
        np.maximum.at(finish, workload.rank, node_end)
    collectives = []
    for inst in expanded.instances:
        nodes = np.asarray(inst.nodes)
        collectives.append(
            CollectiveStats(
                index=inst.index,
                collective=inst.collective,
                group=inst.group,
                members=len(inst.members),
                size_bytes=inst.size_bytes,
                algorithm=inst.algorithm,
                start_ns=float(node_start[nodes].min()),
                end_ns=float(node_end[nodes].max()),
            )
        )
    ranks = _rank_stats(workload, node_start, node_end, finish)
    links = _link_stats(model, timing, total)
    return ReplayResult(
        workload=workload.prefix,
        topology=model.topology.name,
        network_model=model.mode.value,
        concurrency=concurrency,
        total_ns=total,
        num_nodes=w,
        num_tasks=len(expanded.graph),
        ranks=ranks,
        collectives=collectives,
        links=links,
        warnings=list(expanded.warnings),
        repairs=workload.repairs.describe(),
        expanded=expanded,
        timing=timing,
    )


def union_length(starts: np.ndarray, ends: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """Total length of the union of intervals, and the merged intervals.

    >>> union_length(np.array([0.0, 5, 2]), np.array([3.0, 6, 4]))[0]
    5.0
    """
    if len(starts) == 0:
        return 0.0, starts, ends
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], np.maximum.accumulate(ends[order])
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > e[:-1]
    group = np.cumsum(new) - 1
    merged_s = s[new]
    merged_e = np.zeros(len(merged_s))
    np.maximum.at(merged_e, group, e)
    return float((merged_e - merged_s).sum()), merged_s, merged_e


def _overlap(a_s: np.ndarray, a_e: np.ndarray, b_s: np.ndarray, b_e: np.ndarray) -> float:
    """Length of (union A) ∩ (union B) for two lists of disjoint sorted intervals."""
    total, i, j = 0.0, 0, 0
    while i < len(a_s) and j < len(b_s):
        lo, hi = max(a_s[i], b_s[j]), min(a_e[i], b_e[j])
        if hi > lo:
            total += hi - lo
        if a_e[i] < b_e[j]:
            i += 1
        else:
            j += 1
    return float(total)


def _rank_stats(workload: Workload, start: np.ndarray, end: np.ndarray, finish: np.ndarray) -> list[RankStats]:
    comm_types = (NodeKind.COMM_COLL, NodeKind.COMM_SEND, NodeKind.COMM_RECV)
    comp = workload.node_type == NodeKind.COMP
    comm = np.isin(workload.node_type, comm_types)
    bounds = workload.rank_bounds()
    stats = []
    for rank in range(workload.num_ranks):
        part = slice(bounds[rank], bounds[rank + 1])
        c = comp[part]
        m = comm[part]
        compute, cs, ce = union_length(start[part][c], end[part][c])
        communication, ms, me = union_length(start[part][m], end[part][m])
        hidden = _overlap(cs, ce, ms, me)
        stats.append(RankStats(rank, float(finish[rank]), compute, communication, communication - hidden))
    return stats


def _link_stats(model: NetworkModel, timing: Timing, total: float) -> list[LinkStats]:
    use = timing.links
    order = np.lexsort((np.arange(len(use.busy_ns)), -use.busy_ns))
    links = model.topology.links
    return [
        LinkStats(
            link=int(l),
            src=links[l].src,
            dst=links[l].dst,
            busy_ns=float(use.busy_ns[l]),
            bytes=int(use.bytes[l]),
            messages=int(use.messages[l]),
            utilization=float(use.busy_ns[l] / total) if total > 0 else 0.0,
        )
        for l in order.tolist()
        if use.messages[l] > 0
    ]


def _deadlock(expanded: ExpandedWorkload, timing: Timing) -> ReplayDeadlock:
    """Name what blocks: a dependency cycle among the stuck nodes (or a node waiting for
    itself), and per rank the stuck nodes whose own dependencies are done (the frontier)."""
    workload = expanded.workload
    w = len(workload)
    stuck_nodes = timing.stuck[timing.stuck < w]
    per_rank: dict[int, list[str]] = {}
    for i in stuck_nodes.tolist():
        deps = workload.dep_idx[workload.dep_ptr[i] : workload.dep_ptr[i + 1]]
        if any(np.isnan(timing.end[d]) for d in deps.tolist()):
            continue  # waits behind another stuck node: the frontier (or the cycle) says why
        label = workload.describe(i)
        if workload.node_type[i] == NodeKind.COMM_COLL and np.isfinite(timing.start[expanded.begin_task[i]]):
            label += _absent_members(expanded, timing, i)
        per_rank.setdefault(int(workload.rank[i]), []).append(label)
    parts = []
    cycle = find_cycle(workload.dep_ptr, workload.dep_idx, stuck_nodes)
    if cycle is not None:
        rank = int(workload.rank[cycle[0]])
        names = [f"node {int(workload.node_id[i])}" for i in cycle]
        if len(cycle) == 1:
            parts.append(f"rank {rank} {names[0]} waits for itself")
        else:
            parts.append(f"cycle on rank {rank}: {' -> '.join(names + names[:1])} (each waits for the next)")
    parts += [f"rank {r}: {', '.join(labels[:2])}" for r, labels in sorted(per_rank.items())[:6]]
    more = f"; and {len(per_rank) - 6} more ranks" if len(per_rank) > 6 else ""
    error = ReplayDeadlock(f"deadlock: {len(stuck_nodes)} of {w} workload nodes never complete; {'; '.join(parts)}{more}", per_rank)
    error.cycle = [(int(workload.rank[i]), int(workload.node_id[i])) for i in cycle] if cycle is not None else []
    return error


def _absent_members(expanded: ExpandedWorkload, timing: Timing, node: int) -> str:
    """`` (started, waits inside the algorithm for rank 3)``: the members that never began it."""
    for inst in expanded.instances:
        if node in inst.nodes:
            missing = [m for m, n in zip(inst.members, inst.nodes) if not np.isfinite(timing.start[expanded.begin_task[n]])]
            if missing:
                shown = ", ".join(str(m) for m in missing[:4]) + (" ..." if len(missing) > 4 else "")
                return f" (started, waits inside the algorithm for rank{'s' if len(missing) > 1 else ''} {shown})"
    return " (started, waits inside the algorithm)"
