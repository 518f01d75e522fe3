"""``load_topology``: a builder spec (``torus3d:4x4x4``) or a topology file, as a Topology.

Builder specs
-------------
``NAME[:SHAPE][,KEY=VALUE...]`` where ``SHAPE`` is ``AxBxC`` and the options are the builder's
keyword arguments (:mod:`~chakra_collectives.topology.builders`), with ``bw`` and ``lat``
accepted for ``bandwidth_gbps`` and ``latency_ns`` (also as suffixes: ``nic_bw``, ``x_lat``)::

    ring:8                      bidirectional ring of 8 NPUs (ring:8,bidirectional=false: one way)
    fully-connected:8           direct link between every pair
    switch:64                   64 NPUs on one switch
    mesh2d:8x8   torus2d:8x8    2D mesh / torus            mesh3d:4x4x4   torus3d:4x4x4
    hypercube:4x4x4             generalized hypercube (hypercube:6 = binary 6-cube, 64 NPUs)
    hetero-mesh2d:8x8           2D mesh, x links 100 GB/s and y links 50 GB/s by default
    dgx:4x8                     4 servers x 8 GPUs: NVLink inside, per-GPU NICs to a switch
    a100:2                      ForestColl's DGX A100 boxes: NVSwitch inside, per-GPU NICs, even/odd IB switches
    mi250:2                     ForestColl's MI250 boxes: 16 GPUs on xGMI, a 16 GB/s IB port each
    torus2d:8x8,bw=100,lat=250  any builder with other link parameters
    circulant:16,strides=1,5    i -> i +- s (mod 16); totientperms:64,degree=4 (TopoOpt's rings)
    kautz:2,3   debruijn:2,4    Kautz K(2,3), de Bruijn B(2,4); genkautz:100,degree=3 (any N)
    hamming:4x4x4               Hamming graph (= hypercube:4x4x4)
    fattree:64,degree=4         the switched baseline with the same NPU ports (fat-tree planes)
    line(kautz:2,3)  degree(ring:8,2)  ring:4 x ring:8  cartesian(G,H)
                                expansions (:mod:`~chakra_collectives.topology.expressions`)

Numbers after the shape add dimensions (``kautz:2,3`` = ``kautz:2x3``); numbers after an
option extend it into a list (``strides=1,5,7``).

Files
-----
``.yaml``/``.yml``/``.json``: our own topology file (:mod:`~chakra_collectives.topology.schema`)
or ASTRA-sim's analytical network YAML (``topology: [Ring, Switch]``, ``npus_count``,
``bandwidth`` GB/s, ``latency`` ns per dimension; the format is
:mod:`~chakra_collectives.converters.astra_sim.network`'s); ``.graphml``: GraphML (nodes with
``kind: switch`` are switches, edges carry ``bandwidth_gbps`` and ``latency_ns``); anything
else: an edge list, one ``SRC DST [BANDWIDTH_GBPS [LATENCY_NS]]`` per line (``SRC -> DST`` for
a one-way link; ``sN`` names a switch; ``#`` starts a comment).

Bandwidths and latencies take the units every other option takes, in specs
(``mesh2d:8x8,bw=50GB/s,lat=500ns``), our YAML files and edge lists (``0 1 400Gbps 1us``):
:func:`~chakra_collectives.units.parse_bandwidth` (a bare number is GB/s) and
:func:`~chakra_collectives.units.parse_duration` (a bare number is ns).

Keyword ``overrides`` replace a builder's arguments, and give files the bandwidth/latency of
links that do not state theirs. Every topology is checked to be connected (each NPU reaches
each other NPU) before it is returned.

>>> load_topology("torus3d:4x4x4").describe()
'torus3d:4x4x4: 64 NPUs, 384 links'
>>> load_topology("ring:4", bandwidth_gbps=100).links[0].bandwidth_gbps
100.0
>>> link = load_topology("mesh2d:8x8,bw=400Gbps,lat=0.5us").links[0]
>>> link.bandwidth_gbps, link.latency_ns
(50.0, 500.0)
>>> load_topology("donut:4")
Traceback (most recent call last):
...
chakra_collectives.errors.InputError: unknown topology 'donut' (valid: a100, circulant, debruijn, dgx, fattree, fully-connected, genkautz, hamming, hetero-mesh2d, hypercube, kautz, mesh2d, mesh3d, mi250, ring, switch, torus2d, torus3d, totientperms; or a topology file path)
"""

