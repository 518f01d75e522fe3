"""Topologies and tiny algorithms for the network-model, bounds and replay tests.

Built with :class:`Topology` directly so these tests do not depend on the topology builders.
"""

from __future__ import annotations

import itertools

from hypothesis import strategies as st

from chakra_collectives.ir import AlgorithmBuilder, Buffer, Collective, CollectiveAlgorithm
from chakra_collectives.network.graph import LOCAL, RECV, SEND, TaskGraph
from chakra_collectives.topology import Link, Topology

ONE_BYTE_PER_NS = 1e9 / 2**30
"""A bandwidth (GB/s) of exactly 1 byte/ns: times in tests come out as exact floats."""


def transfer_ns(link: Link, nbytes: float) -> float:
    """The tests' own statement of docs/bounds.md's hop cost: ``latency + bytes / bandwidth``, 1 GB = 2^30 B."""
    return link.latency_ns + nbytes / (link.bandwidth_gbps * 2**30 / 1e9)


def ring_topology(n: int, bandwidth: float = 50.0, latency: float = 500.0, *, bidirectional: bool = True) -> Topology:
    """ASTRA-sim's Ring: links i -> i+1 (and back when bidirectional)."""
    topo = Topology(n, name=f"ring:{n}")
    for i in range(n):
        topo.add_link(i, (i + 1) % n, bandwidth, latency, bidirectional=bidirectional)
    return topo


def fully_connected(n: int, bandwidth: float = 50.0, latency: float = 500.0) -> Topology:
    topo = Topology(n, name=f"fc:{n}")
    for a, b in itertools.permutations(range(n), 2):
        topo.add_link(a, b, bandwidth, latency)
    return topo


def switch_topology(n: int, bandwidth: float = 50.0, latency: float = 500.0) -> Topology:
    topo = Topology(n, name=f"switch:{n}")
    hub = topo.add_switch()
    for i in range(n):
        topo.add_link(i, hub, bandwidth, latency, bidirectional=True)
    return topo


def line_topology(n: int, bandwidth: float = 50.0, latency: float = 500.0) -> Topology:
    topo = Topology(n, name=f"line:{n}")
    for i in range(n - 1):
        topo.add_link(i, i + 1, bandwidth, latency, bidirectional=True)
    return topo


def ring_all_reduce_without_reductions(n: int, size_bytes: int) -> CollectiveAlgorithm:
    """ASTRA-sim's measured "custom ring all-reduce without COMP": 2(N-1) dependent ring steps.

    Each rank sends one share to its right neighbour, then receives one from its left; the next
    send waits for that receive. Claims CUSTOM (no reductions, so it is not a real all-reduce).
    """
    b = AlgorithmBuilder(Collective.CUSTOM, num_ranks=n, chunk_count=n, size_bytes=size_bytes, name="ring-steps")
    previous: dict[int, int] = {}
    for step in range(2 * (n - 1)):
        current = {}
        for r in range(n):
            deps = [previous[r]] if r in previous else []
            tag = b.fresh_tag(r, (r + 1) % n)
            send = b.send(r, (r + 1) % n, tag=tag, src=(Buffer.INPUT, 0), count=1, deps=deps)
            current[r] = send
        for r in range(n):
            left = (r - 1) % n
            recv = b.recv(r, left, tag=step, dst=(Buffer.OUTPUT, 0), count=1, deps=[current[r]])
            current[r] = recv
        previous = current
    return b.build(input_chunks=[n] * n, output_chunks=[n] * n, scratch_chunks=[0] * n)


def random_topology(draw, st, *, max_npus: int = 5, max_switches: int = 2, symmetric: bool = False) -> Topology:
    """A strongly connected random topology (hypothesis ``draw``): a ring backbone plus extras.

    ``symmetric``: every link gets a reverse twin of the same bandwidth.
    """
    n = draw(st.integers(2, max_npus))
    k = draw(st.integers(0, max_switches))
    bandwidths = st.sampled_from([12.5, 25.0, 50.0, 100.0, 300.0])
    latencies = st.sampled_from([0.0, 100.0, 500.0])
    topo = Topology(n, num_switches=k, name="random")
    order = draw(st.permutations(list(range(n))))
    for a, b in zip(order, order[1:] + order[:1]):
        if a != b:
            topo.add_link(a, b, draw(bandwidths), draw(latencies), bidirectional=symmetric)
    extras = draw(st.lists(st.tuples(st.integers(0, n + k - 1), st.integers(0, n + k - 1)), max_size=8))
    for a, b in extras:
        if a != b:
            topo.add_link(a, b, draw(bandwidths), draw(latencies), bidirectional=symmetric or draw(st.booleans()))
    for s in range(n, n + k):  # every switch reachable both ways, so it can carry traffic
        npu = draw(st.integers(0, n - 1))
        topo.add_link(npu, s, draw(bandwidths), draw(latencies), bidirectional=True)
    return topo


@st.composite
def random_graphs(draw, *, units: bool = False, integer_durations: bool = False):
    """A small random task graph on a 2x3 torus: message pairs between random NPUs of a few
    sizes (equal sizes make ties), local tasks of a few durations, dependencies on earlier tasks.
    ``units``: tasks also acquire and release a few execution units at random (waiters queue;
    some graphs deadlock); ``integer_durations``: durations are int64 (ASTRA-sim's integer ns)."""
    pairs = draw(st.integers(1, 12))
    locals_ = draw(st.integers(0, 6))
    kinds, npus, partner, nbytes, duration = [], [], [], [], []
    for _ in range(pairs):
        src, dst = draw(st.integers(0, 5)), draw(st.integers(0, 5))
        size = draw(st.sampled_from([0, 2**10, 2**20]))
        at = len(kinds)
        kinds += [SEND, RECV]
        npus += [src, dst]
        partner += [at + 1, at]
        nbytes += [size, size]
        duration += [0, 0]
    for _ in range(locals_):
        kinds.append(LOCAL)
        npus.append(draw(st.integers(0, 5)))
        partner.append(-1)
        nbytes.append(0)
        duration.append(draw(st.sampled_from([0, 500, 20000])))
    order = draw(st.permutations(range(len(kinds))))  # shuffle so that locals may come first
    position = {old: new for new, old in enumerate(order)}
    dep_ptr, dep_idx = [0], []
    for new, old in enumerate(order):
        deps = draw(st.lists(st.integers(0, new - 1), max_size=2, unique=True)) if new else []
        dep_idx += deps
        dep_ptr.append(len(dep_idx))
    held = {}
    if units:
        count = draw(st.integers(1, 3))
        held["unit"] = draw(st.lists(st.integers(-1, count - 1), min_size=len(kinds), max_size=len(kinds)))
        held["release"] = draw(st.lists(st.integers(-1, count - 1), min_size=len(kinds), max_size=len(kinds)))
    return TaskGraph.build(
        kind=[kinds[o] for o in order], npu=[npus[o] for o in order],
        partner=[position[partner[o]] if partner[o] >= 0 else -1 for o in order],
        nbytes=[nbytes[o] for o in order], duration=[duration[o] if integer_durations else float(duration[o]) for o in order],
        dep_ptr=dep_ptr, dep_idx=dep_idx, **held,
    )
