"""How far every producer is from the link model's optimum: ``-a milp`` on the small suite.

``python bench/bench_optimality.py [--size SIZE] [--chunks 1,2] [--time-limit S] [--collectives ag,rs,ar]``

For each small fabric and collective: the MILP's optimum (:mod:`chakra_collectives.synth.milp`,
proved over its discretization; one-chunk messages at K chunks per NPU -- the best of the K
given is the reference ``opt``), each registered producer's predicted time (``synthesize``
with its own defaults: chunk count chosen by predicted time) as a ratio to ``opt``, and
``best``'s choice. A ratio below 1 is a producer using what the MILP's class of schedules
excludes (merged or more chunks; for All-Reduce, overlapping phases). Targets: the MILP
proved optimal (gap 0) on every case within 60 s; ``best`` within 3% of it.
"""

from __future__ import annotations

import argparse
import os
import time

from chakra_collectives.errors import ChakraCollError
from chakra_collectives.ir import Collective
from chakra_collectives.synth import synthesize
from chakra_collectives.synth.registry import get, synthesizers
from chakra_collectives.topology import load_topology
from chakra_collectives.units import parse_size

SUITE = ["ring:4", "ring:8", "mesh2d:3x3", "torus2d:3x3", "torus2d:4x4", "hypercube:2x2x2", "switch:8", "dgx:2x4", "a100:1", "hetero-mesh2d:3x3"]
COLLECTIVES = {"ag": Collective.ALL_GATHER, "rs": Collective.REDUCE_SCATTER, "ar": Collective.ALL_REDUCE}
BEST_TARGET = 1.03


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="64MiB")
    parser.add_argument("--chunks", default="1,2")
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--collectives", default="ag,rs,ar")
    parser.add_argument("--topologies", default=",".join(SUITE))
    args = parser.parse_args(argv)
    size = parse_size(args.size)
    producers = [s.name for s in synthesizers() if s.name != "milp"]
    load = os.getloadavg()[0]
    print(f"size {args.size}; MILP at K = {args.chunks} chunks per NPU, time limit {args.time_limit:g} s each; load {load:.2f}")
    header = f"{'topology':18} {'coll':4} {'K':>2} {'opt us':>9} {'gap':>5} {'MILP s':>7} {'vars':>7} " + " ".join(f"{p:>10}" for p in producers) + f" {'best':>17}"
    print(header)
    misses = []
    for spec in args.topologies.split(","):
        topology = load_topology(spec)
        for short in args.collectives.split(","):
            collective = COLLECTIVES[short]
            exact = []
            for k in (int(x) for x in args.chunks.split(",")):
                try:
                    found = synthesize(topology, collective, size, algorithm="milp", chunks_per_npu=k, bounds="none", time_limit_s=args.time_limit)
                except ChakraCollError as refused:
                    print(f"{'':18} {short:4} {k:>2} refused: {refused}")
                    continue
                exact.append((found.details["milp"]["optimum_ns"], k, found))
            if not exact:
                continue
            optimum, k, found = min(exact, key=lambda e: e[0])
            facts = found.details["milp"]
            if not facts["optimal"] or facts["solve_s"] > 60:
                misses.append(f"{spec} {short}: MILP gap {facts['gap']:.3f} after {facts['solve_s']:.1f} s")
            ratios = []
            for name in producers:
                if not get(name).supports(collective, topology.num_npus):
                    ratios.append(f"{'-':>10}")
                    continue
                try:
                    theirs = synthesize(topology, collective, size, algorithm=name, bounds="none").predicted_ns
                    ratios.append(f"{theirs / optimum:>10.3f}")
                except ChakraCollError:
                    ratios.append(f"{'n/a':>10}")
            best = synthesize(topology, collective, size, bounds="none")
            ratio = best.predicted_ns / optimum
            if ratio > BEST_TARGET:
                misses.append(f"{spec} {short}: best ({best.algorithm_name}) {ratio:.3f} of the MILP optimum")
            print(
                f"{spec:18} {short:4} {k:>2} {optimum / 1e3:>9.1f} {facts['gap']:>5.2f} {facts['solve_s']:>7.1f} {facts['variables']:>7,} "
                + " ".join(ratios) + f" {best.algorithm_name:>11} {ratio:.3f}",
                flush=True,
            )
    print("targets met" if not misses else "missed:\n  " + "\n  ".join(misses))
    return 0


if __name__ == "__main__":
    import sys

    started = time.perf_counter()
    code = main(sys.argv[1:])
    print(f"({time.perf_counter() - started:.0f} s)")
    raise SystemExit(code)