from __future__ import annotations

import inspect
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from chakra_collectives.errors import InputError
from chakra_collectives.limits import check_links, check_npus, check_switches
from chakra_collectives.locate import line_of
from chakra_collectives.topology import builders, families
from chakra_collectives.topology.core import Topology
from chakra_collectives.topology.expressions import evaluate, is_expression
from chakra_collectives.topology.schema import validate_document

if TYPE_CHECKING:
    from chakra_collectives.converters.astra_sim.network import AnalyticalNetwork
from chakra_collectives.units import parse_bandwidth, parse_duration


@dataclass(frozen=True)
class _Builder:
    build: Callable[..., Topology]
    shape: tuple[int, ...]
    """Accepted numbers of dimensions."""
    example: str

    def options(self) -> list[str]:
        params = inspect.signature(self.build).parameters.values()
        return [p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY]


def _hypercube(*dims: int, **kw: Any) -> Topology:
    if len(dims) == 1:  # hypercube:D is the binary D-cube
        dims = (2,) * dims[0]
    return builders.hypercube(list(dims), **kw)


_hypercube.__signature__ = inspect.signature(builders.hypercube).replace(  # type: ignore[attr-defined]
    parameters=[p for p in inspect.signature(builders.hypercube).parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY]
)

def _hamming(*dims: int, **kw: Any) -> Topology:
    topo = builders.hypercube(list(dims), **kw)
    topo.name = topo.name.replace("hypercube", "hamming", 1)
    return topo


_hamming.__signature__ = _hypercube.__signature__  # type: ignore[attr-defined]

BUILDERS: dict[str, _Builder] = {
    "ring": _Builder(builders.ring, (1,), "ring:8"),
    "fully-connected": _Builder(builders.fully_connected, (1,), "fully-connected:8"),
    "switch": _Builder(builders.switch, (1,), "switch:64"),
    "mesh2d": _Builder(builders.mesh2d, (2,), "mesh2d:8x8"),
    "mesh3d": _Builder(builders.mesh3d, (3,), "mesh3d:4x4x4"),
    "torus2d": _Builder(builders.torus2d, (2,), "torus2d:8x8"),
    "torus3d": _Builder(builders.torus3d, (3,), "torus3d:4x4x4"),
    "hypercube": _Builder(_hypercube, tuple(range(1, 17)), "hypercube:4x4x4"),
    "hetero-mesh2d": _Builder(builders.hetero_mesh2d, (2,), "hetero-mesh2d:8x8"),
    "dgx": _Builder(builders.dgx, (2,), "dgx:4x8"),
    "a100": _Builder(builders.a100, (1,), "a100:2"),
    "mi250": _Builder(builders.mi250, (1,), "mi250:2"),
    "circulant": _Builder(families.circulant, (1,), "circulant:16,strides=1,5"),
    "totientperms": _Builder(families.totientperms, (1,), "totientperms:64,degree=4"),
    "kautz": _Builder(families.kautz, (2,), "kautz:2,3"),
    "genkautz": _Builder(families.generalized_kautz, (1,), "genkautz:100,degree=3"),
    "debruijn": _Builder(families.de_bruijn, (2,), "debruijn:2,4"),
    "hamming": _Builder(_hamming, tuple(range(1, 17)), "hamming:4x4x4"),
    "fattree": _Builder(families.fat_tree, (1,), "fattree:64,degree=4"),
}
_ALIASES = {"fc": "fully-connected", "fullyconnected": "fully-connected", "mesh": "mesh2d", "torus": "torus2d", "hetero-mesh": "hetero-mesh2d", "heteromesh2d": "hetero-mesh2d"}

