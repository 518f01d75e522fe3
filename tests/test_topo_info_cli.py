"""``chakra-coll topo-info``: figures, JSON, and one-line errors for bad topologies."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

from chakra_collectives.bounds import lower_bounds
from chakra_collectives.ir import Collective
from chakra_collectives.topology import load_topology


def test_topo_info_prints_the_figures(cli):
    result = cli("topo-info", "hypercube:4", "--size", "16MiB")
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())  # lines wrap at 80 columns, on spaces
    for words in ("hypercube:2x2x2x2: 16 NPUs, 64 links", "4 out, 4 in", "diameter 4 hops", "bisection 400 GB/s (exact)", "all-reduce", "BFB 4 steps", "= 1.000 of the cut bound"):
        assert words in text


def test_topo_info_json_matches_the_bounds(cli):
    result = cli("topo-info", "kautz:2,3", "--json", "--size", "1GiB")
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    topo = load_topology("kautz:2,3")
    assert (info["npus"], info["out_ports"], info["diameter"]) == (12, [2, 2], 3)
    for collective in Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_REDUCE:
        assert info["bounds"][collective.value]["cut_ns"] == pytest.approx(lower_bounds(topo, collective, 2**30).cut_ns)
    # every pair of a Kautz graph has one shortest path: BFB's busiest in-link carries 1, 2 and 4 shards
    assert [Fraction(u) for u in info["bfb"]["step_loads"]] == [1, 2, 4]


def test_topo_info_of_an_expansion_and_a_fat_tree(cli):
    info = json.loads(cli("topo-info", "line(kautz:2,2)", "--json").stdout)
    assert info["expansion"] == {"kind": "line", "of": ["kautz:2,2"], "copies": 1}
    assert info["diameter"] == 3
    tree = json.loads(cli("topo-info", "fattree:128,degree=4,radix=16", "--json", "--no-bfb").stdout)
    # leaf-spine of 16-port switches: 16 leaves (8 hosts down, 8 up) and 8 spines take 128 hosts
    assert tree["fat_tree"] == {"planes": 4, "ports_per_npu": 4, "levels": 2, "switches_per_plane": 24, "radix": 16}
    assert "bfb" not in tree


@pytest.mark.parametrize(
    "spec, message",
    [
        ("circulant:12,strides=1,4", "stride 4 is not coprime with 12"),
        ("totientperms:16,degree=16", "degree 16 is larger than N - 1 = 15"),
        ("line(fully-connected:70)", "would have 4,830 NPUs, above the limit of 4,096 (--force builds it anyway)"),
        ("line(ring:4", "missing ')'"),
    ],
)
def test_topo_info_bad_input(cli, spec, message):
    result = cli("topo-info", spec)
    assert result.exit_code == 2
    assert message in result.stderr and result.stderr.count("\n") == 1
    assert result.stdout == ""
