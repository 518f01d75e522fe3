"""Builders of common topologies: rings, meshes, tori, hypercubes, switches, DGX-like clusters.

Every builder returns a :class:`~chakra_collectives.topology.core.Topology` whose NPUs are
numbered with the first coordinate fastest (``npu = x + X*(y + Y*z)``); links are added in a
fixed order, so routes (and therefore synthesized algorithms) are reproducible. Defaults follow
ASTRA-sim's and TACOS's examples: 50 GB/s (1 GB = 2^30 bytes) and 500 ns per link; every
bandwidth and latency is a keyword argument.

>>> torus2d(4, 4).describe()
'torus2d:4x4: 16 NPUs, 64 links'
>>> switch(8).describe()
'switch:8: 8 NPUs, 1 switches, 16 links'
>>> t = hetero_mesh2d(2, 2, x_bandwidth_gbps=100, y_bandwidth_gbps=25)
>>> sorted({l.bandwidth_gbps for l in t.links})
[25.0, 100.0]
"""

from __future__ import annotations

import itertools
from math import prod
from typing import Sequence

from chakra_collectives.errors import InputError
from chakra_collectives.limits import check_links, check_npus
from chakra_collectives.topology.core import Topology

BANDWIDTH_GBPS = 50.0
"""Default link bandwidth (ASTRA-sim's example networks, TACOS's example)."""
LATENCY_NS = 500.0
"""Default link latency."""


def _positive_dims(kind: str, dims: Sequence[int]) -> None:
    """Every dimension a positive whole number, and their product within the NPU limit
    (checked before anything is built)."""
    for d in dims:
        if int(d) != d or d < 1:
            raise InputError(f"{kind}: every dimension must be a positive integer, got {'x'.join(map(str, dims))}")
    check_npus(prod(int(d) for d in dims), _grid_name(kind, dims))


def _grid_name(kind: str, dims: Sequence[int]) -> str:
    return f"{kind}:{'x'.join(str(d) for d in dims)}"


def _grid(
    kind: str,
    dims: Sequence[int],
    *,
    wrap: bool,
    bandwidths: Sequence[float],
    latencies: Sequence[float],
) -> Topology:
    """Mesh (``wrap=False``) or torus (``wrap=True``) with per-dimension bandwidth/latency."""
    _positive_dims(kind, dims)
    topo = Topology(prod(dims), name=_grid_name(kind, dims))
    strides = [prod(dims[:i]) for i in range(len(dims))]
    for axis, (size, stride) in enumerate(zip(dims, strides)):
        bw, lat = bandwidths[axis], latencies[axis]
        for coords in itertools.product(*(range(d) for d in reversed(dims))):
            coords = coords[::-1]
            here = sum(c * s for c, s in zip(coords, strides))
            position = coords[axis]
            if position + 1 < size:
                topo.add_link(here, here + stride, bw, lat, bidirectional=True)
            elif wrap and size > 2:  # size 2: the wrap-around would duplicate the existing pair
                topo.add_link(here, here - (size - 1) * stride, bw, lat, bidirectional=True)
    topo.uniform = wrap  # a torus: translations map any NPU to any other
    return topo


def ring(
    n: int,
    *,
    bidirectional: bool = True,
    bandwidth_gbps: float = BANDWIDTH_GBPS,
    latency_ns: float = LATENCY_NS,
) -> Topology:
    """``n`` NPUs in a ring, ``i -> i+1`` (and back when ``bidirectional``).

    >>> ring(4, bidirectional=False).describe()
    'ring:4,bidirectional=false: 4 NPUs, 4 links'
    """
    _positive_dims("ring", [n])
    if n < 2:
        raise InputError("ring: needs at least 2 NPUs")
    name = f"ring:{n}" + ("" if bidirectional else ",bidirectional=false")
    topo = Topology(n, name=name)
    if n == 2:
        topo.add_link(0, 1, bandwidth_gbps, latency_ns, bidirectional=True)
    else:
        for i in range(n):
            topo.add_link(i, (i + 1) % n, bandwidth_gbps, latency_ns, bidirectional=False)
        if bidirectional:
            for i in range(n):
                topo.add_link((i + 1) % n, i, bandwidth_gbps, latency_ns, bidirectional=False)
    topo.uniform = True
    return topo


def fully_connected(n: int, *, bandwidth_gbps: float = BANDWIDTH_GBPS, latency_ns: float = LATENCY_NS) -> Topology:
    """A direct link between every ordered pair of ``n`` NPUs.

    >>> fully_connected(4).describe()
    'fully-connected:4: 4 NPUs, 12 links'
    """
    _positive_dims("fully-connected", [n])
    check_links(n * (n - 1), f"fully-connected:{n}")
    topo = Topology(n, name=f"fully-connected:{n}")
    for i in range(n):
        for j in range(n):
            if i != j:
                topo.add_link(i, j, bandwidth_gbps, latency_ns)
    topo.uniform = True
    return topo


def switch(n: int, *, bandwidth_gbps: float = BANDWIDTH_GBPS, latency_ns: float = LATENCY_NS) -> Topology:
    """``n`` NPUs on one switch (a real node, id ``n``): NPU -> switch -> NPU is two hops."""
    _positive_dims("switch", [n])
    topo = Topology(n, name=f"switch:{n}")
    hub = topo.add_switch()
    for i in range(n):
        topo.add_link(i, hub, bandwidth_gbps, latency_ns, bidirectional=True)
    topo.uniform = True
    return topo


