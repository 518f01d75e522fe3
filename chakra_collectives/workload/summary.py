"""What a workload holds, before replaying it: what ``chakra-coll inspect`` prints for workload ETs.

Per rank: nodes by type (COMP split into GPU and CPU work), compute time, and the critical
path of compute -- the longest chain of dependencies weighted by the nodes' durations, with
collectives taking no time (so it is what the step would take on an infinitely fast
network). Over all ranks: collectives by type, group and size, and the process groups.

>>> import tempfile, pathlib
>>> from chakra_collectives.converters.chakra_et import read_workload
>>> from chakra_collectives.converters.chakra_et.workload_writer import WorkloadBuilder
>>> b = WorkloadBuilder(2)
>>> for r in range(2):
...     fwd = b.comp(r, duration_ns=30_000)
...     ar = b.collective(r, "all-reduce", 2**20, deps=[fwd])
...     _ = b.comp(r, duration_ns=10_000, deps=[ar], cpu=True)
>>> with tempfile.TemporaryDirectory() as tmp:
...     _ = b.write(pathlib.Path(tmp) / "w")
...     stats = summarize_workload(read_workload(pathlib.Path(tmp) / "w"))
>>> stats["ranks"][0]["critical_path_ns"], stats["ranks"][0]["cpu_compute_ns"], stats["collectives"]
(40000.0, 10000.0, [{'collective': 'all-reduce', 'group': None, 'size_bytes': 1048576, 'calls': 2, 'ranks': 2}])
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from chakra_collectives.ir.workload import COMMUNICATION, NodeKind, Workload, collective_name, node_type_name
from chakra_collectives.ir.dag import longest_path


def summarize_workload(workload: Workload) -> dict[str, Any]:
    """Nodes, compute and critical path per rank; collectives and groups over all ranks."""
    types, rank = workload.node_type, workload.rank
    timed = ~np.isin(types, COMMUNICATION)
    finish = longest_path(workload.dep_ptr, workload.dep_idx, np.where(timed, workload.duration_ns, 0.0))
    comp = types == NodeKind.COMP
    cpu = comp & workload.is_cpu_op
    bounds = workload.rank_bounds()
    ranks = []
    for r in range(workload.num_ranks):
        part = slice(bounds[r], bounds[r + 1])
        counts = Counter(types[part].tolist())
        path = finish[part]
        ranks.append({
            "rank": r,
            "nodes": int(bounds[r + 1] - bounds[r]),
            "types": {node_type_name(t): counts.get(t, 0) for t in NodeKind if counts.get(t, 0)},
            "cpu_comp_nodes": int(np.count_nonzero(cpu[part])),
            "compute_ns": float(workload.duration_ns[part][timed[part]].sum()),
            "cpu_compute_ns": float(workload.duration_ns[part][cpu[part]].sum()),
            "critical_path_ns": float(np.nanmax(path)) if len(path) and not np.all(np.isnan(path)) else 0.0,
            "blocked_by_cycles": int(np.count_nonzero(np.isnan(path))),
        })
    return {
        "prefix": workload.prefix,
        "num_ranks": workload.num_ranks,
        "nodes": len(workload),
        "ranks": ranks,
        "collectives": _collectives(workload),
        "groups": sorted({name for name in workload.pg_name if name is not None}),
        "point_to_point_bytes": int(workload.comm_size[types == NodeKind.COMM_SEND].sum()),
        "repairs": workload.repairs.describe(),
    }


def _collectives(workload: Workload) -> list[dict[str, Any]]:
    """Distinct (collective, group, size): how many calls in all and how many ranks make them."""
    coll = np.flatnonzero(workload.node_type == NodeKind.COMM_COLL).tolist()
    calls: Counter = Counter()
    callers: dict[tuple, set[int]] = {}
    for i in coll:
        key = (collective_name(int(workload.comm_type[i])), workload.pg_name[i], int(workload.comm_size[i]))
        calls[key] += 1
        callers.setdefault(key, set()).add(int(workload.rank[i]))
    return [
        {"collective": kind, "group": group, "size_bytes": size, "calls": count, "ranks": len(callers[(kind, group, size)])}
        for (kind, group, size), count in calls.items()
    ]
