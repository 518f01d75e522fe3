"""A process group's reduce-scatter (and all-reduce) over detours: the mirrored schedule's routed
messages pinned to leave when it says (:func:`~chakra_collectives.synth.lowering.mirrored_release`),
where that is faster than leaving as soon as their data is there."""

from __future__ import annotations

import numpy as np
import pytest

from chakra_collectives.ir import Collective
from chakra_collectives.network.collective import predict_time
from chakra_collectives.synth.lowering import reduce_scatter_algorithm
from chakra_collectives.synth.channels import build_channels
from chakra_collectives.synth.tacos import tacos_for_group
from chakra_collectives.topology import load_topology
from chakra_collectives.topology.groups import group_view
from chakra_collectives.verify import verify_algorithm

MIB = 2**20
COLUMN = tuple(range(0, 64, 8))


def test_a_pinned_reduce_scatter_runs_as_the_matcher_planned_it():
    """A torus column's reduce-scatter mirrors an all-gather whose schedule the model reproduces
    exactly; pinned, the reduce-scatter does too, where leaving eagerly lets messages overtake
    each other in the relays' queues (the model's time then exceeds the schedule's)."""
    fabric = load_topology("torus2d:8x8")
    found = tacos_for_group(fabric, COLUMN, Collective.REDUCE_SCATTER, 64 * MIB, chunks_per_npu=16)
    (phase,) = found.phases
    assert phase.pinned and found.algorithm.provenance["reduce_scatter"] == "pinned"
    assert verify_algorithm(found.algorithm).ok
    predicted = predict_time(found.algorithm, fabric, placement=COLUMN)
    assert predicted == pytest.approx(phase.schedule.time_ns, rel=1e-9)
    view = group_view(fabric, COLUMN).topology
    routing = build_channels(view, chunk_bytes=64 * MIB // (8 * 16), detours=True).routing()
    eager = reduce_scatter_algorithm(phase.schedule, size_bytes=64 * MIB, routing=routing)
    assert predict_time(eager, view) > predicted


def test_a_groups_all_reduce_with_a_pinned_reduce_scatter_is_proved_and_no_slower_than_its_phases():
    fabric = load_topology("torus2d:8x8")
    found = tacos_for_group(fabric, COLUMN, Collective.ALL_REDUCE, 64 * MIB, chunks_per_npu=16)
    assert found.phases[0].pinned and verify_algorithm(found.algorithm).ok
    predicted = predict_time(found.algorithm, fabric, placement=COLUMN)
    rs, ag = (p.schedule.time_ns for p in found.phases)
    assert predicted <= (rs + ag) * 1.05  # one phase after the other, within their seams


def test_a_mesh_rows_all_reduce_takes_both_phases_from_one_search():
    """A mesh row's detours come in twins (every route has its reverse), so the reduce-scatter is
    an all-gather matching renamed onto the twins: the same messages at the same times, each over
    its twin channel -- half the matchings of two searches -- and it is proved."""
    fabric = load_topology("mesh2d:8x8")
    row = tuple(range(8))
    found = tacos_for_group(fabric, row, Collective.ALL_REDUCE, 64 * MIB, chunks_per_npu=8)
    rs, ag = (p.schedule for p in found.phases)
    channels = build_channels(group_view(fabric, row).topology, chunk_bytes=64 * MIB // 64, detours=True)
    twins = channels.twins()
    assert twins is not None and (twins[twins + len(channels.routed)] == np.arange(-len(channels.routed), channels.num_direct)).all()
    same_trial = [p.seed for p in found.phases]
    if same_trial[0] == same_trial[1]:  # the best all-gather's own mirror won
        assert (rs.start == ag.start).all() and (rs.channel == twins[ag.channel + len(channels.routed)]).all()
    assert verify_algorithm(found.algorithm).ok
