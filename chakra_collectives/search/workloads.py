"""Workload variants of a search: what to time on every candidate, written as Chakra ETs.

Each ``workloads:`` entry of a space gives one or more variants per NPU count:

* ``data-parallel`` -- one training iteration (:func:`~chakra_collectives.workload.data_parallel`)
  of a model spec file (``model:``) or identical layers (``layers``, ``forward``, ``backward``,
  ``gradient``, ``optimizer``; defaults as ``chakra-coll workload``);
* ``hybrid`` -- tensor x data parallelism, one variant per ``tp`` degree (``dp = NPUs / tp``;
  a degree that does not divide the NPU count is skipped with the reason);
* ``collective`` -- one collective (``collective``) per size in ``sizes``;
* ``prefix`` -- existing workload ETs (``PREFIX.{rank}.et``, and ``PREFIX.json`` for groups):
  their rank count must equal every NPU count of the space.

Variants are written as ETs (as ``chakra-coll workload`` writes them) and read back, so the
search replays exactly the files a user would hand to ASTRA-sim. :attr:`PreparedWorkload.world`
lists the collectives that span every rank and the size each is synthesized at: the size that
carries the most bytes (the synthesized algorithm is scaled to every call's size).

>>> from chakra_collectives.search.space import parse_space
>>> space = parse_space("topologies: [ring:8]\\nworkloads: [{kind: hybrid, tp: [2, 3]}, {kind: collective, sizes: [1MiB, 1GiB]}]")
>>> [v.label if isinstance(v, WorkloadVariant) else "skipped: " + v.reason for v in workload_variants(space, 8)]
['hybrid tp=2 dp=4', 'skipped: 3 does not divide 8 NPUs (tp must divide the NPU count)', 'all-reduce 1 MiB', 'all-reduce 1 GiB']
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path


from chakra_collectives.converters.chakra_et.workload_reader import read_workload
from chakra_collectives.errors import InputError
from chakra_collectives.ir import Collective
from chakra_collectives.ir.workload import NodeKind, Workload
from chakra_collectives.replay import ProcessGroups
from chakra_collectives.search.candidates import Skipped, file_digest
from chakra_collectives.search.space import SearchSpace, WorkloadEntry
from chakra_collectives.units import format_size, parse_size
from chakra_collectives.workload import GeneratedWorkload, data_parallel, groups_path, hybrid_parallel, load_model_spec, microbenchmark, uniform_model
from chakra_collectives.workload.spec import MODEL_DEFAULTS, ModelSpec

"""What a model without a spec file has unless the entry says otherwise (as ``chakra-coll workload``)."""


@dataclass
class WorkloadVariant:
    """One workload to time at one NPU count."""

    label: str
    kind: str
    npus: int
    identity: dict
    generated: GeneratedWorkload | None = None
    prefix: Path | None = None
    """The ETs (``prefix`` kind: the user's files)."""
    line: int | None = None


@dataclass
class PreparedWorkload:
    """A variant read back from its ETs, ready to replay."""

    variant: WorkloadVariant
    workload: Workload
    groups: ProcessGroups
    world: dict[Collective, int]
    """Collectives over every rank -> the size they are synthesized at."""
    group_collectives: int
    """Collective calls over process groups (served by the space's group algorithm)."""


def _model(entry: WorkloadEntry, kind: str) -> ModelSpec:
    keys = ("layers", "forward", "backward", "gradient", "activation", "optimizer")
    given = [k for k in keys if entry.get(k) is not None]
    if entry.get("model") is not None:
        if given:
            raise InputError(f"give either model or the layer keys, not both ({', '.join(given)} with model)")
        return load_model_spec(entry.base / entry.get("model"))
    values = {k: entry.get(k, MODEL_DEFAULTS.get(k)) for k in keys}
    if kind == "data-parallel" and entry.get("activation") is None:
        values["activation"] = None
    try:
        return uniform_model(**values)
    except InputError as error:  # it names the flags of 'chakra-coll workload'; here they are keys
        raise InputError(error.message.removeprefix("--")) from None


def _model_identity(entry: WorkloadEntry) -> dict:
    found = {k: v for k, v in entry.params if k not in ("model", "tp", "sizes")}
    if entry.get("model") is not None:
        found["model"] = file_digest(entry.base / entry.get("model"))
    return found


def workload_variants(space: SearchSpace, npus: int) -> list[WorkloadVariant | Skipped]:
    """Every variant of every workload entry at ``npus`` NPUs (or why one is skipped)."""
    found: list[WorkloadVariant | Skipped] = []
    for entry in space.workloads:
        try:
            found += _variants(entry, npus)
        except InputError as error:
            raise InputError(error.message, path=error.path, line=error.line if error.path else entry.line) from None
    labels = [v.label for v in found if isinstance(v, WorkloadVariant)]
    duplicate = next((l for l in labels if labels.count(l) > 1), None)
    if duplicate is not None:
        raise InputError(f"two workloads are both called {duplicate!r}: give them a label")
    return found


def _variants(entry: WorkloadEntry, npus: int) -> list[WorkloadVariant | Skipped]:
    kind = entry.kind
    if kind == "data-parallel":
        model = _model(entry, kind)
        label = entry.label or "data-parallel"
        return [WorkloadVariant(label, kind, npus, {"kind": kind, **_model_identity(entry)}, data_parallel(model, npus), line=entry.line)]
    if kind == "hybrid":
        model = _model(entry, kind)
        degrees = entry.get("tp", [2])
        found: list[WorkloadVariant | Skipped] = []
        for tp in [degrees] if isinstance(degrees, int) else degrees:
            label = f"{entry.label or 'hybrid'} tp={tp} dp={npus // tp}"
            if npus % tp:
                found.append(Skipped(f"{entry.label or 'hybrid'} tp={tp}", npus, f"{tp} does not divide {npus} NPUs (tp must divide the NPU count)", entry.line))
                continue
            try:
                generated = hybrid_parallel(model, tp, npus // tp)
            except InputError as error:  # e.g. compute not a whole number of microseconds once divided by tp
                found.append(Skipped(f"{entry.label or 'hybrid'} tp={tp}", npus, error.message, entry.line))
                continue
            found.append(WorkloadVariant(label, kind, npus, {"kind": kind, "tp": tp, **_model_identity(entry)}, generated, line=entry.line))
        return found
    if kind == "collective":
        collective = Collective.parse(entry.get("collective", "all-reduce"))
        sizes = entry.get("sizes", "1MiB")
        found = []
        for size in [parse_size(s) for s in ([sizes] if isinstance(sizes, (str, int)) else sizes)]:
            label = f"{entry.label + ' ' if entry.label else ''}{collective.value} {format_size(size)}"
            identity = {"kind": kind, "collective": collective.value, "size": size}
            found.append(WorkloadVariant(label, kind, npus, identity, microbenchmark(collective, npus, size), line=entry.line))
        return found
    prefix = entry.base / entry.get("prefix", "")
    if entry.get("prefix") is None:
        raise InputError("a prefix workload needs prefix: PATH (its ETs are PATH.{rank}.et)")
    workload = read_workload(prefix)
    if workload.num_ranks != npus:
        raise InputError(f"workload {prefix} has {workload.num_ranks} ranks, but the space asks for {npus} NPUs")
    digest = {str(p.name): file_digest(p) for p in workload.paths}
    label = entry.label or f"prefix {prefix.name}"
    return [WorkloadVariant(label, kind, npus, {"kind": kind, "files": digest}, None, prefix, line=entry.line)]


def slug(text: str) -> str:
    """A file-name-safe form of a label.

    >>> slug("hybrid tp=2 dp=4"), slug("all-reduce 1 MiB")
    ('hybrid_tp2_dp4', 'all-reduce_1_MiB')
    """
    return re.sub(r"[^\w.-]+", "", re.sub(r"\s+", "_", text.strip()))


def prepare(variant: WorkloadVariant, folder: Path) -> PreparedWorkload:
    """Write ``variant``'s ETs under ``folder`` (generated kinds) and read them back."""
    if variant.generated is not None:
        variant.prefix = folder / f"{variant.npus}npus" / slug(variant.label)
        variant.prefix.parent.mkdir(parents=True, exist_ok=True)
        variant.generated.write(variant.prefix)
    assert variant.prefix is not None
    workload = read_workload(variant.prefix)
    groups_file = groups_path(variant.prefix)
    groups = ProcessGroups.load(groups_file, num_ranks=workload.num_ranks) if groups_file.is_file() else ProcessGroups.world(workload.num_ranks)
    world_bytes: Counter[tuple[Collective, int]] = Counter()
    grouped = 0
    everyone = tuple(range(workload.num_ranks))
    for index in (workload.node_type == NodeKind.COMM_COLL).nonzero()[0].tolist():
        try:
            collective = Collective.from_chakra_comm_type(int(workload.comm_type[index]))
        except InputError:
            continue  # barriers and the like: the replayer says what it does with them
        if groups.members(workload.pg_name[index]) == everyone:
            world_bytes[(collective, int(workload.comm_size[index]))] += int(workload.comm_size[index])
        else:
            grouped += 1
    world: dict[Collective, int] = {}
    for (collective, size), total in sorted(world_bytes.items(), key=lambda item: (-item[1], -item[0][1])):
        world.setdefault(collective, size)
    return PreparedWorkload(variant, workload, groups, world, grouped)


__all__ = ["PreparedWorkload", "WorkloadVariant", "prepare", "slug", "workload_variants"]
