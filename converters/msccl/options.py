"""How an algorithm is written as MSCCL-IR: one options object for lifting and writing.

>>> MscclOptions(proto="LL128").proto
'LL128'
>>> MscclOptions(proto="bogus")
Traceback (most recent call last):
...
chakra_collectives.errors.InputError: proto must be Simple, LL or LL128, not 'bogus'
"""

from __future__ import annotations

from dataclasses import dataclass

from chakra_collectives.errors import InputError

PROTOCOLS = ("Simple", "LL", "LL128")
"""The NCCL protocols an MSCCL-IR ``<algo proto=...>`` names."""


@dataclass(frozen=True)
class MscclOptions:
    """Options of :func:`~chakra_collectives.converters.msccl.write_msccl` (checked when made)."""

    fuse: bool = True
    """Merge receive chains into rcs/rrc/rrs/rrcs steps (fewer steps, the same operations when read back)."""
    fit_limits: bool = True
    """Spread messages over channels so threadblocks stay within the runtime's 64 steps and
    channels within its 32 threadblocks."""
    proto: str = "Simple"
    """The NCCL protocol: Simple, LL or LL128."""
    name: str | None = None
    """The ``<algo name=...>`` (default: the algorithm's own name)."""
    min_bytes: int = 0
    """Smallest call size (bytes) the runtime should use the algorithm for."""
    max_bytes: int = 0
    """Largest call size (bytes) the runtime should use it for; 0 = any."""
    allow_rendezvous_deadlock: bool = False
    """Write a program that deadlocks with rendezvous sends although the algorithm does not
    (a warning instead of an error)."""

    def __post_init__(self) -> None:
        if self.proto not in PROTOCOLS:
            raise InputError(f"proto must be {', '.join(PROTOCOLS[:-1])} or {PROTOCOLS[-1]}, not {self.proto!r}")
        if self.min_bytes < 0 or self.max_bytes < 0:
            raise InputError(f"min_bytes and max_bytes must not be negative, got {self.min_bytes} and {self.max_bytes}")


__all__ = ["MscclOptions", "PROTOCOLS"]
