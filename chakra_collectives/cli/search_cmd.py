"""``chakra-coll search``: explore topologies x algorithms x workloads, ranked by simulated iteration time."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from chakra_collectives.cli.app import command, console, err_console, print_json, say
from chakra_collectives.cli.options import JSON, NETWORK_MODEL, network_model_option, warn
from chakra_collectives.cli.progress_view import showing_progress
from chakra_collectives.cli.tables import print_table
from chakra_collectives.errors import InputError
from chakra_collectives.search import ResultTable, load_space, make_executor, parse_space, plan_search, run_search
from chakra_collectives.search.engine import SearchPlan, SearchRun
from chakra_collectives.search.report import Group, group_document, groups
from chakra_collectives.search.space import DEFAULT_PORTS_PER_NPU, default_topologies
from chakra_collectives.search.winner import write_winner
from chakra_collectives.search.workloads import slug
from chakra_collectives.units import format_time_ns

SCHEMA_VERSION = 1
"""Version of ``chakra-coll search --json`` (``schemas/search.schema.json``)."""

SHOWN_SKIPPED = 6


def _say(text: str, indent: int = 0) -> None:
    """Print ``text`` wrapped at the terminal's width, ``indent`` spaces in (continuation lines two more)."""
    say(text, prefix=" " * indent, indent=indent + 2)


def _numbers(text: Optional[str], flag: str) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise InputError(f"{flag} {text!r}: expected whole numbers separated by commas, e.g. 16,32,64") from None


def _overrides(**flags: Any) -> dict[str, Any]:
    """The space keys the flags give (a flag replaces the file's key)."""
    found: dict[str, Any] = {}
    if flags["npus"] is not None:
        found["npus"] = _numbers(flags["npus"], "--npus")
    if flags["topology"]:
        found["topologies"] = list(flags["topology"])
    if flags["algorithm"]:
        found["algorithms"] = list(flags["algorithm"])
    if flags["chunks_per_npu"]:
        found["chunks_per_npu"] = list(flags["chunks_per_npu"])
    if flags["ports_per_npu"] is not None:
        found["ports_per_npu"] = flags["ports_per_npu"]
    if flags["port_bandwidth"] is not None or flags["port_latency"] is not None:
        found["port"] = {k: v for k, v in (("bandwidth", flags["port_bandwidth"]), ("latency", flags["port_latency"])) if v is not None}
    if flags["network_model"] is not None:
        found["network_model"] = flags["network_model"]
    workload = _workload(**{k: flags[k] for k in ("workload", "model", "layers", "forward", "gradient", "tp", "collective", "sizes")})
    if workload is not None:
        found["workloads"] = [workload]
    return found


def _workload(workload, model, layers, forward, gradient, tp, collective, sizes) -> dict[str, Any] | None:
    given = {k: v for k, v in (("model", model), ("layers", layers), ("forward", forward), ("gradient", gradient)) if v is not None}
    if workload is None and not given and tp is None and collective is None and sizes is None:
        return None
    kind = workload or ("hybrid" if tp is not None else "collective" if collective or sizes else "data-parallel")
    if kind not in ("data-parallel", "hybrid", "collective"):
        return {"kind": "prefix", "prefix": str(Path(kind).resolve())}
    entry: dict[str, Any] = {"kind": kind}
    if kind in ("data-parallel", "hybrid"):
        if "model" in given:
            given["model"] = str(Path(given["model"]).resolve())
        entry.update(given)
        if kind == "hybrid" and tp is not None:
            entry["tp"] = _numbers(tp, "--tp")
    else:
        entry.update({k: v for k, v in (("collective", collective), ("sizes", None if sizes is None else sizes.split(","))) if v is not None})
    return entry


