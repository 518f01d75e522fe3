"""Units: bytes, nanoseconds and GB/s, converted in exactly one place.

Every size in chakra-collectives is in bytes, every time in nanoseconds (float), every
bandwidth in GB/s with ASTRA-sim's and TACOS's meaning: **1 GB = 2^30 bytes**, so
50 GB/s moves 53.687 bytes per nanosecond. Size suffixes follow the same binary convention
(``1MB`` = ``1MiB`` = 1,048,576 bytes, as ASTRA-sim's microbenchmarks name their 1 MiB files).

Examples
--------
>>> parse_size("64MiB")
67108864
>>> parse_size("1.5KB")
1536
>>> round(bytes_per_ns(50.0), 3)
53.687
>>> format_size(3 * 2**20)
'3 MiB'
>>> format_time_ns(41174.0)
'41.17 µs'
>>> parse_duration("20us")
20000.0
"""

from __future__ import annotations

import math
import re

from chakra_collectives.errors import InputError
from chakra_collectives.limits import MAX_SIZE_BYTES, check_duration, check_size

GIB = 2**30
"""Bytes in one GB of bandwidth (ASTRA-sim, TACOS)."""

_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 2**10,
    "kb": 2**10,
    "kib": 2**10,
    "m": 2**20,
    "mb": 2**20,
    "mib": 2**20,
    "g": 2**30,
    "gb": 2**30,
    "gib": 2**30,
    "t": 2**40,
    "tb": 2**40,
    "tib": 2**40,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str | int) -> int:
    """Parse a byte count such as ``"64MiB"``, ``"1MB"``, ``"4096"`` or ``"1.5K"``.

    Suffixes are binary (K = 1024). The result must be a positive whole number of bytes, at
    most :data:`~chakra_collectives.limits.MAX_SIZE_BYTES` (1 TiB).

    >>> parse_size("4096")
    4096
    >>> parse_size("2G")
    2147483648
    """
    if isinstance(text, bool):
        raise InputError(f"malformed size {text!r}: expected a number with an optional unit such as 64MiB, 1MB, 4096")
    if isinstance(text, int):
        value, unit = text, ""
    else:
        match = _SIZE_RE.match(text)
        if not match:
            raise InputError(f"malformed size {text!r}: expected a number with an optional unit such as 64MiB, 1MB, 4096")
        number = match.group(1)
        if len(number.split(".")[0].lstrip("0")) > 20:  # more digits than any accepted size has
            check_size(2**1024, f"size {str(text)[:40]!r}")
        value, unit = (float(number) if "." in number else int(number)), match.group(2).lower()
    if unit not in _SIZE_UNITS:
        raise InputError(f"malformed size {str(text)[:60]!r}: unknown unit {unit[:20]!r} (use B, KiB, MiB, GiB, TiB; K/KB/MB/GB mean the same)")
    try:
        nbytes = value * _SIZE_UNITS[unit]
    except OverflowError:  # an integer too large for a float
        nbytes = math.inf
    if nbytes > MAX_SIZE_BYTES:  # also inf: a number too long for a float
        check_size(round(nbytes) if math.isfinite(nbytes) else 2**1024, f"size {str(text)[:40]!r}")
    if nbytes != int(nbytes):
        raise InputError(f"malformed size {text!r}: not a whole number of bytes")
    if nbytes <= 0:
        raise InputError(f"malformed size {text!r}: must be positive")
    return int(nbytes)


_TIME_UNITS = {"": 1.0, "ns": 1.0, "us": 1e3, "µs": 1e3, "ms": 1e6, "s": 1e9}
_TIME_RE = re.compile(r"^\s*(\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)\s*([a-zA-Zµ]*)\s*$")


def parse_duration(text: str | int | float) -> float:
    """Parse a duration such as ``"20us"``, ``"1.5ms"``, ``"250ns"`` or ``500`` into nanoseconds.

    A bare number is nanoseconds. The result must be zero or positive.

    >>> parse_duration("1.5ms"), parse_duration(250), parse_duration("0")
    (1500000.0, 250.0, 0.0)
    """
    if isinstance(text, bool):
        raise InputError(f"malformed duration {text!r}: expected a number with an optional unit such as 20us, 1.5ms, 250ns")
    if isinstance(text, (int, float)):
        value, unit = float(text), ""
    else:
        match = _TIME_RE.match(str(text))
        if not match:
            raise InputError(f"malformed duration {text!r}: expected a number with an optional unit such as 20us, 1.5ms, 250ns")
        value, unit = float(match.group(1)), match.group(2).lower()
    if unit not in _TIME_UNITS:
        raise InputError(f"malformed duration {text!r}: unknown unit {unit!r} (use ns, us, ms or s)")
    if not value >= 0:
        raise InputError(f"malformed duration {text!r}: must be zero or positive")
    return check_duration(value * _TIME_UNITS[unit], f"duration {text!r}")


