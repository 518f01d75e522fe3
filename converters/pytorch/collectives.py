"""Collective calls in a host execution trace: type, bytes, sequence number, process group.

A ``torch.distributed`` call appears as a small subtree: the dispatcher op (``c10d::allreduce_``,
``c10d::broadcast_``, ``c10d::_allgather_base_``, ``c10d::alltoall_base_``...), inside it the
``record_param_comms`` record of ProcessGroupNCCL, and inside that ``nccl:all_reduce`` (the
record function around the NCCL launch). The outermost of these is the call; the
``record_param_comms`` record says the most:

* inputs ``[tensors, seq, pg, rank, collective name, in splits, out splits, ...]`` -- ``pg`` is
  ``[pg_name, pg_desc]`` (1.0.3+), a backend id matching ``## process_group:init ##`` (1.0.2)
  or an opaque pointer (1.0.1); schema 1.0.2 appends the group size, 1.1.0 the global rank
  start, stride and group size;
* attributes (1.1.0+): ``collective_name``, ``dtype``, ``in_msg_nelems``, ``out_msg_nelems``,
  ``pg_name``, ``pg_size``, ``global_rank_start``, ``global_rank_stride``;
* ``wait`` records (collective name ``wait``, first input the sequence number of the work)
  mark where a stream waits for a collective.

Bytes are ``numel x itemsize`` of the tensors (or ``nelems x dtype`` from the attributes). The
size written is ``comm_size`` as ASTRA-sim reads it, each rank's input: an all-gather's shard
(the replayer runs it at ``N`` x that), reduce-scatter's whole input, the buffer otherwise.

>>> from chakra_collectives.converters.pytorch.host_trace import parse_host_trace
>>> t = [14, 15, 0, 256, 4, "cuda:0"]
>>> host = parse_host_trace({"schema": "1.0.2-chakra.0.0.4", "nodes": [
...   {"id": 2, "name": "[pytorch|profiler|execution_trace|thread]", "ctrl_deps": 1, "inputs": {}, "outputs": {}, "attrs": []},
...   {"id": 24, "name": "c10d::allreduce_", "ctrl_deps": 2, "attrs": [],
...    "inputs": {"values": [[t]], "types": ["GenericList[Tensor(float)]"]}, "outputs": {"values": [], "types": []}},
...   {"id": 30, "name": "record_param_comms", "ctrl_deps": 24, "attrs": [], "outputs": {"values": [], "types": []},
...    "inputs": {"values": [[t], 12, 82149104, 0, "allreduce", [], [], 2],
...               "types": ["GenericList[Tensor(float)]", "Int", "Int", "Int", "String", "GenericList[]", "GenericList[]", "Int"]}}]},
...   "h.json")
>>> calls, waits = find_collectives(host)
>>> c = calls[0]
>>> (c.kind, c.size_bytes, c.seq, c.group_size, c.root.name)
('all-reduce', 1024, 12, 2, 'c10d::allreduce_')
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from chakra_collectives.converters.pytorch.fields import unicode_text
from chakra_collectives.converters.pytorch.host_trace import HostOp, HostTrace
from chakra_collectives.converters.pytorch.values import scalar_type_bytes, tensor_bytes
from chakra_collectives.errors import InputError
from chakra_collectives.limits import MAX_NPUS

_KINDS = {
    "allreduce": "all-reduce", "allreducecoalesced": "all-reduce", "allreducebase": "all-reduce",
    "broadcast": "broadcast", "reduce": "reduce",
    "allgather": "all-gather", "allgatherbase": "all-gather", "allgatherintotensor": "all-gather",
    "allgatherintotensorcoalesced": "all-gather", "allgathercoalesced": "all-gather",
    "reducescatter": "reduce-scatter", "reducescatterbase": "reduce-scatter", "reducescattertensor": "reduce-scatter",
    "reducescattertensorcoalesced": "reduce-scatter",
    "alltoall": "all-to-all", "alltoallv": "all-to-all", "alltoallbase": "all-to-all",
    "barrier": "barrier", "send": "send", "recv": "recv", "recvanysource": "recv",
}
"""Normalized ``torch.distributed`` / NCCL collective names -> what the workload writes."""

NON_CALLS = frozenset({"wait", "coalesced", "startcoalescing", "endcoalescing", "init"})
_KERNEL_KIND = re.compile(r"nccl(?:Dev)?Kernel_(AllReduce|Broadcast|AllGather|ReduceScatter|Reduce|SendRecv)", re.I)


def normalize(name: str) -> str:
    """``c10d::_allgather_base_`` -> ``allgatherbase``; ``nccl:all_reduce`` -> ``allreduce``."""
    text = name.split("::")[-1].split(":")[-1]
    return re.sub(r"[^a-z0-9]", "", text.lower())


def kind_of(name: str) -> str | None:
    """Workload kind of a collective name (``all-reduce``, ``send``...), ``None`` if not one."""
    return _KINDS.get(normalize(name))


def kernel_kind(kernel_name: str) -> str | None:
    """Kind from an NCCL kernel name (``ncclKernel_AllReduce_RING_LL_Sum_float``); ``SendRecv`` -> ``sendrecv``."""
    found = _KERNEL_KIND.search(kernel_name)
    if not found:
        return None
    word = found.group(1).lower()
    return "sendrecv" if word == "sendrecv" else _KINDS.get(word)


def is_comm_op(op: HostOp) -> bool:
    return op.name.startswith("c10d::") or op.name == "record_param_comms" or op.name.startswith("nccl:")


@dataclass(eq=False)
class CollectiveCall:
    """One ``torch.distributed`` call on one rank."""

    root: HostOp
    name: str
    """The collective's own name (``allreduce``, ``all_to_allv``, ``_allgather_base``...)."""
    kind: str | None
    """``all-reduce``... ``barrier``, ``send``, ``recv``; ``None``: not replayable (gather...)."""
    in_bytes: int | None = None
    out_bytes: int | None = None
    seq: int | None = None
    pg_name: str | None = None
    pg_ranks: tuple[int, ...] | None = None
    group_size: int | None = None
    rank: int | None = None
    peer: int | None = None
    """Send: destination, recv: source (group rank) of a point-to-point call."""
    tag: int = 0
    op_ids: set[int] = field(default_factory=set)

    @property
    def size_bytes(self) -> int:
        """``comm_size`` as ASTRA-sim reads it: each rank's input (an all-gather's shard)."""
        inp, out, n = self.in_bytes, self.out_bytes, self.group_size
        if self.kind == "barrier":
            return 0
        if self.kind == "all-gather":
            return inp if inp else (out or 0) // (n or 1)
        if self.kind == "reduce-scatter":
            return inp if inp else (out or 0) * (n or 1)
        if self.kind == "all-to-all":
            return max(inp or 0, out or 0)
        return inp if inp else (out or 0)

    def absorb_kernel_args(self, args: dict[str, Any], where: str = "NCCL kernel") -> None:
        """Fill what the host trace lacks from an NCCL kernel's Kineto arguments."""
        element = scalar_type_bytes(text_of(args.get("dtype")) or "") or 0
        if self.in_bytes is None and _is_int(args.get("In msg nelems")) and element:
            self.in_bytes = args["In msg nelems"] * element
        if self.out_bytes is None and _is_int(args.get("Out msg nelems")) and element:
            self.out_bytes = args["Out msg nelems"] * element
        if self.group_size is None and _is_int(args.get("Group size")):
            self.group_size = checked_group_size(args["Group size"], where, "Group size")
        if self.pg_name is None and text_of(args.get("Process Group Name")):
            self.pg_name = text_of(args["Process Group Name"])
        if self.pg_ranks is None:
            self.pg_ranks = parse_ranks(args.get("Process Group Ranks"))
        if self.kind is None and text_of(args.get("Collective name")):
            self.kind = kind_of(text_of(args["Collective name"]) or "")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def text_of(value: Any) -> str | None:
    """A name field: a string, or a number written as one (``pg_name`` 0); else ``None``."""
    if isinstance(value, str):
        return unicode_text(value)
    return str(value) if _is_int(value) else None


