"""A workload's columns kept beside its rank files (``PREFIX.columns.npz``), read back instead
of decoding the files while they hold the same bytes.

Decoding a large set of rank files costs about 1.7 µs of CPU a node (one protobuf parse and
the attribute lookups; a 1,024-rank ring all-reduce's custom ETs: 5.2M nodes, 14 s with the
checks). Whoever writes the files and knows what they read as (``synth --astra-sim``:
:func:`~chakra_collectives.converters.chakra_et.written_workload.written_workload`) saves those
columns with :func:`save_columns`; :func:`load_columns` returns them only when

* the rank files hold, byte for byte, what they held then (a SHA-256 over every file's size
  and SHA-256, in rank order: half a second for 0.5 GB; the writer hashes each file's bytes as
  it produces them, :func:`~chakra_collectives.converters.chakra_et.writer.write_algorithm_hashed`,
  so that saving reads nothing back), and
* the reading code is the one that read them (a digest of the modules that decide what files
  read as: a change there ignores every saved file), and
* the caller reads under the default policy (the columns are what that policy reads).

Otherwise the caller decodes the files (nothing is refused because of this file). The file is
plain arrays (``numpy.load`` without pickles) and JSON, each integer column in the narrowest
type that holds it (one value where all are equal); written to a temporary name, then renamed.

>>> import tempfile, pathlib
>>> from chakra_collectives.ir import Collective
>>> from chakra_collectives.synth.baselines import ring
>>> from chakra_collectives.converters.chakra_et.writer import write_algorithm
>>> from chakra_collectives.converters.chakra_et.written_workload import written_workload
>>> from chakra_collectives.converters.chakra_et.reader import rank_files
>>> with tempfile.TemporaryDirectory() as tmp:
...     prefix = pathlib.Path(tmp) / "ar"
...     algo = ring(Collective.ALL_REDUCE, 4, size_bytes=2**20)
...     _ = write_algorithm(algo, prefix)
...     saved = save_columns(written_workload(algo, prefix), prefix, rank_files(prefix), min_bytes=0)
...     loaded = load_columns(prefix, rank_files(prefix))
...     _ = prefix.with_name("ar.1.et").write_bytes(b"changed")
...     stale = load_columns(prefix, rank_files(prefix))
>>> saved, len(loaded), loaded.describe(0), stale
(True, 60, 'node 0 COMM_SEND to rank 1 tag 0', None)
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import zipfile
from pathlib import Path
from typing import Iterable

import numpy as np

from chakra_collectives.converters.chakra_et.read_policy import Repairs
from chakra_collectives.ir.workload import Workload

SUFFIX = ".columns.npz"
FORMAT = 2
COLUMNS = ("rank", "node_id", "node_type", "duration_ns", "is_cpu_op", "comm_type", "comm_size", "peer", "tag", "dep_ptr", "dep_idx")
"""The array columns of a :class:`~chakra_collectives.ir.workload.Workload` kept (the others --
no process groups, no dimensions, no repairs -- are what every saved workload has)."""
SAVED_BYTES = 16 * 2**20
"""Rank files smaller than this in total are not worth a columns file (decoding them takes
well under a second); :func:`save_columns` skips them."""
_READING_MODULES = ("nodes", "one_parse", "stream", "read_policy", "repairs", "workload_reader", "columns_file")
"""The modules (of this package) whose code decides what rank files read as."""


def columns_path(prefix: str | Path) -> Path:
    """Where the columns of ``prefix``'s rank files are kept."""
    return Path(f"{prefix}{SUFFIX}")


def save_columns(
    workload: Workload, prefix: str | Path, paths: list[Path], *, min_bytes: int | None = None, digest: str | None = None
) -> bool:
    """Keep ``workload`` -- what the rank files ``paths`` of ``prefix`` read as under the
    default policy -- beside them; ``False`` (nothing written) when they are smaller than
    ``min_bytes`` (default :data:`SAVED_BYTES`) or the workload has what the file does not keep
    (process groups, dimensions, repairs). ``digest``: the files' :func:`files_digest` as their
    writer computed it from the bytes it wrote (default: read the files and compute it)."""
    least = SAVED_BYTES if min_bytes is None else min_bytes
    if sum(p.stat().st_size for p in paths) < least or not _keepable(workload):
        return False
    arrays: dict[str, np.ndarray] = {}
    stored: dict[str, dict] = {}
    for name in COLUMNS:
        column = getattr(workload, name)
        stored[name], narrow = _narrowed(column)
        if narrow is not None:
            arrays[name] = narrow
    meta = {
        "format": FORMAT, "reader": _reader_digest(), "files": files_digest(paths) if digest is None else digest,
        "num_ranks": workload.num_ranks, "nodes": len(workload), "columns": stored,
    }
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    target = columns_path(prefix)
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "wb") as handle:
            np.savez(handle, **arrays)
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)
    return True


