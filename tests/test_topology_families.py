"""Direct-connect families and expansions: the sizes, degrees and diameters their theory states."""

from __future__ import annotations

import re
from math import ceil, gcd, log

import networkx as nx
import pytest

from chakra_collectives.errors import InputError
from chakra_collectives.topology import load_topology
from chakra_collectives.topology.builders import fully_connected, hypercube, ring, torus2d
from chakra_collectives.topology.expansions import cartesian, line_graph
from chakra_collectives.topology.families import (
    best_circulant_diameter,
    circulant_diameter,
    circulant_diameter_lower_bound,
    fat_tree_switches,
    totient_strides,
)


def digraph(topo) -> nx.DiGraph:
    graph = nx.DiGraph()
    graph.add_nodes_from(range(topo.num_npus))
    graph.add_edges_from((l.src, l.dst) for l in topo.links)
    return graph


def ports(topo) -> tuple[set[int], set[int]]:
    """The out-degrees and in-degrees that occur (links counted, parallel ones too)."""
    n = topo.num_npus
    return {len(topo.out_links[v]) for v in range(n)}, {len(topo.in_links[v]) for v in range(n)}


def diameter(topo) -> int:
    return max(max(d.values()) for _, d in nx.all_pairs_shortest_path_length(digraph(topo)))


# ---------------------------------------------------------------------- circulants and TotientPerms
def test_circulant_rings_are_hamiltonian_and_regular():
    topo = load_topology("circulant:15,strides=1,2,7")
    assert ports(topo) == ({6}, {6})
    assert circulant_diameter(15, [1, 2, 7], bidirectional=True)[0] == diameter(topo)
    for s in (1, 2, 7):  # every stride alone is one ring through all NPUs
        assert nx.is_strongly_connected(nx.DiGraph([(i, (i + s) % 15) for i in range(15)]))


@pytest.mark.parametrize(
    "spec, message",
    [
        ("circulant:12,strides=1,4", "stride 4 is not coprime with 12 (gcd 4)"),
        ("circulant:12,strides=1,11", "strides 1 and 11 give the same links"),
        ("circulant:12,strides=2,4,coprime=false", "share the factor 2 with 12"),
        ("totientperms:8,degree=8", "degree 8 is larger than N - 1 = 7"),
        ("totientperms:8,degree=5,bidirectional=true", "the degree must be even"),
        ("totientperms:10,degree=5", "only 4 strides are coprime with 10"),
    ],
)
def test_bad_strides_and_degrees_are_one_line_errors(spec, message):
    with pytest.raises(InputError, match=re.escape(message)) as caught:
        load_topology(spec)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("n", [16, 24, 32, 48, 64])
@pytest.mark.parametrize("degree", [4, 8])
def test_totientperms_diameter_within_one_of_the_best(n, degree):
    strides = totient_strides(n, degree)
    assert len(set(strides)) == degree and all(gcd(s, n) == 1 for s in strides)
    reached = circulant_diameter(n, strides)[0]
    best = best_circulant_diameter(n, degree)
    if best is None:  # too many sets to enumerate: the abelian Moore bound is below every circulant
        best = circulant_diameter_lower_bound(n, degree)
    assert reached <= best + 1
    topo = load_topology(f"totientperms:{n},degree={degree}")
    assert ports(topo) == ({degree}, {degree}) and diameter(topo) == reached


def test_exhaustive_search_agrees_with_networkx_on_a_small_case():
    best = min(
        diameter(load_topology(f"circulant:13,strides=1,{a},{b},bidirectional=false"))
        for a in range(2, 13)
        for b in range(a + 1, 13)
    )
    assert best_circulant_diameter(13, 3) == best


def test_moore_bound_holds_for_every_three_stride_circulant_on_20():
    bound = circulant_diameter_lower_bound(20, 3)
    for a in (3, 7, 9, 11, 13, 17, 19):
        for b in (3, 7, 9, 11, 13, 17, 19):
            if a < b:
                assert circulant_diameter(20, [1, a, b])[0] >= bound


# ---------------------------------------------------------------------- Kautz, de Bruijn, Hamming
@pytest.mark.parametrize("d, length", [(2, 2), (2, 3), (3, 2), (2, 4), (3, 3)])
def test_kautz_size_degree_diameter(d, length):
    topo = load_topology(f"kautz:{d},{length}")
    assert topo.num_npus == (d + 1) * d ** (length - 1)
    assert ports(topo) == ({d}, {d})
    assert diameter(topo) == length


def test_kautz_is_the_iterated_line_graph_of_the_complete_digraph():
    iterated = fully_connected(3)
    for _ in range(2):
        iterated = line_graph(iterated)
    assert nx.is_isomorphic(digraph(iterated), digraph(load_topology("kautz:2,3")))


