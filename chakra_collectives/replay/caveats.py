"""Warnings about a replay whose numbers may not mean what the user expects.

A workload that runs fine can still be the wrong experiment: fewer ranks than the topology has
NPUs, collectives whose group is a single rank (they take no time), no compute time at all (a
host trace converted without device times), or nodes that take 0 ns because nothing says how
long they take. Each becomes one line in ``ReplayResult.warnings``.

>>> import numpy as np
>>> from types import SimpleNamespace
>>> w = SimpleNamespace(num_ranks=1, node_type=np.array([4, 4, 7]), duration_ns=np.zeros(3))
>>> for line in caveats(w, num_npus=8, topology="switch:8", collapsed=1):
...     print(line)
the workload has 1 rank but switch:8 has 8 NPUs: rank r runs on NPU r, the other 7 NPUs only carry traffic
1 collective runs over a group of one rank and takes no time
every COMP node has duration 0: compute takes no time (a trace converted without device times?)
"""

from __future__ import annotations

import numpy as np

from chakra_collectives.ir.workload import OTHER_TIMED, NodeKind, node_type_name


def caveats(workload, *, num_npus: int, topology: str, collapsed: int) -> list[str]:
    """The warnings for ``workload`` replayed on ``num_npus`` NPUs with ``collapsed`` single-rank collectives."""
    found = []
    if workload.num_ranks < num_npus:
        idle = num_npus - workload.num_ranks
        found.append(
            f"the workload has {workload.num_ranks} rank{'s' if workload.num_ranks > 1 else ''} but {topology} has {num_npus} NPUs: "
            f"rank r runs on NPU r, the other {idle} NPU{'s only carry' if idle > 1 else ' only carries'} traffic"
        )
    if collapsed:
        found.append(f"{collapsed} collective{'s' if collapsed > 1 else ''} run{'' if collapsed > 1 else 's'} over a group of one rank and "
                     f"take{'' if collapsed > 1 else 's'} no time")
    comp = workload.node_type == NodeKind.COMP
    if np.any(comp) and not np.any(workload.duration_ns[comp] > 0):
        found.append("every COMP node has duration 0: compute takes no time (a trace converted without device times?)")
    for code in OTHER_TIMED:
        zero = int(np.count_nonzero((workload.node_type == code) & (workload.duration_ns <= 0)))
        if zero:
            name = node_type_name(code)
            found.append(f"{zero} {name} node{'s' if zero > 1 else ''} take{'' if zero > 1 else 's'} 0 ns (no duration to replay)")
    return found
