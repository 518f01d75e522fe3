"""MSCCL-IR's own model: an ``<algo>`` of GPUs, their threadblocks and steps.

The XML reader and writer convert text to and from these objects; the importer lowers them to
the collective IR and the exporter builds them from it. Every object remembers the XML line it
came from (0 when it was built in memory), so errors can point at it.

>>> step = Step(s=0, type=StepType.RECV_REDUCE_COPY_SEND, srcbuf="i", srcoff=3, dstbuf="i", dstoff=3, cnt=1)
>>> step.type.receives, step.type.sends, step.type.reduces, step.type.stores
(True, True, True, True)
>>> StepType.parse("rrs").name
'RECV_REDUCE_SEND'
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from chakra_collectives.errors import InputError


class StepType(str, Enum):
    """The instructions of the MSCCL runtime (docs/msccl-ir.md, "Step types")."""

    SEND = "s"
    RECV = "r"
    RECV_COPY_SEND = "rcs"
    RECV_REDUCE_COPY = "rrc"
    RECV_REDUCE_SEND = "rrs"
    RECV_REDUCE_COPY_SEND = "rrcs"
    COPY = "cpy"
    REDUCE = "re"
    NOP = "nop"

    @classmethod
    def parse(cls, text: str) -> "StepType":
        try:
            return cls(text)
        except ValueError:
            valid = ", ".join(t.value for t in cls)
            raise InputError(f"unknown step type {text!r} (valid: {valid})") from None

    @property
    def sends(self) -> bool:
        """Sends data on the threadblock's send connection."""
        return self in _SENDING

    @property
    def receives(self) -> bool:
        """Takes data from the threadblock's receive connection."""
        return self in _RECEIVING

    @property
    def reduces(self) -> bool:
        """Combines the local ``src`` with data (received or local)."""
        return self in _REDUCING

    @property
    def stores(self) -> bool:
        """Writes its local ``dst`` (rrs and s do not)."""
        return self in _STORING

    @property
    def reads_src(self) -> bool:
        """Reads its local ``src`` (for r and rcs ``src`` names the sender's slot)."""
        return self in _READING


_SENDING = frozenset({StepType.SEND, StepType.RECV_COPY_SEND, StepType.RECV_REDUCE_SEND, StepType.RECV_REDUCE_COPY_SEND})
_RECEIVING = frozenset(
    {StepType.RECV, StepType.RECV_COPY_SEND, StepType.RECV_REDUCE_COPY, StepType.RECV_REDUCE_SEND, StepType.RECV_REDUCE_COPY_SEND}
)
_REDUCING = frozenset({StepType.RECV_REDUCE_COPY, StepType.RECV_REDUCE_SEND, StepType.RECV_REDUCE_COPY_SEND, StepType.REDUCE})
_STORING = frozenset(
    {StepType.RECV, StepType.RECV_COPY_SEND, StepType.RECV_REDUCE_COPY, StepType.RECV_REDUCE_COPY_SEND, StepType.COPY, StepType.REDUCE}
)
_READING = frozenset(
    {StepType.SEND, StepType.RECV_REDUCE_COPY, StepType.RECV_REDUCE_SEND, StepType.RECV_REDUCE_COPY_SEND, StepType.COPY, StepType.REDUCE}
)

BUFFER_LETTERS = ("i", "o", "s")
"""MSCCL's buffer names: input, output, scratch (the IR's Buffer 0, 1, 2)."""


@dataclass(slots=True)
class Step:
    """One ``<step>``: ``s`` is its index in the threadblock; offsets and ``cnt`` are in chunks.

    ``depid``/``deps`` name one step of another threadblock of the same GPU (-1: none);
    ``hasdep`` says some other step depends on this one.
    """

    s: int
    type: StepType
    srcbuf: str = "i"
    srcoff: int = -1
    dstbuf: str = "o"
    dstoff: int = -1
    cnt: int = 0
    depid: int = -1
    deps: int = -1
    hasdep: bool = False
    line: int = 0


@dataclass(slots=True)
class Threadblock:
    """One ``<tb>``: at most one send peer and one receive peer (-1: none) on channel ``chan``."""

    id: int
    send: int = -1
    recv: int = -1
    chan: int = 0
    steps: list[Step] = field(default_factory=list)
    line: int = 0


@dataclass(slots=True)
class Gpu:
    """One ``<gpu>``: a rank, its buffer sizes in chunks and its threadblocks."""

    id: int
    i_chunks: int
    o_chunks: int
    s_chunks: int
    threadblocks: list[Threadblock] = field(default_factory=list)
    line: int = 0


@dataclass(slots=True)
class Program:
    """One ``<algo>`` document.

    ``coll`` is the XML's label (``allreduce``, ``reduce_scatter``...); ``extra`` keeps
    attributes this model does not interpret (e.g. ``outofplace``, ``minBytes``), in order.
    """

    name: str
    coll: str
    ngpus: int
    nchunksperloop: int
    nchannels: int
    inplace: bool
    proto: str = "Simple"
    gpus: list[Gpu] = field(default_factory=list)
    extra: dict[str, str] = field(default_factory=dict)
    line: int = 0

    @property
    def num_steps(self) -> int:
        """Steps of every threadblock of every GPU, nops included."""
        return sum(len(tb.steps) for gpu in self.gpus for tb in gpu.threadblocks)

    def step_types(self) -> dict[str, int]:
        """How many steps of each type the program has (types that occur only)."""
        counts: dict[str, int] = {}
        for gpu in self.gpus:
            for tb in gpu.threadblocks:
                for step in tb.steps:
                    counts[step.type.value] = counts.get(step.type.value, 0) + 1
        return counts


__all__ = ["BUFFER_LETTERS", "Gpu", "Program", "Step", "StepType", "Threadblock"]