@pytest.mark.parametrize("n, d", [(10, 3), (37, 2), (50, 4), (100, 3), (128, 4)])
def test_generalized_kautz_meets_imase_itoh_diameter_bound(n, d):
    topo = load_topology(f"genkautz:{n},degree={d}")
    assert diameter(topo) <= ceil(log(n) / log(d) - 1e-12)
    outs, ins = ports(topo)
    assert outs <= {d - 1, d} and ins <= {d - 1, d}  # a would-be self-loop costs its NPU one port


def test_de_bruijn_and_hamming():
    topo = load_topology("debruijn:3,3")
    assert topo.num_npus == 27 and diameter(topo) == 3
    assert {(l.src, l.dst) for l in load_topology("hamming:3x4").links} == {(l.src, l.dst) for l in hypercube([3, 4]).links}


def test_fat_tree_planes_have_the_npu_ports_of_the_direct_fabric():
    topo = load_topology("fattree:64,degree=4,radix=16")
    assert topo.num_switches == 1  # the four planes as one non-blocking switch at 4 x the port bandwidth
    assert {l.bandwidth_gbps for l in topo.links} == {4 * 50.0}
    # a 16-port two-level plane for 64 hosts: 8 leaves (8 down, 8 up) and 4 spines
    assert fat_tree_switches(64, 16) == 12


# ---------------------------------------------------------------------- expansions
BASES = ["kautz:2,2", "torus2d:3x3", "circulant:7,strides=1,3,bidirectional=false", "hypercube:3", "debruijn:2,3"]


@pytest.mark.parametrize("spec", BASES)
def test_line_graph_properties(spec):
    base = load_topology(spec)
    expanded = line_graph(base)
    assert expanded.num_npus == len(base.links)
    assert ports(expanded)[0] == {len(base.out_links[l.dst]) for l in base.links}
    if min(ports(base)[0]) >= 2 and ports(base)[0] == ports(base)[1]:
        assert diameter(expanded) == diameter(base) + 1


@pytest.mark.parametrize("left, right", [("ring:4", "ring:5"), ("kautz:2,2", "hypercube:2"), ("circulant:7,strides=1,3", "ring:3,bidirectional=false")])
def test_cartesian_product_properties(left, right):
    g, h = load_topology(left), load_topology(right)
    product = load_topology(f"{left} x {right}")
    assert product.num_npus == g.num_npus * h.num_npus
    assert ports(product)[0] == {a + b for a in ports(g)[0] for b in ports(h)[0]} or len(ports(g)[0]) > 1
    assert diameter(product) == diameter(g) + diameter(h)
    assert nx.is_isomorphic(digraph(product), digraph(cartesian(g, h)))


def test_ring_product_is_the_torus():
    assert nx.is_isomorphic(digraph(load_topology("ring:4 x ring:6")), digraph(torus2d(4, 6)))


@pytest.mark.parametrize("spec, copies", [("kautz:2,2", 2), ("torus2d:3x3", 3), ("ring:5,bidirectional=false", 2)])
def test_degree_expansion_properties(spec, copies):
    base = load_topology(spec)
    expanded = load_topology(f"degree({spec},{copies})")
    assert expanded.num_npus == copies * base.num_npus
    assert ports(expanded)[0] == {copies * d for d in ports(base)[0]}
    graph = digraph(base)
    cycle = max(min(1 + nx.shortest_path_length(graph, w, u) for w in graph.successors(u)) for u in graph)
    assert diameter(expanded) == max(diameter(base), cycle)


def test_expansion_limit_and_force():
    with pytest.raises(InputError, match=r"line\(fully-connected:70\) would have 4,830 NPUs, above the limit of 4,096 \(--force"):
        load_topology("line(fully-connected:70)")
    assert load_topology("degree(ring:3,2)", force=True).num_npus == 6
    assert line_graph(fully_connected(70), force=True).num_npus == 4830


@pytest.mark.parametrize(
    "spec, message",
    [
        ("line(ring:4", "missing '\\)'"),
        ("line(ring:4))", "unbalanced"),
        ("twist(ring:4)", "unknown operation"),
        ("degree(ring:4)", "needs a topology and a whole number of copies"),
        ("cartesian(ring:4)", "needs two topologies"),
        ("line(switch:4)", "has switches"),
        ("ring:4 x ", "malformed topology shape"),
        ("line()", "an operand is empty"),
    ],
)
def test_bad_expressions_are_one_line_errors(spec, message):
    with pytest.raises(InputError, match=message) as caught:
        load_topology(spec)
    assert "\n" not in str(caught.value)


def test_spec_lists_and_extra_dimensions():
    assert load_topology("kautz:2,3").num_npus == load_topology("kautz:2x3").num_npus == 12
    assert load_topology("circulant:16,strides=1,5,7").name == "circulant:16,strides=1,5,7"
    assert ring(3).name == load_topology("(ring:3)").name
