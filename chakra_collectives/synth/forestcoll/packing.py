"""Pack spanning out-trees: every root its units, every edge within its capacity (Edmonds).

Input: a switch-free graph on the NPUs with integer capacities
(:class:`~chakra_collectives.synth.forestcoll.splitting.LogicalGraph`) and a supply per NPU (the
tree units rooted there). Edmonds' branching theorem says trees with those roots, together
loading no edge beyond its capacity, exist iff the flow test of
:mod:`~chakra_collectives.synth.forestcoll.connectivity` passes; Lovász's proof builds them:
grow one tree at a time, edge by edge, adding an edge only when the test still passes
afterwards. A tree carries a *weight* (units moving together); when an edge can take only part
of it, the tree splits in two -- the part that takes the edge, and a copy that does not
(ForestColl's generator does the same), so few distinct trees carry many units.

Two ways to run the test:

* **one tree at a time, one flow per edge** (no symmetry): the most a candidate edge ``x -> y``
  can take is one max-flow from ``x`` to ``y`` in the residual graph with every other
  unfinished tree's weight fed into the nodes it reaches (ForestColl's ``test_edge``);
* **a symmetry class at a time** (:mod:`~chakra_collectives.topology.symmetry`): the tree of
  one root is grown together with its images at every root of its class, so the state stays
  symmetric and one sink per class decides the test; edges are tried a whole breadth-first
  layer at once (bisected when the layer fails), which keeps trees shallow and tests few.

>>> from chakra_collectives.synth.forestcoll.splitting import LogicalGraph
>>> ring = LogicalGraph(3, {(0, 1): 2, (1, 2): 2, (2, 0): 2}, {})
>>> forest = pack_trees(ring, {0: 1, 1: 1, 2: 1})
>>> [(t.root, t.weight, t.parent.tolist()) for t in forest.trees]
[(0, 1, [-1, 0, 1]), (1, 1, [2, -1, 1]), (2, 1, [2, 0, -1])]
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from chakra_collectives.errors import AlgorithmError
from chakra_collectives.synth.forestcoll.connectivity import Connectivity, Gadget
from chakra_collectives.synth.forestcoll.splitting import LogicalGraph


@dataclass
class Tree:
    """A spanning out-tree: ``parent[v]`` (``-1`` at the root), its weight in units, BFS order."""

    root: int
    weight: int
    parent: np.ndarray
    order: np.ndarray
    """Nodes in the order they joined (the root first): every parent before its children."""
    lineage: tuple[int, ...] = ()
    """Where the tree came from when trees split (0: took the edge, 1: the copy without it):
    trees of one root in lineage order share the most edges with their neighbours."""

    def edges(self) -> list[tuple[int, int]]:
        return [(int(self.parent[v]), int(v)) for v in self.order[1:].tolist()]

    def depth(self) -> int:
        level = np.zeros(len(self.parent), dtype=np.int64)
        for v in self.order[1:].tolist():
            level[v] = level[self.parent[v]] + 1
        return int(level.max())


@dataclass
class Forest:
    """The packed trees (every image under the symmetry included)."""

    num_npus: int
    trees: list[Tree]
    tests: int = 0
    """Flow tests run."""
    base_trees: int = 0
    """Trees grown (the rest are their images under the symmetry)."""

    def depths(self) -> tuple[int, int]:
        """``(deepest tree, total depth)`` in NPU hops: every hop of a tree is a store-and-forward
        step its last piece waits for."""
        depths = [tree.depth() for tree in self.trees]
        return max(depths, default=0), sum(depths)

    def loads(self) -> dict[tuple[int, int], int]:
        """Units each edge carries."""
        load: dict[tuple[int, int], int] = {}
        for tree in self.trees:
            for edge in tree.edges():
                load[edge] = load.get(edge, 0) + tree.weight
        return load


SHALLOW = False

LOOKAHEAD = 4
"""Layers of a growing tree tested together at first (see ``_Packer.ahead``)."""
MAX_LOOKAHEAD = 64


@dataclass
class _Growing:
    root: int
    weight: int
    parent: dict[int, int]
    order: list[int]
    dead: set[tuple[int, int]] = field(default_factory=set)
    depth: dict[int, int] = field(default_factory=dict)
    lineage: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        self.depth.setdefault(self.root, 0)

    def copy(self, weight: int) -> "_Growing":
        return _Growing(self.root, weight, dict(self.parent), list(self.order), set(self.dead), dict(self.depth), self.lineage)

    def fork(self, units: int) -> "_Growing":
        """Keep ``units`` of the weight here, return a copy with the rest (lineages tell them apart)."""
        rest = self.copy(self.weight - units)
        rest.lineage = self.lineage + (1,)
        self.lineage = self.lineage + (0,)
        self.weight = units
        return rest


class _Deeper(Exception):
    """The forest being packed is already deeper than the one to beat (``pack_trees(beat=...)``)."""


class _Packer:
    def __init__(
        self, graph: LogicalGraph, supply: dict[int, int], elements: np.ndarray, sinks: Sequence[int], progress, beat: tuple[int, int] | None = None
    ) -> None:
        self.n = graph.num_npus
        self.capacity = dict(graph.capacity)
        self.elements = elements
        self.order = len(elements)
        self.connectivity = Connectivity(self.n, self.n, self.capacity, sinks=sinks)
        self.out: list[list[int]] = [[] for _ in range(self.n)]
        for u, v in sorted(self.capacity):
            self.out[u].append(v)
        self.pending: deque[_Growing] = deque()
        reps = sorted(supply)
        for r in reps:
            if supply[r] > 0:
                self.pending.append(_Growing(r, supply[r], {}, [r]))
        self.done: list[_Growing] = []
        self.tests = 0
        self.overdrawn = 0
        """Edges loaded beyond their capacity by tentative additions (the test fails while any is)."""
        self.progress = progress
        self.lookahead = LOOKAHEAD
        """Layers :meth:`ahead` may test together (doubled when that passes, halved when not)."""
        self.beat = beat
        """``(deepest tree, total depth)`` of a forest to beat: packing stops (:class:`_Deeper`)
        once the trees grown so far make that impossible."""
        self.grown_depths = (0, 0)
        """``(deepest, total depth)`` of the trees grown so far, every image counted."""
        self.edge_images: dict[tuple[int, int], list[tuple[int, int]]] = {}
        """Every image of an edge (:meth:`images_of`), kept: the growth asks for the same edges'
        images thousands of times (mi250:2, one tree per NPU: 5,200 additions and removals)."""

    # ------------------------------------------------------------ state
    def images(self, nodes: list[int]) -> np.ndarray:
        """``(order, len(nodes))``: every image of the node list."""
        return self.elements[:, nodes]

    def unfinished(self, current: _Growing) -> tuple[dict[int, int], list[Gadget]]:
        """Supply of not-started trees and gadgets of partly built ones (all images), ``current`` included."""
        supply: dict[int, int] = {}
        gadgets: list[Gadget] = []
        for tree in [current, *self.pending]:
            if len(tree.order) == 1:
                for r in self.elements[:, tree.root].tolist():
                    supply[r] = supply.get(r, 0) + tree.weight
            else:
                for image in self.images(tree.order):
                    gadgets.append(Gadget(tree.weight, image))
        return supply, gadgets

    def consume(self, edge: tuple[int, int], units: int) -> None:
        capacity = self.capacity
        for key in self.images_of(edge):
            before = capacity[key]
            capacity[key] = after = before - units
            self.overdrawn += int(after < 0) - int(before < 0)

    def check(self, current: _Growing) -> bool:
        if self.overdrawn:
            return False
        self.tests += 1
        supply, gadgets = self.unfinished(current)
        return self.connectivity.check(supply, gadgets).ok

    # ------------------------------------------------------------ growing
    def run(self) -> list[_Growing]:
        while self.pending:
            tree = self.pending.popleft()
            if self.progress is not None:
                self.progress(f"tree {len(self.done) + 1} (root {tree.root}, {tree.weight} units)")
            if self.order == 1:
                self.grow_single(tree)
            else:
                self.grow_symmetric(tree)
            self.done.append(tree)
            depth = max(tree.depth.values())
            deepest, total = self.grown_depths
            self.grown_depths = (max(deepest, depth), total + depth * self.order)
            self.check_depth()
        return self.done

    def check_depth(self, growing: _Growing | None = None) -> None:
        """Raise :class:`_Deeper` when the forest cannot end shallower than :attr:`beat` (its
        ``(deepest, total depth)`` compared in that order; a tie may still win): the trees grown,
        and ``growing`` as deep as its nodes so far, are already deeper, or as deep with a
        greater total (depths only grow)."""
        if self.beat is None:
            return
        deepest, total = self.grown_depths
        if growing is not None:
            depth = max(growing.depth.values())
            deepest, total = max(deepest, depth), total + depth * self.order
        if deepest > self.beat[0] or (deepest == self.beat[0] and total > self.beat[1]):
            raise _Deeper

    def candidates(self, tree: _Growing) -> list[tuple[int, int]]:
        """Edges from the tree to a new node, one per new node: from the shallowest tree node
        whose edge can carry the whole tree (shallow trees pipeline well), the widest among
        those (most residual capacity); else the widest edge."""
        inside = set(tree.order)
        depth = tree.depth
        best: dict[int, tuple] = {}
        found: dict[int, tuple[int, int]] = {}
        images = self.order
        for x in tree.order:
            for y in self.out[x]:
                if y in inside or (x, y) in tree.dead:
                    continue
                c = self.capacity[(x, y)]
                if c <= 0:
                    continue
                whole = c >= tree.weight * (1 if images == 1 else 1)
                key = (not whole, depth[x] if whole and SHALLOW else 0, -c)
                if y not in best or key < best[y]:
                    best[y], found[y] = key, (x, y)
        return [found[y] for y in sorted(found, key=lambda y: best[y])]

    def add(self, tree: _Growing, edge: tuple[int, int]) -> None:
        x, y = edge
        tree.parent[y] = x
        tree.depth[y] = tree.depth[x] + 1
        tree.order.append(y)
        self.consume(edge, tree.weight)

    def remove(self, tree: _Growing, edge: tuple[int, int]) -> None:
        x, y = edge
        del tree.parent[y]
        del tree.depth[y]
        tree.order.pop()
        self.consume(edge, -tree.weight)

    def split(self, tree: _Growing, edge: tuple[int, int]) -> bool:
        """Give ``edge`` to as many of the tree's units as the test allows; False when none."""
        # largest a in [1, weight-1] with: tree(weight a) + edge, copy(weight - a) without it
        high = min(tree.weight - 1, min(self.capacity[(a, b)] for a, b in self.images_of(edge)))
        if high < 1 or not self.try_split(tree, edge, 1):
            return False
        low = 1
        while low < high:
            middle = (low + high + 1) // 2
            if self.try_split(tree, edge, middle):
                low = middle
            else:
                high = middle - 1
        if low == 0:
            return False
        rest = tree.fork(low)
        self.add(tree, edge)
        self.pending.appendleft(rest)  # grown next: few partly built trees wait at a time
        return True

    def images_of(self, edge: tuple[int, int]) -> list[tuple[int, int]]:
        images = self.edge_images.get(edge)
        if images is None:
            x, y = edge
            images = self.edge_images[edge] = list(zip(self.elements[:, x].tolist(), self.elements[:, y].tolist()))
        return images

    def try_split(self, tree: _Growing, edge: tuple[int, int], units: int) -> bool:
        rest = tree.copy(tree.weight - units)
        whole = tree.weight
        tree.weight = units
        self.add(tree, edge)
        self.pending.appendleft(rest)
        ok = self.check(tree)
        self.pending.popleft()
        self.remove(tree, edge)
        tree.weight = whole
        return ok

    def grow_symmetric(self, tree: _Growing) -> None:
        while len(tree.order) < self.n:
            self.check_depth(tree)
            batch = self.candidates(tree)
            if not batch:
                raise AlgorithmError(f"tree packing is stuck: the tree of NPU {tree.root} reaches {len(tree.order)} of {self.n} NPUs")
            fits = self.fitting(tree, batch)
            if self.ahead(tree, fits):
                continue
            accepted = self.longest_prefix(tree, fits)
            if accepted < len(fits):
                edge = fits[accepted]
            else:
                rest = [e for e in batch if e not in set(fits)]
                if accepted > 0 or not rest:
                    continue
                edge = rest[0]
            if not self.split(tree, edge):
                tree.dead.add(edge)

    def fitting(self, tree: _Growing, batch: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """The edges of ``batch`` every image of which can carry the whole tree."""
        return [e for e in batch if all(self.capacity[i] >= tree.weight for i in self.images_of(e))]

    def ahead(self, tree: _Growing, fits: list[tuple[int, int]]) -> bool:
        """Add the layer ``fits`` and the layers that would follow it were each accepted whole (at
        most :attr:`lookahead`), and test once: when that passes, every one of them passes alone
        too -- a partial tree inside a tree that can be completed can be completed -- so the
        layer-by-layer growth would have accepted them all. Otherwise nothing is added."""
        if self.lookahead < 2 or not fits:
            return False
        layers = []
        layer = fits
        while layer and len(layers) < self.lookahead:
            for edge in layer:
                self.add(tree, edge)
            layers.append(layer)
            if len(tree.order) == self.n:
                break
            batch = self.candidates(tree)
            layer = self.fitting(tree, batch) if batch else []
        if len(layers) > 1 and self.check(tree):
            self.lookahead = min(2 * self.lookahead, MAX_LOOKAHEAD)
            return True
        for layer in reversed(layers):
            for edge in reversed(layer):
                self.remove(tree, edge)
        if len(layers) > 1:
            self.lookahead //= 2
        return False

    def longest_prefix(self, tree: _Growing, batch: list[tuple[int, int]]) -> int:
        """Add the longest prefix of ``batch`` the test accepts (all at the tree's weight)."""
        if not batch:
            return 0
        for edge in batch:
            self.add(tree, edge)
        if self.check(tree):
            return len(batch)
        for edge in reversed(batch):
            self.remove(tree, edge)
        low, high = 0, len(batch) - 1
        while low < high:
            middle = (low + high + 1) // 2
            for edge in batch[:middle]:
                self.add(tree, edge)
            ok = self.check(tree)
            for edge in reversed(batch[:middle]):
                self.remove(tree, edge)
            low, high = (middle, high) if ok else (low, middle - 1)
        for edge in batch[:low]:
            self.add(tree, edge)
        return low

    # ------------------------------------------------------------ one flow per edge
    def grow_single(self, tree: _Growing) -> None:
        queue = deque(tree.order)
        inside = set(tree.order)
        while queue:
            x = queue.popleft()
            for y in self.out[x]:
                if y in inside or self.capacity[(x, y)] <= 0 or (x, y) in tree.dead:
                    continue
                units = self.most_units(tree, x, y)
                if units == 0:
                    tree.dead.add((x, y))
                    continue
                if units < tree.weight:
                    self.pending.appendleft(tree.fork(units))
                self.add(tree, (x, y))
                inside.add(y)
                queue.append(y)
        if len(tree.order) < self.n:
            raise AlgorithmError(f"tree packing is stuck: the tree of NPU {tree.root} reaches {len(tree.order)} of {self.n} NPUs")

    def most_units(self, tree: _Growing, x: int, y: int) -> int:
        """ForestColl's edge test: ``min(weight, c(x, y), maxflow(x -> y) - other trees' weight)``."""
        self.tests += 1
        supply: dict[int, int] = {}
        gadgets: list[Gadget] = []
        others = 0
        for other in self.pending:
            others += other.weight
            if len(other.order) == 1:
                supply[other.root] = supply.get(other.root, 0) + other.weight
            else:
                gadgets.append(Gadget(other.weight, np.asarray(other.order)))
        supply.pop(x, None)  # a tree rooted at x enters every set the flow could cut: it only counts in `others`
        network, _, _ = self.connectivity.network(supply, gadgets, feeder=x)
        value = network.max_flow(x, y)
        return min(tree.weight, self.capacity[(x, y)], max(0, value - others))


def pack_trees(
    graph: LogicalGraph,
    supply: dict[int, int],
    *,
    elements: np.ndarray | None = None,
    sinks: Sequence[int] | None = None,
    progress: Callable[[str], None] | None = None,
    beat: tuple[int, int] | None = None,
) -> Forest | None:
    """Trees rooted at the NPUs of ``supply`` (units per NPU), within ``graph``'s capacities.

    ``elements``: the symmetry group as node permutations (rows; see
    :class:`~chakra_collectives.topology.symmetry.NpuSymmetry`), restricted to the NPUs; the
    supply must then name one NPU per class. ``sinks``: one NPU per class (default: all).
    ``beat``: ``(deepest tree, total depth)`` in NPU hops of a forest already packed: ``None``
    is returned as soon as this one cannot be shallower (deeper, or as deep with a greater
    total; :meth:`Forest.depths`), which the growth knows from the trees grown so far.

    >>> from chakra_collectives.synth.forestcoll.splitting import LogicalGraph
    >>> ring = LogicalGraph(3, {(0, 1): 2, (1, 2): 2, (2, 0): 2}, {})
    >>> pack_trees(ring, {0: 1, 1: 1, 2: 1}).depths()          # three paths of two hops
    (2, 6)
    >>> pack_trees(ring, {0: 1, 1: 1, 2: 1}, beat=(2, 5)) is None
    True
    """
    n = graph.num_npus
    if elements is None:
        elements = np.arange(n, dtype=np.int64)[None, :]
    elements = np.asarray(elements)[:, :n]
    packer = _Packer(graph, supply, elements, list(range(n)) if sinks is None else sinks, progress, beat)
    try:
        grown = packer.run()
    except _Deeper:
        return None
    trees = []
    for tree in grown:
        parent = np.full(n, -1, dtype=np.int64)
        for child, p in tree.parent.items():
            parent[child] = p
        order = np.asarray(tree.order, dtype=np.int64)
        for element in elements:
            image = np.full(n, -1, dtype=np.int64)
            image[element] = np.where(parent >= 0, element[np.maximum(parent, 0)], -1)
            trees.append(Tree(int(element[tree.root]), tree.weight, image, element[order], tree.lineage))
    return Forest(n, trees, tests=packer.tests, base_trees=len(grown))


__all__ = ["Forest", "Tree", "pack_trees"]
