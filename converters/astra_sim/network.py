"""ASTRA-sim's analytical network file (``network.yml``), read and written.

The file lists one entry per network dimension -- ``topology`` (``Ring``, ``FullyConnected``
or ``Switch``), ``npus_count``, ``bandwidth`` (GB/s) and ``latency`` (ns) -- with NPU ids
counting dimension 0 fastest: dimension ``i`` joins the NPUs that differ only in digit ``i``.
A Ring joins its group both ways round, FullyConnected every ordered pair, Switch every member
to one new switch (both ways). This module only knows the format: an
:class:`AnalyticalNetwork` lists its dimensions and expands them into plain links
(:meth:`AnalyticalNetwork.links`); :func:`~chakra_collectives.topology.load_topology` turns
those into a :class:`~chakra_collectives.topology.Topology`, and :func:`analytical_network`
finds the file for a topology (``chakra-coll synth --astra-sim``).

>>> from chakra_collectives.topology import load_topology
>>> print(analytical_network(load_topology("torus2d:4x4")).to_yaml(), end="")
topology: [ Ring, Ring ]
npus_count: [ 4, 4 ]
bandwidth: [ 50.0, 50.0 ]  # GB/s
latency: [ 500.0, 500.0 ]  # ns
>>> analytical_network(load_topology("mesh2d:3x3"))
Traceback (most recent call last):
...
chakra_collectives.converters.astra_sim.network.NotExpressible: mesh2d:3x3 is not a product of Ring / FullyConnected / Switch dimensions (NPU 0's links fit no such decomposition, as in meshes without wrap-around links or dimensions of mixed bandwidths)
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from chakra_collectives.errors import InputError
from chakra_collectives.limits import check_bandwidth, check_latency, check_links, check_npus
from chakra_collectives.locate import line_of

if TYPE_CHECKING:  # the converter reads a Topology's links; it never builds one
    from chakra_collectives.topology import Topology

KINDS = {"ring": "Ring", "fullyconnected": "FullyConnected", "switch": "Switch"}
"""Dimension kinds as spelled in the file, by their normalized (lower-case, no ``_``) name."""


class NotExpressible(InputError):
    """The topology has no ASTRA-sim analytical-network form; the message says why."""


@dataclass(frozen=True)
class Dimension:
    kind: str
    """``Ring``, ``FullyConnected`` or ``Switch``."""
    npus: int
    bandwidth_gbps: float
    latency_ns: float


Link = tuple[int, int, float, float]
"""``(src, dst, bandwidth_gbps, latency_ns)``; node ids ``>= num_npus`` are switches."""


@dataclass(frozen=True)
class AnalyticalNetwork:
    """ASTRA-sim's analytical network: dimensions, the first one's NPUs numbered fastest."""

    dimensions: tuple[Dimension, ...]

    @property
    def num_npus(self) -> int:
        total = 1
        for dim in self.dimensions:
            total *= dim.npus
        return total

    @property
    def num_links(self) -> int:
        """How many directed links :meth:`links` makes (known before making them)."""
        total, count = self.num_npus, 0
        for dim in self.dimensions:
            n, groups = dim.npus, total // dim.npus
            if n > 1:
                per_group = {"Ring": 2 * n if n > 2 else 2, "FullyConnected": n * (n - 1)}.get(dim.kind, 2 * n)
                count += groups * per_group
        return count

    def document(self) -> dict[str, list[Any]]:
        return {
            "topology": [d.kind for d in self.dimensions],
            "npus_count": [d.npus for d in self.dimensions],
            "bandwidth": [d.bandwidth_gbps for d in self.dimensions],
            "latency": [d.latency_ns for d in self.dimensions],
        }

    def to_yaml(self) -> str:
        """The file, in the layout of ASTRA-sim's shipped examples."""
        doc = self.document()
        items = lambda key: ", ".join(str(v) for v in doc[key])  # noqa: E731
        return (
            f"topology: [ {items('topology')} ]\n"
            f"npus_count: [ {items('npus_count')} ]\n"
            f"bandwidth: [ {items('bandwidth')} ]  # GB/s\n"
            f"latency: [ {items('latency')} ]  # ns\n"
        )

    def links(self) -> tuple[int, list[Link]]:
        """``(num_switches, links)``: every directed link, in the order ASTRA-sim's dimensions
        add them (dimension by dimension, group by group); switch ``k`` is node ``num_npus + k``.

        >>> AnalyticalNetwork((Dimension("Switch", 2, 25.0, 100.0),)).links()
        (1, [(0, 2, 25.0, 100.0), (2, 0, 25.0, 100.0), (1, 2, 25.0, 100.0), (2, 1, 25.0, 100.0)])
        """
        total = self.num_npus
        switches = 0
        links: list[Link] = []
        stride = 1
        for dim in self.dimensions:
            bw, lat = dim.bandwidth_gbps, dim.latency_ns
            for group in _dimension_groups(total, dim.npus, stride):
                n = len(group)
                if n == 1:
                    continue
                if dim.kind == "Ring":
                    for i in range(n if n > 2 else 1):
                        a, b = group[i], group[(i + 1) % n]
                        links += [(a, b, bw, lat), (b, a, bw, lat)]
                elif dim.kind == "FullyConnected":
                    links += [(a, b, bw, lat) for a in group for b in group if a != b]
                else:
                    hub = total + switches
                    switches += 1
                    for a in group:
                        links += [(a, hub, bw, lat), (hub, a, bw, lat)]
            stride *= dim.npus
        return switches, links


