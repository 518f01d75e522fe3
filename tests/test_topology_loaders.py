"""Topology builders, specs and files: shapes, link counts, and one-line errors with lines."""

from __future__ import annotations

import json
from pathlib import Path

import networkx as nx
import pytest

from chakra_collectives.errors import InputError
from chakra_collectives.topology import BUILDERS, load_topology
from chakra_collectives.topology.schema import schema_json

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "spec, npus, switches, links",
    [
        ("ring:8", 8, 0, 16),
        ("ring:8,bidirectional=false", 8, 0, 8),
        ("fully-connected:5", 5, 0, 20),
        ("switch:64", 64, 1, 128),
        ("mesh2d:4x3", 12, 0, 2 * (3 * 3 + 4 * 2)),
        ("torus2d:8x8", 64, 0, 4 * 64),
        ("torus3d:4x4x4", 64, 0, 6 * 64),
        ("hypercube:6", 64, 0, 6 * 64),
        ("hypercube:4x4x4", 64, 0, 9 * 64),
        ("hetero-mesh2d:8x8", 64, 0, 2 * 2 * 8 * 7),
        ("dgx:4x8", 32, 1, 4 * 8 * 7 + 2 * 32),
    ],
)
def test_builder_shapes(spec, npus, switches, links):
    topo = load_topology(spec)
    assert (topo.num_npus, topo.num_switches, len(topo.links)) == (npus, switches, links)
    graph = nx.DiGraph([(l.src, l.dst) for l in topo.links])
    assert nx.is_strongly_connected(graph)


def test_spec_options_and_overrides_reach_every_link():
    topo = load_topology("torus2d:4x4,bw=100,lat=250")
    assert {(l.bandwidth_gbps, l.latency_ns) for l in topo.links} == {(100.0, 250.0)}
    hetero = load_topology("hetero-mesh2d:4x4", x_bandwidth_gbps=200, y_bw=10)
    assert {l.bandwidth_gbps for l in hetero.links} == {200.0, 10.0}
    dgx = load_topology("dgx:2x4,nic_bw=12.5")
    assert sorted({l.bandwidth_gbps for l in dgx.links if l.dst >= 8 or l.src >= 8}) == [12.5]


@pytest.mark.parametrize(
    "spec, plain",
    [
        ("mesh2d:8x8,bw=50,lat=500ns", "mesh2d:8x8,bw=50,lat=500"),
        ("mesh2d:4x4,bw=50GB/s,lat=0.5us", "mesh2d:4x4,bw=50,lat=500"),
        ("torus2d:4x4,bandwidth_gbps=400Gbps,latency_ns=1us", "torus2d:4x4,bw=50,lat=1000"),  # 400 Gbit/s = 50 GB/s
        ("dgx:2x4,nic_bw=100Gbps,nic_lat=2us", "dgx:2x4,nic_bw=12.5,nic_lat=2000"),
        ("ring:4,bw=512MB/s x ring:2", "ring:4,bw=0.5 x ring:2"),
    ],
)
def test_spec_bandwidth_and_latency_take_the_cli_units(spec, plain):
    assert [(l.src, l.dst, l.bandwidth_gbps, l.latency_ns) for l in load_topology(spec).links] == [
        (l.src, l.dst, l.bandwidth_gbps, l.latency_ns) for l in load_topology(plain).links
    ]


def test_files_take_the_cli_units(tmp_path):
    (tmp_path / "t.yaml").write_text(
        "npus: 2\ndefaults: {bandwidth_gbps: 200Gbps, latency_ns: 1us}\nlinks:\n"
        "  - {src: 0, dst: 1}\n  - {src: 1, dst: 0, bandwidth_gbps: 10GB/s, latency_ns: 250ns}\n"
    )
    assert [(l.bandwidth_gbps, l.latency_ns) for l in load_topology(str(tmp_path / "t.yaml")).links] == [(25.0, 1000.0), (10.0, 250.0)]
    (tmp_path / "t.edges").write_text("0 1 400Gbps 1.5us\n1 -> 0 20GB/s\n")
    assert [(l.bandwidth_gbps, l.latency_ns) for l in load_topology(str(tmp_path / "t.edges")).links] == [(50.0, 1500.0), (50.0, 1500.0), (20.0, 500.0)]
    graph = nx.Graph()
    graph.add_edge(0, 1, bandwidth_gbps="100Gbps", latency_ns="2us")
    nx.write_graphml(graph, tmp_path / "t.graphml")
    assert {(l.bandwidth_gbps, l.latency_ns) for l in load_topology(str(tmp_path / "t.graphml")).links} == {(12.5, 2000.0)}


