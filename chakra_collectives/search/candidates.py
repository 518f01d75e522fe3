"""Topology candidates of a search: built, measured (diameter, ports, cost) and checked.

A candidate is built with the space's port bandwidth and latency (for builders that take
them, unless the spec sets its own), then measured:

* **ports per NPU** -- the heavier direction of an NPU's links, in units of the space's port
  bandwidth (a fat-tree NPU with ``degree=4`` has one modeled link of 4 x the port bandwidth:
  4 ports); the space's ``ports_per_npu`` is a limit on it;
* **diameter** -- hops between NPUs, switch hops included;
* **cost** -- ports, each weighted by its bandwidth over the port bandwidth: every NPU's ports,
  plus ``switch_port`` x every switch port. A direct-connect fabric of degree ``d`` costs
  ``N d``; a fat-tree plane of ``L`` levels has ``N (2L - 1)`` switch ports (leaf ports down,
  and both ends of every link between levels), so ``fattree:N,degree=d`` costs
  ``N d (1 + switch_port (2L - 1))``.

``cost_equivalent_to: SPEC`` scales a candidate's bandwidth so its cost equals SPEC's (TopoOpt's
"cost-equivalent fat-tree": the switches' price comes out of the bandwidth).

>>> from chakra_collectives.search.space import parse_space
>>> space = parse_space('''
... npus: 16
... topologies:
...   - totientperms:{npus},degree=4
...   - {spec: "fattree:{npus},degree=4", cost_equivalent_to: "totientperms:{npus},degree=4"}
... ''')
>>> built = [build_choice(c, space, 16) for c in space.topology_choices(16)]
>>> [(b.facts.diameter, b.facts.ports_per_npu, b.facts.cost) for b in built]
[(3, 4.0, 64.0), (2, 2.0, 64.0)]
>>> built[1].topology.links[0].bandwidth_gbps     # 4 ports of half the port bandwidth
100.0
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import shortest_path

from chakra_collectives.errors import InputError
from chakra_collectives.search.space import SearchSpace, TopologyChoice
from chakra_collectives.topology import BUILDERS, Topology, load_topology
from chakra_collectives.topology.families import fat_tree_levels

_FAT_TREE = re.compile(r"^fattree:(\d+),degree=(\d+),radix=(\d+)")
_BUILDER_NAME = re.compile(r"([A-Za-z][\w-]*)\s*:")
_SETS_BANDWIDTH = re.compile(r"(^|,)\s*(bw|bandwidth_gbps)\s*=")
_SETS_LATENCY = re.compile(r"(^|,)\s*(lat|latency_ns)\s*=")


@dataclass(frozen=True)
class TopologyFacts:
    """What a candidate offers and costs (see the module docstring)."""

    npus: int
    switches: int
    links: int
    diameter: int
    ports_per_npu: float
    cost: float
    bandwidth_scale: float = 1.0
    """Factor the candidate's bandwidth was scaled by (``cost_equivalent_to``)."""


@dataclass
class BuiltTopology:
    """A candidate ready to evaluate."""

    choice: TopologyChoice
    topology: Topology
    facts: TopologyFacts
    identity: dict
    """Everything that determines the topology (hashed into evaluation keys)."""

    @property
    def label(self) -> str:
        return self.choice.label

    @property
    def family(self) -> str:
        """``torus2d``, ``totientperms``..., ``expansion`` or ``file``."""
        if self.choice.file is not None:
            return "file"
        spec = self.choice.spec or ""
        if "(" in spec or re.search(r"\s[xX×]\s", spec):
            return "expansion"
        return spec.split(":")[0].strip().lower()


@dataclass(frozen=True)
class Skipped:
    """A candidate (or workload variant) left out, and why."""

    label: str
    npus: int | None
    reason: str
    line: int | None = None

    def as_dict(self) -> dict:
        return {"candidate": self.label, "num_npus": self.npus, "reason": self.reason, "line": self.line}


def file_digest(path: Path) -> str:
    """SHA-1 of a file's bytes (a file candidate's identity)."""
    return hashlib.sha1(path.read_bytes()).hexdigest()


def _overrides(spec: str, space: SearchSpace, bandwidth_gbps: float) -> dict[str, float]:
    """The port bandwidth / latency for every builder in ``spec`` that takes them and is not told otherwise."""
    names = [n.lower() for n in _BUILDER_NAME.findall(spec)]
    takes = [BUILDERS[n].options() for n in names if n in BUILDERS]
    found = {}
    if all("bandwidth_gbps" in t for t in takes) and not _SETS_BANDWIDTH.search(spec):
        found["bandwidth_gbps"] = bandwidth_gbps
    if all("latency_ns" in t for t in takes) and not _SETS_LATENCY.search(spec):
        found["latency_ns"] = space.port_latency_ns
    return found


