"""export-msccl keeps an imported program's threadblocks and channels, and fits any layout into
the MSCCL runtime's limits (docs/msccl-ir.md: 64 steps per threadblock, cnt below 72,
32 threadblocks per channel, 32 channels) before refusing it."""

from __future__ import annotations

import warnings
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chakra_collectives.converters.chakra_et import read_algorithm, write_algorithm
from chakra_collectives.converters.msccl import MscclOptions, MscclWarning, read_msccl, read_programs
from chakra_collectives.converters.msccl.lift import KEPT_NOTE, lift_algorithm
from chakra_collectives.converters.msccl.lower import lower_program
from chakra_collectives.converters.msccl.program import Program
from chakra_collectives.errors import InputError
from chakra_collectives.ir import Collective, OpTable
from chakra_collectives.ir.execution import execute
from chakra_collectives.ir.matching import match_messages
from chakra_collectives.synth.baselines import ring

import et_edit
from msccl_allpairs import allpairs_allreduce
from msccl_random import random_program
from test_msccl_export import _assert_runtime_rules, _assert_same_result
from test_msccl_import import VECTORS

ALLPAIRS = [(8, 1), (8, 2), (16, 1), (8, 3), (16, 2)]
"""(ranks, instances); before threadblock loads were counted, export refused 8 x 3 (a
threadblock of 69 steps) and 16 x 2 (94) without the imported layout."""


def _within_runtime_limits(program: Program) -> None:
    channels = set()
    for gpu in program.gpus:
        per_channel = Counter(tb.chan for tb in gpu.threadblocks)
        assert max(per_channel.values()) <= 32, (gpu.id, per_channel)
        channels.update(per_channel)
        for tb in gpu.threadblocks:
            assert len(tb.steps) <= 64, (gpu.id, tb.id, len(tb.steps))
            assert all(step.cnt < 72 for step in tb.steps)
    assert max(channels) < 32


def _threadblocks(program: Program) -> dict[int, list[tuple[int, int, int, int]]]:
    """Per GPU: (id, send peer, receive peer, channel) of every threadblock."""
    return {gpu.id: sorted((tb.id, tb.send, tb.recv, tb.chan) for tb in gpu.threadblocks) for gpu in program.gpus}


def _steps_per_threadblock(program: Program) -> dict[tuple[int, int], int]:
    return {(gpu.id, tb.id): len(tb.steps) for gpu in program.gpus for tb in gpu.threadblocks}


def _without_threadblocks(algo):
    """``algo`` as if it had not come from MSCCL-IR (no threadblock, no channel)."""
    ops = algo.ops
    kept = ("rank", "kind", "peer", "tag", "src_buf", "src_off", "dst_buf", "dst_off", "count", "nbytes", "node_id", "route", "duration_ns")
    return algo.with_ops(OpTable.from_columns(dep_ptr=ops.dep_ptr, dep_idx=ops.dep_idx, **{name: getattr(ops, name) for name in kept}))


def _rendezvous_free(algo) -> bool:
    return execute(algo, match_messages(algo).partner, semantics="rendezvous").finished


def _export(algo, options: MscclOptions | None = None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MscclWarning)
        lifted = lift_algorithm(algo, options)
    again = lower_program(lifted.program, size_bytes=algo.size_bytes, collective=algo.collective, root=algo.root).algorithm
    return lifted, again


def _check_export(algo, lifted, again) -> None:
    """Within the runtime's limits, MSCCL-IR's rules, the same operations, rendezvous-deadlock-free if ``algo`` is."""
    _within_runtime_limits(lifted.program)
    _assert_runtime_rules(lifted.program)
    _assert_same_result(algo, again)
    if _rendezvous_free(algo):
        assert lifted.rendezvous_free and _rendezvous_free(again)


