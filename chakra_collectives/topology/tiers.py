"""Bandwidth tiers: the NPUs a topology's faster links join into islands (servers, boxes).

Keeping only the links faster than some bandwidth ``b`` splits a hierarchical fabric into its
islands: on ``dgx:4x8`` the NVLink links (50 GB/s) without the NICs (25 GB/s) join each server's
8 GPUs, and the cluster switch is left alone. :func:`bandwidth_tiers` gives, for every such
``b``, the islands that hold NPUs as a labelling of the nodes (``-1``: a node in an island
without NPUs, such as the switch), coarsest first. The All-Reduce bound over a partition
(:mod:`chakra_collectives.bounds`) and the owner shares of a group's All-Reduce
(:mod:`chakra_collectives.synth.shares`) take them as the fabric's natural partitions of the
NPUs.

>>> from chakra_collectives.topology import load_topology
>>> [labels[:33].tolist()[::4] for labels in bandwidth_tiers(load_topology("dgx:4x8"))]
[[0, 0, 1, 1, 2, 2, 3, 3, -1]]
>>> bandwidth_tiers(load_topology("mesh2d:4x4"))   # one bandwidth: no islands but single NPUs
[]
"""

from __future__ import annotations

import numpy as np

from chakra_collectives.topology.core import Topology


def bandwidth_tiers(topology: Topology) -> list[np.ndarray]:
    """For each bandwidth ``b`` of the topology's links but the fastest, the connected components
    of the links faster than ``b`` (directions ignored) that hold an NPU, as labels ``0 .. k-1``
    per node (``-1`` for the nodes of components without NPUs); only the labellings with at least
    two islands, each once, in order of ``b`` (coarsest first).

    >>> from chakra_collectives.topology import Topology
    >>> two = Topology(4)                          # two pairs joined by fast links, slow between
    >>> for u, v, gbps in ((0, 1, 100.0), (2, 3, 100.0), (1, 2, 10.0)):
    ...     two.add_link(u, v, gbps, 10.0, bidirectional=True)
    >>> [labels.tolist() for labels in bandwidth_tiers(two)]
    [[0, 0, 1, 1]]
    """
    arrays = topology.link_arrays
    src, dst = arrays["src"].astype(np.int64), arrays["dst"].astype(np.int64)
    gbps = arrays["bandwidth_gbps"].astype(np.float64)
    n, nodes = topology.num_npus, topology.num_nodes
    ordered = np.sort(gbps)
    thresholds = ordered[np.flatnonzero(ordered[1:] != ordered[:-1])]  # every distinct bandwidth but the largest (np.unique would import numpy.ma)
    if not len(thresholds):  # links of one bandwidth: no islands (and no scipy to import)
        return []
    from scipy.sparse import csr_matrix  # imported when used (start-up time)
    from scipy.sparse.csgraph import connected_components

    tiers: list[np.ndarray] = []
    for threshold in thresholds:
        fast = gbps > threshold
        graph = csr_matrix((np.ones(int(fast.sum())), (src[fast], dst[fast])), shape=(nodes, nodes))
        _, component = connected_components(graph, directed=True, connection="weak")
        held = np.unique(component[:n])
        if len(held) < 2:
            continue
        label = np.full(int(component.max()) + 1, -1, dtype=np.int64)
        label[held] = np.arange(len(held))
        labels = label[component]
        if not any(np.array_equal(labels, seen) for seen in tiers):
            tiers.append(labels)
    return tiers


def island_bandwidths(topology: Topology, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The bandwidth (GB/s) of the links into and out of each island of ``labels`` (one of
    :func:`bandwidth_tiers`) from nodes outside it.

    >>> from chakra_collectives.topology import load_topology
    >>> dgx = load_topology("dgx:4x8")
    >>> [side.tolist() for side in island_bandwidths(dgx, bandwidth_tiers(dgx)[0])]   # 8 NICs of 25 GB/s
    [[200.0, 200.0, 200.0, 200.0], [200.0, 200.0, 200.0, 200.0]]
    """
    arrays = topology.link_arrays
    src, dst = arrays["src"].astype(np.int64), arrays["dst"].astype(np.int64)
    gbps = arrays["bandwidth_gbps"].astype(np.float64)
    k = int(labels.max()) + 1
    crossing = labels[src] != labels[dst]
    entering, leaving = crossing & (labels[dst] >= 0), crossing & (labels[src] >= 0)
    return (np.bincount(labels[dst][entering], weights=gbps[entering], minlength=k),
            np.bincount(labels[src][leaving], weights=gbps[leaving], minlength=k))


__all__ = ["bandwidth_tiers", "island_bandwidths"]
