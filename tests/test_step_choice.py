"""A producer's algorithm runs in a step only where it is faster there than the built-in (issue 24:
no group collective slower than its ring)."""

import json
import statistics

import jsonschema
import pytest
from schema_helpers import schema

from chakra_collectives.replay import ProcessGroups, replay
from chakra_collectives.topology import load_topology
from chakra_collectives.workload import mixture_of_experts, uniform_model


def moe_step(tmp_path, gradient):
    """An MoE step on dgx:4x4 (4 expert groups of 4 GPUs, one per server; 4 data-parallel groups
    across the servers): the data-parallel all-reduces of the two layers overlap on the NICs."""
    workload = mixture_of_experts(uniform_model(layers=2, forward="80us", gradient=gradient, activation="1MiB", optimizer="40us"), 4, 4)
    workload.write(tmp_path / "moe")
    return tmp_path / "moe", ProcessGroups.from_mapping(workload.groups, num_ranks=workload.num_ranks)


def data_parallel_mean(result):
    return statistics.mean(c.time_ns for c in result.collectives if c.collective == "all-reduce")


@pytest.fixture(scope="module")
def dgx():
    return load_topology("dgx:4x4")


def test_the_ring_runs_where_the_producer_is_slower_in_the_step(tmp_path, dgx):
    prefix, groups = moe_step(tmp_path, "16MiB")
    ring = replay(prefix, dgx, default_algorithm="*=ring", groups=groups)
    alone = replay(prefix, dgx, default_algorithm="*=forestcoll", groups=groups, in_step_choice=False)
    chosen = replay(prefix, dgx, default_algorithm="*=forestcoll", groups=groups)
    # planned for one call, ForestColl's all-reduces are slower than the rings when the layers' calls overlap
    assert data_parallel_mean(alone) > data_parallel_mean(ring)
    # chosen in the step: the rings run, and the step is the all-ring step (the all-to-alls run direct in both)
    assert data_parallel_mean(chosen) <= data_parallel_mean(ring)
    assert chosen.total_ns == ring.total_ns
    assert {c.algorithm for c in chosen.collectives if c.collective == "all-reduce"} == {"ring (built-in; forestcoll's not faster in the step)"}
    (choice,) = [c for c in chosen.choices if c.collective == "all-reduce"]
    assert choice.kept == "ring" and choice.producer_ns == pytest.approx(data_parallel_mean(alone))
    assert choice.builtin_ns == pytest.approx(data_parallel_mean(ring)) and choice.builtin_ns < choice.producer_ns
    assert len(choice.groups) == 4 and all(len(g) == 4 for g in choice.groups)
    assert choice.size_bytes == 16 * 2**20  # a layer's whole gradient: expert parallelism does not shard it
    assert any("forestcoll's all-reduce of 16,777,216 bytes over the 4 groups of 4 ranks does not make the step faster" in w for w in chosen.warnings)


def test_the_producer_runs_where_it_is_faster_in_the_step(tmp_path, dgx):
    prefix, groups = moe_step(tmp_path, "4MiB")
    ring = replay(prefix, dgx, default_algorithm="*=ring", groups=groups)
    chosen = replay(prefix, dgx, default_algorithm="*=forestcoll", groups=groups)
    (choice,) = [c for c in chosen.choices if c.collective == "all-reduce"]
    assert choice.kept == "forestcoll"
    # both timed in this very step: the producer's is what ran, the ring's what the all-ring step measures
    assert choice.producer_ns == pytest.approx(data_parallel_mean(chosen)) and choice.builtin_ns == pytest.approx(data_parallel_mean(ring))
    assert choice.producer_ns < choice.builtin_ns
    assert all("forestcoll (built-in; " in c.algorithm for c in chosen.collectives if c.collective == "all-reduce")
    assert not any("does not make the step faster" in w for w in chosen.warnings)
    assert choice.producer_step_ns == chosen.total_ns < choice.builtin_step_ns == ring.total_ns


