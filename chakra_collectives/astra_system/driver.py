"""Run a workload the way ASTRA-sim's analytical binaries do: workload, system layer and network.

Each rank's workload layer (``Workload.cc``, ``HardwareResource.cc``) issues its nodes as
their dependencies (data and control) finish, in node-id order, with at most one GPU COMP, one
CPU op and one communication (collective or send; receives are free) in flight. A COMP takes
``duration_micros * 1000`` ns (1 ns when 0); a COMM_COLL becomes a collective of the system
layer (:mod:`~chakra_collectives.astra_system.system`); a SEND / RECV goes straight to the
network. A rank is finished when it has nothing left to issue or wait for; ASTRA-sim prints
``sys[i] finished, T cycles`` then, and the run's time is the largest T.

>>> import tempfile, pathlib
>>> from chakra_collectives.converters.astra_sim import AnalyticalNetwork, Dimension
>>> from chakra_collectives.converters.astra_sim.system import SystemConfig
>>> from chakra_collectives.workload import microbenchmark
>>> ring8 = AnalyticalNetwork((Dimension("Ring", 8, 50.0, 500.0),))
>>> system = SystemConfig.from_dict({"preferred-dataset-splits": 1, "all-reduce-implementation": ["ring"],
...                                  "local-mem-bw": 50})
>>> with tempfile.TemporaryDirectory() as tmp:
...     _ = microbenchmark("all-reduce", 8, 2**20).write(pathlib.Path(tmp) / "ar")
...     result = simulate(pathlib.Path(tmp) / "ar", ring8, system)
>>> result.makespan_ns     # ASTRA-sim: 14 x 2,941 network + 15 x 10 endpoint + 7 x 7,863 reductions
96365
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import numpy as np

from chakra_collectives.ir.workload import NO_UNIT, UNITS_PER_RANK, NodeKind, Workload, collective_name, execution_units, node_type_name
from chakra_collectives.astra_system.backends import make_backend
from chakra_collectives.astra_system.custom import CustomCollective, CustomLibrary
from chakra_collectives.astra_system.kernel import Kernel
from chakra_collectives.astra_system.system import Group, RankSystem, native_tag
from chakra_collectives.converters.astra_sim import AnalyticalNetwork
from chakra_collectives.converters.astra_sim.system import SystemConfig
from chakra_collectives.converters.chakra_et.workload_reader import read_workload
from chakra_collectives.errors import InputError
from chakra_collectives.replay.groups import ProcessGroups


COLLECTIVE_TYPES = {0: "all-reduce", 2: "all-gather", 6: "all-to-all", 7: "reduce-scatter"}
BROADCAST = 5


@dataclass
class AstraSimRun:
    """What the run printed, and when each node ran."""

    finish_ns: list[int | None]
    """Per rank, ``sys[i] finished, T cycles`` (None: the rank never finished)."""
    exposed_ns: list[int | None]
    """Per rank, T minus the rank's compute time (ASTRA-sim's "exposed communication")."""
    start_ns: np.ndarray
    end_ns: np.ndarray
    """Per workload node (NaN where it never started / ended)."""
    backend: str
    warnings: list[str] = field(default_factory=list)
    events: int = 0
    """Network events the run processed (0 when timed level by level)."""
    method: str = "events"
    """How it was timed: ``events`` (the event simulation) or ``levels`` (level by level:
    :mod:`~chakra_collectives.astra_system.levels`)."""

    @property
    def makespan_ns(self) -> int:
        """The largest finish time: what ASTRA-sim's run reports."""
        done = [t for t in self.finish_ns if t is not None]
        return max(done) if done else 0

    @property
    def finished(self) -> bool:
        return all(t is not None for t in self.finish_ns)


