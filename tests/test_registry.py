"""The synthesizer registry: a producer registered once appears in synth, best and replay."""

from __future__ import annotations

from dataclasses import replace

import pytest

from chakra_collectives.converters.chakra_et import single_collective_workload
from chakra_collectives.errors import InputError
from chakra_collectives.ir import Collective
from chakra_collectives.network import predict_time
from chakra_collectives.replay import replay
from chakra_collectives.synth import algorithm_names, applicable, synthesize
from chakra_collectives.synth import registry
from chakra_collectives.synth.baselines import ring
from chakra_collectives.synth.registry import SynthesisOptions, Synthesized, Synthesizer, get, register
from chakra_collectives.topology import load_topology
from chakra_collectives.verify import verify_algorithm


@pytest.fixture
def scratch_registry(monkeypatch):
    """The registry as it is, restored after the test (registrations are global)."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))


def test_a_registered_synthesizer_appears_in_synth_best_and_replay(scratch_registry, tmp_path):
    calls = []

    def make(topology, collective, num_ranks, options):
        calls.append((num_ranks, options.size_bytes, options.any_size))
        return Synthesized(ring(collective, num_ranks, size_bytes=options.size_bytes, chunks_per_npu=options.chunks_per_npu))

    register(Synthesizer("myring", make, (Collective.ALL_GATHER,), "a test producer"))
    topo = load_topology("ring:4")
    assert algorithm_names()[-1] == "myring" and "myring" in applicable(Collective.ALL_GATHER, 4)
    assert "myring" not in applicable(Collective.ALL_REDUCE, 4)

    result = synthesize(topo, "all-gather", "4MiB", algorithm="myring")
    assert result.algorithm_name == "myring" and verify_algorithm(result.algorithm).ok
    assert result.predicted_ns == predict_time(ring(Collective.ALL_GATHER, 4, size_bytes=4 * 2**20), topo)
    assert calls[-1] == (4, 4 * 2**20, False)

    best = synthesize(topo, "all-gather", "4MiB")
    assert "myring" in {c.name for c in best.candidates}

    single_collective_workload(tmp_path / "w", "all-gather", 4, 2**20)
    replayed = replay(tmp_path / "w", topo, default_algorithm="myring", in_step_choice=False)
    assert replayed.collectives[0].algorithm == "myring (built-in)"
    # timed against the built-in ring in the step, the same ring is not faster: the built-in runs
    assert replay(tmp_path / "w", topo, default_algorithm="myring").collectives[0].algorithm == "ring (built-in; myring's not faster in the step)"
    assert calls[-1] == (4, 4, True)  # built once per group size, for any size (the call scales it)


def test_a_whole_topology_synthesizer_serves_only_collectives_over_every_npu(scratch_registry, tmp_path):
    register(
        Synthesizer(
            "planner",
            lambda topology, collective, n, options: Synthesized(ring(collective, n, size_bytes=options.size_bytes)),
            (Collective.ALL_GATHER,),
            "plans for the links",
            whole_topology=True,
        )
    )
    single_collective_workload(tmp_path / "w", "all-gather", 4, 2**20)
    assert replay(tmp_path / "w", load_topology("ring:4"), default_algorithm="planner").total_ns > 0
    with pytest.raises(InputError, match=r"planner synthesizes for the whole topology \(8 NPUs\) and does not serve process groups; this collective runs over 4 ranks"):
        replay(tmp_path / "w", load_topology("ring:8"), default_algorithm="planner")


def test_a_synthesizer_that_serves_groups_is_asked_for_the_group(scratch_registry, tmp_path):
    asked = []

    def planner(topology, collective, n, options):
        asked.append(options.group)
        return Synthesized(replace(ring(collective, n, size_bytes=options.size_bytes), placement=options.group or ()))

    register(Synthesizer("planner", planner, (Collective.ALL_GATHER,), "plans for the links", whole_topology=True, groups=True))
    single_collective_workload(tmp_path / "w", "all-gather", 4, 2**20)
    assert replay(tmp_path / "w", load_topology("ring:8"), default_algorithm="planner").total_ns > 0
    assert asked == [(0, 1, 2, 3)]


def test_names_are_unique_and_lookups_say_what_exists(scratch_registry):
    with pytest.raises(ValueError, match="already registered"):
        register(Synthesizer("ring", get("ring").make, (Collective.ALL_GATHER,), "again"))
    with pytest.raises(ValueError):
        register(Synthesizer("best", get("ring").make, (Collective.ALL_GATHER,), "best is a strategy, not a producer"))
    with pytest.raises(InputError, match=r"unknown algorithm 'nope' \(valid: tacos, ring, biring, direct, rhd, tree, bfb, forestcoll, rails, milp, gridpipe, chains, flowcast\)"):
        get("nope")
    with pytest.raises(InputError, match="unknown algorithm 'nope'"):
        synthesize(load_topology("ring:4"), "all-gather", 1024, algorithm="nope")


def test_built_in_metadata_matches_what_the_producers_build():
    torus, servers = load_topology("torus2d:2x4"), load_topology("dgx:2x4")
    for synthesizer in registry.synthesizers():
        topo = torus if synthesizer.fits(torus) else servers  # rails: a fabric of islands
        assert synthesizer.fits(topo)
        for collective in Collective:
            if not synthesizer.supports(collective, 8) or collective in (Collective.CUSTOM, Collective.PATTERN):  # a pattern needs its file
                continue
            made = synthesizer.make(topo, collective, 8, SynthesisOptions(size_bytes=2**20, chunks_per_npu=2))
            assert made.algorithm.collective is collective and made.algorithm.num_ranks == 8
            assert verify_algorithm(made.algorithm).ok, (synthesizer.name, collective)
    assert get("tacos").whole_topology and not get("ring").whole_topology
    assert get("tacos").messages is None and get("ring").messages is not None


@pytest.mark.parametrize("bad, message", [
    ({"size_bytes": 0}, "collective size must be positive, got 0"),
    ({"size_bytes": 8, "chunks_per_npu": 0}, "chunks per NPU must be positive, got 0"),
    ({"size_bytes": 8, "trials": 0}, "trials must be positive, got 0"),
])
def test_options_are_checked_when_made(bad, message):
    with pytest.raises(InputError, match=message):
        SynthesisOptions(**bad)
