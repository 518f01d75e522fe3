"""Mutations of valid inputs: the byte-level ones a protobuf reader meets (flips, truncation,
spliced or repeated spans, interesting integers) and the text-level one XML, YAML and specs
meet (a number replaced by an extreme one).

>>> import random
>>> len(mutate(b"npus: 4", random.Random(0))) > 0
True
"""

from __future__ import annotations

import random
import re

INTERESTING = [0, 1, -1, 2, 255, 256, 65535, 65536, 2**31 - 1, 2**31, 2**32, 2**53, 2**63 - 1, 2**63, 2**64, -(2**31), 10**308]
"""Integers that sit on the edges of the types readers convert to."""

_NUMBER = re.compile(rb"-?\d+(?:\.\d+)?(?:e[+-]?\d+)?")
_TEXT_VALUES = [b"inf", b"-inf", b"nan", b"1e-320", b"1e308", b"", b"-0", b"0x10", b"\xff\xfe", b"\"", b"<", b"&amp;"]


def mutate(data: bytes, rng: random.Random, *, rounds: int | None = None) -> bytes:
    """``data`` after 1 to 4 random mutations."""
    out = bytearray(data)
    for _ in range(rounds or rng.randint(1, 4)):
        out = bytearray(rng.choice(_MUTATIONS)(bytes(out), rng))
    return bytes(out)


def _flip(data: bytes, rng: random.Random) -> bytes:
    if not data:
        return bytes([rng.randrange(256)])
    out = bytearray(data)
    position = rng.randrange(len(out))
    out[position] ^= 1 << rng.randrange(8)
    return bytes(out)


def _byte(data: bytes, rng: random.Random) -> bytes:
    if not data:
        return data
    out = bytearray(data)
    out[rng.randrange(len(out))] = rng.choice([0x00, 0x01, 0x7F, 0x80, 0xFF])
    return bytes(out)


def _truncate(data: bytes, rng: random.Random) -> bytes:
    return data[: rng.randrange(len(data) + 1)]


def _delete(data: bytes, rng: random.Random) -> bytes:
    if len(data) < 2:
        return data
    start = rng.randrange(len(data))
    return data[:start] + data[start + rng.randint(1, min(64, len(data) - start)) :]


def _repeat(data: bytes, rng: random.Random) -> bytes:
    if not data:
        return data
    start = rng.randrange(len(data))
    span = data[start : start + rng.randint(1, 64)]
    at = rng.randrange(len(data) + 1)
    return data[:at] + span * rng.randint(1, 8) + data[at:]


def _insert(data: bytes, rng: random.Random) -> bytes:
    at = rng.randrange(len(data) + 1)
    return data[:at] + bytes(rng.randrange(256) for _ in range(rng.randint(1, 16))) + data[at:]


def _varint(data: bytes, rng: random.Random) -> bytes:
    """An interesting integer as a protobuf varint, spliced in."""
    value = rng.choice(INTERESTING) % 2**64
    encoded = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        encoded.append(byte | (0x80 if value else 0))
        if not value:
            break
    at = rng.randrange(len(data) + 1)
    return data[:at] + bytes(encoded) + data[at + rng.randint(0, 4) :]


def _number(data: bytes, rng: random.Random) -> bytes:
    """A number in text replaced by an extreme one, or by something that is not a number."""
    found = list(_NUMBER.finditer(data))
    if not found:
        return _insert(data, rng)
    match = rng.choice(found)
    value = rng.choice([str(rng.choice(INTERESTING)).encode(), rng.choice(_TEXT_VALUES)])
    return data[: match.start()] + value + data[match.end() :]


_MUTATIONS = [_flip, _byte, _truncate, _delete, _repeat, _insert, _varint, _number, _number]
