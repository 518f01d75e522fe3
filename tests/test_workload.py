"""chakra-coll workload: ASTRA-sim's microbenchmarks, training iterations, hybrid groups, bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from chakra_collectives.ir import Collective
from chakra_collectives.network import predict_time
from chakra_collectives.converters.chakra_et import read_workload
from chakra_collectives.replay import ProcessGroups, replay
from chakra_collectives.synth.baselines import ring
from chakra_collectives.topology import fully_connected, torus2d
from chakra_collectives.workload import data_parallel, groups_path, hybrid_parallel, load_model_spec, microbenchmark, uniform_model

from et_nodes import attrs, decode

MIB = 2**20
MICRO = "astra-sim/examples/workload/microbenchmarks"
COMP, SEND, RECV, COLL, METADATA = 4, 5, 6, 7, 1


# ---------------------------------------------------------------------------- microbenchmarks
@pytest.mark.parametrize("name, ranks", [("all_reduce", 8), ("all_gather", 8), ("all_gather", 16), ("reduce_scatter", 8), ("all_to_all", 8)])
def test_microbenchmark_is_what_astra_sim_ships(interop, tmp_path, name, ranks):
    """Same version, node name, type and attributes (names, protobuf kinds, values) as ASTRA-sim's files.

    ASTRA-sim's generator numbers the single node of rank r as id r; ours is id 0 on every rank
    (ids only need to be unique per file), so ids are not compared.
    """
    shipped = interop / MICRO / name / f"{ranks}npus_1MB" / name
    microbenchmark(name, ranks, MIB).write(tmp_path / name)
    for rank in range(ranks):
        their_meta, theirs = decode(shipped.parent / f"{name}.{rank}.et")
        our_meta, ours = decode(tmp_path / f"{name}.{rank}.et")
        assert our_meta == their_meta
        assert [(n.name, n.type, attrs(n), list(n.data_deps)) for n in ours] == [(n.name, n.type, attrs(n), list(n.data_deps)) for n in theirs]


def test_microbenchmark_refuses_what_astra_sim_cannot_run():
    with pytest.raises(Exception, match="broadcast has no ASTRA-sim workload form"):
        microbenchmark("broadcast", 4, MIB)
    with pytest.raises(Exception, match="at least 2 ranks"):
        microbenchmark("all-reduce", 1, MIB)


# ---------------------------------------------------------------------------- data parallel
def _check_et_conventions(prefix, ranks):
    """Every rank file holds exactly the node types and attribute kinds ASTRA-sim's feeder reads."""
    for rank in range(ranks):
        metadata, nodes = decode(prefix.parent / f"{prefix.name}.{rank}.et")
        ids = [n.id for n in nodes]
        assert len(set(ids)) == len(ids)
        for node in nodes:
            a = attrs(node)
            assert node.type in (COMP, COLL), "no METADATA (or other) nodes in a workload"
            assert set(node.data_deps) <= set(ids) and node.id not in node.data_deps
            assert a["is_cpu_op"] == ("bool_val", False)
            if node.type == COMP:
                assert node.duration_micros > 0
                for key in ("num_ops", "tensor_size"):
                    assert key not in a or a[key][0] == "uint64_val"
            else:
                assert a["comm_type"][0] == "int64_val" and a["comm_size"][0] == "int64_val" and a["comm_size"][1] > 0
                assert "pg_name" not in a or a["pg_name"][0] == "string_val"
                assert "involved_dim" not in a or a["involved_dim"][0] == "bool_list"


