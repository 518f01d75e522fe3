"""``chakra-coll synth``: synthesize a collective for a topology and write its Chakra ETs."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from chakra_collectives import progress
from chakra_collectives.cli.app import command, err_console, print_json, say
from chakra_collectives.cli.options import JSON, TOPOLOGY, network_model_option, prefix_option
from chakra_collectives.cli.progress_view import showing_progress
from chakra_collectives.errors import InputError
from chakra_collectives.synth.registry import DEFAULT_ALGORITHM, algorithm_names
from chakra_collectives.units import format_size, format_time_ns

if TYPE_CHECKING:  # the synthesis (numpy and the rest) is imported when the command runs: synth --help needs none of it
    from chakra_collectives.synth import SynthesisResult

SCHEMA_VERSION = 1
"""Version of ``chakra-coll synth --json`` (``schemas/synth.schema.json``)."""


@command("synth")
def synth(
    topology: str = TOPOLOGY,
    collective: str = typer.Option(
        "all-reduce", "--collective", "-c", metavar="NAME",
        help="all-gather, reduce-scatter or all-reduce (TACOS, ForestColl and the baselines); broadcast, reduce (ForestColl, tree); all-to-all (TACOS, baselines); gather, scatter (TACOS).",
    ),
    pattern_file: Optional[Path] = typer.Option(
        None, "--pattern", metavar="FILE",
        help="A collective pattern (JSON/YAML, schemas/pattern.schema.json): per chunk the ranks holding it before ('from') and the ranks that must hold it after ('to'). Implies -c pattern; TACOS synthesizes it.",
    ),
    size: str = typer.Option("64MiB", "--size", "-s", metavar="SIZE", help="Collective size: bytes of the larger per-rank buffer, e.g. 64MiB, 1GB, 4096."),
    chunks_per_npu: Optional[int] = typer.Option(
        None, "--chunks-per-npu", "-k", metavar="K",
        help="Chunks each NPU's share is cut into (chunk = ceil(size / (NPUs x K)) bytes). Default: the fastest (predicted) of K = 1, 2, 4, ... up to 16 (fewer above 32 NPUs).",
    ),
    algorithm: str = typer.Option(
        DEFAULT_ALGORITHM, "--algorithm", "-a", metavar="NAME",
        help=f"One of: {', '.join(algorithm_names())}. best runs every applicable one (TACOS, ForestColl up to 128 NPUs, BFB, the baselines; milp on small fabrics when the others are > 3% above the lower bound) and keeps the fastest (predicted).",
    ),
    network_model: Optional[str] = typer.Option(
        None, "--network-model", metavar="MODEL",
        help="The model every candidate is timed (and best chooses) under: default (a hop holds its link for latency + bytes/bandwidth; "
        "what TACOS plans with) or astra-sim (ASTRA-sim's congestion-aware model: latency pipelined, whole ns); on switches the two can pick different algorithms.",
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of TACOS's random tie-breaking."),
    trials: Optional[int] = typer.Option(
        None, "--trials", metavar="N",
        help="TACOS: try seeds seed .. seed+N-1 for each phase (and merge variant), keep each phase's best. Default: 1 to 8, as many as fit 16,384 (NPU, chunk) pairs.",
    ),
    several_runs: bool = typer.Option(
        False, "--several-runs",
        help="TACOS: an All-Gather message may carry up to 4 runs of chunk ids (written as cc_ranges) where one run would end: "
        "fewer messages and +2-5% efficiency at 4,096 NPUs, for about 1.6-1.9x the synthesis time and twice the memory.",
    ),
    root: int = typer.Option(0, "--root", metavar="R", help="Root rank of broadcast / reduce (tree, forestcoll)."),
    trees_per_npu: Optional[str] = typer.Option(
        None, "--trees-per-npu", metavar="K",
        help="ForestColl: trees per NPU, k: a number (the best bandwidth with exactly k; at most the optimum's), optimal (the optimum's k), or auto (default: the fewest that reach the optimum's bandwidth, or 1 to 3 when the network model predicts that faster).",
    ),
    chunks_per_tree: Optional[int] = typer.Option(
        None, "--chunks-per-tree", metavar="P", help="ForestColl: pipeline pieces per tree (default: chosen from a latency/bandwidth model)."
    ),
    group: Optional[str] = typer.Option(
        None, "--group", metavar="RANKS",
        help="Synthesize for a process group embedded in the topology: its NPUs in rank order, e.g. 0,4,8,12 or 0-3. "
        "The other NPUs and switches only relay; one ET per group rank, routes in fabric node ids; bounds are the group's own.",
    ),
    groups_file: Optional[Path] = typer.Option(
        None, "--groups", metavar="FILE",
        help="Concurrent groups: ASTRA-sim's communicator-group JSON ({name: [ranks...]}, disjoint groups of one collective call). "
        "Synthesizes every group, times them together on the shared links, and reports each alone and together.",
    ),
    time_limit: Optional[float] = typer.Option(
        None, "--time-limit", metavar="SECONDS",
        help="milp: seconds the exact solver may search (default 60); when they run out it keeps the best schedule found and reports its proven gap.",
    ),
    bounds: str = typer.Option(
        "auto", "--bounds", metavar="METHOD",
        help="Lower bounds: exact, fast (valid, maybe weaker; linear time), none, or auto (exact up to 1,024 NPUs, fast above).",
    ),
    output_text: Optional[str] = typer.Option(
        None, "--output", "-o", metavar="PREFIX", help="Write PREFIX.{rank}.et (an ASTRA-sim custom collective); a folder (out/) means out/COLLECTIVE_ALGORITHM."
    ),
    astra_sim: Optional[Path] = typer.Option(
        None, "--astra-sim", metavar="DIR", help="Also write DIR for ASTRA-sim: the ETs, system.json, network.yml, a microbenchmark workload, run.sh."
    ),
    time_budget: Optional[float] = typer.Option(
        None, "--time-budget", metavar="SECONDS",
        help="best: start no candidate after this many seconds (those not tried are listed); if none was produced by then, the cheapest baseline is.",
    ),
    exhaustive: bool = typer.Option(
        False, "--exhaustive", help="best: produce every candidate at every K, skipping none (slow; the search's reference).",
    ),
    as_json: bool = JSON,
) -> None:
    """Synthesize a collective for a topology (TACOS, ForestColl, BFB or a baseline) and write its ETs.

    By default (--algorithm best) TACOS, ForestColl, BFB and every applicable baseline are
    candidates, each at K = 1, 2, 4, ... chunks per NPU until more chunks stop paying; the most
    promising is tried first and one whose lower bound cannot beat the fastest found is skipped
    (the summary gives the bound; ForestColl is judged by an estimate, "~X (estimate,
    skipped)"). On fabrics of up to 16 NPUs the exact MILP joins when the fastest is more than
    3% above the lower bound. The fastest under the network model is kept. Prints the predicted time, the lower bounds and the efficiency
    (bound / predicted); for ForestColl also its optimum (U, k), its trees and the
    bandwidth-optimal time.

    \b
    Examples:
      chakra-coll synth -t torus3d:4x4x4 -c all-reduce -s 64MiB -o out/ar
      chakra-coll synth -t hypercube:4x4x4 -c all-gather -a tacos --trials 8
      chakra-coll synth -t torus2d:64x64 -c all-gather -a tacos --several-runs
      chakra-coll synth -t a100:2 -c all-gather -s 1GiB -a forestcoll -o out/ag
      chakra-coll synth -t torus2d:4x4 -a forestcoll --group 0,4,8,12 -o out/g
      chakra-coll synth -t torus2d:4x4 -a forestcoll --groups dp.json -o out/dp
      chakra-coll synth -t torus2d:4x4 -c all-to-all -a tacos
      chakra-coll synth -t mesh2d:4x4 --pattern moves.yaml -a tacos
      chakra-coll synth -t mesh2d:16x16 -c all-gather --time-budget 5
      chakra-coll synth -t torus2d:3x3 -c all-gather -a milp -k 2 --time-limit 30
    """
    from chakra_collectives.ir import Collective
    from chakra_collectives.synth import synthesize
    from chakra_collectives.topology import load_topology
    from chakra_collectives.topology.groups import parse_group

    if time_budget is not None and not time_budget > 0:
        raise InputError(f"--time-budget must be a positive number of seconds, got {time_budget:g}")
    trees = _trees_per_npu(trees_per_npu)
    model = network_model_option(network_model)
    topo = load_topology(topology)
    if group is not None and groups_file is not None:
        raise InputError("give --group or --groups, not both")
    members = None if group is None else parse_group(group, topo.num_npus)
    if groups_file is not None:
        from chakra_collectives.cli.concurrent_view import synth_concurrent

        synth_concurrent(
            topo, groups_file, collective, size, algorithm=algorithm, output_text=output_text, as_json=as_json, bounds=bounds,
            network_model=model, chunks_per_npu=chunks_per_npu, seed=seed, trials=trials, trees_per_npu=trees, chunks_per_tree=chunks_per_tree,
        )
        return
    if members is not None and astra_sim is not None:
        raise InputError("--astra-sim writes a microbenchmark over every NPU; for process groups use workload hybrid|moe --astra-sim DIR -t TOPOLOGY")
    pattern = None
    if pattern_file is not None:
        from chakra_collectives.ir.pattern import load_pattern

        if Collective.parse(collective) not in (Collective.ALL_REDUCE, Collective.PATTERN):  # all-reduce: the default
            raise InputError(f"--pattern describes the collective: leave out -c {collective} (or give -c pattern)")
        collective = Collective.PATTERN.value
        pattern = load_pattern(pattern_file, num_ranks=topo.num_npus if members is None else len(members))
    elif Collective.parse(collective) is Collective.PATTERN:
        raise InputError("-c pattern needs --pattern FILE")
    with showing_progress(err_console, "synth", enabled=not as_json):
        result = synthesize(
            topo, collective, size, chunks_per_npu=chunks_per_npu, algorithm=algorithm, seed=seed, trials=trials, root=root,
            trees_per_npu=trees, chunks_per_tree=chunks_per_tree, bounds=bounds, network_model=model, group=members, pattern=pattern,
            time_budget=time_budget, exhaustive=exhaustive, time_limit_s=time_limit, several_runs=several_runs,
            # only written or only summarized: TACOS without switches is lowered as it is written, if at all
            in_parts=astra_sim is None, written=output_text is not None,
        )
        write_s = None
        output = prefix_option(output_text, f"{result.algorithm.collective.value.replace('-', '_')}_{result.algorithm_name}")
        if output is not None:
            from chakra_collectives.converters.chakra_et import write_algorithm, write_parts
            from chakra_collectives.converters.chakra_et.writer import PART_OPS
            from chakra_collectives.ir.parts import AlgorithmParts

            with progress.task("write ETs"):
                started = time.perf_counter()
                algo = result.algorithm
                if isinstance(algo, AlgorithmParts):
                    write_parts(algo.lower, algo.ops_per_rank, output, size_bytes=algo.size_bytes, part_ops=algo.part_ops(PART_OPS))
                else:
                    write_algorithm(algo, output)
                write_s = time.perf_counter() - started
    handoff = None
    if astra_sim is not None:
        from chakra_collectives.astra_sim import write_astra_sim_dir

        handoff = write_astra_sim_dir(astra_sim, topo, result.algorithm)
    summary = {"schema_version": SCHEMA_VERSION, **result.to_json()}
    summary["et_write_s"] = write_s
    summary["output"] = None if output is None else f"{output}.{{rank}}.et"
    summary["astra_sim"] = None if handoff is None else handoff.as_dict()
    if as_json:
        print_json(summary)
        return
    _print_summary(result, summary)
    if handoff is not None:
        from chakra_collectives.cli.handoff import print_astra_sim_dir

        print_astra_sim_dir(handoff)


def _chosen_lines(result: SynthesisResult) -> list[str]:
    """How ``best`` chose: the others' times, or the bound that ruled each out, or why it was not tried."""
    from chakra_collectives.synth import BEST_WITHIN

    shown, not_tried = [], []
    winner = next(c for c in result.candidates if c.name == result.algorithm_name)
    for c in result.candidates:
        if c.name == result.algorithm_name:
            continue
        if c.skipped == "time budget":
            not_tried.append(c.name)
        elif c.skipped is not None:
            shown.append(f"{c.name} not tried: {c.skipped.split(' (')[0]} > --max-memory")
        elif c.predicted_ns is not None:
            k = f" (K={c.chunks_per_npu})" if len(c.tried) > 1 else ""
            shown.append(f"{c.name} {format_time_ns(c.predicted_ns)}{k}")
        elif c.estimated_ns is not None:
            shown.append(f"{c.name} ~{format_time_ns(c.estimated_ns)} (estimate, skipped)")
        elif c.at_least_ns < result.predicted_ns:
            shown.append(f"{c.name} >= {format_time_ns(c.at_least_ns)} (within {BEST_WITHIN:.0%}, skipped)")
        else:
            shown.append(f"{c.name} >= {format_time_ns(c.at_least_ns)} (skipped)")
    if len(result.candidates) > 1:
        lines = [f"{result.algorithm_name}, fastest of {len(result.candidates)} (others: {', '.join(shown + [f'{n} not tried' for n in not_tried])})"]
    else:
        lines = [f"{result.algorithm_name}, the only producer of {result.algorithm.collective.value} that applies here"]
    if winner.stopped is not None:
        lines.append(f"K search stopped: {winner.stopped}")
    if not_tried or result.budget_ran_out:
        ran_out = "the time budget ran out" + (f"; not tried: {', '.join(not_tried)}" if not_tried else "")
        if result.budget_fallback:
            ran_out += f" before any finished: {result.algorithm_name} is the cheapest baseline"
        lines.append(ran_out)
    return lines


