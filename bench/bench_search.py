"""chakra-coll search at scale: 64 NPUs, 36 topology candidates x 3 algorithms x a 6-layer data-parallel iteration.

The space is ``bench/search_space.yaml`` (108 evaluations, 108 syntheses: TACOS, BFB and the ring
on 36 direct-connect fabrics). The same plan runs, each time into a fresh results table:

* on a ``LocalCluster`` of 2 single-threaded worker processes (what ``chakra-coll search``
  starts on this 2-core machine),
* on a ``LocalCluster`` of 1 worker,
* in this process (``--workers 1``: no engine at all).

Printed: wall time of each search (the cluster's start-up apart), the speedup of 2 workers over
1, the engine's overhead -- the 1-worker cluster against the in-process run, and from Dask's task
stream the time workers spent on anything but computing (fetching inputs, deserializing) per
unit of compute -- the machine's load average around each run, and whether the three tables
hold identical results. The machine is shared: quote medians (``--repeat N``) with the load.

CPU time says what a quiet machine would do when the machine is not quiet: the CPU seconds of
this process (client, and the local cluster's scheduler, which runs in it) and of every worker
process during each search. A worker is one thread, so on idle cores its wall time is its CPU
time: the 2-worker search would take about its busiest worker's CPU seconds (or half of all the
CPU seconds, if more), and the engine's overhead is the CPU the cluster spends beyond the
in-process run's.

    python bench/bench_search.py [--repeat N]

At scale, ``--space bench/search_space_1024.yaml --runs "2 workers,scheduler"`` (1,024 NPUs: 8
fabrics x TACOS, BFB, the ring x a 2-layer data-parallel step = 24 evaluations): the local
cluster, then the same plan through ``--scheduler`` of a ``dask scheduler`` and one ``dask
worker ADDRESS --nthreads 1`` per core started apart, as README gives them (a nanny's worker
process each: daemonic, so TACOS's trials run in the worker). Also printed: each worker's peak
RSS, per algorithm the seconds its rows spent synthesizing, verifying, timing alone at the
probe sizes and replaying (the slowest row's four figures beside), the slowest rows, every failed or lost row,
and whether the runs' rows are identical (to the first run's when there is no in-process run).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from chakra_collectives.search import DaskExecutor, InProcess, ResultTable, load_space, plan_search, run_search
from chakra_collectives.search.table import TIMING_COLUMNS

HERE = Path(__file__).resolve().parent
SPACE = HERE / "search_space.yaml"
DASK = [sys.executable, "-m", "dask"]
"""This interpreter's ``dask`` command (a copied virtualenv's ``dask`` script may name another interpreter,
whose workers would import another checkout)."""
RUNS = ("2 workers", "1 worker", "in process", "scheduler")


class SeparateCluster(DaskExecutor):
    """``dask scheduler`` and ``workers`` x ``dask worker ADDRESS --nthreads 1`` started as their
    own processes (README's commands for several machines), used through their address."""

    def __init__(self, workers: int, folder: Path) -> None:
        scheduler_file = folder / "scheduler.json"
        scheduler_file.unlink(missing_ok=True)
        self.processes = [subprocess.Popen([*DASK, "scheduler", "--scheduler-file", scheduler_file, "--port", "0", "--no-dashboard"],
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
        deadline = time.monotonic() + 60
        while not scheduler_file.exists():
            if time.monotonic() > deadline:
                self._stop()
                raise RuntimeError("the scheduler did not start within 60 s")
            time.sleep(0.1)
        address = json.loads(scheduler_file.read_text())["address"]
        self.processes += [subprocess.Popen([*DASK, "worker", address, "--nthreads", "1", "--no-dashboard"],
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(workers)]
        super().__init__(address=address)
        self.client.wait_for_workers(workers, timeout=120)

    def close(self) -> None:
        super().close()
        self._stop()

    def _stop(self) -> None:
        for process in self.processes:
            process.terminate()
            process.wait(timeout=60)


def _load() -> str:
    return "/".join(f"{v:.1f}" for v in os.getloadavg())


def _cpu_s() -> float:
    """CPU seconds of the calling process so far (user + system)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _peak_mib() -> float:
    """Peak RSS of the calling process so far (MiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _same(a: dict, b: dict) -> list[str]:
    """Columns where two result tables differ (NaN equals NaN), as 'column (topology / algorithm)'."""
    found = []
    for key in a.keys() | b.keys():
        left, right = a.get(key, {}), b.get(key, {})
        for column in left.keys() | right.keys():
            x, y = left.get(column), right.get(column)
            if x != y and not (isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y)):
                found.append(f"{column} ({left.get('topology')} / {left.get('algorithm')}: {x!r} vs {y!r})")
    return sorted(found)


def _rows(table: ResultTable) -> dict:
    return {r["key"]: {k: v for k, v in r.items() if k not in TIMING_COLUMNS} for r in table.rows()}


def _one(plan, make_executor, folder: Path, label: str) -> dict:
    load_before = _load()
    started = time.perf_counter()
    executor = make_executor()
    startup = time.perf_counter() - started
    table = ResultTable(folder / f"{label}.parquet")
    with executor:
        workers_before = {}
        if isinstance(executor, DaskExecutor):
            executor.client.get_task_stream()  # start recording
            workers_before = executor.client.run(_cpu_s)
        here_before = _cpu_s()
        run = run_search(plan, executor, table)
        here_cpu = _cpu_s() - here_before
        workers_cpu, workers_peak = [], []
        overhead = None
        if isinstance(executor, DaskExecutor):
            workers_peak = sorted(executor.client.run(_peak_mib).values(), reverse=True)
            after = executor.client.run(_cpu_s)
            workers_cpu = sorted((after[w] - workers_before[w] for w in after if w in workers_before), reverse=True)
            stream = executor.client.get_task_stream()
            compute = sum(s["stop"] - s["start"] for t in stream for s in t["startstops"] if s["action"] == "compute")
            other = sum(s["stop"] - s["start"] for t in stream for s in t["startstops"] if s["action"] != "compute")
            overhead = other / compute if compute else None
    assert run.evaluated + len(run.lost) == len(plan.evaluations), run
    return {"label": label, "seconds": run.seconds, "startup": startup, "load": f"{load_before} -> {_load()}",
            "here_cpu": here_cpu, "workers_cpu": workers_cpu, "workers_peak": workers_peak, "cpu": here_cpu + sum(workers_cpu),
            "worker_overhead": overhead, "rows": _rows(table), "failed": sum(r["status"] != "ok" for r in table.rows()) + len(run.lost),
            "phases": _phases(table) + [f"lost: {line}" for line in run.lost]}


def _phases(table: ResultTable) -> list[str]:
    """Per algorithm: the seconds its rows spent synthesizing, verifying, probing and replaying (summed), and its slowest row."""
    lines = []
    rows = table.rows()
    for algorithm in sorted({r["algorithm"] for r in rows}):
        mine = [r for r in rows if r["algorithm"] == algorithm]
        total = {c: sum(r[c] or 0.0 for r in mine) for c in TIMING_COLUMNS}
        slowest = max(mine, key=lambda r: sum(r[c] or 0.0 for c in TIMING_COLUMNS))
        lines.append(f"{algorithm:8s} {len(mine)} rows: " + ", ".join(f"{c[:-2]} {v:.0f} s" for c, v in total.items())
                     + f"; slowest {slowest['topology']} " + "/".join(f"{slowest[c] or 0.0:.0f}" for c in TIMING_COLUMNS) + " s")
    by_total = sorted(rows, key=lambda r: -sum(r[c] or 0.0 for c in TIMING_COLUMNS))
    lines.append("slowest rows (" + "/".join(c[:-2] for c in TIMING_COLUMNS) + " s): " + "; ".join(
        f"{r['topology']} / {r['algorithm']} " + "/".join(f"{r[c] or 0.0:.0f}" for c in TIMING_COLUMNS) for r in by_total[:SLOWEST]))
    failed = [f"{r['topology']} / {r['algorithm']}: {r['error']}" for r in rows if r["status"] != "ok"]
    lines += [f"failed: {line}" for line in failed]
    return lines


SLOWEST = 6
"""Rows named in the slowest-rows line."""


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="runs of each configuration (medians are quoted)")
    parser.add_argument("--space", type=Path, default=SPACE, help="the design space (default: bench/search_space.yaml, 64 NPUs)")
    parser.add_argument("--runs", default="2 workers,1 worker,in process",
                        help=f"configurations, comma-separated, from: {', '.join(RUNS)} (scheduler: a dask scheduler + 2 dask workers started apart)")
    args = parser.parse_args(argv)
    chosen = [label.strip() for label in args.runs.split(",")]
    unknown = [label for label in chosen if label not in RUNS]
    if unknown:
        parser.error(f"unknown run(s) {unknown}; valid: {', '.join(RUNS)}")
    space = load_space(args.space)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        started = time.perf_counter()
        plan = plan_search(space, folder / "workloads")
        plan_s = time.perf_counter() - started
        topologies = len(plan.topologies)
        print(f"space {space.name}: {topologies} topologies x {len(space.algorithms)} algorithms x {len(plan.workloads)} workload "
              f"= {len(plan.evaluations)} evaluations, {plan.synthesis_count()} syntheses; {os.cpu_count()} cores; planning {plan_s:.1f} s")
        makers = {"2 workers": lambda: DaskExecutor(workers=2), "1 worker": lambda: DaskExecutor(workers=1), "in process": InProcess,
                  "scheduler": lambda: SeparateCluster(2, folder)}
        runs: dict[str, list[dict]] = {label: [] for label in chosen}
        for index in range(args.repeat):
            for label in chosen:  # interleaved, so a change of load touches every configuration
                result = _one(plan, makers[label], folder, f"{label.replace(' ', '-')}-{index}")
                runs[label].append(result)
                extra = "" if result["worker_overhead"] is None else f", workers busy {result['worker_overhead']:.2%} outside compute"
                workers = " + ".join(f"{c:.1f}" for c in result["workers_cpu"])
                cpu = f"CPU {result['here_cpu']:.1f} s here" + (f" + workers {workers} s" if workers else "")
                peaks = "" if not result["workers_peak"] else "; worker peak RSS " + " / ".join(f"{p:.0f}" for p in result["workers_peak"]) + " MiB"
                print(f"  {label:10s} run {index + 1}: {result['seconds']:6.1f} s (start-up {result['startup']:.1f} s; load {result['load']}{extra}; "
                      f"{cpu}{peaks}; {result['failed']} failed)", flush=True)
                for line in result["phases"]:
                    print(f"    {line}", flush=True)
        median = {label: statistics.median(r["seconds"] for r in results) for label, results in runs.items()}
        cpu = {label: statistics.median(r["cpu"] for r in results) for label, results in runs.items()}
        print("median search time: " + ", ".join(f"{label} {median[label]:.1f} s (CPU {cpu[label]:.1f} s)" for label in chosen))
        if {"2 workers", "1 worker"} <= set(chosen):
            print(f"speedup 2 workers / 1 worker: {median['1 worker'] / median['2 workers']:.2f}x (target >= 1.7x)")
            quiet_2 = statistics.median(max(max(r["workers_cpu"]), r["cpu"] / 2) for r in runs["2 workers"])
            quiet_1 = statistics.median(max(r["workers_cpu"][0], r["here_cpu"]) for r in runs["1 worker"])
            print(f"on 2 idle cores (wall = busiest worker's CPU time): 2 workers ~{quiet_2:.1f} s, 1 worker ~{quiet_1:.1f} s, "
                  f"speedup ~{quiet_1 / quiet_2:.2f}x")
        elif "2 workers" in chosen:
            quiet_2 = statistics.median(max(max(r["workers_cpu"]), r["cpu"] / 2) for r in runs["2 workers"])
            print(f"on 2 idle cores (wall = busiest worker's CPU time): 2 workers ~{quiet_2:.1f} s")
        if {"1 worker", "in process"} <= set(chosen):
            per_run = [b["seconds"] / a["seconds"] for a, b in zip(runs["in process"], runs["1 worker"])]
            print(f"engine overhead (1-worker cluster vs in process): {statistics.median(per_run) - 1:+.1%} of the work (target <= 5%); "
                  f"per task outside compute: {statistics.median(r['worker_overhead'] for r in runs['1 worker']):.2%}; CPU "
                  f"{cpu['1 worker'] / cpu['in process'] - 1:+.1%}")
        first = runs["in process" if "in process" in chosen else chosen[0]][0]
        differences = sorted({d for results in runs.values() for r in results for d in _same(first["rows"], r["rows"])})
        failed = max(r["failed"] for results in runs.values() for r in results)
        print(f"identical results in every run: {'yes' if not differences else 'NO'}; failed evaluations: {failed}")
        for difference in differences[:10]:
            print(f"  differs: {difference}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    raise SystemExit(main(sys.argv[1:]))
