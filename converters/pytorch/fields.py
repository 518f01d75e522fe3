"""The fields the PyTorch converter reads, checked for type and range where they are read.

Execution traces (schemas 1.0.1 to 1.1.x) and Kineto traces are JSON written by profilers,
copied, merged and edited by people: any field may be missing, of another type, or absurd.
Each reader here takes one raw value and returns it checked, or raises an
:class:`~chakra_collectives.errors.InputError` whose one line names the file, the node id or
event, and the field. What has an obvious repair is repaired and counted in
:class:`TraceRepairs` (``strict=True`` refuses instead), like the ET reader's repairs:

* a negative duration is read as 0;
* an attribute entry that is not ``{name, value}`` with a string name is dropped;
* an operator whose ``parent`` is not an earlier node (ids grow as operators start, so a parent
  always comes first) is read as a top-level operator of its thread;
* ``distributedInfo`` that is not an object is ignored (the files' order pairs the ranks);
* a name with lone surrogates (``"\\ud800"`` in JSON: not Unicode, not writable as UTF-8) has
  them replaced by ``?``.

Ranges: ids are integers from 0 to 2^63 - 1; times are finite microseconds with timestamps of
at most 2^53 µs and durations of at most 10^12 µs (``MAX_DURATION_NS``: about 11.6 days).

>>> repairs = TraceRepairs()
>>> duration(-3.0, repairs, "h.json", "node 7", "dur"), repairs.summary()
(0.0, 'repaired: 1 negative duration read as 0')
>>> duration(float("inf"), repairs, "h.json", "node 7", "dur")
Traceback (most recent call last):
...
chakra_collectives.errors.InputError: h.json: node 7: dur is inf; a duration is a finite number of µs from 0 to 1e+12
>>> integer("--5", "k.json", "event 'nccl'", "correlation")
Traceback (most recent call last):
...
chakra_collectives.errors.InputError: k.json: event 'nccl': correlation is '--5'; expected an integer
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chakra_collectives.errors import InputError
from chakra_collectives.limits import MAX_DURATION_NS, MAX_NPUS

MAX_ID = 2**63 - 1
"""Largest node id, record-function id, correlation id (int64)."""
MAX_TIMESTAMP_US = 2.0**53
"""Largest timestamp magnitude: every µs up to it is an exact float."""
MAX_DURATION_US = MAX_DURATION_NS / 1000
"""Longest operator or kernel: 10^12 µs, the longest compute node a workload may hold."""

_INTEGER_TEXT = re.compile(r"-?\d{1,19}")

REPAIRS = {
    "negative_duration": "negative duration{s} read as 0",
    "bad_attribute": "attribute entr{ies} without a string name dropped",
    "late_parent": "operator{s} whose parent is not an earlier node read as top-level",
    "bad_distributed_info": "distributedInfo that is not an object ignored",
    "bad_text": "name{s} with characters that are not Unicode (lone surrogates) written with '?'",
}
"""What :class:`TraceRepairs` counts, with the words of its summary."""


def _plural(text: str, count: int) -> str:
    return text.replace("{s}", "" if count == 1 else "s").replace("{ies}", "y" if count == 1 else "ies")


@dataclass
class TraceRepairs:
    """What reading the PyTorch traces repaired (counts over every file); ``strict``: refuse."""

    strict: bool = False
    counts: Counter = field(default_factory=Counter)

    def repair(self, kind: str, message: str, path: str | Path, where: str) -> None:
        """Count one repair of ``kind`` (:data:`REPAIRS`), or refuse with ``message`` when strict."""
        if self.strict:
            raise InputError(f"{where}: {message} (--strict refuses what the converter would repair)", path=path)
        self.counts[kind] += 1

    def describe(self) -> list[str]:
        return [f"{count:,} {_plural(REPAIRS[kind], count)}" for kind, count in self.counts.items()]

    def summary(self) -> str | None:
        """``repaired: 2 negative durations read as 0; ...`` (``None``: nothing repaired)."""
        parts = self.describe()
        return "repaired: " + "; ".join(parts) if parts else None


def _shown(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else type(value).__name__ if isinstance(value, (list, dict)) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def integer(value: Any, path: str | Path, where: str, name: str, *, low: int = -MAX_ID, high: int = MAX_ID) -> int | None:
    """An integer field (Kineto writes some as decimal strings): ``None`` when absent, else an
    ``int`` from ``low`` to ``high``, or an :class:`InputError`."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and _INTEGER_TEXT.fullmatch(value.strip()):
        number = int(value)
    else:
        raise InputError(f"{where}: {name} is {_shown(value)}; expected an integer", path=path)
    if not low <= number <= high:
        raise InputError(f"{where}: {name} is {number}; expected an integer from {low} to {high}", path=path)
    return number


