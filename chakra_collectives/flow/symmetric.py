"""The multicommodity-flow LP of a symmetric demand, solved for one commodity per class.

:func:`~chakra_collectives.flow.multicommodity.commodity_flows` has a variable per commodity
and link: 64 sources on a 256-link torus2d:8x8 are 16,384 variables and about 25 CPU seconds of
HiGHS. When a group ``H`` of the fabric's symmetries (:attr:`~chakra_collectives.topology.Topology.symmetry`)
maps the sources onto sources and every commodity's needs onto its image's -- the concurrent
groups of an all-to-all on a torus, carried onto one another by translations -- averaging an
optimal flow over ``H`` gives an optimal flow that ``H`` carries onto itself: commodity ``h(s)``
sends over link ``h(e)`` what ``s`` sends over ``e``. So one commodity per class of sources
suffices, each link's load the sum of its class's images: an LP ``|H|`` times smaller with the
same optimum (torus2d:8x8's rows: 257 variables).

>>> from chakra_collectives.topology import torus2d
>>> fabric = torus2d(4, 4)
>>> rows = [tuple(range(4 * r, 4 * r + 4)) for r in range(4)]
>>> sources = np.arange(16)
>>> need = np.zeros((16, fabric.num_nodes))
>>> for row in rows:
...     for s in row:
...         need[s, [t for t in row if t != s]] = 1.0
>>> from chakra_collectives.flow.multicommodity import commodity_flows
>>> full_t, _ = commodity_flows(fabric, sources, need, 1.0)
>>> t, flows = symmetric_commodity_flows(fabric, sources, need, 1.0)
>>> round(t, 6) == round(full_t, 6), flows.shape
(True, (16, 64))
"""

from __future__ import annotations

import numpy as np

from chakra_collectives.flow.multicommodity import least_time_flows
from chakra_collectives.topology import Topology
from chakra_collectives.units import bytes_per_ns


def demand_symmetries(topology: Topology, sources: np.ndarray, need: np.ndarray) -> np.ndarray | None:
    """The elements of ``topology.symmetry`` (rows: node permutations) that map every source onto
    a source whose needs are the image of its own; ``None`` when only the identity does (or the
    fabric knows no symmetry). They form a group: the stabilizer of the demand."""
    symmetry = topology.symmetry
    if symmetry is None:
        return None
    elements = symmetry.elements
    index = np.full(topology.num_nodes, -1, dtype=np.int64)
    index[sources] = np.arange(len(sources))
    keep = []
    for row, perm in enumerate(elements):
        image = index[perm[sources]]
        if np.any(image < 0):
            continue
        moved = np.empty_like(need)
        moved[:, perm] = need  # the needs of s, carried: node perm[v] needs what v did
        if np.array_equal(moved, need[image]):
            keep.append(row)
    return elements[keep] if len(keep) > 1 else None


def link_permutations(topology: Topology, elements: np.ndarray) -> np.ndarray:
    """Each node permutation of ``elements`` as a link permutation (row ``h``: link ``e`` goes to
    ``perm[h, e]``; parallel links of one pair in order)."""
    arrays = topology.link_arrays
    src, dst, bandwidth = arrays["src"], arrays["dst"], arrays["bandwidth_gbps"]
    by_pair: dict[tuple[int, int, float], list[int]] = {}
    for link, key in enumerate(zip(src.tolist(), dst.tolist(), bandwidth.tolist())):
        by_pair.setdefault(key, []).append(link)
    found = np.empty((len(elements), len(src)), dtype=np.int64)
    for h, perm in enumerate(elements):
        for (u, v, bw), links in by_pair.items():
            found[h, links] = by_pair[(int(perm[u]), int(perm[v]), bw)]
    return found


def symmetric_commodity_flows(
    topology: Topology, sources: np.ndarray, need: np.ndarray, chunk_bytes: float, *, fewest_hops: bool = False
) -> tuple[float, np.ndarray] | None:
    """:func:`~chakra_collectives.flow.multicommodity.commodity_flows` for a demand the fabric's
    symmetries carry onto itself (see the module docstring): the same optimum, and flows
    (``(commodities, links)``) that the symmetries carry onto one another; ``None`` when no
    symmetry but the identity keeps the demand, or some node cannot be reached."""
    from scipy.sparse import coo_matrix

    sources = np.asarray(sources, dtype=np.int64)
    elements = demand_symmetries(topology, sources, need)
    if elements is None:
        return None
    link_perm = link_permutations(topology, elements)
    index = np.full(topology.num_nodes, -1, dtype=np.int64)
    index[sources] = np.arange(len(sources))
    # one representative per class of sources; commodity index[perm[r]] is h(r)
    representative = np.full(len(sources), -1, dtype=np.int64)
    element_of = np.zeros(len(sources), dtype=np.int64)
    reps: list[int] = []
    for i in range(len(sources)):
        if representative[i] >= 0:
            continue
        images = index[elements[:, sources[i]]]
        representative[images] = len(reps)
        element_of[images] = np.arange(len(elements))
        reps.append(i)
    arrays = topology.link_arrays
    src, dst = arrays["src"], arrays["dst"]
    num_links, nodes, k = len(src), topology.num_nodes, len(reps)
    commodity = np.repeat(np.arange(k), num_links)
    link = np.tile(np.arange(num_links), k)
    column = commodity * num_links + link
    rows = np.concatenate([commodity * nodes + dst[link], commodity * nodes + src[link]])
    values = np.concatenate([np.ones(len(column)), -np.ones(len(column))])
    equality = coo_matrix((values, (rows, np.concatenate([column, column]))), shape=(k * nodes, k * num_links + 1)).tocsr()
    keep = np.ones(k * nodes, dtype=bool)
    keep[np.arange(k) * nodes + sources[reps]] = False
    a_eq, b_eq = equality[keep], need[reps].reshape(-1)[keep]
    # a link's load: what every representative sends over each link the symmetries carry onto it
    rate = bytes_per_ns(arrays["bandwidth_gbps"].astype(np.float64)) / chunk_bytes
    carried_to = link_perm[:, link]  # (elements, k * links): where each variable's copies land
    capacity = coo_matrix(
        (np.ones(carried_to.size), (carried_to.reshape(-1), np.tile(column, len(elements)))), shape=(num_links, k * num_links + 1)
    )
    time_column = coo_matrix((-rate, (np.arange(num_links), np.full(num_links, k * num_links))), shape=(num_links, k * num_links + 1))
    solved = least_time_flows((capacity + time_column).tocsr(), np.zeros(num_links), a_eq, b_eq, fewest_hops=fewest_hops)
    if solved is None:
        return None
    best, per_rep = solved[0], solved[1].reshape(k, num_links)
    flows = np.zeros((len(sources), num_links))
    for i in range(len(sources)):
        flows[i, link_perm[element_of[i]]] = per_rep[representative[i]]
    return best, flows


__all__ = ["demand_symmetries", "link_permutations", "symmetric_commodity_flows"]
