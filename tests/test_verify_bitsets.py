"""The numpy symbolic run holds a reduction's ranks as a bitset row (a word per 64 ranks) and
checks the postcondition as arrays: it must agree with the slot-by-slot Python run, and still
catch every wrong algorithm."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chakra_collectives.errors import LimitError
from chakra_collectives.ir import AlgorithmBuilder, Buffer, Collective, OpKind
from chakra_collectives.ir.matching import match_messages
from chakra_collectives.synth.baselines import ring
from chakra_collectives.verify import footprint, races, verify_algorithm
from chakra_collectives.verify.report import Status
from chakra_collectives.verify.semantics import output_view, postcondition_violation, run_moves, run_symbolically


@pytest.mark.parametrize("collective", [Collective.ALL_REDUCE, Collective.REDUCE_SCATTER, Collective.ALL_GATHER])
def test_bitsets_over_several_words_hold_the_python_runs_values(collective):
    """130 ranks: a reduction's ranks span three 64-bit words; every slot ends as in the fifo run."""
    algo = ring(collective, 130, size_bytes=130 * 64)
    partner = match_messages(algo).partner
    moved = run_moves(algo, partner)
    assert moved is not None and moved.bits.shape[1] == 3
    assert moved.storage == run_symbolically(algo, partner, order="fifo").storage
    assert moved.violation(algo) is None


def _mutated(algo, kind: OpKind, column: str, victim: int, shift: int):
    """``algo`` with one ``kind`` operation's ``column`` offset moved by ``shift`` chunks (None: no change)."""
    ops = algo.ops
    chosen = np.flatnonzero(ops.kind == kind)
    i = int(chosen[victim % len(chosen)])
    values = getattr(ops, column).copy()
    limit = algo.chunk_count
    values[i] = (values[i] + shift) % limit
    if values[i] == getattr(ops, column)[i] or values[i] + ops.count[i] > limit:
        return None
    return algo.with_ops(replace(ops, **{column: values}))


@settings(max_examples=25, deadline=None)
@given(
    ranks=st.sampled_from([5, 66]),
    kind_column=st.sampled_from([(OpKind.SEND, "src_off"), (OpKind.RECV, "dst_off"), (OpKind.REDUCE, "src_off")]),
    victim=st.integers(0, 10**6),
    shift=st.integers(1, 200),
)
def test_a_misdirected_all_reduce_operation_is_caught(ranks, kind_column, victim, shift):
    """Any one send, receive or reduction of a ring all-reduce pointed at another chunk fails
    verification: its structure when it points outside its buffer, else its semantics."""
    algo = ring(Collective.ALL_REDUCE, ranks, size_bytes=ranks * 64)
    mutated = _mutated(algo, *kind_column, victim, shift)
    if mutated is None:
        return
    report = verify_algorithm(mutated)
    assert not report.ok
    assert Status.FAILED in (report.check("structure").status, report.check("semantics").status)


@settings(max_examples=40, deadline=None)
@given(
    collective=st.sampled_from([Collective.ALL_REDUCE, Collective.REDUCE_SCATTER, Collective.ALL_GATHER]),
    ranks=st.sampled_from([3, 65, 130]),
    corrupted=st.lists(st.tuples(st.integers(0, 10**6), st.integers(-1, 10**6)), min_size=1, max_size=3),
)
def test_the_array_postcondition_names_what_the_list_postcondition_names(collective, ranks, corrupted):
    """Some slots of a proved run made to hold another value (or nothing): the arrays' check
    gives the counterexample the slot-by-slot check gives on the same values."""
    algo = ring(collective, ranks, size_bytes=ranks * 64)
    moved = run_moves(algo, match_messages(algo).partner)
    values = int(moved.chunk_of.shape[0])
    for slot, value in corrupted:
        moved.slots[slot % len(moved.slots)] = -1 if value < 0 else value % values
    expected = postcondition_violation(algo, output_view(algo, moved.storage))
    assert moved.violation(algo) == expected


def test_a_wrong_output_past_the_first_word_is_the_counterexample():
    """Rank 70 stores rank 69's block where rank 68's belongs and forwards it round the ring to
    rank 0, the first rank checked: named with ranks past the first 64-bit word."""
    algo = ring(Collective.ALL_GATHER, 72, size_bytes=72 * 64)
    ops = algo.ops
    # the receive that lands rank 68's block on rank 70 now lands there the block of rank 69
    i = int(np.flatnonzero((ops.kind == OpKind.RECV) & (ops.rank == 70) & (ops.dst_off == 68))[0])
    j = int(np.flatnonzero((ops.kind == OpKind.RECV) & (ops.rank == 70) & (ops.dst_off == 69))[0])
    dst_off = ops.dst_off.copy()
    dst_off[i], dst_off[j] = 69, 68
    mutated = algo.with_ops(replace(ops, dst_off=dst_off))
    moved = run_moves(mutated, match_messages(mutated).partner)
    assert moved is not None
    assert moved.violation(mutated) == "counterexample: rank 0, buffer output, slot 68: expected chunk 68 from rank 68, got chunk 69 from rank 69"


def test_a_fault_the_numpy_run_cannot_take_asks_for_the_python_runs_memory(monkeypatch):
    """A rank counted twice sends the verifier to the Python run, whose tuple per slot is
    estimated first: refused when it would not fit, while a sound algorithm verifies under
    the same limit (it never needs that run)."""
    b = AlgorithmBuilder(Collective.ALL_REDUCE, num_ranks=2, chunk_count=1, size_bytes=64)
    own = [b.copy(r, src=(Buffer.INPUT, 0), dst=(Buffer.OUTPUT, 0), count=1) for r in range(2)]
    received = [b.transfer(1 - r, r, src=(Buffer.INPUT, 0), dst=(Buffer.SCRATCH, 0), count=1)[1] for r in range(2)]
    first = b.reduce(0, src=(Buffer.SCRATCH, 0), dst=(Buffer.OUTPUT, 0), count=1, deps=[own[0], received[0]])
    b.reduce(0, src=(Buffer.SCRATCH, 0), dst=(Buffer.OUTPUT, 0), count=1, deps=[first])
    b.reduce(1, src=(Buffer.SCRATCH, 0), dst=(Buffer.OUTPUT, 0), count=1, deps=[own[1], received[1]])
    faulty = b.build(scratch_chunks=[1, 1])
    monkeypatch.setattr(footprint, "PYTHON_PER_SLOT", 2**50)
    with pytest.raises(LimitError, match=r"^finding the fault of all-reduce over 2 ranks.* needs about"):
        verify_algorithm(faulty)
    assert verify_algorithm(ring(Collective.ALL_REDUCE, 8, size_bytes=8 * 64)).ok
