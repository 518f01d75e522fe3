"""``chakra-coll import-msccl`` and ``export-msccl``: MSCCL-IR XML to Chakra ET and back."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Optional

import typer

from chakra_collectives.cli.app import command, console, err_console, print_json
from chakra_collectives.cli.options import collective_option, size_option
from chakra_collectives.converters.chakra_et import read_algorithm, write_algorithm
from chakra_collectives.converters.msccl import MscclOptions, MscclWarning, read_programs, write_msccl
from chakra_collectives.converters.msccl.io import choose_program
from chakra_collectives.converters.msccl.lower import lower_program
from chakra_collectives.errors import AlgorithmError
from chakra_collectives.ir import CollectiveAlgorithm, OpKind
from chakra_collectives.units import format_size
from chakra_collectives.verify import verify_algorithm


@command("import-msccl")
def import_msccl_command(
    xml: Path = typer.Argument(..., help="MSCCL-IR XML file (MSCCLang's output; text around the <algo> is ignored)."),
    output: Path = typer.Option(..., "--output", "-o", help="Prefix of the Chakra ET files to write: PREFIX.{rank}.et."),
    size: str = typer.Option("1MiB", "--size", help="Collective size: bytes of the larger per-rank buffer, e.g. 1MiB."),
    index: Optional[int] = typer.Option(None, "--index", help="Which <algo> document, when the file holds several (0, 1...)."),
    collective: Optional[str] = typer.Option(None, "--collective", "-c", help="Collective to claim instead of the XML's coll label."),
    root: Optional[int] = typer.Option(None, "--root", help="Root rank of a broadcast/reduce (default: inferred from the buffers)."),
    reduce_gbps: Optional[float] = typer.Option(
        None, "--reduce-gbps", help="Give reductions and copies a duration of bytes / this bandwidth (GB/s, 1 GB = 2^30 B)."
    ),
    gzip: bool = typer.Option(False, "--gzip", help="Write PREFIX.{rank}.et.gz."),
    verify: bool = typer.Option(False, "--verify", help="Prove the collective first; write nothing if it fails."),
    as_json: bool = typer.Option(False, "--json", help="Print what was imported as JSON."),
) -> None:
    """Convert MSCCL-IR XML into Chakra ET files ASTRA-sim runs (every step type, verifiable).

    Operations keep their chunks, so [bold]chakra-coll verify PREFIX[/bold] proves the collective afterwards.

    A step moves cnt x ceil(size / nchunksperloop) bytes. Errors name the XML line; nothing is written then.

    Example: [bold]chakra-coll import-msccl allreduce_ring.xml --size 1MiB -o out/ar[/bold]
    """
    size_bytes = size_option(size)
    with err_console.status(f"importing {xml}"):
        program = choose_program(read_programs(xml), index, xml)
        imported = lower_program(program, size_bytes=size_bytes, path=xml, collective=collective_option(collective), root=root)
        algo = imported.algorithm
        report = verify_algorithm(algo, subject=str(xml)) if verify else None
    for message in imported.warnings:
        err_console.print(f"chakra-coll: warning: {message}", markup=False, soft_wrap=True)
    if report is not None and not report.ok:
        failed = next(c for c in report.checks if c.status.value == "failed")
        raise AlgorithmError(f"not written: {failed.name} check failed: {failed.summary}", path=xml)
    paths = write_algorithm(algo, output, reduce_bandwidth_gbps=reduce_gbps, compress=gzip)
    summary = _summary(algo)
    if as_json:
        print_json(
            {
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
                "ops": summary,
                "files": [str(p) for p in paths],
                "verified": None if report is None else report.ok,
                "warnings": imported.warnings,
            }
        )
        return
    steps = ", ".join(f"{n} {t}" for t, n in sorted(program.step_types().items()))
    console.print(f"[bold]{xml}[/bold]: {algo.describe()}, {format_size(algo.size_bytes)} ({format_size(algo.chunk_bytes())} per chunk)")
    console.print(f"  {program.num_steps} steps ({steps})")
    console.print(f"  -> {', '.join(f'{n} {k}' for k, n in summary.items() if n)} operations")
    if report is not None:
        console.print("  [green]verified[/green]: " + report.check("semantics").summary)
    console.print(f"  wrote {paths[0]} .. {paths[-1].name}" if len(paths) > 1 else f"  wrote {paths[0]}")


@command("export-msccl")
def export_msccl_command(
    prefix: Path = typer.Argument(..., help="Algorithm files PREFIX.{rank}.et (written by chakra-coll)."),
    output: Path = typer.Option(..., "--output", "-o", help="MSCCL-IR XML file to write."),
    fuse: bool = typer.Option(True, "--fuse/--no-fuse", help="Fuse receive chains into rcs/rrc/rrs/rrcs steps."),
    fit_limits: bool = typer.Option(
        True, "--fit-limits/--no-fit-limits", help="Use more channels to stay within 64 steps per threadblock, 32 per channel."
    ),
    proto: str = typer.Option("Simple", "--proto", help="NCCL protocol the runtime uses: Simple, LL or LL128."),
    name: Optional[str] = typer.Option(None, "--name", help="Algorithm name in the XML (default: the algorithm's own)."),
    min_bytes: int = typer.Option(0, "--min-bytes", help="Smallest call size (bytes) the runtime should use it for."),
    max_bytes: int = typer.Option(0, "--max-bytes", help="Largest call size (bytes) the runtime should use it for; 0 = any."),
    as_json: bool = typer.Option(False, "--json", help="Print what was written as JSON."),
) -> None:
    """Write an algorithm as MSCCL-IR XML the MSCCL runtime loads (and import-msccl reads back).

    Threadblocks per connection, FIFO-consistent channels, depid/deps and nop runs, hasdep flags.

    Writes the attributes the current runtime requires (outofplace, minBytes, maxBytes) and warns where its limits are exceeded.

    Example: [bold]chakra-coll export-msccl out/ar -o ar.xml[/bold]
    """
    options = MscclOptions(fuse=fuse, fit_limits=fit_limits, proto=proto, name=name, min_bytes=min_bytes, max_bytes=max_bytes)
    algo = read_algorithm(prefix)
    with err_console.status(f"exporting {prefix}"), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", MscclWarning)
        program = write_msccl(algo, output, options)
    found = [str(w.message) for w in caught if issubclass(w.category, MscclWarning)]
    for w in caught:
        if not issubclass(w.category, MscclWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    for message in found:
        err_console.print(f"chakra-coll: warning: {message}", markup=False, soft_wrap=True)
    tbs = sum(len(g.threadblocks) for g in program.gpus)
    if as_json:
        print_json(
            {
                "source": str(prefix),
                "output": str(output),
                "coll": program.coll,
                "ngpus": program.ngpus,
                "nchunksperloop": program.nchunksperloop,
                "nchannels": program.nchannels,
                "threadblocks": tbs,
                "steps": program.step_types(),
                "warnings": found,
            }
        )
        return
    steps = ", ".join(f"{n} {t}" for t, n in sorted(program.step_types().items()))
    console.print(f"[bold]{prefix}[/bold]: {algo.describe()}")
    console.print(f"  -> {program.num_steps} steps ({steps}) in {tbs} threadblocks, {program.nchannels} channel(s)")
    console.print(f"  wrote {output}")


def _summary(algo: CollectiveAlgorithm) -> dict[str, int]:
    kinds = algo.ops.kind
    return {kind.name: int((kinds == kind).sum()) for kind in OpKind}
