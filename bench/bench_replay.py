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
"""

from __future__ import annotations

import argparse
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


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=SIZES, help="ring sizes N")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
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
