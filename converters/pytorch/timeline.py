"""One rank's workload graph from a linked host trace: CPU segments, GPU streams, collectives.

The model (every rule is an ordering the real run obeyed):

* **host threads** run their operators in call order (node ids). A thread becomes a chain of
  CPU nodes (``is_cpu_op = true``): consecutive operators are merged into one *segment* until
  an operator launches GPU work, calls a collective, waits for one, or blocks on the device;
  each operator contributes its *exclusive* time (Kineto duration minus its children's, minus
  time blocked in ``cuda*Synchronize``), and the time between a thread's top-level operators
  counts too (Python runs there). Threads hand over to each other: when thread B's operator
  starts after thread A's operator ended and B was idle in between, B waits for A (how
  ``backward()`` passes from the main thread to the autograd thread and back).
* **GPU work** (kernels, memcpy, memset) becomes GPU COMP nodes with their Kineto durations;
  each waits for the segment that launched it and for the previous work of its stream.
* **collectives**: the NCCL kernel of a ``torch.distributed`` call becomes a COMM_COLL node
  (without a Kineto trace, the call itself); it waits for its launch, its stream, and the last
  work its thread launched on a compute stream (ProcessGroupNCCL makes the NCCL stream wait
  for the caller's stream). A ``wait`` on its work makes the next compute-stream work of the
  thread wait for it (without a Kineto trace: the thread's next segment).
* a thread that blocks on the device (``cudaDeviceSynchronize``, synchronous copies) waits for
  the last work of every stream it launched before.

Zero-length CPU segments are contracted away (their dependencies pass through), so a host
trace without times becomes just its collectives in call order.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass, field

from chakra_collectives.converters.pytorch.collectives import CollectiveCall, WaitRecord, kernel_kind
from chakra_collectives.converters.pytorch.host_trace import HostOp
from chakra_collectives.converters.pytorch.kineto import GpuEvent
from chakra_collectives.converters.pytorch.link import LinkedTrace

CPU, GPU, COLL, SEND, RECV = "cpu", "gpu", "coll", "send", "recv"


@dataclass(eq=False)
class TraceNode:
    kind: str
    name: str
    duration_us: float = 0.0
    deps: list[int] = field(default_factory=list)
    call: CollectiveCall | None = None
    measured_us: float | None = None
    """COMM nodes: the NCCL kernel's own duration in the trace (replaced by the replay)."""
    ops: int = 0
    """CPU nodes: how many host operators the segment merges (it is named after the first)."""

    @property
    def label(self) -> str:
        return self.name if self.ops <= 1 else f"{self.name} (+{self.ops - 1} ops)"


@dataclass
class RankGraph:
    nodes: list[TraceNode]
    calls: list[CollectiveCall]
    """Calls in the order their nodes appear (the replayer matches them in this order)."""
    dropped_calls: list[CollectiveCall]
    """Calls that cannot be replayed (gather, scatter...): kept out, with a warning."""
    cpu_us: float
    gpu_us: float


def is_nccl_kernel(event: GpuEvent) -> bool:
    return "nccl" in event.name.lower() or "Collective name" in event.args


def build_rank_graph(linked: LinkedTrace, calls: list[CollectiveCall], waits: list[WaitRecord]) -> RankGraph:
    builder = _Builder(linked, calls, waits)
    builder.walk_threads()
    builder.add_device_work()
    builder.add_undelivered_calls()
    builder.add_handoffs()
    return builder.finish()


@dataclass
class _Top:
    op: HostOp
    start: float
    end: float