def _trees_per_npu(text: str | None) -> int | str | None:
    """``--trees-per-npu`` as :func:`synthesize` takes it: an integer (the registry checks it is positive), ``optimal`` or ``auto``."""
    if text is None or text in ("auto", "optimal"):
        return text
    try:
        value = int(text)
    except ValueError:
        raise InputError(f"--trees-per-npu must be a positive integer, 'optimal' or 'auto', not {text!r}") from None
    return value


def _print_summary(result: SynthesisResult, summary: dict) -> None:
    from chakra_collectives.topology.groups import describe_group

    algo = result.algorithm
    topo = result.topology
    say(f"{algo.collective.value} of {format_size(algo.size_bytes)} on {topo.name} with {result.algorithm_name}", style="bold")
    rows = []
    switches = f", {topo.num_switches} switch(es)" if topo.num_switches else ""
    rows.append(("network", f"{topo.num_npus} NPUs{switches}, {len(topo.links)} links; {result.switch_handling}"))
    if result.group is not None:
        rows.append(("group", f"{len(result.group)} ranks on NPUs {describe_group(result.group)} (rank i on the i-th); the other nodes relay"))
    per_npu = f"{result.chunks_per_npu} per NPU" if algo.chunk_count % algo.num_ranks == 0 else "pipelined pieces"
    rows.append(("chunks", f"{algo.chunk_count:,} ({per_npu}) of {format_size(algo.chunk_bytes())}; {algo.num_ops:,} operations"))
    if result.chunks_tried:
        tried = ", ".join(f"K={k} {format_time_ns(t)}" for k, t in result.chunks_tried.items())
        rows.append(("", f"K chosen by predicted time: {tried}"))
    rows.append(("predicted", f"{format_time_ns(result.predicted_ns)} ({result.network_model} network model)"))
    if result.bounds is not None:
        b = result.bounds
        fast = " (fast: valid, maybe weaker than exact)" if b.method == "fast" else ""
        flow = "" if b.flow_ns is None else f", flow {format_time_ns(b.flow_ns)} (exact LP)"
        rows.append(("bounds", f"ingress {format_time_ns(b.ingress_ns)}, cut {format_time_ns(b.cut_ns)}, latency {format_time_ns(b.latency_ns)}{flow}{fast}"))
        against = "any algorithm for this group" if result.group is not None else "any algorithm"
        rows.append(("efficiency", f"{result.efficiency:.3f} (best bound {format_time_ns(b.best_ns)} / predicted; {against})"))
        if b.reduce_scatter_all_gather_ns is not None:
            rows.append((
                "",
                f"{result.reduce_scatter_all_gather_efficiency:.3f} against equal-share reduce-scatter + all-gather algorithms "
                f"(bound {format_time_ns(b.reduce_scatter_all_gather_ns)})",
            ))
    if result.bottleneck is not None:
        rows.append(("limited by", result.bottleneck.describe()))
    if result.candidates:
        rows.extend(("" if i else "chosen", line) for i, line in enumerate(_chosen_lines(result)))
    if result.phase_seeds:
        names = {"all-gather": ["all-gather"], "reduce-scatter": ["reduce-scatter"]}.get(algo.collective.value, ["reduce-scatter", "all-gather"])
        variants = result.details.get("phase_merge_variants", tuple(f"{r:g}" for r in result.phase_latency_ratios))
        plans = algo.provenance.get("phase_plans", "").split(",") if algo.provenance.get("phase_plans") else ["matching"] * len(names)
        phases = "; ".join(
            f"{p}: seed {s}, merge ratio {v}" if plan == "matching" else f"{p}: {plan} (planned, not matched)"
            for p, s, v, plan in zip(names, result.phase_seeds, variants, plans)
        )
        rows.append(("tacos", f"{phases} (best of {result.trials} trial(s) per phase)" if "matching" in plans else phases))
        shares = algo.provenance.get("owner_chunks")
        if shares:
            rows.append(("", f"unequal shares by bandwidth: ranks reduce {shares.replace(',', ', ')} of the {algo.chunk_count} chunks"))
    forest = summary.get("forestcoll")
    if forest is not None:
        optimal = "optimal" if forest["trees_per_npu"] == forest["optimal_trees_per_npu"] else f"optimum: k={forest['optimal_trees_per_npu']}, U={forest['optimal_U']}"
        rows.append(("forestcoll", f"k={forest['trees_per_npu']} trees per NPU, U={forest['U']} ({optimal}); {forest['trees']} trees ({forest['grown_trees']} grown, the rest moved by symmetry), depth <= {forest['max_depth']}; {forest['chunks_per_tree']} piece(s) per tree"))
        rows.append(("", f"bandwidth-optimal {format_time_ns(forest['bandwidth_ns'])} (algbw {forest['algbw_gbps']:.3f} GB/s); predicted with latency {format_time_ns(result.predicted_ns)}"))
        if forest["routes"]:
            rows.append(("", f"{forest['routes']} switch path(s) differ from the network's own route: the ETs carry them (cc_route)"))
        if forest["balanced_switches"]:
            rows.append(("", f"switches {forest['balanced_switches']} send more than they receive: their output was scaled down (below the cut bound)"))
    exact = summary.get("milp")
    if exact is not None:
        proved = "optimal (proved)" if exact["optimal"] else f"gap {exact['gap']:.1%} to the proved lower bound {format_time_ns(exact['lower_bound_ns'])}"
        epochs = "epochs exact" if exact["exact_epochs"] else "hops rounded up to whole epochs: optimal over that discretization"
        rows.append(("milp", f"{format_time_ns(exact['optimum_ns'])} {proved}; epoch {format_time_ns(exact['epoch_ns'])} ({epochs}); {exact['variables']:,} variables, {exact['constraints']:,} constraints, {exact['solve_s']:.2f} s; over {exact['scope']}"))
        if exact["note"]:
            rows.append(("", exact["note"]))
    rows.append(("synthesis", f"{result.synthesis_s:.3f} s (prediction {result.predict_s:.3f} s, bounds {result.bounds_s:.3f} s)"))
    if summary["et_write_s"] is not None:
        rows.append(("written", f"{summary['output']} ({algo.num_ranks} files) in {summary['et_write_s']:.3f} s"))
    for label, text in rows:
        say(text, prefix=f"[dim]{label:<10}[/dim]  ")
