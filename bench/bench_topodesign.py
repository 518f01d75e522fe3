"""Direct-connect topology design: TotientPerms selection, BFB efficiency and LP scaling, a family comparison.

``python bench/bench_topodesign.py [--skip-scaling] [--max-scaling N] [--skip-compare]``

1. TotientPerms at N = 16 .. 1,024, degree 4 and 8: the strides chosen, their diameter, the
   best diameter of any circulant with that many coprime strides (exhaustive search where it
   enumerates at most 200,000 sets; otherwise the abelian Moore bound, a lower bound), and the
   selection's seconds (median of 3). Targets: within 1 of the best; <= 1 s at 1,024.
2. BFB bandwidth efficiency: the All-Gather cut bound over BFB's bandwidth term (the LP's,
   exact; then after rounding to chunks), and All-Reduce at 1 GiB measured by the network model
   with zero latency against the reduce-scatter + all-gather bound (docs/bounds.md) (Reduce-Scatter's plus All-Gather's); "ideal"
   is ``(N-1)/d`` shards over BFB's (``d`` the most in-links of an NPU): below the cut-bound
   ratio where some NPUs have fewer ports (a generalized Kautz graph's would-be self-loops).
   Target: >= 0.99 where the paper proves BFB bandwidth-optimal.
3. Scaling: BFB All-Gather generation (programs + HiGHS + chunked messages) and lowering to the
   IR, for TotientPerms (degree 4), generalized Kautz (degree 4) and 2D tori from 64 to 1,024
   NPUs (median of 3; 1 run from 512). Targets: <= 2 s at 256, <= 60 s at 1,024.
4. BFB against TACOS on the same topologies, 64 MiB, against the same bounds (All-Reduce:
   docs/bounds.md's Reduce-Scatter + All-Gather bound).
5. All-Reduce at 1 MiB and 1 GiB on 64 NPUs with 6 ports each: TotientPerms, torus 4x4x4,
   binary hypercube, generalized Kautz, and the fat-tree planes with the same ports. Times are
   the network model's (tacos mode, 50 GB/s, 500 ns per link); per topology the best of BFB
   and ``synth``'s ``best`` (TACOS and the baselines, 1 chunk per NPU).
"""

from __future__ import annotations

import argparse
import statistics
import time
from fractions import Fraction

from chakra_collectives.bounds import lower_bounds
from chakra_collectives.ir import Collective
from chakra_collectives.network import predict_time
from chakra_collectives.synth import synthesize
from chakra_collectives.synth.bfb import bfb, bfb_problem, bfb_schedule, solve_bfb
from chakra_collectives.synth.channels import build_channels
from chakra_collectives.synth.lowering import all_gather_algorithm
from chakra_collectives.topology import load_topology
from chakra_collectives.topology.families import best_circulant_diameter, circulant_diameter, circulant_diameter_lower_bound, totient_strides
from chakra_collectives.units import format_time_ns


def median_of(run, repeat: int):
    samples, result = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        result = run()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples), result


def totientperms_table() -> None:
    print("TotientPerms selection (one-way rings; best = exhaustive, or >= Moore bound when marked *)")
    print(f"{'N':>5} {'deg':>3}  {'strides':<34} {'diam':>4} {'best':>5} {'gap':>3} {'select s':>8}")
    for n in (16, 32, 64, 128, 256, 512, 1024):
        for degree in (4, 8):
            seconds, strides = median_of(lambda: totient_strides(n, degree), 3)
            reached = circulant_diameter(n, strides)[0]
            best = best_circulant_diameter(n, degree) if n <= 64 else None
            mark = ""
            if best is None:
                best, mark = circulant_diameter_lower_bound(n, degree), "*"
            print(f"{n:>5} {degree:>3}  {','.join(map(str, strides)):<34} {reached:>4} {str(best) + mark:>5} {reached - best:>3} {seconds:>8.3f}")


EFFICIENCY = [
    "fully-connected:16", "hypercube:4", "hypercube:6", "hamming:4x4x4", "genkautz:64,degree=4", "genkautz:256,degree=4",
    "genkautz:125,degree=5", "kautz:2,4", "kautz:4,3", "genkautz:100,degree=4", "torus2d:8x8", "torus3d:4x4x4",
    "circulant:64,strides=1,7,bidirectional=false", "totientperms:64,degree=4", "totientperms:64,degree=6",
    "line(kautz:2,3)", "degree(torus2d:4x4,2)", "ring:4 x kautz:2,2",
]


def efficiency_table() -> None:
    print("\nBFB bandwidth term against the cut bound (All-Gather: LP exact, chunked; All-Reduce 1 GiB: model, zero latency)")
    print(f"{'topology':<44} {'N':>4} {'steps':>5} {'K':>3} {'AG LP':>6} {'chunked':>7} {'AR model':>8} {'ideal':>6} {'LP s':>5}")
    for spec in EFFICIENCY:
        topo = load_topology(spec)
        zero = load_topology(spec, latency_ns=0)
        ports = max(len(topo.in_links[v]) for v in range(topo.num_npus))
        started = time.perf_counter()
        gather = bfb(topo, "all-gather", 2**30)
        lp_s = time.perf_counter() - started
        cut = lower_bounds(topo, Collective.ALL_GATHER, 2**30).cut_ns
        reduce = bfb(zero, "all-reduce", 2**30)
        predicted = predict_time(reduce.algorithm, zero)
        design = lower_bounds(zero, Collective.ALL_REDUCE, 2**30).reduce_scatter_all_gather_ns
        print(
            f"{spec:<44} {topo.num_npus:>4} {gather.steps:>5} {gather.all_gather.chunks_per_npu:>3} "
            f"{cut / gather.bandwidth_ns(2**30, chunked=False):>6.3f} {cut / gather.bandwidth_ns(2**30):>7.3f} {design / predicted:>8.3f} "
            f"{float(Fraction(topo.num_npus - 1, ports) / gather.bandwidth_shards):>6.3f} {lp_s:>5.2f}"
        )


