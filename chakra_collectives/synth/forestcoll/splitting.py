"""Remove switches by edge splitting, keeping every NPU's connectivity (ForestColl's step 2).

*Splitting off* the pair of edges ``u -> w -> t`` at a switch ``w`` by ``M`` units lowers both
edges by ``M`` and raises a direct edge ``u -> t`` by ``M``: a message that used to cross the
switch now has a logical edge of its own, which remembers the switch path it stands for.
Bang-Jensen, Frank and Jackson proved that all edges into a switch can be split off this way
while the tree-packing condition keeps holding (see
:mod:`~chakra_collectives.synth.forestcoll.connectivity`); ForestColl uses it so that
Edmonds' theorem, which knows nothing of switches, can pack the trees.

How much a pair may take is decided by the flow test. For speed and for good trees:

1. switches are handled one symmetry class at a time (the same split at every image of the
   switch keeps the whole state symmetric, so one sink NPU per class suffices in every test);
2. a *spread plan* first gives every input of the switch a share of many outputs, round robin
   over the pairs in order of preference -- a partner the switch is the short way to (another
   server, not a neighbour with its own link) first -- and is tested once (scaled back by
   bisection if it fails). Spread splitting gives logical graphs where trees are shallow;
3. whatever is left is split exactly: for each input, partner by partner, the largest amount
   the test allows (Newton's method on the violated cut), until the input is used up, as the
   theorem promises. Inputs larger than the switch's outputs drop the excess (splitting with
   an edge into the super source, which no flow uses).

>>> from chakra_collectives.topology import switch
>>> logical = split_switches(switch(3), {v: 1 for v in range(3)}, capacity_per_link=2)
>>> sorted((u, t, c) for (u, t), c in logical.capacity.items())     # spread: one unit to each
[(0, 1, 1), (0, 2, 1), (1, 0, 1), (1, 2, 1), (2, 0, 1), (2, 1, 1)]
>>> logical.paths[(0, 1)]
[((0, 3, 1), 1)]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from chakra_collectives.errors import AlgorithmError
from chakra_collectives.ir.grouping import distinct, distinct_rows
from chakra_collectives.synth.forestcoll.connectivity import Connectivity
from chakra_collectives.topology.distances import least_latency

class SplittingStuck(AlgorithmError):
    """No pair at a switch can be split off any more although units still enter it (possible
    only at a switch that sends more than it receives: ForestColl's theorem needs in >= out)."""


DROP = -1
"""Partner of a split that discards capacity (an edge into the super source)."""

Path = tuple[int, ...]


@dataclass
class LogicalGraph:
    """NPU-to-NPU edges after splitting: capacity and the switch paths each edge stands for."""

    num_npus: int
    capacity: dict[tuple[int, int], int]
    paths: dict[tuple[int, int], list[tuple[Path, int]]]
    """Per edge, ``(node path, units)`` pieces whose units sum to the edge's capacity."""
    splits: int = 0
    """Pairs split off (statistics)."""
    tests: int = 0
    """Flow tests run (statistics)."""


@dataclass
class _State:
    connectivity: Connectivity
    supply: dict[int, int]
    elements: np.ndarray
    latency: dict[tuple[int, int], float]
    paths: dict[tuple[int, int], list[list]] = field(default_factory=dict)
    splits: int = 0
    tests: int = 0

    @property
    def capacity(self) -> dict[tuple[int, int], int]:
        return self.connectivity.capacity

    def check(self, want_cut: bool = False):
        self.tests += 1
        return self.connectivity.check(self.supply, want_cut=want_cut)


def split_switches(
    topology,
    supply: dict[int, int],
    *,
    capacity: dict[tuple[int, int], int] | None = None,
    capacity_per_link: int | None = None,
    sinks: Sequence[int] | None = None,
    symmetric: bool = True,
    reverse: bool = False,
    progress: Callable[[str], None] | None = None,
    within_servers: bool = True,
) -> LogicalGraph:
    """Split off every switch of ``topology`` (integer ``capacity`` per node pair).

    ``supply`` is the number of tree units rooted at each NPU; ``capacity`` maps each node pair
    to its integer capacity (``capacity_per_link`` gives every link that capacity instead: for
    examples and tests). ``sinks``: one NPU per symmetry class (default: all NPUs, or the
    topology's classes). ``symmetric``: use the topology's symmetry (only when the supply is
    the same on every NPU of a class). ``reverse``: ``capacity`` is of the reversed network
    (paths are then of the reversed network too). ``within_servers``: the partners of an input
    at a switch are taken farthest first within a server too, not only across servers (see
    :func:`_spread_rank`; which gives shallower trees depends on the fabric and ``k``).
    """
    n, nodes = topology.num_npus, topology.num_nodes
    ends = (lambda link: (link.dst, link.src)) if reverse else (lambda link: (link.src, link.dst))
    if capacity is None:
        capacity = {}
        for link in topology.links:
            capacity[ends(link)] = capacity.get(ends(link), 0) + int(capacity_per_link)
    capacity = {key: c for key, c in capacity.items() if c > 0}
    symmetry = topology.symmetry if symmetric else None
    elements = symmetry.elements if symmetry is not None else np.arange(nodes, dtype=np.int64)[None, :]
    if sinks is None:
        sinks = symmetry.npu_orbits()[0] if symmetry is not None else list(range(n))
    latency: dict[tuple[int, int], float] = {}
    for link in topology.links:
        key = ends(link)
        latency[key] = min(latency.get(key, link.latency_ns), link.latency_ns)
    state = _State(Connectivity(nodes, n, capacity, sinks=sinks), supply, elements, latency)
    state.paths = {key: [[key, c]] for key, c in capacity.items()}
    for w in _switch_order(topology, capacity, elements):
        if progress is not None:
            progress(f"switch {w}")
        _split_switch(state, w, n, within_servers)
    logical = {key: int(c) for key, c in state.capacity.items() if c > 0}
    if any(u >= n or v >= n for u, v in logical):
        raise AlgorithmError("edge splitting left an edge at a switch")
    paths = {key: [(tuple(p), a) for p, a in state.paths[key] if a > 0] for key in logical}
    return LogicalGraph(n, logical, paths, splits=state.splits, tests=state.tests)


def _switch_order(topology, capacity, elements) -> list[int]:
    """Switch class representatives, fewest edge pairs first (a NIC before the fabric it joins)."""
    n, nodes = topology.num_npus, topology.num_nodes
    degree_in = np.zeros(nodes, dtype=np.int64)
    degree_out = np.zeros(nodes, dtype=np.int64)
    for u, v in capacity:
        degree_out[u] += 1
        degree_in[v] += 1
    seen: set[int] = set()
    reps = []
    for w in range(n, nodes):
        if w in seen:
            continue
        seen.update(elements[:, w].tolist())
        reps.append(w)
    return sorted(reps, key=lambda w: (int(degree_in[w] * degree_out[w]), w))


# ---------------------------------------------------------------------- one switch class
def _split_switch(state: _State, w: int, n: int, within_servers: bool = True) -> None:
    capacity = state.capacity
    elements = state.elements
    stabilizer = elements[elements[:, w] == w]
    ins = sorted(u for (u, v), c in capacity.items() if v == w and c > 0)
    outs = sorted(t for (v, t), c in capacity.items() if v == w and c > 0)
    if ins and outs:
        orbits = _pair_orbits(stabilizer, ins, outs)
        graph = _graph_without(state, w)
        tiers = _preference(state, w, orbits, graph)
        spread = _spread_rank(orbits, graph, within_servers=within_servers)
        order = sorted(range(len(orbits)), key=lambda i: (tiers[i], spread[i], i))
        orbits = [orbits[i] for i in order]
        plan = _spread_plan(capacity, w, orbits, [tiers[i] for i in order])
        _apply_plan(state, w, orbits, plan)
        _complete(state, w, orbits)
    # whatever leaves the switch now carries nothing: drop it, and check the inputs are gone
    for image in distinct(elements[:, w]).tolist():
        for key in [key for key in capacity if key[0] == image or key[1] == image]:
            if key[1] == image and capacity[key] > 0:
                raise SplittingStuck(f"edge splitting could not remove switch {image}: {capacity[key]} units into it remain")
            capacity[key] = 0


def _pair_orbits(stabilizer: np.ndarray, ins: list[int], outs: list[int]) -> list[np.ndarray]:
    """Classes of pairs ``(u, t)`` at the switch under its stabilizer, as ``(k, 2)`` arrays."""
    seen: set[tuple[int, int]] = set()
    orbits = []
    for u in ins:
        for t in outs:
            if (u, t) in seen:
                continue
            images = distinct_rows(np.stack([stabilizer[:, u], stabilizer[:, t]], axis=1))
            seen.update(map(tuple, images.tolist()))
            orbits.append(images)
    return orbits


def _graph_without(state: _State, w: int) -> "_Latencies":
    """The edges left that do not touch switch ``w``, weighted by latency."""
    capacity = state.capacity
    keys = [(u, v) for (u, v), c in capacity.items() if c > 0 and u != w and v != w]
    src = np.array([u for u, _ in keys], dtype=np.int64)
    dst = np.array([v for _, v in keys], dtype=np.int64)
    weight = np.array([state.latency[key] for key in keys], dtype=np.float64) + 1e-9  # zero latency still counts as a hop
    return _Latencies(state.connectivity.num_nodes, src, dst, weight)


@dataclass
class _Latencies:
    """A graph weighted by latency (see :func:`_graph_without`)."""

    num_nodes: int
    src: np.ndarray
    dst: np.ndarray
    weight: np.ndarray

    def from_nodes(self, sources: list[int]) -> np.ndarray:
        """``[i, v]``: the least latency from ``sources[i]`` to ``v`` (``inf``: unreachable)."""
        return least_latency(self.num_nodes, self.src, self.dst, self.weight, sources)


def _spread_rank(orbits: list[np.ndarray], graph, *, within_servers: bool = True) -> list[int]:
    """Per pair class, its place when each input's partners are taken farthest first: the next
    partner is the one farthest (least latency either way, without the switch) from those
    already taken, so that an input's few units reach other servers before a second NPU of
    one server (dgx:4x8: a GPU's 3 NIC units go to three other servers, not three GPUs of the
    next one, whose trees would cross the switch three times in a row). ``within_servers``:
    also farthest first among the NPUs of one server (those connected without the switch);
    else a server's NPUs are taken in their order."""
    rank = [0] * len(orbits)
    by_input: dict[int, list[int]] = {}
    for i, orbit in enumerate(orbits):
        by_input.setdefault(int(orbit[0, 0]), []).append(i)
    for members in by_input.values():
        partners = [int(orbits[i][0, 1]) for i in members]
        if len(members) < 3:
            continue
        far = graph.from_nodes(partners)[:, partners]
        far = np.minimum(far, far.T)
        if not within_servers:
            far = np.where(np.isfinite(far), 0.0, np.inf)
        nearest = far[0].copy()
        taken = [0]
        left = set(range(1, len(members)))
        while left:
            pick = max(sorted(left), key=lambda j: nearest[j])
            taken.append(pick)
            left.discard(pick)
            nearest = np.minimum(nearest, far[pick])
        for place, j in enumerate(taken):
            rank[members[j]] = place
    return rank


def _preference(state: _State, w: int, orbits: list[np.ndarray], graph) -> list[int]:
    """Tier of each pair class: 0 when the switch is the quicker way between the pair (least
    total latency; a server's NVSwitch between its GPUs, the IB switch between servers), 1
    when another path is as quick (a neighbour with its own link), 2 for a node and itself."""
    reps = sorted({int(o[0, 0]) for o in orbits})
    distance = dict(zip(reps, graph.from_nodes(reps)))

    def tier(orbit: np.ndarray) -> int:
        u, t = int(orbit[0, 0]), int(orbit[0, 1])
        if u == t:
            return 2
        via = state.latency[(u, w)] + state.latency[(w, t)] + 2e-9
        return int(distance[u][t] <= via)

    return [tier(o) for o in orbits]


def _spread_plan(capacity, w: int, orbits: list[np.ndarray], tiers: list[int]) -> list[int]:
    """Units per pair class: round robin over the classes of the best tier, one unit per class
    per round, while inputs and outputs last; then the next tier (never a node with itself)."""
    rows = {u: capacity.get((u, w), 0) for o in orbits for u in o[:, 0].tolist()}
    cols = {t: capacity.get((w, t), 0) for o in orbits for t in o[:, 1].tolist()}
    usage = []
    for o in orbits:
        r: dict[int, int] = {}
        c: dict[int, int] = {}
        for u, t in o.tolist():
            r[u] = r.get(u, 0) + 1
            c[t] = c.get(t, 0) + 1
        usage.append((r, c))
    plan = [0] * len(orbits)
    for level in (0, 1):
        live = [i for i in range(len(orbits)) if tiers[i] == level]
        while live:
            still = []
            for i in live:
                r, c = usage[i]
                if all(rows[u] >= k for u, k in r.items()) and all(cols[t] >= k for t, k in c.items()):
                    for u, k in r.items():
                        rows[u] -= k
                    for t, k in c.items():
                        cols[t] -= k
                    plan[i] += 1
                    still.append(i)
            live = still
    return plan


def _triples(state: _State, w: int, orbit: np.ndarray) -> np.ndarray:
    """Every image ``(u, w', t)`` of the class's pairs at ``w`` under the whole group (distinct)."""
    elements = state.elements
    u, t = orbit[0]
    images = np.stack([elements[:, u], elements[:, w], elements[:, t] if t != DROP else np.full(len(elements), DROP)], axis=1)
    return distinct_rows(images)


def _apply(state: _State, triples: np.ndarray, amount: int, *, sign: int = 1) -> None:
    capacity = state.capacity
    latency = state.latency
    for u, w, t in triples.tolist():
        capacity[(u, w)] -= sign * amount
        if t != DROP:
            capacity[(w, t)] -= sign * amount
            if t != u:
                capacity[(u, t)] = capacity.get((u, t), 0) + sign * amount
                via = latency[(u, w)] + latency[(w, t)]
                latency[(u, t)] = min(latency.get((u, t), via), via)


def _record(state: _State, triples: np.ndarray, amount: int) -> None:
    """Move ``amount`` units of switch paths from ``u -> w`` and ``w -> t`` to ``u -> t``."""
    if amount <= 0:
        return
    state.splits += len(triples)
    for u, w, t in triples.tolist():
        first = _take(state.paths[(u, w)], amount)
        if t == DROP or t == u:
            if t != DROP:
                _take(state.paths[(w, t)], amount)
            continue
        second = _take(state.paths[(w, t)], amount)
        joined = state.paths.setdefault((u, t), [])
        i = j = 0
        while i < len(first) and j < len(second):
            units = min(first[i][1], second[j][1])
            joined.append([tuple(first[i][0]) + tuple(second[j][0][1:]), units])
            first[i][1] -= units
            second[j][1] -= units
            i += first[i][1] == 0
            j += second[j][1] == 0


def _take(pieces: list[list], amount: int) -> list[list]:
    """Remove ``amount`` units from the front of ``pieces``; return them as pieces."""
    taken = []
    while amount > 0:
        path, units = pieces[0]
        used = min(units, amount)
        taken.append([path, used])
        amount -= used
        if used == units:
            pieces.pop(0)
        else:
            pieces[0][1] = units - used
    return taken


def _apply_plan(state: _State, w: int, orbits: list[np.ndarray], plan: list[int]) -> None:
    """Apply the spread plan; if the test fails, the largest fraction of it that passes."""
    chosen = [(i, _triples(state, w, orbits[i])) for i, units in enumerate(plan) if units > 0]
    if not chosen:
        return

    def apply(steps: int, sign: int) -> None:
        for i, triples in chosen:
            _apply(state, triples, plan[i] * steps // 16, sign=sign)

    apply(16, 1)
    if state.check().ok:
        best = 16
    else:
        apply(16, -1)
        low, high = 0, 15
        while low < high:
            middle = (low + high + 1) // 2
            apply(middle, 1)
            ok = state.check().ok
            apply(middle, -1)
            low, high = (middle, high) if ok else (low, middle - 1)
        best = low
        apply(best, 1)
    for i, triples in chosen:
        _record(state, triples, plan[i] * best // 16)


def _complete(state: _State, w: int, orbits: list[np.ndarray]) -> None:
    """Split what is left into ``w`` exactly, input class by input class."""
    capacity = state.capacity
    into = sum(c for (u, v), c in capacity.items() if v == w)
    out = sum(c for (v, t), c in capacity.items() if v == w)
    by_input: dict[int, list[np.ndarray]] = {}
    for orbit in orbits:
        by_input.setdefault(int(orbit[0, 0]), []).append(orbit)
    for u, candidates in by_input.items():
        if into > out:
            candidates = candidates + [np.array([[u, DROP]])]
        for orbit in candidates:
            if capacity.get((u, w), 0) <= 0:
                break
            triples = _triples(state, w, orbit)
            amount = _largest_split(state, w, triples, orbit)
            if amount > 0:
                _apply(state, triples, amount)
                _record(state, triples, amount)


def _largest_split(state: _State, w: int, triples: np.ndarray, orbit: np.ndarray) -> int:
    """The most units every triple can split off together while the flow test passes (Newton)."""
    capacity = state.capacity
    use: dict[tuple[int, int], int] = {}
    for u, w2, t in triples.tolist():
        use[(u, w2)] = use.get((u, w2), 0) + 1
        if t != DROP:
            use[(w2, t)] = use.get((w2, t), 0) + 1
    if int(orbit[0, 1]) == DROP:
        into = sum(c for (u, v), c in capacity.items() if v == w)
        out = sum(c for (v, t), c in capacity.items() if v == w)
        limit = max(0, into - out) // max(1, len([x for x in triples.tolist() if x[1] == w]))
    else:
        limit = None
    amount = min(capacity.get(key, 0) // k for key, k in use.items())
    if limit is not None:
        amount = min(amount, limit)
    while amount > 0:
        _apply(state, triples, amount)
        found = state.check(want_cut=True)
        _apply(state, triples, amount, sign=-1)
        if found.ok:
            return amount
        side = found.sink_side
        slope = 0  # how fast the cut loses capacity per unit split
        for u, w2, t in triples.tolist():
            slope += (not side[u]) and side[w2]
            if t != DROP:
                slope += (not side[w2]) and side[t]
                slope -= (not side[u]) and side[t]
        amount = amount - (-(-found.deficit // slope)) if slope > 0 else amount - 1
    return 0


__all__ = ["DROP", "LogicalGraph", "SplittingStuck", "split_switches"]