class _Builder:
    def __init__(self, linked: LinkedTrace, calls: list[CollectiveCall], waits: list[WaitRecord]) -> None:
        self.linked = linked
        self.host = linked.host
        self.timed = bool(linked.times)
        self.device = linked.has_device
        self.nodes: list[TraceNode] = []
        self.call_of_root = {call.root.id: call for call in calls}
        self.call_of_op = {op_id: call for call in calls for op_id in call.op_ids}
        self.calls = calls
        self.wait_of_op = {w.op.id: w for w in waits}
        self.wait_ops = {op_id for w in waits for op_id in _ids_of(w.op)}
        self.call_by_seq = {c.seq: c for c in calls if c.seq is not None}
        self.call_node: dict[int, int] = {}  # id(call) -> node
        self.event_node: dict[int, int] = {}  # id(GPU event) -> node
        self.cut_segment: dict[int, int] = {}  # host op id -> segment node that ends with it
        self.after_wait: dict[int, tuple[object, int]] = {}  # host op id of a wait -> (tid, next segment)
        self.sync_after: dict[int, int] = {}  # host op id that blocked -> segment after it
        self.top_end_segment: dict[int, int] = {}
        self.top_start_segment: dict[int, int] = {}
        self.tops: dict[object, list[_Top]] = {}
        self.handoffs: list[tuple[int, int]] = []  # (top op id ending, top op id starting)

    # ------------------------------------------------------------------ host threads
    def _time(self, op: HostOp) -> tuple[float, float] | None:
        return self.linked.times.get(op.id)

    def _exclusive(self, op: HostOp) -> float:
        own = self._time(op)
        if own is None:
            return 0.0
        inner = sum(self._time(c)[1] for c in op.children if self._time(c) is not None and not c.is_gpu)
        return max(0.0, own[1] - inner - self.linked.syncs.get(op.id, 0.0))

    def _is_cut(self, op: HostOp) -> bool:
        return (
            op.id in self.linked.launched
            or op.id in self.call_of_root
            or op.id in self.wait_of_op
            or op.id in self.linked.syncs
        )

    def walk_threads(self) -> None:
        threads = self.host.threads()
        for tid, tops in threads.items():
            spans = []
            for op in tops:
                t = self._time(op)
                if self.timed and t is not None:
                    spans.append(_Top(op, t[0], t[0] + t[1]))
                elif self.timed and spans:
                    spans.append(_Top(op, spans[-1].end, spans[-1].end))
                else:
                    last = max(_ids_of(op))
                    spans.append(_Top(op, float(op.id), float(last)))
            self.tops[tid] = spans
        self._find_handoffs()
        sources = {a for a, _ in self.handoffs}
        targets = {b for _, b in self.handoffs}
        for tid, spans in self.tops.items():
            segment = self._new(CPU, f"host thread {tid}")
            previous_end = None
            for top in spans:
                if top.op.id in targets and self.nodes[segment].duration_us > 0:
                    segment = self._new(CPU, f"host thread {tid}", [segment])
                if self.timed and previous_end is not None and top.op.id not in targets:
                    self.nodes[segment].duration_us += max(0.0, top.start - previous_end)
                self.top_start_segment[top.op.id] = segment
                segment = self._walk(top.op, segment, tid)
                self.top_end_segment[top.op.id] = segment
                if top.op.id in sources:
                    segment = self._new(CPU, f"host thread {tid}", [segment])
                previous_end = top.end

    def _find_handoffs(self) -> None:
        """Top-level op B waits for A when A (another thread) ended while B's thread was idle."""
        ends = {tid: [top.end for top in spans] for tid, spans in self.tops.items()}
        for tid, spans in self.tops.items():
            previous_end = float("-inf")
            for top in spans:
                for other, other_spans in self.tops.items():
                    if other == tid:
                        continue
                    k = bisect_right(ends[other], top.start) - 1  # top-level ops of a thread end in order
                    if k >= 0 and other_spans[k].end > previous_end:
                        self.handoffs.append((other_spans[k].op.id, top.op.id))
                previous_end = max(previous_end, top.end)

    def _walk(self, root: HostOp, segment: int, tid: object) -> int:
        stack = [root]
        while stack:
            op = stack.pop()
            if op.is_gpu:
                continue
            node = self.nodes[segment]
            node.duration_us += self._exclusive(op)
            node.ops += 1
            if node.ops == 1:
                node.name = op.name
            if self._is_cut(op):
                self.cut_segment[op.id] = segment
                segment = self._new(CPU, f"host thread {tid}", [segment])
                if op.id in self.linked.syncs:
                    self.sync_after[op.id] = segment
                if op.id in self.wait_of_op:
                    self.after_wait[op.id] = (tid, segment)
            stack.extend(sorted(op.children, key=lambda c: c.id, reverse=True))
        return segment

    def _new(self, kind: str, name: str, deps: list[int] | None = None, duration: float = 0.0) -> int:
        self.nodes.append(TraceNode(kind, name, duration, list(deps or [])))
        return len(self.nodes) - 1

    # ------------------------------------------------------------------ device work
    def add_device_work(self) -> None:
        launcher: dict[int, HostOp] = {}
        for op_id, events in self.linked.launched.items():
            for event in events:
                launcher[id(event)] = self.host.by_id[op_id]
        comm_streams = {e.stream for e in self.linked.gpu_events if is_nccl_kernel(e)}
        last_on_stream: dict[int, int] = {}
        launched_compute: list[tuple[int, float, object, int, int]] = []  # (op id, ts, tid, stream, node)
        for event in self.linked.gpu_events:  # by stream, then start
            op = launcher.get(id(event))
            call = self._call_for(event, op)
            if call is not None and id(call) in self.call_node:
                node = self.call_node[id(call)]  # a further kernel of the same call
            elif call is not None and call.kind is not None:
                node = self._call_node(call, measured=event.dur)
                self.call_node[id(call)] = node
            else:
                node = self._new(GPU, event.name, duration=event.dur)
            deps = self.nodes[node].deps
            previous = last_on_stream.get(event.stream)
            if previous is not None and previous != node:
                deps.append(previous)
            if op is not None and op.id in self.cut_segment:
                deps.append(self.cut_segment[op.id])
            last_on_stream[event.stream] = node
            self.event_node[id(event)] = node
            if op is not None and event.stream not in comm_streams:
                launched_compute.append((op.id, event.ts, op.tid, event.stream, node))
        launched_compute.sort(key=lambda item: (item[0], item[1]))
        self._caller_stream_deps(launched_compute)
        self._wait_deps(launched_compute)
        self._sync_deps(launcher)

    def _call_for(self, event: GpuEvent, op: HostOp | None) -> CollectiveCall | None:
        if not is_nccl_kernel(event):
            return None
        call = self.call_of_op.get(op.id) if op is not None else None
        if call is None:
            kind = kernel_kind(event.name)
            call = CollectiveCall(root=op or _placeholder(event), name=event.name, kind=None if kind == "sendrecv" else kind)
            call.absorb_kernel_args(event.args)
            if call.kind is None:
                return None
            self.calls.append(call)
        else:
            call.absorb_kernel_args(event.args)
        return call

    def _call_node(self, call: CollectiveCall, measured: float | None = None) -> int:
        kind = {"send": SEND, "recv": RECV}.get(call.kind or "", COLL)
        node = self._new(kind, call.root.name if call.root.id >= 0 else call.name)
        self.nodes[node].call = call
        self.nodes[node].measured_us = measured
        return node

    def _caller_stream_deps(self, launched: list[tuple[int, float, object, int, int]]) -> None:
        """A collective's stream first waits for the caller's stream (the last work it launched)."""
        keys = [(op_id, ts) for op_id, ts, _, _, _ in launched]
        for call in self.calls:
            node = self.call_node.get(id(call))
            if node is None or call.root.id < 0:
                continue
            for k in range(_bisect_left(keys, (call.root.id, float("-inf"))) - 1, -1, -1):
                _, _, tid, _, candidate = launched[k]
                if tid == call.root.tid:
                    self.nodes[node].deps.append(candidate)
                    break

    def _wait_deps(self, launched: list[tuple[int, float, object, int, int]]) -> None:
        """``work.wait()`` makes the waiting thread's current stream wait for the collective: the
        next work launched on that stream (by any thread) depends on the collective's node."""
        keys = [(op_id, ts) for op_id, ts, _, _, _ in launched]
        streams = Counter(stream for _, _, _, stream, _ in launched)
        for op_id, wait in self.wait_of_op.items():
            call = self.call_by_seq.get(wait.seq)
            if call is None or id(call) not in self.call_node:
                continue
            target = self.call_node[id(call)]
            if not self.device:  # no device model: the thread itself waits
                _, segment = self.after_wait[op_id]
                self.nodes[segment].deps.append(target)
                continue
            position = _bisect_left(keys, (op_id, float("-inf")))
            current = next((launched[k][3] for k in range(position - 1, -1, -1) if launched[k][2] == wait.op.tid), None)
            if current is None and streams:
                current = streams.most_common(1)[0][0]
            for k in range(position, len(launched)):
                if launched[k][3] == current:
                    self.nodes[launched[k][4]].deps.append(target)
                    break

    def _sync_deps(self, launcher: dict[int, HostOp]) -> None:
        """After a blocking call the thread waits for the last work of every stream launched before."""
        if not self.sync_after:
            return
        launched = sorted(
            (launcher[id(e)].id, e.ts, e.stream, self.event_node[id(e)]) for e in self.linked.gpu_events if id(e) in launcher
        )
        for op_id, segment in self.sync_after.items():
            latest: dict[int, int] = {}
            for launch_op, _, stream, node in launched:
                if launch_op > op_id:
                    break
                latest[stream] = node
            self.nodes[segment].deps.extend(latest.values())

    # ------------------------------------------------------------------ calls without kernels
    def add_undelivered_calls(self) -> None:
        last_of_group: dict[str | None, int] = {}
        for call in sorted(self.calls, key=lambda c: c.root.id):
            if call.kind is None:
                continue
            node = self.call_node.get(id(call))
            if node is None:
                node = self._call_node(call)
                self.call_node[id(call)] = node
                if call.root.id in self.cut_segment:
                    self.nodes[node].deps.append(self.cut_segment[call.root.id])
                previous = last_of_group.get(call.pg_name)
                if previous is not None:
                    self.nodes[node].deps.append(previous)
            last_of_group[call.pg_name] = node

    def add_handoffs(self) -> None:
        for source, target in self.handoffs:
            end = self.top_end_segment.get(source)
            start = self.top_start_segment.get(target)
            if end is not None and start is not None and end != start:
                self.nodes[start].deps.append(end)

    # ------------------------------------------------------------------ finish
    def finish(self) -> RankGraph:
        nodes = _contract_empty_cpu(self.nodes)
        order = {id(n.call): i for i, n in enumerate(nodes) if n.call is not None}
        calls = sorted((c for c in self.calls if id(c) in order), key=lambda c: order[id(c)])
        dropped = [c for c in self.calls if c.kind is None]
        return RankGraph(
            nodes=nodes,
            calls=calls,
            dropped_calls=dropped,
            cpu_us=sum(n.duration_us for n in nodes if n.kind == CPU),
            gpu_us=sum(n.duration_us for n in nodes if n.kind == GPU),
        )


