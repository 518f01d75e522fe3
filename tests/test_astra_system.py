"""The model of ASTRA-sim's system layer against the real simulator's figures (astra-sim 518bd51).

Reference values come from runs of the real binaries (``../shared/interop/astra-sim/measured``
and issue 13); the closed forms are derived from ASTRA-sim's algorithms (Ring.cc, AllToAll.cc,
PacketBundle.cc), not from this model.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from chakra_collectives.converters.astra_sim import AnalyticalNetwork, Dimension
from chakra_collectives.astra_system import AstraSimAbort, SystemConfig, read_comm_groups, simulate
from chakra_collectives.astra_system.hashorder import HashOrder
from chakra_collectives.errors import InputError
from chakra_collectives.units import bytes_per_ns
from chakra_collectives.workload import data_parallel, hybrid_parallel, microbenchmark
from chakra_collectives.workload.spec import uniform_model

MEASURED = "astra-sim/measured"
EXAMPLES = "astra-sim/examples"


def network_of(path: Path) -> AnalyticalNetwork:
    doc = yaml.safe_load(path.read_text())
    return AnalyticalNetwork(tuple(Dimension(k, int(n), float(b), float(l)) for k, n, b, l in zip(doc["topology"], doc["npus_count"], doc["bandwidth"], doc["latency"])))


def one_dim(kind: str, npus: int, bw: float = 50.0, lat: float = 500.0) -> AnalyticalNetwork:
    return AnalyticalNetwork((Dimension(kind, npus, bw, lat),))


def system(**keys) -> SystemConfig:
    doc = {"preferred-dataset-splits": 1}
    for collective in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all"):
        doc[f"{collective}-implementation"] = ["ring"]
    doc.update({k.replace("_", "-"): v for k, v in keys.items()})
    return SystemConfig.from_dict(doc)


def run_micro(tmp_path, collective, npus, size, net, config, backend="aware"):
    microbenchmark(collective, npus, size).write(tmp_path / "w")
    return simulate(tmp_path / "w", net, config, backend=backend)


# ---------------------------------------------------------------------------- the measured table
def measured_rows(interop: Path) -> list[tuple[str, str, str, str, int]]:
    """``(workload, network, system, binary, ns)`` rows of measured/README.md."""
    rows = []
    for line in (interop / MEASURED / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[2].endswith(".json") and cells[0] in ("all_reduce", "reduce_scatter", "all_gather", "all_to_all"):
            rows.append((cells[0], cells[1], cells[2], cells[3], int(cells[4].replace(",", ""))))
    return rows


@pytest.mark.interop
def test_every_measured_microbenchmark_to_the_nanosecond(interop):
    rows = measured_rows(interop)
    assert len(rows) == 15
    for workload, net_file, sys_file, binary, expected in rows:
        net_path = interop / MEASURED / net_file
        if not net_path.exists():
            net_path = interop / EXAMPLES / "network/analytical" / net_file
        prefix = interop / EXAMPLES / "workload/microbenchmarks" / workload / "8npus_1MB" / workload
        result = simulate(prefix, network_of(net_path), SystemConfig.from_file(interop / MEASURED / sys_file), backend=binary)
        assert result.makespan_ns == expected, (workload, net_file, sys_file)


@pytest.mark.interop
@pytest.mark.parametrize("backend", ["aware", "unaware"])
def test_the_shipped_custom_ring_all_reduce(interop, backend):
    base = interop / EXAMPLES / "system/custom_collectives"
    doc = json.loads((base / "custom_collective.json").read_text())
    doc["all-reduce-implementation-custom"] = ["custom_ring_allreduce_8npus_1MB/custom_allreduce"]
    result = simulate(
        interop / EXAMPLES / "workload/microbenchmarks/all_reduce/8npus_1MB/all_reduce",
        network_of(interop / EXAMPLES / "network/analytical/Ring_8npus.yml"),
        SystemConfig.from_dict(doc),
        backend=backend,
        custom_base=base,
    )
    assert result.makespan_ns == 90_174


@pytest.mark.interop
def test_the_shipped_native_examples_run(interop):
    """HGX-H100's LIFO, splits 4, 2 active chunks, localBWAware configuration, on Ring 8."""
    config = SystemConfig.from_file(interop / EXAMPLES / "system/native_collectives/HGX-H100-validated.json")
    assert (config.policy, config.splits, config.active_chunks, config.optimization) == ("LIFO", 4, 2, "localBWAware")
    result = simulate(
        interop / EXAMPLES / "workload/microbenchmarks/all_reduce/8npus_1MB/all_reduce",
        network_of(interop / EXAMPLES / "network/analytical/Ring_8npus.yml"),
        config,
    )
    assert result.finished and 0 < result.makespan_ns < 96_365


