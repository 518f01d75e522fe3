"""``chakra-coll demo``: the main job on a built-in default, with a readable summary."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from chakra_collectives.cli.app import command, console, err_console, invocation, print_json, say
from chakra_collectives.cli.options import JSON, merged
from chakra_collectives.cli.progress_view import showing_progress
from chakra_collectives.cli.tables import print_table

SCHEMA_VERSION = 1
"""Version of ``chakra-coll demo --json`` (``schemas/demo.schema.json``)."""


@command("demo")
def demo(
    output: Optional[Path] = typer.Option(None, "--output", "-o", metavar="DIR", help="Folder for every file the demo writes. Default: demo-out."),
    old_out: Optional[Path] = typer.Option(None, "--out", hidden=True, help="Deprecated: --output."),
    as_json: bool = JSON,
) -> None:
    """The main job on a built-in example: synthesize, verify, replay, compare, draw.

    On 2 servers x 4 GPUs, synthesizes a TACOS all-reduce and every applicable baseline,
    writes them as ETs, verifies them, replays a data-parallel training iteration with each
    and compares; writes a Perfetto trace, pictures and a directory ASTRA-sim runs, and says
    what to try next.

    \b
    Example:
      chakra-coll demo --output demo-out
    """
    from chakra_collectives.demo import run_demo

    out = merged(output, "--output", old_out, "--out", Path("demo-out"))
    with showing_progress(err_console, "demo", enabled=not as_json, delay_s=0.2):
        result = run_demo(out)
    if as_json:
        print_json({"schema_version": SCHEMA_VERSION, **result.as_dict()})
        return
    _print(result)


def _print(result: Any) -> None:
    from chakra_collectives.units import format_size, format_time_ns

    topo = result.topology
    bandwidths = sorted({l.bandwidth_gbps for l in topo.links}, reverse=True)
    tacos = result.run("tacos")
    sizes = sorted({c.size_bytes for c in tacos.replay.collectives})
    say("chakra-coll demo: topology-aware all-reduces (TACOS, ForestColl) against the classic ones, alone and in a data-parallel training iteration", style="bold")
    say(f"{topo.name}: {topo.num_npus} NPUs, {len(topo.links)} links of {' / '.join(f'{b:g}' for b in bandwidths)} GB/s ({result.topology_file})", prefix="topology  ")
    say(
        f"{result.model_layers} layers on {len(tacos.replay.ranks)} ranks: {len(tacos.replay.collectives)} gradient all-reduces of "
        f"{format_size(sizes[0])} to {format_size(sizes[-1])} overlapping the backward pass; compute {format_time_ns(tacos.replay.ranks[0].compute_ns)} "
        f"per rank ({result.workload})",
        prefix="workload  ",
    )
    console.print()
    size = tacos.synthesis.algorithm.size_bytes
    rows = []
    for run in result.runs:
        s = run.synthesis
        rows.append([run.name, str(s.chunks_per_npu), format_time_ns(s.predicted_ns), f"{s.efficiency:.2f}", "✓ verified" if run.report.ok else "✗ NOT verified"])
    print_table(
        ["algorithm", "K", "predicted", "efficiency", "verdict"], rows,
        title=f"all-reduce of {format_size(size)} alone (K: chunks per NPU, the fastest; efficiency: best bound {format_time_ns(tacos.synthesis.bounds.best_ns)} / predicted)",
        right=("K",),
    )
    say(f"ETs: {result.out}/collectives/all_reduce_{{{','.join(r.name for r in result.runs)}}}.{{rank}}.et (written, read back, then verified)", style="dim")
    console.print()
    rows = []
    for run in result.runs:
        exposed = max(r.exposed_communication_ns for r in run.replay.ranks)
        rows.append([run.name, format_time_ns(run.replay.total_ns), format_time_ns(exposed), "" if run.name == "tacos" else f"{result.speedup(run.name):.2f}x"])
    print_table(["algorithm", "iteration", "exposed comm", "tacos speedup"], rows, title="training iteration replayed with each")
    best = result.best_baseline()
    say(f"TACOS makes the iteration {result.speedup(best.name):.2f}x faster than the best baseline ({best.name}) and {result.speedup('ring'):.2f}x faster than ring.", style="bold")
    forest = result.run("forestcoll")
    say(
        f"ForestColl's spanning trees make it {result.speedup(best.name, over='forestcoll'):.2f}x faster than {best.name} "
        f"({format_time_ns(forest.replay.total_ns)}); alone, its all-reduce takes {format_time_ns(forest.synthesis.predicted_ns)} "
        f"against TACOS's {format_time_ns(tacos.synthesis.predicted_ns)}.",
        style="bold",
    )
    console.print()
    say(f"{result.trace} (open it in https://ui.perfetto.dev)", prefix="trace     ")
    say(str(result.replay_json), prefix="replay    ")
    if result.pictures:
        say(", ".join(str(p) for p in result.pictures), prefix="pictures  ")
    from chakra_collectives.cli.handoff import print_astra_sim_dir

    print_astra_sim_dir(result.astra_sim)
    console.print()
    say(f"done in {result.elapsed_s:.1f} s. Next, try:")
    me = invocation()
    t, w = result.topology_file, result.workload
    for line in (
        f"{me} synth -t {t} -c all-gather -s 64MiB -o {result.out}/ag",
        f"{me} verify {result.run('tacos').prefix}",
        f"{me} replay {w} -t {t} -a all-reduce={result.run('tacos').prefix} --concurrency astra-sim",
        f"{me} workload hybrid --tp 2 --dp 4 -o {result.out}/hybrid",
        f"{me} plot algorithm {result.run('ring').prefix} -t {t} -o {result.out}/ring.png",
    ):
        console.print(f"  {line}", soft_wrap=True, markup=False, highlight=False)  # one line each: pasted as typed
    if me == "chakra-coll":
        return
    say(f"(or put chakra-coll on your PATH: . {Path(me).parent}/activate)", style="dim")