class RankWorkload:
    """One rank's workload layer: dependency resolution and the hardware-resource rule."""

    def __init__(self, run: "_Run", rank: int) -> None:
        w = run.workload
        lo, hi = (int(b) for b in w.rank_bounds()[rank : rank + 2])
        self.run = run
        self.rank = rank
        self.lo = lo
        self.ids = w.node_id[lo:hi].tolist()
        self.kind = w.node_type[lo:hi].tolist()
        self.unit = execution_units(w)[lo:hi].tolist()
        count = hi - lo
        parents = [0] * count
        children: list[list[int]] = [[] for _ in range(count)]
        for i in range(count):
            deps = w.dep_idx[w.dep_ptr[lo + i] : w.dep_ptr[lo + i + 1]] - lo
            parents[i] = len(deps)
            for d in deps.tolist():
                children[d].append(i)
        self.waiting = parents
        self.children = children
        self.free = {i for i in range(count) if parents[i] == 0}
        self.ongoing = 0
        self.busy = [0] * UNITS_PER_RANK
        self.compute_ns = 0
        self.finished_at: int | None = None
        self.system: RankSystem = run.systems[rank]
        self.groups: dict[int, Group] = {gid: Group(gid, members, rank) for gid, members in run.groups.items()}

    def fire(self) -> None:
        self._issue_free()
        self._check_finished()

    def _issue_free(self) -> None:
        for i in sorted(self.free, key=self.ids.__getitem__):
            slot = self.unit[i]
            if slot != NO_UNIT and self.busy[slot]:
                continue
            if slot != NO_UNIT:
                self.busy[slot] = 1
            self.free.discard(i)
            self.ongoing += 1
            self.run.start[self.lo + i] = self.run.kernel.now
            self._issue(i)

    def _issue(self, i: int) -> None:
        run, w, g = self.run, self.run.workload, self.lo + i
        kind = self.kind[i]
        kernel = run.kernel
        if kind == NodeKind.COMP:
            runtime = int(w.duration_ns[g]) or 1
            self.compute_ns += runtime
            kernel.after(self.rank, runtime, self._done, i)
        elif kind == NodeKind.COMM_COLL:
            self._collective(i)
        elif kind == NodeKind.COMM_SEND:
            kernel.send(self.rank, int(w.peer[g]), int(w.comm_size[g]), native_tag(int(w.tag[g])), lambda: self._done(i))
        elif kind == NodeKind.COMM_RECV:
            kernel.recv(self.rank, int(w.peer[g]), int(w.comm_size[g]), native_tag(int(w.tag[g])), lambda: self._done(i))
        else:
            raise InputError(f"{node_type_name(kind)} nodes are not modeled (ASTRA-sim's current build aborts on METADATA; MEM_LOAD/STORE need a remote-memory model)", **w.where(g))

    def _collective(self, i: int) -> None:
        run, w, g = self.run, self.run.workload, self.lo + i
        comm_type = int(w.comm_type[g])
        where = w.where(g)
        label = f"rank {self.rank} node {self.ids[i]}"
        if comm_type == BROADCAST:
            from chakra_collectives.astra_system.system import DataSet

            dataset = DataSet(1)
            dataset.on_done = lambda: self._done(i)
            runtime = int(w.duration_ns[g]) or 1
            run.kernel.after(self.rank, runtime, dataset.stream_finished)
            return
        collective = COLLECTIVE_TYPES.get(comm_type)
        if collective is None:
            raise InputError(f"ASTRA-sim does not run {collective_name(comm_type)} collectives (it throws 'Unsupported collective comm type')", **where)
        group = None
        name = w.pg_name[g]
        if name not in (None, "", "0"):
            try:
                group = self.groups[int(name)]
            except (ValueError, KeyError):
                if not self.groups:
                    raise InputError(f"process group {name!r}: no communicator-group file defines it (give --comm-groups FILE; ASTRA-sim exits)", **where) from None
                raise InputError(f"process group {name!r} is not in the communicator-group file (ASTRA-sim exits)", **where) from None
        involved = w.involved_dim[g]
        try:
            dataset = self.system.generate(collective, int(w.comm_size[g]), None if involved is None else list(involved), group, 0, label)
        except InputError as exc:
            raise exc.located(**where) from None
        dataset.on_done = lambda: self._done(i)

    def _done(self, i: int) -> None:
        if self.finished_at is not None:
            return
        slot = self.unit[i]
        if slot != NO_UNIT:
            self.busy[slot] = 0
        self.run.end[self.lo + i] = self.run.kernel.now
        self.ongoing -= 1
        for child in self.children[i]:
            self.waiting[child] -= 1
            if self.waiting[child] == 0:
                self.free.add(child)
        self._issue_free()
        self._check_finished()

    def _check_finished(self) -> None:
        if not self.free and self.ongoing == 0 and self.finished_at is None:
            self.finished_at = self.run.kernel.now


