"""ForestColl: exactness, quality against the cut bound, TACOS vs ForestColl vs baselines, speed.

``python bench/bench_forestcoll.py [--full] [--reference DIR] [--skip-scaling]``

1. Exactness: the optimal algorithmic bandwidth ``N k / U`` on ForestColl's own platforms
   against the figures its reference prints (342.857, 346.667, 342.857, 354.133 GB/s), and on
   every suite topology the packed trees' bandwidth term against ``bounds.py``'s cut bound.
2. Quality: efficiency (best bound / predicted time, network model, latency included) of
   ForestColl's default schedule at 1 GiB, All-Gather and All-Reduce (All-Reduce against
   design.md's Reduce-Scatter + All-Gather bound, which ForestColl's two halves meet).
   Target >= 0.95.
3. TACOS vs ForestColl vs the best baseline (ring, biring, direct, rhd) at 1 MiB, 64 MiB and
   1 GiB, All-Gather: predicted times and who wins (``--full``: every suite topology; default:
   up to 128 NPUs).
4. Speed of the trees (optimum + edge splitting + packing, the optimum's ``k``): a100:2 and
   mi250:2 (median of 3; with ``--reference DIR``, a checkout of github.com/liangyuRain/ForestColl,
   its ``optimal_pipeline_spanning_trees`` side by side in a fresh process), a100:32, and
   1,024 NPUs (torus2d:32x32; ``--full`` also a100:128); targets 0.5 s, 1 s, 30 s, 5 min.
5. Scaling: torus2d and a100 boxes, each size in a fresh process: seconds for the trees and
   for the whole synthesis (lowering, choosing pieces), peak RSS, fitted exponent.
6. The default (``auto``), each case in fresh processes, median of ``--repeat`` runs:
   realised share of the optimal algbw at 1 GiB All-Gather (a100:2, mi250:2, a100:4, mi250:4,
   dgx:4x8; target 0.98; beside it, where proved, the most any schedule realises under the link
   model, docs/bounds.md) with the ``k`` and pieces chosen and where the time goes on the busiest
   link (its bytes, latency and idle time over the optimum's time, which sum to 1 / realised),
   and the seconds (wall and CPU) of ``forestcoll()``
   and its parts (mi250:2 and a100:16 All-Gather 64 MiB, targets 1 s and 0.5 s; mesh2d:8x8
   All-Reduce 64 MiB, ``synth``'s default) and of the whole ``synth -a forestcoll`` command.
   ``--old DIR``: a copy of an older ``chakra_collectives`` package (``git archive REV
   chakra_collectives converters | tar -x -C DIR``, ``converters/`` then linked into
   ``DIR/chakra_collectives/``; see ``timing.python_importing``) timed alternately in the same
   run, with ratios.
   ``--only-default`` runs this section alone.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from chakra_collectives.bounds import lower_bounds, store_and_forward_floor_ns
from chakra_collectives.ir import Collective
from chakra_collectives.network import predict_time
from chakra_collectives.synth.forestcoll import build_trees, forestcoll
from chakra_collectives.synth.registry import SynthesisOptions, get
from chakra_collectives.synth.tacos import tacos
from chakra_collectives.topology import load_topology
from chakra_collectives.units import bytes_per_ns, parse_size
from timing import python_importing

SUITE = [
    "ring:8", "ring:64", "mesh2d:4x4", "mesh2d:8x8", "mesh2d:16x16", "torus2d:8x8", "torus3d:4x4x4", "torus3d:8x8x8",
    "hypercube:4x4x4", "hetero-mesh2d:8x8", "switch:64", "dgx:4x8", "a100:4", "mi250:2",
]
REFERENCE_ALGBW = {"a100:1": "342.857", "a100:2": "346.667", "mi250:1": "342.857", "mi250:2": "354.133"}
SIZES = ("1MiB", "64MiB", "1GiB")
BASELINES = ("ring", "biring", "direct", "rhd")
QUALITY = 0.95


def design_bound_ns(bounds) -> float:
    return bounds.reduce_scatter_all_gather_ns or bounds.best_ns


# ---------------------------------------------------------------------- 1. exactness
def exactness() -> list[str]:
    misses = []
    print(f"{'platform':10} {'reference GB/s':>15} {'ours GB/s':>10} {'U':>6} {'k':>4}  equal")
    for spec, expected in REFERENCE_ALGBW.items():
        topo = load_topology(spec)
        trees = build_trees(topo, [1] * topo.num_npus, reverse=False)
        algbw = topo.num_npus / trees.optimum.ratio_gbps
        ours = f"{float(algbw):.3f}"
        print(f"{spec:10} {expected:>15} {ours:>10} {str(trees.optimum.U):>6} {trees.optimum.k:>4}  {ours == expected}")
        if ours != expected:
            misses.append(f"{spec}: algbw {ours} != reference {expected}")
    print()
    print(f"{'topology':18} {'coll':4} {'cut bound':>12} {'trees (U/k)':>12} {'ratio':>10} {'k':>4} {'trees':>6}  loads <= U*b")
    for spec in SUITE:
        topo = load_topology(spec)
        for collective, reverse in ((Collective.ALL_GATHER, False), (Collective.REDUCE_SCATTER, True)):
            size = 2**30
            trees = build_trees(topo, [1] * topo.num_npus, reverse=reverse)
            bound = lower_bounds(topo, collective, size).cut_ns
            ours = size / topo.num_npus * float(trees.optimum.ratio_gbps) / (2**30 / 1e9)
            fits = all(load <= trees.logical.capacity[e] for e, load in trees.forest.loads().items())
            short = "AG" if collective is Collective.ALL_GATHER else "RS"
            print(f"{spec:18} {short:4} {bound / 1e3:>10.1f}us {ours / 1e3:>10.1f}us {ours / bound:>10.6f} {trees.optimum.k:>4} {len(trees.forest.trees):>6}  {fits}", flush=True)
            if abs(ours / bound - 1) > 1e-12 or not fits:
                misses.append(f"{spec} {short}: trees' bandwidth term {ours:.1f} ns vs cut bound {bound:.1f} ns")
    return misses


# ---------------------------------------------------------------------- 2. quality
def quality(specs: list[str]) -> list[str]:
    misses = []
    print(f"{'topology':18} {'coll':4} {'k':>4} {'k*':>4} {'P':>4} {'predicted':>11} {'bound':>11} {'eff':>6} {'synth s':>8}")
    for spec in specs:
        topo = load_topology(spec)
        for collective in (Collective.ALL_GATHER, Collective.ALL_REDUCE):
            size = 2**30
            started = time.perf_counter()
            result = forestcoll(topo, collective, size)
            synth_s = time.perf_counter() - started
            predicted = result.predicted_ns if result.predicted_ns is not None else predict_time(result.algorithm, topo)
            bound = design_bound_ns(lower_bounds(topo, collective, size))
            eff = bound / predicted
            short = "AG" if collective is Collective.ALL_GATHER else "AR"
            print(f"{spec:18} {short:4} {result.k:>4} {result.optimal_k:>4} {result.chunks_per_tree:>4} {predicted / 1e3:>9.1f}us {bound / 1e3:>9.1f}us {eff:>6.3f} {synth_s:>8.1f}", flush=True)
            if eff < QUALITY:
                misses.append(f"{spec} {short} 1 GiB: efficiency {eff:.3f} < {QUALITY}")
    return misses


# ---------------------------------------------------------------------- 3. comparison
def best_baseline(topo, collective, size) -> tuple[str, float]:
    """The fastest baseline by prediction (every applicable one is predicted)."""
    n = topo.num_npus
    times = {
        name: predict_time(get(name).make(topo, collective, n, SynthesisOptions(size_bytes=size)).algorithm, topo)
        for name in BASELINES
        if get(name).supports(collective, n)
    }
    chosen = min(times, key=times.get)
    return chosen, times[chosen]


def comparison(specs: list[str]) -> None:
    print(f"{'topology':18} {'size':>6} {'TACOS':>11} {'ForestColl':>11} {'baseline':>18} {'winner':>10} {'FC/TACOS':>9}")
    for spec in specs:
        topo = load_topology(spec)
        for text in SIZES:
            size = parse_size(text)
            collective = Collective.ALL_GATHER
            tacos_ns = min(predict_time(tacos(topo, collective, size, chunks_per_npu=k).algorithm, topo) for k in (1, 4))
            result = forestcoll(topo, collective, size)
            fc_ns = result.predicted_ns if result.predicted_ns is not None else predict_time(result.algorithm, topo)
            base_name, base_ns = best_baseline(topo, collective, size)
            times = {"tacos": tacos_ns, "forestcoll": fc_ns, base_name: base_ns}
            winner = min(times, key=times.get)
            print(
                f"{spec:18} {text:>6} {tacos_ns / 1e3:>9.1f}us {fc_ns / 1e3:>9.1f}us {base_name:>7} {base_ns / 1e3:>8.1f}us "
                f"{winner:>10} {tacos_ns / fc_ns:>9.2f}",
                flush=True,
            )


# ---------------------------------------------------------------------- 4-5. speed, scaling
_TREES = """
import json, sys, time
from chakra_collectives.synth.forestcoll import build_trees, forestcoll
from chakra_collectives.topology import load_topology
topo = load_topology(sys.argv[1])
started = time.perf_counter()
trees = build_trees(topo, [1] * topo.num_npus, reverse=False)
trees_s = time.perf_counter() - started
row = {"trees_s": trees_s, "k": trees.optimum.k, "trees": len(trees.forest.trees), "grown": trees.forest.base_trees, "tests": trees.forest.tests}
if sys.argv[2] == "synth":
    started = time.perf_counter()
    result = forestcoll(topo, "all-gather", "1GiB", trees_per_npu="optimal")
    row["synth_s"] = time.perf_counter() - started
    row["operations"] = result.algorithm.num_ops
