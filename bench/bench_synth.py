"""TACOS synthesis: the issue's suite table, the speed targets and a scaling table.

``python bench/bench_synth.py [--quick] [--skip-scaling] [--max-scaling N]``

Suite: All-Gather and All-Reduce of 64 MiB, 1 and 4 chunks per NPU, on the issue's topologies.
Columns: predicted time (network model, tacos mode), best lower bound, efficiency
(bound / predicted), ring-baseline time, speedup over ring, the best baseline of
ring/biring/direct/rhd on that case, synthesis seconds (matching + IR) and ET-write seconds.
Targets: efficiency >= 0.90 (All-Gather) / 0.85 (All-Reduce) on homogeneous topologies; never
slower than the best baseline; All-Reduce on 128 NPUs (hetero mesh 16x8) <= 1 s; All-Gather on
a 1024-NPU torus (1 chunk/NPU) <= 60 s. Scaling: All-Gather, 1 chunk/NPU, 2D torus 16 -> 4096
NPUs: synthesis time (fitted exponent) and peak traced memory.
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

from chakra_collectives.bounds import lower_bounds
from chakra_collectives.converters.chakra_et import write_algorithm
from chakra_collectives.ir import Collective
from chakra_collectives.network import predict_time
from chakra_collectives.synth.baselines import BASELINES
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


def timed(run, repeat: int) -> tuple[float, object]:
    samples, result = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        result = run()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples), result


def best_baseline(topo, collective, k) -> tuple[str, float, float]:
    n = topo.num_npus
    times = {}
    for name in ("ring", "biring", "direct", "rhd"):
        if name == "rhd" and n & (n - 1):
            continue
        algo = BASELINES[name](collective, n, size_bytes=SIZE, chunks_per_rank=k)
        times[name] = predict_time(algo, topo)
    best = min(times, key=times.get)
    return best, times[best], times["ring"]


def suite(quick: bool) -> list[str]:
    misses = []
    header = f"{'topology':18} {'coll':4} {'K':>2} {'predicted':>11} {'bound':>11} {'eff':>6} {'ring':>11} {'xring':>6} {'best baseline':>20} {'synth s':>8} {'ET s':>6}"
    print(header)
    print("-" * len(header))
    for spec, homogeneous in SUITE:
        if quick and spec in QUICK_SKIP:
            continue
        topo = load_topology(spec)
        for collective in (Collective.ALL_GATHER, Collective.ALL_REDUCE):
            bounds = lower_bounds(topo, collective, SIZE)
            for k in (1, 4):
                repeat = 3 if topo.num_npus <= 64 else 1
                synth_s, result = timed(lambda: tacos(topo, collective, SIZE, chunks_per_npu=k), repeat)
                algo = result.algorithm
                predicted = predict_time(algo, topo)
                with tempfile.TemporaryDirectory() as tmp:
                    write_s, _ = timed(lambda: write_algorithm(algo, Path(tmp) / "algo"), 1)
                base_name, base_ns, ring_ns = best_baseline(topo, collective, k)
                eff = bounds.efficiency(predicted)
                short = "AG" if collective is Collective.ALL_GATHER else "AR"
                print(
                    f"{spec:18} {short:4} {k:>2} {predicted / 1e3:>9.1f}us {bounds.best_ns / 1e3:>9.1f}us {eff:>6.3f} "
                    f"{ring_ns / 1e3:>9.1f}us {ring_ns / predicted:>6.2f} {base_name:>7} {base_ns / 1e3:>10.1f}us "
                    f"{synth_s:>8.2f} {write_s:>6.2f}",
                    flush=True,
                )
                if homogeneous and eff < TARGET[collective]:
                    misses.append(f"{spec} {short} K={k}: efficiency {eff:.3f} < {TARGET[collective]}")
                if predicted > base_ns * (1 + 1e-9):
                    misses.append(f"{spec} {short} K={k}: {predicted / 1e3:.1f} us slower than {base_name} {base_ns / 1e3:.1f} us")
    return misses


def targets() -> None:
    hetero = load_topology("hetero-mesh2d:16x8")
    ar1, _ = timed(lambda: tacos(hetero, Collective.ALL_REDUCE, SIZE, chunks_per_npu=1), 5)
    ar4, _ = timed(lambda: tacos(hetero, Collective.ALL_REDUCE, SIZE, chunks_per_npu=4), 3)
    torus = load_topology("torus2d:32x32")
    ag, _ = timed(lambda: tacos(torus, Collective.ALL_GATHER, SIZE, chunks_per_npu=1), 3)
    print(f"All-Reduce, hetero mesh 16x8 (128 NPUs), 1 chunk/NPU: {ar1:.2f} s median of 5 (target <= 1.0 s)")
    print(f"All-Reduce, hetero mesh 16x8 (128 NPUs), 4 chunks/NPU: {ar4:.2f} s median of 3")
    print(f"All-Gather, torus2d 32x32 (1024 NPUs), 1 chunk/NPU: {ag:.2f} s median of 3 (target <= 60 s)")


def scaling(max_npus: int) -> None:
    print(f"{'NPUs':>6} {'transfers':>11} {'operations':>11} {'synth s':>9} {'peak MiB':>9}")
    sizes, times = [], []
    side = 4
    while side * side <= max_npus:
        topo = load_topology(f"torus2d:{side}x{side}")
        seconds, result = timed(lambda: tacos(topo, Collective.ALL_GATHER, SIZE), 3 if side <= 16 else 1)
        transfers, ops = result.phases[0].num_transfers, result.algorithm.num_ops
        del result
        tracemalloc.start()
        tacos(topo, Collective.ALL_GATHER, SIZE)
        peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
        print(f"{topo.num_npus:>6} {transfers:>11,} {ops:>11,} {seconds:>9.2f} {peak:>9.0f}", flush=True)
        sizes.append(topo.num_npus)
        times.append(seconds)
        side *= 2
    if len(sizes) >= 3:
        slope = np.polyfit(np.log(sizes[1:]), np.log(times[1:]), 1)[0]
        print(f"fitted exponent (time ~ N^a, N >= {sizes[1]}): a = {slope:.2f}  (transfers grow as N^2)")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip mesh 16x16 and torus 8x8x8 in the suite")
    parser.add_argument("--skip-scaling", action="store_true")
    parser.add_argument("--max-scaling", type=int, default=4096, help="largest NPU count of the scaling table")
    args = parser.parse_args(argv)
    misses = suite(args.quick)
    print()
    targets()
    if not args.skip_scaling:
        print()
        scaling(args.max_scaling)
    print()
    print("quality targets: all met" if not misses else "quality targets missed:\n  " + "\n  ".join(misses))


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
