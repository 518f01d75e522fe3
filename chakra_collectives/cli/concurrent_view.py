"""``chakra-coll synth --groups FILE``: concurrent process groups, planned to share the links."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from chakra_collectives import progress
from chakra_collectives.cli.app import err_console, print_json, say
from chakra_collectives.cli.progress_view import showing_progress
from chakra_collectives.errors import InputError
from chakra_collectives.topology import Topology
from chakra_collectives.topology.groups import describe_group
from chakra_collectives.units import format_size, format_time_ns

SCHEMA_VERSION = 1


def read_groups_file(path: Path) -> dict[str, Any]:
    """ASTRA-sim's communicator-group JSON (``{name: [ranks...]}``) as a mapping, or :class:`InputError`."""
    try:
        text = Path(path).read_text()
    except OSError as error:
        raise InputError(f"cannot read the groups file: {error.strerror}", path=path) from None
    try:
        mapping = json.loads(text)
    except json.JSONDecodeError as error:
        raise InputError(f"invalid JSON: {error.msg}", path=path, line=error.lineno) from None
    if not isinstance(mapping, dict):
        raise InputError("a communicator-group file must be a JSON object {name: [ranks...]}", path=path)
    for name, members in mapping.items():
        if not isinstance(members, list) or not all(isinstance(m, int) and not isinstance(m, bool) for m in members):
            raise InputError(f"group {name!r} must list its member ranks as integers", path=path)
    return mapping


def synth_concurrent(
    topology: Topology, groups_file: Path, collective: str, size: str, *, algorithm: str, output_text: str | None, as_json: bool,
    bounds: str, network_model: str, **options: Any,
) -> None:
    """Plan every group of ``groups_file`` at once, print or ``--json`` the plans, write the joint one."""
    from chakra_collectives.synth.concurrent import check_concurrent_groups, synthesize_concurrent

    if network_model != "default":
        raise InputError("--groups times the groups under the default network model only")
    chosen = "forestcoll" if algorithm == "best" else algorithm
    groups = check_concurrent_groups(read_groups_file(groups_file), topology.num_npus, what=str(groups_file))
    with showing_progress(err_console, "synth", enabled=not as_json):
        result = synthesize_concurrent(topology, groups, collective, size, algorithm=chosen, bounds=bounds != "none", **options)
        written = None
        if output_text is not None:
            from chakra_collectives.converters.chakra_et import write_algorithm

            with progress.task("write ETs"):
                for name, algo in result.joint.algorithms.items():
                    write_algorithm(algo, f"{output_text}_{name}")
            written = f"{output_text}_{{group}}.{{rank}}.et"
    document = {"schema_version": SCHEMA_VERSION, "kind": "concurrent-groups", "algorithm": chosen, **result.as_dict(), "output": written}
    if as_json:
        print_json(document)
        return
    say(f"{result.collective.value} of {format_size(result.size_bytes)} over {len(groups)} concurrent groups on {topology.name}", style="bold")
    bound = result.together_bound_ns
    for name, plan in result.plans.items():
        slowest = max(plan.alone_ns.values())
        mark = "  <- joint" if name == result.joint.name else ""
        efficiency = f", efficiency {bound / plan.together_ns:.3f}" if bound else ""
        say(f"{format_time_ns(plan.together_ns)} together (slowest alone {format_time_ns(slowest)}{efficiency}){mark}", prefix=f"[dim]{name:<10}[/dim]  ")
    if bound:
        say(f"{format_time_ns(bound)} for all the groups at once (they share the links)", prefix=f"[dim]{'bound':<10}[/dim]  ")
    for name, why in result.skipped.items():
        say(f"not planned: {why}", prefix=f"[dim]{name:<10}[/dim]  ")
    for name, members in groups.items():
        alone = result.bounds_ns.get(name)
        joint = result.joint.finish_ns[name]
        against = f"; its bound alone {format_time_ns(alone)}" if alone else ""
        say(f"NPUs {describe_group(members)}: {format_time_ns(joint)} together{against}", prefix=f"[dim]{'group ' + name:<10}[/dim]  ")
    if written is not None:
        say(f"{written} ({len(groups)} groups, the joint plan)", prefix=f"[dim]{'written':<10}[/dim]  ")


__all__ = ["read_groups_file", "synth_concurrent"]
