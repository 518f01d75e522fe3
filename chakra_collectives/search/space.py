"""A design space for ``chakra-coll search``: NPU counts, ports, topologies, algorithms, workloads.

A space file is YAML (or JSON)::

    name: fabric-for-dp                  # optional (default: the file's name)
    npus: [16, 32, 64]                   # one count or several; optional when every topology is literal
    port: {bandwidth: 50, latency: 500}  # per port: GB/s and ns (defaults 50, 500; or 400Gbps, 0.5us)
    ports_per_npu: 4                     # optional constraint: more ports (x the port bandwidth) -> skipped
    cost: {switch_port: 1.0}             # price of a switch port relative to an NPU port
    network_model: default               # or astra-sim (tacos: the old name of default)
    topologies:
      - totientperms:{npus},degree=4     # any builder spec or expansion; {npus} and friends filled in
      - torus2d:{grid2}
      - spec: "circulant:{npus},strides=1,{s}"
        vary: {s: [3, 5, 7]}             # one candidate per value (several keys: every combination)
      - spec: fattree:{npus},degree=4
        cost_equivalent_to: totientperms:{npus},degree=4   # bandwidth scaled to the same cost
        label: cost-equivalent fat-tree
      - file: my-cluster.yaml            # a topology file (relative to the space file)
    algorithms: [tacos, bfb, ring]       # registered producers, 'best', or {all-reduce: tacos, ...}
    chunks_per_npu: [1, 4]
    workloads:
      - {kind: data-parallel, layers: 6, forward: 100us, gradient: 32MiB}
      - {kind: data-parallel, model: model.yaml}      # a model spec file
      - {kind: hybrid, model: model.yaml, tp: [2, 4]} # one variant per TP degree (DP = NPUs / TP)
      - {kind: collective, collective: all-reduce, sizes: [1MiB, 1GiB]}
      - {kind: prefix, prefix: traces/step}           # existing workload ETs (PREFIX.json: groups)
    probe_sizes: [1MiB, 1GiB]            # small / large size at which each collective is also timed
    group_algorithm: ring                # collectives over process groups (tensor parallelism)

Placeholders in specs and labels: ``{npus}``, ``{grid2}`` (the squarest 2-D shape: 4x4, 4x8,
8x8), ``{grid3}`` (the most cubic 3-D shape), ``{log2}`` (for ``hypercube:{log2}``), and every
``vary`` key. Every problem is one line naming the file and line.

>>> space = parse_space('''
... npus: [16, 64]
... topologies: ["torus2d:{grid2}", {spec: "circulant:{npus},strides=1,{s}", vary: {s: [3, 5]}}]
... algorithms: [tacos, {all-reduce: ring}]
... ''', name="demo")
>>> [c.label for c in space.topology_choices(64)]
['torus2d:8x8', 'circulant:64,strides=1,3', 'circulant:64,strides=1,5']
>>> [a.label for a in space.algorithms], space.workloads[0].kind
(['tacos', 'all-reduce=ring'], 'data-parallel')
>>> parse_space("topologies: [ring:8]\\nalgorithms: [donut]\\n", name="bad")
Traceback (most recent call last):
...
chakra_collectives.errors.InputError: line 2: unknown algorithm 'donut' (valid: best, tacos, ring, biring, direct, rhd, tree, bfb, forestcoll, rails, milp, gridpipe, chains, flowcast)
"""

from __future__ import annotations

import itertools
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from chakra_collectives.errors import InputError
from chakra_collectives.ir import Collective
from chakra_collectives.locate import line_of
from chakra_collectives.network.model import Mode
from chakra_collectives.synth import algorithm_names
from chakra_collectives.units import parse_bandwidth, parse_duration, parse_size
from chakra_collectives.workload.spec import DURATION_SCHEMA, SIZE_SCHEMA

_ONE_OR_MANY_INT = {"oneOf": [{"type": "integer", "minimum": 1}, {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 1}}]}
_MODEL_KEYS = {
    "model": {"type": "string"},
    "layers": {"type": "integer", "minimum": 1},
    "forward": DURATION_SCHEMA,
    "backward": DURATION_SCHEMA,
    "gradient": SIZE_SCHEMA,
    "activation": SIZE_SCHEMA,
    "optimizer": DURATION_SCHEMA,
}
_WORKLOAD_KINDS = ("data-parallel", "hybrid", "collective", "prefix")

