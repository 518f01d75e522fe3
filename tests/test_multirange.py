"""Messages that carry several chunk ranges: TACOS's matcher, the IR, verify, the ET files, MSCCL export."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from chakra.schema.protobuf.et_def_pb2 import COMM_RECV_NODE, COMM_SEND_NODE, AttributeProto

from chakra_collectives.converters.chakra_et import read_algorithm, write_algorithm
from chakra_collectives.converters.msccl.lift import lift_algorithm
from chakra_collectives.errors import ChakraCollError
from chakra_collectives.ir import Buffer, Collective, OpKind
from chakra_collectives.ir.matching import match_messages
from chakra_collectives.ir.ranges import split_ranges
from chakra_collectives.ir.structure import structural_problems
from chakra_collectives.network import predict_time
from chakra_collectives.synth.channels import build_channels
from chakra_collectives.synth.lowering import all_gather_algorithm, reduce_scatter_algorithm
from chakra_collectives.synth.matcher import match_all_gather
from chakra_collectives.synth.tacos import MergeVariant, tacos
from chakra_collectives.topology import mesh2d, torus2d
from chakra_collectives.verify import verify_algorithm
from chakra_collectives.verify.semantics import run_moves, run_symbolically

import et_edit

SIZE = 2**22  # 64 KiB chunks on 64 NPUs: a cap of 16 chunks a message at latency ratio 40


@pytest.fixture(scope="module")
def schedule():
    channels = build_channels(torus2d(8, 8), chunk_bytes=SIZE // 64)
    return match_all_gather(channels, 1, seed=3, latency_ratio=40.0, extend_held=True, ranges=4)


@pytest.fixture(scope="module")
def algo(schedule):
    return all_gather_algorithm(schedule, size_bytes=SIZE)


def test_every_npu_gets_every_chunk_once(schedule):
    assert schedule.multi_run
    message, chunk = schedule.chunks_of(np.arange(schedule.num_transfers))
    pairs = schedule.dst[message].astype(np.int64) * 64 + chunk
    assert len(np.unique(pairs)) == len(pairs) == 64 * 63  # each (NPU, chunk) pair once
    assert not np.any(chunk == schedule.dst[message])  # never an NPU's own chunk
    runs_per_message = np.diff(schedule.more_ptr) + 1
    assert runs_per_message.max() <= 4 and runs_per_message.max() > 1
    # a message's runs are disjoint runs of candidates, within its cap
    assert np.all(schedule.count <= schedule.max_chunks)


def test_a_message_forwards_only_chunks_its_sender_holds(schedule):
    """Every chunk a message carries reached its sender before the message leaves (or is its own)."""
    arrival = np.full((64, 64), np.inf)
    message, chunk = schedule.chunks_of(np.arange(schedule.num_transfers))
    arrival[schedule.dst[message], chunk] = schedule.end[message]
    arrival[np.arange(64), np.arange(64)] = 0.0
    assert np.all(arrival[schedule.src[message], chunk] <= schedule.start[message])


def test_fewer_messages_than_one_run_each():
    channels = build_channels(torus2d(8, 8), chunk_bytes=SIZE // 64)
    one = match_all_gather(channels, 1, seed=3, latency_ratio=40.0, extend_held=True)
    several = match_all_gather(channels, 1, seed=3, latency_ratio=40.0, extend_held=True, ranges=4)
    assert several.num_transfers < one.num_transfers
    assert not one.multi_run


def test_the_verifier_proves_the_all_gather(algo, schedule):
    assert algo.ops.multi_range
    report = verify_algorithm(algo)
    assert report.ok, report
    # the model replays the schedule: a message is timed by all the chunks it carries
    assert predict_time(algo, torus2d(8, 8)) == pytest.approx(schedule.time_ns)


def test_numpy_and_fifo_semantics_agree(algo):
    partner = match_messages(algo).partner
    assert run_moves(algo, partner).storage == run_symbolically(algo, partner, order="fifo").storage


def _with_range(algo, kind: OpKind, shift: int):
    """``algo`` with the first further range of the first ``kind`` that has one moved by ``shift`` slots."""
    ops = algo.ops
    index = int(np.flatnonzero((np.diff(ops.more_ptr) > 0) & (ops.kind == kind))[0])
    more_off = np.array(ops.more_off, dtype=np.int64)
    more_off[int(ops.more_ptr[index])] += shift
    return algo.with_ops(replace(ops, more_off=more_off)), index


def test_the_verifier_catches_a_wrong_range(algo):
    wrong, index = _with_range(algo, OpKind.RECV, 1)  # lands one slot off
    report = verify_algorithm(wrong)
    assert not report.ok
    out, _ = _with_range(algo, OpKind.SEND, 10**6)  # reads past the buffer
    problems = structural_problems(out)
    assert problems and "beyond the buffer's 64 chunks" in problems[0]


def test_et_round_trip_keeps_the_ranges(algo, tmp_path):
    write_algorithm(algo, tmp_path / "ag")
    back = read_algorithm(tmp_path / "ag")
    assert back.ops.multi_range and back.equals(algo)
    assert verify_algorithm(back).ok
    # on file: cc_src / cc_dst name the first range, cc_ranges the rest, comm_size all of them
    _, nodes = et_edit.load(Path(f"{tmp_path / 'ag'}.5.et"))
    chunk_bytes = SIZE // 64
    carrying = [n for n in nodes if any(a.name == "cc_ranges" for a in n.attr)]
    assert carrying
    for node in carrying:
        ref = et_edit.attr(node, "cc_src" if node.type == COMM_SEND_NODE else "cc_dst").int64_list.values
        more = list(et_edit.attr(node, "cc_ranges").int64_list.values)
        assert et_edit.attr(node, "comm_size").int64_val == (ref[2] + sum(more[1::2])) * chunk_bytes


@pytest.mark.parametrize(
    "values, needle",
    [([3], "cc_ranges must be an int64_list [offset, count, ...]"), ([3, 0], "cc_ranges must be an int64_list"), ([-1, 2], "cc_ranges must be")],
)
def test_a_bad_range_attribute_is_refused(algo, tmp_path, values, needle):
    write_algorithm(algo, tmp_path / "ag")

    def corrupt(nodes):
        node = next(n for n in nodes if any(a.name == "cc_ranges" for a in n.attr))
        ranges = et_edit.attr(node, "cc_ranges").int64_list.values
        del ranges[:]
        ranges.extend(values)

    et_edit.edit(Path(f"{tmp_path / 'ag'}.5.et"), corrupt)
    with pytest.raises(ChakraCollError) as caught:
        read_algorithm(tmp_path / "ag")
    assert needle in str(caught.value) and "\n" not in str(caught.value)


def test_a_range_attribute_on_a_compute_node_is_refused(algo, tmp_path):
    write_algorithm(algo, tmp_path / "ag")

    def misplace(nodes):
        node = next(n for n in nodes if n.type not in (COMM_SEND_NODE, COMM_RECV_NODE))
        attribute = AttributeProto(name="cc_ranges")
        attribute.int64_list.values.extend([1, 1])
        node.attr.append(attribute)

    et_edit.edit(Path(f"{tmp_path / 'ag'}.5.et"), misplace)
    with pytest.raises(ChakraCollError) as caught:
        read_algorithm(tmp_path / "ag")
    assert "cc_ranges belongs on a SEND with cc_src or a RECV with cc_dst" in str(caught.value)


def test_split_ranges_is_the_same_all_gather_in_one_range_messages(algo):
    split = algo.with_ops(split_ranges(algo.ops))
    assert not split.ops.multi_range
    sends = algo.ops.kind == OpKind.SEND
    assert np.count_nonzero(split.ops.kind == OpKind.SEND) == np.count_nonzero(sends) + int(np.diff(algo.ops.more_ptr)[sends].sum())
    assert verify_algorithm(split).ok


def test_msccl_export_sends_one_step_per_range(algo):
    lifted = lift_algorithm(algo)
    assert any("one step per range" in w for w in lifted.warnings)
    steps = [s for gpu in lifted.program.gpus for tb in gpu.threadblocks for s in tb.steps if s.type.value == "s"]
    assert sum(s.cnt for s in steps) == 64 * 63  # every chunk an NPU forwards, one run per step


def test_tacos_all_gather_with_several_runs_verifies_and_other_collectives_take_one():
    variant = MergeVariant(40.0, extend_held=True, ranges=3)
    found = tacos(mesh2d(8, 8), Collective.ALL_GATHER, SIZE, merge_variants=(variant,), trials=1)
    assert found.algorithm.ops.multi_range and verify_algorithm(found.algorithm).ok
    assert found.algorithm.provenance["phase_ranges"] == "3"
    reduced = tacos(mesh2d(8, 8), Collective.ALL_REDUCE, SIZE, merge_variants=(variant,), trials=1)
    assert not reduced.algorithm.ops.multi_range and verify_algorithm(reduced.algorithm).ok


def test_a_reduce_scatter_is_not_mirrored_from_several_runs(schedule):
    with pytest.raises(ValueError, match="one run each"):
        reduce_scatter_algorithm(schedule, size_bytes=SIZE)


def test_one_range_tables_are_unchanged_by_the_range_helpers():
    from chakra_collectives.synth.baselines import ring

    algo = ring(Collective.ALL_GATHER, 4, size_bytes=4096)
    assert split_ranges(algo.ops) is algo.ops
    assert algo.ops.ranged_slots(algo.ops.src_off, algo.ops.dst_off) == {}
    chosen = np.flatnonzero(algo.ops.kind == OpKind.SEND)
    assert algo.ops.slots(chosen, algo.ops.src_off[chosen]).tolist() == algo.ops.src_off[chosen].tolist()  # one chunk each
    assert Buffer.OUTPUT.letter == "o"


def test_the_commands_read_several_range_files(algo, schedule, cli, tmp_path):
    import json

    write_algorithm(algo, tmp_path / "ag")
    verified = cli("verify", tmp_path / "ag", "--json")
    assert verified.exit_code == 0 and json.loads(verified.stdout)["ok"]
    replayed = cli("replay", tmp_path / "ag", "-t", "torus2d:8x8", "--json")
    assert replayed.exit_code == 0
    assert json.loads(replayed.stdout)["total_ns"] == pytest.approx(schedule.time_ns)  # each message timed by all its chunks
    exported = cli("export-msccl", tmp_path / "ag", "-o", tmp_path / "ag.xml", "--json")
    assert exported.exit_code == 0, exported.stdout
    assert any("one step per range" in w for w in json.loads(exported.stdout)["warnings"])
    assert cli("import-msccl", tmp_path / "ag.xml", "-o", tmp_path / "back", "-s", "4MiB").exit_code == 0
    assert cli("verify", tmp_path / "back").exit_code == 0


def test_several_runs_are_asked_for_never_the_default():
    """One run a message unless asked (``--several-runs``): at 4,096 NPUs several runs cost
    1.6-1.9x the synthesis time, so the default keeps one."""
    from chakra_collectives.synth.tacos import LARGE_MERGE_VARIANTS, SEVERAL_RUNS_VARIANTS, default_variants

    assert all(v.ranges == 1 for n in (64, 1024, 4096, 16384) for v in default_variants(n, 1))
    assert default_variants(4096, 1) == LARGE_MERGE_VARIANTS
    assert default_variants(4096, 1, several_runs=True) == SEVERAL_RUNS_VARIANTS and all(v.ranges > 1 for v in SEVERAL_RUNS_VARIANTS)
    assert all(v.ranges == 1 for v in default_variants(4096, 1, switched=True, several_runs=True))


def test_synth_several_runs_writes_files_the_verifier_proves(cli, tmp_path):
    import json

    # a mesh: on a torus the planned trees (tests/test_torus_trees.py), several runs a message too, win either way
    plain = cli("synth", "-t", "mesh2d:8x8", "-c", "all-gather", "-s", "4MiB", "-a", "tacos", "-k", "1", "--json")
    several = cli("synth", "-t", "mesh2d:8x8", "-c", "all-gather", "-s", "4MiB", "-a", "tacos", "-k", "1", "--several-runs", "-o", tmp_path / "ag", "--json")
    assert plain.exit_code == 0 and several.exit_code == 0, several.stdout
    assert json.loads(several.stdout)["operations"] < json.loads(plain.stdout)["operations"]  # fewer, longer messages
    assert read_algorithm(tmp_path / "ag").ops.multi_range
    checked = cli("verify", tmp_path / "ag", "--json")
    assert checked.exit_code == 0 and json.loads(checked.stdout)["ok"]
