"""MSCCL-IR export: runtime rules hold, and import(export(A)) proves the same collective with A's operations."""

from __future__ import annotations

import json
import re
import random
import warnings
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lxml import etree

from chakra_collectives.converters.chakra_et import write_algorithm
from chakra_collectives.converters.msccl import MscclOptions, MscclWarning, read_msccl, write_msccl
from chakra_collectives.converters.msccl import lift
from chakra_collectives.converters.msccl.lift import lift_algorithm, rendezvous_deadlock
from chakra_collectives.converters.msccl.lower import lower_program
from chakra_collectives.converters.msccl.program import Program, StepType
from chakra_collectives.errors import AlgorithmError
from chakra_collectives.ir import AlgorithmBuilder, Buffer, Collective, OpKind
from chakra_collectives.ir.execution import execute
from chakra_collectives.ir.matching import match_messages
from chakra_collectives.synth.baselines import ring
from chakra_collectives.verify import verify_algorithm

from test_msccl_import import VECTORS

I, O, S = Buffer.INPUT, Buffer.OUTPUT, Buffer.SCRATCH


# ---------------------------------------------------------------------------- algorithms to export
def direct(collective: Collective, n: int, k: int, rng: random.Random):
    """Every rank talks to every other directly, one message per chunk, in random orders.

    Sends and receives of a rank are chained in two independent random orders, so the two ends
    of a connection disagree on the message order and the exporter must use channels.
    """
    b = AlgorithmBuilder(collective, num_ranks=n, chunk_count=n * k, size_bytes=n * k * 64, name="direct")
    last_send = {r: None for r in range(n)}
    last_recv = {r: None for r in range(n)}

    def chain(last, rank, index):
        previous, last[rank] = last[rank], index
        return [] if previous is None else [previous]

    def exchange(messages):
        """``messages``: (src rank, dst rank, src ref, dst ref); returns the receive of each."""
        tags = {}
        for m in messages:
            tags[m] = b.fresh_tag(m[0], m[1])
        received = {}
        for r in range(n):
            mine = [m for m in messages if m[0] == r]
            for m in rng.sample(mine, len(mine)):
                src_rank, dst_rank, src, _ = m
                b.send(src_rank, dst_rank, tag=tags[m], src=src, count=1, deps=chain(last_send, r, b.num_ops(r)) + deps_of.get(m, []))
        for r in range(n):
            mine = [m for m in messages if m[1] == r]
            for m in rng.sample(mine, len(mine)):
                src_rank, dst_rank, _, dst = m
                received[m] = b.recv(dst_rank, src_rank, tag=tags[m], dst=dst, count=1, deps=chain(last_recv, r, b.num_ops(r)))
        return received

    deps_of: dict = {}
    if collective is Collective.ALL_GATHER:
        for r in range(n):
            b.copy(r, src=(I, 0), dst=(O, r * k), count=k)
        exchange([(r, j, (I, x), (O, r * k + x)) for r in range(n) for j in range(n) if j != r for x in range(k)])
    elif collective is Collective.ALL_TO_ALL:
        for r in range(n):
            b.copy(r, src=(I, r * k), dst=(O, r * k), count=k)
        exchange([(r, j, (I, j * k + x), (O, r * k + x)) for r in range(n) for j in range(n) if j != r for x in range(k)])
    else:  # all-reduce: direct reduce-scatter into scratch, reductions chained, then direct all-gather
        received = exchange([(r, j, (I, j * k + x), (S, r * k + x)) for r in range(n) for j in range(n) if j != r for x in range(k)])
        finished = {}
        for j in range(n):
            previous = b.copy(j, src=(I, j * k), dst=(O, j * k), count=k)
            for (src_rank, dst_rank, _, dst), recv in sorted(received.items()):
                if dst_rank == j:
                    previous = b.reduce(j, src=dst, dst=(O, j * k + dst[1] % k), count=1, deps=[recv, previous])
            finished[j] = previous
        last_send.update({r: None for r in range(n)})
        gather = [(r, j, (O, r * k + x), (O, r * k + x)) for r in range(n) for j in range(n) if j != r for x in range(k)]
        deps_of.update({m: [finished[m[0]]] for m in gather})
        exchange(gather)
    return b.build()