SPACE_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "chakra-coll search space",
    "type": "object",
    "required": ["topologies"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string"},
        "npus": {"oneOf": [{"type": "integer", "minimum": 2}, {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 2}}]},
        "port": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"bandwidth": {"oneOf": [{"type": "number", "exclusiveMinimum": 0}, {"type": "string"}]}, "latency": DURATION_SCHEMA},
        },
        "ports_per_npu": {"type": "number", "exclusiveMinimum": 0},
        "cost": {"type": "object", "additionalProperties": False, "properties": {"switch_port": {"type": "number", "minimum": 0}}},
        "network_model": {"enum": ["default", "astra-sim", "tacos"]},
        "topologies": {
            "type": "array",
            "minItems": 1,
            "items": {
                "oneOf": [
                    {"type": "string", "minLength": 1},
                    {
                        "type": "object",
                        "additionalProperties": False,
                        "oneOf": [{"required": ["spec"]}, {"required": ["file"]}],
                        "properties": {
                            "spec": {"type": "string", "minLength": 1},
                            "file": {"type": "string", "minLength": 1},
                            "label": {"type": "string", "minLength": 1},
                            "cost_equivalent_to": {"type": "string", "minLength": 1},
                            "vary": {
                                "type": "object",
                                "minProperties": 1,
                                "additionalProperties": {"type": "array", "minItems": 1, "items": {"type": ["integer", "number", "string"]}},
                            },
                        },
                    },
                ]
            },
        },
        "algorithms": {
            "type": "array",
            "minItems": 1,
            "items": {"oneOf": [{"type": "string"}, {"type": "object", "minProperties": 1, "additionalProperties": {"type": "string"}}]},
        },
        "chunks_per_npu": _ONE_OR_MANY_INT,
        "workload": {"$ref": "#/$defs/workload"},
        "workloads": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/workload"}},
        "probe_sizes": {"type": "array", "minItems": 2, "maxItems": 2, "items": SIZE_SCHEMA},
        "group_algorithm": {"type": "string"},
    },
    "$defs": {
        "workload": {
            "type": "object",
            "required": ["kind"],
            "additionalProperties": False,
            "properties": {
                "kind": {"enum": list(_WORKLOAD_KINDS)},
                "label": {"type": "string", "minLength": 1},
                **_MODEL_KEYS,
                "tp": _ONE_OR_MANY_INT,
                "collective": {"type": "string"},
                "sizes": {"oneOf": [SIZE_SCHEMA, {"type": "array", "minItems": 1, "items": SIZE_SCHEMA}]},
                "prefix": {"type": "string"},
            },
        }
    },
}

DEFAULT_PORT_BANDWIDTH_GBPS = 50.0
DEFAULT_PORT_LATENCY_NS = 500.0
DEFAULT_PROBE_SIZES = (2**20, 2**30)
DEFAULT_PORTS_PER_NPU = 4
"""The ports per NPU of the default space (:func:`default_topologies`) unless told otherwise."""


def default_topologies(npus: list[int], ports_per_npu: float) -> list[str]:
    """What ``search`` tries when given no topology: every builder and family that takes any
    NPU count -- the families with a degree at ``ports_per_npu`` -- and the binary hypercube
    when every count is a power of two. Candidates needing more ports than that are skipped
    when built, with the reason. (Vendor boxes -- dgx, a100, mi250 -- and families of fixed
    sizes such as kautz are left to ``--topology``.)

    >>> default_topologies([16], 4)[-4:]
    ['totientperms:{npus},degree=4', 'genkautz:{npus},degree=4', 'fattree:{npus},degree=4', 'hypercube:{log2}']
    >>> "hypercube:{log2}" in default_topologies([16, 24], 4)
    False
    """
    degree = max(int(ports_per_npu), 1)
    found = [
        "ring:{npus}", "switch:{npus}", "fully-connected:{npus}", "mesh2d:{grid2}", "torus2d:{grid2}", "mesh3d:{grid3}",
        "torus3d:{grid3}", "hamming:{grid2}", f"totientperms:{{npus}},degree={degree}", f"genkautz:{{npus}},degree={degree}",
        f"fattree:{{npus}},degree={degree}",
    ]
    if all(n & (n - 1) == 0 for n in npus):
        found.append("hypercube:{log2}")
    return found