def test_data_parallel_iteration_overlaps_gradients_with_backward(tmp_path):
    """Closed form: when each all-reduce is shorter than the next backward, only layer 0's shows."""
    layers, fwd, bwd, opt, grad, p = 5, 30_000, 150_000, 7_000, 4 * MIB, 4
    topo = fully_connected(p)
    all_reduce = predict_time(ring(Collective.ALL_REDUCE, p, size_bytes=grad), topo)
    assert all_reduce < bwd  # the premise of the closed form
    model = uniform_model(layers=layers, forward=f"{fwd}ns", backward=f"{bwd}ns", gradient=grad, optimizer=f"{opt}ns")
    data_parallel(model, p).write(tmp_path / "step")
    _check_et_conventions(tmp_path / "step", p)
    result = replay(tmp_path / "step", topo, default_algorithm="ring")
    assert result.total_ns == pytest.approx(layers * (fwd + bwd) + all_reduce + opt, rel=1e-12)
    assert [c.start_ns for c in result.collectives] == pytest.approx([layers * fwd + k * bwd for k in range(1, layers + 1)], rel=1e-12)
    assert result.ranks[0].compute_ns == layers * (fwd + bwd) + opt
    assert result.ranks[0].exposed_communication_ns == pytest.approx(all_reduce, rel=1e-12)


def test_each_all_reduce_waits_for_its_own_backward_only(tmp_path):
    spec = tmp_path / "m.yaml"
    spec.write_text("layers:\n  - {name: a, forward: 1us, gradient: 1MiB}\n  - {name: b, forward: 2us, gradient: 2MiB, repeat: 2}\noptimizer: 3us\n")
    model = load_model_spec(spec)
    assert [l.name for l in model.layers] == ["a", "b0", "b1"] and model.layers[1].backward_ns == 4000
    data_parallel(model, 2).write(tmp_path / "w")
    work = read_workload(tmp_path / "w")
    deps = lambda i: work.dep_idx[work.dep_ptr[i] : work.dep_ptr[i + 1]].tolist()  # noqa: E731
    rank0 = np.flatnonzero(work.rank == 0)
    kinds = work.node_type[rank0].tolist()
    colls = [i for i in rank0 if work.node_type[i] == COLL]
    assert kinds == [COMP] * 3 + [COMP, COLL] * 3 + [COMP]
    for c in colls:
        (dep,) = deps(c)
        assert work.node_type[dep] == COMP  # the backward right before it
    assert deps(rank0[-1]) == colls  # the optimizer step waits for every all-reduce
    assert sorted(int(work.comm_size[c]) for c in colls) == [MIB, 2 * MIB, 2 * MIB]


def test_roofline_attributes_when_the_spec_gives_operations(tmp_path):
    spec = tmp_path / "m.yaml"
    spec.write_text("layers:\n  - {forward: 10us, gradient: 4KiB, activation: 1KiB, ops: 1.0e9}\n")
    hybrid_parallel(load_model_spec(spec), 2, 2).write(tmp_path / "h")
    _, nodes = decode(tmp_path / "h.0.et")
    forward, backward = [n for n in nodes if n.type == COMP][:2]
    assert attrs(forward)["num_ops"] == ("uint64_val", 500_000_000)  # 1e9 / tp 2
    assert attrs(backward)["num_ops"] == ("uint64_val", 1_000_000_000)  # twice the forward, / tp 2
    assert attrs(forward)["tensor_size"] == ("uint64_val", 2048)


