"""What reading a set of rank files costs in memory, known from the files' sizes alone.

Decoding keeps every node as columns (ids, types, dependencies, attributes) plus the bytes of
the files being parsed; peaks measure 1.2-2.5 bytes of memory per byte of ET on disk since
files are parsed in one call each into packed columns (the 1,024-rank ring all-reduce:
493 MiB of files, ``inspect`` peaks at 1.2 GB; 4.5-5.2 before), so :data:`BYTES_PER_FILE_BYTE`
is an upper envelope. A gzip'd file counts at its unpacked size, which the gzip trailer
records (modulo 4 GiB; the unpacking itself is bounded as well).

>>> import gzip, pathlib, tempfile
>>> with tempfile.TemporaryDirectory() as tmp:
...     path = pathlib.Path(tmp) / "w.0.et.gz"
...     _ = path.write_bytes(gzip.compress(bytes(1000)))
...     estimate = reading_estimate("w", [path])
>>> estimate.nbytes, estimate.work
(3000.0, '1 file, 1000 B of ET')
"""

from __future__ import annotations

from pathlib import Path

from chakra_collectives.resources import Estimate
from chakra_collectives.units import format_size

BYTES_PER_FILE_BYTE = 3
"""Peak memory per byte of (unpacked) ET while it is read."""


def unpacked_size(path: Path) -> int:
    """Bytes of ET in ``path``: its size, or for a ``.gz`` file the size its trailer records."""
    size = path.stat().st_size
    if path.suffix != ".gz" or size < 18:
        return size
    with open(path, "rb") as handle:
        handle.seek(-4, 2)
        return int.from_bytes(handle.read(4), "little")


def reading_estimate(prefix: str | Path, paths: list[Path]) -> Estimate:
    """The memory reading ``paths`` (the rank files of ``prefix``) needs."""
    total = sum(unpacked_size(p) for p in paths)
    files = f"{len(paths):,} file{'s' if len(paths) != 1 else ''}"
    return Estimate(
        f"reading {prefix} ({files})",
        float(BYTES_PER_FILE_BYTE * total),
        f"{files}, {format_size(total)} of ET",
        "read fewer ranks, or split the algorithm or workload",
    )


__all__ = ["BYTES_PER_FILE_BYTE", "reading_estimate", "unpacked_size"]
