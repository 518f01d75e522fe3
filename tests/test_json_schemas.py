"""Every ``--json`` document validates against its JSON Schema in schemas/ (with a schema_version),
and the old key spellings kept for one release equal the new ones."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from chakra_collectives.cli.app import COMMANDS
from chakra_collectives.synth.baselines import ring
from chakra_collectives.ir import Collective
from chakra_collectives.converters.chakra_et import write_algorithm
from chakra_collectives.converters.msccl import write_msccl
from pytorch_traces import ddp_step, write_pair
from schema_helpers import SCHEMAS, schema

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "sample_traces"


def _json(cli, *args):
    result = cli(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _deprecated_keys_agree(document):
    for old, new in document.get("deprecated", {}).items():
        here, old_key, new_key = document, old, new
        if "." in old:  # a nested key: topology.npus -> topology.num_npus
            parent, old_key = old.split(".")
            here, new_key = document[parent], new.split(".")[1]
        assert here[old_key] == here[new_key] or (old_key == "coll" and here["collective"].replace("-", "") in here[old_key].replace("_", "")), old


def test_schemas_are_valid_json_schema():
    for path in SCHEMAS.glob("*.schema.json"):
        jsonschema.Draft202012Validator.check_schema(json.loads(path.read_text()))


def test_every_json_command_has_a_schema(cli):
    commands = {name for name, _, _ in COMMANDS} - {"plot"}
    with_json = {name for name in commands if "--json" in cli(name, "--help").stdout or name == "workload"}
    named = {"workload": "workload"}
    assert {named.get(c, c) for c in with_json} | {"from-pytorch", "synth-groups"} == {p.name.removesuffix(".schema.json") for p in SCHEMAS.glob("*.schema.json")} - {"topology", "pattern"}


@pytest.mark.parametrize(
    "args",
    [
        ["synth", "-t", "{topology}", "-c", "all-reduce", "-s", "12MiB", "-o", "{tmp}/ar", "--astra-sim", "{tmp}/as"],
        ["synth", "-t", "ring:4", "-c", "all-to-all", "-s", "1MiB"],  # no bounds
        ["synth", "-t", "switch:8", "-c", "all-gather", "-s", "1MiB", "-a", "tacos", "-k", "2", "--network-model", "astra-sim"],
    ],
)
def test_synth(cli, tmp_path, args):
    document = _json(cli, *[a.format(topology=SAMPLES / "topology/two_servers.yaml", tmp=tmp_path) for a in args])
    jsonschema.validate(document, schema("synth"))
    assert document["schema_version"] == 1 and document["num_ranks"] == document["num_npus"]
    _deprecated_keys_agree(document)


def test_replay_both_documents(cli, tmp_path):
    document = _json(cli, "replay", SAMPLES / "workload/hybrid_step", "-t", SAMPLES / "topology/two_servers.yaml",
                     "--comm-groups", SAMPLES / "workload/hybrid_step.json")
    jsonschema.validate(document, schema("replay"))
    assert document["timeline"]["phases"] == ["forward", "backward", "optimizer", "compute"]
    _deprecated_keys_agree(document)
    from chakra_collectives.workload import microbenchmark

    microbenchmark("all-gather", 8, 2**20).write(tmp_path / "ag")
    (tmp_path / "system.json").write_text(json.dumps({"preferred-dataset-splits": 1, "all-gather-implementation": ["direct"], "local-mem-bw": 50}))
    system = _json(cli, "replay", tmp_path / "ag", "-t", "fully-connected:8", "--network-model", "astra-sim", "--system", tmp_path / "system.json")
    jsonschema.validate(system, schema("replay"))
    assert system["network_model"] == "astra-sim" and system["total_ns"] == 20_051
    _deprecated_keys_agree(system)


def test_inspect_both_kinds(cli):
    algorithm = _json(cli, "inspect", SAMPLES / "collectives/all_reduce_tacos")
    workload = _json(cli, "inspect", SAMPLES / "workload/train_step")
    for document, kind in ((algorithm, "algorithm"), (workload, "workload")):
        jsonschema.validate(document, schema("inspect"))
        assert document["kind"] == kind and document["num_ranks"] == 8


@pytest.mark.parametrize("kind", [["microbenchmark", "-c", "all-gather"], ["data-parallel", "--layers", "2"], ["hybrid"]])
def test_workload(cli, tmp_path, kind):
    document = _json(cli, "workload", *kind, "-o", tmp_path / "w")
    jsonschema.validate(document, schema("workload"))
    _deprecated_keys_agree(document)


def test_from_pytorch(cli, tmp_path):
    host, kineto = write_pair(ddp_step(0, 1), tmp_path, "r0")
    document = _json(cli, "workload", "from-pytorch", host, "--kineto", kineto, "-o", tmp_path / "w")
    jsonschema.validate(document, schema("from-pytorch"))
    assert document["num_ranks"] == 1


def test_msccl_both_ways(cli, tmp_path):
    write_msccl(ring(Collective.ALL_REDUCE, 4, size_bytes=4 * 2**20), tmp_path / "ring.xml")
    imported = _json(cli, "import-msccl", tmp_path / "ring.xml", "-o", tmp_path / "ar", "--verify")
    jsonschema.validate(imported, schema("import-msccl"))
    assert imported["verdict"] == "verified" and imported["verified"] is True
    exported = _json(cli, "export-msccl", tmp_path / "ar", "-o", tmp_path / "again.xml", "--min-bytes", "1MiB")
    jsonschema.validate(exported, schema("export-msccl"))
    assert 'minBytes="1048576"' in (tmp_path / "again.xml").read_text()
    _deprecated_keys_agree(exported)


def test_demo(cli, tmp_path):
    document = _json(cli, "demo", "-o", tmp_path / "d")
    jsonschema.validate(document, schema("demo"))
    _deprecated_keys_agree(document)


def test_topo_info(cli):
    document = _json(cli, "topo-info", "ring:8")
    jsonschema.validate(document, schema("topo-info"))
    _deprecated_keys_agree(document)


def test_verify(cli, tmp_path):
    write_algorithm(ring(Collective.ALL_GATHER, 4, size_bytes=4 * 2**20), tmp_path / "ag")
    jsonschema.validate(_json(cli, "verify", tmp_path / "ag"), schema("verify"))


def test_a_document_with_an_undocumented_key_fails():
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"schema_version": 1, "surprise": True}, schema("workload"))


def test_search(cli, tmp_path):
    # a skipped candidate, a pair that does not apply (BFB on a switch), failed evaluations (rhd on 6 NPUs), a winner and plots
    space = tmp_path / "space.yaml"
    space.write_text("npus: 6\ntopologies: [ring:6, switch:6, torus2d:4x4]\nalgorithms: [bfb, rhd, ring]\n"
                     "workload: {kind: data-parallel, layers: 2, gradient: 1MiB}\n")
    document = _json(cli, "search", space, "--workers", "1", "-o", tmp_path / "out")
    jsonschema.validate(document, schema("search"))
    (group,) = document["groups"]
    assert document["skipped"] and document["not_applicable"] and len(group["failed"]) == 2 and len(group["ranked"]) == 3
    assert document["winners"] and document["plots"]