# ---------------------------------------------------------------------------- closed forms
def hop(nbytes: int, bw: float = 50.0, lat: float = 500.0) -> int:
    return int(lat + nbytes / bytes_per_ns(bw))


def memory(nbytes: int, gbps: float) -> int:
    return 3 * int(nbytes / (gbps * 1e9) * 1e9)


@settings(max_examples=12, deadline=None)
@given(npus=st.integers(3, 12), size=st.sampled_from([4096, 65536, 2**20, 3 * 2**20 + 40]), delay=st.integers(1, 20), lmb=st.sampled_from([50, 1600, 10**6]))
def test_ring_collectives_follow_the_step_formulas(tmp_path_factory, npus, size, delay, lmb):
    """Ring.cc: every step is network + endpoint, and reduce steps add 3 x size / local-mem-bw."""
    tmp = tmp_path_factory.mktemp("ring")
    config = system(endpoint_delay=delay, local_mem_bw=lmb)
    net = one_dim("Ring", npus)
    part = size // npus
    t, p = hop(part), memory(part, lmb)
    n = npus
    assert run_micro(tmp, "all-reduce", n, size, net, config).makespan_ns == 2 * (n - 1) * t + (2 * n - 1) * delay + (n - 1) * p
    assert run_micro(tmp, "reduce-scatter", n, size, net, config).makespan_ns == (n - 1) * (t + delay + p) + delay
    assert run_micro(tmp, "all-gather", n, size, net, config).makespan_ns == (n - 1) * (hop(size) + delay) + delay  # comm_size = input shard
    steps = n * (n - 1) // 2
    assert run_micro(tmp, "all-to-all", n, size, net, config).makespan_ns == steps * (t + delay) + delay


@settings(max_examples=10, deadline=None)
@given(npus=st.integers(3, 12), size=st.sampled_from([65536, 2**20]), delay=st.integers(1, 20))
def test_direct_all_reduce_is_two_rounds(tmp_path_factory, npus, size, delay):
    """AllToAll.cc: all peers at once, wait for every piece, reduce once, all peers again."""
    tmp = tmp_path_factory.mktemp("direct")
    config = system(endpoint_delay=delay, local_mem_bw=50, all_reduce_implementation=["direct"])
    part = size // npus
    result = run_micro(tmp, "all-reduce", npus, size, one_dim("FullyConnected", npus), config)
    assert result.makespan_ns == 3 * delay + 2 * hop(part) + memory(part, 50)


# ---------------------------------------------------------------------------- unaware backend (issue 13)
def test_unaware_backend_does_not_model_contention(tmp_path):
    """Switch 16, direct all-reduce: 15 messages share each uplink in the aware model, none in the unaware."""
    config = system(all_reduce_implementation=["direct"], local_mem_bw=10**6, endpoint_delay=1)
    aware = run_micro(tmp_path, "all-reduce", 16, 2**20, one_dim("Switch", 16), config, "aware").makespan_ns
    unaware = run_micro(tmp_path, "all-reduce", 16, 2**20, one_dim("Switch", 16), config, "unaware").makespan_ns
    part = 2**20 // 16
    assert unaware == 3 + 2 * int(2 * 500 + part / bytes_per_ns(50))
    assert aware > 5 * unaware


