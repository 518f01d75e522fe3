"""TACOS's per-K floor for process groups (:func:`~chakra_collectives.synth.tacos.group_floor_ns`):
below every time TACOS reaches, and what ends the chunk-count bracket when more chunks cannot pay."""

from __future__ import annotations

import pytest

from chakra_collectives.ir import Collective
from chakra_collectives.network.collective import predict_time
from chakra_collectives.synth import synthesize
from chakra_collectives.synth.registry import SynthesisOptions
from chakra_collectives.synth.tacos import group_floor_ns, tacos_for_group
from chakra_collectives.topology import load_topology, mesh2d

MIB = 2**20
ROW = (0, 1, 2, 3)


@pytest.mark.parametrize("spec, group", [("mesh2d:4x4", ROW), ("mesh2d:4x4", (0, 5, 10, 15)), ("dgx:2x4", (0, 4))])
@pytest.mark.parametrize("collective", [Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_REDUCE])
def test_the_floor_is_below_every_time_tacos_reaches(spec, group, collective):
    """Each single-chunk message holds its links for latency + chunk / bandwidth under the model,
    so no schedule TACOS makes can beat the floor -- the model's time of the written algorithm."""
    fabric = load_topology(spec)
    floors = []
    for k in (1, 4, 16):
        floor = group_floor_ns(fabric, collective, SynthesisOptions(size_bytes=8 * MIB, chunks_per_npu=k, group=group))
        found = tacos_for_group(fabric, group, collective, 8 * MIB, chunks_per_npu=k, trials=1)
        predicted = predict_time(found.algorithm, fabric)
        assert 0 < floor <= predicted
        floors.append(floor)
    assert floors == sorted(floors) and floors[0] < floors[-1]  # more messages, more latencies


def test_no_floor_without_a_group_or_under_the_astra_sim_model():
    fabric = mesh2d(4, 4)
    options = SynthesisOptions(size_bytes=MIB, chunks_per_npu=4)
    assert group_floor_ns(fabric, Collective.ALL_GATHER, options) == 0.0
    grouped = SynthesisOptions(size_bytes=MIB, chunks_per_npu=4, group=ROW)
    assert group_floor_ns(fabric, Collective.ALL_GATHER, grouped, "astra-sim") == 0.0
    assert group_floor_ns(fabric, Collective.ALL_TO_ALL, grouped) == 0.0  # merged messages: no per-chunk latency


def test_the_bracket_stops_where_the_floor_passes_the_fastest_found():
    """A mesh row's all-gather of 64 MiB: K = 32 is the fastest; K = 64's floor already exceeds it,
    so K = 64 is never synthesized -- and, made anyway, it is indeed not faster."""
    fabric = mesh2d(4, 4)
    found = synthesize(fabric, Collective.ALL_GATHER, 64 * MIB, algorithm="tacos", group=ROW, bounds="none")
    assert found.chunks_per_npu == 32 and 64 not in found.chunks_tried
    floor_64 = group_floor_ns(fabric, Collective.ALL_GATHER, SynthesisOptions(size_bytes=64 * MIB, chunks_per_npu=64, group=ROW))
    assert floor_64 >= found.predicted_ns
    forced = synthesize(fabric, Collective.ALL_GATHER, 64 * MIB, algorithm="tacos", group=ROW, chunks_per_npu=64, bounds="none")
    assert forced.predicted_ns >= found.predicted_ns


def test_best_reports_the_floor_it_stopped_tacos_by():
    fabric = mesh2d(4, 4)
    found = synthesize(fabric, Collective.ALL_GATHER, 64 * MIB, group=ROW)
    tacos = next(c for c in found.candidates if c.name == "tacos")
    assert 64 not in tacos.tried and tacos.stopped is not None and tacos.stopped.startswith("K=64 >=")
    assert found.predicted_ns <= tacos.predicted_ns