@pytest.mark.parametrize(
    "spec, message",
    [
        ("mesh2d:4x4,lat=500furlongs", "option lat='500furlongs': malformed duration '500furlongs': unknown unit 'furlongs'"),
        ("mesh2d:4x4,bw=50GB/h", "option bw='50GB/h': malformed bandwidth '50GB/h': unknown unit"),
        ("donut:4", "unknown topology 'donut' (valid: " + ", ".join(sorted(BUILDERS))),
        ("torus3d:4x4", "takes 3 dimension(s)"),
        ("mesh2d:4xq", "malformed topology shape"),
        ("ring:8,color=red", "has no option 'color'"),
        ("ring:8,bw=0", "bandwidth 0.0 GB/s; it must be a finite number from 0.001 to 1e+06 GB/s"),
        ("ring:8,bw=-5", "bandwidth -5.0 GB/s; it must be a finite number from 0.001"),
        ("ring:1", "at least 2 NPUs"),
        ("nothere/topo.yaml", "no such file"),
    ],
)
def test_bad_specs(spec, message):
    with pytest.raises(InputError) as error:
        load_topology(spec)
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_schema_file_is_the_schema_the_loader_uses():
    assert (REPO / "schemas" / "topology.schema.json").read_text() == schema_json()


def test_own_yaml_and_json_files(tmp_path):
    text = "name: pair\nnpus: 3\nswitches: 1\ndefaults: {bandwidth_gbps: 20}\nlinks:\n  - {src: 0, dst: 1, bidirectional: true, latency_ns: 7}\n  - {src: 1, dst: s0, bidirectional: true}\n  - {src: 2, dst: s0, bidirectional: true}\n"
    (tmp_path / "t.yaml").write_text(text)
    topo = load_topology(str(tmp_path / "t.yaml"))
    assert (topo.num_npus, topo.num_switches, len(topo.links)) == (3, 1, 6)
    assert topo.links[0].latency_ns == 7.0 and topo.links[0].bandwidth_gbps == 20.0
    document = {"npus": 2, "links": [{"src": 0, "dst": 1, "bidirectional": True}]}
    (tmp_path / "t.json").write_text(json.dumps(document))
    assert len(load_topology(str(tmp_path / "t.json")).links) == 2


@pytest.mark.parametrize(
    "name, text, line, message",
    [
        ("a.yaml", "npus: 3\nlinks:\n  - {src: 0, dst: 1}\n  - {src: 1, dst: 7}\n", 4, "names NPU 7"),
        ("b.yaml", "npus: 2\nlinks:\n  - {src: 0, dst: 1, bidirectional: true}\n  - {src: 1, dst: 0, bandwidth_gbps: 0}\n", 4, "bandwidth_gbps"),
        ("c.yaml", "npus: 2\nlinks:\n  - {src: 0, dst: 1\n", 4, "invalid YAML"),
        ("d.json", '{"npus": 2,\n "links": [\n  {"src": 0 "dst": 1}]}', 3, "invalid JSON"),
        ("e.yaml", "npus: 2\nlinks:\n  - {src: 0, dst: 1, colour: red}\n", 3, "unknown key"),
        ("f.edges", "0 1 50 500\n1 2 fast\n", 2, "must be numbers"),
        ("h.edges", "0 1 50GB/s 5 parsecs\n", 1, "too many fields"),
        ("i.edges", "0 1 50GB/s 5ly\n", 1, "malformed duration '5ly'"),
        ("j.yaml", "npus: 2\ndefaults:\n  latency_ns: soon\nlinks:\n  - {src: 0, dst: 1}\n", 3, "defaults latency_ns: malformed duration 'soon'"),
        ("k.yaml", "npus: 2\nlinks:\n  - {src: 0, dst: 1, bidirectional: true}\n  - {src: 1, dst: 0, bandwidth_gbps: fast}\n", 4, "malformed bandwidth 'fast'"),
        ("g.edges", "0 1\nx y\n", 2, "neither an NPU number"),
    ],
)
def test_broken_files_name_file_and_line(tmp_path, name, text, line, message):
    (tmp_path / name).write_text(text)
    with pytest.raises(InputError) as error:
        load_topology(str(tmp_path / name))
    assert str(error.value).startswith(f"{tmp_path / name}:{line}: ")
    assert message in str(error.value)


