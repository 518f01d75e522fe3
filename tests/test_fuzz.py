"""The fuzz suite: hypothesis drives the campaign's mutations (fuzz/mutate.py) over every reader
and parser (fuzz/targets.py); only the tool's own one-line errors may come out. CI runs a
bounded budget; ``python fuzz/campaign.py`` and ``fuzz/atheris_run.py`` run longer."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))

from mutate import mutate  # noqa: E402
from targets import TARGETS, commands_on_rank_set, et_rank_set, mutator, ring_all_reduce_files, run, seeds  # noqa: E402
from trace_mutate import unpack  # noqa: E402

SEEDS = {name: seeds(name) for name in TARGETS}


RING_ALL_REDUCE = ring_all_reduce_files()


@pytest.mark.parametrize("name", sorted(TARGETS))
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(choice=st.integers(min_value=0), rng=st.randoms(use_true_random=False))
def test_mutated_inputs_end_in_the_tools_own_errors(name, choice, rng):
    starts = SEEDS[name]
    assert run(TARGETS[name], mutator(name)(starts[choice % len(starts)], rng)) in ("ok", "refused")


@settings(max_examples=60, deadline=None)
@given(rng=st.randoms(use_true_random=False), rank=st.integers(min_value=0, max_value=3))
def test_one_mutated_rank_of_a_real_set_is_refused_or_verified(rng, rank):
    """What verify and inspect meet: four rank files, one of them damaged."""
    from chakra_collectives.converters.chakra_et import write_algorithm
    from chakra_collectives.ir import Collective
    from chakra_collectives.synth.baselines import ring
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        paths = write_algorithm(ring(Collective.ALL_REDUCE, 4, size_bytes=2**20), Path(folder) / "a")
        files = [p.read_bytes() for p in paths]
    files[rank] = mutate(files[rank], rng)
    assert run(lambda _: et_rank_set(files), b"") in ("ok", "refused")


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rng=st.randoms(use_true_random=False), rank=st.integers(min_value=0, max_value=3))
def test_commands_on_a_damaged_rank_set_end_in_one_line(rng, rank):
    """verify, inspect, replay and export-msccl, in-process, on four rank files, one damaged."""
    files = list(RING_ALL_REDUCE)
    files[rank] = mutate(files[rank], rng)
    commands_on_rank_set(files)  # raises CommandCrash on a traceback


def test_commands_accept_the_undamaged_rank_set():
    assert commands_on_rank_set(RING_ALL_REDUCE) == [0, 0, 0, 0]


def test_the_seeds_themselves_are_accepted():
    for name, starts in SEEDS.items():
        for data in starts:
            assert run(TARGETS[name], data) == "ok", name


def test_mutations_change_their_input():
    rng = random.Random(1)
    data = SEEDS["msccl"][0]
    assert sum(mutate(data, rng) != data for _ in range(20)) >= 15


def test_trace_mutations_are_structured_and_change_their_input():
    """Most mutated trace sets still hold the same files, each still JSON: the damage is inside."""
    import json

    rng = random.Random(2)
    data = SEEDS["pytorch"][0]
    mutated = [mutator("pytorch")(data, rng) for _ in range(40)]
    assert sum(m != data for m in mutated) >= 36
    parsed = 0
    for m in mutated:
        for content in unpack(m).values():
            try:
                json.loads(content)
                parsed += 1
            except (ValueError, RecursionError):
                pass
    assert parsed >= 0.6 * sum(len(unpack(m)) for m in mutated)


REGRESSIONS = sorted((Path(__file__).parent / "fuzz_regressions").glob("*.bin"))


@pytest.mark.parametrize("path", REGRESSIONS, ids=[p.stem for p in REGRESSIONS])
def test_inputs_that_once_crashed_are_refused(path):
    """Every crash a campaign found (fuzz/crashes/TARGET-HASH.bin, copied here once fixed); a
    PyTorch trace set may also convert (what it wrote then replays: the target checks)."""
    name = path.stem.split("-")[0]
    assert run(TARGETS[name], path.read_bytes()) in (("ok", "refused") if name == "pytorch" else ("refused",))
