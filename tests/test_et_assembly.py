"""Records laid out from numbered fragments: the same bytes as joining them in Python."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from chakra_collectives.converters.chakra_et.assembly import FragmentList, gather, unique_rows


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.binary(max_size=3).map(lambda b: b * 43), min_size=1, max_size=6),  # lengths up to 129: across 127/128
    st.integers(0, 20),
    st.integers(1, 5),
    st.data(),
)
def test_gather_is_the_rows_fragments_joined(fragments, rows, slots, data):
    table = FragmentList()
    numbers = table.add(fragments)
    chosen = np.array(data.draw(st.lists(st.sampled_from([0, *numbers.tolist()]), min_size=rows * slots, max_size=rows * slots)), dtype=np.int64)
    chosen = chosen.reshape(rows, slots)
    expected = b"".join(table.fragments[i] for i in chosen.ravel().tolist())
    assert gather(table.pool(), chosen) == expected


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(-(2**62), 2**62), st.integers(0, 3)), max_size=30))
def test_unique_rows_number_each_distinct_row_once(rows):
    columns = [np.array([r[i] for r in rows], dtype=np.int64) for i in range(2)]
    distinct, inverse = unique_rows(columns)
    keys = list(zip(*(c.tolist() for c in distinct)))
    assert keys == sorted(set(rows))
    assert [keys[i] for i in inverse.tolist()] == rows


def test_fragments_of_a_table_are_fetched_once_per_distinct_key():
    fetched = []

    class Table(dict):
        def __missing__(self, key):
            fetched.append(key)
            return str(key).encode()

    table = FragmentList()
    numbers = table.of(Table(), [np.array([7, 2**40, 7]), np.array([1, 0, 1])])
    assert sorted(fetched) == [(7, 1), (2**40, 0)]
    assert gather(table.pool(), numbers[:, None]) == b"(7, 1)(1099511627776, 0)(7, 1)"
