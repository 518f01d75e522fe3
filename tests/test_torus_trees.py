"""The translated torus trees (synth/torus_trees.py) and TACOS keeping them where they are faster."""

import numpy as np
import pytest

from chakra_collectives.ir import Collective
from chakra_collectives.network.collective import simulate_collective
from chakra_collectives.synth.channels import build_channels
from chakra_collectives.synth.lowering import all_gather_algorithm
from chakra_collectives.synth.tacos import TORUS_TREES, tacos
from chakra_collectives.bounds import fast_lower_bounds
from chakra_collectives.synth.torus_trees import translated_floor_ns, translated_messages_floor, tree_all_gather, tree_template, tree_time_ns
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


def test_planned_runs_are_worked_out_alike_for_any_messages_asked():
    """The plan holds no runs (TreeRuns works them out): any messages asked, in any order, get the
    runs the whole schedule has for them -- maximal runs of consecutive chunks, ``count`` in all."""
    topology = torus2d(8, 6)
    schedule = tree_all_gather(topology, build_channels(topology, chunk_bytes=2**16), 3)
    assert schedule.more_ptr is None and schedule.run_plan is not None
    message, first, length = schedule.runs()
    assert (np.bincount(message, weights=length, minlength=schedule.num_transfers) == schedule.count).all()
    same = message[1:] == message[:-1]
    assert not np.any(same & (first[1:] == first[:-1] + length[:-1]))  # runs that touch would be one run
    assert (first[np.flatnonzero(np.append(True, ~same))] == schedule.chunk).all()  # each message's first run is its own column
    assert schedule.further_runs >= len(message) - schedule.num_transfers
    ids = np.random.default_rng(3).permutation(schedule.num_transfers)[:100]
    got = schedule.runs(ids)
    want = [np.concatenate([column[message == i] for i in ids]) for column in (message, first, length)]
    for a, b in zip(got, want):
        assert (a == b).all()


def test_a_planned_all_gather_lowered_range_by_range_is_the_whole(monkeypatch):
    """Every range of ranks of the plan, lowered alone (its runs worked out for its messages, two
    NPUs' delivery rows at a time), holds exactly the whole's operations and runs of those ranks."""
    from chakra_collectives.synth import schedule as schedule_module

    topology = torus2d(8, 8)
    schedule = tree_all_gather(topology, build_channels(topology, chunk_bytes=2**16), 2)
    whole = all_gather_algorithm(schedule, size_bytes=2**23)
    assert verify_algorithm(whole).ok
    bounds = whole.rank_bounds()
    monkeypatch.setattr(schedule_module, "DELIVERY_BYTES", 4 * 128 * 2)
    for ranks in (range(0, 1), range(1, 37), range(37, 64)):
        part = all_gather_algorithm(schedule, size_bytes=2**23, ranks=ranks)
        lo, hi = int(bounds[ranks.start]), int(bounds[ranks.stop])
        for name in ("kind", "peer", "tag", "src_buf", "src_off", "dst_off", "count"):
            assert (getattr(part.ops, name) == getattr(whole.ops, name)[lo:hi]).all(), name
        assert (part.ops.dep_idx == whole.ops.dep_idx[whole.ops.dep_ptr[lo] : whole.ops.dep_ptr[hi]] - lo).all()
        span = slice(int(whole.ops.more_ptr[lo]), int(whole.ops.more_ptr[hi]))
        assert (part.ops.more_ptr == whole.ops.more_ptr[lo : hi + 1] - whole.ops.more_ptr[lo]).all()
        assert (part.ops.more_off == whole.ops.more_off[span]).all() and (part.ops.more_count == whole.ops.more_count[span]).all()


def test_16384_npus_are_planned_within_the_message_limit():
    """torus2d:128x128 takes the plan (8.3M messages, its 268M runs never held); 256x256 would
    build 67M messages and is left to the matchings."""
    from chakra_collectives.synth.tacos import PLANNED_MESSAGES, plans_only
    from chakra_collectives.synth.torus_trees import tree_levels

    assert plans_only(torus2d(128, 128), 1) and 16384 * tree_levels(128, 128) <= PLANNED_MESSAGES
    assert not plans_only(torus2d(256, 256), 1)


def test_synth_without_output_summarizes_the_plan_unlowered(cli, monkeypatch):
    """Only summarized (no -o): the planned All-Gather is never lowered, and reports the operations
    its lowering has (one COPY and a SEND and RECV a message)."""
    import json

    from chakra_collectives.synth import lowering

    planned = tacos(torus2d(32, 32), Collective.ALL_GATHER, 2**26)
    schedule = planned.phases[0].schedule
    expected = 1024 + 2 * schedule.num_transfers
    assert planned.algorithm.num_ops == expected

    def not_lowered(*args, **kwargs):
        raise AssertionError("lowered an algorithm only summarized")

    monkeypatch.setattr(lowering, "_all_gather", not_lowered)
    made = cli("synth", "-t", "torus2d:32x32", "-c", "all-gather", "-s", "64MiB", "-a", "tacos", "--json")
    assert made.exit_code == 0, made.stdout
    summary = json.loads(made.stdout)
    assert summary["operations"] == expected and summary["efficiency"] > 0.94


@pytest.mark.parametrize("rows, cols", [(4, 4), (6, 8), (8, 8), (16, 16)])
def test_the_translated_floor_holds_for_the_trees(rows, cols):
    # the trees are a translated schedule along their own paths: each direction's links send at
    # least the floor's messages, and the plan takes at least the floor's time
    topology = torus2d(cols, rows)
    channels = build_channels(topology, chunk_bytes=2**14)
    schedule = tree_all_gather(topology, channels, 1)
    floor = translated_messages_floor(rows, cols)
    dr, dc = (schedule.dst.astype(int) // cols - schedule.src // cols) % rows, (schedule.dst.astype(int) % cols - schedule.src % cols) % cols
    direction = np.select([dc == 1, dc == cols - 1, dr == 1], [0, 1, 2], 3)
    link_messages = np.bincount(schedule.src.astype(np.int64) * 4 + direction, minlength=4 * rows * cols).reshape(-1, 4)
    assert np.all(link_messages >= floor)
    assert sum(floor) < link_messages.sum(axis=1).min()  # on every NPU the trees send more than the floor
    assert tree_time_ns(topology, channels, 1) >= translated_floor_ns(topology, channels, 1)
    assert translated_floor_ns(topology, channels, 1) >= fast_lower_bounds(topology, Collective.ALL_GATHER, 2**14 * rows * cols).best_ns
    assert translated_floor_ns(mesh2d(4, 4), build_channels(mesh2d(4, 4), chunk_bytes=2**14), 1) is None
