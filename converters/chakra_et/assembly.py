"""Byte records assembled from numbered fragments with numpy, no per-record Python.

The ET writer (:mod:`.writer`) builds each node record as a concatenation of fragments that
protobuf serialized once each (an id, a name and type, a dependency list, an attribute) and
that many nodes share. Here a rank's records are described as a table of fragment numbers,
one row per record and one column per slot (0: nothing), and laid out with array operations:

* :class:`FragmentList` numbers the distinct keys of a column (:func:`unique_rows`), fetching
  each key's fragment once from a table (a ``dict`` that builds what it lacks);
* :func:`gather` concatenates, row by row, the fragments a table of numbers names.

>>> fragments = FragmentList()
>>> numbers = fragments.of({1: b"a", 2: b"bc"}, [np.array([2, 1, 2])])
>>> numbers.tolist()
[2, 1, 2]
>>> gather(fragments.pool(), np.array([[1, 0, 2], [2, 1, 1]]))
b'abcbcaa'
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np


def unique_rows(columns: Sequence[np.ndarray]) -> tuple[list[np.ndarray], np.ndarray]:
    """The distinct rows of equally long ``columns`` (as columns, in sorted order) and, for
    each row, the number of its distinct row.

    >>> rows, inverse = unique_rows([np.array([3, 1, 3, 1]), np.array([0, 5, 0, 4])])
    >>> [c.tolist() for c in rows], inverse.tolist()
    ([[1, 1, 3], [4, 5, 0]], [2, 1, 2, 0])
    """
    n = len(columns[0])
    if n == 0:
        return [c[:0] for c in columns], np.zeros(0, dtype=np.int64)
    order = np.lexsort(columns[::-1]) if len(columns) > 1 else np.argsort(columns[0], kind="stable")
    change = np.zeros(n, dtype=bool)
    change[0] = True
    for column in columns:
        ranked = column[order]
        change[1:] |= ranked[1:] != ranked[:-1]
    inverse = np.empty(n, dtype=np.int64)
    inverse[order] = np.cumsum(change) - 1
    firsts = order[change]
    return [c[firsts] for c in columns], inverse


class FragmentList:
    """The fragments one batch of records uses, numbered from 1 (0: the empty fragment)."""

    def __init__(self) -> None:
        self.fragments: list[bytes] = [b""]

    def add(self, fragments: list[bytes]) -> np.ndarray:
        """Number ``fragments`` (appended as given)."""
        first = len(self.fragments)
        self.fragments.extend(fragments)
        return np.arange(first, len(self.fragments), dtype=np.int64)

    def of(self, table: Mapping, columns: Sequence[np.ndarray], key: Callable | None = None) -> np.ndarray:
        """For each row of ``columns``, the number of ``table[key]``: the row's values as a tuple
        (one column: the value itself; ``key`` given: ``key(*values)``), each distinct key
        looked up once."""
        rows, inverse = unique_rows(columns)
        values = [c.tolist() for c in rows]
        if key is not None:
            keys = list(map(key, *values))
        elif len(values) == 1:
            keys = values[0]
        else:
            keys = list(zip(*values))
        return self.add(list(map(table.__getitem__, keys)))[inverse]

    def lengths(self) -> np.ndarray:
        """Each fragment's length in bytes."""
        return np.fromiter(map(len, self.fragments), dtype=np.int64, count=len(self.fragments))

    def pool(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(bytes, starts, lengths)``: every fragment, end to end, and where each one is."""
        lengths = self.lengths()
        starts = np.zeros(len(lengths), dtype=np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        return np.frombuffer(b"".join(self.fragments), dtype=np.uint8), starts, lengths


def gather(pool: tuple[np.ndarray, np.ndarray, np.ndarray], numbers: np.ndarray) -> bytes:
    """The fragments ``numbers`` names (rows in order, each row's slots in order) end to end,
    from a :meth:`FragmentList.pool`."""
    data, starts, lengths = pool
    numbers = numbers.ravel()
    sizes = lengths[numbers]
    used = sizes > 0
    numbers, sizes = numbers[used], sizes[used]
    total = int(sizes.sum())
    if total == 0:
        return b""
    # positions in the pool: +1 within a fragment, a jump at the first byte of each one
    step = np.ones(total, dtype=np.int64 if len(data) >= 2**31 else np.int32)
    begin = starts[numbers]
    step[0] = begin[0]
    ends = np.cumsum(sizes)
    step[ends[:-1]] = begin[1:] - (begin[:-1] + sizes[:-1]) + 1
    return data[np.cumsum(step, out=step)].tobytes()


__all__ = ["FragmentList", "gather", "unique_rows"]
