"""Plain tables for the terminal that fit its width without breaking a word.

Numbers are right-aligned, text left-aligned; when the table is wider than the terminal, the
widest text column is wrapped on spaces (a word is never cut), so a table at 80 columns stays a
table instead of wrapping every row.

>>> import io
>>> from rich.console import Console
>>> out = Console(file=io.StringIO(), width=40)
>>> print_table(["link", "busy", "what"], [["0->1", "1.2 ms", "all-reduce of the gradients of layer 3"]], to=out)
>>> print(out.file.getvalue(), end="")
link    busy  what
────  ──────  ──────────────────────────
0->1  1.2 ms  all-reduce of the
              gradients of layer 3
"""

from __future__ import annotations

import textwrap
from typing import Sequence

from rich.console import Console
from rich.text import Text

GAP = 2


def _is_number(text: str) -> bool:
    head = text.lstrip("-+≥>= ")
    return bool(head) and (head[0].isdigit() or head in ("inf", "nan"))


def print_table(
    header: Sequence[str], rows: Sequence[Sequence[str]], *, title: str | None = None, to: Console | None = None, right: Sequence[str] = ()
) -> None:
    """Print ``rows`` under ``header``; columns named in ``right`` (or holding only numbers) are
    right-aligned."""
    from chakra_collectives.cli.app import console

    target = to or console
    columns = len(header)
    cells = [[str(c) for c in row] for row in rows]
    numeric = [name in right or all(_is_number(row[i]) for row in cells if row[i]) for i, name in enumerate(header)]
    widths = [max([len(header[i])] + [len(row[i]) for row in cells]) for i in range(columns)]
    room = target.width - GAP * (columns - 1)
    while sum(widths) > room:
        text_columns = [i for i in range(columns) if not numeric[i]]
        if not text_columns:
            break
        widest = max(text_columns, key=lambda i: widths[i])
        longest_word = max([len(w) for row in cells for w in row[widest].split()] + [len(header[widest])])
        shrunk = max(longest_word, widths[widest] - (sum(widths) - room))
        if shrunk >= widths[widest]:
            break
        widths[widest] = shrunk
    if title:
        from chakra_collectives.cli.app import say

        say(title, style="bold", to=target)

    def line(values: Sequence[str]) -> list[str]:
        wrapped = [
            textwrap.wrap(v, widths[i], break_long_words=False, break_on_hyphens=False) or [""] if not numeric[i] else [v]
            for i, v in enumerate(values)
        ]
        out = []
        for k in range(max(len(w) for w in wrapped)):
            parts = []
            for i, w in enumerate(wrapped):
                piece = w[k] if k < len(w) else ""
                parts.append(piece.rjust(widths[i]) if numeric[i] else piece.ljust(widths[i]))
            out.append((" " * GAP).join(parts).rstrip())
        return out

    target.print(Text(line(header)[0], style="bold"), soft_wrap=True)
    target.print((" " * GAP).join("─" * w for w in widths), soft_wrap=True, style="dim")
    for row in cells:
        for text in line(row):
            target.print(Text(text), soft_wrap=True)
