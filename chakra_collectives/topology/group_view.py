"""A process group's view of a fabric: its members are the NPUs, every other NPU a switch.

A collective over a group of ranks placed on some of a fabric's NPUs sees the other NPUs only as
carriers of traffic: they run none of its operations, and a message between two members may
cross them store-and-forward, exactly as it crosses a switch. :func:`group_view` builds that
network: member ``i`` (the group's rank ``i``) is NPU ``i``, the fabric's other NPUs and its
switches become switches, and every link keeps its index, bandwidth and latency, so a schedule
planned on the view is a schedule on the fabric (``node_of`` maps view node ids back).

>>> from chakra_collectives.topology import mesh2d
>>> view = group_view(mesh2d(3, 3), (0, 2, 8))
>>> view.topology.num_npus, view.topology.num_switches, view.node_of[:4].tolist()
(3, 6, [0, 2, 8, 1])
>>> group_view(mesh2d(2, 2), (0, 7))
Traceback (most recent call last):
...
chakra_collectives.errors.InputError: group rank 1 is placed on NPU 7, which mesh2d:2x2 does not have (0..3)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from chakra_collectives.errors import InputError
from chakra_collectives.topology.core import Topology


@dataclass(frozen=True)
class GroupView:
    topology: Topology
    """Members as NPUs ``0 .. len(group) - 1``, the rest as switches; links in the fabric's order."""
    node_of: np.ndarray
    """Fabric node id of every view node."""


def group_view(topology: Topology, group: tuple[int, ...] | list[int]) -> GroupView:
    """The network ``group`` sees in ``topology`` (see the module docstring).

    Raises
    ------
    InputError
        A member that is not an NPU of the fabric, a member named twice, or fewer than 2 members.
    """
    group = tuple(int(g) for g in group)
    for rank, npu in enumerate(group):
        if not 0 <= npu < topology.num_npus:
            raise InputError(f"group rank {rank} is placed on NPU {npu}, which {topology.name} does not have (0..{topology.num_npus - 1})")
    if len(set(group)) != len(group):
        raise InputError(f"the group names an NPU twice: {list(group)}")
    if len(group) < 2:
        raise InputError("a group needs at least 2 ranks")
    members = set(group)
    node_of = np.array(
        list(group) + [v for v in range(topology.num_npus) if v not in members] + list(range(topology.num_npus, topology.num_nodes)),
        dtype=np.int64,
    )
    view_of = np.empty(topology.num_nodes, dtype=np.int64)
    view_of[node_of] = np.arange(topology.num_nodes)
    view = Topology(len(group), num_switches=topology.num_nodes - len(group), name=f"{topology.name} group of {len(group)}")
    for link in topology.links:
        view.add_link(int(view_of[link.src]), int(view_of[link.dst]), link.bandwidth_gbps, link.latency_ns)
    return GroupView(topology=view, node_of=node_of)
