"""``chakra-coll synth``: synthesize a collective for a topology and write its Chakra ETs."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Optional

import typer
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from chakra_collectives.astra_sim import write_astra_sim_dir
from chakra_collectives.cli.app import command, console, err_console, print_json
from chakra_collectives.cli.handoff import print_astra_sim_dir
from chakra_collectives.converters.chakra_et import write_algorithm
from chakra_collectives.errors import InputError
from chakra_collectives.ir import Collective
from chakra_collectives.synth import DEFAULT_ALGORITHM, SynthesisResult, algorithm_names, synthesize
from chakra_collectives.topology import load_topology
from chakra_collectives.units import format_size, format_time_ns, parse_size


class _LateProgress:
    """A rich progress display that appears only once the work has taken more than ``delay`` s."""

    def __init__(self, enabled: bool, delay: float = 1.0) -> None:
        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=err_console, transient=True)
        self.task = self.progress.add_task("starting", total=None)
        self.started = False
        self.lock = threading.Lock()
        self.timer = threading.Timer(delay, self._start) if enabled else None

    def _start(self) -> None:
        with self.lock:
            if not self.started:
                self.started = True
                self.progress.start()

    def __enter__(self) -> "_LateProgress":
        if self.timer:
            self.timer.start()
        return self

    def step(self, name: str) -> None:
        self.progress.update(self.task, description=name)

    def __exit__(self, *exc: object) -> None:
        if self.timer:
            self.timer.cancel()
            with self.lock:
                if self.started:
                    self.progress.stop()
                self.started = True  # a timer firing late must not start it now


@command("synth")
def synth(
    topology: str = typer.Option(..., "--topology", "-t", help="Builder spec (torus3d:4x4x4, dgx:4x8, ...) or topology file (YAML/JSON, ASTRA-sim YAML, GraphML, edge list)."),
    collective: str = typer.Option("all-reduce", "--collective", "-c", help="all-gather, reduce-scatter, all-reduce (tacos); baselines also all-to-all, broadcast, reduce."),
    size: str = typer.Option("64MiB", "--size", "-s", help="Collective size (bytes of the larger per-rank buffer), e.g. 64MiB, 1GB, 4096."),
    chunks_per_npu: int = typer.Option(1, "--chunks-per-npu", "-k", help="Chunks each NPU's share is cut into (chunk = ceil(size / (NPUs * k)) bytes)."),
    algorithm: str = typer.Option(
        DEFAULT_ALGORITHM, "--algorithm", "-a",
        help=f"One of: {', '.join(algorithm_names())}. 'best' runs every applicable one (TACOS and the baselines) and keeps the fastest (predicted).",
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of TACOS's random tie-breaking."),
    trials: Optional[int] = typer.Option(
        None, "--trials",
        help="TACOS: try seeds seed..seed+trials-1 for each phase (and merge variant) and keep each phase's best. Default: 1 to 8, as many as fit 16384 (NPU, chunk) pairs.",
    ),
    root: int = typer.Option(0, "--root", help="Root rank of broadcast / reduce (tree)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write PREFIX.{rank}.et files (ASTRA-sim custom collective)."),
    network_model: str = typer.Option("tacos", "--network-model", help="Mode every candidate is timed (and best chooses) under: tacos (TACOS's link model: a link is held for latency + size/bw) or astra-sim (ASTRA-sim's congestion-aware model: latency pipelined, whole ns) -- on switches the two can pick different algorithms."),
    astra_sim: Optional[Path] = typer.Option(None, "--astra-sim", help="Also write DIR for ASTRA-sim: the ETs, system.json, network.yml, a microbenchmark workload, run.sh."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Synthesize a topology-aware collective (TACOS link-chunk matching), compare it with the classic algorithms, and write its ETs.

    By default (--algorithm best) TACOS and every applicable baseline are timed under the network model and the fastest is kept. Prints NPUs, links, chunks, the predicted time, the lower bounds and the efficiency (bound / predicted).

    Example: [bold]chakra-coll synth --topology torus3d:4x4x4 --collective all-reduce --size 64MiB --chunks-per-npu 4 -o out/ar[/bold]

    TACOS alone, more seeds: [bold]chakra-coll synth -t hypercube:4x4x4 -c all-gather -a tacos --trials 8[/bold]
    """
    coll = Collective.parse(collective)
    size_bytes = parse_size(size)
    if chunks_per_npu < 1:
        raise InputError(f"--chunks-per-npu must be positive, got {chunks_per_npu}")
    if trials is not None and trials < 1:
        raise InputError(f"--trials must be positive, got {trials}")
    topo = load_topology(topology)
    with _LateProgress(enabled=not as_json) as progress:
        result = synthesize(
            topo, coll, size_bytes, chunks_per_npu=chunks_per_npu, algorithm=algorithm, seed=seed, trials=trials, root=root,
            on_step=progress.step, network_model=network_model,
        )
        write_s = None
        if output is not None:
            progress.step("write ETs")
            started = time.perf_counter()
            write_algorithm(result.algorithm, output)
            write_s = time.perf_counter() - started
    summary = result.to_json()
    summary["et_write_s"] = write_s
    summary["output"] = None if output is None else f"{output}.{{rank}}.et"
    handoff = None if astra_sim is None else write_astra_sim_dir(astra_sim, topo, result.algorithm)
    summary["astra_sim"] = None if handoff is None else handoff.as_dict()
    if as_json:
        print_json(summary)
        return
    _print_summary(result, summary)
    if handoff is not None:
        print_astra_sim_dir(handoff)


