"""Read a PyTorch execution trace (the "host trace" of ``ExecutionTraceObserver``), any schema.

Two layouts exist, told apart by the ``schema`` field and by the nodes themselves:

* **1.0.1** (PyTorch 2.0-2.1): every field at the node's top level -- ``parent``, ``inputs``
  (values), ``input_types``, ``input_shapes``, ``outputs``..., ``rf_id``, ``tid``, ``op_schema``;
* **1.0.2-chakra.0.0.4 and later** (1.0.3, 1.0.4, 1.1.0, 1.1.1): ``ctrl_deps`` is the parent,
  ``inputs``/``outputs`` are ``{values, shapes, types}`` objects and the scalars live in an
  ``attrs`` list of ``{name, type, value}`` (1.1.0 adds ``collective_name``, ``dtype``,
  ``in_msg_nelems``, ``pg_name``, ``pg_size``... on ``record_param_comms``).

Node ids are assigned when an operator starts, so they give the execution order; ``parent``
is the calling operator (the thread's ``[pytorch|profiler|execution_trace|thread]`` node for
top-level operators). Some writers add timing (``dur``, ``inclusive_dur``, ``exclusive_dur``,
``ts`` in microseconds) or, as Chakra's trace linker does, GPU operators (nodes with a
``cat``): both are kept.

>>> trace = parse_host_trace({"schema": "1.0.1", "pid": 7, "nodes": [
...     {"id": 1, "name": "[pytorch|profiler|execution_trace|process]", "parent": 1},
...     {"id": 2, "name": "[pytorch|profiler|execution_trace|thread]", "parent": 1, "tid": 1},
...     {"id": 3, "name": "aten::mm", "parent": 2, "tid": 1, "rf_id": 0,
...      "inputs": [[4, 5, 0, 6, 4, "cuda:0"]], "input_types": ["Tensor(float)"], "input_shapes": [[2, 3]],
...      "outputs": [], "output_types": [], "output_shapes": []}]}, "h.json")
>>> [(op.id, op.name, op.parent, op.tid) for op in trace.ops]
[(3, 'aten::mm', 2, 1)]
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chakra_collectives.converters.pytorch import fields
from chakra_collectives.converters.pytorch.fields import TraceRepairs
from chakra_collectives.errors import InputError

PROCESS_ROOT = "[pytorch|profiler|execution_trace|process]"
THREAD_ROOT = "[pytorch|profiler|execution_trace|thread]"
ROOT_NAMES = (PROCESS_ROOT, THREAD_ROOT, "[pytorch|profiler|execution_graph|process]", "[pytorch|profiler|execution_graph|thread]")
PROCESS_GROUP_INIT = "## process_group:init ##"
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")


@dataclass(eq=False)
class HostOp:
    """One operator of the host trace (times in microseconds when the trace has them)."""

    id: int
    name: str
    parent: int
    tid: int
    rf_id: int | None
    input_values: list
    input_types: list
    output_values: list
    output_types: list
    attrs: dict[str, Any]
    op_schema: str = ""
    ts: float | None = None
    dur: float | None = None
    exclusive_dur: float | None = None
    category: str | None = None
    """Set on GPU operators that a trace linker added (``kernel``, ``gpu_memcpy``...)."""
    stream: int | None = None
    children: list["HostOp"] = field(default_factory=list)

    @property
    def is_gpu(self) -> bool:
        return self.category in GPU_CATEGORIES


@dataclass
class HostTrace:
    path: Path
    schema: str
    ops: list[HostOp]
    """Operators by id, without the process/thread root nodes."""
    process_groups: list[dict[str, Any]]
    """Entries of ``## process_group:init ##`` (``pg_name``, ``ranks``, ``group_size``...)."""
    by_id: dict[int, HostOp] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.by_id = {op.id: op for op in self.ops}
        for op in self.ops:
            parent = self.by_id.get(op.parent)
            if parent is not None and parent is not op:
                parent.children.append(op)

    def threads(self) -> dict[int, list[HostOp]]:
        """Top-level operators (children of a thread root, or orphans) per tid, in id order."""
        tops: dict[int, list[HostOp]] = {}
        for op in self.ops:
            if op.is_gpu:
                continue
            parent = self.by_id.get(op.parent)
            if parent is None or parent is op:
                tops.setdefault(op.tid, []).append(op)
        return tops


