"""gridpipe against TACOS on 2-D meshes and tori: efficiency, synthesis time, messages per link.

``python bench/bench_gridpipe.py [--sizes 64MiB,16MiB,4MiB] [--topologies torus2d:32x32,mesh2d:32x32] [--plans]``

Each case is synthesized with ``-a gridpipe`` and ``-a tacos`` at one chunk per NPU (All-Gather):
efficiency against the bound the summary prints, synthesis seconds, messages per direct link
and chunks per message (SENDs of the algorithm). ``--plans`` also times every plan of
:data:`~chakra_collectives.synth.gridpipe.VARIANTS` alone (the planner, no lowering): its
schedule's efficiency, seconds, messages per link (mean, busiest), the busiest link's load in
chunks and busy share, and the share of link time busy in each tenth of the run.

At 1,024 NPUs 16 MiB and 4 MiB give the chunk sizes of 64 MiB at 4,096 and 16,384 NPUs
(16 KiB, 4 KiB). 4,096-NPU cases need ``flock /work/bigrun.lock`` on a shared machine for the
whole synthesis (the planner alone stays under 0.7 GB). Figures of 2026-11-27 are in the README
(*At scale*).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from chakra_collectives.ir import OpKind
from chakra_collectives.synth import synthesize
from chakra_collectives.synth.channels import build_channels
from chakra_collectives.synth.gridpipe import VARIANTS, grid_of, plan_all_gather
from chakra_collectives.topology import load_topology
from chakra_collectives.units import parse_size


def synthesized(spec: str, size: str, algorithm: str) -> str:
    topology = load_topology(spec)
    result = synthesize(topology, "all-gather", size, algorithm=algorithm, chunks_per_npu=1, bounds="auto")
    ops = result.algorithm.ops
    sends = ops.kind == OpKind.SEND
    links = sum(1 for link in topology.links if link.src < topology.num_npus and link.dst < topology.num_npus)
    return (
        f"{spec:15} {size:>6} {algorithm:9} eff {result.efficiency:.4f}  synthesis {result.synthesis_s:6.1f} s  "
        f"msgs/link {sends.sum() / links:6.1f}  chunks/msg {ops.count[sends].mean():5.2f}"
    )


def plans(spec: str, size: str, bound_ns: float) -> list[str]:
    topology = load_topology(spec)
    n = topology.num_npus
    channels = build_channels(topology, chunk_bytes=-(-parse_size(size) // n))
    lines = []
    for variant in VARIANTS:
        started = time.perf_counter()
        schedule = plan_all_gather(grid_of(topology), channels, 1, variant)
        seconds = time.perf_counter() - started
        t = schedule.time_ns
        load = np.bincount(schedule.channel, weights=schedule.count, minlength=channels.num_direct)
        messages = np.bincount(schedule.channel, minlength=channels.num_direct)
        busy = np.bincount(schedule.channel, weights=schedule.end - schedule.start, minlength=channels.num_direct)
        edges = np.linspace(0, t, 11)
        tenths = [
            np.clip(np.minimum(schedule.end, b) - np.maximum(schedule.start, a), 0, None).sum() / (channels.num_direct * (b - a))
            for a, b in zip(edges[:-1], edges[1:])
        ]
        lines.append(
            f"  plan {variant}: eff {bound_ns / t:.4f}  {seconds:.1f} s  msgs/link {messages.mean():.1f} (max {messages.max()})  "
            f"busiest link {load.max():.0f} chunks, busy {busy.max() / t:.3f}  tenths " + " ".join(f"{x:.2f}" for x in tenths)
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="64MiB,16MiB,4MiB")
    parser.add_argument("--topologies", default="torus2d:32x32,mesh2d:32x32")
    parser.add_argument("--plans", action="store_true", help="also time each plan alone")
    args = parser.parse_args()
    print(f"load {os.getloadavg()[0]:.1f}")
    for size in args.sizes.split(","):
        for spec in args.topologies.split(","):
            for algorithm in ("gridpipe", "tacos"):
                print(synthesized(spec, size, algorithm), flush=True)
            if args.plans:
                bound = synthesize(load_topology(spec), "all-gather", size, algorithm="ring", bounds="auto").bounds.best_ns
                print("\n".join(plans(spec, size, bound)), flush=True)


if __name__ == "__main__":
    main()