def _roundtrip(algo, *, fuse: bool = True):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MscclWarning)
        lifted = lift_algorithm(algo, MscclOptions(fuse=fuse))
    again = lower_program(lifted.program, size_bytes=algo.size_bytes).algorithm
    return lifted.program, again


def _assert_same_result(algo, again):
    report = verify_algorithm(again)
    assert report.ok, [c.summary for c in report.checks]
    assert again.collective is algo.collective and again.chunk_count == algo.chunk_count and again.inplace == algo.inplace
    assert again.num_ops == algo.num_ops
    before = Counter(algo.ops.kind.tolist())
    after = Counter(again.ops.kind.tolist())
    assert before == after


def _assert_runtime_rules(program: Program) -> None:
    """What docs/msccl-ir.md says the runtime requires of a program."""
    channels = set()
    for gpu in program.gpus:
        tbs = gpu.threadblocks
        assert [tb.id for tb in tbs] == list(range(len(tbs)))
        connections = [(role, getattr(tb, role), tb.chan) for tb in tbs for role in ("send", "recv") if getattr(tb, role) >= 0]
        assert len(connections) == len(set(connections))
        targets = set()
        for tb in tbs:
            channels.add(tb.chan)
            assert tb.steps and tb.steps[-1].type is not StepType.NOP  # no trailing nops
            for index, step in enumerate(tb.steps):
                assert step.s == index
                assert not step.type.sends or tb.send >= 0
                assert not step.type.receives or tb.recv >= 0
                if step.type is StepType.NOP:
                    assert step.depid >= 0 and step.cnt == 0
                if step.depid >= 0:
                    assert step.depid != tb.id
                    target = tbs[step.depid].steps[step.deps]
                    assert target.type is not StepType.NOP
                    targets.add((step.depid, step.deps))
        flagged = {(tb.id, s.s) for tb in tbs for s in tb.steps if s.hasdep}
        assert flagged == targets
    assert program.nchannels == max(channels) + 1


# ---------------------------------------------------------------------------- rings: closed forms
RING_STEPS_PER_RANK = {
    # fused as MSCCLang fuses: s, rrs x (N-2), rrcs, rcs x (N-2), r
    Collective.ALL_REDUCE: lambda n: 2 * n - 1,
    # cpy, s, rcs x (N-2), r
    Collective.ALL_GATHER: lambda n: n + 1,
    # s, rrs x (N-2), rrc
    Collective.REDUCE_SCATTER: lambda n: n,
}


@pytest.mark.parametrize("collective", list(RING_STEPS_PER_RANK))
@pytest.mark.parametrize("n, k", [(2, 1), (3, 2), (5, 1), (8, 3)])
def test_ring_exports_with_msccls_fused_steps_and_back(collective, n, k):
    algo = ring(collective, n, size_bytes=n * k * 1024, chunks_per_npu=k)
    program, again = _roundtrip(algo)
    _assert_runtime_rules(program)
    _assert_same_result(algo, again)
    assert program.num_steps == n * RING_STEPS_PER_RANK[collective](n)
    # MSCCLang's single-channel ring needs buffered sends (every rank sends first); ours runs
    # with rendezvous sends, on two channels
    assert rendezvous_deadlock(program, algo) == [] and program.nchannels <= 2
    unfused, again = _roundtrip(algo, fuse=False)
    _assert_runtime_rules(unfused)
    _assert_same_result(algo, again)
    assert unfused.num_steps == algo.num_ops  # one step per operation (no dependency needs a nop)


def _stream(messages: int):
    """Rank 0 sends ``messages`` chunks to rank 1, one after the other: one threadblock each."""
    b = AlgorithmBuilder(Collective.CUSTOM, num_ranks=2, chunk_count=messages, size_bytes=messages * 64)
    previous: list[int] = []
    for c in range(messages):
        previous = [b.send(0, 1, tag=c, src=(I, c), count=1, deps=previous)]
    previous = []
    for c in range(messages):
        previous = [b.recv(1, 0, tag=c, dst=(O, c), count=1, deps=previous)]
    return b.build(input_chunks=[messages, 0], output_chunks=[0, messages])