@command("search")
def search(
    space_file: Optional[Path] = typer.Argument(None, metavar="SPACE", help="Design space YAML (docs/search.md lists every key); flags replace its keys."),
    npus: Optional[str] = typer.Option(None, "--npus", "-n", metavar="N,N", help="NPU counts, e.g. 16,32,64."),
    topology: list[str] = typer.Option(
        [], "--topology", "-t", metavar="SPEC|FILE",
        help="A topology candidate (repeat): a builder spec with {npus}, {grid2}, {grid3} or {log2} filled in per NPU count, an expansion, or a topology file.",
    ),
    algorithm: list[str] = typer.Option([], "--algorithm", "-a", metavar="NAME", help="An algorithm (repeat): a registered producer (tacos, bfb, ring, ...) or best."),
    chunks_per_npu: list[int] = typer.Option([], "--chunks-per-npu", "-k", metavar="K", help="Chunks each NPU's share is cut into (repeat to explore several). Default: 1."),
    workload: Optional[str] = typer.Option(None, "--workload", "-w", metavar="KIND|PREFIX", help="data-parallel (default), hybrid, collective, or a workload ET prefix."),
    model: Optional[Path] = typer.Option(None, "--model", metavar="FILE", help="Model spec YAML for data-parallel / hybrid."),
    layers: Optional[int] = typer.Option(None, "--layers", metavar="N", help="Identical layers (data-parallel / hybrid)."),
    forward: Optional[str] = typer.Option(None, "--forward", metavar="TIME", help="Forward time of a layer, e.g. 100us."),
    gradient: Optional[str] = typer.Option(None, "--gradient", metavar="SIZE", help="Gradient bytes of a layer, e.g. 32MiB."),
    tp: Optional[str] = typer.Option(None, "--tp", metavar="N,N", help="Tensor-parallel degrees for hybrid, e.g. 2,4 (one variant each)."),
    collective: Optional[str] = typer.Option(None, "--collective", "-c", metavar="NAME", help="The collective of a 'collective' workload, e.g. all-reduce."),
    sizes: Optional[str] = typer.Option(None, "--sizes", metavar="SIZE,SIZE", help="Sizes of a 'collective' workload, e.g. 1MiB,1GiB."),
    ports_per_npu: Optional[float] = typer.Option(None, "--ports-per-npu", metavar="P", help="Skip candidates with more ports per NPU (weighted by bandwidth)."),
    port_bandwidth: Optional[float] = typer.Option(None, "--port-bandwidth-gbps", metavar="GBPS", help="Bandwidth of one port (GB/s, 1 GB = 2^30 bytes). Default: 50."),
    port_latency: Optional[str] = typer.Option(None, "--port-latency", metavar="TIME", help="Latency of one port, e.g. 500ns (the default)."),
    network_model: Optional[str] = NETWORK_MODEL,
    workers: Optional[int] = typer.Option(None, "--workers", metavar="N", help="Local Dask worker processes (default: one per core); 1 runs in this process."),
    scheduler: Optional[str] = typer.Option(None, "--scheduler", metavar="ADDRESS", help="A running Dask scheduler (tcp://host:8786) instead of a local cluster."),
    output: Path = typer.Option(Path("search-out"), "--output", "-o", metavar="DIR", help="Folder for the table, workloads, plots and the winner's files."),
    table_path: Optional[Path] = typer.Option(
        None, "--table", metavar="PATH", help="Results table (a Parquet folder; default DIR/results.parquet). Rows already there are not evaluated again."
    ),
    top: int = typer.Option(10, "--top", metavar="N", help="Rows shown per group."),
    plots: bool = typer.Option(True, "--plots/--no-plots", help="Draw DIR/pareto.png and DIR/collectives.png."),
    winner: bool = typer.Option(True, "--winner/--no-winner", help="Write each group's winner: topology file, algorithm ETs, ASTRA-sim folder."),
    as_json: bool = JSON,
) -> None:
    """Choose a fabric and its collective algorithms for a job by simulating the job.

    Every topology x algorithm x workload of a design space is evaluated: each collective the
    workload needs is synthesized once per topology, verified, and the workload replayed with
    it. Results are ranked by iteration time, with Pareto fronts (time vs cost) and the
    winner's files. Tasks run on Dask: a local cluster of one worker per core by default,
    --scheduler for a running cluster, --workers 1 in this process. Each result is appended to
    the table as it finishes; the same command again skips what is there (resume).

    \b
    Examples:
      chakra-coll search docs/search/fabric_for_dp.yaml -o out/fabric
      chakra-coll search -n 16 -t "torus2d:{grid2}" -t "ring:{npus}" -o out/s
      chakra-coll search -n 16 -o out/s    # no -t: the default space
    """
    overrides = _overrides(
        npus=npus, topology=topology, algorithm=algorithm, chunks_per_npu=chunks_per_npu, ports_per_npu=ports_per_npu,
        port_bandwidth=port_bandwidth, port_latency=port_latency, network_model=None if network_model is None else network_model_option(network_model),
        workload=workload, model=model,
        layers=layers, forward=forward, gradient=gradient, tp=tp, collective=collective, sizes=sizes,
    )
    default_space = space_file is None and "topologies" not in overrides
    if default_space:
        if "npus" not in overrides:
            raise InputError("give -n/--npus (the default space needs an NPU count), a space file, or --topology (see chakra-coll search --help)")
        overrides.setdefault("ports_per_npu", DEFAULT_PORTS_PER_NPU)
        overrides["topologies"] = default_topologies(overrides["npus"], overrides["ports_per_npu"])
        if not as_json:
            _say(f"no --topology: the default space, every builder and family that fits {overrides['ports_per_npu']:g} ports per NPU (--ports-per-npu)")
    # a scheduler is reached first (an unreachable one fails fast); a local cluster starts once the space is read
    executor = make_executor(workers=workers, scheduler=scheduler) if scheduler is not None else None
    try:
        space = load_space(space_file, overrides=overrides) if space_file is not None else parse_space("", name="search", overrides=overrides)
    except InputError:
        if executor is not None:
            executor.close()
        raise
    executor = executor or make_executor(workers=workers)
    table = ResultTable(table_path or output / "results.parquet")
    try:
        with executor, showing_progress(err_console, "search", enabled=not as_json):
            plan = plan_search(space, output / "workloads")
            if not plan.evaluations:
                reasons = "; ".join(f"{s.label}: {s.reason}" for s in (plan.skipped + plan.not_applicable)[:3])
                raise InputError(f"nothing to evaluate: every candidate was skipped ({reasons})")
            if not as_json:
                _print_plan(plan, table)
            run = run_search(plan, executor, table)
    except KeyboardInterrupt:
        err_console.print(f"chakra-coll: interrupted: the results so far are in {table.path}; run the same command again to resume", markup=False, soft_wrap=True)
        raise typer.Exit(130) from None
    except InputError as error:
        raise error if space_file is None else error.located(path=space_file) from None
    rows = table.rows(set(plan.by_key()))
    found = groups(rows)
    outputs = _outputs(plan, found, output, plots=plots, winner=winner)
    if as_json:
        print_json(_document(plan, run, table, found, outputs, top))
        return
    _print_results(plan, run, table, found, outputs, top)