def _print_summary(result: SynthesisResult, summary: dict) -> None:
    algo = result.algorithm
    topo = result.topology
    switches = f", {topo.num_switches} switch(es)" if topo.num_switches else ""
    console.print(f"[bold]{algo.collective.value}[/bold] of {format_size(algo.size_bytes)} on [bold]{topo.name}[/bold] with {result.algorithm_name}")
    table = Table(show_header=False, show_edge=False, pad_edge=False, box=None)
    table.add_column(style="dim")
    table.add_column()
    table.add_row("network", f"{topo.num_npus} NPUs{switches}, {len(topo.links)} links; {result.switch_handling}")
    per_npu = f"{algo.chunk_count // algo.num_ranks} per NPU" if algo.chunk_count % algo.num_ranks == 0 else "pipelined pieces"
    table.add_row("chunks", f"{algo.chunk_count} ({per_npu}) of {format_size(algo.chunk_bytes())}; {algo.num_ops:,} operations")
    table.add_row("predicted", format_time_ns(result.predicted_ns) + f" (network model, {result.network_model} mode)")
    if result.bounds is not None:
        b = result.bounds
        table.add_row("bounds", f"ingress {format_time_ns(b.ingress_ns)}, cut {format_time_ns(b.cut_ns)}, latency {format_time_ns(b.latency_ns)}")
        table.add_row("efficiency", f"{result.efficiency:.3f} (best bound {format_time_ns(b.best_ns)} / predicted; any algorithm)")
        if b.reduce_scatter_all_gather_ns is not None:
            table.add_row(
                "",
                f"{result.reduce_scatter_all_gather_efficiency:.3f} against reduce-scatter + all-gather algorithms "
                f"(bound {format_time_ns(b.reduce_scatter_all_gather_ns)}, design.md)",
            )
    if result.candidates:
        shown = []
        for c in result.candidates:
            if c.name == result.algorithm_name:
                continue
            if c.skipped is not None:
                shown.append(f"{c.name} not tried: {c.skipped.split(' (')[0]} > --max-memory")
            else:
                shown.append(f"{c.name} {format_time_ns(c.predicted_ns)}" if c.predicted_ns is not None else f"{c.name} >= {format_time_ns(c.at_least_ns)}")
        table.add_row("chosen", f"{result.algorithm_name}, fastest of {len(result.candidates)} (others: {', '.join(shown)})")
    if result.phase_seeds:
        names = {Collective.ALL_GATHER: ["all-gather"], Collective.REDUCE_SCATTER: ["reduce-scatter"]}.get(algo.collective, ["reduce-scatter", "all-gather"])
        phases = "; ".join(f"{p}: seed {s}, merge ratio {r:g}" for p, s, r in zip(names, result.phase_seeds, result.phase_latency_ratios))
        table.add_row("tacos", f"{phases} (best of {result.trials} trial(s) per phase)")
    table.add_row("synthesis", f"{result.synthesis_s:.3f} s (prediction {result.predict_s:.3f} s)")
    if summary["et_write_s"] is not None:
        table.add_row("written", f"{summary['output']} ({algo.num_ranks} files) in {summary['et_write_s']:.3f} s")
    console.print(table)