def test_threadblock_step_limit_boundary():
    assert not lift_algorithm(_stream(64), MscclOptions(fit_limits=False)).warnings
    warned = lift_algorithm(_stream(65), MscclOptions(fit_limits=False)).warnings
    assert len(warned) == 2 and all("has 65 steps (the MSCCL runtime allows 64 per threadblock)" in w for w in warned)
    fitted = lift_algorithm(_stream(65)).program  # the default spreads the stream over two channels
    assert fitted.nchannels == 2 and max(len(tb.steps) for g in fitted.gpus for tb in g.threadblocks) <= 64


def _fan_in(peers: int):
    """Rank 0 receives one chunk from each of ``peers`` ranks, then one reduction reads them all:
    its threadblock must wait for every receiving threadblock, a nop per extra dependency."""
    n = peers + 1
    b = AlgorithmBuilder(Collective.CUSTOM, num_ranks=n, chunk_count=n, size_bytes=n * 64)
    received = []
    for r in range(1, n):
        b.send(r, 0, tag=0, src=(I, 0), count=1)
        received.append(b.recv(0, r, tag=0, dst=(O, r), count=1))
    b.add(0, OpKind.REDUCE, src=(O, 1), dst=(O, 0), count=1, deps=received)
    return b.build(input_chunks=[0] + [1] * peers, output_chunks=[n] + [0] * peers)


def test_a_threadblock_over_64_steps_that_channels_cannot_split_is_refused(tmp_path):
    assert max(len(tb.steps) for tb in lift_algorithm(_fan_in(60)).program.gpus[0].threadblocks) <= 64
    with pytest.raises(AlgorithmError, match=r"does not fit the MSCCL runtime's limits even with more channels: gpu 0 tb \d+ has 7\d steps"):
        write_msccl(_fan_in(70), tmp_path / "x.xml")
    assert not list(tmp_path.iterdir())
    with pytest.warns(MscclWarning) as caught:
        write_msccl(_fan_in(70), tmp_path / "x.xml", MscclOptions(fit_limits=False))
    assert any(re.search(r"has 7\d steps", str(w.message)) for w in caught)


# ---------------------------------------------------------------------------- rendezvous sends
def _rendezvous_free(algo) -> bool:
    return execute(algo, match_messages(algo).partner, semantics="rendezvous").finished


@pytest.mark.interop
@pytest.mark.parametrize("name", VECTORS)
def test_an_export_deadlocks_with_rendezvous_sends_only_if_its_input_does(interop, name):
    algo = read_msccl(interop / "msccl" / name, 2**20)
    lifted = lift_algorithm(algo)
    again = lower_program(lifted.program, size_bytes=algo.size_bytes).algorithm
    assert _rendezvous_free(again) == _rendezvous_free(algo) == lifted.rendezvous_free
    relies = [w for w in lifted.warnings if "relies on the MSCCL runtime's per-connection buffers" in w]
    assert len(relies) == (0 if lifted.rendezvous_free else 1)


def test_a_ring_reduce_scatter_is_spread_over_channels_rather_than_deadlock():
    algo = ring(Collective.REDUCE_SCATTER, 8, size_bytes=8 * 1024)
    assert _rendezvous_free(algo)
    first = lift_algorithm(algo, MscclOptions()).program
    lifted = lift_algorithm(algo)
    assert lifted.rendezvous_free and rendezvous_deadlock(lifted.program, algo) == [] and rendezvous_deadlock(first, algo) == []
    assert lifted.layout_note == "flows are spread over 2 channels, as fewer would deadlock with rendezvous sends"
    assert lifted.program.step_types() == {"s": 8, "rrs": 48, "rrc": 8}  # still fused as MSCCLang fuses


def test_a_program_that_would_deadlock_is_refused_unless_allowed(tmp_path, monkeypatch):
    monkeypatch.setattr(lift, "_RENDEZVOUS_FALLBACKS", ())  # no safer layout to fall back on
    algo = ring(Collective.REDUCE_SCATTER, 4, size_bytes=4 * 1024)
    with pytest.raises(AlgorithmError, match="would deadlock with rendezvous sends although the algorithm does not .read back: rank"):
        write_msccl(algo, tmp_path / "rs.xml")
    assert not list(tmp_path.iterdir())
    lifted = lift.lift_algorithm(algo, MscclOptions(allow_rendezvous_deadlock=True))
    assert any("would deadlock with rendezvous sends" in w for w in lifted.warnings)
    assert not lifted.rendezvous_free and rendezvous_deadlock(lifted.program, algo)


