"""The iteration order of GCC's ``std::unordered_set<uint64_t>``, which ASTRA-sim's ET feeder exposes.

ASTRA-sim's custom-collective runner issues the nodes whose dependencies are done by iterating
the feeder's ``std::unordered_set`` of such nodes, and a node's children are released in the
order of another such set. On a shared link (a switch's uplink) that order decides which
message goes first, so an exact model needs it. This module reproduces libstdc++'s hashtable
(GCC 12, the compiler ASTRA-sim is built with on Debian 12 / Ubuntu): identity hash, bucket =
key mod bucket count, a single forward list in which a key entering an empty bucket goes to the
front and a key entering a used bucket goes to the front of that bucket's run; growth by the
prime rehash policy (max load factor 1, at least doubling), a rehash relinking the list in its
old order, each key again to the front of its bucket's run.

>>> s = HashOrder()
>>> for k in (5, 1, 9, 2):
...     s.add(k)
>>> list(s)              # 13 buckets from the first insert on; GCC iterates 2, 9, 1, 5 here
[2, 9, 1, 5]
>>> s.discard(1); list(s)
[2, 9, 5]
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Iterator

_FAST = (2, 2, 2, 3, 5, 5, 7, 7, 11, 11, 11, 11, 13, 13)
# libstdc++'s __prime_list from 17 on (what _M_next_bkt can return for n >= 14), up to ~5e6.
_PRIMES = (
    17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97, 103, 109, 113, 127, 137, 139, 149, 157,
    167, 179, 193, 199, 211, 227, 241, 257, 277, 293, 313, 337, 359, 383, 409, 439, 467, 503, 541, 577, 619, 661, 709,
    761, 823, 887, 953, 1031, 1109, 1193, 1289, 1381, 1493, 1613, 1741, 1879, 2029, 2179, 2357, 2549, 2753, 2971, 3209,
    3469, 3739, 4027, 4349, 4703, 5087, 5503, 5953, 6427, 6949, 7517, 8123, 8783, 9497, 10273, 11113, 12011, 12983,
    14033, 15173, 16411, 17749, 19183, 20753, 22447, 24281, 26267, 28411, 30727, 33223, 35933, 38873, 42043, 45481,
    49201, 53201, 57557, 62233, 67307, 72817, 78779, 85229, 92203, 99733, 107897, 116731, 126271, 136607, 147793,
    159871, 172933, 187091, 202409, 218971, 236897, 256279, 277261, 299951, 324503, 351061, 379787, 410857, 444487,
    480881, 520241, 562841, 608903, 658753, 712697, 771049, 834181, 902483, 976369, 1056323, 1142821, 1236397, 1337629,
    1447153, 1565659, 1693859, 1832561, 1982627, 2144977, 2320627, 2510653, 2716249, 2938679, 3179303, 3439651,
    3721303, 4026031, 4355707, 4712381, 5098259,
)
_HEAD = -1  # the list's "before begin" node


class HashOrder:
    """A set of non-negative integers that iterates in libstdc++'s ``unordered_set`` order."""

    __slots__ = ("_next", "_buckets", "_count", "_size", "_resize")

    def __init__(self) -> None:
        self._next: dict[int, int | None] = {_HEAD: None}
        self._buckets: list[int | None] = [None]  # per bucket: the node before its first key
        self._count = 1
        self._size = 0
        self._resize = 0

    def __len__(self) -> int:
        return self._size

    def __contains__(self, key: int) -> bool:
        return key in self._next and key != _HEAD

    def __iter__(self) -> Iterator[int]:
        nxt = self._next
        node = nxt[_HEAD]
        while node is not None:
            yield node
            node = nxt[node]

    def _next_bucket_count(self, n: int) -> int:
        if n < len(_FAST):
            if n == 0:
                return 1
            self._resize = _FAST[n]
            return _FAST[n]
        index = bisect_left(_PRIMES, n)
        if index >= len(_PRIMES):
            raise OverflowError("set too large for the recorded prime list")
        self._resize = _PRIMES[index]
        return _PRIMES[index]

    def add(self, key: int) -> None:
        if key in self._next:
            return
        if self._size + 1 > self._resize:
            wanted = float(max(self._size + 1, 0 if self._resize else 11))  # the first insert asks for 11
            if wanted >= self._count:
                self._rehash(self._next_bucket_count(max(int(wanted) + 1, self._count * 2)))
            else:
                self._resize = self._count
        nxt, buckets = self._next, self._buckets
        bucket = key % self._count
        before = buckets[bucket]
        if before is not None:
            nxt[key] = nxt[before]
            nxt[before] = key
        else:
            first = nxt[_HEAD]
            nxt[key] = first
            nxt[_HEAD] = key
            if first is not None:
                buckets[first % self._count] = key
            buckets[bucket] = _HEAD
        self._size += 1

    def _rehash(self, count: int) -> None:
        nxt = self._next
        buckets: list[int | None] = [None] * count
        node = nxt[_HEAD]
        nxt[_HEAD] = None
        head_bucket = 0
        while node is not None:
            following = nxt[node]
            bucket = node % count
            if buckets[bucket] is None:
                nxt[node] = nxt[_HEAD]
                nxt[_HEAD] = node
                buckets[bucket] = _HEAD
                if nxt[node] is not None:
                    buckets[head_bucket] = node
                head_bucket = bucket
            else:
                before = buckets[bucket]
                nxt[node] = nxt[before]  # type: ignore[index]
                nxt[before] = node  # type: ignore[index]
            node = following
        self._buckets = buckets
        self._count = count

    def discard(self, key: int) -> None:
        nxt = self._next
        if key not in nxt or key == _HEAD:
            return
        buckets, count = self._buckets, self._count
        bucket = key % count
        prev = buckets[bucket]
        while nxt[prev] != key:  # type: ignore[index]
            prev = nxt[prev]  # type: ignore[index]
        following = nxt[key]
        if prev == buckets[bucket]:
            following_bucket = following % count if following is not None else 0
            if following is None or following_bucket != bucket:
                if following is not None:
                    buckets[following_bucket] = buckets[bucket]
                buckets[bucket] = None
        elif following is not None:
            following_bucket = following % count
            if following_bucket != bucket:
                buckets[following_bucket] = prev
        nxt[prev] = following  # type: ignore[index]
        del nxt[key]
        self._size -= 1
