"""PyTorch execution traces (+ Kineto) -> workload ETs: every schema, linking, dependencies,
ranks, process groups, bad input; the real 1.0.2 host trace from Chakra's test data."""

from __future__ import annotations

import json
from pathlib import Path

import networkx as nx
import pytest
from chakra.schema.protobuf.et_def_pb2 import COMM_COLL_NODE, COMM_RECV_NODE, COMM_SEND_NODE, COMP_NODE, GlobalMetadata, Node
from chakra.src.third_party.utils import protolib

from chakra_collectives.converters.pytorch.convert import convert_pytorch
from chakra_collectives.errors import InputError
from chakra_collectives.ir import Collective
from pytorch_traces import DDP_COLLECTIVES, DDP_GPU_COMPUTE_US, DDP_KERNELS, SCHEMAS, ScriptedRun, ddp_step, write_pair


def read_nodes(path: Path) -> list[Node]:
    stream = protolib.openFileRd(str(path))
    protolib.decodeMessage(stream, GlobalMetadata())
    nodes = []
    while True:
        node = Node()
        if not protolib.decodeMessage(stream, node):
            return nodes
        nodes.append(node)


def attr(node: Node, name: str):
    for a in node.attr:
        if a.name == name:
            return getattr(a, a.WhichOneof("value"))
    return None


def graph_of(nodes: list[Node]) -> nx.DiGraph:
    g = nx.DiGraph()
    for n in nodes:
        g.add_node(n.id)
        for d in list(n.data_deps) + list(n.ctrl_deps):
            g.add_edge(d, n.id)
    return g


def convert_runs(tmp_path: Path, runs: list[ScriptedRun], *, kineto: bool = True, prefix: str = "w", **options):
    pairs = [write_pair(run, tmp_path, f"rank{i}") for i, run in enumerate(runs)]
    result = convert_pytorch([h for h, _ in pairs], [k for _, k in pairs] if kineto else None, tmp_path / prefix, **options)
    return result, [read_nodes(tmp_path / f"{prefix}.{r}.et") for r in range(len(runs))]


@pytest.mark.parametrize("schema", SCHEMAS)
@pytest.mark.parametrize("record_function_ids", [True, False], ids=["rf_id", "call-order"])
def test_collectives_and_gpu_durations_in_every_schema(tmp_path, schema, record_function_ids):
    runs = [ddp_step(r, 2, schema=schema, record_function_ids=record_function_ids) for r in range(2)]
    result, ranks = convert_runs(tmp_path, runs)
    for rank, nodes in enumerate(ranks):
        colls = [n for n in nodes if n.type == COMM_COLL_NODE]
        found = [(Collective.from_chakra_comm_type(attr(n, "comm_type")).value, attr(n, "comm_size")) for n in colls]
        assert found == DDP_COLLECTIVES
        gpu = sorted(n.duration_micros for n in nodes if n.type == COMP_NODE and attr(n, "is_cpu_op") is False)
        expected = sorted(DDP_GPU_COMPUTE_US)
        expected[expected.index(100.0)] += rank  # rank r's first GEMM is r us longer
        assert gpu == sorted(expected)
        cpu = sum(n.duration_micros for n in nodes if n.type == COMP_NODE and attr(n, "is_cpu_op") is True)
        assert cpu == pytest.approx(runs[rank].cpu_busy_us, abs=1)
    assert result.ranks[0]["linked_by"] == ("rf_id" if record_function_ids else "call order")
    assert [c["measured_us"] for c in result.collectives] == [DDP_KERNELS["broadcast"], DDP_KERNELS["all_reduce_2"], DDP_KERNELS["all_reduce_3"]]


def test_both_linking_methods_give_the_same_file(tmp_path):
    convert_runs(tmp_path, [ddp_step(0, 1)], prefix="by_rf")
    convert_runs(tmp_path, [ddp_step(0, 1, record_function_ids=False)], prefix="by_order")
    assert (tmp_path / "by_rf.0.et").read_bytes() == (tmp_path / "by_order.0.et").read_bytes()


