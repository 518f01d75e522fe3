"""``chakra-coll demo``: the main job on a built-in default, with a readable summary."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from chakra_collectives.cli.app import command, console, err_console, print_json
from chakra_collectives.cli.handoff import print_astra_sim_dir
from chakra_collectives.demo import DemoResult, run_demo
from chakra_collectives.units import format_size, format_time_ns


@command("demo")
def demo(
    out: Path = typer.Option(Path("demo-out"), "--out", "-o", help="Folder for every file the demo writes."),
    as_json: bool = typer.Option(False, "--json", help="Print the results as JSON."),
) -> None:
    """Synthesize TACOS, ring and direct all-reduces for a 2-server topology, verify them, replay a training iteration with each, compare.

    Writes the topology file, the workload, the algorithms' ETs, a Perfetto trace, pictures and
    a directory ASTRA-sim runs, and says what to try next.

    Example: [bold]chakra-coll demo --out demo-out[/bold]
    """
    with err_console.status("demo: starting...") as status:
        result = run_demo(out, on_step=lambda name: status.update(f"demo: {name}..."))
    if as_json:
        print_json(result.as_dict())
        return
    _print(result)


def _print(result: DemoResult) -> None:
    topo = result.topology
    bandwidths = sorted({l.bandwidth_gbps for l in topo.links}, reverse=True)
    console.print("[bold]chakra-coll demo[/bold]: topology-aware all-reduce vs ring and direct, in a data-parallel training iteration")
    facts = Table(show_header=False, show_edge=False, pad_edge=False, box=None)
    facts.add_column(style="dim")
    facts.add_column()
    facts.add_row("topology", f"{topo.name}: {topo.num_npus} NPUs, {len(topo.links)} links of {' / '.join(f'{b:g}' for b in bandwidths)} GB/s ({result.topology_file})")
    tacos = result.run("tacos")
    sizes = sorted({c.size_bytes for c in tacos.replay.collectives})
    compute = tacos.replay.ranks[0].compute_ns
    facts.add_row(
        "workload",
        f"{result.model_layers} layers on {len(tacos.replay.ranks)} ranks: {len(tacos.replay.collectives)} gradient all-reduces of "
        f"{format_size(sizes[0])}-{format_size(sizes[-1])} overlapping the backward pass; compute {format_time_ns(compute)} per rank ({result.workload})",
    )
    console.print(facts)

    size = tacos.synthesis.algorithm.size_bytes
    table = Table(title=f"all-reduce of {format_size(size)} alone", show_edge=False, pad_edge=False, title_justify="left")
    for column in ("algorithm", "predicted", "best bound", "efficiency", "verified"):
        table.add_column(column, justify="right" if column in ("predicted", "best bound", "efficiency") else "left")
    for run in result.runs:
        s = run.synthesis
        verdict = "[green]✓ verified[/green]" if run.report.ok else "[red]✗ NOT verified[/red]"
        table.add_row(run.name, format_time_ns(s.predicted_ns), format_time_ns(s.bounds.best_ns), f"{s.efficiency:.2f}", verdict)
    console.print(table)
    console.print(f"ETs:      {result.out}/collectives/all_reduce_{{{','.join(r.name for r in result.runs)}}}.{{rank}}.et (written, read back, then verified)", soft_wrap=True)

    table = Table(title="training iteration replayed with each", show_edge=False, pad_edge=False, title_justify="left")
    for column in ("algorithm", "iteration", "exposed comm", "tacos speedup"):
        table.add_column(column, justify="left" if column == "algorithm" else "right")
    for run in result.runs:
        exposed = max(r.exposed_communication_ns for r in run.replay.ranks)
        speedup = "" if run.name == "tacos" else f"{result.speedup(run.name):.2f}x"
        table.add_row(run.name, format_time_ns(run.replay.total_ns), format_time_ns(exposed), speedup)
    console.print(table)
    best = max((r for r in result.runs if r.name != "tacos"), key=lambda r: -r.replay.total_ns)
    console.print(
        f"TACOS makes the iteration [bold]{result.speedup(best.name):.2f}x[/bold] faster than the best baseline ({best.name}) "
        f"and {result.speedup('ring'):.2f}x faster than ring."
    )
    console.print(f"trace:    {result.trace} (open in https://ui.perfetto.dev)")
    console.print(f"replay:   {result.replay_json}")
    if result.pictures:
        console.print(f"pictures: {', '.join(str(p) for p in result.pictures)}")
    print_astra_sim_dir(result.astra_sim)
    console.print(f"done in {result.elapsed_s:.1f} s. Next, try:")
    t, w = result.topology_file, result.workload
    for line in (
        f"chakra-coll synth -t {t} -c all-gather -s 64MiB -k 4 -o {result.out}/ag",
        f"chakra-coll verify {result.run('tacos').prefix}",
        f"chakra-coll replay {w} -t {t} -c all-reduce={result.run('tacos').prefix} --concurrency astra-sim",
        f"chakra-coll workload hybrid --tp 2 --dp 4 -o {result.out}/hybrid",
        f"chakra-coll plot algorithm {result.run('ring').prefix} -t {t} -o {result.out}/ring.png",
    ):
        console.print(f"  {line}", markup=False, soft_wrap=True)
