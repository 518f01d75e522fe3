"""Write a Topology as chakra-coll's own topology file (YAML), one link per line.

Pairs of opposite links with equal bandwidth and latency become one ``bidirectional`` entry;
the most common bandwidth and latency go to ``defaults``, so a file lists only what differs.
Reading the file back (:func:`~chakra_collectives.topology.load_topology`) gives the same
links, switches included.

>>> from chakra_collectives.topology import load_topology
>>> print(dump_topology(load_topology("switch:2")), end="")
name: "switch:2"
npus: 2
switches: 1
defaults: {bandwidth_gbps: 50.0, latency_ns: 500.0, bidirectional: true}
links:
  - {src: 0, dst: s0}
  - {src: 1, dst: s0}
"""

from __future__ import annotations

import json
from collections import Counter

from chakra_collectives.topology.core import Topology


def dump_topology(topology: Topology, *, comment: str = "") -> str:
    """The YAML text of ``topology`` (``comment`` lines go first, as ``#`` comments)."""
    pending = Counter((l.src, l.dst, l.bandwidth_gbps, l.latency_ns) for l in topology.links)
    entries: list[tuple[int, int, float, float, bool]] = []
    for link in topology.links:
        key = (link.src, link.dst, link.bandwidth_gbps, link.latency_ns)
        if not pending[key]:
            continue
        pending[key] -= 1
        reverse = (link.dst, link.src, link.bandwidth_gbps, link.latency_ns)
        both = pending[reverse] > 0
        if both:
            pending[reverse] -= 1
        entries.append((*key, both))
    common = Counter((bw, lat) for _, _, bw, lat, _ in entries).most_common(1)
    bw0, lat0 = common[0][0] if common else (50.0, 500.0)
    two_way = sum(1 for e in entries if e[4]) * 2 >= len(entries)
    node = lambda n: f"s{n - topology.num_npus}" if topology.is_switch(n) else str(n)  # noqa: E731
    lines = [f"# {text}" if text else "#" for text in comment.splitlines()]
    lines += [f"name: {json.dumps(topology.name)}", f"npus: {topology.num_npus}"]
    if topology.num_switches:
        lines.append(f"switches: {topology.num_switches}")
    lines += [f"defaults: {{bandwidth_gbps: {bw0}, latency_ns: {lat0}, bidirectional: {str(two_way).lower()}}}", "links:"]
    for src, dst, bw, lat, both in entries:
        fields = [f"src: {node(src)}", f"dst: {node(dst)}"]
        if bw != bw0:
            fields.append(f"bandwidth_gbps: {bw}")
        if lat != lat0:
            fields.append(f"latency_ns: {lat}")
        if both != two_way:
            fields.append(f"bidirectional: {str(both).lower()}")
        lines.append(f"  - {{{', '.join(fields)}}}")
    return "\n".join(lines) + "\n"


__all__ = ["dump_topology"]