print(json.dumps(row))
"""

_REFERENCE = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from pipeline_allgather import optimal_pipeline_spanning_trees
from topologies import a100_topology, mi250_topology
name, boxes = sys.argv[2].split(":")
G, gpus = (a100_topology if name == "a100" else mi250_topology)(int(boxes))
started = time.perf_counter()
(U, k), (Ts, Cs) = optimal_pipeline_spanning_trees(G, compute_nodes=gpus)
print(json.dumps({"seconds": time.perf_counter() - started, "algbw": len(gpus) * k / U, "trees": len(Ts)}))
"""

_MONITOR = """
import resource, subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
sys.stderr.write(done.stderr)
print(done.stdout.strip() + "\\t" + str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
"""


def fresh(code: str, *args: str) -> tuple[dict, float]:
    """Run ``code`` in a fresh process; its JSON line and peak RSS (MiB)."""
    done = subprocess.run([sys.executable, "-c", _MONITOR, sys.executable, "-c", code, *args], capture_output=True, text=True, check=True)
    report, peak = done.stdout.strip().rsplit("\t", 1)
    return json.loads(report), int(peak) / 1024


def speed(reference: Path | None, full: bool) -> list[str]:
    misses = []
    print(f"{'topology':16} {'NPUs':>5} {'k':>4} {'trees':>6} {'tests':>6} {'ours s':>8} {'target':>7} {'reference s':>12} {'ratio':>7}")
    cases = [("a100:2", 0.5, 3), ("mi250:2", 1.0, 3), ("a100:32", 30.0, 1), ("torus2d:32x32", 300.0, 1)]
    if full:
        cases.append(("a100:128", 300.0, 1))
    for spec, target, repeat in cases:
        rows = [fresh(_TREES, spec, "trees")[0] for _ in range(repeat)]
        seconds = statistics.median(r["trees_s"] for r in rows)
        row = rows[0]
        ref = ""
        ratio = ""
        if reference is not None and spec in ("a100:2", "mi250:2"):
            found, _ = fresh(_REFERENCE, str(reference), spec)
            ref = f"{found['seconds']:.2f}"
            ratio = f"{found['seconds'] / seconds:.0f}x"
        n = load_topology(spec).num_npus
        print(f"{spec:16} {n:>5} {row['k']:>4} {row['trees']:>6} {row['tests']:>6} {seconds:>8.2f} {target:>7g} {ref:>12} {ratio:>7}", flush=True)
        if seconds > target:
            misses.append(f"{spec}: trees in {seconds:.2f} s > {target:g} s")
    return misses