def test_the_ring_runs_where_the_producer_is_faster_per_call_but_the_step_is_slower(tmp_path):
    # dgx:4x2: 4 expert groups of 2 GPUs (a server each), 2 data-parallel groups of 4 across the servers, three layers
    workload = mixture_of_experts(uniform_model(layers=3, forward="80us", gradient="8MiB", activation="1MiB", optimizer="40us"), 2, 4)
    workload.write(tmp_path / "moe")
    groups = ProcessGroups.from_mapping(workload.groups, num_ranks=workload.num_ranks)
    fabric = load_topology("dgx:4x2")
    ring = replay(tmp_path / "moe", fabric, default_algorithm="*=ring", groups=groups)
    alone = replay(tmp_path / "moe", fabric, default_algorithm="*=forestcoll", groups=groups, in_step_choice=False)
    chosen = replay(tmp_path / "moe", fabric, default_algorithm="*=forestcoll", groups=groups)
    # ForestColl's all-reduces are a little faster per call, but the step ends later with them
    assert data_parallel_mean(alone) < data_parallel_mean(ring) and alone.total_ns > ring.total_ns
    (choice,) = [c for c in chosen.choices if c.collective == "all-reduce"]
    assert choice.kept == "ring" and choice.producer_ns < choice.builtin_ns
    assert choice.producer_step_ns == alone.total_ns and choice.builtin_step_ns == ring.total_ns == chosen.total_ns


def test_cli_step_choices_in_json_and_off(cli, tmp_path):
    prefix, _ = moe_step(tmp_path, "16MiB")
    documents = {}
    for flag in ("--in-step-choice", "--no-in-step-choice"):
        result = cli("replay", prefix, "-t", "dgx:4x4", "--default-algorithm", "*=forestcoll", flag, "--json")
        assert result.exit_code == 0, result.output
        documents[flag] = json.loads(result.stdout)
        jsonschema.validate(documents[flag], schema("replay"))
    kept = {c["collective"]: c["kept"] for c in documents["--in-step-choice"]["step_choices"]}
    assert kept["all-reduce"] == "ring"
    assert documents["--no-in-step-choice"]["step_choices"] == []
    assert documents["--in-step-choice"]["total_ns"] < documents["--no-in-step-choice"]["total_ns"]


def test_a_family_the_fabric_carries_onto_a_planned_one_is_not_planned_again(monkeypatch):
    import chakra_collectives.synth.concurrent as concurrent
    from chakra_collectives.ir import Collective
    from chakra_collectives.replay import AlgorithmCatalog
    from chakra_collectives.verify import verify_algorithm

    planned = []
    real = concurrent.synthesize_concurrent

    def counting(topology, groups, *args, **kwargs):
        planned.append(sorted(groups.values()))
        return real(topology, groups, *args, **kwargs)

    monkeypatch.setattr(concurrent, "synthesize_concurrent", counting)
    torus = load_topology("torus2d:4x4")
    rows = {str(r + 1): tuple(range(4 * r, 4 * r + 4)) for r in range(4)}
    columns = {str(c + 5): tuple(range(c, 16, 4)) for c in range(4)}
    catalog = AlgorithmCatalog({}, default="*=forestcoll", groups={**rows, **columns})
    row, _ = catalog.get(Collective.ALL_REDUCE, rows["2"], torus, 2**20)
    column, label = catalog.get(Collective.ALL_REDUCE, columns["6"], torus, 2**20)
    assert len(planned) == 1   # the rows; the transposition carries their plan onto the columns
    assert "plan of 4 concurrent groups" in label
    assert column.placement == columns["6"] and verify_algorithm(column).ok
    assert len(column.ops) == len(row.ops)
    catalog.get(Collective.ALL_REDUCE, columns["6"], torus, 2**21)   # another size is planned
    assert len(planned) == 2


@pytest.mark.parametrize(("gradient", "written"), [("16MiB", "ring"), ("4MiB", "forestcoll")])
def test_workload_astra_sim_writes_what_the_step_chose(cli, tmp_path, gradient, written):
    from chakra_collectives.converters.chakra_et import read_algorithm

    result = cli("workload", "moe", "--ep", "4", "--dp", "4", "--layers", "2", "--forward", "80us", "--gradient", gradient, "--activation", "1MiB",
                 "-o", tmp_path / "moe", "--astra-sim", tmp_path / "astra", "-t", "dgx:4x4")
    assert result.exit_code == 0, result.output
    data_parallel = sorted((tmp_path / "astra" / "collectives").glob("all_reduce_g*.0.et"))
    assert len(data_parallel) == 4   # the 4 data-parallel groups, one call size
    for first in data_parallel:
        algo = read_algorithm(str(first)[: -len(".0.et")])
        assert (algo.name or "").startswith(written)
