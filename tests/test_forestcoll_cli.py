"""ForestColl through ``chakra-coll synth``, ``best``, the ET files, replay and MSCCL export."""

from __future__ import annotations

import json

import pytest

from chakra_collectives.converters.chakra_et import read_algorithm, single_collective_workload, write_algorithm
from chakra_collectives.converters.msccl import read_msccl, write_msccl
from chakra_collectives.ir import Collective
from chakra_collectives.network import predict_time
from chakra_collectives.replay import replay
from chakra_collectives.synth import synthesize
from chakra_collectives.topology import load_topology
from chakra_collectives.verify import verify_algorithm

from test_forestcoll import slow_direct_link


def test_synth_forestcoll_reports_the_optimum_and_writes_verified_files(cli, tmp_path):
    result = cli("synth", "-t", "a100:2", "-c", "all-gather", "-s", "1GiB", "-a", "forestcoll", "--trees-per-npu", "optimal", "--json", "-o", tmp_path / "ag")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    facts = summary["forestcoll"]
    assert (facts["trees_per_npu"], facts["U"], facts["optimal_U"]) == (13, "3/5", "3/5")
    assert f"{facts['algbw_gbps']:.3f}" == "346.667"  # ForestColl's own figure for 2 boxes
    # the bandwidth term is the cut bound; the prediction adds latency and pipelining
    assert facts["bandwidth_ns"] == pytest.approx(summary["bounds"]["cut_ns"], rel=1e-12)
    assert summary["predicted_ns"] >= facts["bandwidth_ns"]
    assert facts["trees"] == 16 * facts["grown_trees"]  # one root grown, the others by symmetry
    algo = read_algorithm(tmp_path / "ag")
    assert verify_algorithm(algo).ok and algo.num_ranks == 16


def test_summary_text_names_the_trees(cli):
    result = cli("synth", "-t", "dgx:2x4", "-c", "all-reduce", "-s", "64MiB", "-a", "forestcoll")
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())  # rows wrap at 80 columns
    for words in ("forestcoll k=", "trees per NPU", "bandwidth-optimal", "predicted with latency"):
        assert words in text


def test_best_considers_forestcoll_and_keeps_it_where_it_wins():
    result = synthesize(load_topology("a100:2"), "all-gather", "256MiB")
    names = {c.name for c in result.candidates}
    assert "forestcoll" in names and "tacos" in names
    assert result.algorithm_name == "forestcoll"
    assert result.predicted_ns == min(c.predicted_ns for c in result.candidates if c.predicted_ns is not None)


