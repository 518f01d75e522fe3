"""The Python-integer matcher for small networks makes the numpy matcher's schedule, column for
column; the single-chunk floor is below every matching and stops the trials only where no seed
could do better."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chakra_collectives.ir import Collective
from chakra_collectives.synth.channels import build_channels
from chakra_collectives.synth.matcher import _Matcher, match_all_gather, message_caps
from chakra_collectives.synth.matching_floor import matching_floor_ns
from chakra_collectives.synth.small_matcher import SMALL_CHUNKS, match_small, uses_small
from chakra_collectives.synth.tacos import tacos
from chakra_collectives.topology import load_topology

COLUMNS = ("chunk", "count", "src", "dst", "start", "end", "channel", "tag", "send_seq", "recv_seq")
TOPOLOGIES = ("ring:5", "mesh2d:3x3", "torus2d:4x4", "hetero-mesh2d:3x3", "hypercube:2x2x2", "mesh2d:4x2")


def both(channels, k: int, seed: int, ratio: float, extend_held: bool, reach_back: bool):
    caps = message_caps(channels, ratio)
    numpy_made = _Matcher(channels, k, np.random.default_rng(seed), caps, extend_held=extend_held, reach_back=reach_back).run()
    small_made = match_small(channels, k, np.random.default_rng(seed), caps[0], extend_held=extend_held, reach_back=reach_back)
    return numpy_made, small_made


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    spec=st.sampled_from(TOPOLOGIES),
    k=st.integers(1, 4),
    chunk_bytes=st.sampled_from([2**10, 2**14, 2**16, 2**20]),
    reverse=st.booleans(),
    variant=st.sampled_from([(0.0, False, False), (20.0, False, False), (40.0, True, False), (40.0, True, True), (40.0, False, True)]),
    seed=st.integers(0, 2**16),
)
def test_small_matcher_makes_the_numpy_schedule(spec, k, chunk_bytes, reverse, variant, seed):
    channels = build_channels(load_topology(spec), chunk_bytes=chunk_bytes)
    if reverse:
        channels = channels.reversed()
    numpy_made, small_made = both(channels, k, seed, *variant)
    for column in COLUMNS:
        ours, theirs = getattr(small_made, column), getattr(numpy_made, column)
        assert ours.dtype == theirs.dtype and np.array_equal(ours, theirs), column
    assert (small_made.max_chunks, small_made.num_direct, small_made.num_routed) == (numpy_made.max_chunks, numpy_made.num_direct, numpy_made.num_routed)


def test_small_matcher_on_a_64_npu_mesh_with_merged_messages():
    # 64 chunks of 512 KiB in one word, runs of two chunks (ratio 40): the default command's K=2
    channels = build_channels(load_topology("mesh2d:8x8"), chunk_bytes=2**19)
    numpy_made, small_made = both(channels, 2, 3, 40.0, True, False)
    assert small_made.count.max() == 2
    assert all(np.array_equal(getattr(small_made, c), getattr(numpy_made, c)) for c in COLUMNS)


def test_which_matchings_are_small():
    assert uses_small(build_channels(load_topology("mesh2d:8x8"), chunk_bytes=2**20), 4)
    assert not uses_small(build_channels(load_topology("switch:8"), chunk_bytes=2**20), 1)  # routed channels
    assert not uses_small(build_channels(load_topology("mesh2d:8x8"), chunk_bytes=2**20), SMALL_CHUNKS // 64 + 1)


@pytest.mark.parametrize("spec", ["ring:6", "mesh2d:3x4", "hetero-mesh2d:3x3", "torus2d:3x3"])
@pytest.mark.parametrize("k, chunk_bytes, ratio", [(1, 2**20, 0.0), (3, 2**20, 0.0), (2, 2**16, 20.0), (3, 2**14, 40.0)])
def test_matching_floor_is_below_every_matching(spec, k, chunk_bytes, ratio):
    channels = build_channels(load_topology(spec), chunk_bytes=chunk_bytes)
    caps = message_caps(channels, ratio)[0]
    floor = matching_floor_ns(channels, k, caps)
    times = [match_all_gather(channels, k, seed=seed, latency_ratio=ratio, extend_held=extend).time_ns for seed in range(4) for extend in (False, True)]
    assert floor > 0 and min(times) >= floor
    # each NPU's k (N - 1) chunks over its in-links, at most cap per message: at least that many hops' serialization
    serial = channels.chunk_bytes / channels.link_rate[channels.direct_link]
    into = np.bincount(channels.direct_dst, weights=1 / serial, minlength=channels.num_npus)
    assert floor >= ((channels.num_npus - 1) * k / into).max() * (1 - 1e-9)


def test_matching_floor_has_none_with_switches():
    channels = build_channels(load_topology("switch:8"), chunk_bytes=2**20)
    assert matching_floor_ns(channels, 1, np.ones(channels.num_direct, dtype=np.int32)) == 0.0


def test_trials_stop_at_the_floor_with_the_result_of_all_trials():
    topo = load_topology("mesh2d:8x8")
    found = tacos(topo, Collective.ALL_GATHER, 64 * 2**20, chunks_per_npu=1, trials=4)
    channels = build_channels(topo, chunk_bytes=2**20)
    every = [match_all_gather(channels, 1, seed=seed, latency_ratio=20.0).time_ns for seed in range(4)]
    assert found.schedule_ns == min(every) == matching_floor_ns(channels, 1, np.ones(channels.num_direct, dtype=np.int32))
    assert found.seed == every.index(min(every))


@pytest.mark.parametrize("spec, k, size", [("mesh2d:8x8", 2, 64 * 2**20), ("mesh2d:4x4", 2, 64 * 2**20), ("torus2d:4x4", 1, 2**20), ("hetero-mesh2d:3x3", 2, 2**20)])
def test_trials_skipped_at_their_floor_keep_the_best_of_all(spec, k, size):
    from chakra_collectives.synth.tacos import MERGE_VARIANTS, distinct_variants

    topo = load_topology(spec)
    found = tacos(topo, Collective.ALL_GATHER, size, chunks_per_npu=k, trials=2)
    channels = build_channels(topo, chunk_bytes=-(-size // (topo.num_npus * k)))
    every = [
        (match_all_gather(channels, k, seed=seed, latency_ratio=v.latency_ratio, extend_held=v.extend_held, reach_back=v.reach_back).time_ns, seed, v)
        for seed in range(2) for v in distinct_variants(channels, MERGE_VARIANTS)
    ]
    fastest = min(every, key=lambda row: row[0])  # the first of the fastest
    assert (found.schedule_ns, found.seed, found.phases[0].variant) == fastest


@pytest.mark.parametrize("collective", [Collective.ALL_GATHER, Collective.ALL_REDUCE])
def test_trials_that_cannot_beat_the_time_to_beat_are_not_run(monkeypatch, collective):
    import chakra_collectives.synth.tacos as tacos_module
    from chakra_collectives.synth.tacos import MERGE_VARIANTS, distinct_variants

    topo, size, k = load_topology("mesh2d:8x8"), 64 * 2**20, 2
    real, runs = tacos_module._match, []
    monkeypatch.setattr(tacos_module, "_match", lambda channels, k, seed, variant, owner_start=None: runs.append((seed, variant)) or real(channels, k, seed, variant, owner_start))
    alone = tacos(topo, collective, size, chunks_per_npu=k)
    ran_alone = list(runs)
    runs.clear()
    to_beat = alone.predicted_ns + 1  # the result is faster: it must not change
    beaten = tacos(topo, collective, size, chunks_per_npu=k, to_beat_ns=to_beat)
    assert beaten.predicted_ns == alone.predicted_ns and beaten.seeds == alone.seeds
    assert [p.variant for p in beaten.phases] == [p.variant for p in alone.phases]
    assert all(np.array_equal(getattr(beaten.algorithm.ops, c), getattr(alone.algorithm.ops, c)) for c in ("rank", "kind", "peer", "tag", "count"))
    # not run: exactly the trials of the variants whose floor (per phase: the All-Reduce is its All-Gather twice) is not below
    channels = build_channels(topo, chunk_bytes=size // (64 * k))
    phases = 2 if collective is Collective.ALL_REDUCE else 1
    hopeless = {v for v in distinct_variants(channels, MERGE_VARIANTS) if phases * matching_floor_ns(channels, k, message_caps(channels, v.latency_ratio)[0]) >= to_beat}
    assert hopeless and {run for run in ran_alone if run[1] in hopeless} and runs == [run for run in ran_alone if run[1] not in hopeless]
    runs.clear()
    # a time no variant can beat: every trial runs, as without one
    tacos(topo, collective, size, chunks_per_npu=k, to_beat_ns=1.0)
    assert runs == ran_alone


def test_trials_put_off_run_when_the_others_end_above_their_floor(monkeypatch):
    """torus3d:4x4x4 at K=4 after 215.6 us at K=2: the ratio-20 trial (floor 215.6 us) is put off,
    the ratio-40 ones end at 220.3 us, above it: it runs last and is kept, as without a time to beat."""
    import chakra_collectives.synth.tacos as tacos_module

    topo, size, k = load_topology("torus3d:4x4x4"), 64 * 2**20, 4
    real, runs = tacos_module._match, []
    monkeypatch.setattr(tacos_module, "_match", lambda channels, k, seed, variant, owner_start=None: runs.append(variant.latency_ratio) or real(channels, k, seed, variant, owner_start))
    alone = tacos(topo, Collective.ALL_GATHER, size, chunks_per_npu=k)
    assert runs[0] == 20.0 and alone.phases[0].variant.latency_ratio == 20.0
    channels = build_channels(topo, chunk_bytes=size // (64 * k))
    floor = matching_floor_ns(channels, k, message_caps(channels, 20.0)[0])
    assert alone.schedule_ns == floor  # the ratio-20 trial is at its floor: what the others must be above
    runs.clear()
    beaten = tacos(topo, Collective.ALL_GATHER, size, chunks_per_npu=k, to_beat_ns=floor)
    assert runs[-1] == 20.0 and len(runs) >= 2 and all(ratio == 40.0 for ratio in runs[:-1])
    assert (beaten.schedule_ns, beaten.seed, beaten.phases[0].variant) == (alone.schedule_ns, alone.seed, alone.phases[0].variant)
    assert all(np.array_equal(getattr(beaten.algorithm.ops, c), getattr(alone.algorithm.ops, c)) for c in ("rank", "kind", "peer", "tag", "count"))
