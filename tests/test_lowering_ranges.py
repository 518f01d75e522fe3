"""The lowering a range of NPUs at a time: the delivery index (schedule.DELIVERY_BYTES), the
Reduce-Scatter's layout (lowering.REDUCE_SCATTER_PAIRS) and the parts the writer lowers
(ranks=, lowered_in_parts): the same operations, dependencies and files as the whole at once."""

from __future__ import annotations

import numpy as np
import pytest

from chakra_collectives.ir import Collective
from chakra_collectives.synth import lowering
from chakra_collectives.synth import schedule as schedule_module
from chakra_collectives.synth.tacos import tacos
from chakra_collectives.topology import load_topology
from chakra_collectives.verify import verify_algorithm

CASES = [
    ("mesh2d:5x5", "all-gather", 2, 2**22),  # merged messages of several chunks
    ("torus2d:4x4", "all-reduce", 1, 2**26),  # the All-Gather after a Reduce-Scatter
    ("switch:6", "all-gather", 2, 2**20),  # routed messages anchored to their release
]


@pytest.mark.parametrize("spec, collective, k, size", CASES)
def test_range_by_range_lowering_is_the_whole_one(spec, collective, k, size, monkeypatch):
    topology = load_topology(spec)
    whole = tacos(topology, collective, size, chunks_per_npu=k).algorithm
    monkeypatch.setattr(schedule_module, "DELIVERY_BYTES", 4 * topology.num_npus * k * 2)  # two NPUs' rows at a time
    found = tacos(topology, collective, size, chunks_per_npu=k)
    assert len(found.phases[-1].schedule.npu_ranges()) == -(-topology.num_npus // 2)
    assert found.algorithm.equals(whole)
    assert verify_algorithm(found.algorithm).ok


COLUMNS = ("rank", "kind", "peer", "tag", "src_buf", "src_off", "dst_buf", "dst_off", "count", "node_id", "route")


@pytest.mark.parametrize("spec, k, size", [("mesh2d:5x5", 2, 2**22), ("torus2d:6x6", 1, 2**26), ("switch:6", 2, 2**20)])
def test_a_range_of_ranks_is_lowered_as_the_whole_has_it(spec, k, size, monkeypatch):
    """Every range of ranks, lowered alone (its own delivery rows, two NPUs' at a time), holds
    exactly the whole All-Gather's operations of those ranks: columns and dependencies."""
    from chakra_collectives.synth.lowering import all_gather_algorithm

    topology = load_topology(spec)
    schedule = tacos(topology, "all-gather", size, chunks_per_npu=k).phases[0].schedule
    whole = all_gather_algorithm(schedule, size_bytes=size)
    bounds = whole.rank_bounds()
    monkeypatch.setattr(schedule_module, "DELIVERY_BYTES", 4 * topology.num_npus * k * 2)
    n = topology.num_npus
    for ranks in (range(0, 1), range(1, n // 2), range(n // 2, n), range(n - 1, n)):
        part = all_gather_algorithm(schedule, size_bytes=size, ranks=ranks)
        lo, hi = int(bounds[ranks.start]), int(bounds[ranks.stop])
        assert part.num_ops == hi - lo and part.num_ranks == n
        for name in COLUMNS:
            assert (getattr(part.ops, name) == getattr(whole.ops, name)[lo:hi]).all(), name
        assert (part.ops.dep_ptr == whole.ops.dep_ptr[lo : hi + 1] - whole.ops.dep_ptr[lo]).all()
        assert (part.ops.dep_idx == whole.ops.dep_idx[whole.ops.dep_ptr[lo] : whole.ops.dep_ptr[hi]] - lo).all()


def assert_ranks_as_in_whole(part, whole, ranks):
    """``part`` holds exactly ``whole``'s operations of ``ranks``: columns, dependencies, scratch."""
    bounds = whole.rank_bounds()
    lo, hi = int(bounds[ranks.start]), int(bounds[ranks.stop])
    assert part.num_ops == hi - lo and part.num_ranks == whole.num_ranks
    for name in COLUMNS:
        assert (getattr(part.ops, name) == getattr(whole.ops, name)[lo:hi]).all(), name
    assert (part.ops.dep_ptr == whole.ops.dep_ptr[lo : hi + 1] - whole.ops.dep_ptr[lo]).all()
    assert (part.ops.dep_idx == whole.ops.dep_idx[whole.ops.dep_ptr[lo] : whole.ops.dep_ptr[hi]] - lo).all()
    assert (part.scratch_chunks == whole.scratch_chunks).all()


def lowered(collective, schedules, **options):
    from chakra_collectives.synth.lowering import all_reduce_algorithm, reduce_scatter_algorithm

    if collective == "all-reduce":
        return all_reduce_algorithm(*schedules, **options)
    return reduce_scatter_algorithm(schedules[0], **options)


@pytest.mark.parametrize("spec, collective, k, size", [
    ("mesh2d:5x5", "reduce-scatter", 2, 2**22),  # merged messages: copied and in-place accumulators
    ("mesh2d:5x5", "all-reduce", 2, 2**22),
    ("torus2d:6x6", "all-reduce", 1, 2**26),
    ("hypercube:4", "reduce-scatter", 3, 2**24),
])
def test_a_reduce_scatter_is_laid_out_and_lowered_range_by_range_as_the_whole(spec, collective, k, size, monkeypatch):
    """The Reduce-Scatter's layout worked out two ranks at a time, and any range of ranks lowered
    alone (a Reduce-Scatter, or an All-Reduce whose All-Gather waits for the ranks' own sums),
    hold exactly the operations the layout of all ranks at once gives those ranks."""
    found = tacos(load_topology(spec), collective, size, chunks_per_npu=k)
    schedules = [p.schedule for p in found.phases]
    whole = lowered(collective, schedules, size_bytes=size)
    assert whole.num_ops == found.algorithm.num_ops
    n = schedules[0].num_npus
    monkeypatch.setattr(lowering, "REDUCE_SCATTER_PAIRS", 2 * n * k)
    monkeypatch.setattr(schedule_module, "DELIVERY_BYTES", 4 * n * k * 3)  # and the All-Gather's delivery rows three NPUs at a time
    assert_ranks_as_in_whole(lowered(collective, schedules, size_bytes=size), whole, range(n))
    for ranks in (range(0, 1), range(1, n // 2), range(n // 2, n), range(n - 1, n), range(3, 8)):
        assert_ranks_as_in_whole(lowered(collective, schedules, size_bytes=size, ranks=ranks), whole, ranks)
    parts = lowering.lowered_in_parts(Collective.parse(collective), schedules, size_bytes=size)
    assert (parts.ops_per_rank == np.diff(whole.rank_bounds())).all()
    for ranks in (range(0, 3), range(3, n)):
        assert_ranks_as_in_whole(parts.lower(ranks), whole, ranks)


@pytest.mark.parametrize("collective", ["reduce-scatter", "all-reduce"])
def test_a_pinned_reduce_scatter_over_detours_by_ranges_of_ranks(collective, monkeypatch):
    """Routed messages pinned to their mirrored release (anchors on the sender's own operations)
    and tags kept apart per pair of NPUs: range by range as in the whole."""
    from chakra_collectives.synth.channels import build_channels
    from chakra_collectives.synth.lowering import mirrored_release
    from chakra_collectives.synth.tacos import tacos_for_group
    from chakra_collectives.topology.groups import group_view

    fabric, column = load_topology("torus2d:8x8"), tuple(range(0, 64, 8))
    found = tacos_for_group(fabric, column, collective, 2**26, chunks_per_npu=16)
    assert found.phases[0].pinned
    schedules = [p.schedule for p in found.phases]
    routing = build_channels(group_view(fabric, column).topology, chunk_bytes=2**26 // (8 * 16), detours=True).routing()
    options = {"size_bytes": 2**26, "routing": routing, "release": mirrored_release(schedules[0])}
    whole = lowered(collective, schedules, **options)
    assert (whole.ops.kind == found.algorithm.ops.kind).all() and whole.num_ops == found.algorithm.num_ops
    monkeypatch.setattr(lowering, "REDUCE_SCATTER_PAIRS", 2 * 8 * 16)
    for ranks in (range(0, 8), range(0, 1), range(1, 4), range(2, 7), range(7, 8)):
        assert_ranks_as_in_whole(lowered(collective, schedules, ranks=ranks, **options), whole, ranks)


@pytest.mark.parametrize("workers", [1, 2])
def test_writing_range_by_range_gives_the_same_files(tmp_path, workers):
    """write_parts lowering a few ranks at a time (in one process or two) writes the bytes
    write_algorithm writes from the whole algorithm."""
    from chakra_collectives.converters.chakra_et import write_algorithm, write_parts
    from chakra_collectives.synth.lowering import all_gather_algorithm

    schedule = tacos(load_topology("mesh2d:5x5"), "all-gather", 2**22, chunks_per_npu=2).phases[0].schedule
    whole = all_gather_algorithm(schedule, size_bytes=2**22)
    expected = write_algorithm(whole, tmp_path / "whole" / "ag")
    lowered = []

    def lower(ranks):
        lowered.append(ranks)
        return all_gather_algorithm(schedule, size_bytes=2**22, ranks=ranks)

    written = write_parts(lower, np.diff(whole.rank_bounds()), tmp_path / "parts" / "ag", size_bytes=2**22, workers=workers, part_ops=100)
    assert [p.read_bytes() for p in written] == [p.read_bytes() for p in expected]
    if workers == 1:  # parts of at most 100 operations (or one rank): never the whole
        assert len(lowered) > 5 and all(len(r) < 25 for r in lowered)


def test_a_part_that_breaks_a_rule_leaves_nothing_written(tmp_path):
    """A part with a rank that has no operations (ASTRA-sim cannot load an empty file): the
    error names that rank's file and no rank file is left, not even the earlier parts'."""
    from chakra_collectives.converters.chakra_et import write_parts
    from chakra_collectives.errors import AlgorithmError
    from chakra_collectives.synth.lowering import all_gather_algorithm

    schedule = tacos(load_topology("mesh2d:3x3"), "all-gather", 2**20).phases[0].schedule
    lengths = 1 + schedule.program_lengths()

    def lower(ranks):
        return all_gather_algorithm(schedule, size_bytes=2**20, ranks=range(ranks.start, min(ranks.stop, 7)))  # ranks 7 and 8 come out empty

    with pytest.raises(AlgorithmError, match=r"ag\.7\.et.*no operations"):
        write_parts(lower, lengths, tmp_path / "ag", size_bytes=2**20, workers=1, part_ops=30)
    assert list(tmp_path.iterdir()) == []


def test_parts_that_would_not_fit_the_disk_are_refused_before_any_is_lowered(tmp_path, monkeypatch):
    from chakra_collectives import resources
    from chakra_collectives.converters.chakra_et import write_parts
    from chakra_collectives.errors import LimitError

    monkeypatch.setattr(resources, "free_disk_bytes", lambda folder: 10 * 2**10)  # 10 KiB left; 2,000 operations need 120 B each + 1 KiB a file
    lowered = []
    with pytest.raises(LimitError, match=r"needs about 238.4 KiB on disk \(2k operations in 4 files\), above the 10 KiB free"):
        write_parts(lowered.append, np.full(4, 500), tmp_path / "ag", size_bytes=2**20)
    assert lowered == [] and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("collective", ["all-gather", "reduce-scatter", "all-reduce"])
def test_synth_writes_tacos_in_parts(cli, tmp_path, monkeypatch, collective):
    """``synth -o`` of a TACOS collective that predicts itself from its schedules lowers it
    range by range as it writes (AlgorithmParts, write_parts): the same files and summary as the
    whole algorithm written by write_algorithm, which --astra-sim (it reads the whole) still gets."""
    import json

    from chakra_collectives.converters.chakra_et import write_algorithm
    from chakra_collectives.converters.chakra_et import writer as writer_module
    from chakra_collectives.ir.parts import AlgorithmParts
    from chakra_collectives.synth.synthesis import synthesize

    monkeypatch.setattr(writer_module, "PART_OPS", 50)  # parts of a few ranks each
    monkeypatch.setattr(lowering, "REDUCE_SCATTER_PAIRS", 36 * 4)  # layouts of four ranks
    topology = load_topology("torus2d:6x6")
    parts = synthesize(topology, collective, "1MiB", algorithm="tacos", in_parts=True)
    assert isinstance(parts.algorithm, AlgorithmParts)
    whole = synthesize(topology, collective, "1MiB", algorithm="tacos")
    assert not isinstance(whole.algorithm, AlgorithmParts) and parts.algorithm.num_ops == whole.algorithm.num_ops
    # best's candidates produced in this process come in parts too, chosen as the whole ones are
    best_parts, best_whole = synthesize(topology, collective, "1MiB", in_parts=True), synthesize(topology, collective, "1MiB")
    assert (best_parts.algorithm_name, best_parts.predicted_ns, best_parts.algorithm.num_ops) == (best_whole.algorithm_name, best_whole.predicted_ns, best_whole.algorithm.num_ops)
    write_algorithm(whole.algorithm, tmp_path / "whole" / "c")
    result = cli("synth", "-t", "torus2d:6x6", "-c", collective, "-s", "1MiB", "-a", "tacos", "-o", tmp_path / "parts" / "c", "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["operations"] == whole.algorithm.num_ops and summary["predicted_ns"] == whole.predicted_ns
    for rank in range(36):
        assert (tmp_path / "parts" / f"c.{rank}.et").read_bytes() == (tmp_path / "whole" / f"c.{rank}.et").read_bytes()


def test_messages_of_several_runs_are_lowered_range_by_range_as_the_whole_has_them(monkeypatch):
    """A matching whose messages carry up to 4 runs (``ranges``): every range of ranks lowered
    alone holds the whole All-Gather's operations of those ranks, further runs included."""
    from chakra_collectives.synth.channels import build_channels
    from chakra_collectives.synth.lowering import all_gather_algorithm
    from chakra_collectives.synth.matcher import match_all_gather

    topology = load_topology("torus2d:6x6")
    schedule = match_all_gather(build_channels(topology, chunk_bytes=2**14), 1, latency_ratio=40.0, extend_held=True, ranges=4)
    assert schedule.multi_run
    whole = all_gather_algorithm(schedule, size_bytes=36 * 2**14)
    assert verify_algorithm(whole).ok
    bounds = whole.rank_bounds()
    monkeypatch.setattr(schedule_module, "DELIVERY_BYTES", 4 * 36 * 2)
    for ranks in (range(0, 1), range(1, 18), range(18, 36)):
        part = all_gather_algorithm(schedule, size_bytes=36 * 2**14, ranks=ranks)
        lo, hi = int(bounds[ranks.start]), int(bounds[ranks.stop])
        for name in COLUMNS:
            assert (getattr(part.ops, name) == getattr(whole.ops, name)[lo:hi]).all(), name
        runs = whole.ops.more_ptr[lo : hi + 1] - whole.ops.more_ptr[lo]
        assert (part.ops.more_ptr == runs).all()
        span = slice(int(whole.ops.more_ptr[lo]), int(whole.ops.more_ptr[hi]))
        assert (part.ops.more_off == whole.ops.more_off[span]).all() and (part.ops.more_count == whole.ops.more_count[span]).all()