def _load(choice_spec: str | None, file: Path | None, space: SearchSpace, bandwidth_gbps: float) -> Topology:
    if file is not None:
        return load_topology(str(file), bandwidth_gbps=bandwidth_gbps, latency_ns=space.port_latency_ns)
    return load_topology(choice_spec, **_overrides(choice_spec, space, bandwidth_gbps))  # type: ignore[arg-type]


def measure(topology: Topology, space: SearchSpace, *, bandwidth_scale: float = 1.0) -> TopologyFacts:
    """Diameter, ports per NPU and cost of ``topology`` (see the module docstring)."""
    n = topology.num_npus
    arrays = topology.link_arrays
    src, dst, bw = arrays["src"], arrays["dst"], arrays["bandwidth_gbps"] / space.port_bandwidth_gbps
    out_units = np.bincount(src, weights=bw, minlength=topology.num_nodes)
    in_units = np.bincount(dst, weights=bw, minlength=topology.num_nodes)
    units = np.maximum(out_units, in_units)
    switch_units = float(units[n:].sum())
    fat_tree = _FAT_TREE.match(topology.name)
    if fat_tree is not None:
        levels = fat_tree_levels(int(fat_tree.group(1)), int(fat_tree.group(3)))
        switch_units *= 2 * levels - 1
    graph = csr_matrix((np.ones(len(src)), (src, dst)), shape=(topology.num_nodes, topology.num_nodes))
    hops = shortest_path(graph, unweighted=True, indices=np.arange(n))[:, :n]
    return TopologyFacts(
        npus=n,
        switches=topology.num_switches,
        links=len(topology.links),
        diameter=int(hops.max()) if n > 1 else 0,
        ports_per_npu=round(float(units[:n].max()), 9),
        cost=round(float(units[:n].sum()) + space.switch_port_cost * switch_units, 9),
        bandwidth_scale=bandwidth_scale,
    )


def _scaled_copy(topology: Topology, factor: float) -> Topology:
    copy = Topology(topology.num_npus, num_switches=topology.num_switches, name=topology.name)
    for link in topology.links:
        copy.add_link(link.src, link.dst, link.bandwidth_gbps * factor, link.latency_ns)
    copy.uniform = topology.uniform
    return copy


def build_choice(choice: TopologyChoice, space: SearchSpace, npus: int | None) -> BuiltTopology | Skipped:
    """Build and measure ``choice`` for ``npus`` NPUs, or say why it is skipped.

    An unknown family is the user's mistake and raises :class:`InputError` (with the space
    file's line); any other reason a candidate cannot be built (a degree too large for this NPU
    count, a constraint) skips it.
    """
    try:
        topology = _load(choice.spec, choice.file, space, space.port_bandwidth_gbps)
        scale = 1.0
        if choice.cost_equivalent_to is not None:
            reference = measure(_load(choice.cost_equivalent_to, None, space, space.port_bandwidth_gbps), space)
            scale = reference.cost / measure(topology, space).cost
            overrides = {} if choice.spec is None else _overrides(choice.spec, space, space.port_bandwidth_gbps * scale)
            if "bandwidth_gbps" in overrides:
                topology = _load(choice.spec, None, space, space.port_bandwidth_gbps * scale)
            else:
                topology = _scaled_copy(topology, scale)
    except InputError as error:
        if error.message.startswith("unknown topology"):
            raise InputError(f"{choice.label}: {error.message}", path=error.path, line=choice.line) from None
        return Skipped(choice.label, npus, error.message if error.path is None else str(error), choice.line)
    if npus is not None and topology.num_npus != npus:
        return Skipped(choice.label, npus, f"has {topology.num_npus} NPUs, not {npus}", choice.line)
    facts = measure(topology, space, bandwidth_scale=scale)
    if space.ports_per_npu is not None and facts.ports_per_npu > space.ports_per_npu + 1e-9:
        return Skipped(choice.label, npus, f"needs {facts.ports_per_npu:g} ports per NPU, the space allows {space.ports_per_npu:g}", choice.line)
    identity = {
        "spec": choice.spec,
        "file": None if choice.file is None else file_digest(choice.file),
        "cost_equivalent_to": choice.cost_equivalent_to,
        "port": [space.port_bandwidth_gbps, space.port_latency_ns],
        "switch_port_cost": space.switch_port_cost if choice.cost_equivalent_to else None,
        "npus": topology.num_npus,
    }
    return BuiltTopology(choice, topology, facts, identity)


def identity_key(document: dict) -> str:
    """A short stable hash of a JSON-able identity.

    >>> identity_key({"b": 1, "a": [2]}) == identity_key({"a": [2], "b": 1})
    True
    """
    return hashlib.sha1(json.dumps(document, sort_keys=True, default=str).encode()).hexdigest()[:16]


__all__ = ["BuiltTopology", "Skipped", "TopologyFacts", "build_choice", "file_digest", "identity_key", "measure"]
