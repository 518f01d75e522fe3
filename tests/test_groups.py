"""Process groups embedded in a fabric: placement, group bounds, group-aware synthesis, replay of
hybrid workloads with topology-aware producers, concurrent groups, and bad input."""

from __future__ import annotations

import json
from dataclasses import replace

import jsonschema
import pytest

from chakra_collectives.bounds import lower_bounds
from chakra_collectives.converters.chakra_et import read_algorithm, write_algorithm
from chakra_collectives.errors import AlgorithmError, InputError
from chakra_collectives.ir import Collective
from chakra_collectives.network.collective import predict_time, simulate_together
from chakra_collectives.synth import group_bounds, synthesize
from chakra_collectives.synth.baselines import ring
from chakra_collectives.synth.concurrent import synthesize_concurrent
from chakra_collectives.topology import load_topology, torus2d
from chakra_collectives.topology.groups import group_view, parse_group
from chakra_collectives.verify import verify_algorithm

from schema_helpers import schema

COLUMN = (0, 4, 8, 12)
DIAGONAL = (0, 5, 10, 15)


def test_placement_round_trips_through_the_ets(tmp_path):
    algo = replace(ring(Collective.ALL_GATHER, 4, size_bytes=2**20), placement=DIAGONAL)
    write_algorithm(algo, tmp_path / "ag")
    again = read_algorithm(tmp_path / "ag")
    assert again.placement == DIAGONAL and again.equals(algo)


def test_the_network_model_runs_an_algorithm_on_its_own_placement():
    fabric = torus2d(4, 4)
    algo = ring(Collective.ALL_GATHER, 4, size_bytes=2**20)
    row, diagonal = predict_time(algo, fabric), predict_time(replace(algo, placement=DIAGONAL), fabric)
    # a row's ring neighbours are one hop apart, the diagonal's two: every step costs one more hop
    assert diagonal > row
    assert diagonal == predict_time(algo, fabric, placement=DIAGONAL)


def test_group_view_keeps_the_links_and_makes_the_others_relays():
    fabric = torus2d(4, 4)
    view = group_view(fabric, COLUMN)
    assert (view.topology.num_npus, view.topology.num_switches) == (4, 12)
    assert sorted((int(view.fabric_node[l.src]), int(view.fabric_node[l.dst])) for l in view.topology.links) == sorted(
        (l.src, l.dst) for l in fabric.links
    )


def test_group_bounds_count_the_relays_links():
    # a torus column alone is a ring of 4 (2 links into each member); in the fabric every member
    # also has the two row links, through which relays can feed it: half the ring's bound
    column = group_bounds(torus2d(4, 4), Collective.ALL_GATHER, 2**20, COLUMN)
    alone = lower_bounds(load_topology("ring:4"), Collective.ALL_GATHER, 2**20)
    assert column.best_ns == pytest.approx(alone.best_ns / 2)
    whole = lower_bounds(torus2d(4, 4), Collective.ALL_GATHER, 2**20)
    assert group_bounds(torus2d(4, 4), Collective.ALL_GATHER, 2**20, None) == whole


@pytest.mark.parametrize("collective", ["all-gather", "reduce-scatter", "all-reduce"])
@pytest.mark.parametrize("group", [COLUMN, DIAGONAL, (0, 1, 4, 5)])
def test_forestcoll_serves_a_group_and_beats_its_ring(collective, group):
    fabric = torus2d(4, 4)
    result = synthesize(fabric, collective, "16MiB", algorithm="forestcoll", group=group)
    algo = result.algorithm
    assert algo.num_ranks == len(group) and algo.placement == group and result.group == group
    assert verify_algorithm(algo).ok
    members = set(group)
    assert all(path[0] in members and path[-1] in members for path in algo.routes)
    assert result.predicted_ns == pytest.approx(predict_time(algo, fabric))
    assert result.predicted_ns >= result.bounds.best_ns
    ring_time = synthesize(fabric, collective, "16MiB", algorithm="ring", group=group).predicted_ns
    assert result.predicted_ns < ring_time


def test_best_over_a_group_tries_only_what_serves_groups():
    result = synthesize(torus2d(4, 4), "all-gather", "1MiB", group=COLUMN)
    tried = {c.name for c in result.candidates}
    assert "forestcoll" in tried and "bfb" not in tried
    assert result.algorithm.placement == COLUMN