def test_unaware_multi_dimension_charges_the_first_differing_dimension(tmp_path):
    """A 2-D ring all-reduce (baseline): an all-reduce in dimension 0, then one in dimension 1."""
    net = AnalyticalNetwork((Dimension("Ring", 4, 100.0, 200.0), Dimension("Switch", 2, 25.0, 700.0)))
    config = system(all_reduce_implementation=["ring", "ring"], local_mem_bw=10**6, endpoint_delay=1)
    size = 2**20
    result = run_micro(tmp_path, "all-reduce", 8, size, net, config, "unaware")
    dim0 = 2 * 3 * hop(size // 4, 100.0, 200.0) + 7
    dim1 = 2 * 1 * int(2 * 700.0 + (size // 2) / bytes_per_ns(25.0)) + 3
    assert result.makespan_ns == dim0 + dim1


# ---------------------------------------------------------------------------- scheduling
def test_splits_pipeline_the_phases(tmp_path):
    net = AnalyticalNetwork((Dimension("Ring", 4, 50.0, 500.0), Dimension("Ring", 2, 25.0, 500.0)))
    model = uniform_model(layers=3, forward="20us", gradient="4MiB")
    data_parallel(model, 8).write(tmp_path / "step")
    times = {}
    for policy in ("FIFO", "LIFO"):
        for splits in (1, 4):
            config = system(scheduling_policy=policy, preferred_dataset_splits=splits, active_chunks_per_dimension=2,
                            collective_optimization="localBWAware", all_reduce_implementation=["ring", "ring"], local_mem_bw=1600)
            times[policy, splits] = simulate(tmp_path / "step", net, config, backend="unaware").makespan_ns
    assert times["FIFO", 4] < times["FIFO", 1]  # chunks of one all-reduce overlap across dimensions
    # one collective in flight per rank (HardwareResource): no two collectives ever share a queue,
    # so the policy cannot reorder anything in such a workload
    assert times["LIFO", 1] == times["FIFO", 1] and times["LIFO", 4] == times["FIFO", 4]


def test_process_groups_run_on_local_rings(tmp_path):
    model = uniform_model(layers=2, forward="16us", gradient="2MiB", activation="1MiB")
    workload = hybrid_parallel(model, 2, 4)
    workload.write(tmp_path / "h")
    groups = read_comm_groups(tmp_path / "h.json", 8)
    assert sorted(len(m) for m in groups.values()) == [2, 2, 2, 2, 4, 4]
    result = simulate(tmp_path / "h", one_dim("Switch", 8), system(), comm_groups=groups)
    assert result.finished and result.makespan_ns > 0


# ---------------------------------------------------------------------------- what aborts ASTRA-sim
def test_configurations_that_abort_astra_sim_are_refused(tmp_path):
    microbenchmark("all-reduce", 8, 2**20).write(tmp_path / "w")
    with pytest.raises(AstraSimAbort, match="time 0"):
        simulate(tmp_path / "w", one_dim("Ring", 8), system(endpoint_delay=0))
    microbenchmark("all-reduce", 2, 2**20).write(tmp_path / "w2")
    with pytest.raises(InputError, match="Ring of 2"):
        simulate(tmp_path / "w2", one_dim("Ring", 2), system())
    assert simulate(tmp_path / "w2", one_dim("FullyConnected", 2), system()).finished
    with pytest.raises(InputError, match="one dimension"):
        simulate(tmp_path / "w", AnalyticalNetwork((Dimension("Ring", 4, 50, 500), Dimension("Ring", 2, 50, 500))), system())
    with pytest.raises(InputError, match="8 ranks and the network 4"):
        simulate(tmp_path / "w", one_dim("Ring", 4), system())


@pytest.mark.parametrize(
    "doc, message",
    [
        ({"all-reduce-implementation": ["ring"]}, "preferred-dataset-splits is missing"),
        ({"preferred-dataset-splits": 0}, "positive integer"),
        ({"preferred-dataset-splits": 1, "scheduling-policy": "RANDOM"}, "FIFO, LIFO"),
        ({"preferred-dataset-splits": 1, "all-reduce-implementation": ["ringo"]}, "unknown algorithm 'ringo'"),
        ({"preferred-dataset-splits": 4, "all-reduce-implementation-custom": ["x"]}, "needs 1"),
        ({"preferred-dataset-splits": 1, "all-reduce-implementation-custom": ["x", "y"]}, "exactly one"),
        ({"preferred-dataset-splits": 1, "model-shared-bus": 1}, "not modeled"),
    ],
)
def test_bad_system_files_name_the_file(tmp_path, doc, message):
    path = tmp_path / "system.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError, match=re.escape(message)) as info:
        SystemConfig.from_file(path)
    assert str(info.value).startswith(str(path))


# ---------------------------------------------------------------------------- the feeder's order
def test_hash_order_matches_recorded_gcc_runs():
    """Iteration orders printed by GCC 12's std::unordered_set<unsigned long> for these inserts."""
    s = HashOrder()
    for k in (5, 1, 9, 2):
        s.add(k)
    assert list(s) == [2, 9, 1, 5]
    s = HashOrder()
    for k in range(20):
        s.add(k)
    assert list(s) == [*range(19, 12, -1), *range(13)]  # the 13th key's rehash to 29 buckets relinks 0..12
    s.discard(7)
    s.add(36)  # 36 % 29 = 7: the emptied bucket again, at the front
    assert list(s) == [36, *range(19, 12, -1), *range(7), *range(8, 13)]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 200)), max_size=120))
