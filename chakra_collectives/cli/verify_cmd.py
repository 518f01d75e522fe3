"""``chakra-coll verify``: prove an algorithm file is well-formed, deadlock-free and correct."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from chakra_collectives.cli.app import command, console, print_json
from chakra_collectives.cli.options import collective_option, size_option
from chakra_collectives.converters.chakra_et import read_algorithm
from chakra_collectives.errors import InputError
from chakra_collectives.verify import verify_algorithm
from chakra_collectives.verify.report import Status

_MARK = {Status.PASSED: "[green]✓[/green]", Status.FAILED: "[red]✗[/red]", Status.SKIPPED: "[yellow]–[/yellow]"}


@command("verify")
def verify(
    prefix: Path = typer.Argument(..., help="Algorithm files PREFIX.{rank}.et (or one of them)."),
    collective: Optional[str] = typer.Option(None, "--collective", "-c", help="Collective to prove (default: what the files claim)."),
    send_semantics: str = typer.Option(
        "eager", "--send-semantics", help="Sends that must not deadlock: eager (ASTRA-sim), rendezvous, or both."
    ),
    size: Optional[str] = typer.Option(None, "--size", help="Collective size of foreign files (bytes only), e.g. 1MiB."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Check structure, send/recv matching, deadlock freedom and the collective's postcondition.

    Exit code 0: verified; 1: the algorithm is wrong (with a counterexample); 2: unreadable input.

    Example: [bold]chakra-coll verify out/ar --collective all-reduce[/bold]
    """
    semantics = {"eager": ("eager",), "rendezvous": ("rendezvous",), "both": ("eager", "rendezvous")}.get(send_semantics)
    if semantics is None:
        raise InputError(f"--send-semantics must be eager, rendezvous or both, not {send_semantics!r}")
    algo = read_algorithm(prefix, collective=collective_option(collective), size_bytes=size_option(size))
    report = verify_algorithm(algo, subject=str(prefix), send_semantics=semantics)
    if as_json:
        print_json(report.to_json())
    else:
        console.print(f"[bold]{prefix}[/bold]: {algo.describe()}")
        for check in report.checks:
            console.print(f"  {_MARK[check.status]} {check.name:<10} {check.summary}", soft_wrap=True)
            for line in check.details:
                console.print(f"      {line}", markup=False, soft_wrap=True)
        verdict = "[green]verified[/green]" if report.ok else "[red]NOT verified[/red]"
        console.print(verdict)
    raise typer.Exit(report.exit_code)
