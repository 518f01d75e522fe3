"""sample_traces/ is current and means what it says; chakra-coll demo does the main job."""

from __future__ import annotations

import json

import pytest

from chakra_collectives.converters.chakra_et import read_algorithm
from chakra_collectives.demo import run_demo
from chakra_collectives.replay import ProcessGroups, replay
from chakra_collectives.samples import write_samples
from chakra_collectives.topology import load_topology
from chakra_collectives.verify import verify_algorithm

from conftest import REPO
from test_astra_sim import links
from test_plot import assert_picture

SAMPLES = REPO / "sample_traces"


def test_samples_are_current(tmp_path):
    written = write_samples(tmp_path)
    fresh = {p.relative_to(tmp_path).as_posix() for p in written}
    committed = {p.relative_to(SAMPLES).as_posix() for p in SAMPLES.rglob("*") if p.is_file()}
    assert fresh == committed, "run `make samples` and commit sample_traces/"
    for name in sorted(fresh):
        assert (tmp_path / name).read_bytes() == (SAMPLES / name).read_bytes(), f"{name} is stale: run `make samples`"


def test_sample_topology_is_two_servers_with_rails():
    topology = load_topology(str(SAMPLES / "topology/two_servers.yaml"))
    bandwidth = {(l.src, l.dst): l.bandwidth_gbps for l in topology.links}
    for a in range(8):
        for b in range(8):
            if a != b:
                same_server = a // 4 == b // 4
                rail = a % 4 == b % 4
                assert bandwidth.get((a, b)) == (150.0 if same_server else 25.0 if rail else None)


def test_sample_training_step_closed_forms():
    """Compute per rank is the model's sum; the first all-reduce (the head's) starts after the forward
    pass and the head's backward; the rest of the all-reduces overlap the backward pass."""
    topology = load_topology(str(SAMPLES / "topology/two_servers.yaml"))
    tacos = read_algorithm(SAMPLES / "collectives/all_reduce_tacos")
    result = replay(SAMPLES / "workload/train_step", topology, algorithms={tacos.collective: tacos})
    forward = 40 + 4 * 120 + 40
    assert result.ranks[0].compute_ns == (forward + 2 * forward + 50) * 1000
    assert result.collectives[0].start_ns == (forward + 80) * 1000
    assert sorted(c.size_bytes for c in result.collectives) == [8 * 2**20] * 2 + [12 * 2**20] * 4
    rank = result.ranks[0]
    assert 0 < rank.exposed_communication_ns < rank.communication_ns


def test_sample_collectives_verify_and_hybrid_groups_replay():
    assert verify_algorithm(read_algorithm(SAMPLES / "collectives/all_reduce_tacos")).ok
    groups = ProcessGroups.load(SAMPLES / "workload/hybrid_step.json", num_ranks=8)
    result = replay(SAMPLES / "workload/hybrid_step", load_topology(str(SAMPLES / "topology/two_servers.yaml")), groups=groups)
    assert {c.members for c in result.collectives} == {2, 4}


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return run_demo(tmp_path_factory.mktemp("demo") / "out")


def test_demo_does_the_main_job(demo):
    assert [r.name for r in demo.runs] == ["tacos", "forestcoll", "ring", "biring", "direct", "rhd"]
    for run in demo.runs:
        assert run.report.ok, run.report
        assert read_algorithm(run.prefix).num_ranks == 8
        assert run.synthesis.bounds.best_ns <= run.synthesis.predicted_ns  # a lower bound is never beaten
        # the iteration can only be slower than its compute, and no slower than compute + all communication
        compute = run.replay.ranks[0].compute_ns
        assert compute < run.replay.total_ns
    tacos = demo.run("tacos").replay.total_ns
    aware = ("tacos", "forestcoll")
    # both topology-aware algorithms beat every baseline, alone and in the iteration
    for name in aware:
        ours = demo.run(name)
        for run in demo.runs:
            if run.name not in aware:
                assert ours.replay.total_ns < run.replay.total_ns and ours.synthesis.predicted_ns < run.synthesis.predicted_ns
    assert demo.speedup("ring") == demo.run("ring").replay.total_ns / tacos
    best = demo.best_baseline()
    assert best.name not in aware
    assert best.replay.total_ns == min(run.replay.total_ns for run in demo.runs if run.name not in aware)
    # every algorithm's chunks per NPU is its fastest, and the picture shows the algorithm the tables report
    for run in demo.runs:
        assert run.synthesis.predicted_ns == min(run.synthesis.chunks_tried.values())
    for picture in demo.pictures:
        assert_picture(picture)
    trace = json.loads(demo.trace.read_text())
    assert {e["pid"] for e in trace["traceEvents"]} == set(range(1, 10))  # 8 ranks, then the links
    assert links(load_topology(str(demo.astra_sim.directory / "network.yml"))) == links(demo.topology)
    document = demo.as_dict()
    assert json.loads(json.dumps(document)) == document


def test_demo_cli_summary(cli, tmp_path):
    result = cli("demo", "--output", tmp_path / "d")
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    for phrase in ("two-servers: 8 NPUs", "tacos", "ring", "biring", "direct", "✓ verified", "speedup", "faster than ring",
                   "trace ", "timeline.png", "AstraSim_Analytical_Congestion_Unaware", "Next, try:"):
        assert phrase in text, phrase
    assert "NOT verified" not in result.stdout
