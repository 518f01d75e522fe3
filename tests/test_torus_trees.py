"""The translated torus trees (synth/torus_trees.py) and TACOS keeping them where they are faster."""

import numpy as np
import pytest

from chakra_collectives.ir import Collective
from chakra_collectives.network.collective import simulate_collective
from chakra_collectives.synth.channels import build_channels
from chakra_collectives.synth.lowering import all_gather_algorithm
from chakra_collectives.synth.tacos import TORUS_TREES, tacos
from chakra_collectives.synth.torus_trees import tree_all_gather, tree_template
from chakra_collectives.topology import mesh2d, ring, torus2d
from chakra_collectives.verify import verify_algorithm


def _torus_distance(rows, cols, a, b):
    ra, ca, rb, cb = a // cols, a % cols, b // cols, b % cols
    dr, dc = abs(ra - rb), abs(ca - cb)
    return min(dr, rows - dr) + min(dc, cols - dc)


@pytest.mark.parametrize("rows, cols, k, size", [(3, 5, 1, 2**20), (4, 4, 2, 2**20), (6, 8, 3, 5 * 2**20 + 7), (8, 8, 1, 2**26)])
def test_every_pair_once_verified_and_replayed_to_the_schedules_time(rows, cols, k, size):
    topology = torus2d(cols, rows)  # x: NPUs per row
    n = rows * cols
    channels = build_channels(topology, chunk_bytes=-(-size // (n * k)))
    schedule = tree_all_gather(topology, channels, k)
    message, chunk = schedule.chunks_of(np.arange(schedule.num_transfers))
    pairs = schedule.dst[message].astype(np.int64) * n * k + chunk
    assert len(np.unique(pairs)) == len(pairs) == n * (n - 1) * k  # every NPU gets every chunk it lacks, once
    assert not np.any(chunk // k == schedule.dst[message])
    # each chunk travels shortest paths: every message takes it one hop farther from its owner
    owners = chunk // k
    farther = [_torus_distance(rows, cols, int(o), int(d)) - _torus_distance(rows, cols, int(o), int(s))
               for o, s, d in zip(owners, schedule.src[message], schedule.dst[message])]
    assert set(farther) == {1}
    assert schedule.tag.max() + 1 <= rows // 2 + cols // 2  # at most the diameter's count of messages per link
    algorithm = all_gather_algorithm(schedule, size_bytes=size)
    assert verify_algorithm(algorithm).ok
    assert simulate_collective(algorithm, topology).time_ns == pytest.approx(schedule.time_ns, rel=1e-12)


@pytest.mark.parametrize("side", [16, 64])
def test_square_tori_load_every_link_within_two_chunks_of_its_share(side):
    dr, dc, direction, parent = tree_template(side, side)
    share = (side * side - 1) / 4
    loads = np.bincount(direction, minlength=4)
    assert loads.sum() == side * side - 1 and np.all(np.abs(loads - share) < 2)
    hops = np.abs(dr) + np.abs(dc)
    assert hops.max() == side  # the diameter: the tree's depth
    assert np.all(hops[parent[parent >= 0]] == hops[parent >= 0] - 1)


def test_other_fabrics_get_no_plan():
    for topology in (mesh2d(4, 4), ring(8), torus2d(2, 8)):
        assert tree_all_gather(topology, build_channels(topology, chunk_bytes=1024), 1) is None


def test_tacos_keeps_the_faster_of_plan_and_matchings():
    planned = tacos(torus2d(16, 16), Collective.ALL_GATHER, 2**26)  # the plan: 0.957 of the bound against 0.943
    assert planned.phases[0].plan == TORUS_TREES
    assert planned.algorithm.provenance["phase_plans"] == TORUS_TREES
    assert verify_algorithm(planned.algorithm).ok
    plan_time = tree_all_gather(torus2d(16, 16), build_channels(torus2d(16, 16), chunk_bytes=2**26 // 256), 1).time_ns
    assert planned.predicted_ns == plan_time
    matched = tacos(torus2d(8, 8), Collective.ALL_GATHER, 2**26)  # the matchings win on small tori
    assert not matched.phases[0].plan and "phase_plans" not in matched.algorithm.provenance
    assert matched.predicted_ns < tree_all_gather(torus2d(8, 8), build_channels(torus2d(8, 8), chunk_bytes=2**26 // 64), 1).time_ns
    mesh = tacos(mesh2d(8, 8), Collective.ALL_GATHER, 2**26)
    assert not mesh.phases[0].plan


def test_reduce_scatter_and_all_reduce_keep_one_run_matchings():
    result = tacos(torus2d(16, 16), Collective.ALL_REDUCE, 2**26)
    assert not any(p.plan for p in result.phases)


def test_large_square_tori_take_the_plan_without_matching(monkeypatch):
    import chakra_collectives.synth.tacos as tacos_module

    def no_matching(*args, **kwargs):
        raise AssertionError("matched a phase the plan settles")

    monkeypatch.setattr(tacos_module, "_match", no_matching)
    result = tacos(torus2d(32, 32), Collective.ALL_GATHER, 2**20)  # 2^20 (NPU, chunk) pairs: PLANNED_ONLY_PAIRS
    assert result.phases[0].plan == TORUS_TREES
    assert result.predicted_ns == result.phases[0].schedule.time_ns


def test_cli_writes_planned_files_that_verify(cli, tmp_path):
    import json

    from chakra_collectives.converters.chakra_et import read_algorithm

    made = cli("synth", "-t", "torus2d:16x16", "-c", "all-gather", "-s", "64MiB", "-a", "tacos", "-o", tmp_path / "ag", "--json")
    assert made.exit_code == 0, made.stdout
    assert json.loads(made.stdout)["efficiency"] > 0.95  # the plan: 0.957 of the bound (the matchings 0.943)
    algorithm = read_algorithm(tmp_path / "ag")
    assert algorithm.ops.multi_range and algorithm.provenance["phase_plans"] == TORUS_TREES
    checked = cli("verify", tmp_path / "ag", "--json")
    assert checked.exit_code == 0 and json.loads(checked.stdout)["ok"]


def test_summary_names_the_plan_instead_of_a_matching_seed(cli):
    """The human summary says the phase was planned, not which seed and merge ratio matched it
    (a planned phase has neither); a small torus that keeps its matching still names them."""
    planned = cli("synth", "-t", "torus2d:16x16", "-c", "all-gather", "-a", "tacos")
    assert planned.exit_code == 0, planned.stdout
    assert f"all-gather: {TORUS_TREES} (planned, not matched)" in planned.stdout and "merge ratio" not in planned.stdout
    matched = cli("synth", "-t", "torus2d:8x8", "-c", "all-gather", "-a", "tacos")
    assert matched.exit_code == 0, matched.stdout
    assert "all-gather: seed" in matched.stdout and "planned" not in matched.stdout
