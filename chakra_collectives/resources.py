"""How much memory a request may use, and refusing one that would need more, before it starts.

Work that grows with its input -- synthesizing for many NPUs or chunks, reading large or
highly compressed files, verifying, replaying a large workload -- is estimated before it is
allocated (:class:`Estimate`: bytes, and what they count), and :func:`require` refuses it with
one line that says the estimate, the limit and how to proceed, instead of letting the machine
thrash or the kernel kill the process. The figures are upper envelopes of what the code
measurably uses (``bench/bench_estimates.py`` compares them with measured peaks).

The limit is on the whole process's resident memory (what ``ps`` shows as RSS):

* by default :data:`DEFAULT_FRACTION` of the memory available when it is first asked for
  (``MemAvailable`` plus what the process already holds), and never more than the address
  space or cgroup limits the process runs under leave;
* ``chakra-coll COMMAND --max-memory 8GiB`` (or ``50%`` of available memory), the
  environment variable ``CHAKRA_COLL_MAX_MEMORY`` (same forms), or :func:`memory_limit_set`
  in library code, set it explicitly.

>>> with memory_limit_set(2**30):
...     require(Estimate("reading out/ar (1,024 files)", 3 * 2**30, "3 GiB of node records", "read fewer ranks"))
Traceback (most recent call last):
...
chakra_collectives.errors.LimitError: reading out/ar (1,024 files) needs about 3 GiB (3 GiB of node records), above the memory limit of 1 GiB (--max-memory...); read fewer ranks, or raise the limit with --max-memory ...GiB
>>> parse_memory("1.5GiB"), parse_memory("0")
(1610612736, 0)
"""

from __future__ import annotations

import math
import os
import resource
import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

from chakra_collectives.errors import InputError, LimitError
from chakra_collectives.units import format_size, parse_size

DEFAULT_FRACTION = 0.75
"""Share of the available memory a request may use unless told otherwise."""
ENVIRONMENT = "CHAKRA_COLL_MAX_MEMORY"
"""Environment variable that sets the limit (a size such as ``8GiB``, or ``50%``)."""


@dataclass(frozen=True)
class Estimate:
    """What a request will need: ``nbytes`` more memory, for ``work`` (what the figure counts)."""

    what: str
    """The request, as the user would name it: ``synthesizing direct all-reduce on ring:4096``."""
    nbytes: float
    work: str
    """What the estimate counts: ``16.8M operations, 34.4G message hops``."""
    advice: str
    """How to make the request smaller: ``use fewer NPUs or chunks per NPU``."""


@dataclass(frozen=True)
class Limit:
    """The memory limit in force: ``nbytes`` of resident memory for the whole process."""

    nbytes: int
    source: str
    """Where it comes from, for messages: ``75% of available memory``, ``--max-memory``."""
    raised_by: str = "--max-memory"
    """How a user raises it, for messages."""


_explicit: Limit | None = None
_default: Limit | None = None


def parse_memory(text: str) -> int:
    """``8GiB`` / ``4096MiB`` / ``0`` (no limit) as bytes; ``NN%`` as that share of available memory.

    >>> parse_memory("512MiB")
    536870912
    """
    text = str(text).strip()
    if text.endswith("%"):
        try:
            share = float(text[:-1])
        except ValueError:
            raise InputError(f"malformed memory limit {text!r}: expected a size such as 8GiB or a share such as 50%") from None
        if not 0 < share <= 100:
            raise InputError(f"memory limit {text!r}: the share must be above 0% and at most 100%")
        return int(_available() * share / 100)
    if text == "0":
        return 0
    return parse_size(text)


