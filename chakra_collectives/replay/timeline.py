"""A replay's timeline for pictures: when every workload node ran, and how busy each link was.

:func:`timeline_document` is the ``"timeline"`` section of ``chakra-coll replay --json``
(what ``chakra-coll plot timeline`` and ``plot links`` draw):

* ``nodes``: columns ``rank``, ``kind`` (index into ``kinds``), ``start_ns``, ``end_ns``,
  ``collective`` (the call's index in ``collectives``, -1 for other nodes) and ``phase`` (for
  compute nodes, an index into ``phases``: forward, backward, optimizer or other compute, told
  from the node's name by :func:`phase_of`; -1 for other nodes), one entry per workload node; a
  collective's interval runs from when its dependencies were done to when its last operation
  on that rank completed;
* ``links``: per link that carried traffic, its utilization in each of ``bins`` equal time
  bins of ``bin_ns`` over the whole run (busy time in the bin / bin width, 0..1); present only
  when the replay recorded link intervals (``replay(..., record_links=True)``).

>>> import tempfile, pathlib
>>> from chakra_collectives.converters.chakra_et import single_collective_workload
>>> from chakra_collectives.replay import replay
>>> from chakra_collectives.topology import ring
>>> with tempfile.TemporaryDirectory() as tmp:
...     _ = single_collective_workload(pathlib.Path(tmp) / "w", "all-gather", 4, 4 * 2**20)
...     result = replay(pathlib.Path(tmp) / "w", ring(4, bidirectional=False), record_links=True)
>>> doc = timeline_document(result, bins=3)   # a one-way ring all-gather keeps every link busy
>>> doc["kinds"][doc["nodes"]["kind"][0]], doc["links"]["rows"][0]["utilization"]
('collective', [1.0, 1.0, 1.0])
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from chakra_collectives.converters.chakra_et.workload_reader import read_node_names
from chakra_collectives.ir.workload import NodeKind
from chakra_collectives.replay.replayer import ReplayResult

KINDS = ("compute", "collective", "send", "recv", "memory", "metadata")
PHASES = ("forward", "backward", "optimizer", "compute")
"""What a compute node does in a training step (``compute``: none of the others, or unknown)."""

_PHASE_WORDS = (
    (1, re.compile(r"(^|[^a-z])(backward|bwd|grad|wgrad|dgrad)", re.I)),
    (0, re.compile(r"(^|[^a-z])(forward|fwd)", re.I)),
    (2, re.compile(r"(optimi[sz]er|optim|adam|sgd|weight update)", re.I)),
)


def phase_of(name: str) -> int:
    """Index into :data:`PHASES` of a compute node called ``name``.

    >>> [PHASES[phase_of(n)] for n in ("forward embedding", "backward block 2", "optimizer step", "aten::mm")]
    ['forward', 'backward', 'optimizer', 'compute']
    """
    for phase, pattern in _PHASE_WORDS:
        if pattern.search(name):
            return phase
    return len(PHASES) - 1
_KIND_OF_TYPE = {
    NodeKind.COMP: 0,
    NodeKind.COMM_COLL: 1,
    NodeKind.COMM_SEND: 2,
    NodeKind.COMM_RECV: 3,
    NodeKind.MEM_LOAD: 4,
    NodeKind.MEM_STORE: 4,
    NodeKind.METADATA: 5,
}


def timeline_document(result: ReplayResult, *, bins: int = 200) -> dict[str, Any]:
    """The timeline of ``result`` (see the module docstring); ``bins`` time bins per link."""
    expanded, timing = result.expanded, result.timing
    if expanded is None or timing is None:
        raise ValueError("the replay result carries no timing")
    workload = expanded.workload
    w = len(workload)
    start = timing.start[expanded.begin_task]
    end = timing.end[:w]
    kind = np.zeros(w, dtype=np.int64)
    for node_type, code in _KIND_OF_TYPE.items():
        kind[workload.node_type == node_type] = code
    collective = np.full(w, -1, dtype=np.int64)
    for inst in expanded.instances:
        collective[inst.nodes] = inst.index
    phase = np.full(w, -1, dtype=np.int64)
    compute = np.flatnonzero(kind == 0)
    if len(compute):
        names = read_node_names(workload)
        phase[compute] = [phase_of(names[i]) for i in compute.tolist()]
    document: dict[str, Any] = {
        "kinds": list(KINDS),
        "phases": list(PHASES),
        "nodes": {
            "rank": workload.rank.tolist(),
            "kind": kind.tolist(),
            "start_ns": start.tolist(),
            "end_ns": end.tolist(),
            "collective": collective.tolist(),
            "phase": phase.tolist(),
        },
        "links": None,
    }
    intervals = timing.links.intervals
    if intervals or not np.any(timing.links.messages):
        document["links"] = _link_utilization(result, intervals, bins)
    return document


def _link_utilization(result: ReplayResult, intervals: list[tuple[int, float, float, int]], bins: int) -> dict[str, Any]:
    """Busy fraction of every used link in each time bin (intervals may overlap in principle)."""
    total = result.total_ns
    width = total / bins if total > 0 else 1.0
    edges = np.arange(bins + 1) * width
    rows = []
    if intervals:
        data = np.array([(l, b, e) for l, b, e, _ in intervals], dtype=np.float64)
        order = np.argsort(data[:, 0], kind="stable")
        data = data[order]
        links, first = np.unique(data[:, 0].astype(np.int64), return_index=True)
        bounds = np.append(first, len(data))
        topology_links = {l.link: l for l in result.links}
        for k, link in enumerate(links.tolist()):
            begin, finish = data[bounds[k] : bounds[k + 1], 1], data[bounds[k] : bounds[k + 1], 2]
            busy = np.diff(_busy_before(edges, begin, finish))
            stats = topology_links.get(link)
            rows.append({
                "link": link,
                "src": None if stats is None else stats.src,
                "dst": None if stats is None else stats.dst,
                "utilization": np.clip(busy / width, 0.0, 1.0).tolist(),
            })
    return {"bins": bins, "bin_ns": width, "rows": rows}


def _busy_before(t: np.ndarray, begin: np.ndarray, finish: np.ndarray) -> np.ndarray:
    """Total length of the intervals ``[begin, finish)`` that lies before each time ``t``.

    ``sum_i max(0, min(t, e_i) - b_i)`` = (intervals begun) x t - their begins - (intervals
    ended) x t + their ends, with counts and sums from sorted arrays.

    >>> _busy_before(np.array([0.0, 1.0, 2.5, 10.0]), np.array([0.0, 2.0]), np.array([2.0, 3.0])).tolist()
    [0.0, 1.0, 2.5, 3.0]
    """
    b, e = np.sort(begin), np.sort(finish)
    cb, ce = np.concatenate([[0.0], np.cumsum(b)]), np.concatenate([[0.0], np.cumsum(e)])
    nb = np.searchsorted(b, t, side="left")
    ne = np.searchsorted(e, t, side="left")
    return (nb * t - cb[nb]) - (ne * t - ce[ne])


__all__ = ["KINDS", "PHASES", "phase_of", "timeline_document"]
