"""TACOS synthesis: the issue's suite table, the speed targets and a scaling table.

``python bench/bench_synth.py [--full] [--skip-scaling] [--max-scaling N]``

Suite: All-Gather and All-Reduce of 64 MiB, 1 and 4 chunks per NPU, on the issue's topologies
(the default skips mesh 16x16 and torus 8x8x8 and scales to 1024 NPUs; ``--full`` runs
everything, about 15 minutes). Columns: TACOS's predicted time (network model, tacos mode),
the best lower bound, TACOS's efficiency (bound / predicted; then against the reduce-scatter + all-gather bound (docs/bounds.md), for
All-Reduce Reduce-Scatter's plus All-Gather's, which the targets use), the ring baseline's time and
TACOS's speedup over it, the best baseline of ring/biring/direct/rhd, then ``--algorithm best``
(the fastest of all: which, its efficiency), TACOS's synthesis seconds (matching + IR, median)
and ET-write seconds.

Targets: efficiency >= 0.90 (All-Gather) / 0.85 (All-Reduce) on homogeneous topologies; never
slower than the best baseline; All-Reduce on 128 NPUs (hetero mesh 16x8) <= 1 s; All-Gather on
a 1024-NPU torus (1 chunk/NPU) <= 60 s. Scaling: All-Gather, 1 chunk/NPU, 2D torus 16 -> 4096
NPUs, each size in a fresh process: synthesis seconds (fitted exponent) and peak RSS.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from chakra_collectives.bounds import lower_bounds
from chakra_collectives.converters.chakra_et import write_algorithm
from chakra_collectives.ir import Collective
from chakra_collectives.network import predict_time
from chakra_collectives.synth import synthesize
from chakra_collectives.synth.best import baseline_bound_ns, choose
from chakra_collectives.synth.registry import SynthesisOptions, get
from chakra_collectives.synth.tacos import tacos
from chakra_collectives.topology import load_topology

SIZE = 64 * 2**20
SUITE = [
    ("ring:8", True), ("ring:64", True), ("mesh2d:4x4", True), ("mesh2d:8x8", True), ("mesh2d:16x16", True),
    ("torus2d:8x8", True), ("torus3d:4x4x4", True), ("torus3d:8x8x8", True), ("hypercube:4x4x4", True),
    ("hetero-mesh2d:8x8", False), ("switch:64", True), ("dgx:4x8", False),
]
QUICK_SKIP = {"mesh2d:16x16", "torus3d:8x8x8"}
TARGET = {Collective.ALL_GATHER: 0.90, Collective.ALL_REDUCE: 0.85}
BASELINE_NAMES = ("ring", "biring", "direct", "rhd")


def timed(run, repeat: int) -> tuple[float, object]:
    samples, result = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        result = run()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples), result


def design_bound_ns(bounds) -> float:
    """the reduce-scatter + all-gather bound (docs/bounds.md): the library's, except All-Reduce's, which is Reduce-Scatter's plus
    All-Gather's (the bound of reduce-scatter-then-all-gather algorithms; see bounds.py)."""
    return bounds.reduce_scatter_all_gather_ns or bounds.best_ns


def baselines(topo, collective, k) -> tuple[float, str, float]:
    """(ring time, best baseline, its time): exact predictions; baselines that provably lose are skipped."""
    n = topo.num_npus
    names = [b for b in BASELINE_NAMES if get(b).supports(collective, n)]

    def produce(name):
        algo = get(name).make(topo, collective, n, SynthesisOptions(size_bytes=SIZE, chunks_per_npu=k)).algorithm
        return None, predict_time(algo, topo)

    ring = produce("ring")[1]
    best, _, candidates = choose(names, lambda b: baseline_bound_ns(b, topo, collective, SIZE, k), lambda b: (None, ring) if b == "ring" else produce(b))
    return ring, best, next(c.predicted_ns for c in candidates if c.name == best)


def suite(full: bool) -> list[str]:
    misses = []
    header = (
        f"{'topology':18} {'coll':4} {'K':>2} {'TACOS':>10} {'bound':>10} {'eff':>6} {'RS+AG':>6} {'ring':>10} {'xring':>6} "
        f"{'best baseline':>17} {'best':>7} {'eff':>6} {'RS+AG':>6} {'synth s':>8} {'ET s':>6}"
    )
    print(header)
    print("-" * len(header))
    for spec, homogeneous in SUITE:
        if not full and spec in QUICK_SKIP:
            continue
        topo = load_topology(spec)
        for collective in (Collective.ALL_GATHER, Collective.ALL_REDUCE):
            bounds = lower_bounds(topo, collective, SIZE)
            design_ns = design_bound_ns(bounds)
            for k in (1, 4):
                repeat = 3 if topo.num_npus <= 64 else 1
                synth_s, result = timed(lambda: tacos(topo, collective, SIZE, chunks_per_npu=k), repeat)
                algo = result.algorithm
                predicted = predict_time(algo, topo)
                with tempfile.TemporaryDirectory() as tmp:
                    write_s, _ = timed(lambda: write_algorithm(algo, Path(tmp) / "algo"), 1)
                del algo, result
                ring_ns, base_name, base_ns = baselines(topo, collective, k)
                best_name, best_ns = ("tacos", predicted) if predicted <= base_ns else (base_name, base_ns)
                eff, best_eff = bounds.efficiency(predicted), bounds.efficiency(best_ns)
                design, best_design = design_ns / predicted, design_ns / best_ns
                short = "AG" if collective is Collective.ALL_GATHER else "AR"
                print(
                    f"{spec:18} {short:4} {k:>2} {predicted / 1e3:>8.1f}us {bounds.best_ns / 1e3:>8.1f}us {eff:>6.3f} {design:>6.3f} "
                    f"{ring_ns / 1e3:>8.1f}us {ring_ns / predicted:>6.2f} {base_name:>7} {base_ns / 1e3:>7.1f}us "
                    f"{best_name:>7} {best_eff:>6.3f} {best_design:>6.3f} {synth_s:>8.2f} {write_s:>6.2f}",
                    flush=True,
                )
                if homogeneous and design < TARGET[collective]:
                    misses.append(f"{spec} {short} K={k}: TACOS efficiency {design:.3f} < {TARGET[collective]} (best: {best_design:.3f})")
                if predicted > base_ns * (1 + 1e-9):
                    misses.append(f"{spec} {short} K={k}: TACOS {predicted / 1e3:.1f} us slower than {base_name} {base_ns / 1e3:.1f} us (best picks {base_name})")
    return misses