def _ids_of(op: HostOp) -> list[int]:
    ids, stack = [], [op]
    while stack:
        current = stack.pop()
        ids.append(current.id)
        stack.extend(current.children)
    return ids


def _placeholder(event: GpuEvent) -> HostOp:
    return HostOp(id=-1, name=event.name, parent=-1, tid=-1, rf_id=None, input_values=[], input_types=[],
                  output_values=[], output_types=[], attrs={})


def _bisect_left(keys: list[tuple[int, float]], key: tuple[int, float]) -> int:
    lo, hi = 0, len(keys)
    while lo < hi:
        mid = (lo + hi) // 2
        if keys[mid] < key:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _contract_empty_cpu(nodes: list[TraceNode]) -> list[TraceNode]:
    """Remove zero-length CPU nodes, making their dependents wait for their dependencies."""
    resolved: dict[int, list[int]] = {}

    def through(index: int) -> list[int]:
        # iterative: chains of empty segments can be long
        if index in resolved:
            return resolved[index]
        stack = [index]
        while stack:
            current = stack[-1]
            pending = [d for d in nodes[current].deps if _empty(nodes[d]) and d not in resolved]
            if pending:
                stack.extend(pending)
                continue
            stack.pop()
            out: list[int] = []
            for d in nodes[current].deps:
                out.extend(resolved[d] if _empty(nodes[d]) else [d])
            resolved[current] = list(dict.fromkeys(out))
        return resolved[index]

    keep = [i for i, n in enumerate(nodes) if not _empty(n)]
    position = {old: new for new, old in enumerate(keep)}
    result = []
    for old in keep:
        node = nodes[old]
        deps: list[int] = []
        for d in node.deps:
            deps.extend(through(d) if _empty(nodes[d]) else [d])
        node.deps = sorted({position[d] for d in deps if d != old})
        result.append(node)
    return result


def _empty(node: TraceNode) -> bool:
    return node.kind == CPU and node.duration_us <= 0
