"""Custom collectives as ASTRA-sim runs them (``CustomAlgorithm.cc``).

Each rank opens ``PREFIX.{position}.et`` (its position in the process group) and issues its
nodes as their dependencies finish: a SEND goes out at its own ``comm_size`` (the workload's
collective size is ignored -- a custom ET is for one size), a RECV waits for its message, a
COMP waits ``duration_micros * 1000`` ns (1 ns when 0). Ranks inside the file are positions in
the group. The collective ends on a rank when none of its nodes is left.

Nodes that become ready together are issued in the order ASTRA-sim's ET feeder keeps them: a
``std::unordered_set`` (:mod:`~chakra_collectives.astra_system.hashorder`), filled from the
dependency maps the feeder builds while reading the file. On a shared link (a switch) that order
decides which message is served first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping


from chakra_collectives.ir.workload import NodeKind, Workload, node_type_name
from chakra_collectives.astra_system.hashorder import HashOrder
from chakra_collectives.astra_system.system import native_tag
from chakra_collectives.converters.chakra_et.workload_reader import read_workload
from chakra_collectives.errors import InputError


class CustomProgram:
    """One rank file of a custom collective: node kinds, peers, sizes, dependencies."""

    def __init__(self, files: Workload, rank: int, bounds: list[int] | None = None) -> None:
        lo, hi = (files.rank_bounds().tolist() if bounds is None else bounds)[rank : rank + 2]
        self.path = files.paths[rank]
        self.ids = files.node_id[lo:hi].tolist()
        self.kind = files.node_type[lo:hi].tolist()
        self.peer = files.peer[lo:hi].tolist()
        self.size = files.comm_size[lo:hi].tolist()
        self.tag = files.tag[lo:hi].tolist()
        self.duration = files.duration_ns[lo:hi].tolist()
        self.index = {node_id: i for i, node_id in enumerate(self.ids)}
        count = hi - lo
        position = {node_id: i for i, node_id in enumerate(self.ids)}
        # the feeder's dependency layer: node -> distinct parents, parent -> children (hash order)
        node_keys = HashOrder()  # child_map_parent's keys, in its iteration order
        parents: dict[int, set[int]] = {}
        children: dict[int, HashOrder] = {}
        dep_ptr = files.dep_ptr[lo : hi + 1].tolist()
        dep_idx = files.dep_idx[dep_ptr[0] : dep_ptr[-1]].tolist()  # one conversion, sliced per node below
        first = dep_ptr[0]
        for i in range(count):
            node = self.ids[i]
            deps = HashOrder()
            for d in dep_idx[dep_ptr[i] - first : dep_ptr[i + 1] - first]:
                deps.add(self.ids[d - lo])
            for key in (node, *deps):
                if key not in parents:
                    node_keys.add(key)
                    parents[key] = set()
                    children[key] = HashOrder()
            for parent in deps:
                parents[node].add(parent)
                children[parent].add(node)
        for i, kind in enumerate(self.kind):
            if kind not in (NodeKind.COMM_SEND, NodeKind.COMM_RECV, NodeKind.COMP):
                raise InputError(f"node {self.ids[i]} is {node_type_name(kind)}; a custom collective may hold only SEND, RECV and COMP (ASTRA-sim deadlocks)", path=self.path, rank=rank)
        if count == 0:
            raise InputError("the file has no nodes (ASTRA-sim cannot run it)", path=self.path, rank=rank)
        self.parent_count = [len(parents[node]) for node in self.ids]
        self.children = [[position[c] for c in children[node]] for node in self.ids]
        self.initial = [position[node] for node in node_keys if not parents[node]]
        """Positions of the dependency-free nodes, in the order the feeder inserts them."""


class CustomLibrary:
    """Custom collective files by prefix, read once; ``known`` holds prefixes already read (or
    built as they read: :func:`~chakra_collectives.converters.chakra_et.written_workload.written_workload`)."""

    def __init__(self, base: Path | None = None, known: Mapping[str, Workload] | None = None) -> None:
        self.base = base
        self._files: dict[str, Workload] = dict(known or {})
        self._programs: dict[tuple[str, int], CustomProgram] = {}
        self._bounds: dict[str, list[int]] = {}

    def files(self, prefix: str, num_ranks: int) -> Workload:
        """The custom collective at ``prefix``, for a call over ``num_ranks`` ranks (the files must
        hold one program per rank of the call)."""
        files = self._files.get(prefix)
        if files is None:
            path = Path(prefix)
            if self.base is not None and not path.is_absolute():
                path = self.base / path
            files = self._files[prefix] = read_workload(path)
        if files.num_ranks != num_ranks:
            raise InputError(
                f"custom collective {prefix} has {files.num_ranks} rank files, but this call runs over {num_ranks} ranks "
                "(a process group's collective needs an algorithm written for the group)"
            )
        return files

    def program(self, prefix: str, position: int, num_ranks: int) -> CustomProgram:
        """Position ``position``'s program of the custom collective at ``prefix``, for a call over
        ``num_ranks`` ranks."""
        key = (prefix, position)
        found = self._programs.get(key)
        if found is None:
            files = self.files(prefix, num_ranks)
            bounds = self._bounds.get(prefix)
            if bounds is None:
                bounds = self._bounds[prefix] = files.rank_bounds().tolist()  # once per collective, not per rank
            found = self._programs[key] = CustomProgram(files, position, bounds)
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
        self.waiting = list(program.parent_count)
        self.free = HashOrder()  # node ids, as the feeder's set
        for i in program.initial:
            self.free.add(program.ids[i])
        self.ongoing = 0
        self.stream: Any = None

    def _real(self, position: int) -> int:
        return position if self.members is None else self.members[position]

    def run(self, event: str) -> None:
        self._issue_free()

    def _issue_free(self) -> None:
        program = self.program
        kernel = self.stream.system.kernel
        for node in list(self.free):
            self.free.discard(node)
            self.ongoing += 1
            i = program.index[node]
            kind = program.kind[i]
            if kind == NodeKind.COMM_SEND:
                kernel.send(self.rank, self._real(program.peer[i]), program.size[i], native_tag(program.tag[i]), lambda i=i: self._finished(i))
            elif kind == NodeKind.COMM_RECV:
                kernel.recv(self.rank, self._real(program.peer[i]), program.size[i], native_tag(program.tag[i]), lambda i=i: self._finished(i))
            else:
                runtime = int(program.duration[i]) or 1
                kernel.after(self.rank, runtime, self._finished, i)

    def _finished(self, node: int) -> None:
        self.ongoing -= 1
        program = self.program
        for child in program.children[node]:
            self.waiting[child] -= 1
            if self.waiting[child] == 0:
                self.free.add(program.ids[child])
        self._issue_free()
        if self.ongoing == 0 and not len(self.free):
            self.stream.done()
