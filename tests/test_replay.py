"""Replay: closed forms, agreement with the cost model, overlap, ASTRA-sim's workloads, bad input."""

from __future__ import annotations

import json

import pytest

from chakra_collectives.converters.chakra_et import read_algorithm, write_algorithm
from chakra_collectives.ir import Collective
from chakra_collectives.network import predict_time
from chakra_collectives.converters.chakra_et import WorkloadBuilder, single_collective_workload
from chakra_collectives.replay import ProcessGroups, ReplayDeadlock, replay
from chakra_collectives.synth.baselines import direct, ring
from chakra_collectives.synth.tacos import tacos
from chakra_collectives.topology import fully_connected, load_topology, torus2d
from chakra_collectives.topology import ring as ring_topology
from chakra_collectives.units import bytes_per_ns
from chakra_collectives.verify import verify_algorithm

from network_helpers import ONE_BYTE_PER_NS

MIB = 2**20
MICRO = "astra-sim/examples/workload/microbenchmarks"


def astra_step(n: int, size: int) -> int:
    return int(500 + (size / n) / (50 * 1.073741824))


# ---------------------------------------------------------------------------- closed forms
@pytest.mark.parametrize("p", [2, 4, 8])
def test_ring_all_reduce_on_a_ring(tmp_path, p):
    alpha, size = 700.0, p * 3 * 4096
    single_collective_workload(tmp_path / "w", "all-reduce", p, size)
    topo = ring_topology(p, bidirectional=False, bandwidth_gbps=4 * ONE_BYTE_PER_NS, latency_ns=alpha)
    result = replay(tmp_path / "w", topo, default_algorithm="ring")
    assert result.total_ns == 2 * (p - 1) * (alpha + size / (p * 4))
    assert result.collectives[0].start_ns == 0 and result.collectives[0].end_ns == result.total_ns


