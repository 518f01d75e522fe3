"""``chakra-coll import-msccl`` and ``export-msccl``: MSCCL-IR XML to Chakra ET and back."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Optional

import typer

from chakra_collectives.cli.app import command, print_json, say
from chakra_collectives.cli.options import JSON, REDUCE_BANDWIDTH, collective_option, merged, prefix_option, size_option, warn
from chakra_collectives.errors import AlgorithmError, InputError

SCHEMA_VERSION = 1
"""Version of ``import-msccl --json`` and ``export-msccl --json`` (``schemas/import-msccl.schema.json``,
``schemas/export-msccl.schema.json``)."""


@command("import-msccl")
def import_msccl_command(
    xml: Path = typer.Argument(..., metavar="XML", help="MSCCL-IR XML file (MSCCLang's output; text around the <algo> is ignored)."),
    output_text: str = typer.Option(
        ..., "--output", "-o", metavar="PREFIX", help="Write the Chakra ETs PREFIX.{rank}.et (a folder, e.g. out/: out/XMLNAME.{rank}.et)."
    ),
    size: str = typer.Option("1MiB", "--size", "-s", metavar="SIZE", help="Collective size: bytes of the larger per-rank buffer, e.g. 1MiB."),
    index: Optional[int] = typer.Option(None, "--index", metavar="N", help="Which <algo> document, when the file holds several (0, 1, ...)."),
    collective: Optional[str] = typer.Option(None, "--collective", "-c", metavar="NAME", help="Collective to claim instead of the XML's coll label."),
    root: Optional[int] = typer.Option(None, "--root", metavar="R", help="Root rank of a broadcast or reduce (default: inferred from the buffers)."),
    reduce_bandwidth_gbps: Optional[float] = REDUCE_BANDWIDTH,
    old_reduce_gbps: Optional[float] = typer.Option(None, "--reduce-gbps", hidden=True, help="Deprecated: --reduce-bandwidth-gbps."),
    gzip: bool = typer.Option(False, "--gzip", help="Write PREFIX.{rank}.et.gz."),
    verify: bool = typer.Option(False, "--verify", help="Prove the collective first; write nothing unless it is verified."),
    astra_sim: Optional[Path] = typer.Option(
        None, "--astra-sim", metavar="DIR", help="Also write DIR for ASTRA-sim: the ETs, system.json, network.yml, a microbenchmark workload, run.sh."
    ),
    topology: Optional[str] = typer.Option(
        None, "--topology", "-t", metavar="SPEC|FILE",
        help="The network of --astra-sim's network.yml and expected time: a builder spec or a topology file. Default: switch:N, "
        "the N GPUs on one switch (an NVSwitch node, what MSCCL programs are written for).",
    ),
    as_json: bool = JSON,
) -> None:
    """Convert MSCCL-IR XML into Chakra ET files ASTRA-sim runs.

    Every step type; operations keep their chunks, so chakra-coll verify PREFIX proves the
    collective afterwards. A step moves cnt x ceil(size / nchunksperloop) bytes. Errors name
    the XML line; nothing is written then. Operations remember their threadblock and
    channel, so export-msccl writes the program back in the same layout.

    \b
    Examples:
      chakra-coll import-msccl allreduce_ring.xml --size 1MiB -o out/ar
      chakra-coll import-msccl allpairs.xml -o out/ar --astra-sim out/astra
    """
    from chakra_collectives.converters.chakra_et import write_algorithm
    from chakra_collectives.converters.msccl import read_programs
    from chakra_collectives.converters.msccl.io import choose_program
    from chakra_collectives.converters.msccl.lower import lower_program
    from chakra_collectives.units import format_size
    from chakra_collectives.verify import verify_algorithm

    reduce_gbps = merged(reduce_bandwidth_gbps, "--reduce-bandwidth-gbps", old_reduce_gbps, "--reduce-gbps", None)
    output = prefix_option(output_text, xml.stem)
    size_bytes = size_option(size)
    program = choose_program(read_programs(xml), index, xml)
    imported = lower_program(program, size_bytes=size_bytes, path=xml, collective=collective_option(collective), root=root)
    algo = imported.algorithm
    report = verify_algorithm(algo, subject=str(xml)) if verify else None
    for message in imported.warnings:
        warn(message)
    if report is not None and not report.ok:
        failed = next((c for c in report.checks if c.status.value == "failed"), None)
        reason = f"{failed.name} check failed: {failed.summary}" if failed is not None else report.conclusion()
        raise AlgorithmError(f"not written: {reason}", path=xml)
    handoff = None
    if astra_sim is not None:  # before the ETs: a topology or collective ASTRA-sim cannot take leaves nothing written
        from chakra_collectives.astra_sim import write_astra_sim_dir
        from chakra_collectives.topology import load_topology

        handoff = write_astra_sim_dir(astra_sim, load_topology(topology or f"switch:{algo.num_ranks}"), algo)
    elif topology is not None:
        raise InputError("--topology is the network of --astra-sim DIR; give --astra-sim too")
    paths = write_algorithm(algo, output, reduce_bandwidth_gbps=reduce_gbps, compress=gzip)
    ops = _ops_by_kind(algo)
    if as_json:
        print_json(
            {
                "schema_version": SCHEMA_VERSION,
                "source": str(xml),
                "name": algo.name,
                "collective": algo.collective.value,
                "root": algo.root,
                "inplace": algo.inplace,
                "num_ranks": algo.num_ranks,
                "chunk_count": algo.chunk_count,
                "size_bytes": algo.size_bytes,
                "chunk_bytes": algo.chunk_bytes(),
                "steps": program.step_types(),
                "ops": ops,
                "files": [str(p) for p in paths],
                "verdict": None if report is None else report.verdict.value,
                "verified": None if report is None else report.ok,
                "warnings": imported.warnings,
                "astra_sim": None if handoff is None else handoff.as_dict(),
            }
        )
        return
    steps = ", ".join(f"{n} {t}" for t, n in sorted(program.step_types().items()))
    say(f"{xml}: {algo.describe()}, {format_size(algo.size_bytes)} ({format_size(algo.chunk_bytes())} per chunk)", style="bold")
    say(f"{program.num_steps} steps ({steps})", prefix="  ")
    say(f"-> {', '.join(f'{n} {k}' for k, n in ops.items() if n)} operations", prefix="  ")
    if report is not None:
        say(report.conclusion(), prefix="  ", style="green")
    say(f"wrote {paths[0]} .. {paths[-1].name}" if len(paths) > 1 else f"wrote {paths[0]}", prefix="  ")
    if handoff is not None:
        from chakra_collectives.cli.handoff import print_astra_sim_dir

        print_astra_sim_dir(handoff)


def _bytes(text: str) -> int:
    """A size option that may be 0 (``0`` = no limit)."""
    return 0 if text.strip() == "0" else int(size_option(text) or 0)


@command("export-msccl")
def export_msccl_command(
    prefix: Path = typer.Argument(..., metavar="PREFIX", help="Algorithm files PREFIX.{rank}.et (written by chakra-coll)."),
    output: Path = typer.Option(..., "--output", "-o", metavar="XML", help="MSCCL-IR XML file to write."),
    fuse: bool = typer.Option(True, "--fuse/--no-fuse", help="Fuse receive chains into rcs/rrc/rrs/rrcs steps."),
    fit_limits: bool = typer.Option(
        True,
        "--fit-limits/--no-fit-limits",
        help="Use more channels to stay within the runtime's limits (64 steps per threadblock, 32 threadblocks per channel, "
        "32 channels, cnt < 72); refuse what still exceeds them. --no-fit-limits writes it with warnings.",
    ),
    allow_rendezvous_deadlock: bool = typer.Option(
        False,
        "--allow-rendezvous-deadlock",
        help="Write a program that deadlocks with rendezvous sends (full per-connection buffers) although the algorithm does not; "
        "a warning instead of an error.",
    ),
    proto: str = typer.Option("Simple", "--proto", metavar="PROTO", help="NCCL protocol the runtime uses: Simple, LL or LL128."),
    name: Optional[str] = typer.Option(None, "--name", metavar="NAME", help="Algorithm name in the XML (default: the algorithm's own)."),
    min_bytes: str = typer.Option("0", "--min-bytes", metavar="SIZE", help="Smallest call size the runtime should use it for, e.g. 1MiB."),
    max_bytes: str = typer.Option("0", "--max-bytes", metavar="SIZE", help="Largest call size the runtime should use it for; 0 = any."),
    as_json: bool = JSON,
) -> None:
    """Write an algorithm's files as MSCCL-IR XML the MSCCL runtime loads.

    Threadblocks per connection, FIFO-consistent channels, depid/deps and nop runs, hasdep
    flags, and the attributes the current runtime requires (outofplace, minBytes, maxBytes).
    The program is read back and run with rendezvous sends (a send waits for its receive, as
    when the runtime's per-connection buffers are full): an algorithm that finishes that way
    gets a program that does too, using more channels or unfused steps if needed, or an
    error. import-msccl reads the file back.

    \b
    Example:
      chakra-coll export-msccl out/ar -o ar.xml --min-bytes 1MiB
    """
    from chakra_collectives.converters.chakra_et import read_algorithm
    from chakra_collectives.converters.msccl import MscclOptions, MscclWarning, export_msccl

    options = MscclOptions(
        fuse=fuse,
        fit_limits=fit_limits,
        proto=proto,
        name=name,
        min_bytes=_bytes(min_bytes),
        max_bytes=_bytes(max_bytes),
        allow_rendezvous_deadlock=allow_rendezvous_deadlock,
    )
    if options.max_bytes and options.min_bytes > options.max_bytes:
        raise InputError(f"--min-bytes {min_bytes} is more than --max-bytes {max_bytes}")
    algo = read_algorithm(prefix)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", MscclWarning)
        lifted = export_msccl(algo, output, options)
    program = lifted.program
    found = [str(w.message) for w in caught if issubclass(w.category, MscclWarning)]
    for w in caught:
        if not issubclass(w.category, MscclWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    for message in found:
        warn(message)
    tbs = sum(len(g.threadblocks) for g in program.gpus)
    if as_json:
        print_json(
            {
                "schema_version": SCHEMA_VERSION,
                "source": str(prefix),
                "output": str(output),
                "collective": algo.collective.value,
                "num_ranks": program.ngpus,
                "nchunksperloop": program.nchunksperloop,
                "nchannels": program.nchannels,
                "threadblocks": tbs,
                "steps": program.step_types(),
                "warnings": found,
                "rendezvous_deadlock_free": lifted.rendezvous_free,
                "layout_note": lifted.layout_note,
                "placement": list(algo.placement) or None,
                # deprecated spellings, kept for one release
                "coll": program.coll,
                "ngpus": program.ngpus,
                "deprecated": {"coll": "collective", "ngpus": "num_ranks"},
            }
        )
        return
    steps = ", ".join(f"{n} {t}" for t, n in sorted(program.step_types().items()))
    say(f"{prefix}: {algo.describe()}", style="bold")
    say(f"-> {program.num_steps} steps ({steps}) in {tbs} threadblocks, {program.nchannels} channel(s)", prefix="  ")
    if lifted.layout_note:
        say(lifted.layout_note, prefix="  ")
    if algo.placement:
        from chakra_collectives.topology.groups import describe_group

        say(
            f"a process group's algorithm: MSCCL ranks 0-{program.ngpus - 1} are the group's, on NPUs {describe_group(algo.placement)} in that "
            "order; run it on a communicator of those ranks (its paths through the other NPUs are the network's)",
            prefix="  ",
        )
    if lifted.rendezvous_free:
        say("deadlock-free with rendezvous sends (read back and run)", prefix="  ", style="green")
    say(f"wrote {output}", prefix="  ")


def _ops_by_kind(algo: Any) -> dict[str, int]:
    from chakra_collectives.ir import OpKind

    kinds = algo.ops.kind
    return {kind.name: int((kinds == kind).sum()) for kind in OpKind}
