"""Trees to IR: every tree carries its share of its root's data, pipelined along the tree.

A forest (:mod:`~chakra_collectives.synth.forestcoll.packing`) gives each root trees whose
weights (units) sum to ``k`` per unit of demand. With ``P`` pieces per tree, the IR cuts every
root's data into ``K = k * P`` chunks; a tree of weight ``w`` owns ``w * P`` consecutive chunks
of its root's data and moves them as ``P`` pieces of ``w`` chunks, each piece along every edge
of the tree. A tree edge that stands for several switch paths (edge splitting may give one
NPU pair more than one) sends each piece as one message per path, of the units that path
carries. A root's trees that cross one path in one piece go as one message: of one chunk range
where their chunks follow on, and in All-Gather also of several (:data:`RANGES_APART`).

Two directions, one layout:

* **down** (All-Gather, broadcast): a node forwards a piece to its children once the piece has
  arrived (the root sends from its input);
* **up** (Reduce-Scatter, reduce; the trees of the reversed network): a node sends its partial
  sum of a piece to its parent once every child's partial sum has been reduced into it -- a
  leaf sends its input, an inner node first copies its input into a scratch accumulator, the
  root reduces into its output;
* **All-Reduce** = up, then down: a down piece leaves its root once the up phase has finished
  every chunk it carries.

Every message has its own tag (per pair of ranks). Its switch path, when it is not the one the
network model would take anyway, is the SEND's route (``algorithm.routes``: node paths).
Each rank's program is ordered by (piece, tree level, tree), so dependencies point backwards
and the first pieces of every tree go first.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from chakra_collectives.ir import Buffer, Collective, CollectiveAlgorithm, OpKind, OpTable
from chakra_collectives.ir.dag import longest_path
from chakra_collectives.ir.grouping import distinct, lex_order, occurrence, row_groups
from chakra_collectives.network.model import NetworkModel
from chakra_collectives.synth.forestcoll.packing import Forest
from chakra_collectives.units import bytes_per_ns

_I32 = np.int32


@dataclass
class _Messages:
    """One row per message of one piece direction: tree, piece, sender, receiver, chunks, route."""

    tree: np.ndarray
    piece: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    level: np.ndarray
    """Depth of the tree edge's child (down) -- the edge's level."""
    position: np.ndarray
    """Place of the tree edge's child in its tree's breadth-first order (images of one grown
    tree share it, so at every step different roots send to different children)."""
    first: np.ndarray
    """First chunk (global chunk index) the message carries."""
    count: np.ndarray
    route: np.ndarray
    """The path's stream key (:class:`_Routes`)."""
    unit: np.ndarray
    """Which of its root's ``k`` units the message starts at (the same in every piece)."""