def memory_limit() -> Limit:
    """The limit in force: set explicitly (:func:`memory_limit_set`, ``CHAKRA_COLL_MAX_MEMORY``)
    or the default (:data:`DEFAULT_FRACTION` of available memory), capped by the process's own
    address-space and cgroup limits (an explicit one by its address-space limit, ``ulimit -v``,
    when that leaves less: work that could not be allocated is refused before it starts, not
    run out of memory). ``nbytes == 0`` means no limit."""
    global _default
    if _explicit is not None:
        return _within_address_space(_explicit)
    configured = os.environ.get(ENVIRONMENT)
    if configured:
        try:
            return _within_address_space(Limit(parse_memory(configured), ENVIRONMENT))
        except InputError as error:
            raise InputError(f"{ENVIRONMENT}={configured!r}: {error.message}") from None
    if _default is None:
        _default = Limit(int(_available() * DEFAULT_FRACTION), f"{DEFAULT_FRACTION:.0%} of available memory")
    return _default


@contextmanager
def memory_limit_set(nbytes: int | None, source: str = "--max-memory") -> Iterator[None]:
    """Run a block under a limit of ``nbytes`` of resident memory (``None``: the default; 0: none);
    ``source`` names where it comes from in messages."""
    global _explicit
    before = _explicit
    _explicit = None if nbytes is None else Limit(int(nbytes), source)
    try:
        yield
    finally:
        _explicit = before


def require(estimate: Estimate) -> None:
    """Refuse ``estimate`` with a :class:`LimitError` when the process would exceed the limit.

    The process may hold ``limit`` bytes in all: what it holds now plus ``estimate.nbytes``.
    """
    limit = memory_limit()
    if limit.nbytes <= 0:
        return
    held = resident_bytes()
    if held + estimate.nbytes <= limit.nbytes:
        return
    suggestion = _round_up(held + estimate.nbytes)
    raise LimitError(
        f"{estimate.what} needs about {format_size(estimate.nbytes)} ({estimate.work}), above the memory limit of "
        f"{format_size(limit.nbytes)} ({limit.source}{_held(held, limit)}); {estimate.advice}, or raise the limit with "
        f"{limit.raised_by} {suggestion}"
    )


def require_disk(folder: str | os.PathLike, estimate: Estimate) -> None:
    """Refuse ``estimate`` -- ``nbytes`` of files to write into ``folder`` -- with a
    :class:`LimitError` when the file system holding ``folder`` has less space free, before
    anything is written (a folder not made yet: its nearest existing parent's file system).

    >>> import tempfile
    >>> require_disk(tempfile.gettempdir(), Estimate("writing out/ag", 1024, "10 operations", "write elsewhere"))
    >>> require_disk(tempfile.gettempdir(), Estimate("writing out/ag", 2**70, "1e21 operations", "write elsewhere"))
    Traceback (most recent call last):
    ...
    chakra_collectives.errors.LimitError: writing out/ag needs about ... on disk (1e21 operations), above the ... free in ...; write elsewhere
    """
    free = free_disk_bytes(folder)
    if free is None or estimate.nbytes <= free:
        return
    raise LimitError(
        f"{estimate.what} needs about {format_size(estimate.nbytes)} on disk ({estimate.work}), above the "
        f"{format_size(free)} free in {folder}; {estimate.advice}"
    )


def free_disk_bytes(folder: str | os.PathLike) -> int | None:
    """Bytes free for this user on the file system of ``folder`` or of its nearest existing
    parent (``None``: unknown)."""
    path = os.path.abspath(folder)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def fits(estimate: Estimate) -> bool:
    """Whether :func:`require` would accept ``estimate``."""
    try:
        require(estimate)
    except LimitError:
        return False
    return True


def _held(held: int, limit: Limit) -> str:
    return f", {format_size(held)} already in use" if held > limit.nbytes / 4 else ""


def _round_up(nbytes: float) -> str:
    """A ``--max-memory`` value above ``nbytes``: whole GiB (or MiB below 1 GiB).

    >>> _round_up(3.2 * 2**30), _round_up(300 * 2**20)
    ('4GiB', '512MiB')
    """
    if nbytes >= 2**30:
        return f"{math.ceil(nbytes / 2**30)}GiB"
    return f"{2 ** math.ceil(math.log2(max(nbytes, 2**20)) - 20)}MiB"