def parse_network(document: dict[str, Any], *, path: str | Path, text: str = "", defaults: dict[str, float] | None = None) -> AnalyticalNetwork:
    """The network a parsed ``network.yml`` describes; errors name ``path`` and the line in ``text``.

    ``defaults`` (``bandwidth_gbps``, ``latency_ns``) stand in for a missing ``bandwidth`` or
    ``latency`` list.

    >>> parse_network({"topology": ["Ring"], "npus_count": [4], "bandwidth": [50], "latency": [500]}, path="net.yml")
    AnalyticalNetwork(dimensions=(Dimension(kind='Ring', npus=4, bandwidth_gbps=50.0, latency_ns=500.0),))
    >>> parse_network({"topology": ["Ring"], "npus_count": [4], "bandwidth": [0], "latency": [500]}, path="net.yml")
    Traceback (most recent call last):
    ...
    chakra_collectives.errors.InputError: net.yml: dimension 0 has bandwidth 0 GB/s; it must be a finite number from 0.001 to 1e+06 GB/s
    """
    defaults = defaults or {}
    fallback = {"bandwidth": defaults.get("bandwidth_gbps"), "latency": defaults.get("latency_ns")}
    fields: dict[str, list[Any]] = {}
    for key in ("topology", "npus_count", "bandwidth", "latency"):
        value = document.get(key)
        if value is None and fallback.get(key) is not None:
            value = [fallback[key]] * len(fields["topology"])
        if value is None:
            raise InputError(f"ASTRA-sim network file lacks {key!r}", path=path)
        fields[key] = value if isinstance(value, list) else [value]
    count = len(fields["topology"])
    for key, values in fields.items():
        if len(values) != count:
            raise InputError(f"{key!r} lists {len(values)} entries but topology lists {count} dimensions", path=path, line=line_of(text, [key]))
    dimensions = []
    for index in range(count):
        kind = fields["topology"][index]
        canonical = KINDS.get(str(kind).lower().replace("_", ""))
        if canonical is None:
            raise InputError(f"unknown ASTRA-sim topology {kind!r} (valid: Ring, FullyConnected, Switch)", path=path, line=line_of(text, ["topology", index]))
        npus = fields["npus_count"][index]
        if not isinstance(npus, int) or isinstance(npus, bool) or npus < 1:
            raise InputError(f"npus_count entry {npus!r} is not a positive integer", path=path, line=line_of(text, ["npus_count", index]))
        dimensions.append((canonical, npus))
    result = []
    for index, (kind, npus) in enumerate(dimensions):
        bw, lat = fields["bandwidth"][index], fields["latency"][index]
        for what, value in (("bandwidth", bw), ("latency", lat)):
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise InputError(f"{what} entry {value!r} is not a number", path=path, line=line_of(text, [what, index]))
        if npus > 1:
            try:
                check_bandwidth(bw, f"dimension {index}")
            except InputError as error:
                raise error.located(path=path, line=line_of(text, ["bandwidth", index])) from None
            try:
                check_latency(lat, f"dimension {index}")
            except InputError as error:
                raise error.located(path=path, line=line_of(text, ["latency", index])) from None
        result.append(Dimension(kind, npus, float(bw), float(lat)))
    network = AnalyticalNetwork(tuple(result))
    try:  # before anything is built from it
        check_npus(network.num_npus, "npus_count " + " x ".join(str(d.npus) for d in network.dimensions))
        check_links(network.num_links, "the network")
    except InputError as error:
        raise error.located(path=path, line=line_of(text, ["npus_count"])) from None
    return network


