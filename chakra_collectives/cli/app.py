"""The ``chakra-coll`` application, and what its commands share.

Commands are thin: they parse options, call one library function and print. Errors the tool
raises on purpose (:class:`~chakra_collectives.errors.ChakraCollError`) become one line on
stderr and the error's exit code, never a traceback.

Each command lives in its own module, which :data:`COMMANDS` names; a module is imported only
when its command runs (or its own ``--help`` is asked for), so ``chakra-coll --help`` and a
quick command start in a fraction of a second instead of importing numpy, networkx, lxml and
matplotlib first. Help is plain text (no markup: brackets and braces print as written).
"""

from __future__ import annotations

import functools
import importlib
import json
import re
import sys
import textwrap
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Callable, Iterator

import typer

from chakra_collectives.cli.limits_option import with_memory_limit
from chakra_collectives.cli.helpformat import Command, Group
from chakra_collectives.cli.start_up import resume_collector
from chakra_collectives.errors import ChakraCollError

if TYPE_CHECKING:
    from rich.console import Console

COMMANDS: tuple[tuple[str, str | tuple[str, ...], str], ...] = (
    ("demo", "demo_cmd", "The main job on a built-in example: synthesize, verify, replay, compare, draw."),
    ("synth", "synth_cmd", "Synthesize a collective for a topology (TACOS, ForestColl, BFB or a baseline) and write its ETs."),
    ("verify", "verify_cmd", "Prove an algorithm's files well-formed, deadlock-free and correct."),
    ("replay", "replay_cmd", "Time a workload's ETs with its collectives expanded, on a topology."),
    ("workload", ("workload_cmd", "pytorch_cmd"), "Write workload ETs: a microbenchmark, training steps, or from PyTorch traces."),
    ("plot", "plot_cmd", "Draw a replay's timeline or link utilization, or an algorithm's chunks."),
    ("inspect", "inspect_cmd", "Per-rank statistics of an algorithm's or a workload's files."),
    ("topo-info", "topo_info_cmd", "What a topology offers collectives: ports, diameter, bisection, bounds, BFB."),
    ("search", "search_cmd", "Choose a fabric and its collective algorithms for a job by simulating the job."),
    ("import-msccl", "msccl_cmd", "Convert MSCCL-IR XML into Chakra ET files ASTRA-sim runs."),
    ("export-msccl", "msccl_cmd", "Write an algorithm's files as MSCCL-IR XML the MSCCL runtime loads."),
)
"""Every command, in the order a user meets them: name, module(s) in this package that register
it (a group's subcommands may come from several), one line of help (each command's docstring
starts with the same line; a test keeps them equal)."""

_REGISTERED: dict[str, typer.Typer] = {}
"""The Typer app of every command whose module has been imported."""


class _Commands(Mapping):
    """The commands by name, each imported on first access."""

    def __iter__(self) -> Iterator[str]:
        return iter(name for name, _, _ in COMMANDS)

    def __len__(self) -> int:
        return len(COMMANDS)

    def __getitem__(self, name: str) -> Any:
        modules = next((m for n, m, _ in COMMANDS if n == name), None)
        if modules is None:
            raise KeyError(name)
        for module in (modules,) if isinstance(modules, str) else modules:
            importlib.import_module(f"chakra_collectives.cli.{module}")
        return typer.main.get_command(_REGISTERED[name])