def scaling(full: bool) -> None:
    print(f"{'topology':16} {'NPUs':>5} {'k':>3} {'trees':>6} {'trees s':>8} {'synth s':>8} {'operations':>11} {'peak MiB':>9}")
    for family, specs in (
        ("torus2d", [f"torus2d:{s}x{s}" for s in (4, 8, 16, 32)]),
        ("a100", [f"a100:{b}" for b in (2, 4, 8, 16, 32) + ((64,) if full else ())]),
    ):
        sizes, times = [], []
        for spec in specs:
            row, peak = fresh(_TREES, spec, "synth")
            n = load_topology(spec).num_npus
            print(f"{spec:16} {n:>5} {row['k']:>3} {row['trees']:>6} {row['trees_s']:>8.2f} {row['synth_s']:>8.2f} {row['operations']:>11,} {peak:>9.0f}", flush=True)
            sizes.append(n)
            times.append(row["trees_s"])
        if len(sizes) >= 3:
            slope = np.polyfit(np.log(sizes[1:]), np.log(times[1:]), 1)[0]
            print(f"{family}: trees time ~ N^{slope:.2f} (least squares on log-log, N >= {sizes[1]})")


# ---------------------------------------------------------------------- 6. the default
REALISED = ["a100:2", "mi250:2", "a100:4", "mi250:4", "dgx:4x8"]
REALISED_TARGET = 0.98
FLOORS = {  # 1 GiB All-Gather: (bytes the binding cut's links carry, their classes: switch downlinks, or direct links at latency 0); docs/bounds.md
    "a100:2": (16 * 15 * 2**26, [(16 * 300.0, 250.0), (16 * 25.0, 500.0)]),
    "a100:4": (4 * 24 * 2**25, [(32 * 25.0, 500.0)]),
    "dgx:4x8": (4 * 24 * 2**25, [(32 * 25.0, 1000.0)]),
    "mi250:2": (16 * 30 * 2**25, [(32 * 16.0, 1000.0), (16 * 300.0, 0.0)]),  # per GCD pair: 2 NICs + direct links (no fill)
    "mi250:4": (4 * 48 * 2**24, [(64 * 16.0, 1000.0)]),
}
DEFAULT_SPEED = [("mi250:2", "all-gather", "64MiB", 1.0), ("a100:16", "all-gather", "64MiB", 0.5), ("mesh2d:8x8", "all-reduce", "64MiB", None)]

