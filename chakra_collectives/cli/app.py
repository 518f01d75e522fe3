"""The Typer application every command registers on, and what commands share.

Commands are thin: they parse options, call one library function and print. Errors the tool
raises on purpose (:class:`~chakra_collectives.errors.ChakraCollError`) become one line on
stderr and the error's exit code, never a traceback.
"""

from __future__ import annotations

import functools
import json
import sys
from typing import Any, Callable

import typer
from rich.console import Console

from chakra_collectives.cli.limits_option import with_memory_limit
from chakra_collectives.errors import ChakraCollError

app = typer.Typer(
    name="chakra-coll",
    help=(
        "Synthesize, convert, verify and replay collective-communication algorithms as Chakra "
        "execution traces (one PREFIX.{rank}.et file per rank, as ASTRA-sim reads them)."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)


def command_group(name: str, help: str) -> typer.Typer:
    """A command with subcommands (``chakra-coll NAME SUB``); register them with ``command(..., group=)``."""
    group = typer.Typer(name=name, help=help, no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False, rich_markup_mode="rich")
    app.add_typer(group, name=name)
    return group


def command(name: str, *, group: typer.Typer | None = None, **options: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register ``func`` as ``chakra-coll NAME`` (or ``chakra-coll GROUP NAME``), turning the
    tool's errors into one-line exits."""

    def register(func: Callable[..., Any]) -> Callable[..., Any]:
        limited = with_memory_limit(func, f"chakra-coll {name}")

        @functools.wraps(limited)
        def run(*args: Any, **kwargs: Any) -> Any:
            try:
                return limited(*args, **kwargs)
            except ChakraCollError as error:
                fail(error)
            except OSError as error:  # e.g. permission denied on an output folder
                where = f"{error.filename}: " if error.filename else ""
                fail(ChakraCollError(f"{where}{error.strerror or error}"))

        (group or app).command(name, **options)(run)
        return func

    return register


def fail(error: ChakraCollError) -> None:
    err_console.print(f"chakra-coll: error: {error}", markup=False, soft_wrap=True)
    raise typer.Exit(error.exit_code)


def print_json(document: Any) -> None:
    sys.stdout.write(json.dumps(document, indent=2) + "\n")
