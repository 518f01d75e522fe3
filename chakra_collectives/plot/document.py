"""Read what ``chakra-coll replay --json`` wrote, for the pictures that draw it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from chakra_collectives.errors import InputError

HOW = "write it with: chakra-coll replay WORKLOAD -t TOPOLOGY --json --timeline > replay.json"


def load_replay_document(path: str | Path, *, need_links: bool = False) -> dict[str, Any]:
    """The replay JSON at ``path`` with its timeline (and link utilization when ``need_links``)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise InputError(f"cannot read replay JSON: {error.strerror}", path=path) from None
    except UnicodeDecodeError:
        raise InputError(f"not a text file; expected the JSON of chakra-coll replay --json ({HOW})", path=path) from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise InputError(f"invalid JSON: {error.msg}", path=path, line=error.lineno) from None
    if not isinstance(document, dict) or "total_ns" not in document or "ranks" not in document:
        raise InputError(f"not the output of chakra-coll replay --json ({HOW})", path=path)
    timeline = document.get("timeline")
    if not isinstance(timeline, dict):
        raise InputError(f"has no timeline ({HOW})", path=path)
    nodes = timeline.get("nodes")
    columns = ("rank", "kind", "start_ns", "end_ns", "collective")
    if not isinstance(nodes, dict) or any(not isinstance(nodes.get(c), list) for c in columns) or len({len(nodes[c]) for c in columns}) != 1:
        raise InputError(f"timeline.nodes must hold equally long lists {', '.join(columns)} ({HOW})", path=path)
    if need_links and not (isinstance(timeline.get("links"), dict) and isinstance(timeline["links"].get("rows"), list)):
        raise InputError(f"the timeline has no link utilization (the replay recorded no link intervals; {HOW})", path=path)
    return document
