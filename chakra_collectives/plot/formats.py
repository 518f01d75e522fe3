"""Image formats by file suffix (kept apart from matplotlib, which is slow to import).

>>> output_format("links.svg")
'svg'
"""

from __future__ import annotations

from pathlib import Path

from chakra_collectives.errors import InputError

FORMATS = {".png": "png", ".svg": "svg"}


def output_format(path: str | Path) -> str:
    """``png`` or ``svg`` from the file name's suffix (anything else is refused)."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise InputError(f"cannot tell the image format from {suffix or 'no suffix'!r}: name the file .png or .svg", path=path)
    return FORMATS[suffix]