class _Layout:
    """Trees as arrays, and where each tree's pieces sit among its root's chunks.

    A root's ``K = k * P`` chunks are laid out piece by piece: piece ``p`` of every tree of the
    root lies in chunks ``p*k .. p*k + k - 1`` (each tree ``weight`` of them, the root's trees in
    lineage order), so the pieces of trees that split from one another sit side by side and a
    message can carry several of them at once.

    With ``split`` > 1 every piece is cut in ``split`` parts (``K = k * P * split`` chunks, each
    tree's parts of a piece side by side): :meth:`group` sends the parts of every piece but the
    last as one message and the last piece's parts one by one. Messages then count parts:
    :attr:`pieces` is ``P * split``.
    """

    def __init__(self, forest: Forest, pieces: int, root_base, units_per_root: int, split: int = 1) -> None:
        trees = forest.trees
        n = forest.num_npus
        self.n = n
        self.pieces = pieces * split
        self.coarse = pieces
        self.split = split
        self.k = units_per_root
        self.root = np.array([t.root for t in trees], dtype=np.int64)
        self.weight = np.array([t.weight for t in trees], dtype=np.int64)
        parent = np.stack([t.parent for t in trees]) if trees else np.zeros((0, n), dtype=np.int64)
        order = np.stack([t.order for t in trees]) if trees else np.zeros((0, n), dtype=np.int64)
        self.parent = parent
        depth = np.zeros_like(parent)
        rows = np.arange(len(trees))
        for i in range(1, n):
            nodes = order[:, i]
            depth[rows, nodes] = depth[rows, parent[rows, nodes]] + 1
        self.depth = depth
        self.position = np.zeros_like(parent)
        self.position[rows[:, None], order] = np.arange(n)[None, :]
        offset = np.zeros(len(trees), dtype=np.int64)
        used: dict[int, int] = {}
        for i in sorted(range(len(trees)), key=lambda i: (trees[i].root, trees[i].lineage, i)):
            r = trees[i].root
            offset[i] = used.get(r, 0)
            used[r] = offset[i] + self.weight[i]
        self.offset = offset
        self.root_base = root_base(self.root)

    def piece_start(self, tree: np.ndarray, piece: np.ndarray) -> np.ndarray:
        """First chunk of a tree's piece (part, with ``split`` > 1)."""
        q = self.split
        return self.root_base[tree] + (piece // q) * self.k * q + self.offset[tree] * q + (piece % q) * self.weight[tree]

    def group(self, piece: np.ndarray, batch: np.ndarray | int = 1) -> np.ndarray:
        """Which message of its stream each piece (part) goes in: ``batch`` consecutive pieces
        per message (``split`` = 1), or a piece's parts together but the last piece's one by one.

        >>> layout = _Layout(Forest(2, []), 3, lambda roots: roots, 1, split=2)
        >>> layout.group(np.arange(6)).tolist()
        [0, 0, 1, 1, 2, 3]
        """
        q, last = self.split, self.coarse - 1
        if q == 1:
            return piece // batch
        return np.where(piece // q < last, piece // q, piece - last * (q - 1))


def _tree_edges(layout: _Layout) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(tree, parent, child)`` of every tree edge."""
    tree, child = np.nonzero(layout.parent >= 0)
    return tree, layout.parent[tree, child], child


def _assign_paths(layout: _Layout, paths, routes: "_Routes", *, reverse: bool):
    """Split every tree edge over the switch paths of its logical edge.

    Returns per part ``(tree, parent, child, unit offset, units, route index)``; route indexes
    come from ``routes``. ``reverse``: the forest is of the reversed network, messages go
    child -> parent along the reversed paths.
    """
    tree, parent, child = _tree_edges(layout)
    weight = layout.weight[tree]
    order = lex_order((tree, child, parent))
    tree, parent, child, weight = tree[order], parent[order], child[order], weight[order]
    parts = ([], [], [], [], [], [])
    boundaries = np.flatnonzero(np.diff(parent * layout.n + child)) + 1
    starts = np.concatenate([[0], boundaries])
    ends = np.concatenate([boundaries, [len(tree)]])
    single: list[tuple[int, int, int]] = []  # a stretch of single-path edges: (first row, rows, route index)

    def end_single() -> None:
        """Append the rows of the stretch of single-path edges, whole."""
        if single:
            rows = slice(single[0][0], single[-1][0] + single[-1][1])
            parts[0].append(tree[rows])
            parts[1].append(parent[rows])
            parts[2].append(child[rows])
            parts[3].append(np.zeros(rows.stop - rows.start, dtype=np.int64))
            parts[4].append(weight[rows])
            parts[5].append(np.repeat(np.array([i for _, _, i in single], dtype=np.int64), [n for _, n, _ in single]))
            single.clear()

    for s, e in zip(starts.tolist(), ends.tolist()):
        key = (int(parent[s]), int(child[s]))
        pieces = paths[key]
        if len(pieces) == 1:
            single.append((s, e - s, routes.index(pieces[0][0][::-1] if reverse else pieces[0][0])))
            continue
        end_single()
        # several paths: fill them in turn with the trees' units
        piece_index, left = 0, pieces[0][1]
        for i in range(s, e):
            need, done = int(weight[i]), 0
            while need > 0:
                while left == 0:
                    piece_index += 1
                    left = pieces[piece_index][1]
                units = min(need, left)
                node_path = pieces[piece_index][0]
                index = routes.index(node_path[::-1] if reverse else node_path)
                for column, value in zip(parts, (tree[i], parent[i], child[i], done, units, index)):
                    column.append(np.array([value], dtype=np.int64))
                need -= units
                done += units
                left -= units
    end_single()
    columns = [np.concatenate(c) if c else np.zeros(0, dtype=np.int64) for c in parts]
    return columns


class _Routes:
    """Node paths that messages take, numbered; a path the network would take anyway gets ``-1``
    (the IR then names no route and the network model routes it), the others an index into
    :attr:`paths`. Every message gets a distinct stream key (:attr:`key`), ``-1`` included."""

    def __init__(self, topology) -> None:
        self.model = NetworkModel(topology)
        self.paths: list[tuple[int, ...]] = []
        self.number: dict[tuple[int, ...], int] = {}
        self.keys: dict[tuple[int, ...], int] = {}
        self.hops: list[int] = []

    def index(self, path: tuple[int, ...]) -> int:
        """The stream key of ``path`` (see :meth:`route_of` for the IR's route index)."""
        key = self.keys.get(path)
        if key is None:
            key = self.keys[path] = len(self.keys)
            self.hops.append(len(path) - 1)
            links = self.model.path_links(path)
            if links != self.model.route(path[0], path[-1]):
                self.number[path] = len(self.paths)
                self.paths.append(path)
        return key

    def route_of(self, keys: np.ndarray) -> np.ndarray:
        """IR route index of each stream key (-1: the network's own route)."""
        by_key = np.full(len(self.keys), -1, dtype=np.int64)
        for path, key in self.keys.items():
            by_key[key] = self.number.get(path, -1)
        return by_key[keys]


def _messages(layout: _Layout, parts, *, up: bool) -> _Messages:
    """Every part of every tree edge, once per piece."""
    tree, parent, child, unit_offset, units, route = parts
    p = layout.pieces
    m = len(tree)
    piece = np.tile(np.arange(p, dtype=np.int64), m)
    rep = lambda a: np.repeat(a, p)
    tree_r = rep(tree)
    first = layout.piece_start(tree_r, piece) + rep(unit_offset)
    src, dst = (rep(child), rep(parent)) if up else (rep(parent), rep(child))
    level = rep(layout.depth[tree, child])
    position = rep(layout.position[tree, child])
    unit = layout.offset[tree_r] + rep(unit_offset)
    return _Messages(tree_r, piece, src, dst, level, position, first, rep(units), rep(route), unit)


class _Program:
    """Operations gathered per kind, then laid out rank by rank in sort-key order."""

    def __init__(self) -> None:
        self.cols: dict[str, list[np.ndarray]] = {name: [] for name in ("rank", "kind", "peer", "tag", "src_buf", "src_off", "dst_buf", "dst_off", "count", "key0", "key1", "key2", "key3", "route")}
        self.size = 0
        self.more: tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]] = ([], [], [])

    def add_ranges(self, ids: np.ndarray, offsets: np.ndarray, counts: np.ndarray) -> None:
        """Further chunk ranges ``(offset, count)`` of the operations ``ids`` (one entry per
        range, each operation's in order; see :meth:`~chakra_collectives.ir.ops.OpTable.runs`)."""
        for column, values in zip(self.more, (ids, offsets, counts)):
            column.append(np.asarray(values, dtype=np.int64))

    def ranges(self, position: np.ndarray) -> dict[str, np.ndarray]:
        """The further ranges in program order (``position[id]``: an operation's new index) as
        ``OpTable`` CSR columns; empty when every operation moves one range."""
        ids, offsets, counts = (np.concatenate(c) if c else np.zeros(0, dtype=np.int64) for c in self.more)
        if not len(ids):
            return {}
        at = position[ids]
        order = np.argsort(at, kind="stable")  # each operation's ranges keep their order
        more_ptr = np.zeros(self.size + 1, dtype=np.int64)
        np.cumsum(np.bincount(at, minlength=self.size), out=more_ptr[1:])
        return {"more_ptr": more_ptr, "more_off": offsets[order], "more_count": counts[order]}

    def add(self, **values) -> np.ndarray:
        """Append operations (arrays or scalars broadcast to the length of ``rank``); return their ids."""
        length = len(values["rank"])
        for name in self.cols:
            value = values.get(name, -1)
            self.cols[name].append(np.broadcast_to(np.asarray(value, dtype=np.int64), (length,)).copy())
        ids = np.arange(self.size, self.size + length)
        self.size += length
        return ids

    def freeze(self, deps_owner: list[np.ndarray], deps_target: list[np.ndarray]):
        """``(columns, dep_ptr, dep_idx, ranges)``: operations sorted by rank then key (the
        columns without the sort keys), their dependencies and further chunk ranges
        (:meth:`ranges`) in that order."""
        cols = {name: np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64) for name, parts in self.cols.items()}
        order = lex_order((cols.pop("key3"), cols.pop("key2"), cols.pop("key1"), cols.pop("key0"), cols["rank"]))  # ties keep the order added
        position = np.empty(self.size, dtype=np.int64)
        position[order] = np.arange(self.size)
        sorted_cols = {name: column[order] for name, column in cols.items()}
        owner = np.concatenate(deps_owner) if deps_owner else np.zeros(0, dtype=np.int64)
        target = np.concatenate(deps_target) if deps_target else np.zeros(0, dtype=np.int64)
        owner, target = position[owner], position[target]
        if np.any(target >= owner):
            raise AssertionError("a dependency points forward in program order")
        key = distinct(owner * self.size + target)
        owner, target = key // max(self.size, 1), key % max(self.size, 1)
        dep_ptr = np.zeros(self.size + 1, dtype=np.int64)
        np.cumsum(np.bincount(owner, minlength=self.size), out=dep_ptr[1:])
        return sorted_cols, dep_ptr, target, self.ranges(position)