# ---------------------------------------------------------------------------- hybrid
def test_hybrid_groups_partition_the_ranks_and_collectives_run_over_them(tmp_path):
    tp, dp, layers = 2, 4, 3
    model = uniform_model(layers=layers, forward="20us", gradient="8MiB", activation="1MiB", optimizer="10us")
    paths = hybrid_parallel(model, tp, dp, involved_dim=True).write(tmp_path / "h")
    assert paths[-1] == groups_path(tmp_path / "h") and len(paths) == tp * dp + 1
    groups = json.loads(groups_path(tmp_path / "h").read_text())
    assert "0" not in groups and all(name.isdigit() for name in groups)
    tensor = [g for g in groups.values() if len(g) == tp]
    data = [g for g in groups.values() if len(g) == dp]
    assert len(tensor) == dp and len(data) == tp
    for family in (tensor, data):  # each family partitions the ranks
        assert sorted(r for g in family for r in g) == list(range(tp * dp))
    assert all(g == list(range(g[0], g[0] + tp)) for g in tensor)  # tensor groups: consecutive ranks
    _check_et_conventions(tmp_path / "h", tp * dp)
    _, nodes = decode(tmp_path / "h.0.et")
    dims = {tuple(attrs(n)["involved_dim"][1]) for n in nodes if n.type == COLL}
    assert dims == {(True, False), (False, True)}
    result = replay(tmp_path / "h", torus2d(2, 4), groups=ProcessGroups.load(groups_path(tmp_path / "h"), num_ranks=tp * dp))
    by_size = {}
    for c in result.collectives:
        by_size.setdefault((c.members, c.size_bytes), 0)
        by_size[(c.members, c.size_bytes)] += 1
    # per tensor group 2 activation all-reduces per layer; per data group one gradient shard per layer
    assert by_size == {(tp, MIB): dp * 2 * layers, (dp, 8 * MIB // tp): tp * layers}


def test_hybrid_divides_compute_by_the_tensor_degree(tmp_path):
    model = uniform_model(layers=2, forward="40us", gradient="2MiB", activation="1MiB", optimizer="20us")
    work = hybrid_parallel(model, 4, 2)
    assert work.summary()["compute_ns_per_rank"] == (2 * (40 + 80) + 20) * 1000 / 4


def test_hybrid_rounds_compute_that_tp_does_not_divide_and_says_by_how_much(tmp_path):
    """10us / tp 3 = 3.33 us is stored as 3 us, 20us / 3 = 6.67 us as 7 us: each rank's step has
    2 layers x (3 + 7) = 20 us of compute instead of 2 x 30 / 3 = 20 us -- here the roundings cancel;
    with forward 10us and backward 10us both round down (2 x 2 x 3 = 12 us instead of 13.33 us)."""
    cancel = hybrid_parallel(uniform_model(layers=2, forward="10us", gradient="3MiB", activation="1MiB"), 3, 2)
    assert cancel.summary()["compute_ns_per_rank"] == 20_000
    assert len(cancel.notes) == 1 and "3.333 µs -> 3 µs, 6.667 µs -> 7 µs" in cancel.notes[0] and "(+0 ns, +0.00%)" in cancel.notes[0]
    down = hybrid_parallel(uniform_model(layers=2, forward="10us", backward="10us", gradient="3MiB", activation="1MiB"), 3, 2)
    assert down.summary()["compute_ns_per_rank"] == 12_000
    assert "12 µs instead of 13.33 µs (-1.333 µs, -10.00%)" in down.notes[0]
    down.write(tmp_path / "h")
    for rank in range(6):  # every rank stores the rounded durations
        _, nodes = decode(tmp_path / f"h.{rank}.et")
        assert sorted({n.duration_micros for n in nodes if n.type == COMP}) == [3]
    assert hybrid_parallel(uniform_model(layers=2, forward="12us", gradient="3MiB", activation="1MiB"), 3, 2).notes == []


def test_cli_hybrid_defaults_work_for_every_small_degree(tmp_path, cli):
    """Defaults never fail: forward 50us / tp 4 = 12.5 us is written as 13 us (one note)."""
    result = cli("workload", "hybrid", "--tp", "4", "--dp", "4", "-o", tmp_path / "hy")
    assert result.exit_code == 0, result.output
    assert result.stdout.count("note:") == 1 and "12.5 µs -> 13 µs" in result.stdout
    assert "157 µs instead of 155 µs" in " ".join(result.stdout.split())  # 4 x 12.5 + 4 x 25 + 5 optimizer = 155
    for tp, notes in ((3, 1), (5, 0), (8, 1)):  # 50, 100 and 20 us divide into whole microseconds by 5 only
        result = cli("workload", "hybrid", "--tp", str(tp), "--dp", "2", "-o", tmp_path / f"t{tp}", "--json")
        assert result.exit_code == 0, result.output
        assert len(json.loads(result.stdout)["notes"]) == notes


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"tp": 1, "dp": 4}, "needs --tp and --dp of at least 2"),
        ({"tp": 2, "dp": 2, "activation": None}, "layer 'layer0' has no activation size"),
    ],
)
def test_hybrid_bad_input(kwargs, message):
    tp, dp = kwargs.pop("tp"), kwargs.pop("dp")
    model = uniform_model(layers=1, **{"forward": "12us", "gradient": "1MiB", "activation": "1MiB", **kwargs})
    with pytest.raises(Exception, match=message):
        hybrid_parallel(model, tp, dp)


