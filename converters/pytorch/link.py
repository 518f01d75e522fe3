"""Link a host execution trace with its Kineto trace: operator times and the GPU work they launched.

Two steps, the facts Chakra's trace linker (``chakra_trace_link``) and PARAM's older linker
rely on:

1. **host operator <-> Kineto CPU operator**. Since PyTorch 2.1 every Kineto ``cpu_op`` carries
   ``Record function id``, the execution trace's ``rf_id`` of the same call: an exact match.
   Older traces have no such id; both traces then list the same calls in the same order (host
   node ids and Kineto start times both follow call order), so the two name sequences are
   aligned (longest matching blocks, :class:`difflib.SequenceMatcher`). This also finds the
   execution trace's iteration inside a Kineto trace that covers several.
2. **GPU event -> launching operator**. A kernel's ``correlation`` names the runtime call that
   launched it (``cudaLaunchKernel``...; or the ``ac2g`` flow of the same id); the innermost
   CPU operator on that thread whose interval contains the call launched it.

Blocking runtime calls (``cudaDeviceSynchronize``, ``cudaStreamSynchronize``, synchronous
``cudaMemcpy``...) are attributed the same way: they are where a host thread waits for the GPU.

>>> from chakra_collectives.converters.pytorch.host_trace import parse_host_trace
>>> from chakra_collectives.converters.pytorch.kineto import parse_kineto
>>> host = parse_host_trace({"schema": "1.0.1", "nodes": [
...     {"id": 2, "name": "[pytorch|profiler|execution_trace|thread]", "parent": 1, "tid": 1},
...     {"id": 3, "name": "aten::mm", "parent": 2, "tid": 1, "inputs": [], "input_types": []}]}, "h.json")
>>> kineto = parse_kineto({"traceEvents": [
...     {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "tid": 9, "ts": 10, "dur": 8, "args": {}},
...     {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "tid": 9, "ts": 12, "dur": 3, "args": {"correlation": 5}},
...     {"ph": "X", "cat": "kernel", "name": "sgemm", "tid": 7, "ts": 20, "dur": 50, "args": {"stream": 7, "correlation": 5}}]}, "k.json")
>>> linked = link_traces(host, kineto)
>>> linked.times[3], [g.name for g in linked.launched[3]], linked.matched
((10.0, 8.0), ['sgemm'], 1)
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

from chakra_collectives.converters.pytorch.host_trace import HostOp, HostTrace
from chakra_collectives.converters.pytorch.kineto import CpuEvent, GpuEvent, KinetoTrace


@dataclass
class LinkedTrace:
    """A host trace with what the device trace (or the host trace itself) says about timing."""

    host: HostTrace
    times: dict[int, tuple[float, float]]
    """Host op id -> ``(start, inclusive duration)`` in µs."""
    launched: dict[int, list[GpuEvent]]
    """Host op id -> GPU events it launched (innermost launching operator)."""
    gpu_events: list[GpuEvent]
    """Every GPU event, by stream then start time."""
    syncs: dict[int, float]
    """Host op id -> µs its thread spent blocked in synchronizing runtime calls inside it."""
    matched: int = 0
    method: str = "none"
    """``rf_id``, ``call order``, ``host trace`` (times written in the host trace) or ``none``."""
    unattributed_gpu: int = 0
    outside: int = 0
    """GPU events launched outside the execution trace's window (other iterations): left out."""
    warnings: list[str] = field(default_factory=list)

    @property
    def has_device(self) -> bool:
        return bool(self.gpu_events)


def link_traces(host: HostTrace, kineto: KinetoTrace | None) -> LinkedTrace:
    """Times and launched GPU work of every host operator (see the module docstring)."""
    if kineto is None:
        return _host_only(host)
    cpu_ops = [op for op in host.ops if not op.is_gpu]
    pairs, method = _match_by_rf_id(cpu_ops, kineto.cpu_ops)
    if pairs is None:
        pairs, method = _match_by_order(cpu_ops, kineto.cpu_ops), "call order"
    times = {op.id: (event.ts, event.dur) for op, event in pairs}
    host_of_event = {id(event): op for op, event in pairs}
    gpu_events, outside = _in_window(kineto.gpu_ops, [event for _, event in pairs])
    linked = LinkedTrace(host=host, times=times, launched={}, gpu_events=gpu_events, syncs={}, matched=len(pairs), method=method,
                         outside=outside)
    launches = [(op.launch, op) for op in gpu_events if op.launch is not None]
    owners = _innermost_owners(kineto.cpu_ops, host_of_event, [launch for launch, _ in launches])
    for (_, gpu), owner in zip(launches, owners):
        if owner is None:
            linked.unattributed_gpu += 1
        else:
            linked.launched.setdefault(owner.id, []).append(gpu)
    linked.unattributed_gpu += sum(1 for op in gpu_events if op.launch is None)
    sync_owners = _innermost_owners(kineto.cpu_ops, host_of_event, [(tid, ts) for tid, ts, _ in kineto.syncs])
    for (_, _, dur), owner in zip(kineto.syncs, sync_owners):
        if owner is not None:
            linked.syncs[owner.id] = linked.syncs.get(owner.id, 0.0) + dur
    missing = len(cpu_ops) - len(pairs)
    if cpu_ops and missing > 0.2 * len(cpu_ops):
        linked.warnings.append(
            f"{kineto.path}: only {len(pairs):,} of {len(cpu_ops):,} host operators found in the Kineto trace "
            f"(matched by {method}): are the two traces from the same run and iteration?"
        )
    if linked.unattributed_gpu:
        linked.warnings.append(
            f"{kineto.path}: {linked.unattributed_gpu:,} of {len(gpu_events):,} GPU events have no launching host operator "
            "in the execution trace: they keep their stream order only"
        )
    return linked