def load_columns(prefix: str | Path, paths: list[Path]) -> Workload | None:
    """The workload kept for ``prefix`` if its rank files ``paths`` still hold the bytes it was
    read from, by this reading code; ``None`` otherwise (no file, another file, a damaged one)."""
    target = columns_path(prefix)
    if not target.is_file():
        return None
    try:
        with np.load(target, allow_pickle=False) as saved:
            meta = json.loads(saved["meta"].tobytes())
            if meta.get("format") != FORMAT or meta.get("reader") != _reader_digest() or meta.get("num_ranks") != len(paths):
                return None
            if meta.get("files") != files_digest(paths):
                return None
            columns = {name: _widened(meta["columns"][name], saved.get(name), int(meta["nodes"])) for name in COLUMNS}
    except (OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile, json.JSONDecodeError):
        return None
    count = int(meta["nodes"])
    if not _consistent(columns, count, len(paths)):
        return None
    return Workload(
        prefix=str(prefix), num_ranks=len(paths), pg_name=[None] * count, involved_dim=[None] * count,
        paths=list(paths), repairs=Repairs(), **columns,
    )


def _keepable(workload: Workload) -> bool:
    count = len(workload)  # list.count: C speed over millions of nodes
    return workload.repairs.summary() is None and workload.pg_name.count(None) == count and workload.involved_dim.count(None) == count


def _narrowed(column: np.ndarray) -> tuple[dict, np.ndarray | None]:
    """How ``column`` is kept: its dtype and one value when all are equal, else the narrowest
    integer type holding it (floats with integer values too), else as is."""
    spec: dict = {"dtype": column.dtype.str, "length": len(column)}
    if len(column) and bool((column == column[0]).all()):
        spec["value"] = column[0].item()
        return spec, None
    if column.dtype.kind == "f" and len(column) and bool((column == np.rint(column)).all()) and abs(column).max() < 2**53:
        column = column.astype(np.int64)
    if column.dtype.kind in "iu" and len(column):
        low, high = int(column.min()), int(column.max())
        for narrow in (np.int8, np.int16, np.int32):
            if np.iinfo(narrow).min <= low and high <= np.iinfo(narrow).max:
                return spec, column.astype(narrow)
    return spec, column


def _widened(spec: dict, kept: np.ndarray | None, nodes: int) -> np.ndarray:
    dtype = np.dtype(spec["dtype"])
    if "value" in spec:
        return np.full(int(spec["length"]), spec["value"], dtype=dtype)
    if kept is None:
        raise KeyError("column")
    return kept.astype(dtype)


def _consistent(columns: dict[str, np.ndarray], count: int, ranks: int) -> bool:
    """Lengths that fit together, ranks ascending over ``0..ranks-1``, dependencies in range."""
    if any(len(columns[name]) != count for name in COLUMNS if name not in ("dep_ptr", "dep_idx")):
        return False
    rank, dep_ptr, dep_idx = columns["rank"], columns["dep_ptr"], columns["dep_idx"]
    return (
        len(dep_ptr) == count + 1 and int(dep_ptr[0]) == 0 and int(dep_ptr[-1]) == len(dep_idx) and bool((np.diff(dep_ptr) >= 0).all())
        and bool((np.diff(rank) >= 0).all()) and (count == 0 or (int(rank[0]) >= 0 and int(rank[-1]) < ranks))
        and (len(dep_idx) == 0 or (int(dep_idx.min()) >= 0 and int(dep_idx.max()) < count))
    )


def file_digest(data: bytes) -> tuple[int, bytes]:
    """One file's part of :func:`files_digest`: its size and SHA-256, from its bytes."""
    return len(data), hashlib.sha256(data).digest()


def combined_digest(parts: Iterable[tuple[int, bytes]]) -> str:
    """:func:`files_digest` from every file's :func:`file_digest`, in order.

    >>> combined_digest([file_digest(b"a"), file_digest(b"bc")]) == combined_digest([file_digest(b"ab"), file_digest(b"c")])
    False
    """
    digest = hashlib.sha256()
    for size, sha in parts:
        digest.update(size.to_bytes(8, "little"))
        digest.update(sha)
    return digest.hexdigest()


def files_digest(paths: list[Path]) -> str:
    """SHA-256 over every file's size and SHA-256, in order: any changed, added, removed or
    reordered byte changes it."""
    return combined_digest(file_digest(path.read_bytes()) for path in paths)


_READER_DIGEST: list[str] = []


def _reader_digest() -> str:
    """SHA-256 of the reading modules' source (computed once per process)."""
    if not _READER_DIGEST:
        digest = hashlib.sha256()
        package = __name__.rsplit(".", 1)[0]
        for name in _READING_MODULES:
            digest.update(Path(importlib.import_module(f"{package}.{name}").__file__).read_bytes())
        _READER_DIGEST.append(digest.hexdigest())
    return _READER_DIGEST[0]


__all__ = ["SAVED_BYTES", "SUFFIX", "columns_path", "combined_digest", "file_digest", "files_digest", "load_columns", "save_columns"]