@pytest.mark.parametrize("n", [33, 64])
def test_long_rings_are_spread_over_channels_to_fit_the_runtime(n):
    algo = ring(Collective.ALL_REDUCE, n, size_bytes=2**20)
    lifted = lift_algorithm(algo)
    program = lifted.program
    assert lifted.warnings == []
    assert max(len(tb.steps) for g in program.gpus for tb in g.threadblocks) <= 64
    assert program.nchannels == 2 and program.num_steps == n * (2 * n - 1)  # the same steps, on two channels
    _assert_runtime_rules(program)
    _assert_same_result(algo, lower_program(program, size_bytes=algo.size_bytes).algorithm)


def test_many_peers_are_spread_over_channels_of_at_most_32_threadblocks():
    algo = direct(Collective.ALL_TO_ALL, 40, 1, random.Random(1))  # 39 peers each way
    program = lift_algorithm(algo).program
    for gpu in program.gpus:
        assert max(Counter(tb.chan for tb in gpu.threadblocks).values()) <= 32
    crowded = lift_algorithm(algo, MscclOptions(fit_limits=False))
    assert crowded.program.nchannels == 1 and sum("threadblocks on channel 0" in w for w in crowded.warnings) == 40


# ---------------------------------------------------------------------------- the shared vectors
@pytest.mark.interop
@pytest.mark.parametrize("name", VECTORS)
def test_vectors_round_trip_through_export(interop, name):
    algo = read_msccl(interop / "msccl" / name, 2**20)
    program, again = _roundtrip(algo)
    _assert_runtime_rules(program)
    if algo.collective is Collective.CUSTOM:
        assert verify_algorithm(again).ok and again.num_ops == algo.num_ops
    else:
        _assert_same_result(algo, again)
    # exporting what was imported from an export fuses the same steps again (nop runs may differ:
    # they follow the execution order, which depends on the order of operations in the file)
    program_again, _ = _roundtrip(again)
    real = lambda p: {t: n for t, n in p.step_types().items() if t != "nop"}  # noqa: E731
    assert real(program_again) == real(program)


@pytest.mark.interop
def test_a_fused_program_is_not_larger_than_msccls(interop):
    for name in VECTORS:
        original = etree.parse(str(interop / "msccl" / name))
        steps = sum(1 for _ in original.iter("step"))
        program, _ = _roundtrip(read_msccl(interop / "msccl" / name, 2**20))
        unfused = name == "ar_ring_nofuse_n4_c1_i1_simple.xml"  # written without instruction fusion
        assert program.num_steps <= steps if not unfused else program.num_steps < steps, name


# ---------------------------------------------------------------------------- random algorithms
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(["ring", "direct"]),
    collective=st.sampled_from([Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_REDUCE, Collective.ALL_TO_ALL]),
    n=st.integers(2, 5),
    k=st.integers(1, 3),
    seed=st.integers(0, 2**16),
    fuse=st.booleans(),
)
def test_import_of_export_proves_the_same_collective(kind, collective, n, k, seed, fuse):
    if kind == "ring" and collective is Collective.ALL_TO_ALL:
        collective = Collective.ALL_GATHER
    if kind == "direct" and collective is Collective.REDUCE_SCATTER:
        collective = Collective.ALL_REDUCE
    if kind == "ring":
        algo = ring(collective, n, size_bytes=n * k * 64, chunks_per_npu=k)
    else:
        algo = direct(collective, n, k, random.Random(seed))
    assert verify_algorithm(algo).ok
    program, again = _roundtrip(algo, fuse=fuse)
    _assert_runtime_rules(program)
    _assert_same_result(algo, again)
    if _rendezvous_free(algo):
        assert _rendezvous_free(again)


