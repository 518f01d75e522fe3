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

import numpy as np

from chakra_collectives.errors import InputError
from chakra_collectives.limits import check_links, check_npus
from chakra_collectives.topology.core import Topology
from chakra_collectives.topology.symmetry import NpuSymmetry

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
    topo.symmetry = _grid_symmetry(dims, wrap=wrap)
    return topo


def _grid_symmetry(dims: Sequence[int], *, wrap: bool) -> NpuSymmetry | None:
    """A torus's unit translations along each axis; a mesh's flips of its even-length axes
    (flipping an odd-length axis would fix its middle layer)."""
    n = prod(dims)
    coords = np.indices(tuple(reversed(dims))).reshape(len(dims), -1)[::-1]  # coords[axis][npu]
    strides = [prod(dims[:i]) for i in range(len(dims))]
    moves = []
    for axis, size in enumerate(dims):
        if size < 2 or (not wrap and size % 2):
            continue
        moved = coords.copy()
        moved[axis] = (coords[axis] + 1) % size if wrap else size - 1 - coords[axis]
        moves.append(sum(moved[a] * strides[a] for a in range(len(dims))))
    return NpuSymmetry.from_generators(n, moves) if moves else None


def _rotation(n: int, extra: int = 0) -> NpuSymmetry:
    """NPU ``i`` to ``i+1`` (mod ``n``); ``extra`` switch nodes stay where they are."""
    return NpuSymmetry.from_generators(n, [[(i + 1) % n for i in range(n)] + list(range(n, n + extra))])


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
    topo.symmetry = _rotation(n)
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
    topo.symmetry = _rotation(n)
    return topo