@pytest.mark.parametrize("spec, group", [("mesh2d:4x4", (0, 1, 2, 3)), ("dgx:2x4", (0, 4)), ("switch:8", (1, 3, 5, 7))])
def test_best_over_a_group_is_never_slower_than_its_ring(spec, group):
    fabric = load_topology(spec)
    best = synthesize(fabric, "all-reduce", "4MiB", group=group)
    ring_time = synthesize(fabric, "all-reduce", "4MiB", algorithm="ring", group=group).predicted_ns
    assert best.predicted_ns <= ring_time
    assert best.predicted_ns == pytest.approx(predict_time(best.algorithm, fabric))


def test_bfb_says_why_it_does_not_serve_groups():
    with pytest.raises(InputError, match="does not serve process groups .*only relay"):
        synthesize(torus2d(4, 4), "all-gather", "1MiB", algorithm="bfb", group=COLUMN)


def test_an_algorithm_with_fabric_routes_refuses_another_placement():
    algo = synthesize(torus2d(4, 4), "all-gather", "1MiB", algorithm="forestcoll", group=DIAGONAL).algorithm
    assert algo.routes
    with pytest.raises(AlgorithmError, match="must run on NPUs"):
        predict_time(algo, torus2d(4, 4), placement=COLUMN)


def test_concurrent_bound_is_the_rings_when_columns_share_the_rows():
    from chakra_collectives.bounds import concurrent_bound_ns

    columns = [(c, c + 4, c + 8, c + 12) for c in range(4)]
    together, cut = concurrent_bound_ns(torus2d(4, 4), Collective.ALL_GATHER, 2**20, columns)
    # every column's ring all-gather alone: 3 steps of a quarter over one link -- and a
    # bidirectional ring halves it; together no column can borrow the rows' links
    bidirectional_ring = synthesize(torus2d(4, 4), "all-gather", 2**20, algorithm="biring", group=columns[0], chunks_per_npu=1)
    assert together <= bidirectional_ring.predicted_ns
    assert together == pytest.approx(lower_bounds(load_topology("ring:4"), Collective.ALL_GATHER, 2**20).best_ns)


def test_simulate_together_shares_links():
    fabric = torus2d(4, 4)
    algo = ring(Collective.ALL_GATHER, 4, size_bytes=2**20)
    # two rings over the same four NPUs, shifted by one: they use the same links at the same time
    a, b = replace(algo, placement=(0, 1, 2, 3)), replace(algo, placement=(1, 2, 3, 0))
    together = simulate_together([a, b], fabric)
    assert min(together) >= predict_time(a, fabric) and max(together) > predict_time(a, fabric)


def test_concurrent_columns_joint_plan_is_never_slower_than_separate_together():
    columns = {str(c): (c, c + 4, c + 8, c + 12) for c in range(4)}
    result = synthesize_concurrent(torus2d(4, 4), columns, "all-reduce", "16MiB", algorithm="forestcoll")
    separate = result.plans["separate"]
    assert result.joint_ns <= separate.together_ns
    # separate syntheses relay through the other columns: together they are slower than alone
    assert separate.together_ns > max(separate.alone_ns.values())
    # the torus's translations carry column 0 onto the others: one synthesis, four equal times
    assert len(set(separate.alone_ns.values())) == 1
    assert all(verify_algorithm(algo).ok for algo in separate.algorithms.values())
    # confined to their own columns they cannot interfere: together is alone
    confined = result.plans["confined"]
    assert confined.together_ns == pytest.approx(max(confined.alone_ns.values()))
    for name, algo in result.joint.algorithms.items():
        assert algo.placement == columns[name] and verify_algorithm(algo).ok
    # the bound together: at least each column's alone, and no plan beats it
    assert max(result.bounds_ns.values()) <= result.together_bound_ns <= min(p.together_ns for p in result.plans.values())


