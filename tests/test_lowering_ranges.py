"""The lowering's delivery index laid out a range of NPUs at a time (schedule.DELIVERY_BYTES):
the same operations, dependencies and files as with the whole index at once."""

from __future__ import annotations

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
