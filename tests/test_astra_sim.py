"""The ASTRA-sim hand-off: network YAML, system JSON, ETs and run.sh against docs/et-conventions.md and
ASTRA-sim's shipped examples."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import pytest
import yaml

from chakra_collectives.astra_sim import CUSTOM_KEYS, NotExpressible, analytical_network, write_astra_sim_dir
from chakra_collectives.converters.chakra_et import read_algorithm
from chakra_collectives.ir import Collective
from chakra_collectives.synth import synthesize
from chakra_collectives.synth.baselines import binomial_tree, ring
from chakra_collectives.topology import Topology, load_topology
from chakra_collectives.verify import verify_algorithm

from et_nodes import attrs, decode

EXAMPLES = "astra-sim/examples"
COMP, SEND, RECV, COLL = 4, 5, 6, 7


def links(topology: Topology) -> Counter:
    """Links as a multiset; each switch named by the set of NPUs it is linked with."""
    joins = {
        s: frozenset(l.src for l in topology.links if l.dst == s) | frozenset(l.dst for l in topology.links if l.src == s)
        for s in range(topology.num_npus, topology.num_nodes)
    }
    name = lambda n: joins.get(n, n)  # noqa: E731
    return Counter((name(l.src), name(l.dst), l.bandwidth_gbps, l.latency_ns) for l in topology.links)


# ---------------------------------------------------------------------------- network
@pytest.mark.parametrize(
    "spec, kinds",
    [
        ("ring:8", ["Ring"]),
        ("torus2d:4x4", ["Ring", "Ring"]),
        ("torus3d:2x3x4", ["Ring", "Ring", "Ring"]),
        ("switch:8", ["Switch"]),
        ("fully-connected:5", ["FullyConnected"]),
        ("hypercube:3x4", ["Ring", "FullyConnected"]),
        ("dgx:1x8", ["FullyConnected"]),
        ("torus2d:4x4,bw=100,lat=125", ["Ring", "Ring"]),
    ],
)
def test_expressible_topologies_round_trip_through_the_written_file(tmp_path, spec, kinds):
    topology = load_topology(spec)
    network = analytical_network(topology)
    assert network.document()["topology"] == kinds
    path = tmp_path / "network.yml"
    path.write_text(network.to_yaml())
    assert links(load_topology(str(path))) == links(topology)  # the file holds exactly the topology's links


def test_written_network_files_have_the_shipped_examples_shape(interop, tmp_path):
    shipped = sorted((interop / EXAMPLES / "network/analytical").glob("*.yml"))
    assert shipped
    for path in shipped:
        theirs = yaml.safe_load(path.read_text())
        ours_text = analytical_network(load_topology(str(path))).to_yaml()
        ours = yaml.safe_load(ours_text)
        assert ours == theirs  # same keys, same values, same types (int NPU counts, float GB/s and ns)
        assert [line.split(":")[0] for line in ours_text.splitlines()] == [line.split(":")[0] for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize(
    "spec, reason",
    [
        ("ring:6,bidirectional=false", "link 0->1 has no reverse link of the same bandwidth and latency"),
        ("mesh2d:3x3", "NPU 0's links fit no such decomposition"),
        ("dgx:2x4", "switch s0 joins all 8 NPUs that also have direct links"),
        ("hetero-mesh2d:3x2", "NPU 0's links fit no such decomposition"),
    ],
)
def test_inexpressible_topologies_say_why(spec, reason):
    with pytest.raises(NotExpressible, match="is not a product of Ring / FullyConnected / Switch dimensions") as error:
        analytical_network(load_topology(spec))
    assert reason in str(error.value)


def test_a_ring_with_one_slow_link_is_not_taken_for_a_ring():
    topology = load_topology("ring:4")
    slow = Topology(4, name="slow-link")
    for l in topology.links:
        slow.add_link(l.src, l.dst, 10.0 if {l.src, l.dst} == {2, 3} else l.bandwidth_gbps, l.latency_ns)
    with pytest.raises(NotExpressible):
        analytical_network(slow)


# ---------------------------------------------------------------------------- the directory
def _shipped_system_keys(interop) -> dict[str, object]:
    keys = {}
    for path in (interop / EXAMPLES / "system").rglob("*.json"):
        keys.update(json.loads(path.read_text()))
    return keys


def test_directory_files_follow_et_conventions_and_the_shipped_examples(interop, tmp_path):
    topology = load_topology("torus2d:2x4")
    algo = synthesize(topology, "all-gather", "2MiB", chunks_per_npu=2).algorithm
    written = write_astra_sim_dir(tmp_path / "astra", topology, algo)
    root = tmp_path / "astra"
    system = json.loads((root / "system.json").read_text())
    shipped = _shipped_system_keys(interop)
    # docs/et-conventions.md: all-gather-, reduce-scatter-, all-to-all-implementation-custom "likewise"
    shipped.update({f"{k}-custom": ["prefix"] for k in list(shipped) if k.endswith("-implementation")})
    assert set(system) <= set(shipped), set(system) - set(shipped)
    for key, value in system.items():
        assert type(value) is type(shipped[key]), key
    assert system["preferred-dataset-splits"] == 1  # et-conventions: custom collectives need exactly 1
    assert system["all-gather-implementation-custom"] == ["collectives/all_gather"]
    assert "all-gather-implementation" not in system
    for collective, key in CUSTOM_KEYS.items():
        if collective is not Collective.ALL_GATHER:
            assert system[key.removesuffix("-custom")] == ["ring", "ring"]  # native, one per network dimension
    # the custom ETs: only SEND/RECV/COMP, the attribute kinds ASTRA-sim reads, and a proof
    for rank in range(8):
        _, nodes = decode(root / f"collectives/all_gather.{rank}.et")
        for node in nodes:
            a = attrs(node)
            assert node.type in (SEND, RECV, COMP)
            if node.type in (SEND, RECV):
                peer = "comm_dst" if node.type == SEND else "comm_src"
                assert a["comm_type"] == ("int64_val", node.type) and a[peer][0] == "int32_val" and a["comm_tag"][0] == "int32_val"
                assert a["comm_size"][0] == "int64_val" and a["comm_size"][1] > 0 and a[peer][1] != rank
    assert verify_algorithm(read_algorithm(root / "collectives/all_gather")).ok
    # the workload: one all-gather of the algorithm's size on each rank; comm_size is each rank's
    # input as ASTRA-sim reads it (Ring.cc: an all-gather's output is N x comm_size)
    for rank in range(8):
        _, nodes = decode(root / f"{written.workload}.{rank}.et")
        assert [(n.type, attrs(n)["comm_type"][1], attrs(n)["comm_size"][1]) for n in nodes] == [(COLL, 2, 2 * 2**20 // 8)]
    assert json.loads((root / "remote_memory.json").read_text()) == json.loads((interop / EXAMPLES / "remote_memory/analytical/no_memory_expansion.json").read_text())
    assert links(load_topology(str(root / "network.yml"))) == links(topology)


FAKE_ASTRA_SIM = """\
import pathlib, sys
args = dict(a[2:].split("=", 1) for a in sys.argv[1:])
need = {"workload-configuration", "system-configuration", "remote-memory-configuration", "network-configuration"}
assert need <= set(args), sorted(args)
assert pathlib.Path(args["workload-configuration"] + ".0.et").is_file()
for key in need - {"workload-configuration"}:
    assert pathlib.Path(args[key]).is_file(), key