_BANDWIDTH_UNITS = {
    "": 1.0,
    "gb/s": 1.0, "gbps": 1.0 / 8, "gib/s": 1.0,
    "mb/s": 2**-10, "mib/s": 2**-10, "mbps": 2**-10 / 8,
    "tb/s": 2**10, "tib/s": 2**10, "tbps": 2**10 / 8,
    "b/s": 2**-30, "bps": 2**-30 / 8,
}
_BANDWIDTH_RE = re.compile(r"^\s*(\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)\s*([a-zA-Z/]*)\s*$")


def parse_bandwidth(text: str | int | float) -> float:
    """Parse a bandwidth such as ``"50GB/s"``, ``"400Gbps"`` or ``50`` into GB/s (1 GB = 2^30 bytes).

    A bare number is GB/s. Byte units (``GB/s``, ``GiB/s``, ``MB/s``, ``TB/s``) are binary like
    every size; a lower-case ``b`` in ``Gbps``/``Gb/s`` means bits (8 to a byte), on the same
    binary scale. The result must be positive.

    >>> parse_bandwidth("50GB/s"), parse_bandwidth("400Gbps"), parse_bandwidth(25), parse_bandwidth("512MB/s")
    (50.0, 50.0, 25.0, 0.5)
    """
    if isinstance(text, bool):
        raise InputError(f"malformed bandwidth {text!r}: expected a number with an optional unit such as 50GB/s, 400Gbps, 50")
    if isinstance(text, (int, float)):
        value, unit = float(text), ""
    else:
        match = _BANDWIDTH_RE.match(str(text))
        if not match:
            raise InputError(f"malformed bandwidth {text!r}: expected a number with an optional unit such as 50GB/s, 400Gbps, 50")
        value, unit = float(match.group(1)), match.group(2)
        if re.fullmatch(r"[KMGTkmgt]?b(/s|ps)", unit):  # bits: Gb/s, Gbps
            unit = unit[:-3].lower() + "bps" if unit.endswith("/s") else unit.lower()
        else:
            unit = unit.lower().replace("bps", "b/s")
    if unit not in _BANDWIDTH_UNITS:
        raise InputError(f"malformed bandwidth {text!r}: unknown unit {unit!r} (use GB/s, MB/s, TB/s or Gbps; a bare number is GB/s)")
    if not value > 0:
        raise InputError(f"malformed bandwidth {text!r}: must be positive")
    return value * _BANDWIDTH_UNITS[unit]


def bytes_per_ns(gbps: float) -> float:
    """Convert a bandwidth in GB/s (1 GB = 2^30 bytes) to bytes per nanosecond.

    >>> bytes_per_ns(1.0) * 1e9 == 2**30
    True
    """
    return gbps * GIB / 1e9


def gbps_from_bytes_per_ns(rate: float) -> float:
    """Inverse of :func:`bytes_per_ns`.

    >>> gbps_from_bytes_per_ns(bytes_per_ns(50.0))
    50.0
    """
    return rate * 1e9 / GIB


def format_size(nbytes: float) -> str:
    """Human-readable binary size.

    >>> format_size(1536)
    '1.5 KiB'
    >>> format_size(100)
    '100 B'
    """
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.4g} {unit}"
    return f"{nbytes:.4g} B"


def format_count(count: float) -> str:
    """A count as people read it: whole numbers up to 99,999 as they are, larger ones with a
    decimal suffix (k, M, G) and 3 significant digits.

    >>> format_count(112), format_count(40.0), format_count(99_999)
    ('112', '40', '99999')
    >>> format_count(3_050_790), format_count(1_544_770_000), format_count(250_000)
    ('3.05M', '1.54G', '250k')
    >>> format_count(2.5)
    '2.5'
    """
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if count >= 100_000 and count >= scale:
            return f"{count / scale:.3g}{unit}"
    return f"{count:g}" if count != int(count) else str(int(count))


def format_time_ns(ns: float) -> str:
    """Human-readable duration from nanoseconds (4 significant digits; µs, the SI symbol).

    >>> format_time_ns(999)
    '999 ns'
    >>> format_time_ns(2.5e9)
    '2.5 s'
    """
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.4g} {unit}"
    return f"{ns:.4g} ns"