def switch(n: int, *, bandwidth_gbps: float = BANDWIDTH_GBPS, latency_ns: float = LATENCY_NS) -> Topology:
    """``n`` NPUs on one switch (a real node, id ``n``): NPU -> switch -> NPU is two hops."""
    _positive_dims("switch", [n])
    topo = Topology(n, name=f"switch:{n}")
    hub = topo.add_switch()
    for i in range(n):
        topo.add_link(i, hub, bandwidth_gbps, latency_ns, bidirectional=True)
    topo.uniform = True
    topo.symmetry = _rotation(n, extra=1)
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
    topo.symmetry = _grid_symmetry(dims, wrap=True)  # cyclic shifts map each fully connected axis to itself
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
    hub_fixed = list(range(topo.num_npus, topo.num_nodes))
    next_server = [((i // gpus + 1) % islands) * gpus + i % gpus for i in range(topo.num_npus)]
    next_gpu = [(i // gpus) * gpus + (i % gpus + 1) % gpus for i in range(topo.num_npus)]
    topo.symmetry = NpuSymmetry.from_generators(topo.num_npus, [next_server + hub_fixed, next_gpu + hub_fixed])
    return topo


A100_GPUS = 8
MI250_GPUS = 16
MI250_XGMI_LINKS = (
    (0, 4, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0),
    (4, 0, 0, 0, 0, 1, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0),
    (0, 0, 0, 4, 0, 0, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0),
    (0, 0, 4, 0, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0),
    (2, 0, 0, 0, 0, 4, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0),
    (0, 1, 0, 0, 4, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
    (0, 0, 1, 0, 1, 1, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0),
    (0, 0, 0, 2, 0, 1, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0),
    (1, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 2, 0, 0, 0),
    (0, 1, 1, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 1, 0, 0),
    (0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 1, 0),
    (0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 2),
    (0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 4, 1, 0),
    (0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 4, 0, 1, 1),
    (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 1, 0, 4),
    (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 1, 4, 0),
)
"""xGMI links between the 16 GPUs of an MI250 box: entry ``[a][b]`` is how many links join
GPU ``a`` and GPU ``b`` (ForestColl's ``topologies.py``; symmetric, 7 links per GPU)."""


def a100(
    boxes: int,
    *,
    nvlink_bandwidth_gbps: float = 300.0,
    nvlink_latency_ns: float = 250.0,
    nic_bandwidth_gbps: float = 25.0,
    nic_latency_ns: float = 500.0,
) -> Topology:
    """ForestColl's NVIDIA DGX A100 platform: ``boxes`` boxes of 8 GPUs.

    In a box every GPU has a 300 GB/s link to and from the box's NVSwitch; with more than one
    box every GPU also has its own NIC (a switch node) joined by 25 GB/s links, and the NICs of
    even GPUs meet on one InfiniBand switch, those of odd GPUs on another (the "two IB
    switches for even/odd NICs" of ForestColl's ``topologies.py``). GPU ``g`` of box ``b`` is
    NPU ``8*b + g``; then come the NVSwitches (one per box), the NICs (box by box) and the
    two IB switches. Latencies are ours (ForestColl's model has none): 250 ns per NVLink hop,
    500 ns per NIC or IB hop.

    >>> a100(2).describe()
    'a100:2: 16 NPUs, 20 switches, 96 links'
    """
    _positive_dims("a100", [boxes])
    g = A100_GPUS
    n = boxes * g
    topo = Topology(n, name=f"a100:{boxes}")
    nvswitch = [topo.add_switch() for _ in range(boxes)]
    for box in range(boxes):
        for gpu in range(g):
            topo.add_link(box * g + gpu, nvswitch[box], nvlink_bandwidth_gbps, nvlink_latency_ns, bidirectional=True)
    if boxes > 1:
        nic = [topo.add_switch() for _ in range(n)]
        infiniband = [topo.add_switch(), topo.add_switch()]
        for npu in range(n):
            topo.add_link(npu, nic[npu], nic_bandwidth_gbps, nic_latency_ns, bidirectional=True)
        for npu in range(n):
            topo.add_link(nic[npu], infiniband[npu % 2], nic_bandwidth_gbps, nic_latency_ns, bidirectional=True)
    next_box = [(i + g) % n for i in range(n)] + [n + (b + 1) % boxes for b in range(boxes)]
    next_gpu = [(i // g) * g + (i + 1) % g for i in range(n)] + [n + b for b in range(boxes)]
    if boxes > 1:
        nic_base = n + boxes
        next_box += [nic_base + (i + g) % n for i in range(n)] + [nic_base + n, nic_base + n + 1]
        next_gpu += [nic_base + (i // g) * g + (i + 1) % g for i in range(n)] + [nic_base + n + 1, nic_base + n]
    topo.uniform = True
    topo.symmetry = NpuSymmetry.from_generators(n, [next_box, next_gpu])
    return topo


def mi250(
    boxes: int,
    *,
    xgmi_bandwidth_gbps: float = 50.0,
    xgmi_latency_ns: float = 250.0,
    ib_bandwidth_gbps: float = 16.0,
    ib_latency_ns: float = 1000.0,
) -> Topology:
    """ForestColl's AMD MI250 platform: ``boxes`` boxes of 16 GPUs.

    Inside a box, GPUs ``a`` and ``b`` are joined both ways by ``MI250_XGMI_LINKS[a][b]`` xGMI
    links, modeled as one link of that many times 50 GB/s; with more than one box every GPU
    also has a 16 GB/s InfiniBand port to and from one switch (ForestColl's
    ``topologies.py``). GPU ``g`` of box ``b`` is NPU ``16*b + g``; the switch comes last.
    Latencies are ours: 250 ns per xGMI hop, 1 us per IB hop.

    >>> mi250(2).describe()
    'mi250:2: 32 NPUs, 1 switches, 176 links'
    """
    _positive_dims("mi250", [boxes])
    g = MI250_GPUS
    n = boxes * g
    topo = Topology(n, name=f"mi250:{boxes}")
    for box in range(boxes):
        for a in range(g):
            for b in range(g):
                if MI250_XGMI_LINKS[a][b]:
                    topo.add_link(box * g + a, box * g + b, MI250_XGMI_LINKS[a][b] * xgmi_bandwidth_gbps, xgmi_latency_ns)
    if boxes > 1:
        hub = topo.add_switch()
        for npu in range(n):
            topo.add_link(npu, hub, ib_bandwidth_gbps, ib_latency_ns, bidirectional=True)
    fixed = list(range(n, topo.num_nodes))
    # the box's own symmetries (ForestColl's link matrix has exactly these two, and their product)
    half_turn = [(i // g) * g + (i % g + 8) % g for i in range(n)] + fixed
    mirror = [(i // g) * g + (i % g) ^ 3 for i in range(n)] + fixed
    next_box = [(i + g) % n for i in range(n)] + fixed
    topo.symmetry = NpuSymmetry.from_generators(n, [next_box, half_turn, mirror])
    return topo


__all__ = [
    "A100_GPUS",
    "BANDWIDTH_GBPS",
    "LATENCY_NS",
    "MI250_GPUS",
    "MI250_XGMI_LINKS",
    "a100",
    "dgx",
    "fully_connected",
    "hetero_mesh2d",
    "hypercube",
    "mesh2d",
    "mi250",
    "mesh3d",
    "ring",
    "switch",
    "torus2d",
    "torus3d",
]
