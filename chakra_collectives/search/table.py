"""The results table of a search: a Parquet dataset, one file per evaluation, written as each finishes.

``RESULTS.parquet/`` is a folder of ``part-KEY.parquet`` files with one schema
(:data:`SCHEMA`); ``pyarrow.dataset`` or ``pandas.read_parquet`` read the folder as one table.
Each part is written to a temporary name and renamed, so an interrupted search (Ctrl-C, a
killed worker or client) leaves only whole rows, and rerunning the same space skips every key
already there. The next write removes the staging files of a search that was killed.

>>> import tempfile, pathlib
>>> table = ResultTable(pathlib.Path(tempfile.mkdtemp()) / "results.parquet")
>>> table.append({"key": "abc", "status": "ok", "iteration_ns": 1.5e6, "num_npus": 8})
>>> table.keys(), table.rows()[0]["iteration_ns"], table.rows()[0]["error"]
({'abc'}, 1500000.0, None)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from chakra_collectives.errors import InputError
from chakra_collectives.processes import is_running

SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("space", pa.string()),
        ("num_npus", pa.int64()),
        ("topology", pa.string()),
        ("candidate", pa.string()),
        ("topology_name", pa.string()),
        ("family", pa.string()),
        ("algorithm", pa.string()),
        ("algorithm_used", pa.string()),
        ("chunks_per_npu", pa.int64()),
        ("workload", pa.string()),
        ("status", pa.string()),
        ("error", pa.string()),
        ("iteration_ns", pa.float64()),
        ("exposed_comm_ns", pa.float64()),
        ("exposed_comm_mean_ns", pa.float64()),
        ("comm_ns", pa.float64()),
        ("collectives", pa.string()),
        ("diameter", pa.int64()),
        ("num_links", pa.int64()),
        ("num_switches", pa.int64()),
        ("ports_per_npu", pa.float64()),
        ("cost", pa.float64()),
        ("bandwidth_scale", pa.float64()),
        ("probe_collective", pa.string()),
        ("probe_small_bytes", pa.int64()),
        ("probe_large_bytes", pa.int64()),
        ("probe_small_ns", pa.float64()),
        ("probe_large_ns", pa.float64()),
        ("verified", pa.bool_()),
        ("synthesis_s", pa.float64()),
        ("verify_s", pa.float64()),
        ("probe_s", pa.float64()),
        ("replay_s", pa.float64()),
    ]
)
"""Columns of every row; ``collectives`` is JSON (every collective call: type, size, members,
algorithm, time_ns). Times in ns, except the ``*_s`` columns (seconds of work)."""

TIMING_COLUMNS = ("synthesis_s", "verify_s", "probe_s", "replay_s")
"""Columns that measure the machine, not the design: the only ones that differ between executors."""


class ResultTable:
    """A results folder (see the module docstring)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._swept = False
        if self.path.exists() and not self.path.is_dir():
            raise InputError("a results table is a folder of Parquet parts, but this is a file", path=self.path)

    def _parts(self) -> list[Path]:
        return sorted(self.path.glob("part-*.parquet")) if self.path.is_dir() else []

    def keys(self) -> set[str]:
        """Keys of every row already in the table."""
        return {row["key"] for row in self._read(["key"])}

    def rows(self, keys: set[str] | None = None) -> list[dict[str, Any]]:
        """Every row (those of ``keys`` only, when given)."""
        rows = self._read(None)
        return rows if keys is None else [r for r in rows if r["key"] in keys]

    def _read(self, columns: list[str] | None) -> list[dict[str, Any]]:
        parts = self._parts()
        if not parts:
            return []
        try:
            return ds.dataset([str(p) for p in parts], schema=SCHEMA, format="parquet").to_table(columns=columns).to_pylist()
        except (pa.ArrowInvalid, OSError) as error:
            raise InputError(f"cannot read the results table: {error}", path=self.path) from None

    def append(self, row: dict[str, Any]) -> None:
        """Write one row as its own part, atomically (a row with the same key is replaced)."""
        self.path.mkdir(parents=True, exist_ok=True)
        table = pa.Table.from_pylist([{name: row.get(name) for name in SCHEMA.names}], schema=SCHEMA)
        final = self.path / f"part-{row['key']}.parquet"
        staging = self.path / f".part-{row['key']}.{os.getpid()}.tmp"
        if not self._swept:
            self._remove_stale_staging()
        try:
            pq.write_table(table, staging)
            os.replace(staging, final)
        except BaseException:  # interrupted (Ctrl-C) or failed: no half-written part stays behind
            staging.unlink(missing_ok=True)
            raise

    def _remove_stale_staging(self) -> None:
        """Remove the staging files of writers that no longer run (a killed search): the
        table is written by one search at a time, and those files never became rows."""
        self._swept = True
        for path in self.path.glob(".part-*.tmp"):
            pid = path.name.rsplit(".", 2)[-2]
            if pid.isdigit() and not is_running(int(pid)):
                path.unlink(missing_ok=True)


__all__ = ["ResultTable", "SCHEMA", "TIMING_COLUMNS"]
