"""TACOS's translated torus trees (synth/torus_trees.py): efficiency and planning time by torus size.

``python bench/bench_torus_trees.py [--sides 8,16,32,64,128] [--sizes 64MiB,16MiB] [--schedules] [--write-ranks M]``

For each square 2-D torus and All-Gather size (one chunk per NPU): the plan's time worked out
without its chunks (:func:`~chakra_collectives.synth.torus_trees.tree_time_ns`), its efficiency
against the fast lower bound, messages per link (the tree's depth: the torus's diameter), the
latency share of a link's time, the ceiling of every schedule that treats every NPU alike along
the trees' paths (:func:`~chakra_collectives.synth.torus_trees.translated_floor_ns`: the bound
over its floor, with the floor's messages per link by direction), and the CPU seconds of the
timing. ``--schedules`` also builds
each whole schedule (:func:`~chakra_collectives.synth.torus_trees.tree_all_gather`; its runs,
268M at 16,384 NPUs, are worked out as they are lowered): CPU seconds and the process's peak RSS
so far. ``--write-ranks M`` then writes the ET files of the first ``M`` ranks as ``synth -o``
does (lowered in parts, one writing process, into a temporary directory): CPU seconds, bytes,
and both projected to every rank (16,384 NPUs run under ``/work/bigrun.lock``: the plan peaks
above 2 GB). Figures of 2026-11-27 are in the README (*At scale*).
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

import numpy as np

from chakra_collectives.bounds import fast_lower_bounds
from chakra_collectives.converters.chakra_et import write_parts
from chakra_collectives.converters.chakra_et.writer import PART_OPS
from chakra_collectives.ir import Collective
from chakra_collectives.synth.channels import build_channels
from chakra_collectives.synth.lowering import lowered_in_parts
from chakra_collectives.synth.torus_trees import translated_floor_ns, translated_messages_floor, tree_all_gather, tree_template, tree_time_ns
from chakra_collectives.topology import torus2d
from chakra_collectives.units import parse_size


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def write_first_ranks(schedule, size: int, ranks: int) -> str:
    """Write the ET files of the first ``ranks`` ranks as ``synth -o`` would: CPU s, bytes, projected to all."""
    n = schedule.num_npus
    started = time.process_time()
    parts = lowered_in_parts(Collective.ALL_GATHER, [schedule], size_bytes=size)
    shared = time.process_time() - started
    with tempfile.TemporaryDirectory() as directory:
        started = time.process_time()
        paths = write_parts(parts.lower, parts.ops_per_rank[:ranks], Path(directory) / "ag", size_bytes=size, workers=1, part_ops=parts.part_ops(PART_OPS))
        spent = time.process_time() - started
        nbytes = sum(p.stat().st_size for p in paths)
    return (
        f"  {ranks} files {spent:.1f} s CPU, {nbytes / 2**20:.0f} MiB ({spent / ranks * 1e3:.1f} ms, {nbytes / ranks / 1024:.0f} KiB a rank; "
        f"all {n}: {spent * n / ranks:.0f} s CPU, {nbytes * n / ranks / 2**30:.2f} GiB), shared set-up {shared:.1f} s, peak {peak_mib():.0f} MiB"
    )


def row(side: int, size: int, schedules: bool, write_ranks: int = 0) -> str:
    topology = torus2d(side, side)
    n = side * side
    channels = build_channels(topology, chunk_bytes=-(-size // n))
    bound = fast_lower_bounds(topology, Collective.ALL_GATHER, size).best_ns
    started = time.process_time()
    time_ns = tree_time_ns(topology, channels, 1)
    timed = time.process_time() - started
    dr, dc, direction, _ = tree_template(side, side)
    hop = np.abs(dr) + np.abs(dc)
    messages = max(len(np.unique(hop[direction == d])) for d in range(4))  # one per hop count, up to the diameter
    latency = messages * float(channels.model.hop_ns([int(channels.direct_link[0])], 0)[0])
    ceiling = bound / max(bound, translated_floor_ns(topology, channels, 1))  # small chunks: the bound is latency
    line = (
        f"torus2d:{side}x{side} {size / 2**20:6.0f} MiB  eff {bound / time_ns:.4f}  {time_ns / 1e3:9.1f} us  msgs/link <= {messages}  latency {latency / time_ns:.1%}"
        f"  translated ceiling {ceiling:.4f} ({translated_messages_floor(side, side)} msgs)  timed {timed:.2f} s"
    )
    if schedules or write_ranks:
        started = time.process_time()
        schedule = tree_all_gather(topology, channels, 1)
        built = time.process_time() - started
        assert schedule.time_ns == time_ns
        line += f"  schedule {built:.1f} s, {schedule.num_transfers} messages, peak {peak_mib():.0f} MiB"
        if write_ranks:
            line += "\n" + write_first_ranks(schedule, size, min(write_ranks, n))
    return line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sides", default="8,16,32,64,128")
    parser.add_argument("--sizes", default="64MiB,16MiB")
    parser.add_argument("--schedules", action="store_true")
    parser.add_argument("--write-ranks", type=int, default=0, help="write the first M ranks' ET files (implies --schedules)")
    args = parser.parse_args()
    for side in map(int, args.sides.split(",")):
        loads = np.bincount(tree_template(side, side)[2], minlength=4).tolist()
        print(f"torus2d:{side}x{side}: chunks a link carries by direction {loads} (share {(side * side - 1) / 4:g})")
        for size in args.sizes.split(","):
            print(row(side, parse_size(size), args.schedules, args.write_ranks), flush=True)


if __name__ == "__main__":
    main()