def checked_group_size(value: Any, where: str, name: str) -> int:
    """A process group's size: 1 to ``MAX_NPUS`` ranks, or an :class:`InputError` (place filled in by the caller)."""
    if not _is_int(value) or not 1 <= value <= MAX_NPUS:
        raise InputError(f"{where}: {name} is {value!r:.40}; a process group has 1 to {MAX_NPUS:,} ranks")
    return value


def parse_ranks(text: Any) -> tuple[int, ...] | None:
    """``"[0, 1, 2, 3]"`` -> ``(0, 1, 2, 3)``; truncated lists (``"[0, 1, ..., 63]"``) -> ``None``.

    >>> parse_ranks("[0, 2, 4]"), parse_ranks("[0, 1, ..., 63]"), parse_ranks([1, 3])
    ((0, 2, 4), None, (1, 3))
    """
    if isinstance(text, list) and all(_is_int(r) for r in text):
        ranks = tuple(text)
    elif not isinstance(text, str) or "..." in text:
        return None
    else:
        ranks = tuple(int(n) for n in re.findall(r"-?\d{1,19}", text))
    return ranks if ranks and all(0 <= r < MAX_NPUS for r in ranks) else None


@dataclass(eq=False)
class WaitRecord:
    """A ``wait`` on the work of collective ``seq``: the current stream waits for it."""

    op: HostOp
    seq: int | None