def _in_window(gpu_ops: list[GpuEvent], matched: list[CpuEvent]) -> tuple[list[GpuEvent], int]:
    """GPU events launched while the matched host operators ran (a Kineto trace may cover more
    iterations than the execution trace); events without a known launch must start in it."""
    if not matched:
        return gpu_ops, 0
    start = min(event.ts for event in matched)
    end = max(event.ts + event.dur for event in matched)
    kept = [op for op in gpu_ops if start <= (op.launch[1] if op.launch is not None else op.ts) <= end]
    return kept, len(gpu_ops) - len(kept)


def _host_only(host: HostTrace) -> LinkedTrace:
    """No Kineto trace: times the host trace carries itself (a linked "ET+" has them), if any."""
    times: dict[int, tuple[float, float]] = {}
    launched: dict[int, list[GpuEvent]] = {}
    gpu_events: list[GpuEvent] = []
    for op in host.ops:
        if op.is_gpu:
            event = GpuEvent(op.name, op.category or "kernel", op.stream or 0, op.ts or 0.0, op.dur or 0.0, None, dict(op.attrs))
            if "pg_name" in op.attrs or "Process Group Name" in op.attrs:
                event.args.setdefault("Process Group Name", op.attrs.get("pg_name"))
            gpu_events.append(event)
            launched.setdefault(op.parent, []).append(event)
        elif op.dur is not None:
            times[op.id] = (op.ts if op.ts is not None else float(op.id), op.dur)
    gpu_events.sort(key=lambda e: (e.stream, e.ts))
    return LinkedTrace(
        host=host, times=times, launched=launched, gpu_events=gpu_events, syncs={}, matched=len(times),
        method="host trace" if times else "none",
    )


def _match_by_rf_id(cpu_ops: list[HostOp], events: list[CpuEvent]):
    by_rf = {event.rf_id: event for event in events if event.rf_id is not None}
    if not by_rf:
        return None, ""
    pairs = [(op, by_rf[op.rf_id]) for op in cpu_ops if op.rf_id is not None and op.rf_id in by_rf]
    return pairs, "rf_id"


def _match_by_order(cpu_ops: list[HostOp], events: list[CpuEvent]) -> list[tuple[HostOp, CpuEvent]]:
    codes: dict[str, int] = {}
    host_seq = [codes.setdefault(op.name, len(codes)) for op in cpu_ops]
    kineto_seq = [codes.setdefault(event.name, len(codes)) for event in events]
    matcher = difflib.SequenceMatcher(None, host_seq, kineto_seq, autojunk=False)
    pairs = []
    for block in matcher.get_matching_blocks():
        for k in range(block.size):
            pairs.append((cpu_ops[block.a + k], events[block.b + k]))
    return pairs


def _innermost_owners(events: list[CpuEvent], host_of_event: dict[int, HostOp], points: list[tuple[Any, float]]) -> list[HostOp | None]:
    """For each ``(tid, time)``: the host op of the innermost matched CPU event containing it."""
    by_tid: dict[Any, list[CpuEvent]] = {}
    for event in events:
        by_tid.setdefault(event.tid, []).append(event)  # already sorted by (ts, -dur)
    order = sorted(range(len(points)), key=lambda i: points[i][1])
    result: list[HostOp | None] = [None] * len(points)
    cursor: dict[Any, int] = {}
    stacks: dict[Any, list[CpuEvent]] = {}
    for i in order:
        tid, t = points[i]
        tid_events = by_tid.get(tid)
        if not tid_events:
            continue
        stack = stacks.setdefault(tid, [])
        k = cursor.get(tid, 0)
        while k < len(tid_events) and tid_events[k].ts <= t:
            event = tid_events[k]
            while stack and stack[-1].ts + stack[-1].dur < event.ts:
                stack.pop()
            stack.append(event)
            k += 1
        cursor[tid] = k
        while stack and stack[-1].ts + stack[-1].dur < t:
            stack.pop()
        for event in reversed(stack):
            if event.ts <= t <= event.ts + event.dur:
                owner = host_of_event.get(id(event))
                if owner is not None:
                    result[i] = owner
                    break
    return result
