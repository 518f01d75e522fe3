"""Verification time of a 1M-node algorithm (issue: < 10 s), stage by stage.

``--bfb-hypercube D``: instead, BFB's all-reduce on ``hypercube:D`` as the search makes it (32 MiB,
D chunks per NPU: at D = 10, 32.6M buffer slots and 5.18M operations), verified once: seconds,
the estimate it was allowed on, and its peak resident memory above what was held before.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from chakra_collectives.ir import Collective
from chakra_collectives.synth.baselines import ring
from chakra_collectives.verify import verify_algorithm
from chakra_collectives.ir.execution import execute
from chakra_collectives.ir.matching import match_messages
from chakra_collectives.verify.races import find_race
from chakra_collectives.verify.semantics import run_symbolically
from chakra_collectives.ir.structure import structural_problems

from timing import median_seconds


def _status(key: str) -> float:
    """A /proc/self/status figure in MiB (VmRSS: held now, VmHWM: the peak since the last reset)."""
    return next(int(line.split()[1]) / 1024 for line in open("/proc/self/status") if line.startswith(key))


def bfb_hypercube(dimension: int) -> None:
    from chakra_collectives.synth.registry import SynthesisOptions, get
    from chakra_collectives.topology import load_topology
    from chakra_collectives.verify.footprint import verification_estimate

    started = time.perf_counter()
    algo = get("bfb").make(load_topology(f"hypercube:{dimension}"), Collective.ALL_REDUCE, 2**dimension, SynthesisOptions(size_bytes=32 * 2**20)).algorithm
    estimate = verification_estimate(algo)
    print(f"BFB all-reduce on hypercube:{dimension}: {algo.num_ops:,} operations, {algo.chunk_count:,} chunks "
          f"(synthesis {time.perf_counter() - started:.1f} s); estimate {estimate.nbytes / 2**30:.2f} GiB ({estimate.work})")
    held = _status("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # the peak-RSS mark starts again from here
    started, cpu = time.perf_counter(), time.process_time()
    report = verify_algorithm(algo)
    print(f"verify_algorithm: {time.perf_counter() - started:.1f} s ({time.process_time() - cpu:.1f} CPU s), ok {report.ok}; "
          f"peak {(_status('VmHWM') - held) / 1024:.2f} GiB above the {held:.0f} MiB held")


def main(argv: list[str]) -> None:
    if argv[:1] == ["--bfb-hypercube"]:
        bfb_hypercube(int(argv[1]))
        return
    ranks = int(argv[0]) if argv else 448  # ring all-reduce: 5 (N-1) N operations = 1,001,280 at N = 448
    algo = ring(Collective.ALL_REDUCE, ranks, size_bytes=ranks * 2**20)
    print(f"ring all-reduce over {ranks} ranks: {algo.num_ops:,} nodes; medians of 3 runs")
    total, samples = median_seconds(lambda: verify_algorithm(algo), repeat=3, warmup=0)
    assert verify_algorithm(algo).ok
    partner = match_messages(algo).partner
    order = execute(algo, partner).order
    stages = [
        ("structure", lambda: structural_problems(algo)),
        ("matching", lambda: match_messages(algo)),
        ("deadlock, rendezvous sends", lambda: execute(algo, partner, semantics="rendezvous")),
        ("semantics, one order (eager)", lambda: run_symbolically(algo, partner, order="fifo")),
        ("happens-before race check", lambda: find_race(algo, partner, order)),
    ]
    print(f"{'stage':<32} {'seconds':>8}")
    for name, run in stages:
        seconds, _ = median_seconds(run, repeat=3, warmup=0)
        print(f"{name:<32} {seconds:>8.2f}")
    print(f"{'verify_algorithm (all stages)':<32} {total:>8.2f}   target < 10 s   (samples {', '.join(f'{s:.2f}' for s in samples)})")
    print(f"nodes verified per second: {algo.num_ops / total:,.0f}")


if __name__ == "__main__":
    main(sys.argv[1:])