def _group_first(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(order, starts, ends)`` grouping equal keys."""
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    bounds = np.flatnonzero(np.diff(sorted_keys)) + 1
    starts = np.concatenate([[0], bounds]).astype(np.int64)
    ends = np.concatenate([bounds, [len(keys)]]).astype(np.int64)
    return order, starts, ends


def _window(deps: tuple[list, list], sends: np.ndarray, layout: _Layout, src, dst, route, root, unit, piece, hops: np.ndarray) -> None:
    """Each stream of pieces (the same chunks of every piece over one path) keeps at most as
    many messages in flight as its path has hops: the send of piece ``p`` waits for the send of
    piece ``p - hops``.

    Without it a root would queue all its pieces on its links at once and every forwarded piece
    would wait behind them; with it the links interleave the trees' pieces and the pipeline
    drains quickly."""
    keys = np.stack([src, dst, route, root, unit], axis=1)  # the same for every piece of a stream
    stream = row_groups(keys)
    streams = int(stream.max()) + 1 if len(stream) else 0
    at = np.full((streams, layout.pieces), -1, dtype=np.int64)
    at[stream, piece] = np.arange(len(sends))
    window = hops[route] * layout.split  # whole pieces: a piece's parts go in one message
    later = np.flatnonzero(piece >= window)
    earlier = at[stream[later], piece[later] - window[later]]
    keep = earlier >= 0
    deps[0].append(sends[later[keep]])
    deps[1].append(sends[earlier[keep]])


def _runs(layout: _Layout, msgs: _Messages, *, merge: bool = True, batch: np.ndarray | None = None, apart: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Merge the messages of one root's trees that cross the same path in the same piece with
    adjacent chunks (unless ``merge`` is False): ``(run of each message, first message of each
    run, the messages in run order)`` -- a run's messages by chunk, so its chunk ranges are the
    stretches of them whose chunks follow on. ``batch[route]``: consecutive pieces merged over
    each path (one tree per root only, where a tree's pieces are adjacent chunks).

    ``apart``: chunks need not be adjacent (the message then moves several chunk ranges). The
    trees that split from one another sit side by side in their root's chunks
    (:class:`_Layout`), but a path may carry some of them and not the ones between."""
    root = layout.root[msgs.tree]
    piece = layout.group(msgs.piece, 1 if batch is None else batch[msgs.route])
    order = lex_order((msgs.first, msgs.route, msgs.dst, msgs.src, piece, root))
    fresh = np.ones(len(order), dtype=bool)
    if merge and len(order) > 1:
        following = apart | (msgs.first[order][1:] == msgs.first[order][:-1] + msgs.count[order][:-1])
        same = (
            (root[order][1:] == root[order][:-1])
            & (piece[order][1:] == piece[order][:-1])
            & (msgs.src[order][1:] == msgs.src[order][:-1])
            & (msgs.dst[order][1:] == msgs.dst[order][:-1])
            & (msgs.route[order][1:] == msgs.route[order][:-1])
            & following
        )
        fresh[1:] = ~same
    run_sorted = np.cumsum(fresh) - 1
    run_of = np.empty(len(order), dtype=np.int64)
    run_of[order] = run_sorted
    return run_of, order[fresh], order


def _further_ranges(msgs: _Messages, run_of: np.ndarray, in_runs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(run, first chunk, count)`` of every chunk range of a run after its first, in order:
    the run's messages (``in_runs``: by run, then chunk) whose chunks do not follow on from the
    message before.

    >>> msgs = _Messages(*(np.zeros(4, dtype=np.int64),) * 6, np.array([0, 1, 3, 4]), np.ones(4, dtype=np.int64), *(np.zeros(4, dtype=np.int64),) * 2)
    >>> [a.tolist() for a in _further_ranges(msgs, np.zeros(4, dtype=np.int64), np.arange(4))]   # chunks 0-1 and 3-4
    [[0], [3], [2]]
    """
    run, first, count = run_of[in_runs], msgs.first[in_runs], msgs.count[in_runs]
    starts = np.ones(len(in_runs), dtype=bool)
    starts[1:] = (run[1:] != run[:-1]) | (first[1:] != first[:-1] + count[:-1])
    begins = np.flatnonzero(starts)
    lengths = np.add.reduceat(count, begins) if len(begins) else np.zeros(0, dtype=np.int64)
    later = np.ones(len(begins), dtype=bool)
    later[:1] = False
    later[1:] = run[begins[1:]] == run[begins[:-1]]  # not its run's first range
    return run[begins[later]], first[begins[later]], lengths[later]


def _run_levels(layout: _Layout, msgs: _Messages, run_of: np.ndarray, runs: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Program order of merged messages: ``(level of each run, waiting run, awaited run)`` per wait
    (a forwarded piece waits for every message that brought that tree's piece to the sender), or
    None when merging made runs wait for one another in a cycle (the caller then sends unmerged).

    A run's level is its depth in the graph of waits, at least its trees' level."""
    n = layout.n
    level = np.zeros(runs, dtype=np.int64)
    np.maximum.at(level, run_of, msgs.level)
    arrive_key = (msgs.tree * layout.pieces + msgs.piece) * n + msgs.dst
    need_key = (msgs.tree * layout.pieces + msgs.piece) * n + msgs.src
    order, _, _ = _group_first(arrive_key)
    sorted_keys = arrive_key[order]
    forwarded = np.flatnonzero(layout.root[msgs.tree] != msgs.src)
    lo = np.searchsorted(sorted_keys, need_key[forwarded], side="left")
    hi = np.searchsorted(sorted_keys, need_key[forwarded], side="right")
    counts = hi - lo
    owner_run = np.repeat(run_of[forwarded], counts)
    within = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    target_run = run_of[order[np.repeat(lo, counts) + within]]
    by_owner = np.argsort(owner_run, kind="stable")
    dep_ptr = np.concatenate([[0], np.cumsum(np.bincount(owner_run, minlength=runs))])
    if np.isnan(longest_path(dep_ptr, target_run[by_owner], np.ones(runs))).any():
        return None  # some runs wait for one another in a cycle
    while True:  # settles within the graph's depth
        raised = level.copy()
        np.maximum.at(raised, owner_run, level[target_run] + 1)
        if np.array_equal(raised, level):
            return level, owner_run, target_run
        level = raised


def _emit_down(prog: _Program, deps: tuple[list, list], layout: _Layout, msgs: _Messages, *, source, phase: int, tag_offset, ready=None, hops=None, batch=None, apart: bool = False) -> None:
    """SEND/RECV pairs of a down phase. ``source(rank, first)`` -> (buffer, offset) a root sends from;
    receivers write ``output[first]``. ``ready(rank, first, count, sends)``: deps of a root's sends.

    Messages of one root's trees that share a path, a piece and adjacent chunks go as one
    (:func:`_runs`): trees split from one another share their first edges. ``apart``: chunks
    apart too, as one message of several chunk ranges (see :data:`RANGES_APART`)."""
    n = layout.n
    tries = [(True, True)] * apart + [(True, False), (False, False)]  # (merge, apart): fewer merges while runs wait in a cycle
    for merge, ranges in tries:
        run_of, heads, in_runs = _runs(layout, msgs, merge=merge, batch=batch if merge else None, apart=ranges)
        waits = _run_levels(layout, msgs, run_of, len(heads))
        if waits is not None:
            break
    else:  # pragma: no cover - unmerged messages wait only for their trees' earlier edges
        raise AssertionError("ForestColl: the trees' messages wait for one another in a cycle")
    level, owner_run, target_run = waits
    runs = len(heads)
    count = np.bincount(run_of, weights=msgs.count, minlength=runs).astype(np.int64)
    position = np.full(runs, np.iinfo(np.int64).max)
    np.minimum.at(position, run_of, msgs.position)
    src, dst, first, route = msgs.src[heads], msgs.dst[heads], msgs.first[heads], msgs.route[heads]
    piece = np.zeros(runs, dtype=np.int64)  # a run of several pieces goes in its last one's turn,
    np.maximum.at(piece, run_of, msgs.piece)
    while True:  # and after every run it waits for
        raised = piece.copy()
        np.maximum.at(raised, owner_run, piece[target_run])
        if np.array_equal(raised, piece):
            break
        piece = raised
    tags = occurrence(src * n + dst) + tag_offset(src, dst)
    at_root = layout.root[msgs.tree[heads]] == src
    src_buf = np.where(at_root, source(src, first)[0], int(Buffer.OUTPUT))
    src_off = np.where(at_root, source(src, first)[1], first)
    common = dict(key0=phase, key1=piece, key2=level, key3=position)
    sends = prog.add(rank=src, kind=int(OpKind.SEND), peer=dst, tag=tags, src_buf=src_buf, src_off=src_off, count=count, route=route, **common)
    recvs = prog.add(rank=dst, kind=int(OpKind.RECV), peer=src, tag=tags, dst_buf=int(Buffer.OUTPUT), dst_off=first, count=count, **common)
    run, more_first, more_count = _further_ranges(msgs, run_of, in_runs)
    if len(run):
        more_src = np.where(at_root[run], source(src[run], more_first)[1], more_first)
        prog.add_ranges(sends[run], more_src, more_count)
        prog.add_ranges(recvs[run], more_first, more_count)
    deps[0].append(sends[owner_run])
    deps[1].append(recvs[target_run])
    if hops is not None:
        _window(deps, sends, layout, src, dst, route, layout.root[msgs.tree[heads]], msgs.unit[heads], piece, hops)
    if ready is not None:  # a root's message waits for the sums of every range it carries
        rooted = np.flatnonzero(at_root)
        own_count = count - np.bincount(run, weights=more_count, minlength=runs).astype(np.int64)  # its first range's
        further = at_root[run]
        rows = np.concatenate([rooted, run[further]])
        owner, target = ready(src[rows], np.concatenate([first[rooted], more_first[further]]), np.concatenate([own_count[rooted], more_count[further]]), sends[rows])
        deps[0].append(owner)
        deps[1].append(target)


def _emit_up(prog: _Program, deps: tuple[list, list], layout: _Layout, msgs: _Messages, *, result, phase: int, tag_offset, hops=None) -> dict:
    """A reducing up phase; ``result(rank, first)`` -> (buffer, offset) where a root's sum goes.

    Returns ``final``: per (root rank, first chunk of a piece) the op that completes that piece's sum."""
    n, p = layout.n, layout.pieces
    tags = occurrence(msgs.src * n + msgs.dst) + tag_offset(msgs.src, msgs.dst)
    # accumulator of a (tree, piece, node): root -> result; inner node -> scratch; leaf -> none
    node_key = lambda tree, piece, node: (tree * p + piece) * n + node
    recv_key = node_key(msgs.tree, msgs.piece, msgs.dst)
    send_key = node_key(msgs.tree, msgs.piece, msgs.src)
    has_children = np.zeros(0, dtype=bool)
    inner_keys = distinct(recv_key)
    is_root_key = lambda keys: layout.root[keys // (p * n)] == keys % n
    # scratch: every received part gets fresh slots; every inner non-root accumulator w slots
    order_recv = lex_order((msgs.dst,))
    slot = np.empty(len(msgs.tree), dtype=np.int64)
    sizes = msgs.count[order_recv]
    sorted_dst = msgs.dst[order_recv]
    cumulative = np.cumsum(sizes) - sizes
    first_of_rank = np.searchsorted(sorted_dst, sorted_dst, side="left")
    slot[order_recv] = cumulative - (cumulative[first_of_rank] if len(cumulative) else 0)
    used = np.bincount(msgs.dst, weights=msgs.count, minlength=n).astype(np.int64)
    acc_keys = inner_keys[~is_root_key(inner_keys)]
    acc_rank = acc_keys % n
    acc_tree = acc_keys // (p * n)
    acc_piece = (acc_keys // n) % p
    acc_w = layout.weight[acc_tree]
    order_acc = lex_order((acc_rank,))
    acc_slot = np.empty(len(acc_keys), dtype=np.int64)
    cum = np.cumsum(acc_w[order_acc]) - acc_w[order_acc]
    first_acc = np.searchsorted(acc_rank[order_acc], acc_rank[order_acc], side="left")
    acc_slot[order_acc] = used[acc_rank[order_acc]] + cum - (cum[first_acc] if len(cum) else 0)
    scratch = used + np.bincount(acc_rank, weights=acc_w, minlength=n).astype(np.int64)
    acc_first = layout.piece_start(acc_tree, acc_piece)
    acc_level = layout.depth[acc_tree, acc_rank]
    # COPY input -> accumulator (inner nodes), input -> result (roots with children)
    copies = prog.add(
        rank=acc_rank, kind=int(OpKind.COPY), src_buf=int(Buffer.INPUT), src_off=acc_first, dst_buf=int(Buffer.SCRATCH),
        dst_off=acc_slot, count=acc_w, key0=phase, key1=acc_piece, key2=-acc_level - 1, key3=-1,
    )
    root_keys = inner_keys[is_root_key(inner_keys)]
    root_rank = root_keys % n
    root_tree = root_keys // (p * n)
    root_piece = (root_keys // n) % p
    root_w = layout.weight[root_tree]
    root_first = layout.piece_start(root_tree, root_piece)
    res_buf, res_off = result(root_rank, root_first)
    root_copies = prog.add(
        rank=root_rank, kind=int(OpKind.COPY), src_buf=int(Buffer.INPUT), src_off=root_first, dst_buf=res_buf,
        dst_off=res_off, count=root_w, key0=phase, key1=root_piece, key2=-1, key3=-1,
    )
    all_keys = np.concatenate([acc_keys, root_keys])
    all_init = np.concatenate([copies, root_copies])
    key_sort = np.argsort(all_keys)
    sorted_all = all_keys[key_sort]
    # receives and reductions
    common = dict(key0=phase, key1=msgs.piece, key3=msgs.position)
    recvs = prog.add(rank=msgs.dst, kind=int(OpKind.RECV), peer=msgs.src, tag=tags, dst_buf=int(Buffer.SCRATCH), dst_off=slot, count=msgs.count, key2=-msgs.level, **common)
    at = np.searchsorted(sorted_all, recv_key)
    init_of_recv = all_init[key_sort[at]]
    recv_is_root = is_root_key(recv_key)
    within = msgs.first - layout.piece_start(msgs.tree, msgs.piece)
    acc_index = key_sort[at]
    target_off_acc = np.where(acc_index < len(acc_keys), acc_slot[np.minimum(acc_index, len(acc_keys) - 1)] if len(acc_keys) else 0, 0) + within
    r_buf, r_off = result(msgs.dst, msgs.first)
    reduces = prog.add(
        rank=msgs.dst, kind=int(OpKind.REDUCE), src_buf=int(Buffer.SCRATCH), src_off=slot,
        dst_buf=np.where(recv_is_root, r_buf, int(Buffer.SCRATCH)), dst_off=np.where(recv_is_root, r_off, target_off_acc),
        count=msgs.count, key2=-msgs.level, **common,
    )
    # each reduction waits for its receive and for the previous writer of its accumulator
    deps[0].append(reduces)
    deps[1].append(recvs)
    order = lex_order((msgs.position, recv_key))  # program order within each accumulator
    sorted_keys = recv_key[order]
    bounds = np.flatnonzero(np.diff(sorted_keys)) + 1
    starts = np.concatenate([[0], bounds]).astype(np.int64)
    ends = np.concatenate([bounds, [len(order)]]).astype(np.int64)
    previous = np.empty(len(reduces), dtype=np.int64)
    sorted_reduces = reduces[order]
    previous[order] = np.concatenate([[0], sorted_reduces[:-1]]) if len(order) else previous[order]
    group_start = np.zeros(len(order), dtype=bool)
    group_start[starts] = True
    previous_sorted = previous[order]
    previous_sorted[group_start] = init_of_recv[order][group_start]
    previous[order] = previous_sorted
    deps[0].append(reduces)
    deps[1].append(previous)
    # the last reduction into each accumulator (keys ascending: ``recv_key`` sorts first)
    written_keys, last_writer = (sorted_keys[starts], sorted_reduces[ends - 1]) if len(order) else (sorted_keys, sorted_reduces)
    # sends: leaves from the input, inner nodes from the accumulator after its last reduction
    has_acc = np.isin(send_key, acc_keys)
    at_acc = np.searchsorted(acc_keys, send_key)
    send_acc_slot = np.where(has_acc, acc_slot[np.minimum(at_acc, max(len(acc_keys) - 1, 0))] if len(acc_keys) else 0, 0)
    sends = prog.add(
        rank=msgs.src, kind=int(OpKind.SEND), peer=msgs.dst, tag=tags,
        src_buf=np.where(has_acc, int(Buffer.SCRATCH), int(Buffer.INPUT)), src_off=np.where(has_acc, send_acc_slot + within, msgs.first),
        count=msgs.count, route=msgs.route, key2=-msgs.level + 0, **common,
    )
    waited = _written_by(send_key[has_acc], written_keys, last_writer, -1)
    deps[0].append(sends[has_acc])
    deps[1].append(waited)
    if hops is not None:
        _window(deps, sends, layout, msgs.src, msgs.dst, msgs.route, layout.root[msgs.tree], msgs.unit, msgs.piece, hops)
    # final writer of every root piece
    final = dict(zip(root_keys.tolist(), _written_by(root_keys, written_keys, last_writer, root_copies).tolist()))
    del has_children
    return {"final": final, "scratch": scratch, "root_keys": root_keys}


def lower_forest(
    collective: Collective,
    forest: Forest,
    paths,
    topology,
    *,
    units_per_root: int,
    pieces: int,
    size_bytes: int,
    root: int | None = None,
    up_forest: Forest | None = None,
    up_paths=None,
    name: str = "forestcoll",
    provenance: dict[str, str] | None = None,
    fast_batch: int = 1,
    assigned: dict | None = None,
) -> CollectiveAlgorithm:
    """The IR of ``collective`` from ``forest`` (and ``up_forest``, the reversed network's
    trees, for All-Reduce); ``units_per_root`` is ``k`` (per unit of demand); ``pieces`` is the
    number of pipeline pieces per tree (equal ones: a pipeline takes the sum of its pieces plus
    its depth times the largest, so unequal pieces would not help -- but for the last, which
    goes in :data:`LAST_PIECE_PARTS` messages where that applies, shortening the drain behind
    the busiest links). ``fast_batch``: with one
    tree per NPU (``k = 1``), the down trees send up to that many consecutive pieces as one
    message over paths faster than the slowest (:func:`_batches`). ``assigned``: a dict the
    caller keeps for these forests, paths and topology (empty at first): the tree edges' paths,
    which do not depend on ``pieces``, are assigned once and reused by the next calls (a100:16:
    40 ms of each lowering, 5,600 route look-ups)."""
    n = forest.num_npus
    rooted = collective in (Collective.BROADCAST, Collective.REDUCE)
    split = _last_piece_parts(collective, topology, (size_bytes if rooted else size_bytes / n) / pieces) if units_per_root == 1 and fast_batch == 1 and pieces > 1 else 1
    K = units_per_root * pieces * split
    chunk_count = K if rooted else n * K
    base = (lambda roots: np.zeros(len(roots), dtype=np.int64)) if rooted else (lambda roots: roots * K)
    prog = _Program()
    deps: tuple[list, list] = ([], [])
    scratch = np.zeros(n, dtype=np.int64)
    zero_tags = lambda a, b: 0
    down_forest = forest if collective in (Collective.ALL_GATHER, Collective.BROADCAST, Collective.ALL_REDUCE) else None
    if collective is Collective.ALL_REDUCE:
        if up_forest is None:
            raise ValueError("All-Reduce needs the reversed network's trees too")
    else:
        up_forest = forest if down_forest is None else None
        up_paths = paths if down_forest is None else None
    up_layout = _Layout(up_forest, pieces, base, units_per_root) if up_forest is not None else None
    down_layout = _Layout(down_forest, pieces, base, units_per_root, split) if down_forest is not None else None
    if assigned is None or "routes" not in assigned:
        routes = _Routes(topology)  # numbered as the paths are met: the up trees' first
        up_parts = _assign_paths(up_layout, up_paths, routes, reverse=True) if up_layout is not None else None
        down_parts = _assign_paths(down_layout, paths, routes, reverse=False) if down_layout is not None else None
        if assigned is not None:
            assigned.update(routes=routes, up=up_parts, down=down_parts)
    else:
        routes, up_parts, down_parts = assigned["routes"], assigned["up"], assigned["down"]
    up_final = None
    up_tag_counts = None
    if up_layout is not None:
        layout = up_layout
        msgs = _messages(layout, up_parts, up=True)
        if collective is Collective.REDUCE_SCATTER:
            result = lambda rank, first: (np.full(len(first), int(Buffer.OUTPUT)), first - rank * K)
        else:
            result = lambda rank, first: (np.full(len(first), int(Buffer.OUTPUT)), first)
        hops = np.array(routes.hops, dtype=np.int64)
        info = _emit_up(prog, deps, layout, msgs, result=result, phase=0, tag_offset=zero_tags, hops=hops)
        scratch = scratch + info["scratch"]
        up_final = (info, layout)
        pair = msgs.src * n + msgs.dst
        up_tag_counts = np.bincount(pair, minlength=n * n)
    if down_layout is not None:
        layout = down_layout
        msgs = _messages(layout, down_parts, up=False)
        if collective is Collective.ALL_GATHER:
            source = lambda rank, first: (np.full(len(first), int(Buffer.INPUT)), first - rank * K)
        elif collective is Collective.BROADCAST:
            source = lambda rank, first: (np.full(len(first), int(Buffer.INPUT)), first)
        else:
            source = lambda rank, first: (np.full(len(first), int(Buffer.OUTPUT)), first)
        tag_offset = zero_tags if up_tag_counts is None else (lambda a, b: up_tag_counts[a * n + b])
        ready = None
        if up_final is not None:
            ready = _after_up(up_final, n, K)
        hops = np.array(routes.hops, dtype=np.int64)
        batch = _batches(routes, fast_batch) if fast_batch > 1 and units_per_root == 1 else None
        apart = RANGES_APART and collective is Collective.ALL_GATHER and units_per_root > 1
        _emit_down(prog, deps, layout, msgs, source=source, phase=1, tag_offset=tag_offset, ready=ready, hops=hops, batch=batch, apart=apart)
        # every rank's own data: roots copy their input to their output (All-Gather, broadcast)
        if collective is Collective.ALL_GATHER:
            ranks = np.arange(n)
            prog.add(rank=ranks, kind=int(OpKind.COPY), src_buf=int(Buffer.INPUT), src_off=0, dst_buf=int(Buffer.OUTPUT), dst_off=ranks * K, count=K, key0=-1, key1=0, key2=0, key3=0)
        elif collective is Collective.BROADCAST:
            prog.add(rank=np.array([root]), kind=int(OpKind.COPY), src_buf=int(Buffer.INPUT), src_off=0, dst_buf=int(Buffer.OUTPUT), dst_off=0, count=K, key0=-1, key1=0, key2=0, key3=0)
    cols, dep_ptr, dep_idx, ranges = prog.freeze(*deps)
    stream = cols.pop("route")
    route = np.where(stream >= 0, routes.route_of(np.maximum(stream, 0)), -1)
    table = OpTable.from_columns(
        rank=cols.pop("rank").astype(_I32), dep_ptr=dep_ptr, dep_idx=dep_idx.astype(_I32),
        kind=cols["kind"].astype(np.int8), peer=cols["peer"].astype(_I32), tag=cols["tag"].astype(_I32),
        src_buf=cols["src_buf"].astype(np.int8), src_off=cols["src_off"].astype(_I32),
        dst_buf=cols["dst_buf"].astype(np.int8), dst_off=cols["dst_off"].astype(_I32), count=cols["count"].astype(_I32),
        route=route.astype(_I32), **ranges,
    )
    sizes = [collective.buffer_chunks(rank=r, num_ranks=n, chunk_count=chunk_count, root=root) for r in range(n)]
    algorithm = CollectiveAlgorithm(
        collective=collective,
        num_ranks=n,
        chunk_count=chunk_count,
        ops=table,
        input_chunks=np.array([s[0] for s in sizes], dtype=np.int64),
        output_chunks=np.array([s[1] for s in sizes], dtype=np.int64),
        scratch_chunks=scratch,
        size_bytes=size_bytes,
        root=root,
        name=name,
        provenance=dict(provenance or {}),
        routes=tuple(routes.paths),
    )
    return algorithm


RANGES_APART = True
"""All-Gather with several trees per NPU: the messages of one root's trees that cross one path
in one piece go as one, of several chunk ranges where their chunks are apart (a tree between
them takes another path). The message waits for its last tree's piece, and a larger message
holds back the trees that part after it; on All-Gather every link also carries other roots'
pieces meanwhile, and a latency saved per merged message wins: 1 GiB on mi250:2 (three trees per
NPU) 272 -> 256 messages on the busiest link at 16 pieces, realised 0.914 -> 0.919 (32 pieces
chosen). Broadcast (a100:2, 64 MiB, 8 trees, 8 pieces: 624.5 -> 626.7 us) and All-Reduce (whose
roots send sums finished at different times; mi250:1 64 MiB: 435.4 -> 445.7 us) lose: there
only adjacent chunks merge."""

LAST_PIECE_PARTS = 2
"""One tree per NPU, down only (All-Gather, broadcast), no fast-path batches, pieces of at least
:data:`SPLIT_PIECE_LATENCIES` latencies: every tree's last piece goes as this many messages, so
its last hops (a NIC's last piece, then its fan-out over NVLink) wait for half a piece. 1 GiB
All-Gather, predicted: dgx:4x8 0.9601 -> 0.9616 of the optimal algbw, a100:4 0.9564 -> 0.9576
(4 parts: no better; cutting the first piece too does not help: a switch's downlinks wait for
a whole piece of every uplink whenever the uplinks end their messages together, docs/bounds.md)."""

SPLIT_PIECE_LATENCIES = 32
"""The last piece is cut only when a piece takes at least this many latencies of the slowest
link: with smaller pieces the extra message costs more than half a piece saves (dgx:4x8
16 MiB, pieces of 10 latencies: 79.2 -> 81.1 us; 64 MiB, 20 latencies: 274.3 -> 275.0 us;
256 MiB, 39 latencies: 1,016.1 -> 1,014.6 us)."""


def _last_piece_parts(collective: Collective, topology, piece_bytes: float) -> int:
    """How many messages a tree's last piece goes in (:data:`LAST_PIECE_PARTS` or 1)."""
    if collective not in (Collective.ALL_GATHER, Collective.BROADCAST):
        return 1
    slowest = min(topology.links, key=lambda link: link.bandwidth_gbps)
    piece_ns = piece_bytes / bytes_per_ns(slowest.bandwidth_gbps)
    return LAST_PIECE_PARTS if piece_ns >= SPLIT_PIECE_LATENCIES * slowest.latency_ns else 1


def _batches(routes: _Routes, most: int) -> np.ndarray:
    """Pieces per message over each path (its stream key): as many times as its slowest link is
    faster than the slowest path's, a power of two, at most ``most``.

    A slow multi-hop path (a NIC route through two switches) needs small pieces to fill its
    store-and-forward pipeline quickly; a fast one (NVLink) pays a latency per message for
    nothing with them. On a100:2 (1 GiB All-Gather, one tree per NPU, 32 pieces) four pieces
    per NVSwitch message raise the realised share of the optimal algbw from 0.950 to 0.971."""
    slowest = np.array([min(routes.model.link_rate[link] for link in routes.model.path_links(path)) for path in sorted(routes.keys, key=routes.keys.get)])
    return np.clip(2 ** np.floor(np.log2(slowest / slowest.min())), 1, most).astype(np.int64)


def _written_by(keys: np.ndarray, written_keys: np.ndarray, writers: np.ndarray, otherwise) -> np.ndarray:
    """Per key, its writer (``writers[i]`` wrote ``written_keys[i]``, ascending and distinct),
    else ``otherwise`` (a scalar or one value per key).

    >>> _written_by(np.array([5, 2, 9]), np.array([2, 5]), np.array([20, 50]), -1).tolist()
    [50, 20, -1]
    """
    if not len(written_keys):
        return np.broadcast_to(np.asarray(otherwise, dtype=np.int64), keys.shape).copy()
    at = np.minimum(np.searchsorted(written_keys, keys), len(written_keys) - 1)
    return np.where(written_keys[at] == keys, writers[at], otherwise).astype(np.int64)


def _after_up(up_final, n: int, K: int):
    """Dependencies of a down piece's root sends on the up phase's sums of the chunks it carries."""
    info, layout = up_final
    final = info["final"]
    pieces = layout.pieces
    # per owner rank and chunk: the op completing that chunk's sum
    chunk_final = np.full(n * K, -1, dtype=np.int64)
    keys = np.fromiter(final.keys(), dtype=np.int64, count=len(final))
    tree, piece = keys // (pieces * n), (keys // n) % pieces
    width = layout.weight[tree].astype(np.int64)
    first = layout.piece_start(tree, piece)  # each piece's chunks: the pieces' ranges are disjoint
    chunk_final[np.repeat(first - (np.cumsum(width) - width), width) + np.arange(int(width.sum()))] = np.repeat(
        np.fromiter(final.values(), dtype=np.int64, count=len(final)), width
    )

    def ready(rank, first, count, sends):
        """Per send (in order), the distinct ops completing the sums of chunks ``first .. first + count - 1`` (ascending)."""
        count = np.asarray(count, dtype=np.int64)
        which = np.repeat(np.arange(len(sends)), count)  # every (send, chunk) pair
        ops = chunk_final[np.repeat(np.asarray(first, dtype=np.int64) - (np.cumsum(count) - count), count) + np.arange(len(which))]
        if not len(ops):
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        low, span = int(ops.min()), int(ops.max()) - int(ops.min()) + 1
        pair = distinct(which * span + (ops - low))  # sorted by send, then op
        return np.asarray(sends, dtype=np.int64)[pair // span], pair % span + low

    return ready


__all__ = ["lower_forest"]