def test_hash_order_is_a_set(ops):
    s, reference = HashOrder(), set()
    for add, key in ops:
        (s.add if add else s.discard)(key)
        (reference.add if add else reference.discard)(key)
    assert sorted(s) == sorted(reference) and len(s) == len(reference)


# ---------------------------------------------------------------------------- replay's ASTRA-sim mode
def test_custom_collectives_run_at_their_written_size(tmp_path, monkeypatch):
    """docs/et-conventions.md: the sample step (8 and 12 MiB gradients) with a 16 MiB custom TACOS
    all-reduce on Ring 8 takes ASTRA-sim 2,589,006 ns; rescaling each call would give 2,048,626."""
    from chakra_collectives.astra_sim import write_astra_sim_dir
    from chakra_collectives.astra_system.report import replay_astra_sim
    from chakra_collectives.synth import synthesize
    from chakra_collectives.topology import load_topology
    from chakra_collectives.workload import load_model_spec

    topology = load_topology("ring:8")
    algo = synthesize(topology, "all-reduce", 16 * 2**20, algorithm="tacos", chunks_per_npu=1).algorithm
    write_astra_sim_dir(tmp_path / "d", topology, algo)
    data_parallel(load_model_spec(Path(__file__).parents[1] / "sample_traces/workload/train_step.yaml"), 8).write(tmp_path / "d/step")
    monkeypatch.chdir(tmp_path / "d")
    as_written = replay_astra_sim("step", load_topology("network.yml"), "system.json")
    assert as_written.total_ns == 2_589_006
    assert any("written for 16 MiB" in w and "--rescale" in w for w in as_written.warnings)
    assert replay_astra_sim("step", load_topology("network.yml"), "system.json", rescale=True).total_ns == 2_048_626


def test_backend_follows_what_astra_sim_can_run(tmp_path):
    from chakra_collectives.astra_system.report import UNAWARE_NOTE, replay_astra_sim
    from chakra_collectives.topology import load_topology

    microbenchmark("all-reduce", 8, 2**20).write(tmp_path / "w")
    (tmp_path / "system.json").write_text(json.dumps({"preferred-dataset-splits": 1, "all-reduce-implementation": ["ring", "ring"], "local-mem-bw": 50}))
    two_dims = replay_astra_sim(tmp_path / "w", load_topology("torus2d:4x2"), tmp_path / "system.json")
    assert two_dims.backend == "unaware" and UNAWARE_NOTE in two_dims.warnings
    (tmp_path / "system.json").write_text(json.dumps({"preferred-dataset-splits": 1, "all-reduce-implementation": ["ring"], "local-mem-bw": 50}))
    ring = replay_astra_sim(tmp_path / "w", load_topology("ring:8"), tmp_path / "system.json")
    assert (ring.backend, ring.total_ns) == ("aware", 96_365)
    with pytest.raises(InputError, match="analytical backends need such a network"):
        replay_astra_sim(tmp_path / "w", load_topology("mesh2d:4x2"), tmp_path / "system.json")


