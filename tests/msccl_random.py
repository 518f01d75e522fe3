"""Random MSCCLang-shaped programs: a small compiler of random chunk operations to MSCCL-IR text.

MSCCLang programs are sequences of chunk operations (copy a chunk to another rank, reduce it
there, copy or reduce locally); the compiler appends each operation's steps to the
threadblocks the program names, in program order, and makes every step wait for the last
writer of what it reads and for the last writer and readers of what it writes (one ``depid``
per step, a run of ``nop`` steps before it for more). This does the same with random
operations: threadblock ``(peer, channel)`` of a rank sends to and receives from ``peer`` on
``channel``, as MSCCLang's threadblocks usually do, and local steps run on one of two peerless
threadblocks. Every threadblock therefore runs its steps in one global order, so the program
never deadlocks with buffered sends (it may with rendezvous sends).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from msccl_text import algo, gpu, nop, step, tb


@dataclass
class _Threadblock:
    id: int
    send: int = -1
    recv: int = -1
    chan: int = 0
    steps: list[tuple] = field(default_factory=list)  # (type, src, dst, cnt, deps)
    length: int = 0  # steps in the XML so far, nops included


class _Rank:
    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.tbs: dict[tuple, _Threadblock] = {}
        self.writer: dict[tuple[str, int], tuple[int, int]] = {}
        self.readers: dict[tuple[str, int], list[tuple[int, int]]] = {}
        self.hasdep: set[tuple[int, int]] = set()

    def threadblock(self, key: tuple, chan: int) -> _Threadblock:
        if key not in self.tbs:
            self.tbs[key] = _Threadblock(len(self.tbs), chan=chan)
        return self.tbs[key]

    def add(self, block: _Threadblock, type_: str, src: tuple[str, int], dst: tuple[str, int], cnt: int, reads, writes) -> None:
        """Append a step that reads slots ``reads`` and writes ``writes``, with MSCCLang's dependencies."""
        deps: set[tuple[int, int]] = set()
        for slot in reads + writes:
            if slot in self.writer:
                deps.add(self.writer[slot])
        for slot in writes:
            deps.update(self.readers.get(slot, ()))
        deps = sorted(d for d in deps if d[0] != block.id)
        self.hasdep.update(deps)
        index = block.length + max(0, len(deps) - 1)  # after its nops
        block.length = index + 1
        block.steps.append((type_, src, dst, cnt, deps))
        me = (block.id, index)
        for slot in reads:
            self.readers.setdefault(slot, []).append(me)
        for slot in writes:
            self.writer[slot] = me
            self.readers[slot] = []

    def xml(self, chunks: int, scratch: int) -> str:
        tbs = []
        for block in sorted(self.tbs.values(), key=lambda b: b.id):
            lines: list[str] = []
            for type_, src, dst, cnt, deps in block.steps:
                for dep in deps[:-1]:
                    lines.append(nop(len(lines), dep))
                s = len(lines)
                flag = int((block.id, s) in self.hasdep)
                lines.append(step(s, type_, src=f"{src[0]}{src[1]}", dst=f"{dst[0]}{dst[1]}", cnt=cnt, dep=deps[-1] if deps else (-1, -1), hasdep=flag))
            tbs.append(tb(block.id, block.send, block.recv, block.chan, *lines))
        return gpu(self.rank, chunks, chunks, scratch, *tbs)


def random_program(seed: int, *, ranks: int, channels: int, operations: int, chunks: int = 3, scratch: int = 3) -> str:
    """The MSCCL-IR text of a ring of copies (every rank takes part), then ``operations``
    random chunk operations (a ``custom`` collective of ``ranks >= 2``)."""
    rng = random.Random(seed)
    state = [_Rank(r) for r in range(ranks)]
    sizes = {"i": chunks, "o": chunks, "s": scratch}

    def slot(buffers: str, cnt: int) -> tuple[str, int]:
        buffer = rng.choice(buffers)
        return buffer, rng.randrange(sizes[buffer] - cnt + 1)

    def span(ref: tuple[str, int], cnt: int) -> list[tuple[str, int]]:
        return [(ref[0], ref[1] + k) for k in range(cnt)]

    for n in range(ranks + operations):
        cnt = rng.choice((1, 1, 2))
        if n < ranks or rng.random() < 0.65:  # copy a chunk to another rank (reduced there, sometimes)
            a, b = (n, (n + 1) % ranks) if n < ranks else rng.sample(range(ranks), 2)
            chan = rng.randrange(channels)
            sender = state[a].threadblock((b, chan), chan)
            receiver = state[b].threadblock((a, chan), chan)
            sender.send, receiver.recv = b, a
            src, dst = slot("io", cnt), slot("os", cnt)
            state[a].add(sender, "s", src, dst, cnt, span(src, cnt), [])
            if rng.random() < 0.3:
                state[b].add(receiver, "rrc", dst, dst, cnt, span(dst, cnt), span(dst, cnt))
            else:
                state[b].add(receiver, "r", src, dst, cnt, [], span(dst, cnt))
        else:  # a local copy or reduction on disjoint slots
            r = rng.randrange(ranks)
            src, dst = slot("ios", cnt), slot("os", cnt)
            if src[0] == dst[0] and abs(src[1] - dst[1]) < cnt:
                continue
            which = rng.randrange(2)
            block = state[r].threadblock(("local", which), which % channels)
            type_ = rng.choice(("cpy", "re"))
            reads = span(src, cnt) + (span(dst, cnt) if type_ == "re" else [])
            state[r].add(block, type_, src, dst, cnt, reads, span(dst, cnt))
    text = algo("custom", ranks, chunks, *(s.xml(chunks, scratch) for s in state), name=f"random-{seed}")
    return text.replace('nchannels="1"', f'nchannels="{channels}"', 1)