def test_dependencies_follow_what_the_run_obeyed(tmp_path):
    _, (nodes,) = convert_runs(tmp_path, [ddp_step(0, 1)])
    by_name: dict[str, list[Node]] = {}
    for n in nodes:
        by_name.setdefault(n.name, []).append(n)
    g = graph_of(nodes)
    broadcast, reduce_2, reduce_3 = [n for n in nodes if n.type == COMM_COLL_NODE]

    def before(a: Node, b: Node) -> bool:
        return nx.has_path(g, a.id, b.id)

    assert before(broadcast, by_name["gemm_fwd1"][0])  # wait(1) on the main thread's stream
    assert reduce_2.id in by_name["sgd_update"][0].data_deps and reduce_3.id in by_name["sgd_update"][0].data_deps  # waits
    assert by_name["gemm_bwd2"][0].id in reduce_2.data_deps  # the NCCL stream waits for the caller's stream
    assert before(by_name["gemm_fwd2"][0], by_name["loss"][0])  # stream order
    assert before(by_name["loss"][0], by_name["gemm_bwd2"][0])  # backward after forward (thread hand-over)
    assert not before(reduce_2, by_name["gemm_bwd1"][0])  # the all-reduce overlaps the next backward GEMM
    assert by_name["copy_loss"][0].id in by_name["aten::detach"][0].data_deps  # .item() blocked until the copy was done


def test_host_trace_alone_keeps_the_collectives_and_says_what_is_missing(tmp_path):
    result, ranks = convert_runs(tmp_path, [ddp_step(r, 2) for r in range(2)], kineto=False)
    for nodes in ranks:
        assert [n.type for n in nodes] == [COMM_COLL_NODE] * 3
        assert [attr(n, "comm_size") for n in nodes] == [size for _, size in DDP_COLLECTIVES]
        assert [list(n.data_deps) for n in nodes] == [[], [0], [1]]
    assert any("no Kineto trace" in w and "0 ns" in w for w in result.warnings)


def test_host_trace_times_are_used_when_present(tmp_path):
    host, _ = ddp_step(0, 1).documents()
    for node in host["nodes"]:
        if node["name"] == "aten::detach":
            node["inclusive_dur"], node["exclusive_dur"], node["ts"] = 25, 25, 5000
    path = tmp_path / "et_plus.json"
    path.write_text(json.dumps(host))
    result = convert_pytorch([path], None, tmp_path / "w")
    nodes = read_nodes(tmp_path / "w.0.et")
    assert [n.duration_micros for n in nodes if n.type == COMP_NODE] == [25]
    assert result.ranks[0]["linked_by"] == "host trace"


def test_ranks_are_paired_by_the_traces_own_rank(tmp_path):
    runs = {r: ddp_step(r, 2) for r in range(2)}
    host0, kineto0 = runs[0].documents()
    host1, kineto1 = runs[1].documents()
    (tmp_path / "a_host.json").write_text(json.dumps(host1))  # file names sort the other way round
    (tmp_path / "b_host.json").write_text(json.dumps(host0))
    (tmp_path / "a_kineto.json").write_text(json.dumps(kineto0))
    (tmp_path / "b_kineto.json").write_text(json.dumps(kineto1))
    convert_pytorch([tmp_path / "a_host.json", tmp_path / "b_host.json"], [tmp_path / "a_kineto.json", tmp_path / "b_kineto.json"], tmp_path / "w")
    for rank in range(2):
        gemm = [n for n in read_nodes(tmp_path / f"w.{rank}.et") if n.name == "gemm_fwd1"]
        assert gemm[0].duration_micros == DDP_KERNELS["gemm_fwd1"] + rank


def test_subgroups_are_written_with_their_ranks(tmp_path):
    runs = []
    for r in range(4):
        run = ScriptedRun(rank=r, world=4)
        members = [0, 1] if r < 2 else [2, 3]
        with run.op(1, "step", 2):
            run.collective(1, "all-reduce", 1024, seq=1, kernel_us=10, pg_name="1" if r < 2 else "2", pg_ranks=members)
            run.collective(1, "all-gather", 256, seq=2, kernel_us=10)
        runs.append(run)
    result, ranks = convert_runs(tmp_path, runs)
    assert json.loads((tmp_path / "w.json").read_text()) == {"1": [0, 1], "2": [2, 3]}
    for r, nodes in enumerate(ranks):
        colls = [n for n in nodes if n.type == COMM_COLL_NODE]
        assert attr(colls[0], "pg_name") == ("1" if r < 2 else "2")
        assert attr(colls[1], "pg_name") is None
        assert attr(colls[1], "comm_size") == 256 * 4  # all-gather: each rank's shard, as ASTRA-sim reads it


