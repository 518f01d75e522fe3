"""Process groups embedded in a fabric: which NPUs a group's ranks run on, and the fabric as the
group sees it.

A process group is a tuple of fabric NPUs in rank order: group rank ``i`` runs on NPU
``group[i]``. Its members send and receive; every other NPU and every switch only carries
traffic. :func:`group_view` is the fabric relabelled for the group -- members first as NPUs
``0 .. g-1``, every other node a switch -- so that any analysis written for "NPUs exchange,
switches forward" (lower bounds, ForestColl's trees) serves the group unchanged, and
:meth:`GroupView.to_fabric` maps its paths back to the fabric's node ids.

>>> from chakra_collectives.topology import torus2d
>>> view = group_view(torus2d(4, 4), (0, 4, 8, 12))
>>> view.topology.num_npus, view.topology.num_switches, len(view.topology.links)
(4, 12, 64)
>>> view.to_fabric((0, 4, 1))        # group rank 0 -> a relay -> group rank 1
(0, 1, 4)
>>> parse_group("0,4,8,12", 16), parse_group("4-7", 16)
((0, 4, 8, 12), (4, 5, 6, 7))
>>> parse_group("0,0,1", 16)
Traceback (most recent call last):
...
chakra_collectives.errors.InputError: group 0,0,1: rank 0 appears twice
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from chakra_collectives.errors import InputError
from chakra_collectives.topology.core import Topology


def check_group(members: Sequence[int], num_npus: int, *, what: str = "group") -> tuple[int, ...]:
    """``members`` as a tuple, or :class:`InputError` naming the first problem: a rank outside
    the fabric (``0 .. num_npus-1``), a rank listed twice, or fewer than two ranks."""
    group = tuple(int(m) for m in members)
    for m in group:
        if not 0 <= m < num_npus:
            raise InputError(f"{what}: rank {m} is not an NPU of the fabric (0..{num_npus - 1})")
    seen: set[int] = set()
    for m in group:
        if m in seen:
            raise InputError(f"{what}: rank {m} appears twice")
        seen.add(m)
    if len(group) < 2:
        raise InputError(f"{what}: a group needs at least two ranks, got {len(group)}")
    return group


def parse_group(text: str, num_npus: int) -> tuple[int, ...]:
    """``"0,4,8,12"`` or ``"0-3"`` (ranges and single ranks, comma-separated, in rank order) as a
    checked group (:func:`check_group`)."""
    ranks: list[int] = []
    for part in text.split(","):
        low, sep, high = part.strip().partition("-")
        try:
            first, last = int(low), int(high) if sep else int(low)
        except ValueError:
            raise InputError(f"group {text!r}: expected ranks and ranges such as 0,4,8,12 or 0-3") from None
        if last < first:
            raise InputError(f"group {text!r}: range {part.strip()} runs backwards")
        ranks.extend(range(first, last + 1))
    return check_group(ranks, num_npus, what=f"group {text}")


def disjoint_groups(groups: dict[str, tuple[int, ...]], *, what: str) -> None:
    """:class:`InputError` when two of ``groups`` (run by one concurrent call) share a rank."""
    owner: dict[int, str] = {}
    for name, members in groups.items():
        for m in members:
            if m in owner:
                raise InputError(f"{what}: groups {owner[m]!r} and {name!r} both hold rank {m}; groups of one call must be disjoint")
            owner[m] = name


def carrying_symmetry(topology: Topology, source: Sequence[int], target: Sequence[int], family: Sequence[Sequence[int]] = ()) -> np.ndarray | None:
    """A symmetry of ``topology`` (:attr:`~chakra_collectives.topology.Topology.symmetry`, a node
    permutation) that carries group ``source`` onto ``target`` rank by rank and maps the groups of
    ``family`` onto one another; ``None`` when the builder knows none.

    >>> from chakra_collectives.topology import torus2d
    >>> columns = [(c, c + 4, c + 8, c + 12) for c in range(4)]
    >>> carrying_symmetry(torus2d(4, 4), columns[0], columns[2], columns)[:4].tolist()   # two steps along the rows
    [2, 3, 0, 1]
    >>> carrying_symmetry(torus2d(4, 4), (0, 1), (0, 5)) is None
    True
    """
    symmetry = topology.symmetry
    if symmetry is None or len(source) != len(target):
        return None
    elements = symmetry.elements
    fits = np.all(elements[:, list(source)] == np.asarray(target), axis=1)
    groups = {frozenset(g) for g in family}
    for row in np.flatnonzero(fits):
        perm = elements[row]
        if all(frozenset(perm[list(g)].tolist()) in groups for g in family):
            return perm
    return None


def family_isomorphism(topology: Topology, source: Sequence[Sequence[int]], target: Sequence[Sequence[int]]) -> np.ndarray | None:
    """A node permutation that carries every group of ``source`` onto the group of ``target`` at
    the same position rank by rank, every other node onto itself, and is an automorphism of
    ``topology`` (every link onto a link of the same bandwidth and latency); ``None`` when that
    map is not one. Unlike :func:`carrying_symmetry` it needs no symmetry the builder declared:
    a square torus's rows go onto its columns by the transposition.

    >>> from chakra_collectives.topology import torus2d
    >>> rows = [tuple(range(4 * r, 4 * r + 4)) for r in range(4)]
    >>> columns = [tuple(range(c, 16, 4)) for c in range(4)]
    >>> family_isomorphism(torus2d(4, 4), rows, columns)[:6].tolist()
    [0, 4, 8, 12, 1, 5]
    >>> family_isomorphism(torus2d(4, 4), rows, [(0, 5, 10, 15), (1, 6, 11, 12), (2, 7, 8, 13), (3, 4, 9, 14)]) is None
    True
    """
    if len(source) != len(target) or any(len(a) != len(b) for a, b in zip(source, target)):
        return None
    perm = np.arange(topology.num_nodes, dtype=np.int64)
    moved_from = np.concatenate([np.asarray(a, dtype=np.int64) for a in source]) if source else np.zeros(0, dtype=np.int64)
    moved_to = np.concatenate([np.asarray(b, dtype=np.int64) for b in target]) if target else np.zeros(0, dtype=np.int64)
    perm[moved_from] = moved_to
    if len(np.unique(perm)) != len(perm):  # a node left in place is another's image
        return None
    arrays = topology.link_arrays
    links = np.stack([arrays["src"], arrays["dst"], arrays["bandwidth_gbps"], arrays["latency_ns"]], axis=1)
    images = np.stack([perm[arrays["src"]], perm[arrays["dst"]], arrays["bandwidth_gbps"], arrays["latency_ns"]], axis=1)
    same = np.array_equal(links[np.lexsort(links.T[::-1])], images[np.lexsort(images.T[::-1])])
    return perm if same else None


@dataclass(frozen=True)
class GroupView:
    """The fabric relabelled for one group (see the module docstring)."""

    topology: Topology
    """Members as NPUs ``0 .. g-1`` (rank order), the other NPUs then the switches as switches;
    the fabric's links in the fabric's order."""
    fabric_node: np.ndarray
    """The fabric node id of each node of :attr:`topology`."""

    def to_fabric(self, path: Iterable[int]) -> tuple[int, ...]:
        """A path of view node ids as fabric node ids."""
        return tuple(int(self.fabric_node[v]) for v in path)


def group_view(topology: Topology, group: Sequence[int]) -> GroupView:
    """``topology`` as ``group`` sees it: its members the only NPUs (see the module docstring)."""
    group = check_group(group, topology.num_npus)
    is_member = np.zeros(topology.num_nodes, dtype=bool)
    is_member[list(group)] = True
    others = np.flatnonzero(~is_member)
    fabric_node = np.concatenate([np.asarray(group, dtype=np.int64), others])
    view_node = np.empty(topology.num_nodes, dtype=np.int64)
    view_node[fabric_node] = np.arange(topology.num_nodes)
    view = Topology(len(group), num_switches=topology.num_nodes - len(group), name=f"{topology.name} group {describe_group(group)}")
    for link in topology.links:
        view.add_link(int(view_node[link.src]), int(view_node[link.dst]), link.bandwidth_gbps, link.latency_ns)
    return GroupView(view, fabric_node)


def describe_group(group: Sequence[int]) -> str:
    """A group in few characters, rank order kept.

    >>> describe_group((0, 1, 2, 3, 8)), describe_group((0, 4, 8, 12))
    ('0-3,8', '0,4,8,12')
    """
    spans: list[str] = []
    start = previous = group[0]
    for current in [*group[1:], None]:
        if current != previous + 1:
            spans.append(str(start) if start == previous else f"{start}-{previous}")
            start = current
        previous = current  # type: ignore[assignment]
    return ",".join(spans)


__all__ = ["GroupView", "carrying_symmetry", "check_group", "describe_group", "disjoint_groups", "family_isomorphism", "group_view", "parse_group"]
