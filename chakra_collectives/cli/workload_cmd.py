"""``chakra-coll workload``: write workload ETs (microbenchmark, data-parallel, hybrid TP + DP, MoE)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from chakra_collectives.cli.app import command, command_group, invocation, print_json, say
from chakra_collectives.cli.options import JSON, prefix_option
from chakra_collectives.cli.tables import print_table
from chakra_collectives.errors import InputError

SCHEMA_VERSION = 1
"""Version of ``chakra-coll workload ... --json`` (``schemas/workload.schema.json``)."""

workload_app = command_group(
    "workload",
    "Write workload ETs: a microbenchmark, training steps, or from PyTorch traces.\n\nThe files are "
    "PREFIX.{rank}.et, as ASTRA-sim's workload feeder reads them: one collective (ASTRA-sim's "
    "microbenchmarks), a data-parallel training iteration, tensor + data parallelism over "
    "process groups, or what PyTorch's profiler recorded.",
)


_OUTPUT = typer.Option(
    ..., "--output", "-o", metavar="PREFIX",
    help="Write PREFIX.{rank}.et (hybrid: also PREFIX.json, the communicator groups); a folder (out/) means out/KIND.{rank}.et.",
)
_JSON = JSON
_SPEC = typer.Option(None, "--spec", metavar="FILE", help="Model spec YAML: layers with forward/backward times, gradient and activation sizes (see README).")
_LAYERS = typer.Option(None, "--layers", "-l", metavar="N", help="Identical layers (default 4).")
_FORWARD = typer.Option(None, "--forward", metavar="TIME", help="Forward time of a layer on one device, e.g. 50us (default 50us).")
_BACKWARD = typer.Option(None, "--backward", metavar="TIME", help="Backward time of a layer (default: twice the forward).")
_GRADIENT = typer.Option(None, "--gradient", metavar="SIZE", help="Gradient bytes of a layer, e.g. 16MiB (default 16MiB).")
_ACTIVATION = typer.Option(None, "--activation", metavar="SIZE", help="Activation bytes of a layer, all-reduced by tensor parallelism (default 2MiB).")
_OPTIMIZER = typer.Option(None, "--optimizer", metavar="TIME", help="Optimizer step time after all gradients (default 20us; 0 for none).")
_ASTRA_SIM = typer.Option(
    None, "--astra-sim", metavar="DIR",
    help="Also write DIR for ASTRA-sim: the workload, every group's algorithm (--group-algorithm on --topology) and the per-node map that makes each collective node run its group's.",
)
_TOPOLOGY = typer.Option(None, "--topology", "-t", metavar="SPEC", help="With --astra-sim: the fabric the groups' algorithms are synthesized for.")
_GROUP_ALGORITHM = typer.Option(
    "forestcoll", "--group-algorithm", metavar="NAME",
    help="With --astra-sim: the producer for every group's collectives (groups of one parallel dimension planned together; all-to-all: direct).",
)


def _model(spec: Optional[Path], **flags: Any) -> Any:
    from chakra_collectives.workload.spec import MODEL_DEFAULTS, load_model_spec, uniform_model

    given = [f"--{name}" for name, value in flags.items() if value is not None]
    if spec is not None:
        if given:
            raise InputError(f"give either --spec or the layer flags, not both ({', '.join(given)} with --spec {spec})")
        return load_model_spec(spec)
    values = {name: (value if value is not None else MODEL_DEFAULTS.get(name)) for name, value in flags.items()}
    return uniform_model(**values)


@command("microbenchmark", group=workload_app)
def microbenchmark_command(
    collective: str = typer.Option("all-reduce", "--collective", "-c", metavar="NAME", help="all-reduce, all-gather, reduce-scatter or all-to-all."),
    size: str = typer.Option("1MiB", "--size", "-s", metavar="SIZE", help="Collective size, e.g. 1MiB."),
    ranks: int = typer.Option(8, "--ranks", "-n", metavar="N", help="Number of ranks."),
    output: str = _OUTPUT,
    as_json: bool = _JSON,
) -> None:
    """One collective over N ranks: what ASTRA-sim's microbenchmarks are.

    \b
    Example:
      chakra-coll workload microbenchmark -c all-reduce -s 1MiB -n 8 -o out/ar
    """
    from chakra_collectives.units import parse_size
    from chakra_collectives.workload import microbenchmark

    _finish(microbenchmark(collective, ranks, parse_size(size)), output, as_json)


@command("data-parallel", group=workload_app)
def data_parallel_command(
    ranks: int = typer.Option(8, "--ranks", "-n", metavar="N", help="Number of data-parallel ranks."),
    spec: Optional[Path] = _SPEC,
    layers: Optional[int] = _LAYERS,
    forward: Optional[str] = _FORWARD,
    backward: Optional[str] = _BACKWARD,
    gradient: Optional[str] = _GRADIENT,
    optimizer: Optional[str] = _OPTIMIZER,
    output: str = _OUTPUT,
    as_json: bool = _JSON,
) -> None:
    """One data-parallel training iteration: forward, backward with per-layer gradient all-reduces, optimizer step.

    Each layer's all-reduce depends only on its own backward, so it overlaps the backward of
    the layers before it; the optimizer step waits for all of them.

    \b
    Example:
      chakra-coll workload data-parallel -n 8 --layers 6 --forward 40us \\
        --gradient 32MiB -o out/step
    """
    from chakra_collectives.workload import data_parallel

    model = _model(spec, layers=layers, forward=forward, backward=backward, gradient=gradient, optimizer=optimizer)
    _finish(data_parallel(model, ranks), output, as_json)


@command("hybrid", group=workload_app)
def hybrid_command(
    tp: int = typer.Option(2, "--tp", metavar="N", help="Tensor-parallel degree (consecutive ranks form a tensor group)."),
    dp: int = typer.Option(4, "--dp", metavar="N", help="Data-parallel degree (ranks = tp x dp)."),
    spec: Optional[Path] = _SPEC,
    layers: Optional[int] = _LAYERS,
    forward: Optional[str] = _FORWARD,
    backward: Optional[str] = _BACKWARD,
    gradient: Optional[str] = _GRADIENT,
    activation: Optional[str] = _ACTIVATION,
    optimizer: Optional[str] = _OPTIMIZER,
    involved_dim: bool = typer.Option(False, "--involved-dim", help="Also write involved_dim ([tensor, data] network dimensions) on every collective."),
    output: str = _OUTPUT,
    astra_sim: Optional[Path] = _ASTRA_SIM,
    topology: Optional[str] = _TOPOLOGY,
    group_algorithm: str = _GROUP_ALGORITHM,
    as_json: bool = _JSON,
) -> None:
    """Tensor + data parallelism: per-layer activation all-reduces in each tensor group, gradient all-reduces in each data-parallel group.

    The collectives carry pg_name; PREFIX.json maps each group to its ranks (ASTRA-sim's
    --comm-group-configuration, replay's --comm-groups).

    \b
    Example:
      chakra-coll workload hybrid --tp 2 --dp 4 -o out/hybrid
      chakra-coll workload hybrid --tp 4 --dp 4 -o out/hy --astra-sim out/astra \\
        -t torus2d:4x4
    """
    from chakra_collectives.workload import hybrid_parallel

    model = _model(spec, layers=layers, forward=forward, backward=backward, gradient=gradient, activation=activation, optimizer=optimizer)
    _finish(hybrid_parallel(model, tp, dp, involved_dim=involved_dim), output, as_json, astra_sim=astra_sim, topology=topology, group_algorithm=group_algorithm)


@command("moe", group=workload_app)
def moe_command(
    ep: int = typer.Option(4, "--ep", metavar="N", help="Expert-parallel degree (consecutive ranks form an expert group)."),
    dp: int = typer.Option(2, "--dp", metavar="N", help="Data-parallel degree (ranks = ep x dp)."),
    spec: Optional[Path] = _SPEC,
    layers: Optional[int] = _LAYERS,
    forward: Optional[str] = _FORWARD,
    backward: Optional[str] = _BACKWARD,
    gradient: Optional[str] = _GRADIENT,
    activation: Optional[str] = typer.Option(
        None, "--activation", metavar="SIZE", help="Token bytes each rank dispatches to the experts per layer (each all-to-all's size; default 2MiB).",
    ),
    optimizer: Optional[str] = _OPTIMIZER,
    output: str = _OUTPUT,
    astra_sim: Optional[Path] = _ASTRA_SIM,
    topology: Optional[str] = _TOPOLOGY,
    group_algorithm: str = _GROUP_ALGORITHM,
    as_json: bool = _JSON,
) -> None:
    """Mixture of experts: per-layer dispatch and combine all-to-alls in each expert group, gradient all-reduces in each data-parallel group.

    Each layer's forward is half before the router, the dispatch all-to-all, half in the experts,
    the combine all-to-all; the backward runs the same in reverse, then the layer's gradients are
    all-reduced across the data-parallel group. PREFIX.json maps each group to its ranks.

    \b
    Example:
      chakra-coll workload moe --ep 8 --dp 8 -o out/moe
    """
    from chakra_collectives.workload import mixture_of_experts

    model = _model(spec, layers=layers, forward=forward, backward=backward, gradient=gradient, activation=activation, optimizer=optimizer)
    _finish(mixture_of_experts(model, ep, dp), output, as_json, astra_sim=astra_sim, topology=topology, group_algorithm=group_algorithm)


def _finish(
    workload: Any, output_text: str, as_json: bool, *, astra_sim: Optional[Path] = None, topology: Optional[str] = None,
    group_algorithm: str = "forestcoll",
) -> None:
    from chakra_collectives.units import format_size, format_time_ns
    from chakra_collectives.workload import groups_path

    output = prefix_option(output_text, workload.kind.replace("-", "_"))
    handoff = None
    if astra_sim is not None:
        handoff = _grouped_astra_sim_dir(workload, astra_sim, topology, group_algorithm)
    elif topology is not None:
        raise InputError("--topology is for --astra-sim (the fabric the groups' algorithms are synthesized for)")
    paths = workload.write(output)
    summary = workload.summary()
    summary["files"] = [str(p) for p in paths]
    if handoff is not None:
        summary["astra_sim"] = handoff.as_dict()
    if as_json:
        print_json({"schema_version": SCHEMA_VERSION, **summary})
        return
    say(f"{workload.kind} workload {workload.name!r}: {workload.num_ranks} ranks, {summary['nodes_per_rank']} nodes per rank", style="bold")
    rows = [[c["collective"], c["group"] or "all ranks", format_size(c["size_bytes"]), str(c["count"])] for c in summary["collectives"]]
    print_table(["collective", "group", "size", "calls per rank"], rows, right=("size",))
    say(f"per rank: compute {format_time_ns(summary['compute_ns_per_rank'])}, collectives {format_size(summary['collective_bytes_per_rank'])}")
    for note in workload.notes:
        say(f"note: {note}")
    groups = f" --comm-groups {groups_path(output)}" if workload.groups else ""
    say(f"written: {output}.{{rank}}.et ({workload.num_ranks} files){' and ' + str(groups_path(output)) if workload.groups else ''}")
    say(f"next: {invocation()} replay {output} -t ring:{workload.num_ranks}{groups}")
    if handoff is not None:
        from chakra_collectives.cli.handoff import print_astra_sim_dir

        print_astra_sim_dir(handoff)


def _grouped_astra_sim_dir(workload: Any, directory: Path, topology: Optional[str], group_algorithm: str) -> Any:
    """``--astra-sim DIR``: every group's algorithm, synthesized on ``topology``, run per collective
    node -- where the step replayed on ``topology`` finds it faster than the built-in (replay's
    in-step choice), else the built-in ring (or direct)."""
    import tempfile

    from chakra_collectives.astra_sim import write_grouped_astra_sim_dir
    from chakra_collectives.replay.step_choice import chosen_in_step
    from chakra_collectives.topology import load_topology

    if topology is None:
        raise InputError("--astra-sim needs --topology: the fabric the groups' algorithms are synthesized for")
    fabric = load_topology(topology)
    if fabric.num_npus != workload.num_ranks:
        raise InputError(f"{fabric.name} has {fabric.num_npus} NPUs but the workload has {workload.num_ranks} ranks")
    with tempfile.TemporaryDirectory() as scratch:
        workload.write(Path(scratch) / "step")
        catalog = chosen_in_step(Path(scratch) / "step", fabric, {name: tuple(m) for name, m in workload.groups.items()}, f"*={group_algorithm}")
    return write_grouped_astra_sim_dir(directory, fabric, workload, lambda c, members, size: catalog.get(c, members, fabric, size)[0])
