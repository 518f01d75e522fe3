"""Direct-connect topology families: circulants, TopoOpt's TotientPerms, Kautz, de Bruijn, and a fat-tree baseline.

Degree means ports: an NPU of degree ``d`` has ``d`` links out and ``d`` links in (one
transmitter and one receiver per port), each of the link bandwidth. A bidirectional ring
uses two ports per NPU; a one-way ring uses one.

* :func:`circulant` -- ``i -> i + s (mod N)`` for every stride ``s`` (and ``i -> i - s`` when
  bidirectional). With every stride coprime with ``N`` each stride is one Hamiltonian ring
  (TopoOpt's "totient permutation"), which a ring All-Reduce can use alone.
* :func:`totientperms` -- TopoOpt's selection (Wang et al., NSDI'23) of ``degree`` such rings
  for small diameter: :func:`totient_strides` states the rule.
* :func:`kautz` (``K(d, L)``: degree ``d``, diameter ``L``, ``(d+1) d^(L-1)`` NPUs),
  :func:`generalized_kautz` (Imase-Itoh, any ``N``, diameter at most ``ceil(log_d N)``),
  :func:`de_bruijn` (``d^L`` NPUs, diameter ``L``).
* :func:`fat_tree` -- the switched baseline with the same NPU ports.

>>> circulant(8, strides=[1, 3]).describe()
'circulant:8,strides=1,3: 8 NPUs, 32 links'
>>> kautz(2, 3).describe()
'kautz:2,3: 12 NPUs, 24 links'
>>> totient_strides(16, 4)
(1, 3, 5, 7)
"""

from __future__ import annotations

from math import ceil, comb, gcd, log
from typing import Sequence

import numpy as np

from chakra_collectives.errors import InputError
from chakra_collectives.limits import check_links, check_npus
from chakra_collectives.topology.builders import BANDWIDTH_GBPS, LATENCY_NS
from chakra_collectives.topology.core import Topology


def _whole(kind: str, what: str, value: float, *, least: int) -> int:
    if int(value) != value or value < least:
        raise InputError(f"{kind}: {what} must be a whole number >= {least}, got {value:g}")
    return int(value)


# ---------------------------------------------------------------------- circulants
def circulant(
    n: int,
    *,
    strides: Sequence[int] | int = (1,),
    bidirectional: bool = True,
    coprime: bool = True,
    bandwidth_gbps: float = BANDWIDTH_GBPS,
    latency_ns: float = LATENCY_NS,
) -> Topology:
    """Circulant graph on ``n`` NPUs: ``i -> i + s (mod n)`` for every stride (``i -> i - s`` too when bidirectional).

    ``coprime`` (default) requires every stride to be coprime with ``n``, so each stride is a
    Hamiltonian ring (a stride ``s`` with ``gcd(s, n) = g > 1`` splits into ``g`` rings of
    ``n/g``); ``coprime=False`` accepts any strides whose links still connect all NPUs.

    >>> circulant(8, strides=[2])
    Traceback (most recent call last):
    ...
    chakra_collectives.errors.InputError: circulant:8: stride 2 is not coprime with 8 (gcd 2): its links are 2 separate rings of 4 NPUs, not one ring (coprime=false allows it)
    >>> circulant(8, strides=[1, 4], coprime=False).describe()   # stride n/2 both ways: one link each way
    'circulant:8,strides=1,4: 8 NPUs, 24 links'
    """
    kind = f"circulant:{n}"
    n = check_npus(_whole("circulant", "the NPU count", n, least=2), kind)
    values = [strides] if isinstance(strides, (int, float)) else list(strides)
    if not values:
        raise InputError(f"{kind}: needs at least one stride")
    picked: list[int] = []
    for value in values:
        s = _whole(kind, "every stride", value, least=1)
        if s >= n:
            raise InputError(f"{kind}: stride {s} must be below {n}")
        g = gcd(s, n)
        if coprime and g > 1:
            raise InputError(
                f"{kind}: stride {s} is not coprime with {n} (gcd {g}): its links are {g} separate rings "
                f"of {n // g} NPUs, not one ring (coprime=false allows it)"
            )
        same = [p for p in picked if p == s or (bidirectional and p == n - s)]
        if same:
            raise InputError(f"{kind}: strides {same[0]} and {s} give the same links" if same[0] != s else f"{kind}: stride {s} is given twice")
        picked.append(s)
    if gcd(n, *picked) > 1:
        raise InputError(f"{kind}: strides {','.join(map(str, picked))} share the factor {gcd(n, *picked)} with {n}: the NPUs fall apart")
    name = f"circulant:{n},strides={','.join(map(str, picked))}" + ("" if bidirectional else ",bidirectional=false")
    check_links(n * sum(1 if not bidirectional or 2 * s == n else 2 for s in picked), name)
    topo = Topology(n, name=name)
    for s in picked:
        for i in range(n):
            topo.add_link(i, (i + s) % n, bandwidth_gbps, latency_ns)
        if bidirectional and 2 * s != n:
            for i in range(n):
                topo.add_link(i, (i - s) % n, bandwidth_gbps, latency_ns)
    topo.uniform = True  # i -> i + c maps the graph onto itself
    return topo


