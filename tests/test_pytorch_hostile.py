"""Damaged PyTorch traces (issue 30): every field the converter reads is checked where it is
read -- one line naming the file, the node or event and the field, never a traceback --, what
has an obvious repair is repaired and counted (``strict`` refuses), and what ``from-pytorch``
writes always reads back as a workload replay accepts, or nothing is written.

Each test is one of the crash classes a campaign of mutated real traces found."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from chakra_collectives.converters.chakra_et import read_workload
from chakra_collectives.converters.pytorch.convert import convert_pytorch
from chakra_collectives.errors import InputError, LimitError
from chakra_collectives.replay import replay
from chakra_collectives.topology import load_topology
from pytorch_traces import ScriptedRun, ddp_step


def documents(schema: str = "1.1.0-chakra.0.0.4", rank: int = 0, world: int = 2) -> tuple[dict, dict]:
    return ddp_step(rank, world, schema=schema).documents()


def node_named(host: dict, name: str) -> dict:
    return next(n for n in host["nodes"] if n["name"] == name)


def event_of(kineto: dict, category: str) -> dict:
    return next(e for e in kineto["traceEvents"] if e.get("cat") == category)


def convert(tmp_path: Path, host: dict, kineto: dict | None = None, *, text: str | None = None, **options):
    """Convert one rank (``text``: the host file's exact JSON text); the output prefix is ``w``."""
    host_path = tmp_path / "h.json"
    host_path.write_text(text if text is not None else json.dumps(host))
    kinetos = None
    if kineto is not None:
        (tmp_path / "k.json").write_text(json.dumps(kineto))
        kinetos = [tmp_path / "k.json"]
    return convert_pytorch([host_path], kinetos, tmp_path / "w", **options)


def refused(tmp_path: Path, host: dict, kineto: dict | None = None, *, kind: type = InputError, **options) -> str:
    """The one-line refusal (and that nothing was written)."""
    with pytest.raises(kind) as error:
        convert(tmp_path, host, kineto, **options)
    assert not list(tmp_path.glob("w.*")), "a refused conversion wrote files"
    return str(error.value)


# ---------------------------------------------------------------------- durations
def test_a_negative_kineto_duration_is_read_as_zero_and_counted(tmp_path):
    host, kineto = documents()
    kernel = event_of(kineto, "kernel")
    kernel["dur"] = -40.0
    result = convert(tmp_path, host, kineto)
    assert result.repairs == {"negative_duration": 1}
    assert "repaired: 1 negative duration read as 0" in result.warnings
    assert read_workload(tmp_path / "w").duration_ns.min() >= 0
    strict = tmp_path / "strict"
    strict.mkdir()
    message = refused(strict, host, kineto, strict=True)
    assert "k.json: event #" in message and "dur is -40, negative" in message and "--strict" in message


@pytest.mark.parametrize("value, shown", [(1e300, "1e+300"), ("inf", "inf"), ("nan", "nan")])
def test_absurd_kineto_durations_are_refused_naming_the_event(tmp_path, value, shown):
    host, kineto = documents()
    kernel = event_of(kineto, "kernel")
    kernel["dur"] = value
    message = refused(tmp_path, host, kineto)
    assert message.startswith(str(tmp_path / "k.json") + ": event #")
    assert f"{kernel['name'][:20]}" in message and f"dur is {shown}; a duration is a finite number of µs" in message


@pytest.mark.parametrize("token", ["Infinity", "NaN", "-Infinity"])
def test_a_non_finite_host_duration_is_refused_naming_the_node(tmp_path, token):
    host, _ = documents("1.0.1")
    node = node_named(host, "aten::mm")
    node["dur"] = 12345.0
    text = json.dumps(host).replace("12345.0", token)
    message = refused(tmp_path, host, text=text)
    assert message.startswith(str(tmp_path / "h.json") + f": node {node['id']} (aten::mm): dur is ")


# ---------------------------------------------------------------------- sizes
def test_a_tensor_past_the_size_limit_is_a_limit_error_naming_the_node(tmp_path):
    host, kineto = documents()
    record = node_named(host, "record_param_comms")
    record["inputs"]["values"][0][0][3] = 2**61  # numel: 2^63 bytes of floats
    for attr in record["attrs"]:
        if attr["name"] in ("in_msg_nelems", "out_msg_nelems"):
            attr["value"] = 2**61
    message = refused(tmp_path, host, kineto, kind=LimitError)
    assert f"h.json: host op {node_named(host, 'c10d::broadcast_')['id']} (c10d::broadcast_)" in message
    assert "above the limit of 1 TiB" in message


def test_a_negative_tensor_size_is_refused_not_printed(tmp_path):
    host, _ = documents("1.0.2-chakra.0.0.4")
    record = node_named(host, "record_param_comms")
    record["inputs"]["values"][0][0][3] = -262144
    message = refused(tmp_path, host)
    assert f"h.json: node {record['id']}: a tensor has -262144 elements of 4 bytes (in c10d::broadcast_)" in message


# ---------------------------------------------------------------------- structure
def test_inputs_nested_thousands_deep_are_refused(tmp_path):
    host, _ = documents()
    text = json.dumps(host).replace('"inputs": {"values": []', '"inputs": {"values": [' + "[" * 5000 + "]" * 5000 + "]", 1)
    message = refused(tmp_path, host, text=text)
    assert "h.json: not a PyTorch execution trace this tool reads: JSON nested too deeply" in message


def test_an_argument_type_nested_past_the_limit_is_refused(tmp_path):
    host, _ = documents("1.0.2-chakra.0.0.4")
    record = node_named(host, "record_param_comms")
    depth = 40
    record["inputs"]["values"][0] = json.loads("[" * depth + "[1, 2, 0, 4, 4, \"cuda:0\"]" + "]" * depth)
    record["inputs"]["types"][0] = "GenericList[" * (depth + 1) + "Tensor(float)" + "]" * (depth + 1)
    message = refused(tmp_path, host)
    assert f"node {record['id']}: an argument nests lists more than 32 deep" in message


def test_an_attribute_whose_name_is_a_list_is_dropped_and_counted(tmp_path):
    host, kineto = documents()
    node = node_named(host, "aten::mm")
    node["attrs"].append({"name": ["tid"], "type": "uint64", "value": 3})
    result = convert(tmp_path, host, kineto)
    assert result.repairs == {"bad_attribute": 1}
    (tmp_path / "strict").mkdir()
    message = refused(tmp_path / "strict", host, kineto, strict=True)
    assert f"node {node['id']} (aten::mm): attribute #8 has no string name" in message


def test_attrs_that_are_not_a_list_are_refused(tmp_path):
    host, _ = documents()
    node = node_named(host, "aten::mm")
    node["attrs"] = 7
    assert f"h.json: node {node['id']} (aten::mm): attrs is 7; expected a list" in refused(tmp_path, host)


def test_a_1_0_1_node_with_attrs_is_read_with_both(tmp_path):
    host, kineto = documents("1.0.1")
    node = node_named(host, "aten::mm")
    node["attrs"] = [{"name": "extra", "type": "string", "value": "x"}]
    result = convert(tmp_path, host, kineto)
    assert result.ranks[0]["host_ops_timed"] == result.ranks[0]["host_ops"]


def test_object_inputs_with_list_outputs_are_refused(tmp_path):
    host, _ = documents()
    node = node_named(host, "aten::mm")
    node["outputs"] = []
    assert f"node {node['id']} (aten::mm): outputs is list; expected an object" in refused(tmp_path, host)


def test_an_unbalanced_type_string_is_refused_naming_the_node(tmp_path):
    host, _ = documents("1.0.2-chakra.0.0.4")
    record = node_named(host, "record_param_comms")
    record["inputs"]["types"][0] = "GenericList[Tensor(float)"
    message = refused(tmp_path, host)
    assert f"node {record['id']}: type 'GenericList[Tensor(float)' is not balanced (in c10d::broadcast_)" in message


def test_a_parent_after_its_child_is_read_as_top_level(tmp_path):
    """Two operators naming each other as parent would make the call tree a cycle."""
    host, kineto = documents()
    outer, inner = node_named(host, "aten::linear"), node_named(host, "aten::addmm")
    outer["ctrl_deps"] = inner["id"]
    result = convert(tmp_path, host, kineto)
    assert result.repairs == {"late_parent": 1}


# ---------------------------------------------------------------------- Kineto fields
def test_a_malformed_correlation_id_is_refused_naming_the_field(tmp_path):
    host, kineto = documents()
    event_of(kineto, "kernel")["args"]["correlation"] = "--5"
    message = refused(tmp_path, host, kineto)
    assert "k.json: event #" in message and "args.correlation is '--5'; expected an integer" in message


def test_distributed_info_that_is_not_an_object_is_ignored_and_counted(tmp_path):
    host, kineto = documents()
    kineto["distributedInfo"] = [0, 2]
    assert convert(tmp_path, host, kineto).repairs == {"bad_distributed_info": 1}


def test_a_rank_out_of_range_is_refused(tmp_path):
    host, kineto = documents()
    kineto["distributedInfo"]["rank"] = 2**40
    assert "distributedInfo: rank is 1099511627776; expected an integer from 0 to 65536" in refused(tmp_path, host, kineto)


def test_a_thread_id_that_is_an_object_is_refused(tmp_path):
    host, kineto = documents()
    event_of(kineto, "cpu_op")["tid"] = {"id": 1}
    message = refused(tmp_path, host, kineto)
    assert "k.json: event #" in message and "tid is dict; expected an integer" in message


# ---------------------------------------------------------------------- what is written replays
def replays(tmp_path: Path, ranks: int) -> None:
    replay(read_workload(tmp_path / "w"), load_topology(f"switch:{ranks}"))


def test_a_collective_of_zero_bytes_is_refused_before_writing(tmp_path):
    host, _ = documents("1.0.2-chakra.0.0.4")
    for node in host["nodes"]:
        if node["name"] == "record_param_comms":
            node["inputs"]["values"][0] = []
            node["outputs"]["values"] = []
        if node["name"].startswith("c10d::"):
            node["inputs"]["values"][0] = []
    message = refused(tmp_path, host)
    assert message.startswith(str(tmp_path / "h.json") + ": the converted workload would not replay: rank 0: ")
    assert "comm_size is 0; communication needs a positive size" in message


def test_a_rank_with_nothing_to_replay_is_refused_before_writing(tmp_path):
    run = ScriptedRun(rank=0, world=1, schema="1.0.1")
    with run.op(1, "aten::empty", 0):
        pass
    host, _ = run.documents()
    assert "no nodes after the GlobalMetadata" in refused(tmp_path, host)


def host_files(tmp_path: Path, script, edit=None) -> list[Path]:
    """Two ranks' host traces written to ``tmp_path/h{rank}.json``: ``script(rank, run)`` records
    each rank's calls inside one top-level op; ``edit(rank, host)`` may damage a document."""
    paths = []
    for rank in range(2):
        run = ScriptedRun(rank=rank, world=2)
        with run.op(1, "step", 2):
            script(rank, run)
        host, _ = run.documents()
        if edit:
            edit(rank, host)
        paths.append(tmp_path / f"h{rank}.json")
        paths[-1].write_text(json.dumps(host))
    return paths


def test_a_send_to_its_own_rank_is_refused(tmp_path):
    def itself(rank, host):
        if rank == 0:
            node_named(host, "c10d::send")["inputs"]["values"][2] = 0  # dstRank: itself

    hosts = host_files(tmp_path, lambda rank, run: run.p2p(1, "send" if rank == 0 else "recv", 64, 1 - rank, seq=1, kernel_us=5), itself)
    with pytest.raises(InputError, match=r"h0.json: host op \d+ \(c10d::send\): its peer rank 0 is not another of the 2 ranks traced"):
        convert_pytorch(hosts, None, tmp_path / "w")


def test_undamaged_traces_still_replay(tmp_path):
    host, kineto = documents()
    result = convert(tmp_path, host, kineto, replicate=2)
    assert result.repairs == {} and not any("repaired" in w for w in result.warnings)
    replays(tmp_path, 2)


# ---------------------------------------------------------------------- the command line
def test_kineto_takes_several_files_after_one_flag(cli, tmp_path):
    """``--kineto a.json b.json``: the second file lands among the host traces and is recognized."""
    paths = []
    for rank in range(2):
        host, kineto = documents(rank=rank)
        for kind, doc in (("host", host), ("kineto", kineto)):
            paths.append(tmp_path / f"{kind}{rank}.json")
            paths[-1].write_text(json.dumps(doc))
    host0, kineto0, host1, kineto1 = paths
    result = cli("workload", "from-pytorch", host0, host1, "--kineto", kineto0, kineto1, "-o", tmp_path / "w", "--json")
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert [r["kineto_trace"] for r in document["ranks"]] == [str(kineto0), str(kineto1)]
    assert document["repairs"] == {}


def test_strict_refuses_from_the_command_line(cli, tmp_path):
    host, kineto = documents()
    event_of(kineto, "kernel")["dur"] = -1
    (tmp_path / "h.json").write_text(json.dumps(host))
    (tmp_path / "k.json").write_text(json.dumps(kineto))
    base = ["workload", "from-pytorch", tmp_path / "h.json", "-k", tmp_path / "k.json", "--replicate", "2", "-o"]
    repaired = cli(*base, tmp_path / "w", "--json")
    assert repaired.exit_code == 0 and "repaired: 1 negative duration read as 0" in " ".join(repaired.stderr.split())
    document = json.loads(repaired.stdout)
    jsonschema.validate(document, json.loads((Path(__file__).parents[1] / "schemas" / "from-pytorch.schema.json").read_text()))
    assert document["repairs"] == {"negative_duration": 1}
    strict = cli(*base, tmp_path / "s", "--strict")
    assert strict.exit_code == 2 and "Traceback" not in strict.stderr and "--strict" in strict.stderr


def test_ranks_that_would_wait_for_each_other_are_refused(tmp_path):
    """Rank 0 sends, then all-gathers; rank 1 all-gathers, then receives: each waits for the other."""
    def script(rank, run):
        if rank == 0:
            run.p2p(1, "send", 64, 1, seq=1, kernel_us=5)
            run.collective(1, "all-gather", 64, seq=2, kernel_us=5)
        else:
            run.collective(1, "all-gather", 64, seq=1, kernel_us=5)
            run.p2p(1, "recv", 64, 0, seq=2, kernel_us=5)

    hosts = host_files(tmp_path, script)
    with pytest.raises(InputError, match=r"h0.json: the converted workload would not replay: rank 0: its nodes would wait for each other forever \(rank 0 node \d+ -> "):
        convert_pytorch(hosts, None, tmp_path / "w")
    assert not list(tmp_path.glob("w.*"))


def test_replicate_refuses_point_to_point_calls(tmp_path):
    run = ScriptedRun(rank=0, world=2)
    with run.op(1, "step", 2):
        run.p2p(1, "send", 64, 1, seq=1, kernel_us=5)
    host, _ = run.documents()
    assert "--replicate copies one rank's trace, and its send/recv calls name one peer" in refused(tmp_path, host, replicate=2)


def test_a_group_some_of_whose_members_never_call_it_is_refused(tmp_path):
    """Rank 1 names another process group for the call rank 0 makes in the default one."""
    hosts = host_files(tmp_path, lambda rank, run: run.collective(1, "all-gather", 64, seq=1, kernel_us=5, pg_name="0" if rank == 0 else "7"))
    with pytest.raises(InputError, match=r"do not call the same collectives in the default group \(rank 0: 1, rank 1: 0\)"):
        convert_pytorch(hosts, None, tmp_path / "w")


def test_names_with_lone_surrogates_are_written_with_question_marks(tmp_path):
    """``"\\ud800"`` is valid JSON but not Unicode: protobuf cannot write it."""
    from chakra_collectives.converters.chakra_et.workload_reader import read_node_names

    host, kineto = documents()
    next(e for e in kineto["traceEvents"] if e.get("name") == "gemm_fwd1")["name"] = "bad" + chr(0xD800)
    result = convert(tmp_path, host, kineto, replicate=2)
    assert result.repairs == {"bad_text": 1}
    assert "bad?" in read_node_names(read_workload(tmp_path / "w"))