def find_collectives(host: HostTrace) -> tuple[list[CollectiveCall], list[WaitRecord]]:
    """Every collective call (outermost communication op of its subtree) and wait, in call order."""
    calls: list[CollectiveCall] = []
    waits: list[WaitRecord] = []
    by_id = host.by_id
    for op in host.ops:
        if op.is_gpu or not is_comm_op(op):
            continue
        parent = by_id.get(op.parent)
        if parent is not None and parent is not op and _inside_comm(parent, by_id):
            continue
        subtree = _subtree(op)
        record = next((o for o in subtree if o.name == "record_param_comms"), None)
        fields = _record_fields(record) if record is not None else {}
        name = fields.get("name") or _name_from_ops(subtree)
        if normalize(name) == "wait":
            waits.append(WaitRecord(op, fields.get("seq")))
            continue
        if normalize(name) in NON_CALLS:
            continue
        try:
            calls.append(_call(op, name, subtree, record, fields, host))
        except InputError as error:
            raise InputError(f"{error.message} (in {op.name})", path=host.path, node=(record or op).id) from None
    return calls, waits


def _inside_comm(op: HostOp, by_id: dict[int, HostOp]) -> bool:
    seen = 0
    while op is not None and seen < 10_000:
        if is_comm_op(op):
            return True
        parent = by_id.get(op.parent)
        if parent is op:
            return False
        op, seen = parent, seen + 1
    return False


def _subtree(op: HostOp) -> list[HostOp]:
    found, stack = [], [op]
    while stack:
        current = stack.pop()
        found.append(current)
        stack.extend(current.children)
    return sorted(found, key=lambda o: o.id)


def _name_from_ops(ops: list[HostOp]) -> str:
    for prefix in ("nccl:", "c10d::"):
        for o in ops:
            if o.name.startswith(prefix):
                return o.name
    return ops[0].name


def _record_fields(record: HostOp) -> dict[str, Any]:
    """Fields of a ``record_param_comms`` record, from its attributes or its positional inputs."""
    values, attrs = record.input_values, record.attrs
    fields: dict[str, Any] = {}
    strings = [i for i, v in enumerate(values) if isinstance(v, str) and not v.startswith("<")]
    s = strings[0] if strings else None
    if s is not None:
        fields["name"] = values[s]
    if isinstance(attrs.get("collective_name"), str) and attrs["collective_name"]:
        fields["name"] = attrs["collective_name"]
    if s is not None and s >= 3:
        seq, pg, rank = values[s - 3], values[s - 2], values[s - 1]
        fields["seq"] = seq if _is_int(seq) else None
        fields["pg"] = pg
        fields["rank"] = rank if _is_int(rank) and 0 <= rank < MAX_NPUS else None
        tail = values[s + 1 :]
        if len(tail) == 3 and isinstance(tail[2], int):  # 1.0.2: splits, then the group size
            fields["group_size"] = tail[2]
        elif len(tail) >= 5 and all(isinstance(v, int) for v in tail[2:5]):  # 1.1.0: start, stride, size
            fields["rank_start"], fields["rank_stride"], fields["group_size"] = tail[2:5]
    for key, target in (("pg_size", "group_size"), ("global_rank_start", "rank_start"), ("global_rank_stride", "rank_stride")):
        if _is_int(attrs.get(key)):
            fields[target] = attrs[key]
    if text_of(attrs.get("pg_name")):
        fields["pg"] = [text_of(attrs["pg_name"])]
    element = scalar_type_bytes(text_of(attrs.get("dtype")) or "") if "dtype" in attrs else None
    if element and _is_int(attrs.get("in_msg_nelems")):
        fields["in_bytes"] = attrs["in_msg_nelems"] * element
        if _is_int(attrs.get("out_msg_nelems")):
            fields["out_bytes"] = attrs["out_msg_nelems"] * element
    return fields