def test_readme_astra_sim_mode_example_predicts_what_astra_sim_reports(cli, tmp_path, monkeypatch):
    """README's example: ASTRA-sim's 8-NPU 1 MiB ring all-reduce microbenchmark, 96,365 ns."""
    text = (Path(__file__).parents[1] / "README.md").read_text()
    part = text[text.index("### What `--network-model astra-sim` reproduces") :]
    part = part[: part.index("\n### ", 5)]
    system_json = re.search(r"```json\n(.*?)```", part, flags=re.S).group(1)
    commands = [line for block in re.findall(r"```sh\n(.*?)```", part, flags=re.S) for line in block.splitlines() if line.strip()]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "system.json").write_text(system_json)
    for line in commands:
        result = cli(*line.split()[1:])
        assert result.exit_code == 0, result.output
    assert "(96,365 ns)" in result.stdout.replace("\n", "")
    assert "96,365 ns" in part and "41,181" in part
    assert cli("replay", "out/all_reduce", "-t", "ring:8", "--network-model", "astra-sim").stdout.replace("\n", "").count("(41,181 ns)") == 1


# ---------------------------------------------------------------------------- hand-off and CLI
@pytest.mark.parametrize(
    "spec, backend, kinds, expected",
    [
        ("torus2d:4x4", "unaware", ["Ring", "Ring"], 16_210),  # issue 13: ASTRA-sim's unaware binary, TACOS 1 MiB
        ("switch:16", "aware", ["Switch"], 41_043),  # aware binary, direct 1 MiB
        ("ring:2", "aware", ["FullyConnected"], None),  # a Ring of 2 aborts the aware binary
    ],
)
def test_handoff_writes_what_the_chosen_binary_accepts(tmp_path, spec, backend, kinds, expected):
    from chakra_collectives.astra_sim import BINARIES, write_astra_sim_dir
    from chakra_collectives.synth import synthesize
    from chakra_collectives.topology import load_topology

    topology = load_topology(spec)
    algorithm = "direct" if spec.startswith("switch") else "tacos" if spec.startswith("torus") else "ring"
    written = write_astra_sim_dir(tmp_path / "d", topology, synthesize(topology, "all-reduce", 2**20, algorithm=algorithm).algorithm)
    run = (tmp_path / "d/run.sh").read_text()
    assert written.backend == backend and BINARIES[backend] in run
    assert yaml.safe_load((tmp_path / "d/network.yml").read_text())["topology"] == kinds
    assert ("does not model contention" in run) == (backend == "unaware")
    assert ('*_Congestion_Aware) BIN="${BIN%_Congestion_Aware}_Congestion_Unaware"' in run) == (backend == "unaware")
    if expected is not None:
        assert written.expected_ns == expected and f"predicts: sys[*] finished, {expected} cycles" in run