# ---------------------------------------------------------------------------- all-pairs all-reduce
@pytest.mark.parametrize("n, instances", ALLPAIRS)
def test_allpairs_allreduce_keeps_its_threadblocks(tmp_path, n, instances):
    path = tmp_path / "allpairs.xml"
    path.write_text(allpairs_allreduce(n, instances))
    original = read_programs(path)[0]
    algo = read_msccl(path, 2**20)
    lifted, again = _export(algo)
    assert lifted.layout_note == KEPT_NOTE
    assert _threadblocks(lifted.program) == _threadblocks(original)
    assert lifted.program.nchannels == instances
    steps, before = _steps_per_threadblock(lifted.program), _steps_per_threadblock(original)
    assert all(steps[tb] <= before[tb] for tb in before) and max(steps.values()) == 2 * n + 1  # see msccl_allpairs
    _check_export(algo, lifted, again)


@pytest.mark.parametrize("n, instances", ALLPAIRS)
def test_allpairs_allreduce_without_its_threadblocks_fits_the_runtime(tmp_path, n, instances):
    path = tmp_path / "allpairs.xml"
    path.write_text(allpairs_allreduce(n, instances))
    algo = _without_threadblocks(read_msccl(path, 2**20))
    lifted, again = _export(algo)
    assert lifted.layout_note is None  # nothing to keep, nothing to report
    _check_export(algo, lifted, again)


# ---------------------------------------------------------------------------- the shared vectors
@pytest.mark.interop
@pytest.mark.parametrize("name", VECTORS)
def test_vectors_keep_their_threadblocks_within_the_runtime_limits(interop, name):
    path = interop / "msccl" / name
    original = read_programs(path)[0]
    algo = read_msccl(path, 2**20)
    lifted, again = _export(algo)
    assert lifted.layout_note == KEPT_NOTE
    assert _threadblocks(lifted.program) == _threadblocks(original)
    _check_export(algo, lifted, again)
    plain = _without_threadblocks(algo)
    _check_export(plain, *_export(plain))


# ---------------------------------------------------------------------------- random MSCCLang-shaped programs
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**16), ranks=st.integers(2, 5), channels=st.integers(1, 3), operations=st.integers(0, 40), fuse=st.booleans())
def test_random_mscclang_programs_round_trip_within_the_runtime_limits(tmp_path, seed, ranks, channels, operations, fuse):
    path = tmp_path / f"random-{seed}.xml"
    path.write_text(random_program(seed, ranks=ranks, channels=channels, operations=operations))
    original = read_programs(path)[0]
    algo = read_msccl(path, 2**20)
    lifted, again = _export(algo, MscclOptions(fuse=fuse))
    assert lifted.layout_note == KEPT_NOTE and _threadblocks(lifted.program) == _threadblocks(original)
    _check_export(algo, lifted, again)
    plain = _without_threadblocks(algo)
    _check_export(plain, *_export(plain, MscclOptions(fuse=fuse)))


# ---------------------------------------------------------------------------- a layout that cannot be kept
def test_a_layout_that_breaks_a_rule_is_not_kept_and_says_why(tmp_path):
    path = tmp_path / "allpairs.xml"
    path.write_text(allpairs_allreduce(4))
    algo = read_msccl(path, 2**20)
    threadblock = np.array(algo.ops.threadblock)
    threadblock[algo.ops.rank == 0] = 1  # every step of rank 0 in threadblock 1: three send peers
    ops = algo.ops
    names = ("rank", "kind", "peer", "tag", "src_buf", "src_off", "dst_buf", "dst_off", "count", "nbytes", "node_id", "route", "duration_ns", "channel")
    moved = algo.with_ops(OpTable.from_columns(dep_ptr=ops.dep_ptr, dep_idx=ops.dep_idx, threadblock=threadblock, **{n: getattr(ops, n) for n in names}))
    lifted, again = _export(moved)
    assert lifted.layout_note.startswith("the imported threadblocks are not kept: rank 0: threadblock 1 has two send peers")
    _check_export(moved, lifted, again)