def targets() -> None:
    """The issue's speed targets, for TACOS alone and for ``synthesize(algorithm="best")`` (the default)."""
    hetero = load_topology("hetero-mesh2d:16x8")
    torus = load_topology("torus2d:32x32")
    ar1, _ = timed(lambda: tacos(hetero, Collective.ALL_REDUCE, SIZE, chunks_per_npu=1), 5)
    ar4, _ = timed(lambda: tacos(hetero, Collective.ALL_REDUCE, SIZE, chunks_per_npu=4), 3)
    ag, _ = timed(lambda: tacos(torus, Collective.ALL_GATHER, SIZE, chunks_per_npu=1), 3)
    # synthesis seconds as the library reports them (TACOS + bounding or building the baselines)
    best_ar1 = statistics.median(synthesize(hetero, Collective.ALL_REDUCE, SIZE, chunks_per_npu=1, algorithm="best").synthesis_s for _ in range(5))
    best_ag = synthesize(torus, Collective.ALL_GATHER, SIZE, chunks_per_npu=1, algorithm="best").synthesis_s
    print(f"All-Reduce, hetero mesh 16x8 (128 NPUs), 1 chunk/NPU: TACOS {ar1:.2f} s median of 5, best {best_ar1:.2f} s (target <= 1.0 s)")
    print(f"All-Reduce, hetero mesh 16x8 (128 NPUs), 4 chunks/NPU: TACOS {ar4:.2f} s median of 3")
    print(f"All-Gather, torus2d 32x32 (1024 NPUs), 1 chunk/NPU: TACOS {ag:.2f} s median of 3, best {best_ag:.2f} s (target <= 60 s)")


_WORKER = """
import json, sys, time
from chakra_collectives.ir import Collective
from chakra_collectives.synth.tacos import tacos
from chakra_collectives.topology import load_topology
topo = load_topology(sys.argv[1])
started = time.perf_counter()
result = tacos(topo, Collective.ALL_GATHER, int(sys.argv[2]))
seconds = time.perf_counter() - started
print(json.dumps({"seconds": seconds, "messages": result.phases[0].schedule.num_transfers, "operations": result.algorithm.num_ops,
                  "schedule_ns": result.schedule_ns}))
"""

_MONITOR = """
import resource, subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
sys.stderr.write(done.stderr)
print(done.stdout.strip() + "\\t" + str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
"""


def scaling(max_npus: int) -> None:
    """Each size in a fresh process; its peak RSS is the monitor's RUSAGE_CHILDREN (tracemalloc misses numpy's)."""
    print(f"{'NPUs':>6} {'messages':>11} {'operations':>11} {'synth s':>9} {'peak RSS MiB':>13} {'eff':>6}")
    sizes, times = [], []
    side = 4
    while side * side <= max_npus:
        spec = f"torus2d:{side}x{side}"
        done = subprocess.run(
            [sys.executable, "-c", _MONITOR, sys.executable, "-c", _WORKER, spec, str(SIZE)], capture_output=True, text=True, check=True,
        )
        report, peak_kib = done.stdout.strip().rsplit("\t", 1)
        row = json.loads(report)
        bound = lower_bounds(load_topology(spec), Collective.ALL_GATHER, SIZE, sinks=[0]).best_ns
        print(
            f"{side * side:>6} {row['messages']:>11,} {row['operations']:>11,} {row['seconds']:>9.2f} {int(peak_kib) / 1024:>13.0f} "
            f"{bound / row['schedule_ns']:>6.3f}",
            flush=True,
        )
        sizes.append(side * side)
        times.append(row["seconds"])
        side *= 2
    if len(sizes) >= 3:
        slope = np.polyfit(np.log(sizes[1:]), np.log(times[1:]), 1)[0]
        print(f"fitted exponent (least squares on log-log, N >= {sizes[1]}): time ~ N^{slope:.2f}  (single-chunk messages grow as N^2)")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="the whole suite (mesh 16x16, torus 8x8x8) and scaling to 4096 NPUs")
    parser.add_argument("--skip-scaling", action="store_true")
    parser.add_argument("--max-scaling", type=int, default=None, help="largest NPU count of the scaling table (default 1024; --full: 4096)")
    args = parser.parse_args(argv)
    misses = suite(args.full)
    print()
    targets()
    if not args.skip_scaling:
        print()
        scaling(args.max_scaling or (4096 if args.full else 1024))
    print()
    print("quality targets: all met" if not misses else "quality targets missed:\n  " + "\n  ".join(misses))


if __name__ == "__main__":
    main(sys.argv[1:])
