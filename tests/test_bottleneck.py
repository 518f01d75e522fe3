"""What limited a prediction: the busiest link, its busy and latency shares, and the verdict."""

from __future__ import annotations

import json

import numpy as np
import pytest

from chakra_collectives.ir import Collective
from chakra_collectives.network.bottleneck import Bottleneck, busiest_link
from chakra_collectives.network.collective import simulate_collective
from chakra_collectives.synth.baselines import ring
from chakra_collectives.topology import load_topology


@pytest.mark.parametrize(
    "busy, latency, verdict",
    [(1.0, 0.25, "latency-bound"), (0.5, 0.25, "latency-bound"), (0.5, 0.05, "dependency-bound"), (0.95, 0.05, "bandwidth-bound")],
)
def test_the_verdict_follows_the_busiest_links_shares(busy, latency, verdict):
    found = Bottleneck(src=0, dst=1, busy_fraction=busy, latency_fraction=latency, messages=4, bytes_per_message=1024.0)
    assert found.verdict == verdict
    assert found.describe().startswith(f"{verdict}: busiest link 0->1 busy {busy:.0%} of the time")


def test_the_busiest_link_is_measured_from_the_timed_run():
    """A ring all-gather on a ring: every link carries N-1 messages of one chunk, back to back."""
    topology = load_topology("ring:8")
    size = 8 * 2**20
    timing = simulate_collective(ring(Collective.ALL_GATHER, 8, size_bytes=size), topology)
    found = busiest_link(timing)
    link = topology.links[int(np.argmax(timing.links.busy_ns))]
    assert (found.src, found.dst) == (link.src, link.dst)
    assert found.messages == 7 and found.bytes_per_message == size / 8
    hop_ns = link.latency_ns + (size / 8) / (link.bandwidth_gbps * 2**30 / 1e9)
    assert found.latency_fraction == pytest.approx(link.latency_ns / hop_ns)
    assert found.busy_fraction == pytest.approx(7 * hop_ns / timing.time_ns)
    assert found.verdict == "bandwidth-bound"


def test_small_messages_are_reported_latency_bound_by_synth(cli):
    result = cli("synth", "-t", "mesh2d:4x4", "-c", "all-gather", "-s", "64KiB", "-a", "tacos", "--json")
    assert result.exit_code == 0, result.output
    limit = json.loads(result.stdout)["bottleneck"]
    assert limit["verdict"] == "latency-bound" and limit["latency_fraction"] >= 0.2
    shown = cli("synth", "-t", "mesh2d:4x4", "-c", "all-gather", "-s", "64KiB", "-a", "tacos")
    assert "limited by  latency-bound: busiest link" in shown.stdout


def test_a_producer_that_times_itself_still_says_what_limits_it(cli):
    """ForestColl predicts its own time; the bottleneck comes from the model's run of its trees."""
    result = cli("synth", "-t", "dgx:2x8", "-c", "all-gather", "-s", "1GiB", "-a", "forestcoll", "--json")
    assert result.exit_code == 0, result.output
    limit = json.loads(result.stdout)["bottleneck"]
    assert limit["verdict"] == "bandwidth-bound" and limit["busy_fraction"] > 0.9 and limit["messages"] >= 1