def test_disconnected_file_names_the_npu(tmp_path):
    (tmp_path / "t.yaml").write_text("npus: 3\nlinks:\n  - {src: 0, dst: 1, bidirectional: true}\n")
    with pytest.raises(InputError, match=r"t.yaml: NPU 2 cannot be reached from NPU 0"):
        load_topology(str(tmp_path / "t.yaml"))


def test_edge_list_and_graphml(tmp_path):
    (tmp_path / "t.edges").write_text("# two NPUs and a switch\n0 s0 10 5\n1 s0 10 5\n0 -> 1 40\n")
    topo = load_topology(str(tmp_path / "t.edges"))
    assert (topo.num_npus, topo.num_switches, len(topo.links)) == (2, 1, 5)
    assert topo.route(0, 1) == [4]  # the one-way direct link beats two hops
    graph = nx.Graph()
    graph.add_node("gpu-a")
    graph.add_node("gpu-b")
    graph.add_node("sw", kind="switch")
    graph.add_edge("gpu-a", "sw", bandwidth_gbps=25.0, latency_ns=100.0)
    graph.add_edge("gpu-b", "sw", bandwidth_gbps=25.0, latency_ns=100.0)
    nx.write_graphml(graph, tmp_path / "t.graphml")
    topo = load_topology(str(tmp_path / "t.graphml"))
    assert (topo.num_npus, topo.num_switches, len(topo.links)) == (2, 1, 4)


@pytest.mark.interop
def test_astra_sim_network_files(interop):
    folder = interop / "astra-sim/examples/network/analytical"
    ring8 = load_topology(str(folder / "Ring_8npus.yml"))
    assert (ring8.num_npus, len(ring8.links)) == (8, 16)
    assert {(l.bandwidth_gbps, l.latency_ns) for l in ring8.links} == {(50.0, 500.0)}
    hgx = load_topology(str(folder / "HGX-H100-validated.yml"))
    assert (hgx.num_npus, hgx.num_switches) == (8, 1)


def test_astra_sim_multi_dimensional(tmp_path):
    (tmp_path / "net.yml").write_text("topology: [ Ring, FullyConnected, Switch ]\nnpus_count: [ 4, 2, 3 ]\nbandwidth: [ 50, 100, 25 ]\nlatency: [ 500, 100, 1000 ]\n")
    topo = load_topology(str(tmp_path / "net.yml"))
    assert topo.num_npus == 24 and topo.num_switches == 8  # one switch per group of the last dimension
    ring_links = [l for l in topo.links if l.bandwidth_gbps == 50]
    assert len(ring_links) == 6 * 8  # 6 rings of 4, both directions
    assert {(l.src, l.dst) for l in ring_links if l.src == 0} == {(0, 1), (0, 3)}
    (tmp_path / "bad.yml").write_text("topology: [ Ring, Torus ]\nnpus_count: [ 4, 2 ]\nbandwidth: [ 50, 100 ]\nlatency: [ 500, 100 ]\n")
    with pytest.raises(InputError, match=r"bad.yml:1: unknown ASTRA-sim topology 'Torus'"):
        load_topology(str(tmp_path / "bad.yml"))
