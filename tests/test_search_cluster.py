"""chakra-coll search on real Dask clusters: the README's worked example on a LocalCluster of 2 workers
(identical to the in-process run), and a worker killed mid-search followed by a resume."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chakra_collectives.search import InProcess, ResultTable, load_space, plan_search, run_search
from chakra_collectives.search.report import groups
from chakra_collectives.search.table import TIMING_COLUMNS

from conftest import REPO

BIN = Path(sys.executable).parent
DASK = [sys.executable, "-m", "dask"]
"""This interpreter's ``dask`` command: the ``dask`` script of a copied virtualenv may name another
interpreter on its first line, whose workers would import another checkout."""


def _design_rows(table: ResultTable) -> dict[str, dict]:
    """Rows by key without the columns that time the machine."""
    return {r["key"]: {k: v for k, v in r.items() if k not in TIMING_COLUMNS} for r in table.rows()}


def _in_process(space_file: Path, tmp_path: Path, **overrides) -> tuple[dict[str, dict], set[str]]:
    space = load_space(space_file, overrides=overrides)
    plan = plan_search(space, tmp_path / "reference-workloads")
    table = ResultTable(tmp_path / "reference.parquet")
    run_search(plan, InProcess(), table)
    return _design_rows(table), set(plan.by_key())


def _readme_command() -> list[str]:
    """The worked example's command, as README gives it."""
    text = (REPO / "README.md").read_text()
    line = next(l for l in text.splitlines() if l.startswith("chakra-coll search docs/search/fabric_for_dp.yaml"))
    return shlex.split(line.split("#")[0])[1:]


def test_the_worked_example_on_a_local_cluster_equals_the_in_process_run(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # the README's paths are relative to the repository
    args = _readme_command()
    result = cli(*args, "--npus", "16", "--workers", "2", "-o", tmp_path / "out")  # a small version: 16 NPUs
    assert result.exit_code == 0, result.output
    assert "local Dask cluster, 2 worker process(es)" in " ".join(result.stdout.split())
    cluster = _design_rows(ResultTable(tmp_path / "out" / "results.parquet"))
    reference, keys = _in_process(REPO / args[1], tmp_path, npus=[16])
    assert set(cluster) == set(reference) == keys and len(keys) == 10  # 4 fabrics x 3 producers, less BFB on the 2 fat-trees (not applicable)
    assert cluster == reference  # identical whatever the executor

    # what README says the numbers show (16 NPUs): TopoOpt's qualitative result
    (group,) = groups(list(cluster.values()))
    best = {}
    for row in group.ranked:
        best.setdefault(row["candidate"], row)
    totient, torus = best["totientperms:{npus},degree=4"], best["torus2d:{grid2}"]
    same_cost, same_ports = best["fat-tree, same cost"], best["fat-tree, same ports"]
    assert totient["cost"] == torus["cost"] == same_cost["cost"] == same_ports["cost"] / 2
    assert same_cost["iteration_ns"] > 1.5 * totient["iteration_ns"]  # the cost-equivalent fat-tree is far behind
    assert totient["iteration_ns"] <= same_ports["iteration_ns"]  # and the direct-connect fabric matches the ideal switch
    assert abs(torus["iteration_ns"] - totient["iteration_ns"]) < 0.01 * totient["iteration_ns"]
    assert totient["diameter"] < torus["diameter"]
    ring = {r["candidate"]: r for r in group.ranked if r["algorithm"] == "ring"}
    assert ring["totientperms:{npus},degree=4"]["iteration_ns"] < ring["torus2d:{grid2}"]["iteration_ns"] / 1.5


def _wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _worker(scheduler_file: Path, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [*DASK, "worker", "--scheduler-file", str(scheduler_file), "--nthreads", "1", "--no-nanny", "--no-dashboard"],
        stdout=subprocess.DEVNULL, stderr=log.open("ab"),
    )


RESUME_SPACE = """\
name: resume
npus: 32
topologies:
  - "torus2d:{grid2}"
  - "totientperms:{npus},degree=4"
  - spec: "circulant:{npus},strides=1,{s}"
    vary: {s: [3, 5, 7]}
algorithms: [tacos, bfb, ring]
workload: {kind: data-parallel, layers: 4, gradient: 8MiB}
"""


def test_a_killed_worker_then_a_resume_completes_the_table_without_recomputing(tmp_path):
    space_file = tmp_path / "space.yaml"
    space_file.write_text(RESUME_SPACE)
    scheduler_file, log = tmp_path / "scheduler.json", tmp_path / "dask.log"
    out = tmp_path / "out"
    table = ResultTable(out / "results.parquet")
    processes: list[subprocess.Popen] = []
    env = {**os.environ, "COLUMNS": "80"}
    try:
        processes.append(subprocess.Popen(
            [*DASK, "scheduler", "--scheduler-file", str(scheduler_file), "--port", "0", "--no-dashboard"],
            stdout=subprocess.DEVNULL, stderr=log.open("ab"),
        ))
        _wait_for(scheduler_file.exists, 60, "the scheduler")
        address = json.loads(scheduler_file.read_text())["address"]
        first_worker = _worker(scheduler_file, log)
        processes.append(first_worker)
        command = [str(BIN / "chakra-coll"), "search", str(space_file), "--scheduler", address, "-o", str(out), "--no-plots", "--no-winner"]
        search = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
        processes.append(search)
        _wait_for(lambda: len(table.keys()) >= 2, 180, "the first rows")

        first_worker.kill()  # the worker dies mid-search; its running task is lost with it
        first_worker.wait(timeout=30)
        done = len(table.keys())
        second_worker = _worker(scheduler_file, log)
        processes.append(second_worker)
        _wait_for(lambda: len(table.keys()) > done, 180, "the search to go on on the new worker")  # Dask reschedules

        search.send_signal(signal.SIGINT)  # then the user interrupts the search
        stdout, stderr = search.communicate(timeout=60)
        assert search.returncode == 130, stderr
        assert "run the same command again to resume" in stderr
        interrupted = len(table.keys())
        total = 5 * 3  # topologies x algorithms
        assert 2 < interrupted < total

        resumed = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
        assert resumed.returncode == 0, resumed.stderr
        match = re.search(r"(\d+) already in", resumed.stdout)
        assert match is not None and int(match.group(1)) >= interrupted, resumed.stdout
        assert f"ran {total - int(match.group(1))} evaluation(s)" in resumed.stdout
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=30)
    assert not list(table.path.glob(".part-*"))  # only whole rows, even after the kill and the interrupt
    reference, keys = _in_process(space_file, tmp_path)
    assert _design_rows(table) == reference and set(reference) == keys  # every evaluation once, as in one process


