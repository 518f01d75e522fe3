"""Chrome-trace / Perfetto JSON of a replay: a track per rank and a track per link.

Open the file in https://ui.perfetto.dev or chrome://tracing. Process "ranks" has one
thread per rank showing its workload nodes (COMP, collectives from begin to end,
point-to-point messages); process "links" has one thread per link that carried traffic, with
one slice per message hop named after the collective it belongs to. Times are written in
microseconds (the format's unit) from the replay's nanoseconds.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator

from chakra.schema.protobuf.et_def_pb2 import COMM_COLL_NODE, COMM_RECV_NODE, COMM_SEND_NODE, COMP_NODE

from chakra_collectives.converters.chakra_et.workload_reader import node_type_name
from chakra_collectives.errors import InputError
from chakra_collectives.replay.replayer import ReplayResult
from chakra_collectives.topology import Topology

RANKS_PID, LINKS_PID = 1, 2


def trace_events(result: ReplayResult, topology: Topology) -> Iterator[dict[str, Any]]:
    """Every event of the trace (metadata first); ``result`` must come from ``replay(record_links=True)``."""
    expanded, timing = result.expanded, result.timing
    if expanded is None or timing is None:
        raise ValueError("the replay result carries no timing")
    workload = expanded.workload
    yield {"ph": "M", "name": "process_name", "pid": RANKS_PID, "args": {"name": "ranks"}}
    yield {"ph": "M", "name": "process_name", "pid": LINKS_PID, "args": {"name": "links"}}
    for rank in range(workload.num_ranks):
        yield {"ph": "M", "name": "thread_name", "pid": RANKS_PID, "tid": rank, "args": {"name": f"rank {rank}"}}
    w = len(workload)
    start = timing.start[expanded.begin_task]
    end = timing.end[:w]
    instance_of_node = {}
    for inst in expanded.instances:
        for node in inst.nodes:
            instance_of_node[node] = inst
    for i in range(w):
        kind = int(workload.node_type[i])
        type_name = node_type_name(kind)
        args: dict[str, Any] = {"node": int(workload.node_id[i]), "type": type_name}
        name = type_name.lower()
        if kind == COMM_COLL_NODE:
            inst = instance_of_node[i]
            args.update(collective=inst.collective, bytes=inst.size_bytes, algorithm=inst.algorithm, call=inst.index)
            name = f"{inst.collective} #{inst.index}"
        elif kind in (COMM_SEND_NODE, COMM_RECV_NODE):
            args.update(peer=int(workload.peer[i]), tag=int(workload.tag[i]), bytes=int(workload.comm_size[i]))
            name = f"{'send to' if kind == COMM_SEND_NODE else 'recv from'} {int(workload.peer[i])}"
        elif kind == COMP_NODE:
            args.update(cpu=bool(workload.is_cpu_op[i]))
        yield {
            "ph": "X",
            "name": name,
            "cat": type_name,
            "pid": RANKS_PID,
            "tid": int(workload.rank[i]),
            "ts": float(start[i]) / 1000.0,
            "dur": float(end[i] - start[i]) / 1000.0,
            "args": args,
        }
    used = sorted({hop[0] for hop in timing.links.intervals})
    for link in used:
        src, dst = topology.links[link].src, topology.links[link].dst
        yield {"ph": "M", "name": "thread_name", "pid": LINKS_PID, "tid": link, "args": {"name": f"link {link}: {src}->{dst}"}}
    names = {inst.index: f"{inst.collective} #{inst.index}" for inst in expanded.instances}
    instance_of_task = expanded.instance_of_task
    nbytes = expanded.graph.nbytes
    for link, begin, finish, task in timing.links.intervals:
        owner = int(instance_of_task[task])
        yield {
            "ph": "X",
            "name": names.get(owner, "send"),
            "cat": "link",
            "pid": LINKS_PID,
            "tid": link,
            "ts": float(begin) / 1000.0,
            "dur": float(finish - begin) / 1000.0,
            "args": {"bytes": int(nbytes[task])},
        }


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