class _LazyGroup(Group):
    """The top-level group: commands load when used; the command list needs none of them."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.commands = _Commands()  # type: ignore[assignment]

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, short) for name, _, short in COMMANDS])


app = typer.Typer(
    name="chakra-coll",
    cls=_LazyGroup,
    help=(
        "Synthesize, convert, verify and replay collective-communication algorithms as Chakra "
        "execution traces: one PREFIX.{rank}.et file per rank, as ASTRA-sim reads them. "
        "Run chakra-coll COMMAND --help for a command's options and an example."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)



@app.callback()
def _top() -> None:
    pass


class LazyConsole:
    """A :class:`rich.console.Console` made when first used (importing rich takes ~20 ms): a
    command that prints only JSON never makes one. Its attributes are the console's, read and
    written (``monkeypatch.setattr(console, "_width", 80)`` sets the console's own).

    The tool's consoles (:data:`console`, :data:`err_console`) print text as written: no emoji
    codes (``:name:`` is not replaced, and rich's table of emoji names, ~15 ms of CPU to
    import, is never loaded).

    >>> out = LazyConsole(width=12, highlight=False)
    >>> out.width, out.made.width
    (12, 12)
    """

    def __init__(self, **options: Any) -> None:
        object.__setattr__(self, "_options", options)
        object.__setattr__(self, "_made", None)

    @property
    def made(self) -> Console:
        """The console itself, made now if it was not yet."""
        if self._made is None:
            from rich.console import Console

            object.__setattr__(self, "_made", Console(**self._options))
        return self._made

    def __getattr__(self, name: str) -> Any:
        return getattr(self.made, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.made, name, value)


console = LazyConsole(highlight=False, emoji=False)
err_console = LazyConsole(stderr=True, highlight=False, emoji=False)


def _typer(name: str, help: str | None = None) -> typer.Typer:
    return typer.Typer(
        name=name, cls=Group, help=help, no_args_is_help=help is not None, add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None
    )


def command_group(name: str, help: str) -> typer.Typer:
    """A command with subcommands (``chakra-coll NAME SUB``); register them with ``command(..., group=)``."""
    group = _typer(name, help)
    _REGISTERED[name] = group
    return group


def command(name: str, *, group: typer.Typer | None = None, **options: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register ``func`` as ``chakra-coll NAME`` (or ``chakra-coll GROUP NAME``), turning the
    tool's errors into one-line exits. A top-level NAME must be listed in :data:`COMMANDS`."""

    def register(func: Callable[..., Any]) -> Callable[..., Any]:
        limited = with_memory_limit(func, f"chakra-coll {name}")

        @functools.wraps(limited)
        def run(*args: Any, **kwargs: Any) -> Any:
            resume_collector()  # start-up is over: its modules are loaded
            try:
                return limited(*args, **kwargs)
            except ChakraCollError as error:
                fail(error)
            except OSError as error:  # e.g. permission denied on an output folder
                where = f"{error.filename}: " if error.filename else ""
                fail(ChakraCollError(f"{where}{error.strerror or error}"))

        if group is None:
            _REGISTERED[name] = _typer(name)
            _REGISTERED[name].command(name, cls=Command, **options)(run)
        else:
            group.command(name, cls=Command, **options)(run)
        return func

    return register


def fail(error: ChakraCollError) -> None:
    err_console.print(f"chakra-coll: error: {error}", markup=False, soft_wrap=True)
    raise typer.Exit(error.exit_code)


_KEEP_UNIT = re.compile(r"(\d) (ns|µs|ms|s|B|KiB|MiB|GiB|TiB|GB/s|files|ranks|NPUs|links)\b")


def say(text: str, *, prefix: str = "", indent: int | None = None, style: str | None = None, to: Console | LazyConsole | None = None) -> None:
    """Print ``text`` wrapped at the terminal's width on spaces only: a path or any other word
    longer than a line is never broken (it runs on, and the terminal's copy keeps it whole).

    ``prefix`` (rich markup, e.g. a coloured mark) starts the first line; continuation lines
    are indented by ``indent`` (default: the prefix's width). ``text`` is plain (no markup).

    >>> import io
    >>> from rich.console import Console
    >>> out = Console(file=io.StringIO(), width=30)
    >>> say("wrote /a/very/long/path/that/does/not/fit/in/thirty/columns.et and more", prefix="  ", to=out)
    >>> print(out.file.getvalue(), end="")
      wrote
      /a/very/long/path/that/does/not/fit/in/thirty/columns.et
      and more
    """
    from rich.text import Text

    target = to or console
    text = _KEEP_UNIT.sub("\\1\u00a0\\2", text)  # a number never ends a line without its unit
    stripped = text.lstrip(" ")
    lead = Text.from_markup(prefix, emoji=False) + " " * (len(text) - len(stripped))
    text = stripped
    hang = lead.cell_len if indent is None else indent
    lines = textwrap.wrap(
        text, width=max(target.width - lead.cell_len, 20), subsequent_indent=" " * max(hang - lead.cell_len, 0),
        break_long_words=False, break_on_hyphens=False,
    ) or [""]
    for number, line in enumerate(lines):
        head = lead.copy() if number == 0 else Text(" " * min(hang, lead.cell_len))
        target.print(head + Text(line.replace("\u00a0", " "), style=style or ""), soft_wrap=True, highlight=False)


def invocation() -> str:
    """How to run chakra-coll again from here: ``chakra-coll`` when that is on the PATH and is
    this program, else the path this program was started by (``.venv/bin/chakra-coll`` after
    ``make install`` without activating the venv)."""
    import os
    import shutil

    started = sys.argv[0] if sys.argv else ""
    if os.path.basename(started) != "chakra-coll":
        return "chakra-coll"
    found = shutil.which("chakra-coll")
    if found and os.path.realpath(found) == os.path.realpath(started):
        return "chakra-coll"
    relative = os.path.relpath(started)
    return relative if not relative.startswith("..") and os.sep in relative else started


def print_json(document: Any) -> None:
    sys.stdout.write(json.dumps(document, indent=2) + "\n")