# ---------------------------------------------------------------------- placeholders
def grid_shape(n: int, dims: int) -> tuple[int, ...]:
    """The most balanced ``dims``-dimensional shape with ``n`` NPUs (sides ascending).

    >>> grid_shape(64, 2), grid_shape(32, 2), grid_shape(32, 3), grid_shape(7, 2)
    ((8, 8), (4, 8), (2, 4, 4), (1, 7))
    """
    if dims == 1:
        return (n,)
    best: tuple[int, ...] | None = None
    for first in range(1, int(round(n ** (1 / dims))) + 2):
        if n % first:
            continue
        rest = grid_shape(n // first, dims - 1)
        shape = tuple(sorted((first, *rest)))
        if best is None or max(shape) - min(shape) < max(best) - min(best):
            best = shape
    return best or (1,) * (dims - 1) + (n,)


def placeholders(npus: int | None) -> dict[str, str]:
    """What ``{npus}``, ``{grid2}``, ``{grid3}`` and ``{log2}`` stand for at ``npus`` NPUs.

    >>> placeholders(32)
    {'npus': '32', 'grid2': '4x8', 'grid3': '2x4x4', 'log2': '5'}
    """
    if npus is None:
        return {}
    found = {"npus": str(npus), "grid2": "x".join(map(str, grid_shape(npus, 2))), "grid3": "x".join(map(str, grid_shape(npus, 3)))}
    if npus & (npus - 1) == 0:
        found["log2"] = str(npus.bit_length() - 1)
    return found


def _fields(template: str) -> list[str]:
    try:
        return [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
    except ValueError as error:
        raise InputError(f"malformed template {template!r}: {error}") from None


def fill(template: str, values: dict[str, str], *, npus: int | None) -> str:
    """``template`` with its ``{placeholders}`` replaced; an error names a missing one."""
    for name in _fields(template):
        if name not in values:
            if name in ("npus", "grid2", "grid3") and npus is None:
                raise InputError(f"{template!r} uses {{{name}}}, but the space gives no npus")
            if name == "log2" and npus is not None:
                raise InputError(f"{template!r} uses {{log2}}, but {npus} NPUs is not a power of two")
            valid = ", ".join("{" + k + "}" for k in [*values] or ["npus", "grid2", "grid3", "log2"])
            raise InputError(f"{template!r}: unknown placeholder {{{name}}} (valid: {valid}, and the keys of vary)")
    return template.format_map(values)


# ---------------------------------------------------------------------- parts of a space
@dataclass(frozen=True)
class TopologyChoice:
    """One topology candidate at one NPU count, templates filled in."""

    label: str
    """What reports call it: the filled spec (or file name), or the entry's ``label``."""
    entry: str
    """The entry it comes from, unfilled (``totientperms:{npus},degree=4``, or its label): the
    same at every NPU count, so pictures give each entry one colour."""
    spec: str | None
    file: Path | None
    cost_equivalent_to: str | None
    line: int | None
    """Line of the entry in the space file."""


@dataclass(frozen=True)
class TopologyEntry:
    """One entry of ``topologies:`` (a template, maybe with ``vary``)."""

    spec: str | None = None
    file: Path | None = None
    label: str | None = None
    cost_equivalent_to: str | None = None
    vary: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    line: int | None = None

    def choices(self, npus: int | None) -> list[TopologyChoice]:
        """The candidates this entry stands for at ``npus`` NPUs (one per ``vary`` combination)."""
        base = placeholders(npus)
        names = [k for k, _ in self.vary]
        found = []
        for combination in itertools.product(*(values for _, values in self.vary)):
            values = {**base, **{k: _text(v) for k, v in zip(names, combination)}}
            try:
                spec = None if self.spec is None else fill(self.spec, values, npus=npus)
                reference = None if self.cost_equivalent_to is None else fill(self.cost_equivalent_to, values, npus=npus)
                label = fill(self.label, values, npus=npus) if self.label else (spec or self.file.name)  # type: ignore[union-attr]
            except InputError as error:
                raise InputError(error.message, line=self.line) from None
            entry = self.label or self.spec or self.file.name  # type: ignore[union-attr]
            found.append(TopologyChoice(label, entry, spec, self.file, reference, self.line))
        return found

    def uses_npus(self) -> bool:
        texts = [t for t in (self.spec, self.label, self.cost_equivalent_to) if t]
        return any(name in ("npus", "grid2", "grid3", "log2") for t in texts for name in _fields(t))


def _text(value: Any) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


@dataclass(frozen=True)
class AlgorithmSet:
    """Which producer makes each collective: one name for all, or one per collective."""

    label: str
    names: tuple[tuple[str, str], ...]
    """``(collective value or "*", algorithm name)``."""

    def name_for(self, collective: Collective) -> str | None:
        """The producer for ``collective`` (``None``: the set does not say).

        >>> AlgorithmSet("x", (("all-reduce", "tacos"),)).name_for(Collective.ALL_GATHER) is None
        True
        """
        table = dict(self.names)
        return table.get(collective.value, table.get("*"))


@dataclass(frozen=True)
class WorkloadEntry:
    """One entry of ``workloads:``; :mod:`~chakra_collectives.search.workloads` makes its variants."""

    kind: str
    params: tuple[tuple[str, Any], ...]
    label: str | None
    line: int | None
    base: Path
    """Folder relative paths (``model``, ``prefix``) are resolved against."""

    def get(self, key: str, default: Any = None) -> Any:
        return dict(self.params).get(key, default)


@dataclass(frozen=True)
class SearchSpace:
    """A parsed design space (see the module docstring)."""

    name: str
    npus: tuple[int, ...] | None
    topologies: tuple[TopologyEntry, ...]
    algorithms: tuple[AlgorithmSet, ...] = (AlgorithmSet("best", (("*", "best"),)),)
    chunks_per_npu: tuple[int, ...] = (1,)
    workloads: tuple[WorkloadEntry, ...] = field(default_factory=lambda: (WorkloadEntry("data-parallel", (), None, None, Path(".")),))
    port_bandwidth_gbps: float = DEFAULT_PORT_BANDWIDTH_GBPS
    port_latency_ns: float = DEFAULT_PORT_LATENCY_NS
    ports_per_npu: float | None = None
    switch_port_cost: float = 1.0
    network_model: str = "default"
    probe_sizes: tuple[int, int] = DEFAULT_PROBE_SIZES
    group_algorithm: str = "ring"
    source: str | None = None
    """The space file, for messages."""

    def topology_choices(self, npus: int | None) -> list[TopologyChoice]:
        """Every topology candidate at ``npus`` NPUs (``None``: the literal entries)."""
        return [choice for entry in self.topologies for choice in entry.choices(npus)]


# ---------------------------------------------------------------------- reading
def load_space(path: str | Path, *, overrides: dict[str, Any] | None = None) -> SearchSpace:
    """Read and check a space file; every problem is an :class:`InputError` with the file and line.

    ``overrides`` replace top-level keys (what the command's flags give).
    """
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise InputError(f"cannot read search space: {error.strerror}", path=path) from None
    except UnicodeDecodeError:
        raise InputError("not a text file (expected a YAML search space)", path=path) from None
    try:
        return parse_space(text, name=path.stem, base=path.parent, overrides=overrides)
    except InputError as error:
        raise error.located(path=path) from None


def parse_space(text: str, *, name: str = "space", base: Path = Path("."), overrides: dict[str, Any] | None = None) -> SearchSpace:
    """Parse a space document's ``text`` (see the module docstring); relative paths against ``base``.

    ``overrides`` replace top-level keys; errors in them name no line (they are not in the text).
    """
    overrides = overrides or {}
    try:
        document = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise InputError(f"invalid YAML: {problem}", line=None if mark is None else mark.line + 1) from None
    if not isinstance(document, dict):
        raise InputError("a search space is a mapping with at least 'topologies:' (see chakra-coll search --help)", line=1)
    document.update(overrides)
    import jsonschema  # imported on first use: it takes a while to import

    validator = jsonschema.Draft202012Validator(SPACE_SCHEMA)
    error = jsonschema.exceptions.best_match(validator.iter_errors(document))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path)
        message = error.message.replace("Additional properties are not allowed", "unknown key(s)")
        if error.validator == "oneOf" and error.absolute_path and error.absolute_path[0] == "topologies":
            message = (
                "a topology is a spec string or a mapping with exactly one of spec or file (and label, vary, "
                "cost_equivalent_to); quote specs with placeholders: \"torus2d:{grid2}\""
            )
        keys = list(error.absolute_path)
        if keys and keys[0] in overrides:
            raise InputError(f"--{str(keys[0]).replace('_', '-')} (command line): {message}")
        raise InputError(f"{'at ' + where + ': ' if where else ''}{message}", line=line_of(text, keys))
    return _build(document, text, name, base, set(overrides))


def _build(document: dict[str, Any], text: str, name: str, base: Path, overridden: set[str]) -> SearchSpace:
    def at(*keys: Any) -> int | None:
        return None if keys[0] in overridden else line_of(text, list(keys))

    def checked(keys: tuple[Any, ...], parse, value):
        try:
            return parse(value)
        except InputError as error:
            raise InputError(error.message, line=at(*keys)) from None

    npus = document.get("npus")
    npus_list = None if npus is None else tuple(dict.fromkeys([npus] if isinstance(npus, int) else npus))
    port = document.get("port", {})
    topologies = []
    for index, entry in enumerate(document["topologies"]):
        if isinstance(entry, str):
            entry = {"spec": entry}
        vary = tuple((str(k), tuple(v)) for k, v in entry.get("vary", {}).items())
        clash = [k for k, _ in vary if k in ("npus", "grid2", "grid3", "log2")]
        if clash:
            raise InputError(f"vary key {clash[0]!r} is a built-in placeholder; use another name", line=at("topologies", index, "vary"))
        file = None if "file" not in entry else (base / entry["file"])
        if file is not None and not file.is_file():
            raise InputError(f"topology file {entry['file']!r} does not exist (relative to the space file)", line=at("topologies", index))
        topologies.append(TopologyEntry(entry.get("spec"), file, entry.get("label"), entry.get("cost_equivalent_to"), vary, at("topologies", index)))
        if npus_list is None and topologies[-1].uses_npus():
            raise InputError("this topology uses {npus}-style placeholders, but the space gives no npus", line=at("topologies", index))
        topologies[-1].choices(None if npus_list is None else npus_list[0])  # placeholder errors now, with the line
    algorithms = tuple(_algorithm_set(entry, at("algorithms", i)) for i, entry in enumerate(document.get("algorithms", ["best"])))
    labels = [a.label for a in algorithms]
    if len(set(labels)) != len(labels):
        raise InputError(f"algorithm set {next(l for l in labels if labels.count(l) > 1)!r} is listed twice", line=at("algorithms"))
    chunks = document.get("chunks_per_npu", 1)
    raw_workloads = document.get("workloads") or ([document["workload"]] if "workload" in document else [{"kind": "data-parallel"}])
    key = "workloads" if "workloads" in document else "workload"
    workloads = []
    for index, entry in enumerate(raw_workloads):
        where = at(key, index) if key == "workloads" else at(key)
        params = tuple((k, v) for k, v in entry.items() if k not in ("kind", "label"))
        workloads.append(WorkloadEntry(entry["kind"], params, entry.get("label"), where, base))
    group_algorithm = document.get("group_algorithm", "ring")
    if group_algorithm not in algorithm_names() or group_algorithm == "best":
        valid = ", ".join(n for n in algorithm_names() if n != "best")
        raise InputError(f"unknown group algorithm {group_algorithm!r} (valid: {valid})", line=at("group_algorithm"))
    probes = document.get("probe_sizes")
    return SearchSpace(
        name=document.get("name", name),
        npus=npus_list,
        topologies=tuple(topologies),
        algorithms=algorithms,
        chunks_per_npu=tuple(dict.fromkeys([chunks] if isinstance(chunks, int) else chunks)),
        workloads=tuple(workloads),
        port_bandwidth_gbps=checked(("port", "bandwidth"), parse_bandwidth, port.get("bandwidth", DEFAULT_PORT_BANDWIDTH_GBPS)),
        port_latency_ns=checked(("port", "latency"), parse_duration, port.get("latency", DEFAULT_PORT_LATENCY_NS)),
        ports_per_npu=document.get("ports_per_npu"),
        switch_port_cost=float(document.get("cost", {}).get("switch_port", 1.0)),
        network_model=Mode.parse(document.get("network_model", "default")).value,
        probe_sizes=DEFAULT_PROBE_SIZES if probes is None else tuple(checked(("probe_sizes", i), parse_size, p) for i, p in enumerate(probes)),  # type: ignore[arg-type]
        group_algorithm=group_algorithm,
    )


def algorithm_set(entry: str | dict[str, str]) -> AlgorithmSet:
    """An ``algorithms:`` entry: a name for every collective, or a mapping collective -> name.

    >>> algorithm_set({"all-gather": "ring", "allreduce": "tacos"}).label
    'all-gather=ring,all-reduce=tacos'
    """
    valid = algorithm_names()
    if isinstance(entry, str):
        entry = {"*": entry}
    names = []
    for collective, algorithm in entry.items():
        key = "*" if collective == "*" else Collective.parse(collective).value
        if algorithm.lower() not in valid:
            raise InputError(f"unknown algorithm {algorithm!r} (valid: {', '.join(valid)})")
        names.append((key, algorithm.lower()))
    names.sort()
    label = names[0][1] if names[0][0] == "*" and len(names) == 1 else ",".join(f"{c}={a}" for c, a in names)
    return AlgorithmSet(label, tuple(names))


def _algorithm_set(entry: str | dict[str, str], line: int | None) -> AlgorithmSet:
    try:
        return algorithm_set(entry)
    except InputError as error:
        raise InputError(error.message, line=line) from None


__all__ = [
    "AlgorithmSet",
    "SPACE_SCHEMA",
    "SearchSpace",
    "TopologyChoice",
    "TopologyEntry",
    "WorkloadEntry",
    "algorithm_set",
    "fill",
    "grid_shape",
    "load_space",
    "parse_space",
    "placeholders",
]