def test_conflicting_message_orders_get_separate_channels():
    b = AlgorithmBuilder(Collective.ALL_GATHER, num_ranks=2, chunk_count=4, size_bytes=4096)
    for r in range(2):
        b.copy(r, src=(I, 0), dst=(O, 2 * r), count=2)
    # rank 0 sends chunk 0 then 1; rank 1 receives chunk 1 first, then chunk 0
    s0 = b.send(0, 1, tag=0, src=(I, 0), count=1)
    b.send(0, 1, tag=1, src=(I, 1), count=1, deps=[s0])
    r1 = b.recv(1, 0, tag=1, dst=(O, 1), count=1)
    b.recv(1, 0, tag=0, dst=(O, 0), count=1, deps=[r1])
    b.transfer(1, 0, src=(I, 0), dst=(O, 2), count=2)
    algo = b.build()
    program, again = _roundtrip(algo)
    assert program.nchannels == 2
    senders = [tb for tb in program.gpus[0].threadblocks if tb.send == 1]
    assert sorted(tb.chan for tb in senders) == [0, 1]
    _assert_same_result(algo, again)


def test_dependencies_on_other_threadblocks_become_depid_and_nops():
    algo = direct(Collective.ALL_REDUCE, 4, 1, random.Random(7))
    program, again = _roundtrip(algo)
    types = program.step_types()
    assert types.get("nop", 0) > 0 and any(s.depid >= 0 for g in program.gpus for tb in g.threadblocks for s in tb.steps)
    _assert_runtime_rules(program)
    _assert_same_result(algo, again)


# ---------------------------------------------------------------------------- the file and its errors
def test_written_file_has_what_the_runtime_requires(tmp_path):
    algo = ring(Collective.ALL_REDUCE, 4, size_bytes=2**20)
    path = tmp_path / "ar.xml"
    write_msccl(algo, path, MscclOptions(proto="LL128", min_bytes=1024, max_bytes=2**30))
    root = etree.parse(str(path)).getroot()
    assert root.tag == "algo" and root.get("coll") == "allreduce" and root.get("proto") == "LL128"
    assert (root.get("inplace"), root.get("outofplace"), root.get("minBytes"), root.get("maxBytes")) == ("0", "1", "1024", str(2**30))
    assert root.get("nchunksperloop") == "4" and root.get("ngpus") == "4"
    assert root.get("nchannels") == str(1 + max(int(tb.get("chan")) for tb in root.iter("tb")))
    steps = list(root.iter("step"))
    assert steps and all(set(s.keys()) == {"s", "type", "srcbuf", "srcoff", "dstbuf", "dstoff", "cnt", "depid", "deps", "hasdep"} for s in steps)
    assert verify_algorithm(read_msccl(path, 2**20)).ok


def test_what_msccl_cannot_express_is_refused_and_nothing_is_written(tmp_path):
    b = AlgorithmBuilder(Collective.CUSTOM, num_ranks=2, chunk_count=1, size_bytes=64)
    b.transfer(0, 1, src=(I, 0), dst=(O, 0), count=1)
    b.add(1, OpKind.COMPUTE, duration_ns=5.0)
    algo = b.build(input_chunks=[1, 0], output_chunks=[0, 1])
    with pytest.raises(AlgorithmError, match="rank 1: node 1: is opaque compute"):
        write_msccl(algo, tmp_path / "x.xml")
    deadlock = AlgorithmBuilder(Collective.CUSTOM, num_ranks=2, chunk_count=1, size_bytes=64)
    r0 = deadlock.recv(0, 1, tag=0, dst=(O, 0), count=1)
    deadlock.send(0, 1, tag=0, src=(I, 0), count=1, deps=[r0])
    r1 = deadlock.recv(1, 0, tag=0, dst=(O, 0), count=1)
    deadlock.send(1, 0, tag=0, src=(I, 0), count=1, deps=[r1])
    with pytest.raises(AlgorithmError, match="deadlocks"):
        write_msccl(deadlock.build(input_chunks=[1, 1], output_chunks=[1, 1]), tmp_path / "x.xml")
    assert not list(tmp_path.iterdir())


