"""``chakra-coll verify``: prove an algorithm file is well-formed, deadlock-free and correct."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from chakra_collectives.cli.app import command, err_console, print_json, say
from chakra_collectives.cli.options import collective_option, size_option
from chakra_collectives.converters.chakra_et import read_algorithm
from chakra_collectives.errors import InputError
from chakra_collectives.verify import verify_algorithm
from chakra_collectives.cli.progress_view import showing_progress
from chakra_collectives.verify.report import Status, Verdict

_MARK = {Status.PASSED: "[green]✓[/green]", Status.FAILED: "[red]✗[/red]", Status.SKIPPED: "[yellow]–[/yellow]"}


MAX_DETAIL_LINES = 6
"""Lines of a stage's details printed (the JSON report has all)."""


@command("verify")
def verify(
    prefix: Path = typer.Argument(..., metavar="PREFIX", help="Algorithm files PREFIX.{rank}.et (or one of them)."),
    collective: Optional[str] = typer.Option(None, "--collective", "-c", metavar="NAME", help="Collective to prove (default: what the files claim)."),
    root: Optional[int] = typer.Option(None, "--root", metavar="R", help="Root rank of a broadcast or reduce (default: what the files say)."),
    send_semantics: str = typer.Option(
        "eager", "--send-semantics", metavar="SEMANTICS", help="Sends that must not deadlock: eager (ASTRA-sim), rendezvous, or both."
    ),
    size: Optional[str] = typer.Option(None, "--size", "-s", metavar="SIZE", help="Collective size of foreign files (bytes only), e.g. 1MiB."),
    allow_unproved: bool = typer.Option(
        False, "--allow-unproved", help="Exit 0 when nothing is wrong but the postcondition cannot be proved (files without chunk identity)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON (schemas/verify.schema.json)."),
) -> None:
    """Prove an algorithm's files well-formed, deadlock-free and correct.

    Checks the structure, send/recv matching, deadlock freedom and the collective's
    postcondition in every execution order. Exit code 0: verified (everything the collective
    asks was proved); 1: the algorithm is wrong (with a counterexample); 2: unreadable input or
    bad arguments; 3: nothing wrong found, but the postcondition could not be proved (files
    without chunk identity; 0 with --allow-unproved).

    \b
    Example:
      chakra-coll verify out/ar --collective all-reduce
    """
    semantics = {"eager": ("eager",), "rendezvous": ("rendezvous",), "both": ("eager", "rendezvous")}.get(send_semantics)
    if semantics is None:
        raise InputError(f"--send-semantics must be eager, rendezvous or both, not {send_semantics!r}")
    algo = read_algorithm(prefix, collective=collective_option(collective), size_bytes=size_option(size))
    with showing_progress(err_console, "verify", enabled=not as_json):
        report = verify_algorithm(algo, subject=str(prefix), root=root, send_semantics=semantics)
    exit_code = 0 if allow_unproved and report.verdict is Verdict.UNPROVED else report.exit_code
    if as_json:
        print_json(report.to_json())
        raise typer.Exit(exit_code)
    say(f"{prefix}: {algo.describe()}")
    for check in report.checks:
        say(check.summary, prefix=f"  {_MARK[check.status]} {check.name:<10} ")
        shown = check.details if len(check.details) <= MAX_DETAIL_LINES + 1 else check.details[:MAX_DETAIL_LINES]
        for line in shown:
            say(line, prefix="      ", indent=8 + len(line) - len(line.lstrip(" ")))
        if len(shown) < len(check.details):
            say(f"... {len(check.details) - len(shown)} more lines (--json has all)", prefix="      ", style="dim")
    color = {Verdict.VERIFIED: "green", Verdict.WRONG: "red", Verdict.UNPROVED: "yellow"}[report.verdict]
    say(report.conclusion(), style=f"bold {color}")
    if report.verdict is Verdict.UNPROVED:
        say(f"exit code {exit_code}" + ("" if allow_unproved else " (--allow-unproved accepts this as success)"), style="dim")
    raise typer.Exit(exit_code)
