"""``replay -a TYPE=PREFIX_{group}``: the per-group algorithm sets ``synth --groups`` writes, each
serving the calls over the ranks it was placed on; other groups run the default algorithm."""

from __future__ import annotations

import json

import pytest

DP = {"5": [0, 4, 8, 12], "6": [1, 5, 9, 13], "7": [2, 6, 10, 14], "8": [3, 7, 11, 15]}
TP = {"1": [0, 1, 2, 3], "2": [4, 5, 6, 7], "3": [8, 9, 10, 11], "4": [12, 13, 14, 15]}


@pytest.fixture
def hybrid(cli, tmp_path):
    """A TP 4 x DP 4 step (DP all-reduces of 4 MiB) and the joint TACOS sets of its DP and TP groups."""
    assert cli("workload", "hybrid", "--tp", "4", "--dp", "4", "--forward", "40us", "-o", tmp_path / "hy").exit_code == 0
    assert {k: v for k, v in json.loads((tmp_path / "hy.json").read_text()).items() if k in DP} == DP
    plans = {}
    for name, groups in (("dp", DP), ("tp", TP)):
        (tmp_path / f"{name}.json").write_text(json.dumps(groups))
        made = cli("synth", "-t", "torus2d:4x4", "-c", "all-reduce", "-s", "4MiB", "-a", "tacos", "--groups", tmp_path / f"{name}.json",
                   "-o", tmp_path / name, "--json")
        assert made.exit_code == 0, made.output
        plans[name] = json.loads(made.stdout)
    return tmp_path, plans


def _replay(cli, folder, *options):
    result = cli("replay", folder / "hy", "-t", "torus2d:4x4", "--comm-groups", folder / "hy.json", *options, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout), result.stderr


def test_each_group_runs_its_own_set_and_the_others_the_default(cli, hybrid):
    folder, plans = hybrid
    document, stderr = _replay(cli, folder, "-a", "all-reduce=" + str(folder / "dp_{group}"))
    labels = {c["group"]: c["algorithm"] for c in document["collectives"] if c["collective"] == "all-reduce"}
    joint = plans["dp"]["joint"]  # the plan synth --groups chose: its files say which
    assert {labels[g] for g in DP} == {"tacos" if joint == "separate" else f"tacos ({joint})"}
    assert {labels[g] for g in TP} == {"ring (built-in)"}
    assert "has no all-reduce for the groups on ranks 0-3; 4-7; 8-11; 12-15" in " ".join(stderr.split())
    # the DP calls of one layer run together, as synth --groups planned and timed them
    dp_times = {c["time_ns"] for c in document["collectives"] if c["group"] in DP}
    assert max(dp_times) == pytest.approx(plans["dp"]["joint_ns"], rel=1e-6)


def test_two_sets_of_one_type_serve_both_dimensions(cli, hybrid):
    folder, _ = hybrid
    rings, _ = _replay(cli, folder)
    both, stderr = _replay(cli, folder, "-a", "all-reduce=" + str(folder / "dp_{group}"), "-a", "all-reduce=" + str(folder / "tp_{group}"))
    assert {c["algorithm"].split()[0] for c in both["collectives"] if c["collective"] == "all-reduce"} == {"tacos"}
    assert "has no all-reduce" not in stderr
    assert both["total_ns"] < rings["total_ns"]


@pytest.mark.parametrize(
    "options, message",
    [
        (["all-reduce=nope_{group}"], "no files DIR/nope_{group}.{rank}.et for any group"),
        (["all-reduce=dp_{group}", "all-reduce=dp_{group}"], "two all-reduce algorithms given for the group on ranks 0,4,8,12"),
        (["all-gather=dp_{group}"], "the files implement all-reduce, not all-gather; give all-reduce=DIR/dp_{group}"),
        (["all-reduce=whole_{group}"], "DIR/whole_x: its files name no placement"),
        (["all-reduce=whole_x", "all-reduce=dp_{group}"], "two algorithms given for all-reduce"),
    ],
)
def test_bad_sets_are_one_line_exit_2(cli, hybrid, options, message):
    folder, _ = hybrid
    assert cli("synth", "-t", "torus2d:4x4", "-c", "all-reduce", "-s", "1MiB", "-a", "ring", "-o", folder / "whole_x").exit_code == 0
    args = [arg for option in options for arg in ("-a", option.replace("=", f"={folder}/"))]
    result = cli("replay", folder / "hy", "-t", "torus2d:4x4", "--comm-groups", folder / "hy.json", *args)
    assert result.exit_code == 2
    text = result.stderr.replace(str(folder), "DIR")
    assert message in " ".join(text.split()) and text.count("\n") == 1


def test_the_astra_sim_system_model_refuses_group_sets_in_one_line(cli, hybrid):
    folder, _ = hybrid
    (folder / "system.json").write_text(json.dumps({"preferred-dataset-splits": 1, "all-reduce-implementation": ["ring"], "local-mem-bw": 50}))
    result = cli("replay", folder / "hy", "-t", "torus2d:4x4", "--comm-groups", folder / "hy.json", "--network-model", "astra-sim",
                 "--system", folder / "system.json", "-a", f"all-reduce={folder}/dp_{{group}}")
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert "write them with workload hybrid|moe --astra-sim DIR" in " ".join(result.stderr.split())