def _outputs(plan: SearchPlan, found: list[Group], output: Path, *, plots: bool, winner: bool) -> dict[str, Any]:
    outputs: dict[str, Any] = {"plots": {}, "winners": {}}
    if plots and any(g.ranked for g in found):
        from chakra_collectives.plot import plot_iteration_vs_cost, plot_small_vs_large

        panels = [{"title": g.label, "rows": g.ranked, "front": g.front} for g in found if g.ranked]
        outputs["plots"]["iteration_vs_cost"] = str(plot_iteration_vs_cost(panels, output / "pareto.png"))
        probe_panels = [{"title": g.label, "rows": g.ranked, "front": g.probe_front} for g in found if g.probe_front]
        if probe_panels:
            outputs["plots"]["small_vs_large"] = str(plot_small_vs_large(probe_panels, output / "collectives.png"))
    if winner:
        evaluations = plan.by_key()
        for group in found:
            if group.winner is not None:
                directory = output / "winner" / slug(f"{group.npus}npus_{group.workload}")
                outputs["winners"][group.label] = write_winner(evaluations[group.winner["key"]], plan.space, directory).as_dict()
    return outputs


def _document(plan: SearchPlan, run: SearchRun, table: ResultTable, found: list[Group], outputs: dict[str, Any], top: int) -> dict[str, Any]:
    space = plan.space
    return {
        "schema_version": SCHEMA_VERSION,
        "space": space.name,
        "table": str(table.path),
        "evaluations": len(plan.evaluations),
        "syntheses": plan.synthesis_count(),
        "run": run.as_dict(),
        "skipped": [s.as_dict() for s in plan.skipped],
        "not_applicable": [s.as_dict() for s in plan.not_applicable],
        "groups": [group_document(g, top=top) for g in found],
        **outputs,
    }


