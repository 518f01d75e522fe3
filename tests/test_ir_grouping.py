"""``occurrence``: the one "index of each entry within its group" helper, against a plain count;
``row_groups`` and ``distinct`` against plain Python sets; ``lex_order`` against Python's stable sort."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from chakra_collectives.ir.grouping import distinct, lex_order, occurrence, row_groups

keys_1d = st.lists(st.integers(0, 4), max_size=40)


@settings(max_examples=200, deadline=None)
@given(keys_1d)
def test_counts_the_earlier_entries_with_the_same_key(keys):
    expected = [keys[:i].count(k) for i, k in enumerate(keys)]
    assert occurrence(np.array(keys, dtype=np.int64)).tolist() == expected


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 5)), max_size=40))
def test_by_orders_the_entries_of_a_group(pairs):
    keys = np.array([k for k, _ in pairs], dtype=np.int64)
    by = np.array([b for _, b in pairs], dtype=np.int64)
    # entry i comes after entry j of its group when by[j] < by[i], or equal and j < i
    expected = [sum(1 for j in range(len(pairs)) if keys[j] == keys[i] and (by[j], j) < (by[i], i)) for i in range(len(pairs))]
    assert occurrence(keys, by=by).tolist() == expected


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2)), max_size=40))
def test_rows_are_keys(rows):
    expected = [rows[:i].count(r) for i, r in enumerate(rows)]
    assert occurrence(np.array(rows, dtype=np.int64).reshape(-1, 2)).tolist() == expected


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-2, 2), st.integers(0, 3), st.integers(-(2**40), 2**40)), max_size=40))
def test_row_groups_number_the_distinct_rows_in_sorted_order(rows):
    ranked = sorted(set(rows))
    expected = [ranked.index(r) for r in rows]
    assert row_groups(np.array(rows, dtype=np.int64).reshape(-1, 3)).tolist() == expected


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-(2**62), 2**62), max_size=60))
def test_distinct_is_the_sorted_set(keys):
    assert distinct(np.array(keys, dtype=np.int64)).tolist() == sorted(set(keys))


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 4).flatmap(
        lambda width: st.lists(st.tuples(*[st.one_of(st.integers(-3, 3), st.integers(-(2**62), 2**62)) for _ in range(width)]), max_size=40)
    )
)
def test_lex_order_is_the_stable_sort_by_the_last_key_first(rows):
    """Packed into one int64 key where the spans allow, by ``np.lexsort`` where not: the same order."""
    width = len(rows[0]) if rows else 1
    keys = [np.array([r[c] for r in rows], dtype=np.int64) for c in range(width)]
    expected = sorted(range(len(rows)), key=lambda i: tuple(rows[i][::-1]))  # stable: ties by index
    assert lex_order(keys).tolist() == expected