def mesh2d(x: int, y: int, *, bandwidth_gbps: float = BANDWIDTH_GBPS, latency_ns: float = LATENCY_NS) -> Topology:
    """``x`` by ``y`` 2D mesh (no wrap-around)."""
    return _grid("mesh2d", [x, y], wrap=False, bandwidths=[bandwidth_gbps] * 2, latencies=[latency_ns] * 2)


def mesh3d(x: int, y: int, z: int, *, bandwidth_gbps: float = BANDWIDTH_GBPS, latency_ns: float = LATENCY_NS) -> Topology:
    """``x`` by ``y`` by ``z`` 3D mesh (TACOS calls this shape ``Hypercube3D``)."""
    return _grid("mesh3d", [x, y, z], wrap=False, bandwidths=[bandwidth_gbps] * 3, latencies=[latency_ns] * 3)


def torus2d(x: int, y: int, *, bandwidth_gbps: float = BANDWIDTH_GBPS, latency_ns: float = LATENCY_NS) -> Topology:
    """``x`` by ``y`` 2D torus (bidirectional wrap-around links)."""
    return _grid("torus2d", [x, y], wrap=True, bandwidths=[bandwidth_gbps] * 2, latencies=[latency_ns] * 2)


def torus3d(x: int, y: int, z: int, *, bandwidth_gbps: float = BANDWIDTH_GBPS, latency_ns: float = LATENCY_NS) -> Topology:
    """``x`` by ``y`` by ``z`` 3D torus."""
    return _grid("torus3d", [x, y, z], wrap=True, bandwidths=[bandwidth_gbps] * 3, latencies=[latency_ns] * 3)


def hetero_mesh2d(
    x: int,
    y: int,
    *,
    x_bandwidth_gbps: float = 100.0,
    y_bandwidth_gbps: float = 50.0,
    x_latency_ns: float = LATENCY_NS,
    y_latency_ns: float = LATENCY_NS,
) -> Topology:
    """2D mesh whose x links and y links differ (TACOS's ``Mesh2D_Hetero``)."""
    topo = _grid("hetero-mesh2d", [x, y], wrap=False, bandwidths=[x_bandwidth_gbps, y_bandwidth_gbps], latencies=[x_latency_ns, y_latency_ns])
    return topo


def hypercube(
    dims: Sequence[int],
    *,
    bandwidth_gbps: float = BANDWIDTH_GBPS,
    latency_ns: float = LATENCY_NS,
) -> Topology:
    """Generalized hypercube (HyperX): NPUs whose coordinates differ in exactly one place are linked.

    Each dimension is fully connected; ``[2, 2, ..., 2]`` is the binary hypercube.

    >>> hypercube([2, 2, 2]).describe()
    'hypercube:2x2x2: 8 NPUs, 24 links'
    >>> hypercube([4, 4, 4]).describe()
    'hypercube:4x4x4: 64 NPUs, 576 links'
    """
    dims = list(dims)
    _positive_dims("hypercube", dims)
    check_links(prod(dims) * sum(d - 1 for d in dims), _grid_name("hypercube", dims))
    topo = Topology(prod(dims), name=_grid_name("hypercube", dims))
    strides = [prod(dims[:i]) for i in range(len(dims))]
    for axis, (size, stride) in enumerate(zip(dims, strides)):
        for here in range(topo.num_npus):
            position = (here // stride) % size
            for other in range(size):
                if other != position:
                    topo.add_link(here, here + (other - position) * stride, bandwidth_gbps, latency_ns)
    topo.uniform = True
    return topo


def dgx(
    islands: int,
    gpus: int,
    *,
    nvlink_bandwidth_gbps: float = 50.0,
    nvlink_latency_ns: float = 250.0,
    nic_bandwidth_gbps: float = 25.0,
    nic_latency_ns: float = 1000.0,
) -> Topology:
    """DGX-like cluster: ``islands`` servers of ``gpus`` GPUs each.

    Inside a server the GPUs are fully connected by NVLink (one link per ordered pair); every
    GPU also has its own NIC, a link to and from one cluster switch (node ``islands*gpus``).
    GPU ``g`` of server ``i`` is NPU ``i*gpus + g``.

    >>> dgx(2, 4).describe()
    'dgx:2x4: 8 NPUs, 1 switches, 40 links'
    """
    _positive_dims("dgx", [islands, gpus])
    check_links(islands * gpus * (gpus - 1) + (2 * islands * gpus if islands > 1 else 0), f"dgx:{islands}x{gpus}")
    topo = Topology(islands * gpus, name=f"dgx:{islands}x{gpus}")
    for island in range(islands):
        base = island * gpus
        for a in range(gpus):
            for b in range(gpus):
                if a != b:
                    topo.add_link(base + a, base + b, nvlink_bandwidth_gbps, nvlink_latency_ns)
    if islands > 1:
        hub = topo.add_switch()
        for npu in range(topo.num_npus):
            topo.add_link(npu, hub, nic_bandwidth_gbps, nic_latency_ns, bidirectional=True)
    topo.uniform = True
    return topo


__all__ = [
    "BANDWIDTH_GBPS",
    "LATENCY_NS",
    "dgx",
    "fully_connected",
    "hetero_mesh2d",
    "hypercube",
    "mesh2d",
    "mesh3d",
    "ring",
    "switch",
    "torus2d",
    "torus3d",
]