def load_json(path: Path, what: str) -> Any:
    """A JSON document (gzip'd or not), or an :class:`InputError` naming the file."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{what} not found", path=path) from None
    except OSError as exc:
        raise InputError(f"cannot read {what}: {exc.strerror}", path=path) from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise InputError(f"corrupt gzip data ({exc})", path=path) from None
    try:
        return json.loads(raw)
    except RecursionError:
        raise InputError(f"not a {what} this tool reads: JSON nested too deeply", path=path) from None
    except UnicodeDecodeError:
        raise InputError(f"not a JSON {what} (binary data)", path=path) from None
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON (line {exc.lineno} column {exc.colno}: {exc.msg})", path=path) from None


def read_host_trace(path: str | Path, repairs: TraceRepairs | None = None) -> HostTrace:
    """Read a host execution trace file (``.json`` or ``.json.gz``)."""
    path = Path(path)
    return parse_host_trace(load_json(path, "PyTorch execution trace"), path, repairs)


def parse_host_trace(document: Any, path: str | Path, repairs: TraceRepairs | None = None) -> HostTrace:
    """The operators of an execution trace, every field checked (:mod:`.fields`); what can be
    repaired is counted in ``repairs`` (or refused, when it is strict)."""
    path = Path(path)
    repairs = repairs if repairs is not None else TraceRepairs()
    if not isinstance(document, dict) or "nodes" not in document:
        hint = " (this looks like a Kineto trace: give it with --kineto)" if is_kineto_document(document) else ""
        raise InputError(f"not a PyTorch execution trace: no 'nodes' list{hint}", path=path)
    nodes = document["nodes"]
    if not isinstance(nodes, list):
        raise InputError("'nodes' is not a list", path=path)
    schema = str(document.get("schema", ""))
    ops: list[HostOp] = []
    groups: list[dict[str, Any]] = []
    for position, raw in enumerate(nodes):
        op = _parse_node(raw, position, path, repairs)
        if op.name in ROOT_NAMES:
            continue
        if op.name == PROCESS_GROUP_INIT:
            groups.extend(_process_groups(op, path))
        ops.append(op)
    ops.sort(key=lambda op: op.id)
    for earlier, later in zip(ops, ops[1:]):
        if earlier.id == later.id:
            raise InputError(f"node id {later.id} appears twice", path=path)
    for op in ops:
        if op.parent > op.id:  # ids grow as operators start: a later parent could close a cycle
            repairs.repair("late_parent", f"parent {op.parent} comes after the operator", path, f"node {op.id} ({op.name})")
            op.parent = op.id
    return HostTrace(path=path, schema=schema, ops=ops, process_groups=groups)


def is_kineto_document(document: Any) -> bool:
    """Whether a JSON document is a Kineto trace (a ``traceEvents`` list, no ``nodes``)."""
    return isinstance(document, dict) and "traceEvents" in document and "nodes" not in document


def _attributes(raw: Any, path: Path, where: str, repairs: TraceRepairs) -> dict[str, Any]:
    """The ``attrs`` list of ``{name, type, value}`` as a dict (entries without a string name dropped)."""
    attrs: dict[str, Any] = {}
    for position, attr in enumerate(raw if type(raw) is list else fields.list_or_empty(raw, path, where, "attrs")):
        name = attr.get("name") if type(attr) is dict else None
        if type(name) is str:
            attrs[name] = attr.get("value")
        else:
            repairs.repair("bad_attribute", f"attribute #{position + 1} has no string name", path, where)
    return attrs


def _values_and_types(raw: Any, path: Path, where: str, name: str) -> tuple[list, list]:
    """``{values, shapes, types}`` of the 1.0.2+ layout (absent parts: empty)."""
    if type(raw) is dict:
        values, types = raw.get("values", _EMPTY), raw.get("types", _EMPTY)
        if type(values) is list and type(types) is list:
            return values, types
    group = fields.object_or_none(raw, path, where, name) or {}
    return (fields.list_or_empty(group.get("values"), path, where, name + ".values"),
            fields.list_or_empty(group.get("types"), path, where, name + ".types"))


def _list(raw: dict, key: str, path: Path, where: str) -> list:
    value = raw.get(key, _EMPTY)
    return value if type(value) is list else fields.list_or_empty(value, path, where, key)


_EMPTY: list = []
"""What an absent list reads as (never modified)."""
_FLAT_ATTRIBUTES = ("rf_id", "fw_parent", "seq_id", "scope", "tid", "fw_tid", "op_schema")


def _parse_node(raw: Any, position: int, path: Path, repairs: TraceRepairs) -> HostOp:
    if type(raw) is not dict:
        raise InputError(f"node #{position + 1} is not an object", path=path)
    node_id = raw.get("id")
    if type(node_id) is not int or not 0 <= node_id <= fields.MAX_ID:
        node_id = fields.node_id(node_id, path, f"node #{position + 1}", "id")
    name = raw.get("name")
    if type(name) is not str:
        raise InputError(f"node {node_id} has no 'name'", path=path)
    if not name.isascii():
        name = fields.name(name, repairs, path, f"node {node_id}")
    where = f"node {node_id} ({name})"
    inputs = raw.get("inputs")
    if type(inputs) is dict or ("attrs" in raw and type(inputs) is not list):  # 1.0.2-chakra.0.0.4 and later
        attrs = _attributes(raw.get("attrs"), path, where, repairs)
        parent = raw.get("ctrl_deps", raw.get("parent"))
        in_values, in_types = _values_and_types(inputs, path, where, "inputs")
        out_values, out_types = _values_and_types(raw.get("outputs"), path, where, "outputs")
    else:  # 1.0.1: everything at the top level (some writers add attrs too)
        attrs = _attributes(raw["attrs"], path, where, repairs) if "attrs" in raw else {}
        attrs.update((key, raw[key]) for key in _FLAT_ATTRIBUTES if key in raw)
        parent = raw.get("parent")
        in_values, in_types = _list(raw, "inputs", path, where), _list(raw, "input_types", path, where)
        out_values, out_types = _list(raw, "outputs", path, where), _list(raw, "output_types", path, where)
    if type(parent) is not int or not 0 <= parent <= fields.MAX_ID:
        if parent is None:
            raise InputError(f"{where} has no parent ('ctrl_deps' or 'parent')", path=path)
        parent = fields.node_id(parent, path, where, "parent")
    tid = attrs.get("tid", raw.get("tid", 0))
    rf_id = attrs.get("rf_id")
    stream = raw.get("stream")
    category = raw.get("cat")
    inclusive = raw.get("inclusive_dur", raw.get("dur"))
    return HostOp(
        id=node_id,
        name=name,
        parent=parent,
        tid=tid if type(tid) is int else 0,
        rf_id=rf_id if type(rf_id) is int else None,
        input_values=in_values,
        input_types=in_types,
        output_values=out_values,
        output_types=out_types,
        attrs=attrs,
        op_schema=schema if type(schema := attrs.get("op_schema")) is str else "",
        ts=fields.timestamp(raw["ts"], path, where) if "ts" in raw else None,
        dur=None if inclusive is None else fields.duration(inclusive, repairs, path, where, "inclusive_dur" if "inclusive_dur" in raw else "dur"),
        exclusive_dur=fields.duration(raw["exclusive_dur"], repairs, path, where, "exclusive_dur") if "exclusive_dur" in raw else None,
        category=category if type(category) is str else None,
        stream=stream if type(stream) is int else None,
    )


def _process_groups(op: HostOp, path: Path) -> list[dict[str, Any]]:
    """``## process_group:init ##`` carries a JSON list of groups as its first input."""
    if not op.input_values:
        return []
    text = op.input_values[0]
    try:
        groups = json.loads(text) if isinstance(text, str) else text
    except (json.JSONDecodeError, RecursionError):
        raise InputError(f"node {op.id} ({op.name}): the process-group description is not JSON", path=path) from None
    if not isinstance(groups, list):
        return []
    return [g for g in groups if isinstance(g, dict)]
