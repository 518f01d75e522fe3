"""Structured mutations of PyTorch traces: the damage a user's files have, not only flipped bits.

A *trace set* is several JSON files (host execution traces, Kineto traces) packed into one byte
string (:func:`pack` / :func:`unpack`: each file is a ``\\x00FILE name\\n`` line and its text),
so the fuzz targets keep taking bytes and crash inputs stay single files. One mutation:

* inside a file's JSON: delete a key or a list element; replace a value with another type, an
  extreme number (2^61, 2^63, -1, 1e300...), a non-number (``NaN``, ``Infinity``, ``"inf"``,
  ``"--5"``), an odd string (empty, a lone surrogate, 10,000 characters); nest a value in
  thousands of lists; duplicate or shuffle a list; swap two values;
* across files: swap two ranks' Kineto traces, duplicate a file, drop one, change a rank;
* on the bytes, rarely: the byte mutations of :mod:`mutate` (truncation above all).

>>> import random
>>> packed = pack({"h0.json": b'{"nodes": [{"id": 1, "name": "x"}]}'})
>>> unpack(packed)
{'h0.json': b'{"nodes": [{"id": 1, "name": "x"}]}'}
>>> mutated = mutate_traces(packed, random.Random(3))
>>> mutated != packed
True
"""

from __future__ import annotations

import json
import math
import random
import re
from typing import Any

from mutate import mutate

_HEADER = re.compile(rb"\x00FILE ([^\n]*)\n")

EXTREME_NUMBERS: list[Any] = [
    0, -1, 1, 2**31, 2**53 + 1, 2**61, 2**61 * 3, 2**63, 2**64, -(2**63), 10**30, 1e300, -1e300, 1e-320, 0.5,
    math.inf, -math.inf, math.nan,
]
ODD_VALUES: list[Any] = [
    None, True, False, "", "inf", "-inf", "nan", "--5", "1e400", "0x10", "\ud800", "x" * 10_000, [], {}, [1, 2],
    {"id": 1}, [[[]]], "GenericList[Tensor(float)", "Tensor(float", "GenericList[", "]",
]
_DEEP = "\x00deep\x00"


def pack(files: dict[str, bytes]) -> bytes:
    """Files as one byte string (names must not contain a newline)."""
    return b"".join(b"\x00FILE " + name.encode() + b"\n" + data for name, data in files.items())


def unpack(data: bytes) -> dict[str, bytes]:
    """The files of :func:`pack` (bytes before the first header are dropped)."""
    headers = list(_HEADER.finditer(data))
    files: dict[str, bytes] = {}
    for k, header in enumerate(headers):
        end = headers[k + 1].start() if k + 1 < len(headers) else len(data)
        files[header.group(1).decode("utf-8", "replace")] = data[header.end() : end]
    return files


def _containers(value: Any, found: list, depth: int = 0) -> list:
    """Every list and dict in ``value`` (breadth first, capped)."""
    queue = [value]
    while queue and len(found) < 200_000:
        current = queue.pop()
        if isinstance(current, (list, dict)):
            found.append(current)
            queue.extend(current.values() if isinstance(current, dict) else current)
    return found


def _slot(document: Any, rng: random.Random) -> tuple[Any, Any] | None:
    """A random ``(container, key)`` of the document, biased to the fields the converter reads."""
    containers = [c for c in _containers(document, []) if c]
    if not containers:
        return None
    interesting = [c for c in containers if isinstance(c, dict) and (("name" in c and ("id" in c or "ph" in c)) or "value" in c)]
    pool = interesting if interesting and rng.random() < 0.7 else containers
    container = rng.choice(pool)
    key = rng.choice(list(container)) if isinstance(container, dict) else rng.randrange(len(container))
    return container, key


def _new_value(old: Any, rng: random.Random) -> Any:
    roll = rng.random()
    if roll < 0.45:
        return rng.choice(EXTREME_NUMBERS)
    if roll < 0.8:
        return rng.choice(ODD_VALUES)
    if roll < 0.9 and isinstance(old, (int, float)) and not isinstance(old, bool):
        return -old if old else -1
    return str(old)[:100] if not isinstance(old, str) else [old]


def _mutate_document(document: Any, rng: random.Random) -> Any:
    slot = _slot(document, rng)
    if slot is None:
        return rng.choice(ODD_VALUES)
    container, key = slot
    roll = rng.random()
    if roll < 0.2:
        del container[key]
    elif roll < 0.7:
        container[key] = _new_value(container[key], rng)
    elif roll < 0.78:
        container[key] = _DEEP  # replaced by thousands of nested lists when serialized
    elif roll < 0.86 and isinstance(container, list):
        if rng.random() < 0.5:
            container.insert(key, container[key])
        else:
            rng.shuffle(container)
    else:
        other = _slot(document, rng)
        if other is not None:
            (c2, k2) = other
            container[key], c2[k2] = c2[k2], container[key]
    return document


def _dump(document: Any, rng: random.Random) -> bytes:
    text = json.dumps(document, allow_nan=True)
    depth = rng.choice([50, 1_000, 5_000])
    return text.replace(json.dumps(_DEEP), "[" * depth + "1" + "]" * depth).encode("utf-8", "surrogatepass")


def _across_files(files: dict[str, bytes], rng: random.Random) -> dict[str, bytes]:
    names = list(files)
    roll = rng.random()
    kinetos = [n for n in names if n.startswith("k")]
    if roll < 0.3 and len(kinetos) >= 2:
        a, b = rng.sample(kinetos, 2)
        files[a], files[b] = files[b], files[a]
    elif roll < 0.5 and names:
        source = rng.choice(names)
        files[f"{source[0]}{len(names) + 7}.json"] = files[source]
    elif roll < 0.7 and len(names) > 1:
        del files[rng.choice(names)]
    else:
        for name in rng.sample(names, len(names)):
            try:
                document = json.loads(files[name])
            except (ValueError, RecursionError):
                continue
            if isinstance(document, dict) and isinstance(document.get("distributedInfo"), dict):
                document["distributedInfo"]["rank"] = rng.choice([0, 1, 3, -1, 2**40, "1"])
                files[name] = json.dumps(document).encode()
                break
    return files


def mutate_traces(data: bytes, rng: random.Random) -> bytes:
    """A trace set after 1 to 3 mutations (see the module docstring)."""
    files = unpack(data)
    if not files:
        return mutate(data, rng)
    for _ in range(rng.randint(1, 3)):
        roll = rng.random()
        if roll < 0.1:
            files = _across_files(files, rng)
            continue
        if not files:
            break
        name = rng.choice(list(files))
        if roll < 0.15:
            files[name] = mutate(files[name], rng)
            continue
        try:
            document = json.loads(files[name])
        except (ValueError, RecursionError):
            files[name] = mutate(files[name], rng)
            continue
        files[name] = _dump(_mutate_document(document, rng), rng)
    return pack(files)