def _dimension_groups(total: int, size: int, stride: int) -> list[list[int]]:
    """NPUs that differ only in one dimension (of ``size``, at ``stride``)."""
    return [[base + i * stride for i in range(size)] for base in range(total) if (base // stride) % size == 0]


# --------------------------------------------------------------------------- writing
def analytical_network(topology: "Topology") -> AnalyticalNetwork:
    """The ASTRA-sim network with exactly ``topology``'s links, or :class:`NotExpressible`.

    Dimensions are searched from NPU 0's links (dimension ``i`` joins NPUs ``stride_i`` apart)
    and every candidate is checked by expanding it back into links and comparing every link --
    bandwidth, latency, direction, and which NPUs each switch joins.
    """
    reason = _obvious_reason(topology)
    if reason is None:
        target = _canonical(topology.num_npus, [(l.src, l.dst, l.bandwidth_gbps, l.latency_ns) for l in topology.links])
        for dims in _decompositions(topology):
            candidate = AnalyticalNetwork(tuple(dims))
            if _canonical(topology.num_npus, candidate.links()[1]) == target:
                return candidate
        reason = "NPU 0's links fit no such decomposition, as in meshes without wrap-around links or dimensions of mixed bandwidths"
    raise NotExpressible(f"{topology.name} is not a product of Ring / FullyConnected / Switch dimensions ({reason})")


def _obvious_reason(topology: "Topology") -> str | None:
    pairs = Counter((l.src, l.dst, l.bandwidth_gbps, l.latency_ns) for l in topology.links)
    for (src, dst, bw, lat), count in pairs.items():
        if pairs[(dst, src, bw, lat)] != count:
            return f"link {_node(topology, src)}->{_node(topology, dst)} has no reverse link of the same bandwidth and latency; ASTRA-sim's dimensions are bidirectional"
        if topology.is_switch(src) and topology.is_switch(dst):
            return f"switches {_node(topology, src)} and {_node(topology, dst)} are linked; ASTRA-sim's switches join NPUs only"
    for switch in range(topology.num_npus, topology.num_nodes):
        members = {topology.links[i].src for i in topology.in_links[switch]}
        direct = [n for n in members if any(not topology.is_switch(topology.links[i].dst) for i in topology.out_links[n])]
        if len(members) == topology.num_npus and direct and topology.num_npus > 2:
            return (
                f"switch {_node(topology, switch)} joins all {topology.num_npus} NPUs that also have direct links; "
                "an ASTRA-sim Switch dimension has one switch per group of the dimension"
            )
    return None


def _node(topology: "Topology", node: int) -> str:
    return f"s{node - topology.num_npus}" if topology.is_switch(node) else str(node)


def _canonical(num_npus: int, links: list[Link]) -> Counter:
    """Links as a multiset, each switch named by the NPUs it joins (switch ids do not matter)."""
    joins: dict[int, set[int]] = {}
    for src, dst, _, _ in links:
        if src >= num_npus:
            joins.setdefault(src, set()).add(dst)
        if dst >= num_npus:
            joins.setdefault(dst, set()).add(src)
    key = {node: ("switch", frozenset(members)) for node, members in joins.items()}
    return Counter((key.get(src, ("npu", src)), key.get(dst, ("npu", dst)), bw, lat) for src, dst, bw, lat in links)


def _decompositions(topology: "Topology") -> Iterator[list[Dimension]]:
    n = topology.num_npus
    out_of_zero = {topology.links[i].dst: topology.links[i] for i in topology.out_links[0]}

    def dimension(stride: int, size: int) -> Dimension | None:
        members = {k * stride for k in range(1, size)}
        for node, link in out_of_zero.items():
            if topology.is_switch(node):
                joined = {topology.links[i].dst for i in topology.out_links[node]}
                if joined == members | {0}:
                    return Dimension("Switch", size, link.bandwidth_gbps, link.latency_ns)
        first = out_of_zero.get(stride)
        if first is None:
            return None
        if size > 3 and members <= set(out_of_zero):
            return Dimension("FullyConnected", size, first.bandwidth_gbps, first.latency_ns)
        if (size - 1) * stride in out_of_zero:
            return Dimension("Ring", size, first.bandwidth_gbps, first.latency_ns)
        return None

    def search(stride: int, remaining: int, dims: list[Dimension]) -> Iterator[list[Dimension]]:
        if remaining == 1:
            yield dims
            return
        for size in range(2, remaining + 1):
            if remaining % size == 0:
                found = dimension(stride, size)
                if found is not None:
                    yield from search(stride * size, remaining // size, dims + [found])

    if n == 1:
        return
    yield from search(1, n, [])


__all__ = ["AnalyticalNetwork", "Dimension", "KINDS", "NotExpressible", "analytical_network", "parse_network"]