# ---------------------------------------------------------------------------- through Chakra ET files
def test_threadblocks_survive_chakra_et_files(tmp_path):
    path = tmp_path / "allpairs.xml"
    path.write_text(allpairs_allreduce(4, 2))
    algo = read_msccl(path, 2**20)
    write_algorithm(algo, tmp_path / "ar")
    again = read_algorithm(tmp_path / "ar")
    assert again.equals(algo) and set(again.ops.channel.tolist()) == {0, 1}
    _, nodes = et_edit.load(tmp_path / "ar.0.et")
    carried = [list(et_edit.attr(node, "cc_threadblock").int64_list.values) for node in nodes]
    assert carried == [[int(t), int(c)] for t, c in zip(algo.ops.threadblock[algo.ops.rank == 0], algo.ops.channel[algo.ops.rank == 0])]
    assert _export(again)[0].layout_note == KEPT_NOTE


def test_files_without_threadblocks_carry_none(tmp_path):
    algo = ring(Collective.ALL_REDUCE, 4, size_bytes=2**20)
    write_algorithm(algo, tmp_path / "ring")
    _, nodes = et_edit.load(tmp_path / "ring.0.et")
    assert not any(a.name == "cc_threadblock" for node in nodes for a in node.attr)
    again = read_algorithm(tmp_path / "ring")
    assert again.equals(algo) and not np.any(again.ops.threadblock >= 0) and not np.any(again.ops.channel >= 0)


@pytest.mark.parametrize("values", [[3], [1, 2, 3], [-1, 0]])
def test_a_malformed_cc_threadblock_is_refused(cli, tmp_path, values):
    path = tmp_path / "allpairs.xml"
    path.write_text(allpairs_allreduce(4))
    write_algorithm(read_msccl(path, 2**20), tmp_path / "ar")

    def spoil(nodes):
        attribute = et_edit.attr(nodes[2], "cc_threadblock")
        del attribute.int64_list.values[:]
        attribute.int64_list.values.extend(values)

    et_edit.edit(tmp_path / "ar.1.et", spoil)
    with pytest.raises(InputError, match=r"ar\.1\.et.*node 2.*cc_threadblock must be an int64_list \[threadblock, channel\]"):
        read_algorithm(tmp_path / "ar")
    result = cli("verify", tmp_path / "ar")
    assert result.exit_code == 2 and "cc_threadblock must be" in result.stderr and "Traceback" not in result.stderr


def test_a_long_chain_of_local_steps_gets_extra_threadblocks():
    """100 reductions in a row after one receive: no threadblock may take them all (64 steps)."""
    from chakra_collectives.ir import AlgorithmBuilder, Buffer

    b = AlgorithmBuilder(Collective.CUSTOM, num_ranks=2, chunk_count=2, size_bytes=128)
    b.send(1, 0, tag=0, src=(Buffer.INPUT, 0), count=1)
    previous = b.recv(0, 1, tag=0, dst=(Buffer.SCRATCH, 0), count=1)
    for _ in range(100):
        previous = b.reduce(0, src=(Buffer.SCRATCH, 0), dst=(Buffer.OUTPUT, 0), count=1, deps=[previous])
    algo = b.build(input_chunks=[0, 1], output_chunks=[1, 0], scratch_chunks=[1, 0])
    lifted, again = _export(algo)
    _check_export(algo, lifted, again)
    gpu0 = lifted.program.gpus[0]
    peerless = [tb for tb in gpu0.threadblocks if tb.send == tb.recv == -1]
    assert len(peerless) >= 1 and sum(len(tb.steps) for tb in gpu0.threadblocks) >= 101
    crowded = lift_algorithm(algo, MscclOptions(fit_limits=False)).program  # the old layout: one threadblock
    assert max(len(tb.steps) for tb in crowded.gpus[0].threadblocks) == 101