def scaling_table(max_npus: int) -> None:
    print("\nBFB All-Gather generation (programs + HiGHS + chunked messages) and lowering, seconds (median)")
    print(f"{'topology':<34} {'N':>5} {'programs':>8} {'LP s':>6} {'generate s':>10} {'lower s':>7} {'messages':>9}")
    families = [("totientperms", "totientperms:{n},degree=4"), ("genkautz", "genkautz:{n},degree=4"), ("torus", None)]
    tori = {64: "torus2d:8x8", 128: "torus2d:16x8", 256: "torus2d:16x16", 512: "torus2d:32x16", 1024: "torus2d:32x32"}
    for n in (64, 128, 256, 512, 1024):
        if n > max_npus:
            break
        for _, pattern in families:
            spec = tori[n] if pattern is None else pattern.format(n=n)
            topo = load_topology(spec)

            def generate():
                solution = solve_bfb(bfb_problem(topo))
                return solution, bfb_schedule(solution, build_channels(topo, chunk_bytes=2**10))

            seconds, (solution, schedule) = median_of(generate, 3 if n <= 256 else 1)
            lower_s, _ = median_of(lambda: all_gather_algorithm(schedule.schedule, size_bytes=2**30, name="bfb"), 1)
            print(f"{spec:<34} {n:>5} {len(solution.programs):>8} {solution.lp_s:>6.2f} {seconds:>10.2f} {lower_s:>7.2f} {schedule.schedule.num_transfers:>9,}")


COMPARE = [
    ("TotientPerms", "totientperms:64,degree=6"),
    ("torus 4x4x4", "torus3d:4x4x4"),
    ("hypercube 2^6", "hypercube:6"),
    ("gen. Kautz", "genkautz:64,degree=6"),
    ("fat-tree planes", "fattree:64,degree=6"),
]


def compare_table() -> None:
    print("\nAll-Reduce on 64 NPUs, 6 ports of 50 GB/s each (500 ns per link; model time, tacos mode)")
    print(f"{'family':<16} {'topology':<28} {'diam':>4} {'1 MiB':>10} {'by':<7} {'1 GiB':>10} {'by':<7} {'1 GiB eff':>9}")
    for family, spec in COMPARE:
        topo = load_topology(spec)
        row = []
        for size in (2**20, 2**30):
            candidates = {}
            if not topo.num_switches:
                result = bfb(topo, "all-reduce", size)
                candidates["bfb"] = predict_time(result.algorithm, topo)
            best = synthesize(topo, "all-reduce", size, algorithm="best")
            candidates[best.algorithm_name] = best.predicted_ns
            name = min(candidates, key=candidates.get)
            row.append((candidates[name], name))
        bound = lower_bounds(topo, Collective.ALL_REDUCE, 2**30).reduce_scatter_all_gather_ns
        from chakra_collectives.topology_report import topology_info

        diameter = topology_info(topo, 2**20, with_bfb=False)["diameter"]
        print(
            f"{family:<16} {topo.name[:28]:<28} {diameter:>4} {format_time_ns(row[0][0]):>10} {row[0][1]:<7} "
            f"{format_time_ns(row[1][0]):>10} {row[1][1]:<7} {bound / row[1][0]:>9.3f}"
        )


VERSUS = ["torus2d:8x8", "hypercube:6", "totientperms:64,degree=4", "kautz:4,3", "genkautz:100,degree=4", "line(kautz:2,3)"]


def versus_tacos_table() -> None:
    print("\nBFB against TACOS (1 chunk per NPU, its default trials), 64 MiB, efficiency = bound / model time")
    print(f"{'topology':<28} {'collective':<11} {'bound':>10} {'BFB':>10} {'eff':>6} {'TACOS':>10} {'eff':>6}")
    for spec in VERSUS:
        topo = load_topology(spec)
        for collective in (Collective.ALL_GATHER, Collective.ALL_REDUCE):
            bounds = lower_bounds(topo, collective, 64 * 2**20)
            bound = bounds.reduce_scatter_all_gather_ns or bounds.best_ns
            ours = predict_time(bfb(topo, collective, 64 * 2**20).algorithm, topo)
            theirs = synthesize(topo, collective, 64 * 2**20, algorithm="tacos").predicted_ns
            print(
                f"{topo.name[:28]:<28} {collective.value:<11} {format_time_ns(bound):>10} {format_time_ns(ours):>10} {bound / ours:>6.3f} "
                f"{format_time_ns(theirs):>10} {bound / theirs:>6.3f}"
            )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-scaling", action="store_true")
    parser.add_argument("--skip-compare", action="store_true")
    parser.add_argument("--max-scaling", type=int, default=1024)
    args = parser.parse_args(argv)
    print("(medians; the machine has 2 cores shared with other engineers: expect noise)")
    totientperms_table()
    efficiency_table()
    if not args.skip_scaling:
        scaling_table(args.max_scaling)
    if not args.skip_compare:
        versus_tacos_table()
        compare_table()
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1:]))