def node_id(value: Any, path: str | Path, where: str, name: str) -> int:
    """A node id: an integer from 0 to 2^63 - 1 (bools and strings are not ids)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise InputError(f"{where}: {name} is {'missing' if value is None else _shown(value)}; expected an integer id", path=path)
    if not 0 <= value <= MAX_ID:
        raise InputError(f"{where}: {name} is {value}; expected an id from 0 to 2^63 - 1", path=path)
    return value


def rank(value: Any, path: str | Path, where: str, name: str) -> int | None:
    """A rank or world size: ``None`` when absent, else an integer from 0 to ``MAX_NPUS``."""
    return integer(value, path, where, name, low=0, high=MAX_NPUS)


def _float(value: Any, path: str | Path, where: str, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise InputError(f"{where}: {name} is {_shown(value)}; expected a number of µs", path=path)
    try:
        return float(value)
    except (ValueError, OverflowError):
        raise InputError(f"{where}: {name} is {_shown(value)}; expected a number of µs", path=path) from None


def timestamp(value: Any, path: str | Path, where: str, name: str = "ts") -> float | None:
    """A time in µs: ``None`` when absent, else a finite number of magnitude at most 2^53."""
    number = _float(value, path, where, name)
    if number is not None and not -MAX_TIMESTAMP_US <= number <= MAX_TIMESTAMP_US:
        raise InputError(f"{where}: {name} is {number:g}; a timestamp is a finite number of µs of at most 2^53", path=path)
    return number


def duration(value: Any, repairs: TraceRepairs, path: str | Path, where: str, name: str = "dur") -> float | None:
    """A duration in µs: ``None`` when absent, else finite and at most 10^12 (negative: 0, repaired)."""
    number = _float(value, path, where, name)
    if number is None:
        return None
    if not number <= MAX_DURATION_US or math.isnan(number) or number == -math.inf:
        raise InputError(f"{where}: {name} is {number:g}; a duration is a finite number of µs from 0 to {MAX_DURATION_US:g}", path=path)
    if number < 0:
        repairs.repair("negative_duration", f"{name} is {number:g}, negative", path, where)
        return 0.0
    return number


def object_or_none(value: Any, path: str | Path, where: str, name: str) -> dict | None:
    """An optional JSON object."""
    if value is None or isinstance(value, dict):
        return value
    raise InputError(f"{where}: {name} is {_shown(value)}; expected an object", path=path)


def list_or_empty(value: Any, path: str | Path, where: str, name: str) -> list:
    """An optional JSON list (absent: empty)."""
    if value is None:
        return []
    if isinstance(value, list):
        return value
    raise InputError(f"{where}: {name} is {_shown(value)}; expected a list", path=path)


def string_or_none(value: Any, path: str | Path, where: str, name: str) -> str | None:
    """An optional string."""
    if value is None or isinstance(value, str):
        return value
    raise InputError(f"{where}: {name} is {_shown(value)}; expected a string", path=path)


def unicode_text(value: str) -> str:
    """``value`` with lone surrogates replaced by ``?`` (what protobuf strings can hold).

    >>> unicode_text("nccl" + chr(0xD800))
    'nccl?'
    """
    if value.isascii():
        return value
    return value.encode("utf-8", "replace").decode("utf-8")


def name(value: str, repairs: TraceRepairs, path: str | Path, where: str) -> str:
    """A name the workload will carry: lone surrogates replaced (a repair)."""
    if value.isascii():
        return value
    cleaned = unicode_text(value)
    if cleaned != value:
        repairs.repair("bad_text", f"name {cleaned[:40]!r} holds lone surrogates", path, where)
    return cleaned


def thread_id(value: Any, path: str | Path, where: str, name: str = "tid") -> int | str | None:
    """A Kineto thread id: an integer or a string (``None`` when absent)."""
    if value is None or isinstance(value, str):
        return value
    return integer(value, path, where, name)


__all__ = [
    "MAX_DURATION_US", "MAX_ID", "MAX_TIMESTAMP_US", "REPAIRS", "TraceRepairs", "duration", "integer", "list_or_empty",
    "name", "node_id", "object_or_none", "rank", "string_or_none", "thread_id", "timestamp", "unicode_text",
]