def test_uneven_all_to_all_is_replayed_at_its_largest_size(tmp_path):
    runs = []
    for r in range(2):
        run = ScriptedRun(rank=r, world=2)
        with run.op(1, "step", 2):
            run.collective(1, "all-to-all", 100 * (r + 1), seq=1, kernel_us=10)
        runs.append(run)
    result, ranks = convert_runs(tmp_path, runs)
    assert [attr(nodes[-1], "comm_size") for nodes in ranks] == [800, 800]
    assert any("different sizes" in w for w in result.warnings)


def test_collectives_the_replayer_cannot_run_are_left_out_with_a_warning(tmp_path):
    run = ScriptedRun(rank=0, world=1)
    with run.op(1, "step", 2):
        run.collective(1, "gather", 64, seq=1, kernel_us=10)
        run.collective(1, "all-reduce", 64, seq=2, kernel_us=10)
    result, (nodes,) = convert_runs(tmp_path, [run])
    assert [Collective.from_chakra_comm_type(attr(n, "comm_type")) for n in nodes if n.type == COMM_COLL_NODE] == [Collective.ALL_REDUCE]
    assert any("gather" in w and "left out" in w for w in result.warnings)


def test_point_to_point_calls_become_sends_and_receives(tmp_path):
    runs = []
    for r in range(2):
        run = ScriptedRun(rank=r, world=2)
        with run.op(1, "step", 2):
            run.p2p(1, "send" if r == 0 else "recv", 4096, peer=1 - r, seq=1, kernel_us=20, tag=3)
        runs.append(run)
    _, (sender, receiver) = convert_runs(tmp_path, runs)
    (send,) = [n for n in sender if n.type == COMM_SEND_NODE]
    (recv,) = [n for n in receiver if n.type == COMM_RECV_NODE]
    assert (attr(send, "comm_dst"), attr(send, "comm_size"), attr(send, "comm_tag")) == (1, 16384, 3)
    assert (attr(recv, "comm_src"), attr(recv, "comm_size"), attr(recv, "comm_tag")) == (0, 16384, 3)


def test_replicate_copies_one_rank(tmp_path):
    result, _ = convert_runs(tmp_path, [ddp_step(0, 4)], replicate=4)
    assert [p.name for p in result.paths] == [f"w.{r}.et" for r in range(4)]
    assert len({p.read_bytes() for p in result.paths}) == 1


# ---------------------------------------------------------------------- bad input
def test_a_kineto_trace_given_as_host_trace_is_named(tmp_path):
    _, kineto = write_pair(ddp_step(), tmp_path, "x")
    with pytest.raises(InputError, match="a Kineto trace, and no execution trace given") as error:
        convert_pytorch([kineto], None, tmp_path / "w")
    assert str(kineto) in str(error.value)


@pytest.mark.parametrize(
    "content, message",
    [("{not json", "not valid JSON"), ('{"schema": "1.0.1"}', "no 'nodes' list"),
     ('{"nodes": [{"id": 1}]}', "node 1 has no 'name'"), ('{"nodes": [{"name": "x"}]}', "node #1: id is missing; expected an integer id")],
)
def test_broken_host_traces_are_named(tmp_path, content, message):
    path = tmp_path / "host.json"
    path.write_text(content)
    with pytest.raises(InputError, match=message) as error:
        convert_pytorch([path], None, tmp_path / "w")
    assert str(error.value).startswith(str(path))
    assert not list(tmp_path.glob("w.*"))


def test_one_kineto_trace_per_rank(tmp_path):
    (h0, k0), (h1, _) = write_pair(ddp_step(0), tmp_path, "r0"), write_pair(ddp_step(1), tmp_path, "r1")
    with pytest.raises(InputError, match="2 execution traces but 1 Kineto"):
        convert_pytorch([h0, h1], [k0], tmp_path / "w")