def _tacos_with_trials_in_processes() -> tuple[bool, float]:
    """TACOS on a small ring with every matching sent to other processes (as at 512 NPUs and
    up): whether this process is daemonic, and the schedule's time and seed."""
    import multiprocessing

    from chakra_collectives.synth import tacos as tacos_module
    from chakra_collectives.topology import load_topology

    tacos_module.PARALLEL_PAIRS = 1  # the multi-process path for any size
    os.cpu_count = lambda: 4  # and for any machine
    result = tacos_module.tacos(load_topology("ring:6"), "all-gather", 6 * 2**20, trials=3)
    return multiprocessing.current_process().daemon, (result.schedule_ns, result.seed)


def test_tacos_trials_inside_a_dask_worker_run_there(monkeypatch):
    """Issue 27: a Dask worker process is daemonic and may not start processes; TACOS's trials
    run in the worker itself, one after another, with the schedule the processes would give."""
    from chakra_collectives.search.executors import DaskExecutor

    with DaskExecutor(workers=1) as executor:
        daemonic, in_worker = executor.client.submit(_tacos_with_trials_in_processes, pure=False).result(timeout=300)
    assert daemonic  # the case of the issue: "daemonic processes are not allowed to have children"
    from chakra_collectives.synth import tacos as tacos_module
    from chakra_collectives.topology import load_topology

    monkeypatch.setattr(tacos_module, "PARALLEL_PAIRS", 1)
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    here = tacos_module.tacos(load_topology("ring:6"), "all-gather", 6 * 2**20, trials=3)  # here, in processes
    assert in_worker == (here.schedule_ns, here.seed)


TINY_SPACE = """\
name: tiny
npus: 16
topologies: ["torus2d:{grid2}", "ring:{npus}"]
algorithms: [tacos, bfb, ring]
workload: {kind: data-parallel, layers: 2, gradient: 4MiB}
"""


def _readme_cluster_commands() -> tuple[list[str], list[str]]:
    """README's 'on several machines' commands: the scheduler's and a worker's (HOST:PORT left to fill in)."""
    lines = [l.split("#")[0].strip() for l in (REPO / "README.md").read_text().splitlines()]
    scheduler = next(l for l in lines if l.startswith("dask scheduler"))
    worker = next(l for l in lines if l.startswith("dask worker tcp://HOST:8786"))
    return shlex.split(scheduler), shlex.split(worker)


