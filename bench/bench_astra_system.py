"""How long the model of ASTRA-sim takes (``replay --mode astra-sim --system``).

Data-parallel steps (8 layers, 8 MiB gradients) on two-dimension networks [Ring a, Switch b]
under the congestion-unaware backend, native ring per dimension, HGX-like system settings
(splits 4, 2 active chunks, localBWAware), and the 8-NPU microbenchmarks on Ring 8. Each case
is run ``--repeat`` times (default 3); the median wall time and the events per second are
printed. The model simulates every message ASTRA-sim simulates, so its time grows with
messages: NPUs x dimension sizes x splits x layers.

Run: ``python bench/bench_astra_system.py [--repeat N] [--large]`` (``--large`` adds 32x32 NPUs,
about two minutes).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from chakra_collectives.astra_system import SystemConfig, simulate
from chakra_collectives.converters.astra_sim import AnalyticalNetwork, Dimension
from chakra_collectives.workload import data_parallel, microbenchmark
from chakra_collectives.workload.spec import uniform_model

HGX_LIKE = {
    "scheduling-policy": "LIFO", "preferred-dataset-splits": 4, "active-chunks-per-dimension": 2,
    "collective-optimization": "localBWAware", "local-mem-bw": 1600, "endpoint-delay": 10,
    **{f"{c}-implementation": ["ring", "ring"] for c in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")},
}
MEASURED_RING = {
    "preferred-dataset-splits": 1, "local-mem-bw": 50,
    **{f"{c}-implementation": ["ring"] for c in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")},
}


def cases(large: bool):
    ring8 = AnalyticalNetwork((Dimension("Ring", 8, 50.0, 500.0),))
    for collective in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all"):
        yield f"{collective} 8 NPUs 1 MiB, Ring 8", microbenchmark(collective, 8, 2**20), ring8, MEASURED_RING, "aware"
    shapes = [(8, 8), (16, 16)] + ([(32, 32)] if large else [])
    for a, b in shapes:
        net = AnalyticalNetwork((Dimension("Ring", a, 50.0, 500.0), Dimension("Switch", b, 25.0, 700.0)))
        model = uniform_model(layers=8, forward="20us", gradient="8MiB")
        yield f"data-parallel step, {a * b} NPUs [Ring {a}, Switch {b}]", data_parallel(model, a * b), net, HGX_LIKE, "unaware"


def main(argv: list[str]) -> None:
    repeat = int(argv[argv.index("--repeat") + 1]) if "--repeat" in argv else 3
    large = "--large" in argv
    print(f"{'case':<48} {'predicted ns':>14} {'median s':>9} {'events/s':>10}")
    with tempfile.TemporaryDirectory() as tmp:
        for label, workload, network, system, backend in cases(large):
            prefix = Path(tmp) / label.split()[0]
            workload.write(prefix)
            config = SystemConfig.from_dict(system)
            times = []
            for _ in range(repeat):
                started = time.perf_counter()
                result = simulate(prefix, network, config, backend=backend)
                times.append(time.perf_counter() - started)
            events = result.events
            median = statistics.median(times)
            print(f"{label:<48} {result.makespan_ns:>14,} {median:>9.2f} {events / median:>10,.0f}", flush=True)
    print("(medians of", repeat, "runs; the machine is shared: compare rows of one run, not runs)")


if __name__ == "__main__":
    main(sys.argv[1:])