# ---------------------------------------------------------------------------- spec files and CLI
@pytest.mark.parametrize(
    "text, message",
    [
        ("layers:\n  - {forward: 10us, gradient: 1MiB}\n  - {forward: 10us, gradient: 1Mbit}\n", "m.yaml:3: layer 'layer1' gradient: malformed size '1Mbit'"),
        ("layers:\n  - {forward: 10us, gradient: 1MiB, colour: red}\n", "m.yaml:2: at layers/0: unknown key(s)"),
        ("layers:\n  - {forward: 1500ns, gradient: 1MiB}\n", "m.yaml:2: layer 'layer0' forward: 1500 ns is not a whole number of microseconds"),
        ("name: x\nlayers:\n  - {forward: 10us}\n", "m.yaml:3: at layers/0: 'gradient' is a required property"),
        ("layers: [\n", "m.yaml:2: invalid YAML"),
        ("layers: []\n", "m.yaml:1: at layers: [] should be non-empty"),
        ("optimizer: -5us\nlayers:\n  - {forward: 10us, gradient: 1MiB}\n", "m.yaml:1: optimizer: malformed duration '-5us'"),
    ],
)
def test_spec_errors_name_file_and_line(tmp_path, cli, text, message):
    (tmp_path / "m.yaml").write_text(text)
    result = cli("workload", "data-parallel", "--spec", tmp_path / "m.yaml", "-o", tmp_path / "out" / "w")
    assert result.exit_code == 2
    assert message in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["data-parallel", "--spec", "{spec}", "--layers", "3"], "give either --spec or the layer flags, not both (--layers"),
        (["data-parallel", "--forward", "1.5us"], "--forward: 1500 ns is not a whole number of microseconds"),
        (["data-parallel", "--gradient", "0"], "--gradient: malformed size '0': must be positive"),
        (["data-parallel", "-n", "1"], "at least 2 ranks"),
        (["microbenchmark", "-c", "scatterish"], "unknown collective 'scatterish'"),
        (["hybrid", "--tp", "2", "--dp", "1"], "needs --tp and --dp of at least 2"),
        (["data-parallel", "--spec", "{missing}"], "cannot read model spec: No such file or directory"),
    ],
)
def test_cli_bad_arguments(tmp_path, cli, args, message):
    (tmp_path / "m.yaml").write_text("layers:\n  - {forward: 10us, gradient: 1MiB}\n")
    args = [a.format(spec=tmp_path / "m.yaml", missing=tmp_path / "nope.yaml") for a in args]
    result = cli("workload", *args, "-o", tmp_path / "out" / "w")
    assert result.exit_code == 2 and message in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_cli_unwritable_output_is_one_line(tmp_path, cli):
    (tmp_path / "file").write_text("")
    result = cli("workload", "microbenchmark", "-o", tmp_path / "file" / "w")
    assert result.exit_code == 2 and result.stderr.startswith("chakra-coll: error: ") and result.stderr.count("\n") == 1
    assert not list(tmp_path.glob("file*/*"))