def test_replay_hybrid_with_forestcoll_plans_every_group(cli, tmp_path):
    assert cli("workload", "hybrid", "--tp", "2", "--dp", "8", "-o", tmp_path / "hy").exit_code == 0
    times = {}
    for name in ("ring", "forestcoll"):
        result = cli("replay", tmp_path / "hy", "-t", "torus2d:4x4", "--comm-groups", tmp_path / "hy.json",
                     "--default-algorithm", f"*={name}", "--json")
        assert result.exit_code == 0, result.output
        document = json.loads(result.stdout)
        times[name] = document["total_ns"]
        assert all(name in c["algorithm"] for c in document["collectives"] if c["collective"] in ("all-reduce",))
    assert times["forestcoll"] < times["ring"]


def test_synth_group_writes_one_file_per_group_rank(cli, tmp_path):
    result = cli("synth", "-t", "torus2d:4x4", "-c", "all-reduce", "-s", "4MiB", "-a", "forestcoll", "--group", "0,5,10,15",
                 "-o", tmp_path / "g", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    jsonschema.validate(document, schema("synth"))
    assert document["group"] == [0, 5, 10, 15] and document["num_ranks"] == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"g.{r}.et" for r in range(4)]
    assert read_algorithm(tmp_path / "g").placement == DIAGONAL
    text = cli("synth", "-t", "torus2d:4x4", "-c", "all-reduce", "-s", "4MiB", "-a", "ring", "--group", "0-3")
    assert "4 ranks on NPUs 0-3" in " ".join(text.stdout.split())