def circulant_diameter(n: int, strides: Sequence[int], *, bidirectional: bool = False) -> tuple[int, float]:
    """``(diameter, mean distance)`` of a circulant: one BFS from NPU 0 (every NPU looks alike).

    ``(n, inf)`` when the strides do not connect the NPUs.

    >>> circulant_diameter(8, [1])       # a one-way ring: 1 .. 7 hops
    (7, 4.0)
    """
    steps = sorted({s % n for s in strides} | ({(-s) % n for s in strides} if bidirectional else set()))
    seen = np.zeros(n, dtype=bool)
    seen[0] = True
    frontier = np.array([0])
    steps_array = np.array(steps, dtype=np.int64)
    depth, total, reached = 0, 0, 1
    while reached < n:
        nxt = np.unique((frontier[:, None] + steps_array[None, :]).ravel() % n)
        nxt = nxt[~seen[nxt]]
        if len(nxt) == 0:
            return n, float("inf")
        depth += 1
        seen[nxt] = True
        reached += len(nxt)
        total += depth * len(nxt)
        frontier = nxt
    return depth, total / (n - 1)


def circulant_diameter_lower_bound(n: int, rings: int, *, bidirectional: bool = False) -> int:
    """A diameter no circulant on ``n`` NPUs with ``rings`` strides can beat (abelian Moore bound).

    Within ``k`` steps a walk reaches at most ``C(k + r, r)`` NPUs with ``r`` one-way strides
    (the order of steps does not matter in ``Z_n``), and at most ``sum_i 2^i C(r, i) C(k, i)``
    with ``r`` strides used both ways.

    >>> circulant_diameter_lower_bound(64, 8), circulant_diameter_lower_bound(1024, 4)
    (3, 11)
    """
    k = 0
    while True:
        if bidirectional:
            reach = sum(2**i * comb(rings, i) * comb(k, i) for i in range(min(rings, k) + 1))
        else:
            reach = comb(k + rings, rings)
        if reach >= n:
            return k
        k += 1


