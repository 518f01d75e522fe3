"""The workload an algorithm's files read as, built without them (converters/chakra_et/written_workload.py),
against reading the files; and ``synth --astra-sim``'s prediction made from it against the model run on the files."""

from __future__ import annotations

import numpy as np
import pytest

from chakra_collectives.astra_sim import write_astra_sim_dir
from chakra_collectives.astra_system import SystemConfig, custom, read_comm_groups, simulate
from chakra_collectives.converters.chakra_et import write_algorithm
from chakra_collectives.converters.chakra_et.workload_reader import read_workload
from chakra_collectives.converters.chakra_et.workload_writer import WorkloadBuilder
from chakra_collectives.converters.chakra_et.written_workload import written_workload
from chakra_collectives.ir import Collective
from chakra_collectives.synth.baselines import direct, ring
from chakra_collectives.synth.tacos import tacos
from chakra_collectives.topology import load_topology
from chakra_collectives.workload import GeneratedWorkload, groups_path

MIB = 2**20
COLUMNS = ("rank", "node_id", "node_type", "duration_ns", "is_cpu_op", "comm_type", "comm_size", "peer", "tag", "dep_ptr", "dep_idx")


def algorithms():
    yield "ring all-reduce", ring(Collective.ALL_REDUCE, 8, size_bytes=MIB), {}
    yield "ring all-gather, rescaled", ring(Collective.ALL_GATHER, 6, size_bytes=MIB), {"size_bytes": 3 * MIB + 5}
    yield "tacos all-gather", tacos(load_topology("mesh2d:3x3"), Collective.ALL_GATHER, MIB, chunks_per_npu=2).algorithm, {}
    yield "tacos all-reduce, timed reductions", tacos(load_topology("mesh2d:2x3"), Collective.ALL_REDUCE, MIB).algorithm, {"reduce_bandwidth_gbps": 7.3}
    yield "direct all-to-all", direct(Collective.ALL_TO_ALL, 5, size_bytes=MIB), {}


@pytest.mark.parametrize("label, algo, options", list(algorithms()), ids=[case[0] for case in algorithms()])
def test_the_workload_built_from_the_algorithm_is_the_one_its_files_read_as(tmp_path, label, algo, options):
    write_algorithm(algo, tmp_path / "c", **options)
    read = read_workload(tmp_path / "c")
    built = written_workload(algo, tmp_path / "c", **options)
    assert built is not None
    for name in COLUMNS:
        mine, theirs = getattr(built, name), getattr(read, name)
        assert mine.dtype == theirs.dtype and np.array_equal(mine, theirs), (label, name)
    assert built.pg_name == read.pg_name and built.involved_dim == read.involved_dim
    assert built.paths == read.paths and built.num_ranks == read.num_ranks
    assert built.repairs.summary() == read.repairs.summary()
    if "reduce_bandwidth_gbps" in options:  # the reductions take time: the duration column is exercised
        assert read.duration_ns.max() > 0


def test_repeated_node_ids_are_left_to_reading_the_files():
    algo = ring(Collective.ALL_GATHER, 4, size_bytes=MIB)
    algo.ops.node_id[1] = algo.ops.node_id[0]
    assert written_workload(algo, "x") is None


def _from_the_files(written, comm_groups=None):
    """The model run on the directory's files, as ``replay --system`` runs it."""
    work = read_workload(written.directory / written.workload)
    groups = read_comm_groups(written.directory / comm_groups, work.num_ranks) if comm_groups else None
    config = SystemConfig.from_file(written.directory / "system.json")
    return simulate(work, written.network, config, backend=written.backend, comm_groups=groups, custom_base=written.directory)


@pytest.mark.parametrize("spec, make", [
    ("ring:8", lambda topology: ring(Collective.ALL_REDUCE, 8, size_bytes=MIB)),
    ("torus2d:3x3", lambda topology: tacos(topology, Collective.ALL_GATHER, MIB, chunks_per_npu=2).algorithm),
    ("ring:6", lambda topology: tacos(topology, Collective.ALL_REDUCE, MIB).algorithm),
    ("switch:6", lambda topology: direct(Collective.ALL_GATHER, 6, size_bytes=MIB)),  # contention: the event simulation
])
def test_the_written_directory_predicts_what_the_model_reads_from_its_files(tmp_path, monkeypatch, spec, make):
    topology = load_topology(spec)
    with monkeypatch.context() as patched:  # writing does not read the custom ETs back
        patched.setattr(custom, "read_workload", lambda prefix: pytest.fail(f"read {prefix} back"))
        written = write_astra_sim_dir(tmp_path / "d", topology, make(topology))
    expected = _from_the_files(written)
    assert written.expected_ns is not None and written.expected_ns == expected.makespan_ns


def test_with_process_groups_the_prediction_is_the_models_on_the_files(tmp_path):
    """Native all-gathers in two groups of 4, then a custom all-reduce over all 8 ranks: groups
    send the model to its event simulation, which runs the custom programs built in memory."""
    builder = WorkloadBuilder(8)
    groups = {"1": [0, 1, 2, 3], "2": [4, 5, 6, 7]}
    for rank in range(8):
        gathered = builder.collective(rank, Collective.ALL_GATHER, MIB // 4, pg_name="1" if rank < 4 else "2")
        builder.collective(rank, Collective.ALL_REDUCE, MIB, deps=[gathered])
    step = GeneratedWorkload("custom", "grouped", builder, groups=groups)
    written = write_astra_sim_dir(tmp_path / "d", load_topology("ring:8"), ring(Collective.ALL_REDUCE, 8, size_bytes=MIB), workload=step)
    assert written.comm_groups == str(groups_path(written.workload))
    expected = _from_the_files(written, written.comm_groups)
    assert expected.method == "events" and expected.finished
    assert written.expected_ns == expected.makespan_ns


def test_the_prediction_is_made_before_the_custom_ets_are_written(tmp_path, monkeypatch):
    """The writer forks; the model, run before it, costs less system time (README, ``synth --astra-sim``)."""
    import chakra_collectives.astra_sim as astra_sim
    import chakra_collectives.astra_system as astra_system

    order = []
    simulate_first, write_first = astra_system.simulate, astra_sim.write_algorithm_hashed
    monkeypatch.setattr(astra_system, "simulate", lambda *args, **kwargs: order.append("model") or simulate_first(*args, **kwargs))
    monkeypatch.setattr(astra_sim, "write_algorithm_hashed", lambda *args, **kwargs: order.append("ETs") or write_first(*args, **kwargs))
    written = write_astra_sim_dir(tmp_path / "d", load_topology("ring:8"), ring(Collective.ALL_REDUCE, 8, size_bytes=MIB))
    assert order == ["model", "ETs"]
    assert written.expected_ns == _from_the_files(written).makespan_ns


def test_ets_not_built_in_memory_are_written_before_the_model_reads_them(tmp_path, monkeypatch):
    import chakra_collectives.astra_sim as astra_sim

    algo = ring(Collective.ALL_REDUCE, 8, size_bytes=MIB)
    in_memory = write_astra_sim_dir(tmp_path / "built", load_topology("ring:8"), algo)
    monkeypatch.setattr(astra_sim, "written_workload", lambda *args, **kwargs: None)  # as for repeated node ids
    read = write_astra_sim_dir(tmp_path / "read", load_topology("ring:8"), algo)
    assert read.expected_ns is not None and read.expected_ns == in_memory.expected_ns
    assert sorted(p.name for p in (tmp_path / "read" / "collectives").iterdir()) == [f"all_reduce.{rank}.et" for rank in range(8)]
