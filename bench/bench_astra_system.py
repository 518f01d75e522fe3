"""How long the model of ASTRA-sim takes (``replay --mode astra-sim --system``).

Data-parallel steps (8 layers, 8 MiB gradients) on two-dimension networks [Ring a, Switch b]
under the congestion-unaware backend, native ring per dimension, HGX-like system settings
(splits 4, 2 active chunks, localBWAware), and the 8-NPU microbenchmarks on Ring 8. Each case
is run ``--repeat`` times (default 3); the median wall time and the events per second are
printed. The model simulates every message ASTRA-sim simulates, so its time grows with
messages: NPUs x dimension sizes x splits x layers.

``--commands N ...`` times whole commands on the N-rank ring all-reduce microbenchmark (1 MiB,
custom ring ETs) that ``synth -t ring:N -a ring -c all-reduce -s 1MiB --astra-sim DIR`` writes,
each in a fresh process (wall, CPU, peak RSS): ``synth -o`` and ``synth --astra-sim`` of the same
algorithm (their ratio: target <= 1.5) and ``replay --network-model astra-sim --system`` of the
directory (target at 1,024: <= 12 s, <= 2 GB). Then its parts in this process: reading the
workload and the custom ETs (from the columns ``synth --astra-sim`` keeps beside them, and
decoded with that file put aside), the model timed level by level (``simulate``, reading included)
and -- up to ``--events-up-to`` ranks (default 256; 4.35 GB at 1,024) -- the event simulation it
replaces (``method="events"``), with their ratio. Run 1,024 ranks under the machine's big-run
lock.

``--before TREE`` also times the commands with an older checkout exported to TREE (see
:func:`before_env`), alternating with this one in each of ``--repeat`` runs, and prints the
same-run after/before ratios.

Run: ``python bench/bench_astra_system.py [--repeat N] [--large] [--commands N ... [--before TREE]]``
(``--large`` adds 32x32 NPUs, about two minutes).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from timing import whole_command

from chakra_collectives.astra_system import SystemConfig, simulate
from chakra_collectives.astra_system.report import network_of
from chakra_collectives.converters.astra_sim import AnalyticalNetwork, Dimension
from chakra_collectives.converters.chakra_et.columns_file import columns_path
from chakra_collectives.converters.chakra_et.workload_reader import read_workload
from chakra_collectives.topology import load_topology
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


CLI = [sys.executable, "-m", "chakra_collectives"]


def before_env(tree: str | None) -> dict[str, dict[str, str] | None]:
    """The code versions to time: this checkout, and (``--before TREE``) an older one exported
    to TREE (``git archive main chakra_collectives converters | tar -x -C TREE`` and a link
    ``TREE/chakra_collectives/converters -> ../converters``), put first on ``PYTHONPATH``."""
    versions: dict[str, dict[str, str] | None] = {"after": None}
    if tree is not None:
        versions = {"before": {**os.environ, "PYTHONPATH": str(Path(tree).resolve())}, **versions}
    return versions


def median_figures(runs: list[tuple[float, float, float]]) -> tuple[float, float, float]:
    """Median wall, CPU and peak RSS of repeated runs."""
    return tuple(statistics.median(run[i] for run in runs) for i in range(3))  # type: ignore[return-value]


def whole_commands(ranks: int, events_up_to: int, repeat: int = 1, before: str | None = None) -> None:
    """Whole commands on the ``ranks``-rank ring all-reduce microbenchmark (medians of ``repeat``
    runs, each version in turn within a repeat: same-run before/after ratios), then their parts."""
    synth = ["synth", "-t", f"ring:{ranks}", "-a", "ring", "-c", "all-reduce", "-s", "1MiB"]
    workload = f"workload/all_reduce_{ranks}npus_1MB"
    versions = before_env(before)
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "astra"
        runs: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
        for _ in range(repeat):
            for version, env in versions.items():
                out = Path(tmp) / version
                commands = {  # run outside any checkout: `python -m` puts its working directory first on sys.path
                    "synth -o": ([*CLI, *synth, "-o", str(out / "plain" / "ar")], tmp),
                    "synth --astra-sim": ([*CLI, *synth, "--astra-sim", str(out / "astra")], tmp),
                    "replay --system": ([*CLI, "replay", workload, "-t", "network.yml", "--network-model", "astra-sim", "--system", "system.json", "--json"],
                                        str(out / "astra")),
                }
                for label, (arguments, cwd) in commands.items():
                    runs.setdefault((label, version), []).append(whole_command(arguments, cwd=cwd, env=env))
                if version == "after":
                    directory = out / "astra"
        figures = {key: median_figures(samples) for key, samples in runs.items()}
        print(f"\nring:{ranks} all-reduce 1 MiB, custom ring ETs: whole commands (fresh processes, medians of {repeat})")
        print(f"{'command':<22} {'version':<8} {'wall s':>8} {'CPU s':>8} {'peak MiB':>9}")
        for (label, version), (wall, cpu, peak) in figures.items():
            print(f"{label:<22} {version:<8} {wall:>8.2f} {cpu:>8.2f} {peak:>9.0f}")
        for version in versions:
            ratio = figures["synth --astra-sim", version][1] / figures["synth -o", version][1]
            print(f"{version}: synth --astra-sim / synth -o, CPU: {ratio:.2f}x (target <= 1.5)")
            wall, cpu, peak = figures["replay --system", version]
            print(f"{version}: replay --system {wall:.1f} s wall, {cpu:.1f} s CPU, {peak / 1024:.2f} GiB (target at 1,024 ranks: <= 12 s, <= 2 GB)")
        if before is not None:
            for label in ("synth -o", "synth --astra-sim", "replay --system"):
                old, new = figures[label, "before"], figures[label, "after"]
                print(f"after / before, {label}: wall {new[0] / old[0]:.2f}x, CPU {new[1] / old[1]:.2f}x, peak {new[2] / old[2]:.2f}x")
        parts: dict[str, float] = {}
        started = time.perf_counter()
        work = read_workload(directory / workload)
        parts["read the workload"] = time.perf_counter() - started
        custom_prefix = directory / "collectives" / "all_reduce"
        started = time.perf_counter()
        read_workload(custom_prefix)
        parts["read the custom ETs" + (" (kept columns)" if columns_path(custom_prefix).exists() else "")] = time.perf_counter() - started
        if columns_path(custom_prefix).exists():
            aside = columns_path(custom_prefix).rename(Path(tmp) / "aside.npz")
            started = time.perf_counter()
            read_workload(custom_prefix)
            parts["decode the custom ETs (columns file put aside)"] = time.perf_counter() - started
            aside.rename(columns_path(custom_prefix))
        network = network_of(load_topology(str(directory / "network.yml")))
        config = SystemConfig.from_file(directory / "system.json")
        started = time.perf_counter()
        levels = simulate(work, network, config, custom_base=directory)
        parts[f"simulate ({levels.method}; reads the custom ETs)"] = time.perf_counter() - started
        if ranks <= events_up_to:
            started = time.perf_counter()
            events = simulate(work, network, config, custom_base=directory, method="events")
            parts["simulate (events; the same reading)"] = time.perf_counter() - started
            assert events.finish_ns == levels.finish_ns
        print(f"parts, this process ({levels.makespan_ns:,} ns predicted):")
        for label, seconds in parts.items():
            print(f"  {label:<44} {seconds:>8.2f} s")
        if ranks <= events_up_to:
            reading = next(seconds for label, seconds in parts.items() if label.startswith("read the custom ETs"))
            model = [parts[label] - reading for label in parts if label.startswith("simulate")]
            print(f"  the model without reading: events / levels = {model[1]:.2f} s / {model[0]:.2f} s = {model[1] / model[0]:.1f}x")


def main(argv: list[str]) -> None:
    repeat = int(argv[argv.index("--repeat") + 1]) if "--repeat" in argv else 3
    large = "--large" in argv
    if "--commands" in argv:
        events_up_to = int(argv[argv.index("--events-up-to") + 1]) if "--events-up-to" in argv else 256
        sizes = []
        for argument in argv[argv.index("--commands") + 1 :]:
            if not argument.isdigit():
                break
            sizes.append(int(argument))
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores: compare rows of one run")
        for ranks in sizes:
            whole_commands(ranks, events_up_to, repeat, argv[argv.index("--before") + 1] if "--before" in argv else None)
        return
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
            median = statistics.median(times)
            rate = f"{result.events / median:>10,.0f}" if result.method == "events" else f"{'(levels)':>10}"
            print(f"{label:<48} {result.makespan_ns:>14,} {median:>9.2f} {rate}", flush=True)
    print("(medians of", repeat, "runs; the machine is shared: compare rows of one run, not runs)")


if __name__ == "__main__":
    main(sys.argv[1:])
