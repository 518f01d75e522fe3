"""Perfetto / Chrome trace (JSON) of a replay: what every rank and every link did, and when.

Open the file in https://ui.perfetto.dev (or chrome://tracing). Layout:

* one process per rank (``rank 0``, ``rank 1``, ...) with a ``compute`` track (COMP, memory and
  other nodes), a ``collectives`` track (each collective call from when it could start to when
  the rank's part of it finished) and a ``send/recv`` track (point-to-point messages). Slices
  are named after the workload's nodes (``forward embedding``, ``tp all-reduce forward
  block``), with the collective, size, algorithm and call in their arguments;
* one process ``links`` with a track per link that carried traffic (``link 3: 0->1``), a slice
  per message hop named after the collective call (or message) it belongs to;
* flow arrows from every point-to-point SEND to its RECV.

Slices on one track never overlap: calls that run at the same time on a rank (several
all-reduces in flight) get extra tracks (``collectives (2)``), so every track nests as the
format requires. Times are microseconds (the format's unit) from the replay's nanoseconds.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from chakra_collectives.ir.workload import NodeKind, node_type_name
from chakra_collectives.converters.chakra_et.workload_reader import read_node_names
from chakra_collectives.errors import InputError
from chakra_collectives.replay.lanes import assign_lanes
from chakra_collectives.replay.replayer import ReplayResult
from chakra_collectives.topology import Topology

TRACKS = ("compute", "collectives", "send/recv")
"""The tracks of a rank, in display order (each may grow extra lanes)."""

LANES_PER_TRACK = 1000
"""Thread ids of a rank: ``track * LANES_PER_TRACK + lane + 1``."""


def trace_events(result: ReplayResult, topology: Topology) -> Iterator[dict[str, Any]]:
    """Every event of the trace (metadata first); ``result`` must come from ``replay(record_links=True)``."""
    expanded, timing = result.expanded, result.timing
    if expanded is None or timing is None:
        raise ValueError("the replay result carries no timing")
    workload = expanded.workload
    w = len(workload)
    names = read_node_names(workload)
    start = timing.start[expanded.begin_task]
    end = timing.end[:w]
    kind = workload.node_type
    track = np.where(kind == NodeKind.COMM_COLL, 1, np.where((kind == NodeKind.COMM_SEND) | (kind == NodeKind.COMM_RECV), 2, 0))
    lane = np.zeros(w, dtype=np.int64)
    for rank in range(workload.num_ranks):
        for t in range(len(TRACKS)):
            pick = np.flatnonzero((workload.rank == rank) & (track == t))
            if len(pick):
                lane[pick] = assign_lanes(start[pick], end[pick])
    tid = track * LANES_PER_TRACK + lane + 1
    links_pid = workload.num_ranks + 1
    yield {"ph": "M", "name": "process_name", "pid": links_pid, "args": {"name": "links"}}
    yield {"ph": "M", "name": "process_sort_index", "pid": links_pid, "args": {"sort_index": links_pid}}
    for rank in range(workload.num_ranks):
        pid = rank + 1
        yield {"ph": "M", "name": "process_name", "pid": pid, "args": {"name": f"rank {rank}"}}
        yield {"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": pid}}
        mine = workload.rank == rank
        for t, name in enumerate(TRACKS):
            used = np.unique(lane[mine & (track == t)])
            for k in used.tolist():
                thread = t * LANES_PER_TRACK + k + 1
                label = name if k == 0 else f"{name} ({k + 1})"
                yield {"ph": "M", "name": "thread_name", "pid": pid, "tid": thread, "args": {"name": label}}
                yield {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": thread, "args": {"sort_index": thread}}
    instance_of_node = {node: inst for inst in expanded.instances for node in inst.nodes}
    for i in range(w):
        node_kind = int(kind[i])
        type_name = node_type_name(node_kind)
        args: dict[str, Any] = {"node": int(workload.node_id[i]), "type": type_name}
        label = names[i] or f"{type_name} node {int(workload.node_id[i])}"
        if node_kind == NodeKind.COMM_COLL:
            inst = instance_of_node[i]
            args.update(collective=inst.collective, bytes=inst.size_bytes, algorithm=inst.algorithm, call=inst.index, group=inst.group or "all ranks")
            label = names[i] or f"{inst.collective} #{inst.index}"
        elif node_kind in (NodeKind.COMM_SEND, NodeKind.COMM_RECV):
            args.update(peer=int(workload.peer[i]), tag=int(workload.tag[i]), bytes=int(workload.comm_size[i]))
            label = names[i] or f"{'send to' if node_kind == NodeKind.COMM_SEND else 'recv from'} {int(workload.peer[i])}"
        elif node_kind == NodeKind.COMP:
            args.update(cpu=bool(workload.is_cpu_op[i]))
        if np.isnan(start[i]) or np.isnan(end[i]):
            continue
        yield {
            "ph": "X",
            "name": label,
            "cat": type_name,
            "pid": int(workload.rank[i]) + 1,
            "tid": int(tid[i]),
            "ts": float(start[i]) / 1000.0,
            "dur": float(end[i] - start[i]) / 1000.0,
            "args": args,
        }
    yield from _flows(result, start, end, tid)
    yield from _links(result, topology, names, links_pid)


def _flows(result: ReplayResult, start: np.ndarray, end: np.ndarray, tid: np.ndarray) -> Iterator[dict[str, Any]]:
    """An arrow from every point-to-point SEND node to its RECV (the message's journey)."""
    expanded = result.expanded
    workload = expanded.workload
    w = len(workload)
    partner = expanded.graph.partner[:w]
    sends = np.flatnonzero((workload.node_type == NodeKind.COMM_SEND) & (partner >= 0) & (partner < w))
    for flow, send in enumerate(sends.tolist()):
        recv = int(partner[send])
        if np.isnan(end[recv]) or np.isnan(start[send]):
            continue
        arrive = max(float(start[recv]), float(end[recv]) - min(1.0, (float(end[recv]) - float(start[recv])) / 2))  # inside the RECV slice
        common = {"name": "message", "cat": "message", "id": flow}
        yield {**common, "ph": "s", "pid": int(workload.rank[send]) + 1, "tid": int(tid[send]), "ts": float(start[send]) / 1000.0}
        yield {**common, "ph": "f", "bp": "e", "pid": int(workload.rank[recv]) + 1, "tid": int(tid[recv]), "ts": arrive / 1000.0}


def _links(result: ReplayResult, topology: Topology, names: list[str], pid: int) -> Iterator[dict[str, Any]]:
    expanded, timing = result.expanded, result.timing
    intervals = timing.links.intervals
    if not intervals:
        return
    data = np.array([(l, b, e) for l, b, e, _ in intervals], dtype=np.float64)
    task = np.array([t for _, _, _, t in intervals], dtype=np.int64)
    link = data[:, 0].astype(np.int64)
    lane = np.zeros(len(data), dtype=np.int64)
    for l in np.unique(link).tolist():
        pick = np.flatnonzero(link == l)
        lane[pick] = assign_lanes(data[pick, 1], data[pick, 2])
    tracks, thread = np.unique(np.stack([link, lane], axis=1), axis=0, return_inverse=True)
    thread = thread.reshape(-1) + 1
    for number, (l, k) in enumerate(tracks.tolist(), start=1):
        src, dst = topology.links[l].src, topology.links[l].dst
        label = f"link {l}: {_node(topology, src)}->{_node(topology, dst)}" + ("" if k == 0 else f" ({k + 1})")
        yield {"ph": "M", "name": "thread_name", "pid": pid, "tid": number, "args": {"name": label}}
        yield {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": number, "args": {"sort_index": number}}
    instances = expanded.instances
    call_name = {inst.index: (names[inst.nodes[0]] or f"{inst.collective} #{inst.index}") for inst in instances}
    instance_of_task = expanded.instance_of_task
    nbytes = expanded.graph.nbytes
    for (l, begin, finish), t, th in zip(data.tolist(), task.tolist(), thread.tolist()):
        owner = int(instance_of_task[t])
        name = call_name[owner] if owner >= 0 else (names[t] if t < len(names) and names[t] else "message")
        yield {
            "ph": "X",
            "name": name,
            "cat": "link",
            "pid": pid,
            "tid": int(th),
            "ts": begin / 1000.0,
            "dur": (finish - begin) / 1000.0,
            "args": {"bytes": int(nbytes[t]), "call": owner if owner >= 0 else None},
        }


def _node(topology: Topology, node: int) -> str:
    return f"s{node - topology.num_npus}" if topology.is_switch(node) else str(node)


def write_trace(result: ReplayResult, topology: Topology, path: str | Path) -> Path:
    """Write the trace to ``path`` (temporary name, then rename)."""
    path = Path(path)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with temp.open("w") as out:
            out.write('{"displayTimeUnit": "ns", "traceEvents": [\n')
            first = True
            for event in trace_events(result, topology):
                if not first:
                    out.write(",\n")
                out.write(json.dumps(event, separators=(",", ":")))
                first = False
            out.write("\n]}\n")
        os.replace(temp, path)
    except OSError as exc:
        temp.unlink(missing_ok=True)
        raise InputError(f"cannot write trace: {exc.strerror}", path=path) from None
    return path


__all__ = ["trace_events", "write_trace"]