def test_cli_json_summary_and_stale_rank_files(tmp_path, cli):
    result = cli("workload", "hybrid", "--tp", "2", "--dp", "2", "--layers", "2", "-o", tmp_path / "w", "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["ranks"] == 4 and summary["files"][-1].endswith("w.json")
    roles = {c["group"]: c["count"] for c in summary["collectives"]}
    assert roles == {"tensor parallel": 4, "data parallel": 2}
    result = cli("workload", "microbenchmark", "-n", "2", "-o", tmp_path / "w")
    assert result.exit_code == 0 and "all_reduce_2npus_1MB" in result.stdout
    assert sorted(p.name for p in tmp_path.glob("w.*.et")) == ["w.0.et", "w.1.et"]  # ranks 2, 3 of the old one are gone
    assert read_workload(tmp_path / "w").num_ranks == 2


def test_replay_takes_the_groups_written_beside_the_ets(tmp_path, cli):
    """workload hybrid -o PREFIX writes PREFIX.json; replay PREFIX uses it (and says so) exactly as
    --comm-groups PREFIX.json does; without it the error names --comm-groups."""
    assert cli("workload", "hybrid", "--tp", "2", "--dp", "2", "--layers", "2", "-o", tmp_path / "hy").exit_code == 0
    explicit = cli("replay", tmp_path / "hy", "-t", "ring:4", "--comm-groups", tmp_path / "hy.json", "--json")
    assert explicit.exit_code == 0, explicit.output
    assert "communicator groups from" not in explicit.stderr
    for given in (tmp_path / "hy", tmp_path / "hy.1.et"):
        found = cli("replay", given, "-t", "ring:4", "--json")
        assert found.exit_code == 0, found.output
        assert f"communicator groups from {tmp_path / 'hy.json'}" in found.stderr
        assert json.loads(found.stdout)["total_ns"] == json.loads(explicit.stdout)["total_ns"]
    (tmp_path / "hy.json").rename(tmp_path / "groups.json")
    (tmp_path / "hy.json").write_text('{"traceEvents": []}')  # some other JSON of the same name is not a group file
    missing = cli("replay", tmp_path / "hy", "-t", "ring:4")
    assert missing.exit_code == 2 and missing.stderr.count("\n") == 1, missing.stderr
    assert "is never called by rank" in missing.stderr and "give its members with --comm-groups FILE" in missing.stderr
    # a workload without groups never looks for the file
    assert cli("workload", "microbenchmark", "-n", "4", "-o", tmp_path / "mb").exit_code == 0
    (tmp_path / "mb.json").write_text('{"1": [0, 1]}')
    plain = cli("replay", tmp_path / "mb", "-t", "ring:4")
    assert plain.exit_code == 0 and "communicator groups" not in plain.stderr


def test_replay_with_astra_sims_system_takes_the_groups_beside_the_ets_too(tmp_path, cli):
    system = {"scheduling-policy": "FIFO", "preferred-dataset-splits": 1, "local-mem-bw": 50,
              **{f"{c}-implementation": ["ring"] for c in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")}}
    (tmp_path / "system.json").write_text(json.dumps(system))
    assert cli("workload", "hybrid", "--tp", "2", "--dp", "4", "--layers", "2", "-o", tmp_path / "hy").exit_code == 0
    args = ["replay", tmp_path / "hy", "-t", "ring:8", "--network-model", "astra-sim", "--system", tmp_path / "system.json", "--json"]
    found = cli(*args)
    assert found.exit_code == 0, found.output
    assert "communicator groups from" in found.stderr
    explicit = cli(*args, "--comm-groups", tmp_path / "hy.json")
    assert json.loads(found.stdout)["total_ns"] == json.loads(explicit.stdout)["total_ns"]
    (tmp_path / "hy.json").unlink()
    missing = cli(*args)
    assert missing.exit_code == 2 and "no communicator-group file defines it (give --comm-groups FILE" in missing.stderr, missing.stderr
