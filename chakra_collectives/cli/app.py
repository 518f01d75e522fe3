"""The Typer application every command registers on, and what commands share.

Commands are thin: they parse options, call one library function and print. Errors the tool
raises on purpose (:class:`~chakra_collectives.errors.ChakraCollError`) become one line on
stderr and the error's exit code, never a traceback.
"""

from __future__ import annotations

import functools
import json
import sys
import textwrap
from typing import Any, Callable

import typer
from rich.console import Console

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
        @functools.wraps(func)
        def run(*args: Any, **kwargs: Any) -> Any:
            try:
                return func(*args, **kwargs)
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


def say(text: str, *, prefix: str = "", indent: int | None = None, style: str | None = None, to: Console | None = None) -> None:
    """Print ``text`` wrapped at the terminal's width on spaces only: a path or any other word
    longer than a line is never broken (it runs on, and the terminal's copy keeps it whole).

    ``prefix`` (rich markup, e.g. a coloured mark) starts the first line; continuation lines
    are indented by ``indent`` (default: the prefix's width). ``text`` is plain (no markup).

    >>> import io
    >>> out = Console(file=io.StringIO(), width=30)
    >>> say("wrote /a/very/long/path/that/does/not/fit/in/thirty/columns.et and more", prefix="  ", to=out)
    >>> print(out.file.getvalue(), end="")
      wrote
      /a/very/long/path/that/does/not/fit/in/thirty/columns.et
      and more
    """
    from rich.text import Text

    target = to or console
    stripped = text.lstrip(" ")
    lead = Text.from_markup(prefix) + " " * (len(text) - len(stripped))
    text = stripped
    hang = lead.cell_len if indent is None else indent
    lines = textwrap.wrap(
        text, width=max(target.width - lead.cell_len, 20), subsequent_indent=" " * max(hang - lead.cell_len, 0),
        break_long_words=False, break_on_hyphens=False,
    ) or [""]
    for number, line in enumerate(lines):
        head = lead.copy() if number == 0 else Text(" " * min(hang, lead.cell_len))
        target.print(head + Text(line, style=style or ""), soft_wrap=True, highlight=False)


def print_json(document: Any) -> None:
    sys.stdout.write(json.dumps(document, indent=2) + "\n")