class _Run:
    def __init__(self, workload: Workload, network: AnalyticalNetwork, config: SystemConfig, backend: str, groups: dict[int, list[int]], library: CustomLibrary) -> None:
        dims = [d.npus for d in network.dimensions]
        total = int(np.prod(dims))
        self.workload = workload
        self.groups = groups
        self.kernel = Kernel(total, make_backend(backend, network))
        self.kernel.backend.kernel = self.kernel
        self.library = library
        self.systems = [RankSystem(r, self.kernel, config, dims, custom=self._custom) for r in range(total)]
        self.start = np.full(len(workload), np.nan)
        self.end = np.full(len(workload), np.nan)
        self.ranks = [RankWorkload(self, r) for r in range(total)]

    def _custom(self, collective: str, rank: int, position: int, group: Group | None, size: int, label: str) -> CustomCollective:
        custom = self.systems[rank].config.custom
        prefix = custom.get(f"{collective}@{size}", custom[collective])  # "@size": a copy written for that size
        program = self.library.program(prefix, position, len(self.systems) if group is None else len(group.members))
        return CustomCollective(program, rank, None if group is None else group.members, size)


def simulate(
    workload: str | Path | Workload,
    network: AnalyticalNetwork,
    system: SystemConfig,
    *,
    backend: str = "aware",
    comm_groups: dict[int, list[int]] | None = None,
    custom_base: Path | None = None,
    custom_read: Mapping[str, Workload] | None = None,
    method: str = "auto",
) -> AstraSimRun:
    """Run ``workload`` on ``network`` under ``system``, as ASTRA-sim's ``backend`` binary would.

    ``custom_base`` is the directory custom-collective prefixes are relative to (ASTRA-sim: the
    working directory); ``custom_read`` maps prefixes to their files already read (as the
    system's ``*-implementation-custom`` names them). Workloads of custom collectives whose
    messages never wait for a link are timed level by level
    (:mod:`~chakra_collectives.astra_system.levels`), the rest event by event; both give the
    same times. ``method="events"`` always runs the event simulation (to compare the two).
    """
    from chakra_collectives.astra_system.levels import level_timed  # levels builds on this module's types

    if not isinstance(workload, Workload):
        workload = read_workload(workload)
    total = int(np.prod([d.npus for d in network.dimensions]))
    if workload.num_ranks != total:
        raise InputError(f"the workload has {workload.num_ranks} ranks and the network {total} NPUs; ASTRA-sim needs one rank file per NPU", path=workload.prefix)
    library = CustomLibrary(custom_base, custom_read)
    if method not in ("auto", "events"):
        raise ValueError(f"method is auto or events, not {method!r}")
    timed = level_timed(workload, network, system, backend, comm_groups or {}, library) if method == "auto" else None
    if timed is not None:
        return AstraSimRun(finish_ns=timed.finish_ns, exposed_ns=timed.exposed_ns, start_ns=timed.start_ns, end_ns=timed.end_ns, backend=backend, method="levels")
    run = _Run(workload, network, system, backend, comm_groups or {}, library)
    for rank in run.ranks:
        rank.fire()
    run.kernel.run()
    finish = [r.finished_at for r in run.ranks]
    exposed = [None if t is None else t - r.compute_ns for t, r in zip(finish, run.ranks)]
    warnings = []
    stuck = [r.rank for r in run.ranks if r.finished_at is None]
    if stuck:
        warnings.append(f"ranks {stuck[:8]}{'...' if len(stuck) > 8 else ''} never finish (ASTRA-sim prints nothing for them and exits 0)")
    return AstraSimRun(finish_ns=finish, exposed_ns=exposed, start_ns=run.start, end_ns=run.end, backend=backend, warnings=warnings, events=run.kernel.events)


def read_comm_groups(path: str | Path, num_ranks: int) -> dict[int, list[int]]:
    """ASTRA-sim's communicator-group file (``{"1": [ranks...], ...}``, read by
    :class:`~chakra_collectives.replay.ProcessGroups`) keyed as ASTRA-sim keys it: by number,
    ``0`` being reserved for all ranks."""
    groups: dict[int, list[int]] = {}
    for name, members in ProcessGroups.load(path, num_ranks=num_ranks).groups.items():
        try:
            number = int(name)
        except ValueError:
            raise InputError(f"group {name!r}: ASTRA-sim keys communicator groups by number", path=path) from None
        if number <= 0:
            raise InputError(f"group {name!r}: ASTRA-sim reserves 0 for all ranks; use 1, 2, ...", path=path)
        groups[number] = list(members)
    return groups
