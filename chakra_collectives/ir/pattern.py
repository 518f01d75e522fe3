"""A generic collective pattern: per chunk, which ranks hold it before and which must hold it after.

A :class:`ChunkPattern` is the pre- and postcondition of :attr:`Collective.PATTERN
<chakra_collectives.ir.collective.Collective.PATTERN>`: chunk ``s`` starts in input slot ``s``
of every rank of ``holders[s]`` (the symbolic value ``(s, holders[s][0])``: the holders hold the
same data) and must end in output slot ``s`` of every rank of ``targets[s]``. Every rank has
``C`` input and ``C`` output slots; slots the pattern does not name are unconstrained.

Pattern files (JSON or YAML, ``schemas/pattern.schema.json``)::

    {"ranks": 4,                                  # optional: the fabric's NPUs (or the group's size)
     "chunks": [{"from": [0], "to": [1, 2, 3]},   # rank 0's chunk 0 to ranks 1-3
                {"from": 3, "to": [0]}]}          # a single rank may be given bare

>>> p = ChunkPattern(4, holders=((0,), (3,)), targets=((1, 2, 3), (0,)))
>>> p.chunk_count, p.initial_value(rank=0, slot=0), p.initial_value(rank=1, slot=0)
(2, (0, 1), None)
>>> p.expected_value(rank=2, slot=0), p.expected_value(rank=2, slot=1)
((0, 1), None)
>>> ChunkPattern(4, holders=((),), targets=((1,),))
Traceback (most recent call last):
...
chakra_collectives.errors.InputError: chunk 0: no rank holds it before
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chakra_collectives.errors import InputError


@dataclass(frozen=True)
class ChunkPattern:
    """Per chunk, the ranks holding it before (``holders``) and the ranks that must hold it after (``targets``)."""

    num_ranks: int
    holders: tuple[tuple[int, ...], ...]
    targets: tuple[tuple[int, ...], ...]
    name: str = ""
    _held: tuple[frozenset[int], ...] = field(init=False, repr=False, compare=False)
    _wanted: tuple[frozenset[int], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.num_ranks < 1:
            raise InputError(f"a pattern needs at least one rank, got {self.num_ranks}")
        if len(self.holders) != len(self.targets):
            raise InputError(f"{len(self.holders)} chunks have holders but {len(self.targets)} have targets")
        if not self.holders:
            raise InputError("the pattern names no chunk")
        for what, lists in (("holds it before", self.holders), ("must hold it after", self.targets)):
            for chunk, ranks in enumerate(lists):
                if not ranks:
                    raise InputError(f"chunk {chunk}: no rank {what}")
                for rank in ranks:
                    if not 0 <= rank < self.num_ranks:
                        raise InputError(f"chunk {chunk}: rank {rank} is not one of the {self.num_ranks} ranks (0..{self.num_ranks - 1})")
                if len(set(ranks)) != len(ranks):
                    raise InputError(f"chunk {chunk}: a rank is named twice among the ranks that {what}")
        object.__setattr__(self, "_held", tuple(frozenset(h) for h in self.holders))
        object.__setattr__(self, "_wanted", tuple(frozenset(t) for t in self.targets))

    @property
    def chunk_count(self) -> int:
        return len(self.holders)

    def initial_value(self, *, rank: int, slot: int) -> tuple[int, int] | None:
        """``input[rank][slot]`` at the start: ``(slot, first holder)`` on the holders, else nothing."""
        return (slot, 1 << self.holders[slot][0]) if rank in self._held[slot] else None

    def expected_value(self, *, rank: int, slot: int) -> tuple[int, int] | None:
        """What ``output[rank][slot]`` must hold at the end (``None``: unconstrained)."""
        return (slot, 1 << self.holders[slot][0]) if rank in self._wanted[slot] else None

    def bytes_moved(self) -> int:
        """(rank, chunk) pairs some rank must receive (targets that do not hold the chunk already)."""
        return sum(len(w - h) for h, w in zip(self._held, self._wanted))


def pattern_lines(pattern: ChunkPattern) -> list[str]:
    """One ``holders>targets`` line per chunk (how an ET's metadata carries a pattern).

    >>> pattern_lines(ChunkPattern(3, holders=((0, 2),), targets=((1,),)))
    ['0,2>1']
    """
    return [",".join(map(str, h)) + ">" + ",".join(map(str, t)) for h, t in zip(pattern.holders, pattern.targets)]


def pattern_from_lines(lines: list[str], *, num_ranks: int) -> ChunkPattern:
    """The pattern of :func:`pattern_lines`' lines.

    >>> pattern_from_lines(['0,2>1'], num_ranks=3).holders
    ((0, 2),)
    >>> pattern_from_lines(['0>x'], num_ranks=3)
    Traceback (most recent call last):
    ...
    chakra_collectives.errors.InputError: pattern line 0 '0>x' is not 'holders>targets' (comma-separated ranks)
    """
    holders, targets = [], []
    for index, line in enumerate(lines):
        try:
            before, after = line.split(">")
            holders.append(tuple(int(r) for r in before.split(",")))
            targets.append(tuple(int(r) for r in after.split(",")))
        except ValueError:
            raise InputError(f"pattern line {index} {line!r} is not 'holders>targets' (comma-separated ranks)") from None
    return ChunkPattern(num_ranks, tuple(holders), tuple(targets))


def load_pattern(path: str | Path, *, num_ranks: int) -> ChunkPattern:
    """Read a pattern file (JSON or YAML) for ``num_ranks`` ranks (unless it says ``ranks`` itself).

    Raises
    ------
    InputError
        An unreadable file, or one line naming the file, the chunk and what is wrong.
    """
    import yaml  # imported when used (start-up time)

    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"{path}: cannot read the pattern file ({error.__class__.__name__}: {error})") from None
    try:
        document = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as error:
        raise InputError(f"{path}: not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {str(error).splitlines()[0]}") from None
    try:
        return pattern_from_document(document, num_ranks=num_ranks, name=path.stem)
    except InputError as error:
        raise InputError(f"{path}: {error}") from None


def pattern_from_document(document: Any, *, num_ranks: int, name: str = "") -> ChunkPattern:
    """The pattern a parsed pattern file describes (see the module docstring).

    >>> pattern_from_document({"chunks": [{"from": 1, "to": [0, 2]}]}, num_ranks=3).targets
    ((0, 2),)
    >>> pattern_from_document({"ranks": 8, "chunks": []}, num_ranks=4)
    Traceback (most recent call last):
    ...
    chakra_collectives.errors.InputError: the pattern is for 8 ranks, the fabric (or group) has 4
    """
    if not isinstance(document, dict) or not isinstance(document.get("chunks"), list):
        raise InputError("a pattern file is a mapping with a list 'chunks' of {from: ranks, to: ranks}")
    unknown = set(document) - {"ranks", "chunks", "name"}
    if unknown:
        raise InputError(f"unknown key {sorted(unknown)[0]!r} (valid: ranks, chunks, name)")
    ranks = document.get("ranks", num_ranks)
    if not isinstance(ranks, int) or isinstance(ranks, bool) or ranks != num_ranks:
        raise InputError(f"the pattern is for {ranks} ranks, the fabric (or group) has {num_ranks}")
    holders, targets = [], []
    for index, chunk in enumerate(document["chunks"]):
        if not isinstance(chunk, dict) or set(chunk) - {"from", "to"} or "from" not in chunk or "to" not in chunk:
            raise InputError(f"chunk {index}: expected {{from: ranks, to: ranks}}, got {chunk!r}")
        holders.append(_ranks(chunk["from"], index, "from"))
        targets.append(_ranks(chunk["to"], index, "to"))
    return ChunkPattern(num_ranks, tuple(holders), tuple(targets), name=str(document.get("name", name)))


def _ranks(value: Any, chunk: int, key: str) -> tuple[int, ...]:
    values = [value] if isinstance(value, int) else value
    if not isinstance(values, list) or any(not isinstance(v, int) or isinstance(v, bool) for v in values):
        raise InputError(f"chunk {chunk}: '{key}' must be a rank or a list of ranks, got {value!r}")
    return tuple(values)
