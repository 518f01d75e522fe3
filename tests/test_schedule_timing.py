"""TACOS's prediction read from its schedule (synth/schedule_timing.py) against the network
model's run of the lowered algorithm: the same time, the same busiest link and link use."""

from __future__ import annotations

import numpy as np
import pytest

from chakra_collectives.network.bottleneck import busiest_link
from chakra_collectives.network.collective import simulate_collective
from chakra_collectives.synth import synthesize
from chakra_collectives.synth.channels import build_channels
from chakra_collectives.synth.schedule_timing import predicts_itself, schedule_link_use, schedule_prediction
from chakra_collectives.synth.tacos import tacos
from chakra_collectives.topology import load_topology

CASES = [
    ("mesh2d:6x6", "all-gather", 1, 2**26),
    ("torus2d:6x6", "all-reduce", 2, 2**26),
    ("hetero-mesh2d:4x4", "all-reduce", 1, 2**26),  # links of two speeds: the Reduce-Scatter searched on its own
    ("hypercube:2x2x4", "reduce-scatter", 4, 2**20),  # 16 KiB chunks: merged messages of several sizes
    ("ring:6", "all-gather", 3, 2**22),
]


@pytest.mark.parametrize("spec, collective, k, size", CASES)
def test_the_schedule_predicts_what_the_model_replays(spec, collective, k, size):
    topology = load_topology(spec)
    found = tacos(topology, collective, size, chunks_per_npu=k)
    channels = build_channels(topology, chunk_bytes=-(-size // (topology.num_npus * k)))
    timing = simulate_collective(found.algorithm, topology)
    schedules = [p.schedule for p in found.phases]
    time_ns, limit = schedule_prediction(schedules, channels)
    assert time_ns == timing.time_ns
    assert limit == busiest_link(timing)
    use = schedule_link_use(schedules, channels)
    assert np.array_equal(use.messages, timing.links.messages) and np.array_equal(use.bytes, timing.links.bytes)
    assert np.array_equal(use.busy_ns, timing.links.busy_ns)  # added up in the same order: bit for bit
    assert use.messages.sum() == sum(s.num_transfers for s in schedules)


def test_only_switchless_phases_skip_the_replay():
    assert predicts_itself(build_channels(load_topology("torus2d:32x32"), chunk_bytes=2**16))
    assert predicts_itself(build_channels(load_topology("mesh2d:4x4"), chunk_bytes=2**16))
    assert not predicts_itself(build_channels(load_topology("switch:8"), chunk_bytes=2**16))  # routed: the model's queues


def test_synthesize_reports_the_replays_prediction_without_running_it():
    """Odd sizes (hop times that are not whole binary fractions) and both phases of an
    All-Reduce: what synthesize reports is what the model's replay gives, bit for bit."""
    for spec, collective, size in (("mesh2d:4x4", "all-reduce", 1_000_003), ("hetero-mesh2d:3x3", "all-gather", 777_777), ("ring:5", "reduce-scatter", 3 * 10**7)):
        topology = load_topology(spec)
        result = synthesize(topology, collective, size, algorithm="tacos", bounds="none")
        timing = simulate_collective(result.algorithm, topology)
        assert result.predicted_ns == timing.time_ns
        assert result.bottleneck == busiest_link(timing)


def test_synthesize_reports_the_schedules_prediction_at_scale():
    """At 1,024 NPUs synthesize takes TACOS's own prediction: the same as the model's replay."""
    topology = load_topology("torus2d:32x32")
    result = synthesize(topology, "all-gather", 2**26, algorithm="tacos", bounds="none")
    timing = simulate_collective(result.algorithm, topology)
    assert result.predicted_ns == timing.time_ns == result.schedule_ns
    assert result.bottleneck == busiest_link(timing)


def test_the_estimate_counts_a_task_graph_only_where_the_model_replays():
    from chakra_collectives.ir import Collective
    from chakra_collectives.synth.footprint import tacos_footprint
    from chakra_collectives.synth.registry import SynthesisOptions

    options = SynthesisOptions(size_bytes=2**26)
    _, torus = tacos_footprint(load_topology("torus2d:128x128"), Collective.ALL_GATHER, 16384, options)
    assert "prediction read from the schedule" in torus
    assert "delivery rows 112 MiB" in torus  # 64 MiB of delivery rows + a block of runs, not the whole 1 GiB index
    _, switched = tacos_footprint(load_topology("switch:1024"), Collective.ALL_GATHER, 1024, options)
    assert "timing" in switched and "read from the schedule" not in switched