def _print_plan(plan: SearchPlan, table: ResultTable) -> None:
    space = plan.space
    counts = sorted({t.topology.num_npus for t in plan.topologies.values()})
    variants = len({w.variant.label for w in plan.workloads})
    _say(
        f"search {space.name}: {len(plan.evaluations)} evaluations = {len(plan.topologies)} topologies "
        f"(at {', '.join(map(str, counts))} NPUs) x {len(space.algorithms)} algorithm set(s) x "
        f"{len(space.chunks_per_npu)} chunking(s) x {variants} workload(s)"
        f"{' but the pairs that do not apply' if plan.not_applicable else ''}; {plan.synthesis_count()} syntheses"
    )
    done = len(table.keys() & set(plan.by_key()))
    if done:
        _say(f"{done} already in {table.path}: not evaluated again (resume)", 2)
    for items, title in ((plan.skipped, f"skipped {len(plan.skipped)} candidate(s):"),
                         (plan.not_applicable, f"not applicable, not evaluated: {len(plan.not_applicable)} topology / algorithm pair(s):")):
        if not items:
            continue
        _say(title, 2)
        for item in items[:SHOWN_SKIPPED]:
            where = f" ({item.npus} NPUs)" if item.npus is not None and space.npus and len(space.npus) > 1 else ""
            _say(f"{item.label}{where}: {item.reason}", 4)
        if len(items) > SHOWN_SKIPPED:
            _say(f"and {len(items) - SHOWN_SKIPPED} more (--json lists them all)", 4)


def _print_results(plan: SearchPlan, run: SearchRun, table: ResultTable, found: list[Group], outputs: dict[str, Any], top: int) -> None:
    failed = sum(len(g.failed) for g in found)
    _say(
        f"ran {run.evaluated} evaluation(s) and {run.syntheses} synthes{'is' if run.syntheses == 1 else 'es'} in {run.seconds:.1f} s "
        f"({run.executor}); {failed} failed"
    )
    for lost in run.lost:
        warn(f"not evaluated (the engine lost it; rerun to retry): {lost}")
    for group in found:
        console.print()
        _say(f"{group.label}: {len(group.ranked)} ranked, {len(group.failed)} failed")
        if group.ranked:
            _print_ranking(group, top)
            front = "; ".join(f"{r['topology']} / {r['algorithm']} (cost {r['cost']:g})" for r in group.front)
            _say(f"Pareto front, time vs cost: {front}")
        for row in group.failed[:SHOWN_SKIPPED]:
            _say(f"failed: {row['topology']} / {row['algorithm']}: {row['error']}", 2)
        if len(group.failed) > SHOWN_SKIPPED:
            _say(f"and {len(group.failed) - SHOWN_SKIPPED} more failures (--json lists them)", 2)
        written = outputs["winners"].get(group.label)
        if written is not None:
            _say(f"winner's files: {written['directory']}/ (topology.yaml, collectives/, astra-sim/)")
            if written["note"]:
                _say(written["note"], 2)
    console.print()
    for name, path in outputs["plots"].items():
        _say(f"plot ({name.replace('_', ' ')}): {path}")
    _say(f"table: {table.path} (pandas.read_parquet reads the folder)")


def _print_ranking(group: Group, top: int) -> None:
    several_chunkings = len({r["chunks_per_npu"] for r in group.ranked}) > 1
    rows = []
    for rank, row in enumerate(group.ranked[:top], start=1):
        algorithm = row["algorithm"] + (f" k={row['chunks_per_npu']}" if several_chunkings else "")
        if row["algorithm"] == "best":
            algorithm += f" ({row['algorithm_used']})"
        rows.append([
            str(rank), row["topology"], algorithm, format_time_ns(row["iteration_ns"]), format_time_ns(row["exposed_comm_ns"]),
            str(row["diameter"]), f"{row['cost']:g}",
        ])
    print_table(["#", "topology", "algorithm", "iteration", "exposed", "diam", "cost"], rows, right=("iteration", "exposed"))