def test_cli_export_then_import_then_verify(cli, tmp_path):
    write_algorithm(ring(Collective.REDUCE_SCATTER, 6, size_bytes=6 * 2**20, chunks_per_npu=2), tmp_path / "rs")
    exported = cli("export-msccl", tmp_path / "rs", "-o", tmp_path / "rs.xml", "--json")
    assert exported.exit_code == 0, exported.stderr
    summary = json.loads(exported.stdout)
    assert summary["coll"] == "reducescatter" and summary["ngpus"] == 6 and summary["nchunksperloop"] == 12
    assert sum(summary["steps"].values()) == 6 * 6 and summary["warnings"] == []
    assert summary["rendezvous_deadlock_free"] is True and "channels" in summary["layout_note"]
    said = cli("export-msccl", tmp_path / "rs", "-o", tmp_path / "rs2.xml")
    assert "flows are spread over 2 channels" in said.stdout and "deadlock-free with rendezvous sends" in said.stdout
    imported = cli("import-msccl", tmp_path / "rs.xml", "--size", "6MiB", "-o", tmp_path / "back", "--verify")
    assert imported.exit_code == 0, imported.stderr
    assert "verified" in imported.stdout
    assert cli("verify", tmp_path / "back").exit_code == 0
    bad = cli("export-msccl", tmp_path / "rs", "-o", tmp_path / "x.xml", "--proto", "Fast")
    assert bad.exit_code == 2 and "proto must be Simple, LL or LL128, not 'Fast'" in bad.stderr and not (tmp_path / "x.xml").exists()


def test_cli_import_refuses_to_write_what_it_cannot_verify(cli, interop, tmp_path):
    text = (interop / "msccl" / "ar_ring_n4_c1_i1_simple.xml").read_text()
    wrong = text.replace('type="r" srcbuf="i" srcoff="3" dstbuf="i" dstoff="3"', 'type="r" srcbuf="i" srcoff="3" dstbuf="i" dstoff="2"', 1)
    assert wrong != text
    path = tmp_path / "wrong.xml"
    path.write_text(wrong)
    result = cli("import-msccl", path, "-o", tmp_path / "out" / "w", "--verify")
    assert result.exit_code == 1 and "not written: semantics check failed: counterexample" in result.stderr
    assert not (tmp_path / "out").exists()
    assert cli("import-msccl", path, "-o", tmp_path / "out" / "w").exit_code == 0  # without --verify it is written


def test_exported_bytes_scale_with_the_imported_size(tmp_path):
    algo = ring(Collective.ALL_GATHER, 4, size_bytes=4096)
    write_msccl(algo, tmp_path / "ag.xml")
    for size in (4096, 10**6 + 1):
        again = read_msccl(tmp_path / "ag.xml", size)
        comm = again.ops.kind <= OpKind.RECV
        assert set(again.op_bytes()[comm].tolist()) == {-(-size // 4)}
        assert np.array_equal(np.sort(again.op_bytes()[comm]), np.sort(algo.op_bytes(size)[algo.ops.kind <= OpKind.RECV]))


# ---------------------------------------------------------------------------- synthesized algorithms
SYNTHESIZED = [
    ("torus2d:3x3", "tacos", "all-gather"),
    ("torus2d:3x3", "tacos", "reduce-scatter"),
    ("torus2d:3x3", "tacos", "all-reduce"),
    ("switch:6", "tacos", "all-reduce"),
    ("ring:8", "biring", "all-reduce"),
    ("ring:8", "rhd", "all-reduce"),
    ("fully-connected:5", "direct", "all-to-all"),
    ("ring:7", "tree", "broadcast"),
    ("ring:7", "tree", "reduce"),
]


@pytest.mark.parametrize("topology, algorithm, collective", SYNTHESIZED)
def test_synthesized_algorithms_round_trip_through_msccl(topology, algorithm, collective, tmp_path):
    from chakra_collectives.synth import synthesize
    from chakra_collectives.topology import load_topology

    algo = synthesize(load_topology(topology), collective, "9MiB", algorithm=algorithm).algorithm
    path = tmp_path / "algo.xml"
    program = write_msccl(algo, path)
    _assert_runtime_rules(program)
    again = read_msccl(path, algo.size_bytes)
    _assert_same_result(algo, again)
    assert again.root == algo.root  # broadcast/reduce roots are inferred back from the buffers
