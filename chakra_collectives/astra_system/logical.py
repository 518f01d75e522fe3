"""The logical topologies ASTRA-sim's native collectives run on (``logical_topology/``).

A network of dimensions ``[d0, d1, ...]`` numbers NPUs with dimension 0 fastest. For each
dimension a rank sees one **ring** of the NPUs that differ from it only in that dimension
(stride = product of the earlier dimensions), or -- for ``doubleBinaryTree`` -- two binary
trees over them, used alternately. A process group smaller than the machine is one ring of its
members, marked *local*: ASTRA-sim then charges 10 ns instead of ``endpoint-delay`` for each
message's trip through the endpoint, and a direct all-reduce sends all its messages at once.

>>> ring = RingView.of_dimension(rank=5, size=4, stride=2)     # ranks 1, 3, 5, 7
>>> ring.members, ring.index, ring.receiver(5, CLOCKWISE), ring.sender(5, CLOCKWISE)
((1, 3, 5, 7), 2, 7, 3)
>>> tree = BinaryTree(8, start=0, stride=1, root_max=True)
>>> tree.root, tree.parent(3), tree.children(3), tree.kind(0)
(7, 7, (1, 5), 'leaf')
"""

from __future__ import annotations


CLOCKWISE = 1
ANTICLOCKWISE = -1


class RingView:
    """One ring of a rank: its members in ring order and the rank's place in it."""

    __slots__ = ("members", "index", "position", "local")

    def __init__(self, members: tuple[int, ...], rank: int, *, local: bool = False) -> None:
        self.members = members
        self.position = {m: i for i, m in enumerate(members)}
        self.index = self.position[rank]
        self.local = local

    @classmethod
    def of_dimension(cls, rank: int, size: int, stride: int) -> "RingView":
        index = (rank % (stride * size)) // stride
        base = rank - index * stride
        return cls(tuple(base + k * stride for k in range(size)), rank)

    @property
    def nodes(self) -> int:
        return len(self.members)

    def receiver(self, node: int, direction: int) -> int:
        return self.members[(self.position[node] + direction) % len(self.members)]

    def sender(self, node: int, direction: int) -> int:
        return self.members[(self.position[node] - direction) % len(self.members)]


class BinaryTree:
    """ASTRA-sim's binary tree: a full tree under a root with one child, ids assigned in order.

    The root's only child is a full binary tree of depth ``floor(log2(n))``; ids ``start,
    start + stride, ...`` go to the nodes in in-order. ``root_max`` puts the subtree left of the
    root (the root gets the largest id), otherwise right (the smallest).
    """

    def __init__(self, total: int, *, start: int, stride: int, root_max: bool) -> None:
        depth, tmp = 1, total
        while tmp > 1:
            depth += 1
            tmp //= 2
        self.total = total
        self._parent: dict[int, int] = {}
        self._kids: dict[int, tuple[int, int]] = {}

        def grow(d: int) -> list:
            """A full subtree of depth ``d`` as nested ``[left, right, id]`` lists."""
            return [grow(d - 1), grow(d - 1), None] if d > 1 else [None, None, None]

        root: list = [grow(depth - 1), None, None] if root_max else [None, grow(depth - 1), None]
        counter = [start]

        def number(node: list) -> None:
            if node[0] is not None:
                number(node[0])
            node[2] = counter[0]
            counter[0] += stride
            if node[1] is not None:
                number(node[1])

        def link(node: list, parent: int) -> None:
            self._parent[node[2]] = parent
            self._kids[node[2]] = tuple(-1 if child is None else child[2] for child in node[:2])  # type: ignore[assignment]
            for child in node[:2]:
                if child is not None:
                    link(child, node[2])

        number(root)
        link(root, -1)
        self.root = root[2]

    def parent(self, node: int) -> int:
        return self._parent[node]

    def children(self, node: int) -> tuple[int, int]:
        """``(left, right)``, -1 where there is none."""
        return self._kids[node]

    def kind(self, node: int) -> str:
        if self._parent[node] == -1:
            return "root"
        return "leaf" if self._kids[node] == (-1, -1) else "intermediate"


class DoubleBinaryTree:
    """Two trees over one dimension's NPUs, handed out alternately (max-rooted first)."""

    def __init__(self, total: int, start: int, stride: int) -> None:
        self.trees = (BinaryTree(total, start=start, stride=stride, root_max=True), BinaryTree(total, start=start, stride=stride, root_max=False))
        self.nodes = total
        self.counter = 0

    def next_tree(self) -> BinaryTree:
        tree = self.trees[self.counter % 2]
        self.counter += 1
        return tree