_DEFAULT = """
import json, resource, sys, time
started = time.perf_counter()
cpu_now = lambda: sum(resource.getrusage(resource.RUSAGE_SELF)[:2]) + sum(resource.getrusage(resource.RUSAGE_CHILDREN)[:2])  # forked candidates too
from chakra_collectives.synth.forestcoll import forestcoll, report
from chakra_collectives.topology import load_topology
topo = load_topology(sys.argv[1])
imported = time.perf_counter()
cpu = cpu_now()
result = forestcoll(topo, sys.argv[2], sys.argv[3])
done = time.perf_counter()
cpu = cpu_now() - cpu
row = report(result)
limit = getattr(result, "bottleneck", None)  # older packages have none
if result.predicted_ns is None or limit is None:
    from chakra_collectives.network.bottleneck import busiest_link
    from chakra_collectives.network.collective import simulate_collective
    timing = simulate_collective(result.algorithm, topo)
    result.predicted_ns, limit = timing.time_ns, busiest_link(timing)
busy = limit.busy_fraction * result.predicted_ns  # the busiest link: its bytes, latency and idle time
print(json.dumps({"busiest": [busy * (1 - limit.latency_fraction), busy * limit.latency_fraction, limit.messages, result.predicted_ns - busy],"seconds": done - imported, "cpu_s": cpu, "process_s": done - started, "parts": row["timings_s"], "k": result.k,
                  "optimal_k": result.optimal_k, "pieces": result.chunks_per_tree,
                  "batch": result.algorithm.provenance.get("fast_path_batch", "1"), "algbw": row["optimal_algbw_gbps"],
                  "realised": row["optimal_bandwidth_ns"] / result.predicted_ns, "optimal_ns": row["optimal_bandwidth_ns"]}))
"""


def fresh_in(package: Path | None, code: str, *args: str) -> dict:
    """``code`` run in a fresh process, importing ``chakra_collectives`` from ``package`` when given."""
    done = subprocess.run([*python_importing(package, code), *args], capture_output=True, text=True, check=True, cwd="/")
    return json.loads(done.stdout.strip().splitlines()[-1])


def whole_command(package: Path | None, spec: str, collective: str, size: str) -> float:
    """Seconds of ``chakra-coll synth -a forestcoll`` (no output files) in a fresh process."""
    started = time.perf_counter()
    run = "import sys; sys.argv[0] = 'chakra-coll'; from chakra_collectives.cli import main; main()"
    subprocess.run([*python_importing(package, run), "synth", "-t", spec, "-c", collective, "-s", size, "-a", "forestcoll"],
                   capture_output=True, text=True, check=True, cwd="/")
    return time.perf_counter() - started


