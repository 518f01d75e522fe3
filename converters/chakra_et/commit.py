"""All-or-nothing writes of several files, as readers see them.

A prefix's rank files are written in three steps:

1. every file goes into a staging folder beside them, ``.NAME.PID.partial/``, one file at a
   time (a generator of contents streams: one file's bytes are held at once);
2. a marker ``.NAME.writing`` (holding the writer's process id) is created, the staged files
   are renamed into place, the caller's clean-up runs (stale rank files of an earlier, larger
   write), and the marker is removed;
3. on an error, the staging folder and the marker go and the error names the user's path.

Readers (:func:`check_not_being_written`) refuse a prefix whose marker is there: a live writer
is still renaming, a dead one was killed part-way and left old and new files mixed. A kill
before step 2 leaves the old files whole; its staging folder is removed by the next write to
the same folder (:func:`remove_stale_staging`), as are the hidden ``.FILE.PID.tmp`` files
earlier versions left.

>>> import pathlib, tempfile
>>> with tempfile.TemporaryDirectory() as tmp:
...     paths = [pathlib.Path(tmp) / f"ar.{r}.et" for r in range(2)]
...     commit_files(paths, [b"a", b"b"], name="ar")
...     sorted(p.name for p in pathlib.Path(tmp).iterdir())
['ar.0.et', 'ar.1.et']
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Callable, Iterable

from chakra_collectives.errors import InputError
from chakra_collectives.processes import is_running


def marker_path(prefix: str | Path) -> Path:
    """The marker that exists while ``prefix``'s files are being renamed into place."""
    prefix = Path(prefix)
    return prefix.with_name(f".{prefix.name}.writing")


def _pid_in(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def check_not_being_written(prefix: str | Path) -> None:
    """Refuse to read ``prefix`` while its marker exists (:class:`InputError` saying why)."""
    marker = marker_path(prefix)
    if not marker.exists():
        return
    pid = _pid_in(marker)
    if pid is not None and is_running(pid):
        raise InputError(f"is being written by process {pid}; read it when that command has finished", path=f"{prefix}.0.et")
    raise InputError(
        f"an interrupted write (process {pid if pid is not None else '?'}) left these files incomplete; "
        f"rerun the command that writes them (or delete {marker.name} to read them as they are)",
        path=f"{prefix}.0.et",
    )


_STAGING = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)\.(partial|tmp)$")


def remove_stale_staging(folder: Path) -> None:
    """Remove what writes killed in ``folder`` left: staging folders and ``.tmp`` files of
    processes that no longer run."""
    if not folder.is_dir():
        return
    for path in folder.iterdir():
        match = _STAGING.match(path.name)
        if not match or is_running(int(match.group("pid"))):
            continue
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def _users_path(filename: str | None, staging: Path, fallback: Path) -> Path:
    """The file the user asked for behind an error's ``filename`` (never the staging folder)."""
    if not filename:
        return fallback
    path = Path(filename)
    if path.parent == staging:
        return staging.parent / path.name
    return fallback if path == staging else path


def commit_files(
    paths: list[Path], contents: Iterable[bytes], *, name: str | None = None, after: Callable[[], None] | None = None
) -> None:
    """Write ``paths`` (all in one folder) with ``contents``, all or nothing as readers see them.

    ``name`` is the prefix's name (its marker is ``.NAME.writing``; default: the first file's
    name); ``after()`` runs between the renames and the marker's removal."""

    def stage(staging: Path) -> None:
        for path, data in zip(paths, contents):
            (staging / path.name).write_bytes(data)

    commit_staged(paths, stage, name=name, after=after)


def commit_staged(
    paths: list[Path], stage: Callable[[Path], None], *, name: str | None = None, after: Callable[[], None] | None = None
) -> None:
    """:func:`commit_files` for callers that write the files themselves: ``stage(staging)``
    writes every file of ``paths`` under its own name into the folder ``staging`` (in any
    order, from any process), then they are renamed into place all or nothing."""
    if not paths:
        return
    folder = paths[0].parent
    name = name or paths[0].name
    staging = folder / f".{name}.{os.getpid()}.partial"
    marker = folder / f".{name}.writing"
    marked = False
    try:
        folder.mkdir(parents=True, exist_ok=True)
        remove_stale_staging(folder)
        staging.mkdir(exist_ok=True)
        stage(staging)
        for path in paths:  # every file staged before any is renamed
            os.stat(staging / path.name)
        marker.write_text(f"{os.getpid()}\n")
        marked = True
        for path in paths:
            os.replace(staging / path.name, path)
        if after is not None:
            after()
        marker.unlink(missing_ok=True)
    except OSError as exc:
        where = _users_path(exc.filename, staging, paths[0])
        if marked:  # files may be mixed now: the marker stays so readers refuse them
            raise InputError(f"cannot write: {exc.strerror}; the files are incomplete", path=where) from None
        raise InputError(f"cannot write: {exc.strerror}", path=where) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


__all__ = ["check_not_being_written", "commit_files", "commit_staged", "marker_path", "remove_stale_staging"]
