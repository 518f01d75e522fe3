"""The lowering's delivery index laid out a range of NPUs at a time (schedule.DELIVERY_BYTES):
the same operations, dependencies and files as with the whole index at once."""

from __future__ import annotations

import numpy as np
import pytest

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


def test_synth_writes_a_large_all_gather_in_parts(cli, tmp_path, monkeypatch):
    """``synth -o`` of an All-Gather that predicts itself from its schedule lowers it range by
    range as it writes (AlgorithmParts, write_parts): the same files and summary as the whole
    algorithm written by write_algorithm, which --astra-sim (it reads the whole) still gets."""
    import json

    from chakra_collectives.converters.chakra_et import write_algorithm
    from chakra_collectives.converters.chakra_et import writer as writer_module
    from chakra_collectives.ir.parts import AlgorithmParts
    from chakra_collectives.synth.synthesis import synthesize

    monkeypatch.setattr(writer_module, "PART_OPS", 50)  # parts of a few ranks each
    topology = load_topology("torus2d:6x6")
    parts = synthesize(topology, "all-gather", "1MiB", algorithm="tacos", in_parts=True)
    assert isinstance(parts.algorithm, AlgorithmParts)
    whole = synthesize(topology, "all-gather", "1MiB", algorithm="tacos")
    assert not isinstance(whole.algorithm, AlgorithmParts) and parts.algorithm.num_ops == whole.algorithm.num_ops
    assert not isinstance(synthesize(topology, "all-gather", "1MiB", in_parts=True).algorithm, AlgorithmParts)  # best compares whole ones
    write_algorithm(whole.algorithm, tmp_path / "whole" / "ag")
    result = cli("synth", "-t", "torus2d:6x6", "-c", "all-gather", "-s", "1MiB", "-a", "tacos", "-o", tmp_path / "parts" / "ag", "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["operations"] == whole.algorithm.num_ops and summary["predicted_ns"] == whole.predicted_ns
    for rank in range(36):
        assert (tmp_path / "parts" / f"ag.{rank}.et").read_bytes() == (tmp_path / "whole" / f"ag.{rank}.et").read_bytes()