def test_ranks_that_call_different_collectives_are_named(tmp_path):
    runs = []
    for r in range(2):
        run = ScriptedRun(rank=r, world=2)
        with run.op(1, "step", 2):
            run.collective(1, "all-reduce" if r == 0 else "all-gather", 64, seq=1, kernel_us=10)
        runs.append(run)
    with pytest.raises(InputError, match=r"collective #1 of the default group differs between ranks: rank 0: all-reduce .*rank 1: all-gather"):
        convert_runs(tmp_path, runs)
    assert not list(tmp_path.glob("w.*"))


# ---------------------------------------------------------------------- real traces
@pytest.mark.interop
def test_real_host_trace_1_0_2_finds_its_all_gathers(interop, tmp_path):
    """Chakra's test trace: ten c10d::allgather_ of one float each in a group of two ranks."""
    host = interop / "chakra" / "pytorch_host_1.0.2-chakra.0.0.4.json"
    result = convert_pytorch([host], None, tmp_path / "w", replicate=2)
    assert [(c["collective"], c["size_bytes"]) for c in result.collectives] == [("all-gather", 4)] * 10
    for rank in range(2):
        nodes = read_nodes(tmp_path / f"w.{rank}.et")
        assert [attr(n, "comm_type") for n in nodes] == [Collective.ALL_GATHER.chakra_comm_type] * 10
        assert [list(n.data_deps) for n in nodes[1:]] == [[i] for i in range(9)]  # one NCCL stream: call order
    assert any("no Kineto trace" in w for w in result.warnings)


# ---------------------------------------------------------------------- command line
def test_command_takes_globs_and_prints_json(cli, tmp_path):
    for r in range(2):
        write_pair(ddp_step(r, 2), tmp_path, f"rank{r}")
    result = cli("workload", "from-pytorch", str(tmp_path / "rank*_host.json"), "--kineto", str(tmp_path / "rank*_kineto.json"),
                 "-o", tmp_path / "out" / "step", "--json")
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert [c["collective"] for c in document["collectives"]] == [kind for kind, _ in DDP_COLLECTIVES]
    assert document["files"] == [str(tmp_path / "out" / f"step.{r}.et") for r in range(2)]
    assert [r["linked_by"] for r in document["ranks"]] == ["rf_id", "rf_id"]


def test_command_summary_and_errors(cli, tmp_path):
    host, kineto = write_pair(ddp_step(0, 1), tmp_path, "r0")
    result = cli("workload", "from-pytorch", host, "-k", kineto, "-o", tmp_path / "w")
    assert result.exit_code == 0
    assert "all-reduce" in result.stdout and "written:" in result.stdout and "next: chakra-coll replay" in result.stdout
    missing = cli("workload", "from-pytorch", str(tmp_path / "nothing*.json"), "-o", tmp_path / "x")
    assert missing.exit_code == 2 and "no execution trace matches" in missing.stderr and "Traceback" not in missing.stderr
    swapped = cli("workload", "from-pytorch", kineto, "-o", tmp_path / "x")
    assert swapped.exit_code == 2 and "a Kineto trace, and no execution trace given" in swapped.stderr
    assert not list(tmp_path.glob("x.*"))


def test_gpu_work_of_iterations_the_execution_trace_does_not_cover_is_left_out(tmp_path):
    host, kineto = ddp_step(0, 1).documents()
    kineto["traceEvents"] += [  # an earlier iteration's launch and kernel
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "tid": 4100, "ts": 10.0, "dur": 2.0, "args": {"correlation": 1}},
        {"ph": "X", "cat": "kernel", "name": "earlier_step", "tid": 7, "ts": 20.0, "dur": 500.0, "args": {"stream": 7, "correlation": 1}},
    ]
    (tmp_path / "h.json").write_text(json.dumps(host))
    (tmp_path / "k.json").write_text(json.dumps(kineto))
    result = convert_pytorch([tmp_path / "h.json"], [tmp_path / "k.json"], tmp_path / "w")
    assert result.ranks[0]["gpu_events_of_other_iterations"] == 1
    assert "earlier_step" not in {n.name for n in read_nodes(tmp_path / "w.0.et")}