def test_synth_groups_file_json_and_files(cli, tmp_path):
    (tmp_path / "dp.json").write_text(json.dumps({"a": [0, 4, 8, 12], "b": [1, 5, 9, 13]}))
    result = cli("synth", "-t", "torus2d:4x4", "-c", "all-gather", "-s", "1MiB", "-a", "forestcoll", "--groups", tmp_path / "dp.json",
                 "-o", tmp_path / "out", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    jsonschema.validate(document, schema("synth-groups"))
    assert document["joint_ns"] <= document["plans"]["separate"]["together_ns"]
    assert read_algorithm(tmp_path / "out_b").placement == (1, 5, 9, 13)


@pytest.mark.parametrize(
    "args, groups, message",
    [
        (["--group", "0,4,4"], None, "group 0,4,4: rank 4 appears twice"),
        (["--group", "0,16"], None, "rank 16 is not an NPU of the fabric (0..15)"),
        (["--group", "3"], None, "a group needs at least two ranks, got 1"),
        (["--group", "0-x"], None, "expected ranks and ranges"),
        (["--group", "0,1", "--astra-sim", "astra"], None, "for process groups use workload hybrid|moe --astra-sim"),
        ([], {"a": [0, 1], "b": [1, 2]}, "groups 'a' and 'b' both hold rank 1"),
        ([], {"a": [0, 99]}, "group 'a': rank 99 is not an NPU"),
        ([], {"a": [5]}, "a group needs at least two ranks"),
        ([], {"a": [0, 0]}, "rank 0 appears twice"),
        ([], [0, 1], "must be a JSON object"),
    ],
)
def test_bad_groups_are_one_line_exit_2_and_write_nothing(cli, tmp_path, args, groups, message):
    if groups is not None:
        (tmp_path / "g.json").write_text(json.dumps(groups))
        args = [*args, "--groups", tmp_path / "g.json"]
    out = tmp_path / "out"
    out.mkdir()
    result = cli("synth", "-t", "torus2d:4x4", "-a", "forestcoll", *args, "-o", out / "x")
    assert result.exit_code == 2
    assert message in result.stderr and result.stderr.count("\n") == 1
    assert list(out.iterdir()) == []


def test_parse_group_keeps_rank_order():
    assert parse_group("12,8,4,0", 16) == (12, 8, 4, 0)
    assert parse_group("2-4,0", 16) == (2, 3, 4, 0)


def test_moe_workload_and_its_replay_with_groups_planned_jointly(cli, tmp_path):
    result = cli("workload", "moe", "--ep", "4", "--dp", "4", "--layers", "2", "-o", tmp_path / "moe", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    jsonschema.validate(document, schema("workload"))
    calls = {(c["collective"], c["group"]): c["count"] for c in document["collectives"]}
    # per layer: dispatch and combine forward, their gradients backward; one gradient all-reduce
    assert calls == {("all-to-all", "expert parallel"): 8, ("all-reduce", "data parallel"): 2}
    groups = json.loads((tmp_path / "moe.json").read_text())
    assert groups["1"] == [0, 1, 2, 3] and groups["5"] == [0, 4, 8, 12]
    totals, labels = {}, {}
    for name in ("ring", "forestcoll"):
        run = cli("replay", tmp_path / "moe", "-t", "torus2d:4x4", "--comm-groups", tmp_path / "moe.json", "--default-algorithm", f"*={name}", "--json")
        assert run.exit_code == 0, run.output
        replayed = json.loads(run.stdout)
        totals[name] = replayed["total_ns"]
        labels[name] = {c["algorithm"] for c in replayed["collectives"] if c["collective"] == "all-reduce"}
    # the 4 data-parallel groups all-reduce at once: planned together, never slower than their rings
    assert totals["forestcoll"] <= totals["ring"]
    assert all("plan of 4 concurrent groups" in label for label in labels["forestcoll"])


def test_concurrent_family_is_the_disjoint_groups_of_one_size():
    from chakra_collectives.replay.algorithms import concurrent_family

    hybrid = {"1": (0, 1), "2": (2, 3), "3": (0, 2), "4": (1, 3)}
    assert concurrent_family((0, 1), hybrid) == ((0, 1), (2, 3))
    assert concurrent_family((1, 3), hybrid) == ((0, 2), (1, 3))
    assert concurrent_family((0, 1, 2), hybrid) == ((0, 1, 2),)


def test_workload_astra_sim_dir_runs_every_group_its_own_algorithm(cli, tmp_path):
    import yaml

    from chakra_collectives.converters.chakra_et import read_workload

    result = cli("workload", "hybrid", "--tp", "4", "--dp", "4", "--forward", "40us", "--layers", "2", "-o", tmp_path / "hy",
                 "--astra-sim", tmp_path / "astra", "-t", "torus2d:4x4", "--json")
    assert result.exit_code == 0, result.output
    jsonschema.validate(json.loads(result.stdout), schema("workload"))
    root = tmp_path / "astra"
    system = json.loads((root / "system.json").read_text())
    per_node = yaml.safe_load((root / system["per-node-custom-implementation"]).read_text())
    groups = json.loads((root / "workload" / "model.json").read_text())
    workload = read_workload(root / "workload" / "model")
    seen = 0
    for i in range(len(workload)):
        if workload.pg_name[i] is None:
            continue
        seen += 1
        node_id = int(workload.node_id[i])
        algo = read_algorithm(root / per_node[node_id])
        # the algorithm the node runs was made for this rank's group, at this call's size
        assert algo.placement == tuple(groups[workload.pg_name[i]])
        assert int(workload.rank[i]) in algo.placement
    assert seen == len(per_node) == 16 * 6   # 2 layers: 4 tensor all-reduces and 2 data-parallel ones per rank


def test_workload_astra_sim_needs_a_topology_of_the_workloads_size(cli, tmp_path):
    result = cli("workload", "moe", "--ep", "4", "--dp", "2", "-o", tmp_path / "m", "--astra-sim", tmp_path / "a", "-t", "torus2d:4x4")
    assert result.exit_code == 2 and "has 16 NPUs but the workload has 8 ranks" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_search_plans_process_groups_with_a_producer_that_serves_them(tmp_path):
    from chakra_collectives.search import InProcess, ResultTable, parse_space, plan_search, run_search

    text = "npus: 8\ntopologies: [torus2d:2x4]\nalgorithms: [ring]\ngroup_algorithm: forestcoll\nworkload: {kind: hybrid, layers: 2, forward: 40us, tp: 2}\n"
    plan = plan_search(parse_space(text, base=tmp_path), tmp_path / "workloads")
    table = ResultTable(tmp_path / "results.parquet")
    run_search(plan, InProcess(), table)
    (row,) = table.rows()
    assert row["status"] == "ok", row["error"]
    labels = {c["algorithm"] for c in json.loads(row["collectives"]) if c["members"] < 8}
    # every group kind runs ForestColl's plan, or the ring where that is not faster in the step
    assert any(label.startswith("forestcoll (built-in") for label in labels)
    assert all(label.startswith("forestcoll (built-in") or label == "ring (built-in; forestcoll's not faster in the step)" for label in labels)