def default(old: Path | None, repeat: int) -> list[str]:
    misses = []
    versions = [("new", None)] + ([("old", old)] if old is not None else [])
    print("(busiest link: its bytes, latency (messages) and idle time on the new schedule, in units of the optimum's time: realised = 1 / their sum)")
    print(f"{'platform':10} {'optimal GB/s':>13} " + " ".join(f"{v + ' realised':>13} {v + ' k/P':>12}" for v, _ in versions) + f" {'any schedule':>13}  {'busiest: bytes + latency (msgs) + idle':>38}")
    for spec in REALISED:
        rows = {v: fresh_in(p, _DEFAULT, spec, "all-gather", "1GiB") for v, p in versions}
        new = rows["new"]
        cells = " ".join(f"{r['realised']:>13.3f} {str(r['k']) + '/' + str(r['pieces']) + ('x' + r['batch'] if r['batch'] != '1' else ''):>12}" for r in rows.values())
        ceiling = ""
        if spec in FLOORS:  # the most of the optimum any schedule realises under the link model
            demand, classes = FLOORS[spec]
            ceiling = f"{demand / bytes_per_ns(sum(g for g, _ in classes)) / store_and_forward_floor_ns(demand, classes):.4f}"
        optimum_ns = new["optimal_ns"]
        moved, latency, messages, idle = new["busiest"]
        spent = f"{moved / optimum_ns:.4f} + {latency / optimum_ns:.4f} ({messages}) + {idle / optimum_ns:.4f}"
        print(f"{spec:10} {new['algbw']:>13.3f} {cells} {ceiling:>13}  {spent:>38}", flush=True)
        if new["realised"] < REALISED_TARGET:
            misses.append(f"{spec}: realised {new['realised']:.3f} < {REALISED_TARGET} of the optimal algbw at 1 GiB")
    print()
    print("(s: forestcoll() wall seconds, cpu: its CPU seconds -- steadier on a loaded machine -- cmd: the whole command; medians)")
    print(f"{'case':32} " + " ".join(f"{v + ' s':>8} {v + ' cpu':>8} {v + ' cmd s':>10}" for v, _ in versions) + f" {'ratio':>6} {'cpu r.':>6} {'target':>7}  new parts (median run)")
    for spec, collective, size, target in DEFAULT_SPEED:
        times: dict[str, list[float]] = {v: [] for v, _ in versions}
        cpus: dict[str, list[float]] = {v: [] for v, _ in versions}
        commands: dict[str, list[float]] = {v: [] for v, _ in versions}
        parts = {}
        for _ in range(repeat):
            for v, p in versions:  # alternately, so that the load hits both alike
                row = fresh_in(p, _DEFAULT, spec, collective, size)
                times[v].append(row["seconds"])
                cpus[v].append(row["cpu_s"])
                if v == "new":
                    parts = row["parts"] if row["seconds"] <= statistics.median(times[v]) or not parts else parts
                commands[v].append(whole_command(p, spec, collective, size))
        medians = {v: statistics.median(t) for v, t in times.items()}
        cpu = {v: statistics.median(t) for v, t in cpus.items()}
        cmd = {v: statistics.median(t) for v, t in commands.items()}
        ratio = f"{medians['old'] / medians['new']:.2f}x" if "old" in medians else ""
        cpu_ratio = f"{cpu['old'] / cpu['new']:.2f}x" if "old" in cpu else ""
        cells = " ".join(f"{medians[v]:>8.2f} {cpu[v]:>8.2f} {cmd[v]:>10.2f}" for v, _ in versions)
        shown = ", ".join(f"{key[:-2]} {value:.2f}" for key, value in parts.items())
        print(f"{spec + ' ' + collective + ' ' + size:32} {cells} {ratio:>6} {cpu_ratio:>6} {target if target else '':>7}  {shown}", flush=True)
        if target is not None and medians["new"] > target:
            misses.append(f"{spec} {collective} {size}: forestcoll() {medians['new']:.2f} s > {target:g} s")
    return misses


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="every suite topology in the comparison, a100:128, a100:64 in scaling")
    parser.add_argument("--reference", type=Path, default=None, help="a checkout of ForestColl's Python (never committed) to time side by side")
    parser.add_argument("--skip-scaling", action="store_true")
    parser.add_argument("--old", type=Path, default=None, help="an older chakra_collectives package's parent directory, timed alternately")
    parser.add_argument("--repeat", type=int, default=3, help="runs per speed case in section 6 (median)")
    parser.add_argument("--only-default", action="store_true", help="section 6 alone")
    args = parser.parse_args(argv)
    print("machine: 2 cores shared with other jobs; figures are medians where stated, ratios from one run\n")
    if args.only_default:
        misses = default(args.old, args.repeat)
        print()
        print("targets: all met" if not misses else "targets missed:\n  " + "\n  ".join(misses))
        return
    misses = exactness()
    print()
    misses += quality(SUITE)
    print()
    comparison(SUITE if args.full else [s for s in SUITE if load_topology(s).num_npus <= 128])
    print()
    misses += speed(args.reference, args.full)
    if not args.skip_scaling:
        print()
        scaling(args.full)
    print()
    misses += default(args.old, args.repeat)
    print()
    print("targets: all met" if not misses else "targets missed:\n  " + "\n  ".join(misses))


if __name__ == "__main__":
    main(sys.argv[1:])
