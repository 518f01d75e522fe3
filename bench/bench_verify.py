"""Verification time of a 1M-node algorithm (issue: < 10 s), stage by stage."""

from __future__ import annotations

import sys

from chakra_collectives.ir import Collective
from chakra_collectives.synth.baselines import ring
from chakra_collectives.verify import verify_algorithm
from chakra_collectives.ir.execution import execute
from chakra_collectives.ir.matching import match_messages
from chakra_collectives.verify.races import find_race
from chakra_collectives.verify.semantics import run_symbolically
from chakra_collectives.ir.structure import structural_problems

from timing import median_seconds


def main(argv: list[str]) -> None:
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
