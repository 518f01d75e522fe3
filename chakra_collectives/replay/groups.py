"""Process groups: which real ranks a collective with a given ``pg_name`` runs over.

ASTRA-sim's communicator-group file (``--comm-group-configuration``) is a JSON object mapping
each group name to its member ranks, e.g. ``{"0": [0, 1, 2, 3], "1": [4, 5, 6, 7]}``. Member
order is the group's rank order: algorithm rank ``i`` of a collective over the group runs on
the group's ``i``-th member. A COMM_COLL without ``pg_name`` runs over all ranks.

>>> g = ProcessGroups.world(8)
>>> g.members(None)
(0, 1, 2, 3, 4, 5, 6, 7)
>>> ProcessGroups.from_mapping({"tp": [2, 3]}, num_ranks=8).members("tp")
(2, 3)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from chakra_collectives.errors import InputError


class ProcessGroups:
    """Group name -> member ranks, plus the world group (``None``)."""

    def __init__(self, num_ranks: int, groups: Mapping[str, tuple[int, ...]], *, source: str | None = None) -> None:
        self.num_ranks = num_ranks
        self.groups = dict(groups)
        self.source = source
        self.unknown_names: set[str] = set()

    @classmethod
    def world(cls, num_ranks: int) -> "ProcessGroups":
        return cls(num_ranks, {})

    @classmethod
    def from_mapping(cls, mapping: Any, *, num_ranks: int, path: str | Path | None = None) -> "ProcessGroups":
        if not isinstance(mapping, dict):
            raise InputError("a communicator-group file must be a JSON object {name: [ranks...]}", path=path)
        groups: dict[str, tuple[int, ...]] = {}
        for name, members in mapping.items():
            if not isinstance(members, list) or not members or not all(isinstance(m, int) and not isinstance(m, bool) for m in members):
                raise InputError(f"group {name!r} must list its member ranks as integers", path=path)
            bad = [m for m in members if not 0 <= m < num_ranks]
            if bad:
                raise InputError(f"group {name!r} names rank {bad[0]}, but the workload has ranks 0..{num_ranks - 1}", path=path)
            if len(set(members)) != len(members):
                raise InputError(f"group {name!r} lists a rank twice", path=path)
            groups[str(name)] = tuple(members)
        return cls(num_ranks, groups, source=None if path is None else str(path))

    @classmethod
    def load(cls, path: str | Path, *, num_ranks: int) -> "ProcessGroups":
        try:
            text = Path(path).read_text()
        except OSError as error:
            raise InputError(f"cannot read communicator-group file: {error.strerror}", path=path) from None
        except UnicodeDecodeError:
            raise InputError("not a text file (expected a communicator-group JSON)", path=path) from None
        try:
            mapping = json.loads(text)
        except json.JSONDecodeError as error:
            raise InputError(f"invalid JSON: {error.msg}", path=path, line=error.lineno) from None
        return cls.from_mapping(mapping, num_ranks=num_ranks, path=path)

    def members(self, name: str | None) -> tuple[int, ...]:
        """Member ranks of ``name``; a name no file defines means all ranks (recorded)."""
        if name is None:
            return tuple(range(self.num_ranks))
        found = self.groups.get(name)
        if found is None:
            if self.source is not None:
                raise InputError(f"pg_name {name!r} is not defined (groups: {', '.join(sorted(self.groups)) or 'none'})", path=self.source)
            self.unknown_names.add(name)
            return tuple(range(self.num_ranks))
        return found
