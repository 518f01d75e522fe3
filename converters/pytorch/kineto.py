"""Read a Kineto trace (``torch.profiler``'s Chrome-trace JSON): CPU operators, launches, GPU work.

What the converter takes from ``traceEvents`` (complete events, ``"ph": "X"``, times in µs):

* ``cpu_op`` / ``user_annotation``: operators on a host thread (``tid``), with ``args``
  ``External id`` and, since PyTorch 2.1, ``Record function id`` -- the execution trace's
  ``rf_id`` of the same operator;
* ``cuda_runtime`` / ``cuda_driver``: launches (``cudaLaunchKernel``, ``cudaMemcpyAsync``...)
  and blocking calls (``cudaDeviceSynchronize``, ``cudaStreamSynchronize``...), each with a
  ``correlation`` id;
* ``kernel`` / ``gpu_memcpy`` / ``gpu_memset``: device work, with ``args`` ``stream`` and the
  ``correlation`` of the launch that issued it; NCCL kernels carry ``Collective name``,
  ``In msg nelems``, ``Out msg nelems``, ``dtype``, ``Group size``, ``Process Group Name``
  and ``Process Group Ranks`` in newer PyTorch;
* ``ac2g`` flow events (``s`` at the launch, ``f`` at the kernel, ``id`` = correlation): used
  when a GPU event has no ``correlation`` argument;
* ``distributedInfo`` (top level): ``rank`` and ``world_size``.

>>> trace = parse_kineto({"distributedInfo": {"rank": 1, "world_size": 2}, "traceEvents": [
...     {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 9, "ts": 10, "dur": 8,
...      "args": {"External id": 3, "Record function id": 41}},
...     {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 9, "ts": 12, "dur": 3,
...      "args": {"correlation": 77}},
...     {"ph": "X", "cat": "kernel", "name": "sgemm", "pid": 0, "tid": 7, "ts": 20, "dur": 50,
...      "args": {"stream": 7, "correlation": 77}}]}, "k.json")
>>> trace.rank, len(trace.cpu_ops), trace.gpu_ops[0].launch
(1, 1, (9, 12.0))
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chakra_collectives.converters.pytorch.host_trace import GPU_CATEGORIES, load_json
from chakra_collectives.converters.pytorch import fields
from chakra_collectives.converters.pytorch.fields import MAX_DURATION_US, MAX_ID, MAX_TIMESTAMP_US, TraceRepairs, integer
from chakra_collectives.errors import InputError

CPU_CATEGORIES = ("cpu_op", "user_annotation")
RUNTIME_CATEGORIES = ("cuda_runtime", "cuda_driver")
SYNC_CALLS = frozenset({
    "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaMemcpy",
    "hipDeviceSynchronize", "hipStreamSynchronize", "hipEventSynchronize", "hipMemcpy",
})
"""Runtime calls that block the host thread until the device has caught up."""
USED_CATEGORIES = frozenset(CPU_CATEGORIES + RUNTIME_CATEGORIES + GPU_CATEGORIES)


@dataclass(eq=False)
class CpuEvent:
    name: str
    tid: Any
    ts: float
    dur: float
    external_id: int | None
    rf_id: int | None


@dataclass(eq=False)
class GpuEvent:
    name: str
    category: str
    stream: int
    ts: float
    dur: float
    correlation: int | None
    args: dict[str, Any]
    launch: tuple[Any, float] | None = None
    """``(host tid, time)`` of the runtime call that issued it, when known."""


@dataclass
class KinetoTrace:
    path: Path
    rank: int | None
    world_size: int | None
    cpu_ops: list[CpuEvent]
    gpu_ops: list[GpuEvent]
    syncs: list[tuple[Any, float, float]]
    """Blocking runtime calls as ``(tid, ts, dur)``."""


def read_kineto(path: str | Path, repairs: TraceRepairs | None = None) -> KinetoTrace:
    """Read a Kineto trace file (``.json`` or ``.json.gz``)."""
    path = Path(path)
    return parse_kineto(load_json(path, "Kineto trace"), path, repairs)


def _shown_name(value: Any) -> str:
    """An event ``name`` that is not a string (a number stays readable; anything else by its type)."""
    return str(value) if isinstance(value, (int, float)) else f"<{type(value).__name__}>"


_NUMBERS = (int, float)
_TIDS = (int, str)
_ID_ARGS = {
    **{category: ("External id", "Record function id") for category in CPU_CATEGORIES},
    **{category: ("correlation",) for category in RUNTIME_CATEGORIES},
    **{category: ("correlation", "stream") for category in GPU_CATEGORIES},
}
"""The integer ``args`` each category's events are read for."""


def _flow_start(event: dict, position: int, path: Path, flow_starts: dict[int, tuple[Any, float]]) -> None:
    where = f"event #{position + 1} (ac2g flow)"
    flow_id = integer(event.get("id"), path, where, "id")
    if flow_id is not None and event.get("ts") is not None:
        flow_starts[flow_id] = (fields.thread_id(event.get("tid"), path, where), fields.timestamp(event.get("ts"), path, where))