def totient_strides(n: int, degree: int, *, bidirectional: bool = False, passes: int = 2) -> tuple[int, ...]:
    """TopoOpt's TotientPerms selection: ``rings`` strides coprime with ``n`` for a small diameter.

    ``rings = degree`` one-way rings (``degree / 2`` bidirectional ones). The candidates are the
    totatives of ``n`` (the strides ``s < n`` with ``gcd(s, n) = 1``; ``s <= n/2`` when
    bidirectional, since ``s`` and ``n - s`` are the same ring reversed), each a Hamiltonian
    ring. TopoOpt picks strides spread geometrically between 1 and ``n``; here, as a rule
    that can be checked:

    1. stride 1, then for ``i = 1 .. rings-1`` the unused totative nearest ``x^i`` for a base
       ``x``; every base ``x = n^(1/rings) * f`` for ``f`` on a grid of 0.5 .. 2 is tried and
       the set with the smallest ``(diameter, mean distance)`` is kept (ties: the first);
    2. then, for up to ``passes`` passes while a pass helps, each stride but 1 in turn is
       replaced by the totative that most lowers ``(diameter, mean distance)``.

    Diameters come from one BFS per candidate (:func:`circulant_diameter`). Deterministic.

    >>> strides = totient_strides(64, 4)
    >>> all(gcd(s, 64) == 1 for s in strides), len(set(strides))
    (True, 4)
    """
    rings = _ring_count(n, degree, bidirectional)
    candidates = [s for s in range(1, n if not bidirectional else n // 2 + 1) if gcd(s, n) == 1]
    if bidirectional and n % 2 == 0:
        candidates = [s for s in candidates if 2 * s != n]  # n/2 is never coprime with n > 2 anyway
    if rings > len(candidates):
        raise InputError(
            f"totientperms:{n}: degree {degree} needs {rings} distinct rings, but only {len(candidates)} strides are coprime with {n}"
        )
    totatives = np.array(candidates)

    def score(strides: Sequence[int]) -> tuple[int, float]:
        return circulant_diameter(n, strides, bidirectional=bidirectional)

    best: tuple[tuple[int, float], tuple[int, ...]] | None = None
    base = n ** (1.0 / rings)
    for factor in np.linspace(0.5, 2.0, 16):
        chosen = [1]
        for i in range(1, rings):
            target = (base * factor) ** i
            free = totatives[~np.isin(totatives, chosen)]
            chosen.append(int(free[np.argmin(np.abs(free - target))]))
        strides = tuple(sorted(chosen))
        found = (score(strides), strides)
        if best is None or found[0] < best[0]:
            best = found
    assert best is not None
    improved, done = True, 0
    while improved and done < passes:
        improved, done = False, done + 1
        for position in range(1, rings):
            current = list(best[1])
            fixed = current[:position] + current[position + 1:]
            free = totatives[~np.isin(totatives, current)]
            if len(free) == 0:
                continue
            diameters, means = _replacement_scores(n, fixed, free, bidirectional)
            pick = int(np.lexsort((means, diameters))[0])
            found = ((int(diameters[pick]), float(means[pick])), tuple(sorted(fixed + [int(free[pick])])))
            if found[0] < best[0]:
                best, improved = found, True
    return best[1]


_BFS_BLOCK_BYTES = 2**26
"""Memory one batch of :func:`_replacement_scores` may take (about 40 bytes per row entry)."""


def _replacement_scores(n: int, fixed: list[int], free: np.ndarray, bidirectional: bool) -> tuple[np.ndarray, np.ndarray]:
    """``(diameter, mean distance)`` of the circulant ``fixed + [s]`` for every ``s`` in ``free``,
    in batched BFSs of at most :data:`_BFS_BLOCK_BYTES` each."""
    rows = max(1, _BFS_BLOCK_BYTES // (40 * n))
    parts = [_replacement_block(n, fixed, free[i : i + rows], bidirectional) for i in range(0, len(free), rows)]
    return np.concatenate([d for d, _ in parts]), np.concatenate([m for _, m in parts])


def _replacement_block(n: int, fixed: list[int], free: np.ndarray, bidirectional: bool) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_replacement_scores` of one batch, in one BFS."""
    shifts = sorted({f % n for f in fixed} | ({(-f) % n for f in fixed} if bidirectional else set()))
    rows = len(free)
    index = np.arange(n)
    pulls = [(index[None, :] - free[:, None]) % n]  # reached[r, i] from reached[r, i - s_r]
    if bidirectional:
        pulls.append((index[None, :] + free[:, None]) % n)
    pulls = [p + (np.arange(rows) * n)[:, None] for p in pulls]
    reached = np.zeros((rows, n), dtype=bool)
    reached[:, 0] = True
    frontier = reached.copy()
    diameter = np.zeros(rows, dtype=np.int64)
    total = np.zeros(rows, dtype=np.int64)
    depth = 0
    while True:
        grown = np.zeros_like(frontier)
        for shift in shifts:
            grown |= np.roll(frontier, shift, axis=1)
        flat = frontier.ravel()
        for pull in pulls:
            grown |= flat[pull]
        grown &= ~reached
        counts = grown.sum(axis=1)
        if not counts.any():
            break
        depth += 1
        total += depth * counts
        diameter[counts > 0] = depth
        reached |= grown
        frontier = grown
    connected = reached.all(axis=1)
    diameter = np.where(connected, diameter, n)
    mean = np.where(connected, total / (n - 1), np.inf)
    return diameter, mean


def best_circulant_diameter(n: int, rings: int, *, bidirectional: bool = False, limit: int = 200_000) -> int | None:
    """The smallest diameter of any circulant with ``rings`` coprime strides, by exhaustive search.

    Stride 1 can be assumed (multiplying every stride by the inverse of one of them mod ``n``
    maps the circulant onto an isomorphic one), so ``C(phi(n) - 1, rings - 1)`` sets are
    tried, each in a batched BFS; ``None`` when that is more than ``limit``.

    Double-loop networks reach Wong and Coppersmith's bound ``ceil(sqrt(3 n)) - 2`` for ``n = 16``:

    >>> best_circulant_diameter(16, 2), best_circulant_diameter(8, 1)
    (5, 7)
    """
    from itertools import combinations

    candidates = [s for s in range(2, n if not bidirectional else n // 2 + 1) if gcd(s, n) == 1]
    if comb(len(candidates), rings - 1) > limit:
        return None
    best = n
    if rings == 1:
        return circulant_diameter(n, [1], bidirectional=bidirectional)[0]
    for rest in combinations(candidates, rings - 2):
        pool = np.array([c for c in candidates if c > (rest[-1] if rest else 1)])
        if len(pool) == 0:
            continue
        diameters, _ = _replacement_scores(n, [1, *rest], pool, bidirectional)
        best = min(best, int(diameters.min()))
    return best


def _ring_count(n: int, degree: int, bidirectional: bool) -> int:
    kind = f"totientperms:{n}"
    degree = _whole(kind, "the degree", degree, least=1)
    if degree > n - 1:
        raise InputError(f"{kind}: degree {degree} is larger than N - 1 = {n - 1} (an NPU has only {n - 1} others to link to)")
    if bidirectional and degree % 2:
        raise InputError(f"{kind}: a bidirectional ring takes 2 ports per NPU, so the degree must be even, got {degree}")
    return degree // 2 if bidirectional else degree


def totientperms(
    n: int,
    *,
    degree: int = 4,
    bidirectional: bool = False,
    bandwidth_gbps: float = BANDWIDTH_GBPS,
    latency_ns: float = LATENCY_NS,
) -> Topology:
    """TopoOpt's TotientPerms fabric: ``degree`` ports per NPU, each a ring of a coprime stride.

    The strides are :func:`totient_strides`; the name records them, so the topology can be
    rebuilt as a :func:`circulant`.

    >>> totientperms(16, degree=4).describe()
    'totientperms:16,degree=4 (strides 1,3,5,7): 16 NPUs, 64 links'
    >>> totientperms(8, degree=9)
    Traceback (most recent call last):
    ...
    chakra_collectives.errors.InputError: totientperms:8: degree 9 is larger than N - 1 = 7 (an NPU has only 7 others to link to)
    """
    n = check_npus(_whole("totientperms", "the NPU count", n, least=3), f"totientperms:{n}")
    strides = totient_strides(n, degree, bidirectional=bidirectional)
    topo = circulant(n, strides=strides, bidirectional=bidirectional, bandwidth_gbps=bandwidth_gbps, latency_ns=latency_ns)
    suffix = "" if not bidirectional else ",bidirectional=true"
    topo.name = f"totientperms:{n},degree={int(degree)}{suffix} (strides {','.join(map(str, strides))})"
    return topo


# ---------------------------------------------------------------------- Kautz and de Bruijn
def generalized_kautz(
    n: int,
    *,
    degree: int = 2,
    bandwidth_gbps: float = BANDWIDTH_GBPS,
    latency_ns: float = LATENCY_NS,
) -> Topology:
    """Generalized Kautz digraph (Imase and Itoh): ``i -> (-degree * i - j) mod n`` for ``j = 1 .. degree``.

    Diameter at most ``ceil(log_degree n)``. A node whose arc would be a self-loop (when
    ``(degree + 1) i + j`` is a multiple of ``n``) has one port fewer; with
    ``n = (d+1) d^(L-1)`` there are none and the graph is the Kautz graph ``K(d, L)``.

    >>> generalized_kautz(10, degree=3).describe()
    'genkautz:10,degree=3: 10 NPUs, 28 links'
    """
    kind = f"genkautz:{n}"
    n = _whole("genkautz", "the NPU count", n, least=2)
    degree = _whole(kind, "the degree", degree, least=1)
    if degree > n - 1:
        raise InputError(f"{kind}: degree {degree} is larger than N - 1 = {n - 1}")
    check_npus(n, kind)
    check_links(n * degree, f"genkautz:{n},degree={degree}")
    topo = Topology(n, name=f"genkautz:{n},degree={degree}")
    for i in range(n):
        for j in range(1, degree + 1):
            target = (-degree * i - j) % n
            if target != i:
                topo.add_link(i, target, bandwidth_gbps, latency_ns)
    return topo


def kautz(d: int, diameter: int, *, bandwidth_gbps: float = BANDWIDTH_GBPS, latency_ns: float = LATENCY_NS) -> Topology:
    """Kautz digraph ``K(d, L)``: ``(d+1) d^(L-1)`` NPUs, degree ``d``, diameter ``L``.

    Built as the generalized Kautz digraph of that size, which is isomorphic to it (and to the
    ``L-1``-fold line graph of the complete digraph on ``d+1`` NPUs).
    """
    d = _whole("kautz", "the degree", d, least=2)
    diameter = _whole("kautz", "the diameter", diameter, least=1)
    check_npus((d + 1) * d ** min(diameter - 1, 64), f"kautz:{d},{diameter}")
    topo = generalized_kautz((d + 1) * d ** (diameter - 1), degree=d, bandwidth_gbps=bandwidth_gbps, latency_ns=latency_ns)
    topo.name = f"kautz:{d},{diameter}"
    return topo


def de_bruijn(d: int, diameter: int, *, bandwidth_gbps: float = BANDWIDTH_GBPS, latency_ns: float = LATENCY_NS) -> Topology:
    """De Bruijn digraph ``B(d, L)``: ``d^L`` NPUs, ``i -> (d i + j) mod d^L`` for ``j < d``, diameter ``L``.

    Its ``d`` self-loops (the constant strings ``0...0``, ``1...1``, ...) are left out: those
    NPUs have one port fewer.

    >>> de_bruijn(2, 3).describe()
    'debruijn:2,3: 8 NPUs, 14 links'
    """
    d = _whole("debruijn", "the degree", d, least=2)
    diameter = _whole("debruijn", "the diameter", diameter, least=1)
    check_npus(d ** min(diameter, 64), f"debruijn:{d},{diameter}")  # d >= 2: past 2^64 it is too large anyway
    n = d**diameter
    check_links(n * d, f"debruijn:{d},{diameter}")
    topo = Topology(n, name=f"debruijn:{d},{diameter}")
    for i in range(n):
        for j in range(d):
            target = (d * i + j) % n
            if target != i:
                topo.add_link(i, target, bandwidth_gbps, latency_ns)
    return topo


# ---------------------------------------------------------------------- switched baseline
def fat_tree_levels(n_ports: int, radix: int) -> int:
    """Switch levels of a full-bisection fat-tree of ``radix``-port switches with ``n_ports`` host ports.

    One switch up to ``radix`` ports, a two-level leaf-spine up to ``radix^2 / 2``, a
    three-level ``k``-ary fat-tree up to ``radix^3 / 4``, and so on (each level doubles the
    hops and multiplies the hosts by ``radix / 2``).

    >>> fat_tree_levels(64, 64), fat_tree_levels(1024, 64), fat_tree_levels(4096, 32)
    (1, 2, 3)
    """
    levels, hosts = 1, radix
    while hosts < n_ports:
        levels += 1
        hosts = hosts * radix // 2
    return levels


def fat_tree_switches(n_ports: int, radix: int) -> int:
    """Switches of ``radix`` ports a full-bisection fat-tree of ``n_ports`` host ports needs (per plane).

    ``levels = L``: ``L - 1`` levels of ``ceil(n / (radix/2))`` switches and a top level of
    ``ceil(n / radix)`` (every switch below the top splits its ports half down, half up).

    >>> fat_tree_switches(64, 64), fat_tree_switches(1024, 64)
    (1, 48)
    """
    levels = fat_tree_levels(n_ports, radix)
    if levels == 1:
        return 1
    return (levels - 1) * ceil(n_ports / (radix // 2)) + ceil(n_ports / radix)


def fat_tree(
    n: int,
    *,
    degree: int = 1,
    radix: int = 64,
    bandwidth_gbps: float = BANDWIDTH_GBPS,
    latency_ns: float = LATENCY_NS,
) -> Topology:
    """The switched baseline TopoOpt compares with: ``degree`` fat-tree planes of ``radix``-port switches.

    Every NPU has ``degree`` ports of ``bandwidth_gbps`` (the ports of a direct-connect fabric of
    that degree), port ``p`` on plane ``p``; a plane is a full-bisection fat-tree
    (:func:`fat_tree_switches` gives the switches it needs; ``topo-info`` prints them).

    In the network model the planes are **one non-blocking switch node, each NPU linked to it
    both ways at ``degree x bandwidth_gbps``**: the model routes one path per NPU pair, so
    separate planes (or the tree's own links) would put every message on plane 0 (or on one
    spine), where multi-rail collectives and ECMP spread the traffic over all of them. The
    latency is the tree's: ``2 * levels`` links of ``latency_ns``, folded into the model's two.

    >>> t = fat_tree(16, degree=2)
    >>> t.describe(), t.links[0].bandwidth_gbps, t.links[0].latency_ns
    ('fattree:16,degree=2,radix=64: 16 NPUs, 1 switches, 32 links', 100.0, 500.0)
    """
    n = check_npus(_whole("fattree", "the NPU count", n, least=2), f"fattree:{n}")
    degree = _whole(f"fattree:{n}", "the degree", degree, least=1)
    radix = _whole(f"fattree:{n}", "the switch radix", radix, least=4)
    if radix % 2:
        raise InputError(f"fattree:{n}: the switch radix must be even (half the ports go down, half up), got {radix}")
    levels = fat_tree_levels(n, radix)
    topo = Topology(n, name=f"fattree:{n},degree={degree},radix={radix}")
    hub = topo.add_switch()
    for npu in range(n):
        topo.add_link(npu, hub, bandwidth_gbps * degree, latency_ns * levels, bidirectional=True)
    topo.uniform = True
    return topo


def kautz_diameter_bound(n: int, degree: int) -> int:
    """Imase and Itoh's bound on a generalized Kautz digraph's diameter: ``ceil(log_degree n)``.

    >>> kautz_diameter_bound(12, 2), kautz_diameter_bound(1024, 4)
    (4, 5)
    """
    bound = max(1, ceil(log(n) / log(degree) - 1e-12))
    return bound


__all__ = [
    "best_circulant_diameter",
    "circulant",
    "circulant_diameter",
    "circulant_diameter_lower_bound",
    "de_bruijn",
    "fat_tree",
    "fat_tree_levels",
    "fat_tree_switches",
    "generalized_kautz",
    "kautz",
    "kautz_diameter_bound",
    "totient_strides",
    "totientperms",
]