# ---------------------------------------------------------------------------- measurements
def resident_bytes() -> int:
    """Resident memory of this process now (``VmRSS``; the peak where that is unknown)."""
    status = _status()
    if "VmRSS" in status:
        return status["VmRSS"]
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _available() -> int:
    """Memory this process could hold: what it holds, plus what the system, its address-space
    limit and its cgroup have left."""
    held = resident_bytes()
    room = [_meminfo_available()]
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        room.append(max(0, soft - _status().get("VmSize", held)))
    room.append(_cgroup_room())
    known = [r for r in room if r is not None]
    return held + (min(known) if known else 2**33)


def _within_address_space(limit: Limit) -> Limit:
    """``limit``, or what the address-space limit leaves (what the process holds, plus the soft
    ``RLIMIT_AS`` less its address space now) where that is less."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if limit.nbytes <= 0 or soft == resource.RLIM_INFINITY:
        return limit
    status = _status()
    held = status.get("VmRSS", 0)
    room = held + max(0, soft - status.get("VmSize", held))
    return limit if limit.nbytes <= room else Limit(room, f"{limit.source}, capped by the address-space limit", raised_by="ulimit -v of at least")


def _status() -> dict[str, int]:
    """``/proc/self/status`` sizes in bytes (empty where there is no /proc)."""
    found: dict[str, int] = {}
    try:
        with open("/proc/self/status") as status:
            for line in status:
                key, _, value = line.partition(":")
                parts = value.split()
                if len(parts) == 2 and parts[1] == "kB":
                    found[key] = int(parts[0]) * 1024
    except OSError:
        pass
    return found


def _meminfo_available() -> int | None:
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _cgroup_room() -> int | None:
    """What the cgroup (v2) memory limit leaves, if one is set."""
    try:
        with open("/sys/fs/cgroup/memory.max") as limit_file:
            limit = limit_file.read().strip()
        if limit == "max":
            return None
        with open("/sys/fs/cgroup/memory.current") as current_file:
            return max(0, int(limit) - int(current_file.read().strip()))
    except (OSError, ValueError):
        return None


REUSED_BLOCK_BYTES = 2**30
"""Freed blocks up to this size stay in the process's heap for the next allocation (see
:func:`reuse_freed_memory`)."""


def reuse_freed_memory() -> bool:
    """Let glibc's ``malloc`` keep freed blocks up to :data:`REUSED_BLOCK_BYTES` for reuse instead
    of unmapping them (``mallopt``: mmap and trim thresholds), and say whether it took the setting
    (``False`` off glibc: nothing changes).

    Columnar work allocates and frees arrays of tens of MiB per step (a 5.2M-task replay: 40 MiB
    per column); by default each is mapped afresh and its pages faulted in again -- at 1,024 ranks
    about 4 s of system time of the ``replay --system`` command's 22 s (bench/bench_astra_system.py).
    Peak memory stays within about 10% (the heap holds what it freed, and reuses it).

    >>> import sys
    >>> reuse_freed_memory() or not sys.platform.startswith("linux")   # False (nothing changed) off glibc
    True
    """
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library the process runs on
    except (OSError, AttributeError):
        return False
    mmap_threshold, trim_threshold = -3, -1  # M_MMAP_THRESHOLD, M_TRIM_THRESHOLD in <malloc.h>
    return bool(mallopt(mmap_threshold, REUSED_BLOCK_BYTES)) and bool(mallopt(trim_threshold, REUSED_BLOCK_BYTES))


def count(value: float) -> str:
    """``16.8M``-style counts for :attr:`Estimate.work`.

    >>> count(950), count(16_773_120), count(3.4e10)
    ('950', '16.8M', '34G')
    """
    for suffix, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.0f}"


__all__ = [
    "DEFAULT_FRACTION",
    "ENVIRONMENT",
    "Estimate",
    "Limit",
    "REUSED_BLOCK_BYTES",
    "count",
    "fits",
    "free_disk_bytes",
    "memory_limit",
    "memory_limit_set",
    "parse_memory",
    "require",
    "require_disk",
    "resident_bytes",
    "reuse_freed_memory",
]
