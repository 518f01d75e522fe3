"""The largest (and smallest) values chakra-coll accepts, checked where they enter.

Every number that comes from a user -- a topology spec, a topology file, a command-line size, a
Chakra ET or MSCCL-IR file -- is checked against these limits when it is loaded, before
anything is allocated for it, so that a typo or a hostile file gets a one-line error instead
of an overflow, a thrashing machine or an ``inf`` in a report. README "Limits" lists them and
says why each is where it is:

* :data:`MAX_NPUS`, :data:`MAX_SWITCHES`, :data:`MAX_LINKS`: what a topology may hold (the
  largest networks the tool is meant for, 40K NPUs, fit with room to spare; a topology of
  :data:`MAX_LINKS` links takes about 250 MiB and several seconds to build).
* :data:`MIN_BANDWIDTH_GBPS` .. :data:`MAX_BANDWIDTH_GBPS` and :data:`MAX_LATENCY_NS`: link
  parameters must be finite and inside this range, so that every time the tool computes
  (``bytes / bandwidth + latency``, summed over a schedule) stays a finite float and an exact
  ``int64`` number of nanoseconds.
* :data:`MAX_SIZE_BYTES`: a collective, a message or a buffer of at most 1 TiB (sizes are
  multiplied by rank and chunk counts in ``int64`` columns; 2^40 leaves 2^23 of headroom).
* :data:`MAX_DURATION_NS`: a compute node of at most about 11.6 days.

Values past a limit raise :class:`~chakra_collectives.errors.LimitError` (exit code 4) when
they are sizes or counts -- a request too large -- and
:class:`~chakra_collectives.errors.InputError` (exit code 2) when they are not meaningful
(a non-finite or non-positive bandwidth, a negative latency).

>>> check_npus(64, "torus2d:8x8")
64
>>> check_npus(2**31, "edges.txt")
Traceback (most recent call last):
...
chakra_collectives.errors.LimitError: edges.txt: 2,147,483,648 NPUs, above the limit of 65,536 NPUs (README "Limits")
>>> check_bandwidth(float("inf"), "link 0->1")
Traceback (most recent call last):
...
chakra_collectives.errors.InputError: link 0->1 has bandwidth inf GB/s; it must be a finite number from 0.001 to 1e+06 GB/s
>>> check_size(2**63 - 1, "--size")
Traceback (most recent call last):
...
chakra_collectives.errors.LimitError: --size: 9223372036854775807 bytes (8 EiB) is above the limit of 1 TiB (2^40 bytes; README "Limits")
"""

from __future__ import annotations

import math

from chakra_collectives.errors import InputError, LimitError

MAX_NPUS = 65_536
"""NPUs of a topology, ranks of an algorithm or workload (2^16: the 40K-NPU networks of the
TACOS paper fit)."""
MAX_SWITCHES = 65_536
"""Switches of a topology."""
MAX_LINKS = 2**20
"""Directed links of a topology (fully-connected:1024 has 1,047,552)."""
MIN_BANDWIDTH_GBPS = 1e-3
"""Slowest link: 1 MB/s (1 GB = 2^30 bytes)."""
MAX_BANDWIDTH_GBPS = 1e6
"""Fastest link: 1 PB/s."""
MAX_LATENCY_NS = 1e9
"""Longest link latency: one second."""
MAX_SIZE_BYTES = 2**40
"""Largest collective, message or buffer: 1 TiB. At the slowest bandwidth it takes about
10^15 ns, so schedule times stay far below 2^63 ns."""
MAX_DURATION_NS = 1e15
"""Longest compute node: 10^15 ns (about 11.6 days)."""

_README = 'README "Limits"'


def _count(value: int) -> str:
    return f"{value:,}"


def check_npus(count: int, what: str) -> int:
    """``count`` NPUs (or ranks) for ``what``, or a :class:`LimitError`."""
    if count > MAX_NPUS:
        raise LimitError(f"{what}: {_count(count)} NPUs, above the limit of {_count(MAX_NPUS)} NPUs ({_README})")
    return count


def check_switches(count: int, what: str) -> int:
    """``count`` switches for ``what``, or a :class:`LimitError`."""
    if count > MAX_SWITCHES:
        raise LimitError(f"{what}: {_count(count)} switches, above the limit of {_count(MAX_SWITCHES)} ({_README})")
    return count


def check_links(count: int, what: str) -> int:
    """``count`` directed links for ``what``, or a :class:`LimitError` (checked before building them)."""
    if count > MAX_LINKS:
        raise LimitError(f"{what}: {_count(count)} links, above the limit of {_count(MAX_LINKS)} links ({_README})")
    return count


def _number(value: object) -> float:
    """``value`` as a float, NaN when it is not a number (booleans and strings are not)."""
    if isinstance(value, (bool, str, bytes)):
        return math.nan
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return math.nan


def check_bandwidth(value: float, what: str) -> float:
    """A finite bandwidth inside the accepted range (GB/s), or an :class:`InputError`."""
    number = _number(value)
    if not MIN_BANDWIDTH_GBPS <= number <= MAX_BANDWIDTH_GBPS:
        raise InputError(
            f"{what} has bandwidth {value} GB/s; it must be a finite number from {MIN_BANDWIDTH_GBPS:g} to {MAX_BANDWIDTH_GBPS:g} GB/s"
        )
    return number


def check_latency(value: float, what: str) -> float:
    """A finite latency inside the accepted range (ns), or an :class:`InputError`."""
    number = _number(value)
    if not 0 <= number <= MAX_LATENCY_NS:
        raise InputError(f"{what} has latency {value} ns; it must be a finite number from 0 to {MAX_LATENCY_NS:g} ns (1 s)")
    return number


def check_size(nbytes: int, what: str) -> int:
    """A byte count of at most :data:`MAX_SIZE_BYTES`, or a :class:`LimitError`."""
    if nbytes > MAX_SIZE_BYTES:
        shown = f"{nbytes} bytes ({_binary(nbytes)})" if nbytes < 2**80 else "more than 2^80 bytes"
        raise LimitError(f"{what}: {shown} is above the limit of 1 TiB (2^40 bytes; {_README})")
    return nbytes


def check_duration(ns: float, what: str) -> float:
    """A finite duration from 0 to :data:`MAX_DURATION_NS`, or an :class:`InputError`."""
    if not 0 <= _number(ns) <= MAX_DURATION_NS:
        raise InputError(f"{what}: duration {ns:g} ns must be a finite number from 0 to {MAX_DURATION_NS:g} ns")
    return ns


def _binary(nbytes: float) -> str:
    """``8 EiB``: a rough binary size for messages (also past TiB).

    >>> _binary(3 * 2**50), _binary(2**40)
    ('3 PiB', '1 TiB')
    """
    for unit, scale in (("EiB", 2**60), ("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes:g} B"


__all__ = [
    "MAX_BANDWIDTH_GBPS",
    "MAX_DURATION_NS",
    "MAX_LATENCY_NS",
    "MAX_LINKS",
    "MAX_NPUS",
    "MAX_SIZE_BYTES",
    "MAX_SWITCHES",
    "MIN_BANDWIDTH_GBPS",
    "check_bandwidth",
    "check_duration",
    "check_latency",
    "check_links",
    "check_npus",
    "check_size",
    "check_switches",
]
