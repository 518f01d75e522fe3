"""The JSON Schemas of every ``--json`` output (``schemas/*.schema.json``)."""

from __future__ import annotations

import functools
import json
from pathlib import Path

SCHEMAS = Path(__file__).resolve().parents[1] / "schemas"


@functools.cache
def schema(command: str) -> dict:
    """The schema of ``chakra-coll COMMAND --json`` (``verify``, ``synth``, ...)."""
    return json.loads((SCHEMAS / f"{command}.schema.json").read_text())