_SPEC_RE = re.compile(r"^(?P<name>[A-Za-z][\w-]*)(?::(?P<shape>[^,]*))?(?P<options>(?:,[^,]*)*)$")


def load_topology(spec: str, *, force: bool = False, **overrides: Any) -> Topology:
    """A topology from a builder spec, an expansion or a file (see the module docstring); connected, or an error.

    ``force`` builds expansions above :data:`~chakra_collectives.topology.expansions.NPU_LIMIT` NPUs.
    """
    spec = str(spec).strip()
    path = Path(spec)
    if not _is_file(path):
        if is_expression(spec):
            return evaluate(spec, load=lambda part: load_topology(part, **overrides), force=force).validate()
        return _from_spec(spec, overrides).validate()
    topo = load_topology_file(path, **overrides)
    try:
        return topo.validate()
    except InputError as error:  # the file names the topology: drop the name from the message
        raise InputError(error.message.removeprefix(f"{topo.name}: "), path=path) from None


# ---------------------------------------------------------------------- specs
def _from_spec(spec: str, overrides: dict[str, Any]) -> Topology:
    match = _SPEC_RE.match(spec)
    name = (match.group("name") if match else spec.split(":")[0]).lower()
    name = _ALIASES.get(name, name)
    builder = BUILDERS.get(name)
    if builder is None:
        looks_like_file = "/" in spec or "." in spec.split(":")[0]
        if looks_like_file:
            raise InputError("no such file", path=spec)
        raise InputError(f"unknown topology {name!r} (valid: {', '.join(sorted(BUILDERS))}; or a topology file path)")
    if match is None:
        raise InputError(f"malformed topology spec {spec!r}: expected NAME:SHAPE[,KEY=VALUE...] such as {builder.example}")
    shape_text = match.group("shape")
    if not shape_text:
        raise InputError(f"topology {spec!r} needs a shape, e.g. {builder.example}")
    try:
        dims = [int(d) for d in shape_text.lower().split("x")]
    except ValueError:
        raise InputError(f"malformed topology shape {shape_text!r} in {spec!r}: expected numbers joined by x, e.g. {builder.example}") from None
    options: dict[str, Any] = {}
    last = None
    for item in filter(None, match.group("options").split(",")):
        key, sep, value = item.partition("=")
        if not sep:  # a bare number: one more dimension, or one more item of the last option
            if not re.fullmatch(r"\s*\d+\s*", item):
                raise InputError(f"malformed option {item!r} in {spec!r}: expected KEY=VALUE")
            if last is None:
                dims.append(int(item))
            else:
                options[last] = [*(options[last] if isinstance(options[last], list) else [options[last]]), float(item)]
            continue
        last = _option_name(key.strip(), builder, name)
        options[last] = _option_value(value.strip(), key, last)
    if len(dims) not in builder.shape:
        raise InputError(f"topology {name} takes {' or '.join(map(str, builder.shape[:3]))} dimension(s), got {'x'.join(map(str, dims))!r} (e.g. {builder.example})")
    for key, value in overrides.items():
        options[_option_name(key, builder, name)] = value
    return builder.build(*dims, **options)


def _option_name(key: str, builder: _Builder, name: str) -> str:
    valid = builder.options()
    candidates = [key, re.sub(r"bw$", "bandwidth_gbps", key), re.sub(r"lat$", "latency_ns", key)]
    candidates += [re.sub(r"^(\w+)_(bandwidth_gbps|latency_ns)$", r"\1_\2", c) for c in candidates]
    for candidate in candidates:
        if candidate in valid:
            return candidate
    raise InputError(f"topology {name} has no option {key!r} (valid: {', '.join(valid)})")