def test_cli_replay_with_a_system_file(cli, tmp_path):
    microbenchmark("all-gather", 8, 2**20).write(tmp_path / "ag")
    (tmp_path / "system.json").write_text(json.dumps({"preferred-dataset-splits": 1, "all-gather-implementation": ["direct"], "local-mem-bw": 50}))
    result = cli("replay", tmp_path / "ag", "-t", "fully-connected:8", "--mode", "astra-sim", "--system", tmp_path / "system.json", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert (document["backend"], document["total_ns"]) == ("aware", 20_051)  # measured: FullyConnected 8, direct all-gather
    assert [r["finish_ns"] for r in document["ranks"]] == [20_051] * 8
    missing_mode = cli("replay", tmp_path / "ag", "-t", "fully-connected:8", "--system", tmp_path / "system.json")
    assert missing_mode.exit_code == 2 and "add --network-model astra-sim" in missing_mode.output
    unknown = cli("replay", tmp_path / "ag", "-t", "fully-connected:8", "--mode", "astra-sim", "--system", tmp_path / "system.json", "--astra-sim-backend", "fast")
    assert unknown.exit_code == 2 and "unknown ASTRA-sim backend 'fast'" in unknown.output
    (tmp_path / "bad.json").write_text("{")
    bad = cli("replay", tmp_path / "ag", "-t", "fully-connected:8", "--mode", "astra-sim", "--system", tmp_path / "bad.json")
    assert bad.exit_code == 2 and str(tmp_path / "bad.json") in bad.output and "Traceback" not in bad.output


def test_synth_chooses_under_the_astra_sim_model_when_asked(cli):
    """switch:16, 64 KiB all-reduce: TACOS's link model charges each queued message its latency at the
    switch port and best picks rhd; under ASTRA-sim's model direct takes 4,435 ns (as ASTRA-sim runs it)
    and best picks the fastest there (ForestColl's trees, 2 ns ahead)."""
    tacos_mode = json.loads(cli("synth", "-t", "switch:16", "-c", "all-reduce", "-s", "64KiB", "--json").stdout)
    astra_mode = json.loads(cli("synth", "-t", "switch:16", "-c", "all-reduce", "-s", "64KiB", "--network-model", "astra-sim", "--json").stdout)
    assert (tacos_mode["network_model"], tacos_mode["algorithm"]) == ("default", "rhd")
    assert (astra_mode["network_model"], astra_mode["candidates"]["direct"]["predicted_ns"]) == ("astra-sim", 4435)
    assert astra_mode["algorithm"] != "rhd"
    assert astra_mode["predicted_ns"] == min(c["predicted_ns"] for c in astra_mode["candidates"].values()) <= 4435
    assert "unknown network model 'ns3'" in cli("synth", "-t", "ring:4", "--network-model", "ns3").output


def test_an_all_gather_is_compared_at_its_whole_size_not_its_shard(tmp_path, monkeypatch):
    """synth -c all-gather --astra-sim D writes comm_size = 1 MiB / 16 (each rank's shard, as
    ASTRA-sim's all-gather takes it): replaying D says nothing about sizes. A workload of 1 MiB
    shards is a 16 MiB all-gather: it warns with both numbers, and --rescale runs it as the
    files synthesized at 16 MiB run on their own workload."""
    from chakra_collectives.astra_sim import write_astra_sim_dir
    from chakra_collectives.astra_system.report import replay_astra_sim
    from chakra_collectives.synth import synthesize
    from chakra_collectives.topology import load_topology

    topology = load_topology("torus2d:4x4")
    for name, size in (("small", 2**20), ("large", 16 * 2**20)):
        algo = synthesize(topology, "all-gather", size, algorithm="ring", chunks_per_npu=1).algorithm
        write_astra_sim_dir(tmp_path / name, topology, algo)
    monkeypatch.chdir(tmp_path / "small")
    own = replay_astra_sim("workload/all_gather_16npus_64KB", load_topology("network.yml"), "system.json")
    assert not [w for w in own.warnings if "written for" in w], own.warnings
    microbenchmark("all-gather", 16, 2**20).write(tmp_path / "small/shards")
    as_written = replay_astra_sim("shards", load_topology("network.yml"), "system.json")
    assert any("written for 1 MiB" in w and "16 MiB (comm_size 1 MiB per rank)" in w for w in as_written.warnings), as_written.warnings
    assert as_written.total_ns == own.total_ns  # ASTRA-sim runs the 1 MiB files whatever comm_size says
    rescaled = replay_astra_sim("shards", load_topology("network.yml"), "system.json", rescale=True)
    monkeypatch.chdir(tmp_path / "large")
    large = replay_astra_sim("workload/all_gather_16npus_1MB", load_topology("network.yml"), "system.json")
    assert rescaled.total_ns == large.total_ns > own.total_ns


def test_a_whole_fabric_custom_collective_on_a_group_call_is_refused_in_one_line(cli, tmp_path):
    """A custom all-reduce written for 8 ranks cannot serve the 2-rank tensor-parallel groups of a
    hybrid step: one line naming the files and both rank counts, exit 2 (was an IndexError)."""
    assert cli("workload", "hybrid", "--tp", "2", "--dp", "4", "-o", tmp_path / "hy").exit_code == 0
    assert cli("synth", "-t", "ring:8", "-a", "ring", "-c", "all-reduce", "-s", "1MiB", "--astra-sim", tmp_path / "ad").exit_code == 0
    result = cli("replay", tmp_path / "hy", "-t", "ring:8", "--network-model", "astra-sim", "--system", tmp_path / "ad" / "system.json")
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert "has 8 rank files, but this call runs over 2 ranks" in " ".join(result.stderr.split())


# ---------------------------------------------------------------------------- level by level
def _both_ways(directory, workload_prefix, network, backend):
    """The model timed as it chooses and by the event simulation, on a written directory."""
    config = SystemConfig.from_file(directory / "system.json")
    chosen = simulate(directory / workload_prefix, network, config, backend=backend, custom_base=directory)
    events = simulate(directory / workload_prefix, network, config, backend=backend, custom_base=directory, method="events")
    assert events.method == "events"
    assert chosen.finish_ns == events.finish_ns and chosen.exposed_ns == events.exposed_ns
    assert chosen.start_ns.tolist() == events.start_ns.tolist() and chosen.end_ns.tolist() == events.end_ns.tolist()
    return chosen


@pytest.mark.parametrize("spec, collective, backend", [
    ("ring:8", "all-reduce", "aware"), ("ring:8", "all-gather", "unaware"), ("torus2d:4x4", "reduce-scatter", "unaware"), ("ring:6", "all-reduce", "unaware"),
])
def test_custom_ring_collectives_are_timed_level_by_level_with_the_events_times(tmp_path, spec, collective, backend):
    from chakra_collectives.astra_sim import write_astra_sim_dir
    from chakra_collectives.ir import Collective
    from chakra_collectives.synth.baselines import ring
    from chakra_collectives.topology import load_topology

    topology = load_topology(spec)
    written = write_astra_sim_dir(tmp_path / "d", topology, ring(Collective.parse(collective), topology.num_npus, size_bytes=2**20))
    result = _both_ways(written.directory, written.workload, written.network, backend)
    assert result.method == "levels"  # a ring on a ring: no message waits for a link
    assert result.makespan_ns == written.expected_ns


def test_contention_leaves_the_custom_collective_to_the_events(tmp_path):
    """A direct all-gather through one switch: every NPU's uplink carries several messages at once."""
    from chakra_collectives.astra_sim import write_astra_sim_dir
    from chakra_collectives.ir import Collective
    from chakra_collectives.synth.baselines import direct
    from chakra_collectives.topology import load_topology

    written = write_astra_sim_dir(tmp_path / "d", load_topology("switch:8"), direct(Collective.ALL_GATHER, 8, size_bytes=2**20))
    assert _both_ways(written.directory, written.workload, written.network, "aware").method == "events"


def test_a_training_step_of_custom_collectives_agrees_with_the_events(tmp_path):
    """COMP and custom all-reduces under the per-rank rule: whichever way it is timed, the event times."""
    from chakra_collectives.astra_sim import write_astra_sim_dir
    from chakra_collectives.ir import Collective
    from chakra_collectives.synth.baselines import ring
    from chakra_collectives.topology import load_topology

    step = data_parallel(uniform_model(layers=3, forward="20us", gradient="1MiB"), 8)
    written = write_astra_sim_dir(tmp_path / "d", load_topology("ring:8"), ring(Collective.ALL_REDUCE, 8, size_bytes=2**20), workload=step)
    _both_ways(written.directory, written.workload, written.network, "aware")


def test_several_custom_calls_per_rank_are_timed_level_by_level_with_the_events_times(tmp_path):
    """Two custom all-reduces per rank with a COMP between them: each call expands its own copy
    of the rank's program (not the one-call-per-rank layout of a microbenchmark)."""
    from chakra_collectives.astra_sim import write_astra_sim_dir
    from chakra_collectives.converters.chakra_et.workload_writer import WorkloadBuilder
    from chakra_collectives.ir import Collective
    from chakra_collectives.synth.baselines import ring
    from chakra_collectives.topology import load_topology
    from chakra_collectives.workload.generate import GeneratedWorkload

    builder = WorkloadBuilder(4)
    for rank in range(4):
        first = builder.collective(rank, "all-reduce", 2**20)
        pause = builder.comp(rank, duration_ns=5000, deps=[first])
        builder.collective(rank, "all-reduce", 2**20, deps=[pause])
    written = write_astra_sim_dir(tmp_path / "d", load_topology("ring:4"), ring(Collective.ALL_REDUCE, 4, size_bytes=2**20),
                                  workload=GeneratedWorkload(kind="custom", name="two_all_reduces", builder=builder))
    result = _both_ways(written.directory, written.workload, written.network, "aware")
    assert result.method == "levels"


def test_native_collectives_are_timed_event_by_event(tmp_path):
    result = run_micro(tmp_path, "all-reduce", 8, 2**20, one_dim("Ring", 8), system(**{"all-reduce-implementation": ["ring"]}))
    assert result.method == "events" and result.events > 0
