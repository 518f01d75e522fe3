"""The IR's shared analyses (ir/matching, ir/execution, ir/structure) against plain reference loops."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from chakra_collectives.ir import AlgorithmBuilder, Buffer, Collective, OpKind
from chakra_collectives.ir.execution import execute
from chakra_collectives.ir.matching import match_messages, pair_in_order
from chakra_collectives.ir.structure import dependents

keys = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2), st.integers(0, 1)), max_size=30)


def _fifo_pairs(sends: list[tuple], recvs: list[tuple]) -> set[tuple[int, int]]:
    """The k-th send of a key with the k-th receive of that key, by queues."""
    queues: dict[tuple, list[int]] = {}
    for j, key in enumerate(recvs):
        queues.setdefault(key, []).append(j)
    pairs = set()
    for i, key in enumerate(sends):
        queue = queues.get(key, [])
        if queue:
            pairs.add((i, queue.pop(0)))
    return pairs


@given(keys, keys)
@settings(max_examples=200, deadline=None)
def test_pair_in_order_is_fifo_per_key(sends, recvs):
    s, r = pair_in_order(np.array(sends, dtype=np.int64).reshape(-1, 3), np.array(recvs, dtype=np.int64).reshape(-1, 3))
    assert set(zip(s.tolist(), r.tolist())) == _fifo_pairs(sends, recvs)


@given(st.lists(st.tuples(st.integers(0, 2), st.integers(1, 2), st.integers(0, 1)), min_size=1, max_size=12))
@settings(max_examples=100, deadline=None)
def test_match_messages_pairs_what_fifo_pairs_and_reports_the_rest(messages):
    """Random SEND/RECV programs: the partner array is the FIFO pairing, every leftover is a problem."""
    b = AlgorithmBuilder(Collective.CUSTOM, num_ranks=3, chunk_count=1, size_bytes=64)
    sends, recvs = [], []
    for src, offset, tag in messages:
        dst = (src + offset) % 3
        sends.append((b.send(src, dst, tag=tag, src=(Buffer.INPUT, 0), count=1), (src, dst, tag)))
    for src, offset, tag in messages[::2]:  # only half the receives exist
        dst = (src + offset) % 3
        recvs.append((b.recv(dst, src, tag=tag, dst=(Buffer.OUTPUT, 0), count=1), (src, dst, tag)))
    algo = b.build(input_chunks=[1] * 3, output_chunks=[1] * 3)
    matching = match_messages(algo, limit=1000)
    paired = int((matching.partner >= 0).sum()) // 2
    assert paired == len(_fifo_pairs([k for _, k in sends], [k for _, k in recvs]))
    assert len(matching.problems) == len(sends) + len(recvs) - 2 * paired
    assert len(match_messages(algo, limit=1).problems) == min(1, len(matching.problems))  # limit caps the descriptions only
    assert np.array_equal(match_messages(algo, limit=1).partner, matching.partner)


def test_dependents_reverse_the_dependency_lists():
    b = AlgorithmBuilder(Collective.CUSTOM, num_ranks=1, chunk_count=1, size_bytes=64)
    first = b.copy(0, src=(Buffer.INPUT, 0), dst=(Buffer.OUTPUT, 0), count=1)
    second = b.copy(0, src=(Buffer.INPUT, 0), dst=(Buffer.OUTPUT, 0), count=1, deps=[first])
    b.copy(0, src=(Buffer.INPUT, 0), dst=(Buffer.OUTPUT, 0), count=1, deps=[first, second])
    algo = b.build(input_chunks=[1], output_chunks=[1])
    ptr, idx = dependents(algo)
    assert [idx[ptr[i] : ptr[i + 1]] for i in range(3)] == [[1, 2], [2], []]
    assert execute(algo, np.full(3, -1)).order == [0, 1, 2]


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.integers(0, 5), st.integers(0, 2), st.integers(0, 40), st.integers(-1, 6), st.integers(0, 2), st.integers(0, 40)),
        min_size=1,
        max_size=40,
    ),
)
def test_touched_scratch_is_the_highest_scratch_slot_each_rank_uses(rows):
    from chakra_collectives.ir import OpTable
    from chakra_collectives.ir.builder import touched_scratch

    rows = sorted(rows)  # an OpTable is grouped by rank
    rank, src_buf, src_off, count, dst_buf, dst_off = (np.array(c) for c in zip(*rows))
    table = OpTable.from_columns(
        dep_ptr=np.zeros(len(rows) + 1, dtype=np.int64),
        dep_idx=np.zeros(0, dtype=np.int64),
        rank=rank,
        kind=np.full(len(rows), int(OpKind.COPY)), src_buf=src_buf, src_off=src_off, dst_buf=dst_buf, dst_off=dst_off, count=count
    )
    expected = [0] * 6
    for r, sb, so, c, db, do in rows:
        for buf, off in ((sb, so), (db, do)):
            if buf == 2:
                expected[r] = max(expected[r], off + max(c, 1))
    assert touched_scratch(table, 6).tolist() == expected
