"""What a topology offers collectives, for ``chakra-coll topo-info``: ports, diameter, bisection, bounds, BFB.

:func:`topology_info` gathers:

* **ports** -- links out and in of every NPU (min and max);
* **diameter** and mean distance -- hops between NPUs (switch hops count);
* **bisection** -- :func:`chakra_collectives.flow.bisection.bisection_gbps`;
* **cut bound** per collective -- :func:`chakra_collectives.bounds.lower_bounds` at ``size``;
* **BFB** (direct-connect topologies) -- steps (latency term: steps x link latency) and the
  bandwidth term of the BFB schedule (:mod:`chakra_collectives.synth.bfb`) and its ratio to the
  All-Gather cut bound: one point of the latency/bandwidth frontier;
* for expansions, what they expand; for fat-trees, the switches a real one needs.

>>> from chakra_collectives.topology import load_topology
>>> info = topology_info(load_topology("hypercube:3"), 2**20)
>>> info["diameter"], info["out_ports"], info["bisection_gbps"], info["bfb"]["steps"]
(3, [3, 3], 200.0, 3)
"""

from __future__ import annotations

from typing import Any, Callable

from chakra_collectives.bounds import SUPPORTED, lower_bounds
from chakra_collectives.synth.bfb import bfb_problem, hop_matrix, solve_bfb, topology_distances
from chakra_collectives.topology.core import Topology
from chakra_collectives.topology.expansions import origin
from chakra_collectives.topology.families import fat_tree_levels, fat_tree_switches
from chakra_collectives.flow.bisection import bisection_gbps
from chakra_collectives.units import bytes_per_ns


def topology_info(topology: Topology, size_bytes: int, *, with_bfb: bool = True, on_step: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Ports, diameter, bisection, the cut bound per collective at ``size_bytes``, and BFB's point (see the module docstring).

    ``on_step(what)`` is called before each part (for progress displays).
    """
    step = on_step or (lambda what: None)
    n = topology.num_npus
    out_ports = [len(topology.out_links[v]) for v in range(n)]
    in_ports = [len(topology.in_links[v]) for v in range(n)]
    arrays = topology.link_arrays
    if topology.num_switches:
        hops = hop_matrix(topology.num_nodes, arrays["src"], arrays["dst"])[:n, :n]
    else:
        hops = topology_distances(topology)
    step("bisection")
    bisection, method = bisection_gbps(topology)
    info: dict[str, Any] = {
        "topology": topology.name,
        "npus": n,
        "switches": topology.num_switches,
        "links": len(topology.links),
        "out_ports": [min(out_ports), max(out_ports)],
        "in_ports": [min(in_ports), max(in_ports)],
        "diameter": int(hops.max()),
        "mean_distance": float(hops.sum() / (n * (n - 1))) if n > 1 else 0.0,
        "bisection_gbps": bisection,
        "bisection_method": method,
        "size_bytes": size_bytes,
        "bounds": {},
    }
    found = origin(topology)
    if found is not None:
        info["expansion"] = {"kind": found.kind, "of": [t.name for t in found.operands], "copies": found.copies}
    if topology.name.startswith("fattree:"):
        ports_per_plane = n
        radix = int(topology.name.split("radix=")[1])
        planes = int(topology.name.split("degree=")[1].split(",")[0])
        info["fat_tree"] = {"planes": planes, "ports_per_npu": planes, "levels": fat_tree_levels(ports_per_plane, radix), "switches_per_plane": fat_tree_switches(ports_per_plane, radix), "radix": radix}
    for collective in SUPPORTED:
        step(f"{collective.value} bounds")
        bounds = lower_bounds(topology, collective, size_bytes)
        info["bounds"][collective.value] = {
            "cut_ns": bounds.cut_ns,
            "latency_ns": bounds.latency_ns,
            "best_ns": bounds.best_ns,
            **({"reduce_scatter_all_gather_ns": bounds.reduce_scatter_all_gather_ns} if bounds.reduce_scatter_all_gather_ns is not None else {}),
        }
    if with_bfb and not topology.num_switches and n > 1:
        step("BFB linear programs")
        solution = solve_bfb(bfb_problem(topology, distance=None if found is not None else hops))
        b_max = float(max(solution.problem.bandwidth))
        bandwidth_ns = float(solution.bandwidth_shards) * size_bytes / n / bytes_per_ns(b_max)
        cut = info["bounds"]["all-gather"]["cut_ns"]
        info["bfb"] = {
            "steps": len(solution.step_loads),
            "step_loads": [str(u) for u in solution.step_loads],
            "all_gather_bandwidth_ns": bandwidth_ns,
            "all_gather_efficiency": cut / bandwidth_ns if bandwidth_ns else 1.0,
            "lp_s": solution.lp_s,
        }
    return info


__all__ = ["topology_info"]