print("sys[0] finished, 1 cycles")
"""


def test_run_script_runs_from_anywhere_with_every_file_in_place(tmp_path):
    topology = load_topology("ring:4")
    write_astra_sim_dir(tmp_path / "astra", topology, ring(Collective.ALL_REDUCE, 4, size_bytes=2**20))
    fake = tmp_path / "fake_astra_sim"
    fake.write_text(f"#!{sys.executable}\n{FAKE_ASTRA_SIM}")
    fake.chmod(0o755)
    run = tmp_path / "astra" / "run.sh"
    assert os.access(run, os.X_OK)
    done = subprocess.run(["sh", str(run)], cwd=tmp_path.parent, env={**os.environ, "ASTRA_SIM_BIN": str(fake)}, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "sys[0] finished" in done.stdout
    missing = subprocess.run(["sh", str(run)], env={k: v for k, v in os.environ.items() if not k.startswith("ASTRA_SIM")}, capture_output=True, text=True)
    assert missing.returncode != 0 and "set ASTRA_SIM" in missing.stderr


def test_expected_cycles_follow_astra_sims_formula(tmp_path):
    """docs/et-conventions.md: a ring all-reduce of S bytes on N NPUs takes 2(N-1) int(lat + (S/N)/(bw x 1.0737)),
    plus 1 ns for each of the N-1 reductions (COMP nodes without a duration) on the critical path."""
    n, size = 8, 2**20
    written = write_astra_sim_dir(tmp_path / "a", load_topology("ring:8"), ring(Collective.ALL_REDUCE, n, size_bytes=size))
    assert written.expected_ns == 2 * (n - 1) * int(500 + (size / n) / (50 * 1.073741824)) + (n - 1)
    assert f"predicts: sys[*] finished, {written.expected_ns:.0f} cycles" in (tmp_path / "a" / "run.sh").read_text()


def test_inexpressible_topology_leaves_the_network_to_the_user(tmp_path):
    topology = load_topology("dgx:2x4")
    written = write_astra_sim_dir(tmp_path / "a", topology, ring(Collective.ALL_REDUCE, 8, size_bytes=2**20))
    assert written.network is None and "switch s0 joins all 8 NPUs" in written.network_reason
    assert not (tmp_path / "a" / "network.yml").exists()
    script = (tmp_path / "a" / "run.sh").read_text()
    assert "NETWORK:?set NETWORK" in script and "No network.yml" in script


def test_bad_input_writes_nothing(tmp_path):
    topology = load_topology("ring:4")
    with pytest.raises(Exception, match="has 8 ranks but ring:4 has 4 NPUs"):
        write_astra_sim_dir(tmp_path / "a", topology, ring(Collective.ALL_REDUCE, 8, size_bytes=2**20))
    with pytest.raises(Exception, match="ASTRA-sim runs custom all-reduce, all-gather, reduce-scatter, all-to-all only, not broadcast"):
        write_astra_sim_dir(tmp_path / "a", topology, binomial_tree(Collective.BROADCAST, 4, size_bytes=2**20))
    assert not (tmp_path / "a").exists()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(Exception, match="is not a directory chakra-coll wrote for ASTRA-sim"):
        write_astra_sim_dir(tmp_path / "mine", topology, ring(Collective.ALL_REDUCE, 4, size_bytes=2**20))
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]  # no staging folder left behind


def test_rewriting_a_directory_replaces_it(tmp_path):
    topology = load_topology("ring:4")
    write_astra_sim_dir(tmp_path / "a", topology, ring(Collective.ALL_REDUCE, 4, size_bytes=2**20))
    write_astra_sim_dir(tmp_path / "a", topology, ring(Collective.ALL_GATHER, 4, size_bytes=2**20))
    assert sorted(p.name.split(".")[0] for p in (tmp_path / "a" / "collectives").iterdir()) == ["all_gather"] * 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]


def test_synth_cli_hand_off(cli, tmp_path):
    result = cli("synth", "-t", "ring:4", "-c", "all-reduce", "-s", "1MiB", "-a", "ring", "--astra-sim", tmp_path / "astra")
    assert result.exit_code == 0, result.output
    assert "AstraSim_Analytical_Congestion_Aware --workload-configuration=workload/all_reduce_4npus_1MB" in result.stdout
    assert "expect: sys[*] finished" in result.stdout
    result = cli("synth", "-t", "dgx:2x2", "-s", "1MiB", "--astra-sim", tmp_path / "dgx", "--json")
    summary = json.loads(result.stdout)["astra_sim"]
    assert summary["network"] is None and "switch s0 joins all 4 NPUs" in summary["network_reason"]
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("")
    result = cli("synth", "-t", "ring:4", "-s", "1MiB", "--astra-sim", tmp_path / "taken")
    assert result.exit_code == 2 and result.stderr.count("\n") == 1 and "choose a new one" in result.stderr
