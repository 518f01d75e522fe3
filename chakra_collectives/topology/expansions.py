"""Expansions that grow a large direct-connect topology from a small one (Zhao et al., NSDI'25).

For a topology ``G`` of ``N`` NPUs, degree ``d`` (ports: links out = links in) and diameter ``D``:

======================  ==============  ============  ====================================
expansion               NPUs            degree        diameter
======================  ==============  ============  ====================================
:func:`line_graph`      ``d N``         ``d``         ``D + 1`` (``d >= 2``)
:func:`cartesian`       ``N_G N_H``     ``d_G + d_H`` ``D_G + D_H``
:func:`degree_expand`   ``n N``         ``n d``       ``max(D, c)``, ``c`` = the longest of
                                                      the shortest cycles through each NPU
                                                      (2 when every link has a reverse)
======================  ==============  ============  ====================================

* **Line graph** ``L(G)``: an NPU per link ``u -> v`` of ``G``; ``(u -> v) -> (v -> w)`` for every
  link out of ``v`` (``w = u`` included). ``L^(L-1)`` of the complete digraph on ``d + 1``
  NPUs is the Kautz graph ``K(d, L)``.
* **Cartesian product** ``G x H``: NPU ``(g, h)`` is ``g + N_G * h``; ``(g, h) -> (g', h)`` for
  every link ``g -> g'`` of ``G`` and ``(g, h) -> (g, h')`` for every link ``h -> h'`` of ``H``
  (``ring:4 x ring:4`` is ``torus2d:4x4``).
* **Degree expansion** ``G * n``: ``n`` copies ``u_0 .. u_(n-1)`` of every NPU (``u_i`` is
  ``u * n + i``); ``u_i -> v_j`` for every link ``u -> v`` of ``G`` and all ``i, j``.

Links keep the bandwidth and latency of the link of ``G`` they come from (for the line graph:
of ``v -> w``). Every expansion refuses a result above ``npu_limit`` NPUs (default
:data:`NPU_LIMIT`) unless ``force`` is set, before building anything. The table's properties
are checked by ``tests/test_topology_families.py``; :mod:`chakra_collectives.synth.bfb` builds
an expansion's BFB schedule from its base's distances.

>>> from chakra_collectives.topology.builders import fully_connected, ring
>>> line_graph(fully_connected(3)).describe()
'line(fully-connected:3): 6 NPUs, 12 links'
>>> cartesian(ring(4), ring(4)).describe()
'ring:4 x ring:4: 16 NPUs, 64 links'
>>> degree_expand(ring(4), 2).describe()
'degree(ring:4,2): 8 NPUs, 32 links'
>>> line_graph(fully_connected(64), npu_limit=1000)
Traceback (most recent call last):
...
chakra_collectives.errors.InputError: line(fully-connected:64) would have 4,032 NPUs, above the limit of 1,000 (--force builds it anyway)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from chakra_collectives.errors import InputError
from chakra_collectives.limits import check_links, check_npus
from chakra_collectives.topology.core import Topology

NPU_LIMIT = 4096
"""Largest expansion built without ``force`` (a collective on more NPUs takes minutes to synthesize)."""


@dataclass(frozen=True)
class Expansion:
    """How an expanded topology was made: ``kind`` of ``operands`` (``copies`` for the degree expansion)."""

    kind: str
    operands: tuple[Topology, ...]
    copies: int = 1


def _remember(topology: Topology, expansion: Expansion) -> None:
    """Record how ``topology`` was built on the topology itself, so that a copy keeps it (a
    topology pickled to another process -- a search's worker -- is still scheduled as an expansion)."""
    topology._expansion = expansion  # type: ignore[attr-defined]


def origin(topology: Topology) -> Expansion | None:
    """The expansion ``topology`` was built by, or ``None`` (a builder's or a file's topology).

    A copy made by pickling keeps it:

    >>> import pickle
    >>> from chakra_collectives.topology.builders import ring
    >>> origin(pickle.loads(pickle.dumps(degree_expand(ring(4), 2)))).kind
    'degree'
    """
    return getattr(topology, "_expansion", None)


def expanded_distances(topology: Topology, base_distances) -> np.ndarray | None:
    """Hop distances between the NPUs of an expansion, from its operands' (no search on the expansion).

    ``base_distances(G)`` gives an operand's matrix (``[u, v]`` hops, -1 unreachable); the
    result is ``None`` when ``topology`` is not an expansion. The rules:

    * line graph: ``dist(u -> v, x -> y) = dist_G(v, x) + 1`` (0 for the same link);
    * Cartesian product: ``dist((g, h), (g', h')) = dist_G(g, g') + dist_H(h, h')``;
    * degree expansion: ``dist(u_i, v_j) = dist_G(u, v)`` for ``u != v``, and between two copies
      of ``u`` the length of the shortest cycle through ``u``.

    >>> from chakra_collectives.topology.builders import ring
    >>> from chakra_collectives.synth.bfb import hop_matrix
    >>> def bfs(t):
    ...     return hop_matrix(t.num_npus, t.link_arrays["src"], t.link_arrays["dst"])
    >>> product = cartesian(ring(3), ring(4))
    >>> bool((expanded_distances(product, bfs) == bfs(product)).all())
    True
    """
    found = origin(topology)
    if found is None:
        return None

    def of(operand: Topology) -> np.ndarray:
        derived = expanded_distances(operand, base_distances)
        return base_distances(operand) if derived is None else derived

    if found.kind == "line":
        (base,) = found.operands
        hops = of(base)
        arrays = base.link_arrays
        inner = hops[arrays["dst"][:, None], arrays["src"][None, :]]
        result = np.where(inner < 0, -1, inner + 1)
        np.fill_diagonal(result, 0)
        return result.astype(np.int32)
    if found.kind == "cartesian":
        left, right = (of(t) for t in found.operands)
        n_left, n_right = len(left), len(right)
        total = right[:, None, :, None] + left[None, :, None, :]
        unreachable = (right[:, None, :, None] < 0) | (left[None, :, None, :] < 0)
        return np.where(unreachable, -1, total).reshape(n_left * n_right, n_left * n_right).astype(np.int32)
    (base,) = found.operands
    hops = of(base)
    n, copies = base.num_npus, found.copies
    arrays = base.link_arrays
    cycle = np.full(n, -1, dtype=np.int64)
    back = hops[arrays["dst"], arrays["src"]]  # a link u -> w closes a cycle of 1 + dist(w, u)
    for u, length in zip(arrays["src"].tolist(), (back + 1).tolist()):
        if length > 0 and (cycle[u] < 0 or length < cycle[u]):
            cycle[u] = length
    result = np.repeat(np.repeat(hops, copies, axis=0), copies, axis=1)
    block = np.arange(n * copies) // copies
    same = block[:, None] == block[None, :]
    result = np.where(same, cycle[block][:, None], result)
    np.fill_diagonal(result, 0)
    return result.astype(np.int32)


def _direct(topology: Topology, what: str) -> None:
    if topology.num_switches:
        raise InputError(f"{what}: {topology.name} has switches; expansions take direct-connect topologies (NPUs only)")


def _check_size(name: str, npus: int, links: int, npu_limit: int | None, force: bool) -> None:
    """Refuse a result above ``npu_limit`` (unless ``force``) or above the tool's own limits,
    before building it."""
    limit = NPU_LIMIT if npu_limit is None else npu_limit
    if npus > limit and not force:
        raise InputError(f"{name} would have {npus:,} NPUs, above the limit of {limit:,} (--force builds it anyway)")
    check_npus(npus, name)
    check_links(links, name)


def line_graph(topology: Topology, *, npu_limit: int | None = None, force: bool = False) -> Topology:
    """The line digraph ``L(G)``: NPU ``i`` is link ``i`` of ``G`` (see the module docstring)."""
    name = f"line({topology.name})"
    _direct(topology, name)
    _check_size(name, len(topology.links), sum(len(topology.out_links[link.dst]) for link in topology.links), npu_limit, force)
    result = Topology(len(topology.links), name=name)
    for first, link in enumerate(topology.links):
        for second in topology.out_links[link.dst]:
            onward = topology.links[second]
            result.add_link(first, second, onward.bandwidth_gbps, onward.latency_ns)
    _remember(result, Expansion("line", (topology,)))
    return result


def cartesian(left: Topology, right: Topology, *, npu_limit: int | None = None, force: bool = False) -> Topology:
    """The Cartesian product ``G x H``: NPU ``(g, h)`` is ``g + N_G * h`` (see the module docstring)."""
    name = f"{_operand(left)} x {_operand(right)}"
    _direct(left, name)
    _direct(right, name)
    n_left, n_right = left.num_npus, right.num_npus
    _check_size(name, n_left * n_right, n_right * len(left.links) + n_left * len(right.links), npu_limit, force)
    result = Topology(n_left * n_right, name=name)
    for h in range(n_right):
        for link in left.links:
            result.add_link(link.src + n_left * h, link.dst + n_left * h, link.bandwidth_gbps, link.latency_ns)
    for link in right.links:
        for g in range(n_left):
            result.add_link(g + n_left * link.src, g + n_left * link.dst, link.bandwidth_gbps, link.latency_ns)
    result.uniform = left.uniform and right.uniform  # products of vertex-transitive graphs are vertex-transitive
    _remember(result, Expansion("cartesian", (left, right)))
    return result


def _operand(topology: Topology) -> str:
    """A product's operand name, parenthesized when it is itself a product."""
    return f"({topology.name})" if " x " in topology.name else topology.name


def degree_expand(topology: Topology, copies: int, *, npu_limit: int | None = None, force: bool = False) -> Topology:
    """The degree expansion ``G * n``: ``n`` copies of every NPU, ``u_i -> v_j`` per link ``u -> v`` (see the module docstring)."""
    if int(copies) != copies or copies < 1:
        raise InputError(f"degree({topology.name},{copies}): the number of copies must be a whole number >= 1")
    copies = int(copies)
    name = f"degree({topology.name},{copies})"
    _direct(topology, name)
    _check_size(name, topology.num_npus * copies, len(topology.links) * copies * copies, npu_limit, force)
    result = Topology(topology.num_npus * copies, name=name)
    for link in topology.links:
        for i in range(copies):
            for j in range(copies):
                result.add_link(link.src * copies + i, link.dst * copies + j, link.bandwidth_gbps, link.latency_ns)
    result.uniform = topology.uniform
    _remember(result, Expansion("degree", (topology,), copies))
    return result


__all__ = ["NPU_LIMIT", "Expansion", "cartesian", "degree_expand", "expanded_distances", "line_graph", "origin"]
