"""Process groups, patterns and all-to-all (issue 24).

All-to-all tables (TACOS's forwarding matcher, :mod:`chakra_collectives.synth.forwarding`):

* ``all_to_all_512_table``: the 512-NPU all-to-all (torus3d:8x8x8, 64 MiB per rank) synthesized
  and written by one ``chakra-coll synth`` command, then verified by ``chakra-coll verify``:
  wall and CPU seconds, peak RSS, predicted time and efficiency against the best bound (targets:
  synth + verify <= 70 s, efficiency >= 0.85; PCCL took 11.68 min to synthesize it);
* ``all_to_all_suite_table``: efficiency against the exact multicommodity-flow bound on every
  suite topology up to 64 NPUs (target >= 0.90), K chosen by predicted time as ``synth`` does.

Run from the repository root: ``.venv/bin/python bench/bench_groups.py [--repeat N] [--skip-512]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from bench_scale import BIN, measured

from chakra_collectives.ir import Collective
from chakra_collectives.synth import synthesize
from chakra_collectives.topology import load_topology

SIZE = 64 * 2**20
A2A_SUITE = ["ring:8", "ring:64", "mesh2d:4x4", "mesh2d:8x8", "torus2d:4x4", "torus2d:8x8", "torus3d:4x4x4", "hypercube:4x4x4",
             "hetero-mesh2d:8x8", "switch:16", "switch:64", "dgx:4x8", "fully-connected:8"]
"""The suite topologies of up to 64 NPUs (bench_synth's, and small tori and switches)."""
A2A_TARGET = 0.90


def all_to_all_512_table(repeat: int) -> bool:
    """Whole-command time, peak memory and efficiency of the 512-NPU all-to-all; True if on target."""
    print(f"512-NPU all-to-all (torus3d:8x8x8, 64 MiB per rank), median of {repeat}; load {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as folder:
        prefix = Path(folder) / "a2a"
        synth = measured([BIN, "synth", "-t", "torus3d:8x8x8", "-c", "all-to-all", "-s", "64MiB", "-a", "tacos", "-o", prefix, "--json"], repeat=repeat)
        summary = json.loads(synth["stdout"])
        verify = measured([BIN, "verify", prefix, "--json"], repeat=repeat)
        verdict = json.loads(verify["stdout"])
    total = synth["wall_s"] + verify["wall_s"]
    efficiency = summary["efficiency"]
    print(f"{'step':8} {'wall s':>8} {'CPU s':>8} {'peak MiB':>9}")
    for name, run in (("synth", synth), ("verify", verify)):
        print(f"{name:8} {run['wall_s']:8.1f} {run['cpu_s']:8.1f} {run['peak_mib']:9.0f}")
    print(
        f"total {total:.1f} s (target <= 70 s; PCCL 700.8 s); {summary['operations']:,} operations; synthesis {summary['synthesis_s']:.1f} s, "
        f"prediction {summary['predict_s']:.1f} s, bounds {summary['bounds_s']:.1f} s, ET write {summary['et_write_s']:.1f} s; "
        f"predicted {summary['predicted_ns'] / 1e3:.1f} us, best bound {summary['bounds']['best_ns'] / 1e3:.1f} us, "
        f"efficiency {efficiency:.3f} (target >= 0.85); verified: {verdict['ok']}"
    )
    return total <= 70 and efficiency >= 0.85 and verdict["ok"]


def all_to_all_suite_table() -> list[str]:
    """Efficiency against the exact flow bound on the suite up to 64 NPUs; the topologies below target."""
    header = f"{'topology':20} {'NPUs':>4} {'K':>2} {'TACOS us':>9} {'flow us':>9} {'cut us':>9} {'eff':>6} {'direct us':>10} {'synth s':>8}"
    print(header)
    print("-" * len(header))
    misses = []
    for spec in A2A_SUITE:
        topology = load_topology(spec)
        started = time.perf_counter()
        found = synthesize(topology, Collective.ALL_TO_ALL, SIZE, algorithm="tacos", bounds="exact")
        seconds = time.perf_counter() - started
        direct = synthesize(topology, Collective.ALL_TO_ALL, SIZE, algorithm="direct", bounds="none", chunks_per_npu=1)
        bounds = found.bounds
        flow = bounds.flow_ns
        efficiency = (flow or bounds.best_ns) / found.predicted_ns
        print(
            f"{spec:20} {topology.num_npus:4} {found.chunks_per_npu:2} {found.predicted_ns / 1e3:9.1f} "
            f"{(flow or float('nan')) / 1e3:9.1f} {bounds.cut_ns / 1e3:9.1f} {efficiency:6.3f} {direct.predicted_ns / 1e3:10.1f} {seconds:8.2f}"
        )
        if flow is None or efficiency < A2A_TARGET:
            misses.append(spec)
    print(f"target: efficiency >= {A2A_TARGET} against the exact flow bound; below: {', '.join(misses) or 'none'}")
    return misses


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="runs of the 512-NPU command (median)")
    parser.add_argument("--skip-512", action="store_true", help="only the suite table")
    args = parser.parse_args(argv)
    misses = all_to_all_suite_table()
    on_target = True if args.skip_512 else all_to_all_512_table(args.repeat)
    if misses or not on_target:
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1:])
