"""The verifier proves correct algorithms and catches each kind of wrong one precisely."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from chakra.schema.protobuf.et_def_pb2 import COMM_RECV_NODE, COMM_SEND_NODE, COMP_NODE
from hypothesis import given, settings
from hypothesis import strategies as st

from chakra_collectives.converters.chakra_et import read_algorithm, write_algorithm
from chakra_collectives.ir import AlgorithmBuilder, Buffer, Collective, OpKind
from chakra_collectives.synth.baselines import ring
from chakra_collectives.verify import verify_algorithm
from chakra_collectives.verify.report import Status
from chakra_collectives.ir.matching import match_messages
from chakra_collectives.verify.semantics import output_view, run_symbolically

import et_edit


def _status(report) -> dict[str, str]:
    return {c.name: c.status.value for c in report.checks}


@pytest.mark.parametrize("collective", [Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_REDUCE])
@pytest.mark.parametrize("ranks, k", [(2, 1), (3, 2), (8, 1), (5, 3)])
def test_ring_baselines_are_proved(collective, ranks, k):
    report = verify_algorithm(ring(collective, ranks, size_bytes=ranks * k * 64, chunks_per_npu=k))
    assert report.ok, [c.summary for c in report.checks]
    assert _status(report) == {"structure": "passed", "matching": "passed", "deadlock": "passed", "semantics": "passed"}


def test_claiming_the_wrong_collective_gives_a_counterexample():
    report = verify_algorithm(ring(Collective.REDUCE_SCATTER, 4, size_bytes=4096), collective=Collective.ALL_REDUCE)
    semantics = report.check("semantics")
    assert semantics.status is Status.FAILED
    # reduce-scatter leaves rank 0 with its own reduced chunk in output[0] but nothing in output[1]
    assert semantics.summary == "counterexample: rank 0, buffer output, slot 1: expected chunk 1 summed over ranks 0-3, got nothing"


# ---------------------------------------------------------------------------- mutated files
@pytest.fixture
def ag_files(tmp_path) -> Path:
    write_algorithm(ring(Collective.ALL_GATHER, 4, size_bytes=4 * 2**20), tmp_path / "ag")
    return tmp_path / "ag"


@pytest.fixture
def ar_files(tmp_path) -> Path:
    write_algorithm(ring(Collective.ALL_REDUCE, 4, size_bytes=4 * 2**20), tmp_path / "ar")
    return tmp_path / "ar"


def _first(nodes, node_type, skip=0):
    return [n for n in nodes if n.type == node_type][skip]


def test_dropped_send_is_an_unmatched_receive(ag_files):
    dropped = {}

    def drop_last_send(nodes):
        send = [n for n in nodes if n.type == COMM_SEND_NODE][-1]  # nothing depends on the last send
        dropped["tag"] = et_edit.attr(send, "comm_tag").int32_val
        return [n for n in nodes if n is not send]

    et_edit.edit(Path(f"{ag_files}.1.et"), drop_last_send)
    report = verify_algorithm(read_algorithm(ag_files))
    matching = report.check("matching")
    assert matching.status is Status.FAILED
    assert matching.summary.startswith("rank 2: node ") and f"RECV from rank 1 tag {dropped['tag']}" in matching.summary
    assert "has no matching SEND on rank 1" in matching.summary
    assert report.check("semantics").status is Status.SKIPPED


def test_swapped_chunk_is_a_counterexample(ag_files):
    def swap(nodes):
        send = _first(nodes, COMM_SEND_NODE, skip=1)  # rank 2 forwards the block it received from rank 1
        src = et_edit.attr(send, "cc_src").int64_list
        src.values[1] = (src.values[1] + 1) % 4  # ... but reads the wrong block

    et_edit.edit(Path(f"{ag_files}.2.et"), swap)
    report = verify_algorithm(read_algorithm(ag_files))
    semantics = report.check("semantics")
    assert semantics.status is Status.FAILED
    # the wrong block reaches rank 3's output[1] and is forwarded on to rank 0, the first rank checked
    assert semantics.summary == "counterexample: rank 0, buffer output, slot 1: expected chunk 1 from rank 1, got chunk 2 from rank 2"


def test_cycle_is_named(ag_files):
    def cycle(nodes):
        nodes[0].data_deps.append(nodes[-1].id)
        nodes[-1].data_deps.append(nodes[0].id)

    et_edit.edit(Path(f"{ag_files}.0.et"), cycle)
    structure = verify_algorithm(read_algorithm(ag_files)).check("structure")
    assert structure.status is Status.FAILED and structure.summary.startswith("rank 0: node ")
    assert "dependency cycle" in structure.summary


def test_deadlock_through_messages_lists_stuck_nodes(ag_files):
    def send_after_receiving(nodes):
        first_send = _first(nodes, COMM_SEND_NODE)
        first_recv = _first(nodes, COMM_RECV_NODE)
        first_send.data_deps.append(first_recv.id)  # everyone waits for its left neighbour first

    for rank in range(4):
        et_edit.edit(Path(f"{ag_files}.{rank}.et"), send_after_receiving)
    report = verify_algorithm(read_algorithm(ag_files))
    deadlock = report.check("deadlock")
    assert deadlock.status is Status.FAILED and deadlock.summary.startswith("deadlock with eager sends")
    assert len(deadlock.details) >= 4
    assert any(line.startswith("rank 1: node ") and "RECV from rank 0 waits for node" in line for line in deadlock.details)
    assert report.check("semantics").status is Status.SKIPPED


def test_size_mismatch_names_both_sides(ar_files):
    def shrink(nodes):
        et_edit.attr(_first(nodes, COMM_SEND_NODE), "comm_size").int64_val = 1000

    et_edit.edit(Path(f"{ar_files}.1.et"), shrink)
    matching = verify_algorithm(read_algorithm(ar_files)).check("matching")
    assert matching.status is Status.FAILED
    assert "moves 1 chunks, 1000 B but its RECV (rank 2 node" in matching.summary and "expects 1 chunks, 1048576 B" in matching.summary


def test_double_reduction_is_a_fault(ar_files):
    def reduce_twice(nodes):
        reduce = _first(nodes, COMP_NODE)
        twin = type(reduce)()
        twin.CopyFrom(reduce)
        twin.id = max(n.id for n in nodes) + 1
        twin.data_deps[:] = [reduce.id]
        nodes.append(twin)

    et_edit.edit(Path(f"{ar_files}.0.et"), reduce_twice)
    semantics = verify_algorithm(read_algorithm(ar_files)).check("semantics")
    assert semantics.status is Status.FAILED
    assert any("counts rank(s) 0 twice in chunk" in text for text in [semantics.summary, *semantics.details])


def test_data_race_is_detected():
    # rank 1 receives rank 0's chunk into output[0] while, unordered with that receive, a chain of
    # local copies ends by writing rank 1's own chunk there too: the result depends on the order
    builder = AlgorithmBuilder(Collective.ALL_GATHER, num_ranks=2, chunk_count=2, size_bytes=128)
    builder.copy(0, src=(Buffer.INPUT, 0), dst=(Buffer.OUTPUT, 0), count=1)
    builder.transfer(1, 0, src=(Buffer.INPUT, 0), dst=(Buffer.OUTPUT, 1), count=1)
    builder.copy(1, src=(Buffer.INPUT, 0), dst=(Buffer.OUTPUT, 1), count=1)
    builder.transfer(0, 1, src=(Buffer.INPUT, 0), dst=(Buffer.OUTPUT, 0), count=1)
    hop = builder.copy(1, src=(Buffer.INPUT, 0), dst=(Buffer.SCRATCH, 0), count=1)
    hop = builder.copy(1, src=(Buffer.SCRATCH, 0), dst=(Buffer.SCRATCH, 1), count=1, deps=[hop])
    builder.copy(1, src=(Buffer.SCRATCH, 1), dst=(Buffer.OUTPUT, 0), count=1, deps=[hop])
    semantics = verify_algorithm(builder.build()).check("semantics")
    assert semantics.status is Status.FAILED
    text = " ".join([semantics.summary, *semantics.details])
    assert "data race: rank 1, output[0]: node 2 (RECV) writes it and node 5 (COPY) writes it, and no dependency or message orders them" in text


def test_write_after_read_race_is_detected():
    # rank 0 sends output[0] while, unordered with that send, a copy overwrites output[0]: whichever
    # order the verifier executes, the result can differ on the real runtime
    builder = AlgorithmBuilder(Collective.ALL_GATHER, num_ranks=2, chunk_count=2, size_bytes=128)
    for r in range(2):
        own = builder.copy(r, src=(Buffer.INPUT, 0), dst=(Buffer.OUTPUT, r), count=1)
        builder.transfer(r, 1 - r, src=(Buffer.OUTPUT, r), dst=(Buffer.OUTPUT, r), count=1, send_deps=[own])
    builder.copy(0, src=(Buffer.SCRATCH, 0), dst=(Buffer.OUTPUT, 0), count=1, deps=[0])  # scratch holds nothing
    algo = builder.build(scratch_chunks=[1, 0])
    semantics = verify_algorithm(algo).check("semantics")
    assert semantics.status is Status.FAILED
    assert "rank 0, output[0]: node 1 (SEND) reads it and node 3 (COPY) writes it, and no dependency or message orders them" in (
        " ".join([semantics.summary, *semantics.details])
    )


def test_head_to_head_sends_deadlock_only_under_rendezvous():
    # both ranks send first and post their receive after the send completes
    builder = AlgorithmBuilder(Collective.ALL_GATHER, num_ranks=2, chunk_count=2, size_bytes=64)
    for r in range(2):
        builder.copy(r, src=(Buffer.INPUT, 0), dst=(Buffer.OUTPUT, r), count=1)
        send = builder.send(r, 1 - r, tag=0, src=(Buffer.INPUT, 0), count=1)
        builder.recv(r, 1 - r, tag=0, dst=(Buffer.OUTPUT, 1 - r), count=1, deps=[send])
    algo = builder.build()
    relaxed = verify_algorithm(algo)
    assert relaxed.ok
    note = relaxed.check("deadlock").details
    assert note and note[0].startswith("note: with rendezvous sends it would deadlock")
    strict = verify_algorithm(algo, send_semantics=("eager", "rendezvous"))
    deadlock = strict.check("deadlock")
    assert not strict.ok and deadlock.summary.startswith("deadlock with rendezvous sends: 4 of 6 operations never complete")
    assert any("SEND to rank 1 waits for its RECV (node 2 on rank 1) to be posted" in line for line in deadlock.details)


@settings(max_examples=60, deadline=None)
@given(ranks=st.integers(2, 6), k=st.integers(1, 3), victim=st.integers(0, 10**6), shift=st.integers(1, 50))
def test_any_misdirected_all_gather_send_is_caught(ranks, k, victim, shift):
    algo = ring(Collective.ALL_GATHER, ranks, size_bytes=ranks * k * 8, chunks_per_npu=k)
    ops = algo.ops
    sends = np.flatnonzero((ops.kind == OpKind.SEND) & (ops.src_buf == Buffer.OUTPUT))
    if len(sends) == 0:
        return  # two ranks: every send reads the input
    i = int(sends[victim % len(sends)])
    src_off = ops.src_off.copy()
    src_off[i] = (src_off[i] + shift * k) % (ranks * k)
    if src_off[i] == ops.src_off[i]:
        return
    mutated = algo.with_ops(replace(ops, src_off=src_off))
    assert verify_algorithm(mutated).check("semantics").status is Status.FAILED


# ---------------------------------------------------------------------------- ASTRA-sim's own files
def test_astra_sim_custom_all_reduce_is_matched_and_deadlock_free(astra_custom_allreduce):
    algo = read_algorithm(astra_custom_allreduce)
    assert algo.num_ranks == 8 and algo.collective is Collective.ALL_REDUCE and not algo.has_chunk_identity
    report = verify_algorithm(algo)
    assert _status(report) == {"structure": "passed", "matching": "passed", "deadlock": "passed", "semantics": "skipped"}
    assert report.check("deadlock").data["finishes"] == {"eager": True, "rendezvous": False}
    nbytes = algo.op_bytes()
    comm = algo.ops.kind <= OpKind.RECV
    assert set(nbytes[comm].tolist()) == {2**20 // 8}
    assert set(algo.ops.duration_ns[algo.ops.kind == OpKind.COMPUTE].tolist()) == {7000.0}


def test_cli_verify_and_json(cli, ar_files):
    result = cli("verify", ar_files)
    assert result.exit_code == 0 and "verified" in result.stdout
    document = json.loads(cli("verify", ar_files, "--json").stdout)
    assert document["ok"] is True and [c["name"] for c in document["checks"]] == ["structure", "matching", "deadlock", "semantics"]
    wrong = cli("verify", ar_files, "--collective", "reduce-scatter")
    assert wrong.exit_code == 1 and "counterexample" in wrong.stdout and "NOT verified" in wrong.stdout


def test_cli_verify_astra_sim_rendezvous_strictness(cli, astra_custom_allreduce):
    assert cli("verify", astra_custom_allreduce, "--allow-unproved").exit_code == 0  # bytes only: structure and deadlock
    strict = cli("verify", astra_custom_allreduce, "--send-semantics", "both")
    assert strict.exit_code == 1 and "deadlock with rendezvous sends" in strict.stdout


def test_msccl_write_after_read_mutant_is_a_race(interop, tmp_path, cli):
    # gpu 3 of MSCCLang's in-place ring reduce-scatter: its rrcs now stores into i[2], which an
    # unordered send of the same rank reads (found by the MSCCL importer's mutation tests)
    original = (interop / "msccl" / "rs_ring_inplace_n4_i1.xml").read_text().splitlines()
    target = 54  # line 55: gpu 3, tb 3, the rrcs on i[1]
    assert 'type="rrcs"' in original[target] and 'dstoff="1"' in original[target]
    original[target] = original[target].replace('dstoff="1"', 'dstoff="2"')
    (tmp_path / "rs.xml").write_text("\n".join(original))
    assert cli("import-msccl", tmp_path / "rs.xml", "--size", "1MiB", "-o", tmp_path / "rs").exit_code == 0
    result = cli("verify", tmp_path / "rs")
    assert result.exit_code == 1
    assert "data race: rank 3, input[2]: node" in result.stdout and "(SEND) reads it" in result.stdout


def test_outputs_the_same_on_every_rank_are_expected_once_and_checked_on_every_rank():
    """The expected values of SAME_ON_EVERY_RANK collectives are made once: they must not
    depend on the rank (checked against ``expected_value`` itself, rank by rank), and a wrong
    slot on any rank -- the last one too -- is still the counterexample."""
    from chakra_collectives.verify.semantics import SAME_ON_EVERY_RANK, postcondition_violation

    for collective in Collective:
        if collective in (Collective.CUSTOM, Collective.PATTERN):
            continue
        values = [[collective.expected_value(rank=r, slot=s, share=2, num_ranks=4, root=1) for s in range(8)] for r in range(4)]
        assert (collective in SAME_ON_EVERY_RANK) <= all(v == values[0] for v in values), collective
    for collective in (Collective.ALL_REDUCE, Collective.ALL_GATHER, Collective.REDUCE_SCATTER):
        algo = ring(collective, 4, size_bytes=4096)
        partner = match_messages(algo).partner
        outputs = output_view(algo, run_symbolically(algo, partner, order="fifo").storage)
        assert postcondition_violation(algo, outputs) is None
        for rank in (0, 3):
            broken = [list(v) for v in outputs]
            broken[rank][-1] = (0, 1)
            assert postcondition_violation(algo, broken).startswith(f"counterexample: rank {rank}, buffer output, slot {len(broken[rank]) - 1}")


def test_initial_values_are_initial_value_slot_by_slot():
    """The verifier's initial storage is made a rank at a time: it must hold what
    ``initial_value`` says of every slot, for every collective, rank and share."""
    for collective in Collective:
        if collective in (Collective.CUSTOM, Collective.PATTERN):
            continue
        for share in (1, 3):
            for rank in range(4):
                made = collective.initial_values(rank=rank, num_slots=4 * share, share=share)
                assert made == [collective.initial_value(rank=rank, slot=s, share=share) for s in range(4 * share)], (collective, share, rank)
