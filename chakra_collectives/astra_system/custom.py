"""Custom collectives as ASTRA-sim runs them (``CustomAlgorithm.cc``).

Each rank opens ``PREFIX.{position}.et`` (its position in the process group) and issues its
nodes as their dependencies finish: a SEND goes out at its own ``comm_size`` (the workload's
collective size is ignored -- a custom ET is for one size), a RECV waits for its message, a
COMP waits ``duration_micros * 1000`` ns (1 ns when 0). Ranks inside the file are positions in
the group. The collective ends on a rank when none of its nodes is left.

Nodes that become ready together are issued in node-id order.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chakra_collectives.astra_system.system import native_tag
from chakra_collectives.errors import InputError
from chakra_collectives.replay.workload import NodeType, Workload, read_workload


class CustomProgram:
    """One rank file of a custom collective: node kinds, peers, sizes, dependencies."""

    def __init__(self, files: Workload, rank: int) -> None:
        lo, hi = files.rank_bounds()[rank : rank + 2]
        self.path = files.paths[rank]
        self.ids = files.node_id[lo:hi].tolist()
        self.kind = files.node_type[lo:hi].tolist()
        self.peer = files.peer[lo:hi].tolist()
        self.size = files.comm_size[lo:hi].tolist()
        self.tag = files.tag[lo:hi].tolist()
        self.duration = files.duration_ns[lo:hi].tolist()
        count = hi - lo
        parents = [0] * count
        children: list[list[int]] = [[] for _ in range(count)]
        for i in range(count):
            deps = files.dep_idx[files.dep_ptr[lo + i] : files.dep_ptr[lo + i + 1]] - lo
            parents[i] = len(deps)
            for d in deps.tolist():
                children[d].append(i)
        for i, kind in enumerate(self.kind):
            if kind not in (NodeType.COMM_SEND, NodeType.COMM_RECV, NodeType.COMP):
                raise InputError(f"node {self.ids[i]} is {NodeType(kind).name}; a custom collective may hold only SEND, RECV and COMP (ASTRA-sim deadlocks)", path=self.path, rank=rank)
        if count == 0:
            raise InputError("the file has no nodes (ASTRA-sim cannot run it)", path=self.path, rank=rank)
        self.parents = parents
        self.children = children


class CustomLibrary:
    """Custom collective files by prefix, read once."""

    def __init__(self, base: Path | None = None) -> None:
        self.base = base
        self._files: dict[str, Workload] = {}
        self._programs: dict[tuple[str, int], CustomProgram] = {}

    def program(self, prefix: str, position: int) -> CustomProgram:
        key = (prefix, position)
        found = self._programs.get(key)
        if found is None:
            files = self._files.get(prefix)
            if files is None:
                path = Path(prefix)
                if self.base is not None and not path.is_absolute():
                    path = self.base / path
                files = self._files[prefix] = read_workload(path)
            if not 0 <= position < files.num_ranks:
                raise InputError(f"custom collective {prefix} has {files.num_ranks} rank files; position {position} has none")
            found = self._programs[key] = CustomProgram(files, position)
        return found


class CustomCollective:
    """One rank's run of a custom collective, as one phase of one stream."""

    collective = "custom"
    local = False

    def __init__(self, program: CustomProgram, rank: int, members: list[int] | None, data_size: int) -> None:
        self.program = program
        self.rank = rank
        self.members = members
        self.data_size = self.final_size = data_size
        self.waiting = list(program.parents)
        self.free: set[int] = {i for i, p in enumerate(program.parents) if p == 0}
        self.ongoing = 0
        self.stream: Any = None

    def _real(self, position: int) -> int:
        return position if self.members is None else self.members[position]

    def run(self, event: str) -> None:
        self._issue_free()

    def _issue_free(self) -> None:
        program = self.program
        kernel = self.stream.system.kernel
        for i in sorted(self.free, key=program.ids.__getitem__):
            self.free.discard(i)
            self.ongoing += 1
            kind = program.kind[i]
            if kind == NodeType.COMM_SEND:
                kernel.send(self.rank, self._real(program.peer[i]), program.size[i], native_tag(program.tag[i]), lambda i=i: self._finished(i))
            elif kind == NodeType.COMM_RECV:
                kernel.recv(self.rank, self._real(program.peer[i]), program.size[i], native_tag(program.tag[i]), lambda i=i: self._finished(i))
            else:
                runtime = int(program.duration[i]) or 1
                kernel.after(self.rank, runtime, self._finished, i)

    def _finished(self, node: int) -> None:
        self.ongoing -= 1
        for child in self.program.children[node]:
            self.waiting[child] -= 1
            if self.waiting[child] == 0:
                self.free.add(child)
        self._issue_free()
        if self.ongoing == 0 and not self.free:
            self.stream.done()
