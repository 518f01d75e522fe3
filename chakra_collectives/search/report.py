"""What a search found: rows ranked per group, Pareto fronts, and the document ``--json`` prints.

Rows are compared within a **group**: the same NPU count and workload variant. Within a group
the ranking is by iteration time (then cost, then names); failed rows come last with their
error. A row is on the **Pareto front** when no other row of its group is at least as good in
both coordinates and better in one: (iteration time, cost) for the fabric choice, and (time at
the small probe size, time at the large one) for the collective alone.

>>> pareto_front([(1, 5), (2, 2), (3, 3), (1, 6), (4, 1)])
[0, 1, 4]
>>> rows = [{"num_npus": 8, "workload": "w", "status": "ok", "iteration_ns": t, "cost": c, "topology": n, "algorithm": "a", "key": n}
...         for t, c, n in [(2.0, 16, "ring"), (1.0, 32, "torus"), (1.5, 64, "full")]]
>>> [(g.label, [r["topology"] for r in g.ranked], [r["topology"] for r in g.front]) for g in groups(rows)]
[('8 NPUs, w', ['torus', 'full', 'ring'], ['torus', 'ring'])]
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Sequence


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point dominates (both coordinates minimized), in input order."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], points[i][1], i))
    front, best_y = [], math.inf
    for i in order:
        if points[i][1] < best_y:
            front.append(i)
            best_y = points[i][1]
    return sorted(front)


def _rank_key(row: dict[str, Any]) -> tuple:
    return (row["iteration_ns"], row.get("cost") or 0.0, row["topology"], row["algorithm"], row.get("chunks_per_npu") or 0, row["key"])


@dataclass
class Group:
    """Rows of one NPU count and workload."""

    npus: int
    workload: str
    ranked: list[dict[str, Any]] = field(default_factory=list)
    """Successful rows, best first."""
    failed: list[dict[str, Any]] = field(default_factory=list)
    front: list[dict[str, Any]] = field(default_factory=list)
    """Rows on the (iteration time, cost) Pareto front, cheapest last."""
    probe_front: list[dict[str, Any]] = field(default_factory=list)
    """Rows on the (small-size, large-size collective time) front."""

    @property
    def label(self) -> str:
        return f"{self.npus} NPUs, {self.workload}"

    @property
    def winner(self) -> dict[str, Any] | None:
        return self.ranked[0] if self.ranked else None


def groups(rows: list[dict[str, Any]]) -> list[Group]:
    """Rows by (NPU count, workload), each ranked, with its fronts (groups in NPU, then first-seen order)."""
    found: dict[tuple[int, str], Group] = {}
    for row in rows:
        group = found.setdefault((row["num_npus"], row["workload"]), Group(row["num_npus"], row["workload"]))
        (group.ranked if row["status"] == "ok" else group.failed).append(row)
    for group in found.values():
        group.ranked.sort(key=_rank_key)
        group.failed.sort(key=lambda r: (r["topology"], r["algorithm"], r["key"]))
        points = [(r["iteration_ns"], r.get("cost") or 0.0) for r in group.ranked]
        group.front = [group.ranked[i] for i in pareto_front(points)]
        probed = [r for r in group.ranked if r.get("probe_small_ns") is not None]
        group.probe_front = [probed[i] for i in pareto_front([(r["probe_small_ns"], r["probe_large_ns"]) for r in probed])]
    return sorted(found.values(), key=lambda g: g.npus)


def row_summary(row: dict[str, Any]) -> dict[str, Any]:
    """A row as ``--json`` shows it (the collectives decoded)."""
    shown = {k: v for k, v in row.items() if k != "collectives"}
    shown["collectives"] = json.loads(row["collectives"]) if row.get("collectives") else []
    return shown


def group_document(group: Group, *, top: int | None = None) -> dict[str, Any]:
    """One group for ``--json``: ranked rows, fronts (as topology/algorithm pairs), failures."""
    pair = lambda r: {"topology": r["topology"], "algorithm": r["algorithm"], "chunks_per_npu": r["chunks_per_npu"]}  # noqa: E731
    return {
        "num_npus": group.npus,
        "workload": group.workload,
        "ranked": [row_summary(r) for r in group.ranked[:top]],
        "pareto_iteration_vs_cost": [pair(r) for r in group.front],
        "pareto_small_vs_large": [pair(r) for r in group.probe_front],
        "failed": [{**pair(r), "error": r["error"]} for r in group.failed],
    }


__all__ = ["Group", "group_document", "groups", "pareto_front", "row_summary"]
