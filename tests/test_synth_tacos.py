"""TACOS: every synthesized algorithm verifies, and the network model agrees with the matcher."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chakra_collectives.converters.chakra_et import read_algorithm, write_algorithm
from chakra_collectives.errors import InputError
from chakra_collectives.ir import Buffer, Collective, OpKind
from chakra_collectives.network import predict_time
from chakra_collectives.synth.channels import build_channels
from chakra_collectives.synth.matcher import match_all_gather, message_caps
from chakra_collectives.synth.schedule import expand_runs
from chakra_collectives.synth.tacos import LARGE_MERGE_VARIANTS, MERGE_VARIANTS, REACHING_BACK, MergeVariant, default_variants, distinct_variants, tacos
from chakra_collectives.topology import Topology, load_topology
from chakra_collectives.verify import verify_algorithm
from network_helpers import transfer_ns

AG, RS, AR = Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_REDUCE
DIRECT = ["ring:4", "ring:5,bidirectional=false", "mesh2d:3x2", "torus2d:3x3", "hypercube:3", "fully-connected:4", "hetero-mesh2d:3x2"]
SWITCHED = ["switch:5", "dgx:2x3"]


@pytest.mark.parametrize("spec", DIRECT + SWITCHED)
@pytest.mark.parametrize("collective", [AG, RS, AR])
@pytest.mark.parametrize("k", [1, 2])
def test_every_synthesized_algorithm_verifies(spec, collective, k):
    topo = load_topology(spec)
    result = tacos(topo, collective, 3 * 2**20 + 1, chunks_per_npu=k, seed=k, trials=1)
    report = verify_algorithm(result.algorithm)
    assert report.ok, report.checks
    n = topo.num_npus
    ops = result.algorithm.ops
    sends = ops.kind == OpKind.SEND
    # every (NPU, chunk) pair is served exactly once: N-1 receptions per chunk in each phase
    assert int(ops.count[sends].sum()) == (2 if collective is AR else 1) * n * k * (n - 1)
    assert int(sends.sum()) == sum(p.schedule.num_transfers for p in result.phases)


@pytest.mark.parametrize("spec", DIRECT)
@pytest.mark.parametrize("collective", [AG, RS])
def test_model_replays_the_schedule_exactly_on_direct_links(spec, collective):
    topo = load_topology(spec)
    for seed in range(3):
        result = tacos(topo, collective, 2**20, chunks_per_npu=2, seed=seed, trials=1)
        assert predict_time(result.algorithm, topo) == pytest.approx(result.schedule_ns, rel=1e-12)


@pytest.mark.parametrize("spec", DIRECT)
def test_all_reduce_never_exceeds_its_two_phases(spec):
    # the All-Gather phase may start per chunk as soon as it is reduced: never later than planned
    topo = load_topology(spec)
    for seed in range(3):
        result = tacos(topo, AR, 2**20, chunks_per_npu=2, seed=seed)
        assert result.schedule_ns == pytest.approx(sum(p.time_ns for p in result.phases))
        assert predict_time(result.algorithm, topo) <= result.schedule_ns * (1 + 1e-12)


@pytest.mark.parametrize("spec", SWITCHED + ["switch:8", "dgx:2x4"])
def test_model_replays_all_gather_through_switches(spec):
    topo = load_topology(spec)
    for seed in range(3):
        result = tacos(topo, AG, 2**20, chunks_per_npu=2, seed=seed)
        assert predict_time(result.algorithm, topo) == pytest.approx(result.schedule_ns, rel=1e-12)


def test_ring_all_gather_reaches_its_closed_form():
    # unidirectional ring of N: every chunk needs N-1 hops and each link carries one chunk per step
    n, size = 6, 6 * 2**20
    topo = load_topology(f"ring:{n},bidirectional=false")
    result = tacos(topo, AG, size)
    hop = transfer_ns(topo.links[0], size // n)
    assert result.schedule_ns == pytest.approx((n - 1) * hop)


def test_chunks_are_padded_up():
    topo = load_topology("ring:3")
    result = tacos(topo, AG, 1000, chunks_per_npu=2)
    assert result.algorithm.chunk_count == 6 and result.algorithm.chunk_bytes() == 167  # ceil(1000 / 6)


def test_deterministic_and_trials_keep_the_best():
    topo = load_topology("torus2d:4x4")
    a = tacos(topo, AG, 2**20, chunks_per_npu=2, seed=7)
    b = tacos(topo, AG, 2**20, chunks_per_npu=2, seed=7)
    assert a.algorithm.ops.equals(b.algorithm.ops)
    singles = [tacos(topo, AG, 2**20, chunks_per_npu=2, seed=s, trials=1).schedule_ns for s in range(3, 7)]
    best = tacos(topo, AG, 2**20, chunks_per_npu=2, seed=3, trials=4)
    assert best.schedule_ns == min(singles) and best.seed == 3 + singles.index(min(singles))


def test_each_phase_keeps_its_own_best_seed():
    # a one-way ring plus a chord is not the same network reversed: the phases are searched apart
    topo = load_topology("ring:6,bidirectional=false")
    topo.add_link(0, 3, 50.0, 500.0)
    rs = [tacos(topo, RS, 6 * 2**20, seed=s, trials=1).schedule_ns for s in range(5)]
    ag = [tacos(topo, AG, 6 * 2**20, seed=s, trials=1).schedule_ns for s in range(5)]
    both = tacos(topo, AR, 6 * 2**20, seed=0, trials=5)
    assert [p.time_ns for p in both.phases] == [min(rs), min(ag)]
    assert both.seeds == (rs.index(min(rs)), ag.index(min(ag)))
    assert both.schedule_ns == min(rs) + min(ag) <= min(r + a for r, a in zip(rs, ag))
    assert verify_algorithm(both.algorithm).ok


def test_switch_reduce_scatter_is_judged_by_the_model():
    # mirrored in time, messages may meet in the switch queue in another order than planned
    topo = load_topology("switch:5")
    predicted = [predict_time(tacos(topo, RS, 5 * 2**18, chunks_per_npu=2, seed=s, trials=1).algorithm, topo) for s in range(4)]
    best = tacos(topo, RS, 5 * 2**18, chunks_per_npu=2, seed=0, trials=4)
    assert predict_time(best.algorithm, topo) == min(predicted) == best.phases[0].time_ns


def test_written_files_read_back_into_the_same_algorithm(tmp_path):
    algo = tacos(load_topology("dgx:2x2"), AR, 2**20, chunks_per_npu=2).algorithm
    write_algorithm(algo, tmp_path / "ar")
    assert read_algorithm(tmp_path / "ar").equals(algo)


def test_refuses_what_it_cannot_do():
    topo = load_topology("ring:4")
    with pytest.raises(InputError, match="not broadcast"):  # all-to-all, gather, scatter, patterns: tests/test_tacos_patterns.py
        tacos(topo, Collective.BROADCAST, 2**20)
    with pytest.raises(InputError, match="chunks per NPU must be positive"):
        tacos(topo, AG, 2**20, chunks_per_npu=0)


@st.composite
def random_topologies(draw):
    """Strongly connected random digraphs with random bandwidths and latencies."""
    n = draw(st.integers(2, 7))
    topo = Topology(n, name="random")
    order = draw(st.permutations(range(n)))
    speeds = st.sampled_from([12.5, 25.0, 50.0, 100.0])
    latencies = st.sampled_from([0.0, 100.0, 500.0])
    for a, b in zip(order, order[1:] + order[:1]):  # a directed cycle keeps it strongly connected
        topo.add_link(a, b, draw(speeds), draw(latencies))
    for a, b in draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=8)):
        if a != b and not any(l.src == a and l.dst == b for l in topo.links):
            topo.add_link(a, b, draw(speeds), draw(latencies))
    return topo


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    random_topologies(), st.integers(1, 3), st.integers(0, 100), st.sampled_from([2**20, 2**12]),
    st.sampled_from([0.0, 40.0, MergeVariant(40.0, extend_held=True), MergeVariant(40.0, extend_held=True, reach_back=True)]),
)
def test_random_asymmetric_topologies(topo, k, seed, size, ratio):
    # small sizes make latency dominate, so runs of chunks merge into messages
    assert nx.is_strongly_connected(nx.DiGraph([(l.src, l.dst) for l in topo.links]))
    for collective in (AG, RS, AR):
        result = tacos(topo, collective, size, chunks_per_npu=k, seed=seed, trials=1, merge_variants=(ratio,))
        assert verify_algorithm(result.algorithm).ok
        predicted = predict_time(result.algorithm, topo)
        if collective is AR:  # each chunk's All-Gather may start as soon as it is reduced
            assert predicted <= result.schedule_ns * (1 + 1e-12)
        else:
            assert predicted == pytest.approx(result.schedule_ns, rel=1e-12)


@pytest.mark.parametrize("ratio, extend, back", [(0.0, False, False), (40.0, False, False), (40.0, True, False), (40.0, True, True)])
def test_schedule_respects_links_and_never_repeats_a_delivery(ratio, extend, back):
    topo = load_topology("hetero-mesh2d:3x3")
    channels = build_channels(topo, chunk_bytes=2**12)  # 500 ns latency vs ~76 ns per chunk: merging pays
    k = 3
    schedule = match_all_gather(channels, k, seed=1, latency_ratio=ratio, extend_held=extend, reach_back=back)
    assert (schedule.count.max() > 1) == (ratio > 0)
    message, offset = expand_runs(schedule.count)
    chunk = schedule.chunk[message] + offset
    pairs = schedule.dst[message] * (9 * k) + chunk
    assert len(np.unique(pairs)) == len(pairs) == 9 * k * 8
    # a message never mixes chunks its sender owns with chunks it received
    owned = chunk // k == schedule.src[message]
    assert np.all(owned == owned[np.cumsum(schedule.count) - schedule.count][message])
    # each message lasts its link's latency + size/bandwidth, and one link carries one message at a time
    link = channels.direct_link[schedule.channel]
    expected = [transfer_ns(topo.links[l], m * 2**12) for l, m in zip(link.tolist(), schedule.count.tolist())]
    assert np.allclose(schedule.end - schedule.start, expected, rtol=1e-12)
    for channel in np.unique(schedule.channel):
        mine = np.flatnonzero(schedule.channel == channel)
        order = mine[np.argsort(schedule.start[mine])]
        assert np.all(schedule.start[order][1:] >= schedule.end[order][:-1])
        assert schedule.tag[order].tolist() == list(range(len(mine)))
    # a chunk leaves an NPU only after it arrived there
    arrival = {(int(d), int(c)): e for d, c, e in zip(schedule.dst[message], chunk, schedule.end[message])}
    for s, c, t in zip(schedule.src[message], chunk, schedule.start[message]):
        assert c // k == s or arrival[int(s), int(c)] <= t


def test_program_order_of_every_npu():
    # send_seq / recv_seq number each NPU's sends and receives in time order, receives first at one instant
    schedule = match_all_gather(build_channels(load_topology("torus2d:3x4"), chunk_bytes=2**12), 2, seed=3, latency_ratio=40)
    for npu in range(12):
        events = [(float(schedule.start[i]), 1, i, int(schedule.send_seq[i])) for i in np.flatnonzero(schedule.src == npu)]
        events += [(float(schedule.end[i]), 0, i, int(schedule.recv_seq[i])) for i in np.flatnonzero(schedule.dst == npu)]
        assert [seq for *_, seq in sorted(events)] == list(range(len(events)))


def test_merged_messages_verify_and_replay_exactly():
    topo = load_topology("torus2d:3x3")
    for collective in (AG, RS, AR):
        result = tacos(topo, collective, 9 * 2**14, chunks_per_npu=4, merge_variants=(40.0,))
        assert max(p.schedule.count.max() for p in result.phases) > 1
        assert verify_algorithm(result.algorithm).ok
        assert predict_time(result.algorithm, topo) == pytest.approx(result.schedule_ns, rel=1e-12)
        ops = result.algorithm.ops
        if collective is not AG:  # both kinds of Reduce-Scatter accumulators occur here
            assert ((ops.kind == OpKind.COPY) & (ops.dst_buf == Buffer.SCRATCH)).any()  # own slots, copied input
            assert ((ops.kind == OpKind.REDUCE) & (ops.src_buf == Buffer.INPUT)).any()  # in place, in a received message


def test_merging_pays_where_latency_dominates():
    # 16 KiB chunks on 50 GB/s links with 500 ns latency: single-chunk messages spend 62% of the time on latency
    topo = load_topology("torus2d:4x4")
    alone = tacos(topo, AG, 16 * 4 * 2**14, chunks_per_npu=4, merge_variants=(0.0,))
    merged = tacos(topo, AG, 16 * 4 * 2**14, chunks_per_npu=4)
    assert merged.schedule_ns < 0.8 * alone.schedule_ns


def test_runs_that_extend_what_the_destination_holds_are_variants():
    # 16 KiB chunks: merging pays; on mesh2d:4x4 extending held runs beats both plain variants
    topo = load_topology("mesh2d:4x4")
    plain = tacos(topo, AG, 2**20, merge_variants=(20.0, 40.0))
    default = tacos(topo, AG, 2**20)
    assert default.schedule_ns < plain.schedule_ns
    assert default.phases[0].variant.extend_held
    assert default.algorithm.provenance["phase_extend_held"] == "1"
    assert verify_algorithm(default.algorithm).ok
    assert predict_time(default.algorithm, topo) == pytest.approx(default.schedule_ns, rel=1e-12)
    # with chunks long enough that no message merges, the rule changes nothing: one variant runs
    channels = build_channels(topo, chunk_bytes=2**20)
    assert distinct_variants(channels, MERGE_VARIANTS) == [MergeVariant(20.0)]
    assert len(distinct_variants(build_channels(topo, chunk_bytes=2**14), MERGE_VARIANTS)) == 3
    assert default_variants(1024, 1) == LARGE_MERGE_VARIANTS and all(v.extend_held for v in LARGE_MERGE_VARIANTS)
    assert default_variants(1024, 1, switched=True) == default_variants(64, 1) == MERGE_VARIANTS
    # a huge phase (16K NPUs, the 40K All-Reduce) runs one matching, the variant that won at 4,096 NPUs; 8K keeps both
    assert default_variants(8192, 1) == LARGE_MERGE_VARIANTS and default_variants(16384, 1) == default_variants(39304, 1) == (REACHING_BACK,)


def test_message_caps_closed_form():
    channels = build_channels(load_topology("ring:4"), chunk_bytes=2**16)
    serial = 2**16 / (50 * 2**30 / 1e9)  # ns per chunk at 50 GB/s
    assert message_caps(channels, 20.0)[0].tolist() == [int(20 * 500 // serial)] * 8
    assert message_caps(channels, 0.0)[0].tolist() == [1] * 8


def test_compact_columns():
    result = tacos(load_topology("torus2d:4x4"), AG, 2**20)
    ops = result.algorithm.ops
    assert {ops.tag.dtype, ops.src_off.dtype, ops.count.dtype, ops.node_id.dtype, ops.dep_idx.dtype} == {np.dtype(np.int32)}
    assert ops.nbytes.strides == (0,) and ops.duration_ns.strides == (0,)  # "not applicable": no memory


@pytest.mark.parametrize("n", [5, 8, 16])
def test_no_uplink_idles_at_the_start_on_a_switch(n):
    # messages released at 0 may reach the switch at one instant: the model queues them in
    # program order, rank by rank, as the matcher does, so every NPU can send at once
    topo = load_topology(f"switch:{n}")
    schedule = match_all_gather(build_channels(topo, chunk_bytes=2**20), 1, seed=0)
    assert all(schedule.start[schedule.src == s].min() == 0 for s in range(n))
    result = tacos(topo, AG, n * 2**20, trials=1)
    assert predict_time(result.algorithm, topo) == pytest.approx(result.schedule_ns, rel=1e-12)


def test_matchings_in_parallel_processes_give_the_same_algorithm(monkeypatch):
    from chakra_collectives.synth import tacos as tacos_module

    topo = load_topology("torus2d:4x4")
    alone = tacos_module.tacos(topo, "all-reduce", 16 * 2**20, trials=2)
    monkeypatch.setattr(tacos_module, "PARALLEL_PAIRS", 0)  # every problem is "large"
    shared = tacos_module.tacos(topo, "all-reduce", 16 * 2**20, trials=2)
    assert shared.algorithm.equals(alone.algorithm) and shared.seeds == alone.seeds


@pytest.mark.parametrize("spec, k", [("torus2d:4x4", 4), ("mesh2d:4x4", 2)])
def test_lowering_in_small_blocks_gives_the_same_operations(monkeypatch, spec, k):
    """The per-chunk work of the lowering runs a block of messages at a time (so a 16,384-NPU
    schedule's temporaries stay small): blocks of 3 chunks give what one block gives."""
    from chakra_collectives.synth import schedule as schedules

    whole = tacos(load_topology(spec), "all-reduce", 2**20, chunks_per_npu=k, trials=1).algorithm
    monkeypatch.setattr(schedules, "RUN_BLOCK_CHUNKS", 3)
    schedule = match_all_gather(build_channels(load_topology(spec), chunk_bytes=2**20 // (16 * k)), k, seed=0, latency_ratio=40)
    assert schedule.count.max() > 1 and len(schedules.run_blocks(schedule.count)) > 1  # runs are merged, several blocks
    blocks = tacos(load_topology(spec), "all-reduce", 2**20, chunks_per_npu=k, trials=1).algorithm
    assert blocks.equals(whole)


def _bits_of(row: np.ndarray) -> set[int]:
    return {64 * w + b for w, word in enumerate(row.tolist()) for b in range(64) if word >> b & 1}


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 3), st.integers(0, 2**32), st.integers(2, 70), st.floats(0.1, 0.9))
def test_run_ladder_and_reach_back_follow_their_bitwise_definitions(words, seed, reach, density):
    """The shared ladder (runs of 2, 4, .. set bits) and the reach back, across words, against
    their definitions bit by bit: F(L) holds c when c .. c+L-1 are all set; the reach back adds
    every bit of ``through`` from which a bit of ``bits`` follows through ``through`` only, at
    most 2**ceil(log2(min(reach, 64))) - 1 positions on."""
    from chakra_collectives.synth.matcher import _reach_back, _run_ladder

    rng = np.random.default_rng(seed)
    width = 64 * words
    through_bits = rng.random((2, width)) < density
    start_bits = through_bits & (rng.random((2, width)) < 0.2)
    pack = lambda b: np.packbits(b, axis=1, bitorder="little").view(np.uint64)  # noqa: E731
    through, bits = pack(through_bits), pack(start_bits)
    top = 1 << max(0, (min(reach, 64) - 1).bit_length() - 1)
    ladder = _run_ladder(through, max(top, 16))
    for i, rung in enumerate(ladder):
        length = 1 << i
        for r in range(2):
            want = {c for c in range(width) if all(c + j < width and through_bits[r, c + j] for j in range(length))}
            assert _bits_of(rung[r]) == want
    span = (1 << (min(reach, 64) - 1).bit_length()) - 1
    reached = _reach_back(bits, ladder, reach)
    for r in range(2):
        want = set(_bits_of(bits[r]))
        for p in _bits_of(bits[r]):
            c = p - 1
            while c >= 0 and p - c <= span and through_bits[r, c]:
                want.add(c)
                c -= 1
        assert _bits_of(reached[r]) == want


@pytest.mark.parametrize("extend, back", [(False, False), (True, False), (True, True)])
def test_run_starts_worked_out_in_a_window_give_the_same_schedule(extend, back, monkeypatch):
    """The merged runs' starts worked out on the words around each row's pool only (the matcher's
    window) give the schedule worked out on whole rows, column for column."""
    from chakra_collectives.synth import matcher

    channels = build_channels(load_topology("torus2d:8x8"), chunk_bytes=2**10)  # 40 chunks per NPU: 40-word rows, long runs
    used = []
    around = matcher._Window.around.__func__

    def counted(cls, pool, before):
        window = around(cls, pool, before)
        used.append(window is not None)
        return window

    def schedule():
        return match_all_gather(channels, 40, seed=3, latency_ratio=40.0, extend_held=extend, reach_back=back)

    monkeypatch.setattr(matcher, "WINDOW_WORDS", 10**9)
    whole = schedule()
    monkeypatch.setattr(matcher, "WINDOW_WORDS", 1)
    monkeypatch.setattr(matcher, "WINDOW_SHARE", 1)
    monkeypatch.setattr(matcher._Window, "around", classmethod(counted))
    windowed = schedule()
    assert sum(used) > len(used) / 2
    for name in ("chunk", "count", "src", "dst", "start", "end", "channel", "tag", "send_seq", "recv_seq"):
        assert np.array_equal(getattr(windowed, name), getattr(whole, name)), name


@pytest.mark.parametrize("spec, k, extend, back, windowed", [
    ("torus2d:8x8", 40, True, False, True), ("torus2d:8x8", 40, True, True, True), ("mesh2d:4x4", 40, False, False, True),
    ("torus2d:8x8", 40, True, True, False), ("torus3d:3x3x3", 70, True, False, True), ("mesh2d:4x4", 70, False, True, True),
])
def test_compiled_rounds_give_the_numpy_schedule(spec, k, extend, back, windowed, monkeypatch):
    """The compiled rounds (:mod:`~chakra_collectives.synth.matcher_kernels`, numba; used from
    ``COMPILED_WORDS`` words a row, lowered here to reach small networks) give the numpy path's
    schedule column for column -- the same draws, windows (or whole rows) and runs; unequal
    shares (run edges inside a row's words) too."""
    pytest.importorskip("numba")  # an optional dependency (the dev extra has it)
    from chakra_collectives.synth import matcher

    channels = build_channels(load_topology(spec), chunk_bytes=2**10)
    n = channels.num_npus
    monkeypatch.setattr(matcher, "WINDOW_WORDS", 1 if windowed else 10**9)
    monkeypatch.setattr(matcher, "WINDOW_SHARE", 1)  # the window unless it is every word
    loaded = []
    kernels_of = matcher.compiled_kernels
    monkeypatch.setattr(matcher, "compiled_kernels", lambda words: loaded.append(kernels_of(words)) or loaded[-1])
    for owner_start in (None, np.concatenate([[0], np.cumsum(np.arange(n) % 3 + k - 1)])):
        total = None if owner_start is None else int(owner_start[-1])
        shares = {} if owner_start is None else {"owner_start": owner_start * (n * k) // total}

        def schedule():
            return match_all_gather(channels, k, seed=5, latency_ratio=40.0, extend_held=extend, reach_back=back, **shares)

        monkeypatch.setattr(matcher, "COMPILED_WORDS", 10**9)
        numpy_path = schedule()
        monkeypatch.setattr(matcher, "COMPILED_WORDS", 1)
        loaded.clear()
        compiled = schedule()
        assert loaded and loaded[-1] is not None and (compiled.count > 1).any()  # the compiled rounds ran, merging
        for name in ("chunk", "count", "src", "dst", "start", "end", "channel", "tag", "send_seq", "recv_seq"):
            assert np.array_equal(getattr(compiled, name), getattr(numpy_path, name)), name


@pytest.mark.parametrize("spec", ["torus2d:16x16", "switch:16"])
def test_the_record_columns_grow_with_the_messages(spec, monkeypatch):
    """The matcher's record columns start small and double as messages are recorded (not ``N^2 K``
    rows up front: 74 GB of address space at 39,304 NPUs), with the same schedule -- routed
    anchors (filled with a default) included -- and at most twice the rows the messages need."""
    from chakra_collectives.synth import matcher

    channels = build_channels(load_topology(spec), chunk_bytes=2**12)
    grown = []
    reserve = matcher._Matcher._reserve
    monkeypatch.setattr(matcher._Matcher, "_reserve", lambda self, extra: reserve(self, extra) or grown.append(len(self.rec["chunk"])))

    def schedule():
        return match_all_gather(channels, 4, seed=1, latency_ratio=40.0, extend_held=True)

    whole = schedule()
    monkeypatch.setattr(matcher, "FIRST_CAPACITY", 8)
    grown.clear()
    small_first = schedule()
    assert len(set(grown)) > 2 and grown[-1] < 2 * small_first.num_transfers < channels.num_npus**2 * 4
    for name in ("chunk", "count", "src", "dst", "start", "end", "channel", "tag", "send_seq", "recv_seq", "anchor", "anchor_is_send"):
        assert np.array_equal(getattr(small_first, name), getattr(whole, name)), name


def test_compiled_rounds_only_for_long_rows():
    """Small matchings never load numba (start-up time); 64-word rows do."""
    import subprocess
    import sys

    pytest.importorskip("numba")

    code = (
        "import sys\nfrom chakra_collectives.synth.channels import build_channels\n"
        "from chakra_collectives.synth.matcher import match_all_gather\nfrom chakra_collectives.topology import load_topology\n"
        "match_all_gather(build_channels(load_topology(sys.argv[1]), chunk_bytes=2**12), int(sys.argv[2]), latency_ratio=40.0)\n"
        "print('numba' in sys.modules)"
    )
    small = subprocess.run([sys.executable, "-c", code, "torus2d:8x8", "1"], capture_output=True, text=True, check=True).stdout
    long_rows = subprocess.run([sys.executable, "-c", code, "torus2d:8x8", "64"], capture_output=True, text=True, check=True).stdout
    assert small.split() == ["False"] and long_rows.split() == ["True"]