def _call(root: HostOp, name: str, subtree: list[HostOp], record: HostOp | None, fields: dict[str, Any], host: HostTrace) -> CollectiveCall:
    call = CollectiveCall(root=root, name=normalize(name), kind=kind_of(name), op_ids={o.id for o in subtree})
    call.seq, call.rank = fields.get("seq"), fields.get("rank")
    if fields.get("group_size") is not None:
        call.group_size = checked_group_size(fields["group_size"], "record_param_comms", "the group size")
    if "in_bytes" in fields:
        call.in_bytes, call.out_bytes = fields["in_bytes"], fields.get("out_bytes")
    elif record is not None:
        s = next((i for i, v in enumerate(record.input_values) if isinstance(v, str)), len(record.input_values))
        call.in_bytes = tensor_bytes(record.input_values[:s], record.input_types[:s]) or None
        call.out_bytes = tensor_bytes(record.output_values, record.output_types) or None
    if call.in_bytes is None:
        dispatcher = subtree[0]
        call.in_bytes = tensor_bytes(dispatcher.input_values, dispatcher.input_types) or None
    call.pg_name, known_ranks, known_size = _process_group(fields.get("pg"), host)
    if call.group_size is None and known_size is not None:
        call.group_size = checked_group_size(known_size, "## process_group:init ##", "group_size")
    if "rank_start" in fields and call.group_size:
        call.pg_ranks = _strided_ranks(fields["rank_start"], fields.get("rank_stride", 1), call.group_size)
    if call.pg_ranks is None and known_ranks:
        call.pg_ranks = known_ranks
    if call.group_size is None and call.pg_ranks:
        call.group_size = len(call.pg_ranks)
    if call.kind in ("send", "recv"):
        dispatcher = subtree[0]
        ints = [v for v in dispatcher.input_values if isinstance(v, int) and not isinstance(v, bool)]
        if len(ints) >= 2:  # send(tensors, pg, dstRank, tag) / recv_(tensors, pg, srcRank, tag)
            call.peer, call.tag = ints[0], ints[1]
    return call


def _strided_ranks(start: int, stride: int, size: int) -> tuple[int, ...] | None:
    """``global_rank_start`` + ``global_rank_stride`` x i for the group's ``size`` ranks, all valid
    ranks; ``None`` when the stride is negative (PyTorch writes -1 for groups that are not strided)."""
    if stride < 0:
        return None
    last = start + stride * (size - 1)
    if not (0 <= start < MAX_NPUS and 0 <= last < MAX_NPUS):
        raise InputError(f"global ranks {start} + {stride} x (0..{size - 1}) are not ranks from 0 to {MAX_NPUS - 1:,}")
    return tuple(start + stride * i for i in range(size))


def _process_group(pg: Any, host: HostTrace) -> tuple[str | None, tuple[int, ...] | None, int | None]:
    """``(pg_name, ranks, size)`` of the ``pg`` field: a name list, a name, or a backend id."""
    name = None
    if isinstance(pg, list) and pg and isinstance(pg[0], str):
        name = pg[0] or None
    elif isinstance(pg, str):
        name = pg or None
    entry = None
    for group in host.process_groups:
        if name is not None and text_of(group.get("pg_name")) == name:
            entry = group
        elif name is None and _is_int(pg) and group.get("backend_id") == pg:
            entry = group
        if entry is not None:
            break
    if entry is None:
        return name, None, None
    size = entry.get("group_size")
    return text_of(entry.get("pg_name")), parse_ranks(entry.get("ranks")), size if _is_int(size) else None