@pytest.mark.parametrize("p", [2, 5, 8])
def test_direct_all_gather_on_fully_connected(tmp_path, p):
    alpha, size = 300.0, p * 8192
    single_collective_workload(tmp_path / "w", "all-gather", p, size // p)  # comm_size: each rank's shard
    topo = fully_connected(p, bandwidth_gbps=2 * ONE_BYTE_PER_NS, latency_ns=alpha)
    result = replay(tmp_path / "w", topo, default_algorithm="direct")
    assert result.total_ns == alpha + size / (p * 2)
    stats = result.collectives[0]
    assert stats.bus_bandwidth_gbps == pytest.approx((p - 1) / p * size / result.total_ns / bytes_per_ns(1.0))


@pytest.mark.parametrize("mode", ["tacos", "astra-sim"])
@pytest.mark.parametrize("collective", [Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_REDUCE])
def test_synthesized_algorithm_replays_in_exactly_the_predicted_time(tmp_path, collective, mode):
    topo = torus2d(3, 3)
    size = 9 * 2 * MIB
    algo = tacos(topo, collective, size, chunks_per_npu=2).algorithm
    assert verify_algorithm(algo).ok
    write_algorithm(algo, tmp_path / "algo")
    comm_size = 3 * size // 9 if collective is Collective.ALL_GATHER else 3 * size  # all-gather: each rank's shard
    single_collective_workload(tmp_path / "w", collective, 9, comm_size)  # replayed at another size
    result = replay(tmp_path / "w", topo, algorithms={collective: read_algorithm(tmp_path / "algo")}, network_model=mode, rescale=True)
    assert result.total_ns == predict_time(algo, topo, size_bytes=3 * size, network_model=mode)
    assert not result.warnings


@pytest.mark.parametrize("collective", [Collective.ALL_GATHER, Collective.ALL_REDUCE])
def test_astra_sim_mode_runs_given_algorithms_at_their_written_size(tmp_path, collective):
    """ASTRA-sim runs a custom collective at the size its files were written for, whatever the
    workload's comm_size; astra-sim mode does the same unless told to rescale, and says so."""
    topo = torus2d(3, 3)
    algo = tacos(topo, collective, 9 * MIB).algorithm
    write_algorithm(algo, tmp_path / "algo")
    comm_size = 4 * MIB if collective is Collective.ALL_GATHER else 36 * MIB  # a 36 MiB call either way
    single_collective_workload(tmp_path / "w", collective, 9, comm_size)
    given = {collective: read_algorithm(tmp_path / "algo")}
    result = replay(tmp_path / "w", topo, algorithms=given, network_model="astra-sim")
    assert result.total_ns == predict_time(algo, topo, network_model="astra-sim")
    assert any("written for 9,437,184 bytes" in w and "--rescale" in w for w in result.warnings)
    rescaled = replay(tmp_path / "w", topo, algorithms=given, network_model="astra-sim", rescale=True)
    assert rescaled.total_ns == predict_time(algo, topo, size_bytes=36 * MIB, network_model="astra-sim") > result.total_ns
    assert replay(tmp_path / "w", topo, algorithms=given).total_ns == predict_time(algo, topo, size_bytes=36 * MIB)  # tacos mode scales


def test_overlap_beats_barrier_by_what_the_model_predicts(tmp_path):
    """Per-layer all-reduces that depend only on their layer vs all of them after a barrier."""
    p, layers, size = 4, 5, 4 * MIB
    topo = ring_topology(p, bidirectional=False, bandwidth_gbps=ONE_BYTE_PER_NS * 16, latency_ns=1000.0)
    all_reduce = predict_time(ring(Collective.ALL_REDUCE, p, size_bytes=size), topo)
    compute = all_reduce * 1.5  # each layer's backward outlasts one all-reduce: overlapped ones never meet

    def backward(barrier: bool):
        b = WorkloadBuilder(p)
        for r in range(p):
            grads = []
            previous = []
            for layer in range(layers):
                c = b.comp(r, duration_ns=compute, name=f"bwd{layer}", deps=previous)
                previous = [c]
                grads.append(c)
            if barrier:
                sync = b.collective(r, Collective.ALL_REDUCE, 0, name="barrier", deps=previous, comm_type=9)
                grads = [sync] * layers
            for layer, dep in enumerate(grads):
                b.collective(r, Collective.ALL_REDUCE, size, name=f"grad{layer}", deps=[dep])
        return b

    compute = round(compute / 1000) * 1000  # the ET stores whole microseconds
    backward(False).write(tmp_path / "overlap")
    backward(True).write(tmp_path / "barrier")
    overlap = replay(tmp_path / "overlap", topo)
    barrier = replay(tmp_path / "barrier", topo)
    assert overlap.total_ns == pytest.approx(layers * compute + all_reduce, rel=1e-12)
    # after the barrier the five all-reduces start together and share every link, FIFO: L x one
    assert barrier.total_ns == pytest.approx(layers * compute + layers * all_reduce, rel=1e-12)
    assert barrier.total_ns - overlap.total_ns == pytest.approx((layers - 1) * all_reduce, rel=1e-12)
    exposed = overlap.ranks[0].exposed_communication_ns
    assert exposed == pytest.approx(all_reduce, rel=1e-12)  # only the last layer's all-reduce shows
    assert barrier.ranks[0].exposed_communication_ns == pytest.approx(layers * all_reduce, rel=1e-12)
    astra_rule = replay(tmp_path / "barrier", topo, concurrency="astra-sim")
    assert astra_rule.total_ns == pytest.approx(barrier.total_ns, rel=1e-12)  # serialized per rank instead: same sum


def test_concurrency_rule_serializes_gpu_work_but_not_cpu_work(tmp_path):
    b = WorkloadBuilder(1)
    b.comp(0, duration_ns=5000)
    b.comp(0, duration_ns=5000)
    node = b.comp(0, duration_ns=3000)
    b.nodes[0][node].attr[0].bool_val = True  # a CPU op
    b.write(tmp_path / "w")
    topo = ring_topology(2)
    assert replay(tmp_path / "w", topo).total_ns == 5000
    assert replay(tmp_path / "w", topo, concurrency="astra-sim").total_ns == 10000


def test_point_to_point_and_process_groups(tmp_path):
    b = WorkloadBuilder(4)
    c = b.comp(0, duration_ns=2000)
    b.send(0, 3, 8192, tag=7, deps=[c])
    r = b.recv(3, 0, 8192, tag=7)
    b.comp(3, duration_ns=1000, deps=[r])
    for rank in range(4):
        b.collective(rank, "all-gather", MIB, pg_name="pair0" if rank < 2 else "pair1")  # 1 MiB shards, 2 MiB out
    b.write(tmp_path / "w")
    topo = fully_connected(4, bandwidth_gbps=ONE_BYTE_PER_NS, latency_ns=100.0)
    groups = tmp_path / "groups.json"
    groups.write_text(json.dumps({"pair0": [1, 0], "pair1": [2, 3]}))
    result = replay(tmp_path / "w", topo, groups=ProcessGroups.load(groups, num_ranks=4))
    pair = predict_time(ring(Collective.ALL_GATHER, 2, size_bytes=2 * MIB), fully_connected(2, bandwidth_gbps=ONE_BYTE_PER_NS, latency_ns=100.0))
    assert [c.members for c in result.collectives] == [2, 2]
    assert [c.end_ns for c in result.collectives] == [pair, pair]
    # the message from 0 to 3 shares link 0->... with nothing: 2000 + 100 + 8192, then 1000 of compute
    assert result.ranks[3].finish_ns == max(pair, 2000 + 100 + 8192 + 1000)
    assert result.ranks[0].compute_ns == 2000
    assert result.links[0].messages >= 1


@pytest.mark.interop
def test_astra_sim_microbenchmark_with_its_custom_all_reduce(interop, astra_custom_allreduce):
    topo = load_topology(str(interop / "astra-sim/examples/network/analytical/Ring_8npus.yml"))
    algo = read_algorithm(astra_custom_allreduce, collective=Collective.ALL_REDUCE)
    result = replay(interop / MICRO / "all_reduce/8npus_1MB/all_reduce", topo, algorithms={Collective.ALL_REDUCE: algo}, network_model="astra-sim")
    assert result.total_ns == 90_174
    assert [r.finish_ns for r in result.ranks] == [90_174] * 8


@pytest.mark.interop
@pytest.mark.parametrize(
    ("workload", "n", "expected"),
    [
        ("all_gather/8npus_1MB/all_gather", 8, 7 * astra_step(8, 8 * MIB)),  # comm_size is each rank's 1 MiB shard
        ("all_gather/16npus_1MB/all_gather", 16, 15 * astra_step(16, 16 * MIB)),
        ("reduce_scatter/8npus_1MB/reduce_scatter", 8, 7 * astra_step(8, MIB) + 7),  # + 1 ns per reduction
        ("all_reduce/8npus_1MB/all_reduce", 8, 14 * astra_step(8, MIB) + 7),
    ],
)
def test_astra_sim_microbenchmarks_with_builtin_ring(interop, workload, n, expected):
    result = replay(interop / MICRO / workload, ring_topology(n), network_model="astra-sim")
    assert result.total_ns == expected


@pytest.mark.interop
def test_astra_sim_all_to_all_with_builtin_direct(interop):
    topo = fully_connected(8)
    result = replay(interop / MICRO / "all_to_all/8npus_1MB/all_to_all", topo, default_algorithm="direct")
    algo = direct(Collective.ALL_TO_ALL, 8, size_bytes=MIB)
    assert result.total_ns == predict_time(algo, topo)


@pytest.mark.interop
def test_foreign_algorithm_is_scaled_proportionally_with_a_warning(tmp_path, astra_custom_allreduce):
    single_collective_workload(tmp_path / "w", "all-reduce", 8, 2 * MIB)
    algo = read_algorithm(astra_custom_allreduce, collective=Collective.ALL_REDUCE)
    result = replay(tmp_path / "w", ring_topology(8), algorithms={Collective.ALL_REDUCE: algo}, network_model="astra-sim", rescale=True)
    assert result.total_ns == 14 * astra_step(8, 2 * MIB) + 7 * 7000
    assert any("scaled proportionally" in w for w in result.warnings)
    as_astra_sim = replay(tmp_path / "w", ring_topology(8), algorithms={Collective.ALL_REDUCE: algo}, network_model="astra-sim")
    assert as_astra_sim.total_ns == 90_174  # ASTRA-sim runs it at its 1 MiB whatever the call


def test_deadlock_is_reported_per_rank(tmp_path):
    b = WorkloadBuilder(2)
    for r in range(2):
        recv = b.recv(r, 1 - r, 4096)
        b.send(r, 1 - r, 4096, deps=[recv])
    b.write(tmp_path / "w")
    with pytest.raises(ReplayDeadlock, match=r"deadlock: 4 of 4 workload nodes never complete; rank 0: node 0 COMM_RECV from rank 1 tag 0; rank 1: node 0") as error:
        replay(tmp_path / "w", ring_topology(2))
    assert sorted(error.value.stuck) == [0, 1]


# ---------------------------------------------------------------------------- CLI
def test_cli_replay_json_and_trace(tmp_path, cli):
    single_collective_workload(tmp_path / "w", "all-reduce", 4, MIB)
    write_algorithm(ring(Collective.ALL_REDUCE, 4, size_bytes=MIB), tmp_path / "ar")
    trace = tmp_path / "out" / "trace.json"
    result = cli("replay", tmp_path / "w", "-t", "ring:4", "-a", tmp_path / "ar", "--json", "--trace", trace)
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["total_ns"] == predict_time(ring(Collective.ALL_REDUCE, 4, size_bytes=MIB), ring_topology(4))
    library = replay(tmp_path / "w", ring_topology(4), algorithms={Collective.ALL_REDUCE: read_algorithm(tmp_path / "ar")}, record_links=True)
    expected = library.as_dict(timeline=True)  # the library returns what the CLI prints, keys and all
    assert list(document) == ["schema_version", *expected] and expected["repairs"] == [] and expected["network_model"] == "default"
    assert document["collectives"][0]["algorithm"] == "ring" and len(document["ranks"]) == 4
    events = json.loads(trace.read_text())["traceEvents"]
    processes = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert processes == {**{r + 1: f"rank {r}" for r in range(4)}, 5: "links"}
    threads = {(e["pid"], e["args"]["name"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {(r + 1, "collectives") for r in range(4)} <= threads
    link_tracks = {name for pid, name in threads if pid == 5}
    assert link_tracks == {f"link {l}: {r}->{(r + 1) % 4}" for r, l in zip(range(4), range(4))}
    hops = [e for e in events if e["ph"] == "X" and e["pid"] == 5]
    assert len(hops) == 4 * 6  # 4 ranks x 6 ring steps, one hop each
    assert max(e["ts"] + e["dur"] for e in hops) * 1000 == pytest.approx(document["total_ns"])
    human = cli("replay", tmp_path / "w", "-t", "ring:4")
    assert human.exit_code == 0 and "busiest 4 of 4 links" in human.stdout


@pytest.mark.parametrize(
    ("setup", "args", "message"),
    [
        ("missing-rank", [], "missing rank file"),
        ("all-to-all", ["--default-algorithm", "all-to-all=ring"], "no algorithm for all-to-all: the built-in ring cannot make one (ring does not implement all-to-all)"),
        ("plain", ["-a", "all-reduce={algo}"], "has 2 ranks but the collective runs over a group of 4"),
        ("lonely-send", [], "has no matching COMM_RECV"),
        ("plain", ["-t", "ring:2"], "has only 2 NPUs"),
        ("plain", ["--network-model", "ns3"], "unknown network model 'ns3' (valid: default, astra-sim)"),
        ("plain", ["--concurrency", "gpu"], "unknown --concurrency"),
        ("plain", ["--comm-groups", "{missing}"], "cannot read communicator-group file"),
        ("plain", ["--default-algorithm", "best"], "unknown default algorithm"),
    ],
)
def test_cli_bad_input(tmp_path, cli, setup, args, message):
    b = WorkloadBuilder(4)
    if setup == "lonely-send":
        b.send(0, 1, 4096)
        for r in range(1, 4):
            b.comp(r, duration_ns=1000)
    else:
        for r in range(4):
            b.collective(r, "all-to-all" if setup == "all-to-all" else "all-reduce", MIB)
    b.write(tmp_path / "w")
    if setup == "missing-rank":
        (tmp_path / "w.2.et").unlink()
    write_algorithm(ring(Collective.ALL_REDUCE, 2, size_bytes=MIB), tmp_path / "algo")
    args = [a.format(algo=tmp_path / "algo", missing=tmp_path / "nope.json") for a in args]
    if "-t" not in args:
        args = ["-t", "ring:4", *args]
    result = cli("replay", tmp_path / "w", *args)
    assert result.exit_code == 2, result.stdout
    assert message in result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_cli_deadlock_exits_one(tmp_path, cli):
    b = WorkloadBuilder(2)
    for r in range(2):
        b.send(r, 1 - r, 4096, deps=[b.recv(r, 1 - r, 4096)])
    b.write(tmp_path / "w")
    result = cli("replay", tmp_path / "w", "-t", "ring:2")
    assert result.exit_code == 1 and "deadlock" in result.stderr and result.stderr.count("\n") == 1


def test_workload_attribute_errors_name_file_rank_and_node(tmp_path, cli):
    from chakra.schema.protobuf.et_def_pb2 import AttributeProto

    b = WorkloadBuilder(2)
    for r in range(2):
        b.collective(r, "all-gather", MIB)
    b.nodes[1][0].attr[2].CopyFrom(AttributeProto(name="comm_size", double_val=1.0))
    b.write(tmp_path / "w")
    result = cli("replay", tmp_path / "w", "-t", "ring:2")
    assert result.exit_code == 2
    assert result.stderr.strip().endswith("w.1.et: rank 1: node 0: attribute comm_size is double_val; ASTRA-sim needs an integer type")


def test_replay_still_takes_mode_for_one_release(tmp_path):
    single_collective_workload(tmp_path / "w", "all-reduce", 4, MIB)
    with pytest.warns(DeprecationWarning, match="mode is deprecated; use network_model"):
        old = replay(tmp_path / "w", ring_topology(4), mode="astra-sim")
    assert old.total_ns == replay(tmp_path / "w", ring_topology(4), network_model="astra-sim").total_ns
    assert old.network_model == "astra-sim"
    with pytest.raises(TypeError, match="not both"):
        replay(tmp_path / "w", ring_topology(4), mode="astra-sim", network_model="default")
    with pytest.raises(TypeError, match="unexpected keyword argument 'modes'"):
        replay(tmp_path / "w", ring_topology(4), modes="astra-sim")
