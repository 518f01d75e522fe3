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

    python bench/bench_search.py [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from chakra_collectives.search import DaskExecutor, InProcess, ResultTable, load_space, plan_search, run_search
from chakra_collectives.search.table import TIMING_COLUMNS

HERE = Path(__file__).resolve().parent
SPACE = HERE / "search_space.yaml"


def _load() -> str:
    return "/".join(f"{v:.1f}" for v in os.getloadavg())


def _rows(table: ResultTable) -> dict:
    return {r["key"]: {k: v for k, v in r.items() if k not in TIMING_COLUMNS} for r in table.rows()}


def _one(plan, make_executor, folder: Path, label: str) -> dict:
    load_before = _load()
    started = time.perf_counter()
    executor = make_executor()
    startup = time.perf_counter() - started
    table = ResultTable(folder / f"{label}.parquet")
    with executor:
        if isinstance(executor, DaskExecutor):
            executor.client.get_task_stream()  # start recording
        run = run_search(plan, executor, table)
        overhead = None
        if isinstance(executor, DaskExecutor):
            stream = executor.client.get_task_stream()
            compute = sum(s["stop"] - s["start"] for t in stream for s in t["startstops"] if s["action"] == "compute")
            other = sum(s["stop"] - s["start"] for t in stream for s in t["startstops"] if s["action"] != "compute")
            overhead = other / compute if compute else None
    assert run.evaluated == len(plan.evaluations) and not run.lost, run
    return {"label": label, "seconds": run.seconds, "startup": startup, "load": f"{load_before} -> {_load()}",
            "worker_overhead": overhead, "rows": _rows(table), "failed": sum(r["status"] != "ok" for r in table.rows())}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="runs of each configuration (medians are quoted)")
    args = parser.parse_args(argv)
    space = load_space(SPACE)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        started = time.perf_counter()
        plan = plan_search(space, folder / "workloads")
        plan_s = time.perf_counter() - started
        topologies = len(plan.topologies)
        print(f"space {space.name}: {topologies} topologies x {len(space.algorithms)} algorithms x {len(plan.workloads)} workload "
              f"= {len(plan.evaluations)} evaluations, {plan.synthesis_count()} syntheses; {os.cpu_count()} cores; planning {plan_s:.1f} s")
        runs: dict[str, list[dict]] = {"2 workers": [], "1 worker": [], "in process": []}
        makers = {"2 workers": lambda: DaskExecutor(workers=2), "1 worker": lambda: DaskExecutor(workers=1), "in process": InProcess}
        for index in range(args.repeat):
            for label, make in makers.items():  # interleaved, so a change of load touches every configuration
                result = _one(plan, make, folder, f"{label.replace(' ', '-')}-{index}")
                runs[label].append(result)
                extra = "" if result["worker_overhead"] is None else f", workers busy {result['worker_overhead']:.2%} outside compute"
                print(f"  {label:10s} run {index + 1}: {result['seconds']:6.1f} s (start-up {result['startup']:.1f} s; load {result['load']}{extra})",
                      flush=True)
        median = {label: statistics.median(r["seconds"] for r in results) for label, results in runs.items()}
        print(f"median search time: 2 workers {median['2 workers']:.1f} s (target <= 120 s), 1 worker {median['1 worker']:.1f} s, "
              f"in process {median['in process']:.1f} s")
        print(f"speedup 2 workers / 1 worker: {median['1 worker'] / median['2 workers']:.2f}x (target >= 1.7x)")
        per_run = [b["seconds"] / a["seconds"] for a, b in zip(runs["in process"], runs["1 worker"])]
        print(f"engine overhead (1-worker cluster vs in process): {statistics.median(per_run) - 1:+.1%} of the work (target <= 5%); "
              f"per task outside compute: {statistics.median(r['worker_overhead'] for r in runs['1 worker']):.2%}")
        reference = runs["in process"][0]["rows"]
        identical = all(r["rows"] == reference for results in runs.values() for r in results)
        print(f"identical results in every run: {'yes' if identical else 'NO'}; failed evaluations: {runs['in process'][0]['failed']}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    raise SystemExit(main(sys.argv[1:]))
