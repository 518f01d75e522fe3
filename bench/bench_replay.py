"""Replay throughput: a ring all-gather workload (one COMM_COLL per rank) on a ring of N NPUs.

The collective's ring algorithm has 2N(N-1) + N nodes, so N = 1024 replays ~2.1M ET nodes.
"replay" times :func:`chakra_collectives.replay.replay` given the parsed workload and the
algorithm (expansion + simulation + statistics); nodes/s counts every simulated task
(workload nodes + the algorithm's nodes). Peak memory is the maximum RSS of a fresh process
that builds the ring algorithm and replays the largest case (as ``chakra-coll replay`` with
``--default-algorithm ring`` does), and the traced peak of ``replay()`` alone. Separately, for the largest case: building the ring algorithm
in Python and reading it from ET files (what ``--default-algorithm ring`` and
``--collective`` add on top of the replay).

Targets (issue 5): >= 250k nodes/s at ~2M nodes, peak memory <= 2 GB.

``--json-ranks N ...`` times ``chakra-coll replay`` of the N-rank ring all-reduce microbenchmark
(1 MiB; ``workload microbenchmark`` + ``synth -a ring``) with ``--network-model astra-sim``, as
text and with ``--json`` (whose timeline records every hop), each in a fresh process: median
wall time and max RSS. A third line forces the event engine with recorded hops -- what
``--json`` ran before it kept the level-by-level path. Target (issue 28): ``--json`` <= 1.1x text.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from timing import median_seconds, peak_memory_mb

from chakra_collectives.converters.chakra_et import read_algorithm, read_workload, single_collective_workload, write_algorithm
from chakra_collectives.ir import Collective
from chakra_collectives.replay import replay
from chakra_collectives.synth.baselines import ring
from chakra_collectives.topology import ring as ring_topology

SIZES = [72, 160, 320, 512, 724, 1024]

_CHILD = """
import resource, sys, tempfile, pathlib
from chakra_collectives.ir import Collective
from chakra_collectives.converters.chakra_et import read_workload, single_collective_workload
from chakra_collectives.replay import replay
from chakra_collectives.synth.baselines import ring
from chakra_collectives.topology import ring as ring_topology
n = int(sys.argv[1])
tmp = pathlib.Path(tempfile.mkdtemp())
single_collective_workload(tmp / "w", "all-gather", n, n * 2**20)
algo = ring(Collective.ALL_GATHER, n, size_bytes=n * 2**20)
result = replay(read_workload(tmp / "w"), ring_topology(n), algorithms={Collective.ALL_GATHER: algo})
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""


def _inputs(n: int, tmp: Path):
    prefix = tmp / f"w{n}"
    single_collective_workload(prefix, "all-gather", n, n * 2**20)
    return read_workload(prefix), ring(Collective.ALL_GATHER, n, size_bytes=n * 2**20), ring_topology(n)


def _case(n: int, repeat: int, tmp: Path) -> tuple[int, float, float]:
    workload, algo, topo = _inputs(n, tmp)
    holder = {}

    def run() -> None:
        holder["result"] = replay(workload, topo, algorithms={Collective.ALL_GATHER: algo})

    seconds, _ = median_seconds(run, repeat=repeat, warmup=0 if n >= 512 else 1)
    result = holder["result"]
    return result.num_tasks, seconds, result.total_ns


_CLI_CHILD = """
import resource, sys
if sys.argv[1] == "event-engine":
    import chakra_collectives.network.engine as engine
    engine.contention_free_times = lambda *args, **kwargs: None
sys.argv = ["chakra-coll", *sys.argv[2:]]
from chakra_collectives.cli import main
try:
    main()
except SystemExit:
    pass
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, file=sys.stderr)
"""


def _cli(tmp: Path, engine: str, args: list[str]) -> tuple[float, float]:
    """Wall seconds and max RSS (MiB) of one ``chakra-coll ARGS`` in a fresh process."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _CLI_CHILD, engine, *args], capture_output=True, text=True, check=True, cwd=tmp)
    return time.perf_counter() - started, float(done.stderr.strip().splitlines()[-1])


def replay_json_cost(n: int, repeat: int, tmp: Path) -> None:
    """Text against ``--json`` replays of the n-rank ring all-reduce (see the module docstring)."""
    prefix, algo = tmp / f"ar{n}", tmp / f"ring{n}"
    _cli(tmp, "-", ["workload", "microbenchmark", "-c", "all-reduce", "-s", "1MiB", "-n", str(n), "-o", str(prefix)])
    _cli(tmp, "-", ["synth", "-t", f"ring:{n}", "-a", "ring", "-c", "all-reduce", "-s", "1MiB", "-o", str(algo)])
    base = ["replay", str(prefix), "-t", f"ring:{n}", "-a", f"all-reduce={algo}", "--network-model", "astra-sim"]
    runs = {"text": ("-", base), "--json": ("-", base + ["--json"]), "--json, event engine (before)": ("event-engine", base + ["--json"])}
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
    for _ in range(repeat):  # interleaved, so that load changes hit every variant alike
        for name, (engine, args) in runs.items():
            samples[name].append(_cli(tmp, engine, args))
    text_s = statistics.median(s for s, _ in samples["text"])
    for name, found in samples.items():
        seconds = statistics.median(s for s, _ in found)
        print(f"{n:>6} {name:<31} {seconds:>8.2f} s {seconds / text_s:>6.2f}x {max(m for _, m in found):>9,.0f} MiB", flush=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=SIZES, help="ring sizes N")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json-ranks", type=int, nargs="*", default=[], help="also time replay with and without --json at these rank counts")
    args = parser.parse_args(argv)
    if args.json_ranks:
        print(f"{'ranks':>6} {'replay (ring all-reduce, astra-sim)':<31} {'median':>10} {'ratio':>7} {'max RSS':>13}")
        with tempfile.TemporaryDirectory() as tmp:
            for n in args.json_ranks:
                replay_json_cost(n, args.repeat, Path(tmp))
        if not args.sizes:
            return 0
    print(f"{'NPUs':>6} {'nodes':>10} {'replay s (median)':>18} {'nodes/s':>10} {'simulated time':>16}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.sizes:
            nodes, seconds, total = _case(n, args.repeat, Path(tmp))
            print(f"{n:>6} {nodes:>10,} {seconds:>18.2f} {nodes / seconds:>10,.0f} {total / 1e6:>13.3f} ms", flush=True)
        largest = max(args.sizes)
        workload, algo, topo = _inputs(largest, Path(tmp))
        traced = peak_memory_mb(lambda: replay(workload, topo, algorithms={Collective.ALL_GATHER: algo}))
        print(f"peak memory of replay() at N={largest} (tracemalloc, Python heap + numpy): {traced:,.0f} MiB")
        rss = subprocess.run([sys.executable, "-c", _CHILD, str(largest)], capture_output=True, text=True, check=True)
        print(f"peak memory of a whole process building the ring algorithm and replaying N={largest} (max RSS): {float(rss.stdout.strip()):,.0f} MiB")
        started = time.perf_counter()
        algo = ring(Collective.ALL_GATHER, largest, size_bytes=largest * 2**20)
        built = time.perf_counter() - started
        write_algorithm(algo, Path(tmp) / "ag")
        started = time.perf_counter()
        read_algorithm(Path(tmp) / "ag")
        read = time.perf_counter() - started
        print(f"N={largest}, outside the replay: building the ring algorithm {built:.1f} s; reading it from ET files {read:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