def _checked_event(event: dict, position: int, category: str, args: dict, path: Path, repairs: TraceRepairs) -> tuple:
    """``(name, ts, dur, tid, ids)`` of an event with an unusual field: each checked, a bad one refused."""
    name = event.get("name", "")
    name = fields.name(name, repairs, path, f"event #{position + 1}") if isinstance(name, str) else _shown_name(name)
    where = f"event #{position + 1} ({name[:40]!r}, {category})"
    ts, dur = fields.timestamp(event.get("ts"), path, where), fields.duration(event.get("dur"), repairs, path, where)
    if ts is None or dur is None:
        raise InputError(f"{where} has no ts/dur", path=path)
    tid = fields.thread_id(event.get("tid"), path, where)
    ids = [integer(args.get(key), path, where, f"args.{key}") for key in _ID_ARGS[category]]
    return name, ts, dur, tid, ids


def _stream_of_tid(value: Any) -> int:
    """A GPU event's ``tid`` as its stream when ``args`` has none (0 when it is not a number)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and -MAX_ID <= value <= MAX_ID else 0


def _distributed_info(document: dict, path: Path, repairs: TraceRepairs) -> tuple[int | None, int | None]:
    info = document.get("distributedInfo")
    if info is None:
        return None, None
    if not isinstance(info, dict):
        repairs.repair("bad_distributed_info", f"distributedInfo is {type(info).__name__}, not an object", path, "distributedInfo")
        return None, None
    return (fields.rank(info.get("rank"), path, "distributedInfo", "rank"),
            fields.rank(info.get("world_size"), path, "distributedInfo", "world_size"))


def parse_kineto(document: Any, path: str | Path, repairs: TraceRepairs | None = None) -> KinetoTrace:
    """The events the converter uses, every field checked (:mod:`.fields`)."""
    path = Path(path)
    repairs = repairs if repairs is not None else TraceRepairs()
    if not isinstance(document, dict) or not isinstance(document.get("traceEvents"), list):
        hint = " (this looks like an execution trace: give it as HOST)" if isinstance(document, dict) and "nodes" in document else ""
        raise InputError(f"not a Kineto trace: no 'traceEvents' list{hint}", path=path)
    rank, world_size = _distributed_info(document, path, repairs)
    cpu_ops: list[CpuEvent] = []
    gpu_ops: list[GpuEvent] = []
    syncs: list[tuple[Any, float, float]] = []
    launches: dict[int, tuple[Any, float]] = {}
    flow_starts: dict[int, tuple[Any, float]] = {}
    for position, event in enumerate(document["traceEvents"]):
        if type(event) is not dict:
            continue
        category = event.get("cat")
        phase = event.get("ph")
        if category == "ac2g":
            if phase == "s":
                _flow_start(event, position, path, flow_starts)
            continue
        if phase != "X" or type(category) is not str or category not in USED_CATEGORIES:
            continue
        name, ts, dur, tid = event.get("name", ""), event.get("ts"), event.get("dur"), event.get("tid")
        args = event.get("args")
        args = args if type(args) is dict else {}
        ids = [args.get(key) for key in _ID_ARGS[category]]
        if not (type(name) is str and name.isascii() and type(ts) in _NUMBERS and -MAX_TIMESTAMP_US <= ts <= MAX_TIMESTAMP_US
                and type(dur) in _NUMBERS and 0 <= dur <= MAX_DURATION_US and (tid is None or type(tid) in _TIDS)
                and all(i is None or (type(i) is int and -MAX_ID <= i <= MAX_ID) for i in ids)):
            name, ts, dur, tid, ids = _checked_event(event, position, category, args, path, repairs)  # the rare slow path
        if category in CPU_CATEGORIES:
            cpu_ops.append(CpuEvent(name, tid, float(ts), float(dur), ids[0], ids[1]))
        elif category in RUNTIME_CATEGORIES:
            correlation = ids[0]
            if correlation is not None:
                launches[correlation] = (tid, float(ts))
            if name in SYNC_CALLS:
                syncs.append((tid, float(ts), float(dur)))
        else:
            stream = ids[1] if ids[1] is not None else _stream_of_tid(tid)
            gpu_ops.append(GpuEvent(name, category, stream, float(ts), float(dur), ids[0], args))
    for op in gpu_ops:
        if op.correlation is not None:
            op.launch = launches.get(op.correlation) or flow_starts.get(op.correlation)
    cpu_ops.sort(key=lambda e: (e.ts, -e.dur))
    gpu_ops.sort(key=lambda e: (e.stream, e.ts))
    trace = KinetoTrace(
        path=path,
        rank=rank,
        world_size=world_size,
        cpu_ops=cpu_ops,
        gpu_ops=gpu_ops,
        syncs=sorted(syncs, key=lambda s: s[1]),
    )
    if not cpu_ops and not gpu_ops:
        raise InputError("the Kineto trace has no CPU operators and no GPU events", path=path)
    return trace
