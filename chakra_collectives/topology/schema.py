"""The JSON Schema of chakra-coll's own topology file, and validation with line numbers.

``schemas/topology.schema.json`` in the repository is this schema written out (a test keeps
the two identical); editors that understand JSON Schema can use it to check a file as it is
typed. :func:`validate_document` reports the first problem as one line with the file's line.

A topology file (YAML or JSON)::

    name: two-servers            # optional
    npus: 8                      # NPUs 0..7 (the ranks)
    switches: 1                  # optional: switches s0, s1, ...
    defaults:                    # optional: for links that omit them
      bandwidth_gbps: 50         # GB/s, 1 GB = 2^30 bytes (or with a unit: 400Gbps)
      latency_ns: 500            # ns (or with a unit: 0.5us)
    links:
      - {src: 0, dst: 1, bandwidth_gbps: 100, bidirectional: true}
      - {src: 0, dst: s0}        # to switch s0, with the defaults
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from chakra_collectives.errors import InputError
from chakra_collectives.locate import line_of

_ENDPOINT = {
    "description": "An NPU number (0 .. npus-1) or a switch name s0, s1, ...",
    "oneOf": [
        {"type": "integer", "minimum": 0},
        {"type": "string", "pattern": "^s[0-9]+$"},
    ],
}

_BANDWIDTH = {
    "description": "GB/s (1 GB = 2^30 bytes): a number, or a string with a unit such as 50GB/s or 400Gbps.",
    "oneOf": [{"type": "number", "exclusiveMinimum": 0}, {"type": "string"}],
}
_LATENCY = {
    "description": "ns: a number, or a string with a unit such as 500ns or 1us.",
    "oneOf": [{"type": "number", "minimum": 0}, {"type": "string"}],
}

TOPOLOGY_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://chakra-collectives/schemas/topology.schema.json",
    "title": "chakra-coll topology",
    "description": (
        "NPUs, switches and directed links with bandwidth (GB/s, 1 GB = 2^30 bytes) and latency (ns). "
        "A link is one-way unless bidirectional is true."
    ),
    "type": "object",
    "required": ["npus", "links"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "description": "Label shown in summaries."},
        "npus": {"type": "integer", "minimum": 1, "description": "Number of NPUs (ranks), numbered 0 .. npus-1."},
        "switches": {"type": "integer", "minimum": 0, "default": 0, "description": "Number of switches, named s0, s1, ..."},
        "defaults": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "bandwidth_gbps": _BANDWIDTH,
                "latency_ns": _LATENCY,
                "bidirectional": {"type": "boolean"},
            },
        },
        "links": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["src", "dst"],
                "additionalProperties": False,
                "properties": {
                    "src": _ENDPOINT,
                    "dst": _ENDPOINT,
                    "bandwidth_gbps": _BANDWIDTH,
                    "latency_ns": _LATENCY,
                    "bidirectional": {"type": "boolean", "default": False},
                },
            },
        },
    },
}


def schema_json() -> str:
    """The schema as the text of ``schemas/topology.schema.json``."""
    return json.dumps(TOPOLOGY_SCHEMA, indent=2) + "\n"


def validate_document(document: Any, *, path: str | Path, text: str) -> None:
    """Raise :class:`InputError` (with the file's line when known) unless ``document`` fits the schema."""
    import jsonschema  # imported on first use: it takes seconds to import (its format grammars)

    validator = jsonschema.Draft202012Validator(TOPOLOGY_SCHEMA)
    error = jsonschema.exceptions.best_match(validator.iter_errors(document))
    if error is None:
        return
    where = "/".join(str(p) for p in error.absolute_path)
    message = error.message
    if error.validator == "additionalProperties":
        message = message.replace("Additional properties are not allowed", "unknown key(s)")
    raise InputError(f"{'at ' + where + ': ' if where else ''}{message}", path=path, line=line_of(text, list(error.absolute_path)))