@pytest.mark.parametrize("collective", [Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_REDUCE])
def test_a_written_schedule_replays_in_its_predicted_time(tmp_path, collective):
    topology = load_topology("dgx:2x4")
    algo = synthesize(topology, collective, "16MiB", algorithm="forestcoll").algorithm
    write_algorithm(algo, tmp_path / "algo")
    size = 3 * 16 * 2**20  # replayed at another size
    # a workload's all-gather comm_size is each rank's shard (ASTRA-sim's convention)
    single_collective_workload(tmp_path / "w", collective, 8, size // 8 if collective is Collective.ALL_GATHER else size)
    result = replay(tmp_path / "w", topology, algorithms={collective: read_algorithm(tmp_path / "algo")})
    assert result.total_ns == predict_time(algo, topology, size_bytes=size)


def test_routes_replay_too(tmp_path):
    topology = slow_direct_link()
    made = synthesize(topology, "all-gather", "3MiB", algorithm="forestcoll", trees_per_npu="optimal")
    assert made.algorithm.routes
    write_algorithm(made.algorithm, tmp_path / "ag")
    single_collective_workload(tmp_path / "w", "all-gather", 3, 2**20)  # each rank's shard
    result = replay(tmp_path / "w", topology, algorithms={Collective.ALL_GATHER: read_algorithm(tmp_path / "ag")})
    assert result.total_ns == made.predicted_ns


def test_export_msccl_writes_it(tmp_path):
    algo = synthesize(load_topology("a100:1"), "all-reduce", "8MiB", algorithm="forestcoll").algorithm
    write_msccl(algo, tmp_path / "ar.xml")
    back = read_msccl(tmp_path / "ar.xml", size_bytes=8 * 2**20)
    assert verify_algorithm(back).ok and back.collective is Collective.ALL_REDUCE


def test_replay_default_algorithm_forestcoll(tmp_path):
    single_collective_workload(tmp_path / "w", "all-reduce", 8, 2**20)
    result = replay(tmp_path / "w", load_topology("dgx:2x4"), default_algorithm="forestcoll")
    assert result.total_ns > 0 and not result.warnings


AWKWARD = "npus: 3\nlinks:\n" + "".join(
    f"  - {{src: {a}, dst: {b}, bandwidth_gbps: {bw}, bidirectional: true}}\n"
    for a, b, bw in ((0, 1, 1.2345678901234567), (1, 2, 2.718281828459045), (2, 0, 3.141592653589793))
)


@pytest.mark.parametrize(
    ("args", "files", "message"),
    [
        (["-t", "ring:4", "-c", "all-to-all"], {}, "not all-to-all"),
        (["-t", "a100:2", "-c", "all-gather", "--trees-per-npu", "14"], {}, "14 trees per NPU is more than the optimum needs (13"),
        (["-t", "ring:4", "-c", "all-gather", "--trees-per-npu", "many"], {}, "--trees-per-npu must be a positive integer, 'optimal' or 'auto'"),
        (["-t", "ring:4", "-c", "all-gather", "--chunks-per-tree", "0"], {}, "chunks per tree must be positive, got 0"),
        (["-t", "{t.yaml}", "-c", "all-gather"], {"t.yaml": "npus: 3\nlinks:\n  - {src: 0, dst: 1, bidirectional: true}\n  - {src: 1, dst: 2}\n"}, "cannot reach"),
        (["-t", "{t.yaml}", "-c", "all-gather"], {"t.yaml": "npus: 2\nlinks:\n  - {src: 0, dst: 1, bandwidth_gbps: 0, bidirectional: true}\n"}, "t.yaml:3: at links/0/bandwidth_gbps: 0 is less than or equal to the minimum of 0"),
        (["-t", "{t.yaml}", "-c", "all-gather"], {"t.yaml": "npus: 2\nlinks:\n  - {src: 0, dst: 1, bandwidth_gbps: .inf, bidirectional: true}\n"}, "it must be a finite number from 0.001"),
        (["-t", "{t.yaml}", "-c", "all-gather", "--trees-per-npu", "optimal"], {"t.yaml": AWKWARD}, "trees per NPU (bandwidths with awkward ratios)"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(cli, tmp_path, args, files, message):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    args = [str(tmp_path / a[1:-1]) if a.startswith("{") else a for a in args]
    (tmp_path / "out").mkdir()
    result = cli("synth", *args, "-a", "forestcoll", "-s", "1MiB", "-o", tmp_path / "out" / "x")
    assert result.exit_code == 2, result.output
    assert message in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert list((tmp_path / "out").iterdir()) == []


def test_default_builds_few_trees_where_the_optimum_needs_too_many(cli, tmp_path):
    """auto does not build an optimum of more than AUTO_MAX_TREES trees per NPU: on bandwidths
    whose optimum needs thousands (refused with --trees-per-npu optimal), it writes one to three."""
    (tmp_path / "t.yaml").write_text(AWKWARD)
    result = cli("synth", "-t", tmp_path / "t.yaml", "-c", "all-gather", "-a", "forestcoll", "-s", "1MiB", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)["forestcoll"]
    assert report["trees_per_npu"] in (1, 2, 3) and report["optimal_trees_per_npu"] > 4096