def _option_value(text: str, key: str, option: str) -> Any:
    """A spec option's value: a bandwidth or latency with the CLI's units, else a number or true/false."""
    if _link_unit(option) is not None:
        try:
            return _with_units(text, option)
        except InputError as error:
            raise InputError(f"option {key}={text!r}: {error.message}") from None
    lowered = text.lower()
    if lowered in ("true", "yes", "on"):
        return True
    if lowered in ("false", "no", "off"):
        return False
    try:
        return float(text)
    except ValueError:
        raise InputError(f"option {key}={text!r} is not a number or true/false") from None


def _link_unit(name: str) -> Callable[[Any], float] | None:
    """The parser of a link parameter given with units (``50GB/s``, ``400Gbps``; ``500ns``, ``1us``), by its name."""
    if name.endswith("bandwidth_gbps"):
        return parse_bandwidth
    if name.endswith("latency_ns"):
        return parse_duration
    return None


def _with_units(value: Any, name: str) -> Any:
    """A bandwidth or latency: a number as it is (the limits judge it), a string with the CLI's units parsed."""
    parse = _link_unit(name)
    if parse is None or not isinstance(value, str):
        return value
    try:
        return float(value)
    except ValueError:
        return parse(value)


# ---------------------------------------------------------------------- files
def _is_file(path: Path) -> bool:
    """Whether ``path`` names a file (a spec too long or odd to be a path is not one)."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def load_topology_file(path: str | Path, **overrides: Any) -> Topology:
    """Read a topology file; the format is chosen by extension (and by content for YAML)."""
    path = Path(path)
    unknown = set(overrides) - {"bandwidth_gbps", "latency_ns"}
    if unknown:
        raise InputError(f"a topology file takes only bandwidth_gbps and latency_ns overrides, not {sorted(unknown)}", path=path)
    try:
        text = path.read_text()
    except OSError as error:
        raise InputError(f"cannot read topology file: {error.strerror}", path=path) from None
    except UnicodeDecodeError:
        raise InputError("not a text file (expected YAML, JSON, GraphML or an edge list)", path=path) from None
    suffix = path.suffix.lower()
    try:
        if suffix in (".yaml", ".yml", ".json"):
            document = _parse_structured(text, path, suffix)
            if isinstance(document, dict) and "npus_count" in document:
                return _from_astra_sim(document, path, text, overrides)
            validate_document(document, path=path, text=text)
            return _from_document(document, path, text, overrides)
        if suffix in (".graphml", ".xml"):
            return _from_graphml(path, overrides)
        return _from_edge_list(text, path, overrides)
    except InputError as error:
        raise error.located(path=path) from None


def _parse_structured(text: str, path: Path, suffix: str) -> Any:
    if suffix == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as error:
            raise InputError(f"invalid JSON: {error.msg}", path=path, line=error.lineno) from None
    import yaml  # imported when used (start-up time: a topology given by name needs no parser)

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise InputError(f"invalid YAML: {problem}", path=path, line=None if mark is None else mark.line + 1) from None


def _endpoint(value: Any, npus: int, switches: int, where: str) -> int:
    if isinstance(value, str) and value.startswith("s"):
        index = int(value[1:])
        if index >= switches:
            raise InputError(f"{where} names switch {value}, but the file declares {switches} switch(es)")
        return npus + index
    if value >= npus:
        raise InputError(f"{where} names NPU {value}, but the file declares npus: {npus} (0..{npus - 1})")
    return int(value)


def _from_document(document: dict[str, Any], path: Path, text: str, overrides: dict[str, Any]) -> Topology:
    npus, switches = document["npus"], document.get("switches", 0)
    check_npus_at(npus, "npus", path, line_of(text, ["npus"]))
    check_switches_at(switches, "switches", path, line_of(text, ["switches"]))
    check_links_at(len(document["links"]) * 2, "links", path, line_of(text, ["links"]))
    topo = Topology(npus, num_switches=switches, name=document.get("name") or path.stem)
    defaults = {"bandwidth_gbps": builders.BANDWIDTH_GBPS, "latency_ns": builders.LATENCY_NS, "bidirectional": False}
    defaults.update(overrides)
    for key, value in document.get("defaults", {}).items():
        try:
            defaults[key] = _with_units(value, key)
        except InputError as error:
            raise InputError(f"defaults {key}: {error.message}", path=path, line=line_of(text, ["defaults", key])) from None
    for index, link in enumerate(document["links"]):
        line = line_of(text, ["links", index])
        where = f"link {index}"
        try:
            src = _endpoint(link["src"], npus, switches, where)
            dst = _endpoint(link["dst"], npus, switches, where)
            topo.add_link(
                src,
                dst,
                _with_units(link.get("bandwidth_gbps", defaults["bandwidth_gbps"]), "bandwidth_gbps"),
                _with_units(link.get("latency_ns", defaults["latency_ns"]), "latency_ns"),
                bidirectional=link.get("bidirectional", defaults["bidirectional"]),
            )
        except InputError as error:
            raise type(error)(error.message.removeprefix(f"{topo.name}: "), path=path, line=line) from None
    return topo


def _from_astra_sim(document: dict[str, Any], path: Path, text: str, overrides: dict[str, Any]) -> Topology:
    """ASTRA-sim's analytical network file (read by :mod:`~chakra_collectives.converters.astra_sim.network`)."""
    from chakra_collectives.converters.astra_sim.network import parse_network  # imported when used (start-up time)

    return network_topology(parse_network(document, path=path, text=text, defaults=overrides), name=path.stem)


