"""export-msccl of a process group's algorithm: MSCCL ranks are the group's ranks, and the
placement (the NPU of each) is reported, since MSCCL-IR has no place for it."""

from __future__ import annotations

import json

import jsonschema

from chakra_collectives.converters.chakra_et import read_algorithm
from chakra_collectives.verify import verify_algorithm

from schema_helpers import schema


def test_a_group_algorithm_exports_over_the_groups_ranks_and_says_where_they_run(cli, tmp_path):
    made = cli("synth", "-t", "torus2d:4x4", "-c", "all-reduce", "-s", "1MiB", "-a", "tacos", "--group", "0,4,8,12", "-o", tmp_path / "dp")
    assert made.exit_code == 0, made.output
    exported = cli("export-msccl", tmp_path / "dp", "-o", tmp_path / "dp.xml", "--json")
    assert exported.exit_code == 0, exported.output
    document = json.loads(exported.stdout)
    jsonschema.validate(document, schema("export-msccl"))
    assert document["num_ranks"] == 4 and document["placement"] == [0, 4, 8, 12]
    text = cli("export-msccl", tmp_path / "dp", "-o", tmp_path / "dp.xml")
    assert "MSCCL ranks 0-3 are the group's, on NPUs 0,4,8,12 in that order" in " ".join(text.stdout.split())
    # the program is the group's all-reduce over its 4 ranks: read back, it is proved
    assert cli("import-msccl", tmp_path / "dp.xml", "--size", "1MiB", "-o", tmp_path / "back").exit_code == 0
    back = read_algorithm(tmp_path / "back")
    assert back.num_ranks == 4 and verify_algorithm(back).ok


def test_a_whole_fabric_algorithm_has_no_placement(cli, tmp_path):
    assert cli("synth", "-t", "torus2d:2x2", "-c", "all-gather", "-s", "1MiB", "-a", "ring", "-o", tmp_path / "ag").exit_code == 0
    exported = cli("export-msccl", tmp_path / "ag", "-o", tmp_path / "ag.xml", "--json")
    assert exported.exit_code == 0 and json.loads(exported.stdout)["placement"] is None
