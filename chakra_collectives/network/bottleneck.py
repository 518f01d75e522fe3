"""What limited a timed collective: its busiest link, and what that link spent its time on.

An algorithm's efficiency (lower bound / predicted time) says how far it is from what any
algorithm could do, not why. The busiest link of the run answers most of the why:

* **latency-bound** -- a large share of the time its messages hold the link is the link's
  latency (many small messages: chunks too small, or too few of them merged into one message);
* **dependency-bound** -- even the busiest link idles a good part of the run (the schedule
  waits on its dependencies or leaves links unused);
* **bandwidth-bound** -- the busiest link is busy nearly all the time moving bytes: only a
  schedule that moves fewer bytes across it (or a better network) is faster.

>>> from chakra_collectives.ir import Collective
>>> from chakra_collectives.network.collective import simulate_collective
>>> from chakra_collectives.synth.baselines import ring
>>> from chakra_collectives.topology import ring as ring_topology
>>> timing = simulate_collective(ring(Collective.ALL_GATHER, 4, size_bytes=2**10), ring_topology(4))
>>> found = busiest_link(timing)
>>> found.verdict, found.messages, round(found.latency_fraction, 2)     # 256-byte messages
('latency-bound', 3, 0.99)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from chakra_collectives.network.collective import CollectiveTiming
    from chakra_collectives.network.engine import LinkUse
    from chakra_collectives.network.model import NetworkModel

LATENCY_BOUND = 0.2
"""Share of a link's message time spent on latency from which a run is called latency-bound."""

DEPENDENCY_BOUND = 0.8
"""Busy share of the run below which the busiest link is called idle (dependency-bound)."""


@dataclass(frozen=True)
class Bottleneck:
    """The busiest link of a timed run and how it spent the run."""

    src: int
    dst: int
    busy_fraction: float
    """Time the link was busy over the run's makespan."""
    latency_fraction: float
    """Of the time its messages took on it (``latency + bytes / bandwidth`` each), the latency's share."""
    messages: int
    bytes_per_message: float

    @property
    def verdict(self) -> str:
        """``latency-bound``, ``dependency-bound`` or ``bandwidth-bound`` (see the module docstring)."""
        if self.latency_fraction >= LATENCY_BOUND:
            return "latency-bound"
        if self.busy_fraction < DEPENDENCY_BOUND:
            return "dependency-bound"
        return "bandwidth-bound"

    def describe(self) -> str:
        """One line for a summary: the verdict, then the busiest link's figures."""
        from chakra_collectives.units import format_size

        advice = {
            "latency-bound": "; fewer, larger messages would help (fewer chunks per NPU, or merged chunks)",
            "dependency-bound": "; the schedule, not the links, sets the time",
            "bandwidth-bound": "; its load sets the time",
        }[self.verdict]
        return (
            f"{self.verdict}: busiest link {self.src}->{self.dst} busy {self.busy_fraction:.0%} of the time, "
            f"{self.latency_fraction:.0%} of it latency ({self.messages:,} messages of {format_size(self.bytes_per_message)}){advice}"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "link": [self.src, self.dst],
            "busy_fraction": self.busy_fraction,
            "latency_fraction": self.latency_fraction,
            "messages": self.messages,
            "bytes_per_message": self.bytes_per_message,
        }


def busiest_link(timing: "CollectiveTiming") -> Bottleneck | None:
    """The :class:`Bottleneck` of a timed run (``None`` when no message crossed a link)."""
    return busiest_of(timing.links, timing.model, timing.time_ns)


def busiest_of(links: "LinkUse", model: "NetworkModel", time_ns: float) -> Bottleneck | None:
    """The :class:`Bottleneck` of a run of ``time_ns`` whose links were used as ``links`` says
    (``None`` when no message crossed a link): what :func:`busiest_link` reads from a timed run,
    for callers that know the link use without one."""
    if not len(links.busy_ns) or not np.any(links.messages) or time_ns <= 0:
        return None
    link = int(np.argmax(links.busy_ns))
    messages = int(links.messages[link])
    nbytes = float(links.bytes[link])
    latency = messages * float(model.link_latency[link])
    serialization = nbytes / float(model.link_rate[link])
    endpoint = model.topology.links[link]
    return Bottleneck(
        src=endpoint.src,
        dst=endpoint.dst,
        busy_fraction=min(float(links.busy_ns[link]) / time_ns, 1.0),
        latency_fraction=latency / (latency + serialization) if latency + serialization > 0 else 0.0,
        messages=messages,
        bytes_per_message=nbytes / messages,
    )


__all__ = ["Bottleneck", "busiest_link", "busiest_of"]