def network_topology(network: AnalyticalNetwork, *, name: str = "astra-sim") -> Topology:
    """The topology of an ASTRA-sim analytical network: its links, switch ``k`` = node ``NPUs + k``.

    >>> from chakra_collectives.converters.astra_sim import AnalyticalNetwork, Dimension
    >>> network_topology(AnalyticalNetwork((Dimension("Switch", 4, 50.0, 500.0),))).describe()
    'astra-sim: 4 NPUs, 1 switches, 8 links'
    """
    num_switches, links = network.links()
    topo = Topology(network.num_npus, num_switches=num_switches, name=name)
    for src, dst, bandwidth_gbps, latency_ns in links:
        topo.add_link(src, dst, bandwidth_gbps, latency_ns)
    return topo


def _from_graphml(path: Path, overrides: dict[str, Any]) -> Topology:
    import xml.etree.ElementTree as ElementTree  # imported when used (start-up time)

    import networkx as nx

    try:
        graph = nx.read_graphml(path)
    except ElementTree.ParseError as error:
        raise InputError(f"invalid GraphML: {error.msg if hasattr(error, 'msg') else error}", path=path, line=error.position[0]) from None
    except (nx.NetworkXError, KeyError, ValueError) as error:
        raise InputError(f"invalid GraphML: {error}", path=path) from None
    kinds = {node: str(data.get("kind", data.get("type", "npu"))).lower() for node, data in graph.nodes(data=True)}
    npus = [n for n in graph.nodes if kinds[n] != "switch"]
    switches = [n for n in graph.nodes if kinds[n] == "switch"]
    if not npus:
        raise InputError("GraphML has no NPU nodes", path=path)
    ids = {node: i for i, node in enumerate(npus + switches)}
    topo = Topology(len(npus), num_switches=len(switches), name=path.stem)
    for src, dst, data in graph.edges(data=True):
        where = f"edge {src}->{dst}"
        bw = _number(data.get("bandwidth_gbps", data.get("bandwidth", overrides.get("bandwidth_gbps"))), where, "bandwidth_gbps")
        lat = _number(data.get("latency_ns", data.get("latency", overrides.get("latency_ns", builders.LATENCY_NS))), where, "latency_ns")
        try:
            topo.add_link(ids[src], ids[dst], bw, lat, bidirectional=not graph.is_directed())
        except InputError as error:
            raise type(error)(f"{where}: {error.message.split(': ', 1)[-1]}", path=path) from None
    return topo


