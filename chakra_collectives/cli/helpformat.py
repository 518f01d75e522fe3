"""How ``--help`` is laid out: plain text that wraps on spaces only.

Click's formatter breaks words at hyphens and cuts words longer than a line, so an option's
help could print ``all-`` at the end of one line and ``reduce=out/ar`` on the next, and a long
path came out in pieces. This formatter wraps help text on spaces only (a word longer than
the line runs on whole) and keeps paragraphs marked with a ``\\b`` line exactly as written --
each command's example is such a paragraph, so it can be pasted into a shell as printed.

>>> print(wrap("replay with -a all-reduce=out/ar_tacos, every size", 20, "  ", "  "))
  replay with -a
  all-reduce=out/ar_tacos,
  every size
"""

from __future__ import annotations

import textwrap
from typing import Sequence

import typer
from typer.core import TyperCommand, TyperGroup

from chakra_collectives.cli.coercion import install


def wrap(text: str, width: int, initial_indent: str = "", subsequent_indent: str = "") -> str:
    """Wrap paragraphs (separated by blank lines) on spaces; a paragraph whose first line is
    ``\\b`` is kept line for line, only indented."""
    paragraphs: list[list[str]] = [[]]
    for line in text.expandtabs().splitlines():
        if line.strip():
            paragraphs[-1].append(line)
        elif paragraphs[-1]:
            paragraphs.append([])
    out = []
    for lines in filter(None, paragraphs):
        if lines[0].strip() == "\b":
            out.append("\n".join(initial_indent + line for line in lines[1:]))
            continue
        inner = len(lines[0]) - len(lines[0].lstrip())
        out.append(
            textwrap.fill(
                " ".join(line.strip() for line in lines),
                width,
                initial_indent=initial_indent + " " * inner,
                subsequent_indent=subsequent_indent + " " * inner,
                break_long_words=False,
                break_on_hyphens=False,
            )
        )
    return "\n\n".join(out)


class _Formatter(typer.Context.formatter_class):  # type: ignore[misc, name-defined]
    """Click's help formatter, with :func:`wrap` instead of its word-breaking wrapper."""

    def write_usage(self, prog: str, args: str = "", prefix: str | None = None) -> None:
        lead = f"{'':>{self.current_indent}}{prefix or 'Usage: '}{prog} "
        self.write(wrap(args, max(self.width - self.current_indent, 40), lead, " " * len(lead)) + "\n")

    def write_text(self, text: str) -> None:
        indent = " " * self.current_indent
        self.write(wrap(text, self.width, indent, indent) + "\n")

    def write_dl(self, rows: Sequence[tuple[str, str]], col_max: int = 30, col_spacing: int = 2) -> None:
        rows = list(rows)
        first_width = min(max((len(first) for first, _ in rows), default=0), col_max) + col_spacing
        text_width = max(self.width - self.current_indent - first_width, 20)
        for first, second in rows:
            self.write(f"{'':>{self.current_indent}}{first}")
            if not second:
                self.write("\n")
                continue
            if len(first) <= first_width - col_spacing:
                self.write(" " * (first_width - len(first)))
            else:
                self.write("\n" + " " * (first_width + self.current_indent))
            lines = wrap(second, text_width).splitlines() or [""]
            self.write(lines[0] + "\n")
            for line in lines[1:]:
                self.write(" " * (first_width + self.current_indent) + line + "\n")


class Context(typer.Context):
    formatter_class = _Formatter


class Command(TyperCommand):
    context_class = Context

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        install(self.get_params(ctx))  # plain values without pydantic (coercion.py)
        return super().parse_args(ctx, args)


class Group(TyperGroup):
    context_class = Context

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        install(self.get_params(ctx))
        return super().parse_args(ctx, args)
