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
from chakra_collectives.errors import InputError

CPU_CATEGORIES = ("cpu_op", "user_annotation")
RUNTIME_CATEGORIES = ("cuda_runtime", "cuda_driver")
SYNC_CALLS = frozenset({
    "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaMemcpy",
    "hipDeviceSynchronize", "hipStreamSynchronize", "hipEventSynchronize", "hipMemcpy",
})
"""Runtime calls that block the host thread until the device has caught up."""


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


def read_kineto(path: str | Path) -> KinetoTrace:
    """Read a Kineto trace file (``.json`` or ``.json.gz``)."""
    path = Path(path)
    return parse_kineto(load_json(path, "Kineto trace"), path)


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    return None


def _time(event: dict, key: str) -> float | None:
    value = event.get(key)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def parse_kineto(document: Any, path: str | Path) -> KinetoTrace:
    path = Path(path)
    if not isinstance(document, dict) or not isinstance(document.get("traceEvents"), list):
        hint = " (this looks like an execution trace: give it as HOST)" if isinstance(document, dict) and "nodes" in document else ""
        raise InputError(f"not a Kineto trace: no 'traceEvents' list{hint}", path=path)
    info = document.get("distributedInfo") or {}
    cpu_ops: list[CpuEvent] = []
    gpu_ops: list[GpuEvent] = []
    syncs: list[tuple[Any, float, float]] = []
    launches: dict[int, tuple[Any, float]] = {}
    flow_starts: dict[int, tuple[Any, float]] = {}
    for event in document["traceEvents"]:
        if not isinstance(event, dict):
            continue
        category = event.get("cat")
        phase = event.get("ph")
        if category == "ac2g":
            flow_id = _int(event.get("id"))
            ts = _time(event, "ts")
            if phase == "s" and flow_id is not None and ts is not None:
                flow_starts[flow_id] = (event.get("tid"), ts)
            continue
        if phase != "X" or category not in CPU_CATEGORIES + RUNTIME_CATEGORIES + GPU_CATEGORIES:
            continue
        ts, dur = _time(event, "ts"), _time(event, "dur")
        if ts is None or dur is None:
            raise InputError(f"event {event.get('name')!r} ({category}) has no numeric ts/dur", path=path)
        args = event.get("args") if isinstance(event.get("args"), dict) else {}
        name = str(event.get("name", ""))
        if category in CPU_CATEGORIES:
            cpu_ops.append(CpuEvent(name, event.get("tid"), ts, dur, _int(args.get("External id")), _int(args.get("Record function id"))))
        elif category in RUNTIME_CATEGORIES:
            correlation = _int(args.get("correlation"))
            if correlation is not None:
                launches[correlation] = (event.get("tid"), ts)
            if name in SYNC_CALLS:
                syncs.append((event.get("tid"), ts, dur))
        else:
            stream = _int(args.get("stream"))
            if stream is None:
                stream = _int(event.get("tid")) or 0
            gpu_ops.append(GpuEvent(name, category, stream, ts, dur, _int(args.get("correlation")), args))
    for op in gpu_ops:
        if op.correlation is not None:
            op.launch = launches.get(op.correlation) or flow_starts.get(op.correlation)
    cpu_ops.sort(key=lambda e: (e.ts, -e.dur))
    gpu_ops.sort(key=lambda e: (e.stream, e.ts))
    trace = KinetoTrace(
        path=path,
        rank=_int(info.get("rank")),
        world_size=_int(info.get("world_size")),
        cpu_ops=cpu_ops,
        gpu_ops=gpu_ops,
        syncs=sorted(syncs, key=lambda s: s[1]),
    )
    if not cpu_ops and not gpu_ops:
        raise InputError("the Kineto trace has no CPU operators and no GPU events", path=path)
    return trace