def _number(value: Any, where: str, what: str) -> float:
    if value is None:
        raise InputError(f"{where} has no {what}")
    try:
        return float(_with_units(value, what))
    except InputError as error:
        raise InputError(f"{where}: {what} {error.message}") from None


_EDGE_RE = re.compile(r"^(?P<src>\S+)\s+(?P<arrow>->\s+)?(?P<dst>\S+)(?P<rest>(?:\s+\S+)*)\s*$")


def _from_edge_list(text: str, path: Path, overrides: dict[str, Any]) -> Topology:
    entries = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = _EDGE_RE.match(line)
        if match is None:
            raise InputError(f"expected 'SRC DST [BANDWIDTH_GBPS [LATENCY_NS]]', got {line!r}", path=path, line=number)
        rest = match.group("rest").split()
        if len(rest) > 2:
            raise InputError(f"too many fields in {line!r} (SRC DST [BANDWIDTH_GBPS [LATENCY_NS]])", path=path, line=number)
        nodes = []
        for token in (match.group("src"), match.group("dst")):
            if re.fullmatch(r"\d+", token):
                nodes.append(("npu", int(token)))
            elif re.fullmatch(r"s\d+", token):
                nodes.append(("switch", int(token[1:])))
            else:
                raise InputError(f"node {token!r} is neither an NPU number nor a switch name sN", path=path, line=number)
        try:
            values = [_with_units(v, name) for name, v in zip(("bandwidth_gbps", "latency_ns"), rest)]
        except InputError as error:
            raise InputError(f"bandwidth/latency must be numbers or have units (50GB/s, 400Gbps; 500ns, 1us): {error.message} in {line!r}", path=path, line=number) from None
        bw = values[0] if values else overrides.get("bandwidth_gbps", builders.BANDWIDTH_GBPS)
        lat = values[1] if len(values) > 1 else overrides.get("latency_ns", builders.LATENCY_NS)
        entries.append((number, nodes, bw, lat, match.group("arrow") is None))
    if not entries:
        raise InputError("no links in the edge list", path=path)
    npus = switches = 0
    for number, nodes, *_ in entries:  # the node counts, checked against the limits before building
        for kind, i in nodes:
            if kind == "npu" and i >= npus:
                npus = check_npus_at(i + 1, f"NPU {i}", path, number)
            elif kind == "switch" and i >= switches:
                switches = check_switches_at(i + 1, f"switch s{i}", path, number)
    check_links_at(sum(2 if both else 1 for *_, both in entries), "the edge list", path, None)
    topo = Topology(npus, num_switches=switches, name=path.stem)
    for number, nodes, bw, lat, both in entries:
        a, b = (i if kind == "npu" else npus + i for kind, i in nodes)
        try:
            topo.add_link(a, b, bw, lat, bidirectional=both)
        except InputError as error:
            raise type(error)(error.message.split(": ", 1)[-1], path=path, line=number) from None
    return topo


def check_npus_at(count: int, what: str, path: Path, line: int | None) -> int:
    """:func:`~chakra_collectives.limits.check_npus`, the error located in a file."""
    try:
        return check_npus(count, what)
    except InputError as error:
        raise error.located(path=path, line=line) from None


def check_switches_at(count: int, what: str, path: Path, line: int | None) -> int:
    try:
        return check_switches(count, what)
    except InputError as error:
        raise error.located(path=path, line=line) from None


def check_links_at(count: int, what: str, path: Path, line: int | None) -> int:
    try:
        return check_links(count, what)
    except InputError as error:
        raise error.located(path=path, line=line) from None