def test_the_readme_cluster_commands_run_a_search_with_the_in_process_rows(tmp_path):
    """README's way to use several machines, on this one: `dask scheduler`, then `dask worker
    ADDRESS --nthreads 1` as README gives it (a nanny's daemonic worker process), then `search
    --scheduler ADDRESS`: every row, identical to the in-process run's."""
    scheduler_command, worker_command = _readme_cluster_commands()
    space_file = tmp_path / "space.yaml"
    space_file.write_text(TINY_SPACE)
    scheduler_file, log, out = tmp_path / "scheduler.json", tmp_path / "dask.log", tmp_path / "out"
    processes: list[subprocess.Popen] = []
    try:
        # a free port and a file that says it, so that parallel test runs do not collide on 8786
        processes.append(subprocess.Popen(
            [*DASK, *scheduler_command[1:], "--scheduler-file", str(scheduler_file), "--port", "0", "--no-dashboard"],
            stdout=subprocess.DEVNULL, stderr=log.open("ab"),
        ))
        _wait_for(scheduler_file.exists, 60, "the scheduler")
        address = json.loads(scheduler_file.read_text())["address"]
        worker = [address if part == "tcp://HOST:8786" else part for part in worker_command[1:]]
        processes.append(subprocess.Popen([*DASK, *worker, "--no-dashboard"], stdout=subprocess.DEVNULL, stderr=log.open("ab")))
        done = subprocess.run(
            [str(BIN / "chakra-coll"), "search", str(space_file), "--scheduler", address, "-o", str(out), "--no-plots", "--no-winner", "--json"],
            capture_output=True, text=True, timeout=600,
        )
    finally:
        for process in processes:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=30)
    assert done.returncode == 0, done.stderr
    run = json.loads(done.stdout)["run"]
    assert run["executor"] == f"scheduler {address}" and run["workers"] == 1 and not run["lost"]
    rows = _design_rows(ResultTable(out / "results.parquet"))
    reference, keys = _in_process(space_file, tmp_path)
    assert set(rows) == keys and len(keys) == 6  # 2 direct-connect fabrics x 3 producers
    assert all(row["status"] == "ok" for row in rows.values())
    assert rows == reference


def test_tasks_on_a_dask_worker_plan_within_its_memory_limit():
    """A worker's tasks are held to WORKER_MEMORY_SHARE of the memory limit its nanny enforces
    (the scheduler reports it), not to the machine's; outside a worker nothing changes."""
    from chakra_collectives.resources import memory_limit
    from chakra_collectives.search.executors import WORKER_MEMORY_SHARE, DaskExecutor, worker_memory_limit

    def limit_in_task() -> tuple[int | None, int, str]:
        from chakra_collectives.search.executors import within_worker_memory

        with within_worker_memory():
            inside = memory_limit()
        return worker_memory_limit(), inside.nbytes, inside.source

    assert worker_memory_limit() is None
    with DaskExecutor(workers=1) as executor:
        (nanny_limit,) = [w["memory_limit"] for w in executor.client.scheduler_info(n_workers=-1)["workers"].values()]
        share, inside, source = executor.client.submit(limit_in_task, pure=False).result(timeout=120)
    assert nanny_limit > 0 and share == int(nanny_limit * WORKER_MEMORY_SHARE)
    assert inside <= share and (inside < share or "Dask worker" in source)


def _column_mapped_apart() -> tuple[str | None, int]:
    """In a worker: Dask's malloc setting, and the bytes of a fresh 16 MiB column mapped apart from the heap
    (a task's thread allocates from an arena of heaps up to 64 MiB: larger columns are always mapped apart)."""
    import ctypes

    import numpy as np

    class Mallinfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]

    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = Mallinfo2
    column = np.ones(2**21)  # 16 MiB
    mapped = libc.mallinfo2().hblkhd
    del column
    return os.environ.get("MALLOC_TRIM_THRESHOLD_"), mapped


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_workers_keep_freed_columns_for_reuse_despite_dasks_malloc_setting():
    """Dask's nanny starts workers with MALLOC_TRIM_THRESHOLD_=65536, under which every large column
    is mapped on its own and faulted in afresh; the search's worker plugin puts it back in the heap
    (reused when freed), as the CLI does in its own process."""
    from chakra_collectives.search.executors import DaskExecutor

    try:
        with DaskExecutor(workers=1) as executor:
            trim, mapped = executor.client.submit(_column_mapped_apart, pure=False).result(timeout=120)
    except AttributeError:
        pytest.skip("not glibc 2.33+: no mallinfo2")
    assert trim == "65536"  # Dask's setting is there: alone it maps every column above 128 KiB apart
    assert mapped < 2**24
