"""The memory estimate of TACOS's planned All-Gather (torus trees) against what it measurably holds.

A planned torus All-Gather's messages carry one run of chunks per source NPU (``N (N - 1)`` runs
in all), which the pair and message models did not count: the estimate must bound the measured
peak and say where the memory goes."""

from __future__ import annotations

import tracemalloc

import pytest

from chakra_collectives.ir import Collective
from chakra_collectives.synth.footprint import PAIR_BASE, estimate
from chakra_collectives.synth.registry import SynthesisOptions
from chakra_collectives.synth.tacos import tacos
from chakra_collectives.topology import load_topology


def test_the_estimate_counts_the_plans_runs_and_bounds_its_measured_peak():
    """torus2d:32x32 (1,024 NPUs, planned without matching): the estimate above the traced peak
    of synthesis and lowering, and within 3x of it (an envelope, not a guess of a different size)."""
    topology = load_topology("torus2d:32x32")
    guess = estimate("tacos", topology, Collective.ALL_GATHER, 1024, SynthesisOptions(size_bytes=2**26))
    tracemalloc.start()
    try:
        found = tacos(topology, Collective.ALL_GATHER, 2**26)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    schedule = found.phases[0].schedule
    assert found.phases[0].plan == "torus trees"
    # the runs the estimate counts: at most one per (NPU, other NPU) pair, and not far fewer
    runs = len(schedule.runs()[0])
    assert 0.8 * 1024 * 1023 <= runs <= 1024 * 1023
    assert runs <= schedule.num_transfers + schedule.further_runs == 1024 * 1023   # the bound parts are sized by
    assert f"{schedule.num_transfers / 1000:.0f}k messages (torus trees, planned)" in guess.work
    assert "further runs" in guess.work and "planning" in guess.work and "bitsets" not in guess.work
    assert peak <= guess.nbytes - PAIR_BASE and guess.nbytes <= 3 * peak, (peak / 2**20, guess.nbytes / 2**20, guess.work)


@pytest.mark.parametrize("several_runs", [False, True])
def test_several_runs_are_counted_only_when_asked(several_runs):
    """--several-runs' All-Gather messages carry up to 4 runs: the estimate grows by their bytes."""
    topology = load_topology("mesh2d:32x32")
    plain = estimate("tacos", topology, Collective.ALL_GATHER, 1024, SynthesisOptions(size_bytes=2**26))
    asked = estimate("tacos", topology, Collective.ALL_GATHER, 1024, SynthesisOptions(size_bytes=2**26, several_runs=several_runs))
    assert (asked.nbytes > plain.nbytes) is several_runs
    assert ("further runs" in asked.work) is several_runs


def test_a_refused_planned_all_gather_says_where_the_memory_goes(cli, tmp_path):
    """torus2d:64x64 with -o, capped below the estimate: refused before planning, exit 4, one line
    naming the plan, its runs and the stage that peaks (the part's runs), nothing written."""
    result = cli("synth", "-t", "torus2d:64x64", "-c", "all-gather", "-s", "64MiB", "-a", "tacos", "-o", tmp_path / "ag", "--max-memory", "512MiB")
    assert result.exit_code == 4, result.output
    line = " ".join(result.output.split())
    assert "Traceback" not in line
    for phrase in ("needs about", "1.04M messages (torus trees, planned)", "15.7M further runs", "lowering", "a part", "planning", "lowered as written"):
        assert phrase in line, line
    assert list(tmp_path.iterdir()) == []
