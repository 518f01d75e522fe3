"""Structural checks of an MSCCL-IR program, each error pointing at its XML line.

:func:`check_program` raises on what makes a program meaningless (ids, peers, buffers,
dependencies on steps that do not exist) and returns warnings for what the MSCCL runtime would
reject or hang on although the algorithm itself is well defined (its limits; a dependency on a
step whose ``hasdep`` is 0). Message matching is checked where messages are paired
(:mod:`.lower`).

>>> from chakra_collectives.converters.msccl.program import Gpu, Program, Step, StepType, Threadblock
>>> tb = Threadblock(id=0, send=1, steps=[Step(s=0, type=StepType.SEND, srcbuf="i", srcoff=0, cnt=1)])
>>> program = Program(name="", coll="custom", ngpus=2, nchunksperloop=1, nchannels=1, inplace=False,
...                   gpus=[Gpu(id=0, i_chunks=1, o_chunks=0, s_chunks=0, threadblocks=[tb]),
...                         Gpu(id=1, i_chunks=0, o_chunks=1, s_chunks=0)])
>>> check_program(program)
[]
>>> tb.steps[0].srcoff = 1
>>> check_program(program, "a.xml")
Traceback (most recent call last):
...
chakra_collectives.errors.AlgorithmError: a.xml: gpu 0 tb 0 step 0 (s): reads i[1:2] beyond the 1 chunks of gpu 0's input buffer (i_chunks=1)
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from chakra_collectives.errors import AlgorithmError, InputError, LimitError
from chakra_collectives.limits import check_npus
from chakra_collectives.converters.msccl.program import Program, Step, StepType, Threadblock

MAX_STEPS_PER_TB = 64
"""MSCCL_MAX_NUM_STEPS of msccl-executor-nccl."""
MAX_CNT = 72
"""A step's ``cnt`` must stay below this (runtime limit)."""
MAX_TBS_PER_CHANNEL = 32
MAX_CHANNELS = 32

_BUFFER_NAMES = {"i": "input", "o": "output", "s": "scratch"}


def where(gpu: int, tb: Threadblock, step: Step) -> str:
    """``gpu 0 tb 1 step 3 (rrc)``: how messages name a step."""
    return f"gpu {gpu} tb {tb.id} step {step.s} ({step.type.value})"


def located(message: str, path: str | Path | None, line: int = 0) -> str:
    """``path:line: message`` (the form of the tool's errors), for warnings.

    >>> located("cnt=80", "a.xml", 12), located("cnt=80", None, 0)
    ('a.xml:12: cnt=80', 'cnt=80')
    """
    return str(InputError(message, path=path, line=line or None))


def check_program(program: Program, path: str | Path | None = None) -> list[str]:
    """Raise on a structurally broken program; return runtime-limit warnings (one line each)."""
    warnings: list[str] = []

    def fail(message: str, line: int, error=AlgorithmError) -> None:
        raise error(message, path=path, line=line or None)

    def warn(message: str, line: int = 0) -> None:
        warnings.append(located(message, path, line))

    if program.ngpus < 1:
        fail(f"ngpus={program.ngpus}: an algorithm needs at least one GPU", program.line, InputError)
    if program.nchunksperloop < 1:
        fail(f"nchunksperloop={program.nchunksperloop} must be positive", program.line, InputError)
    try:
        check_npus(program.ngpus, "ngpus")
    except LimitError as error:
        raise LimitError(str(error), path=path, line=program.line or None) from None
    seen: dict[int, int] = {}
    for gpu in program.gpus:
        if not 0 <= gpu.id < program.ngpus:
            fail(f"gpu id {gpu.id} outside 0..{program.ngpus - 1} (ngpus={program.ngpus})", gpu.line)
        if gpu.id in seen:
            fail(f"gpu id {gpu.id} appears twice (first at line {seen[gpu.id]})", gpu.line)
        seen[gpu.id] = gpu.line
        for name in ("i_chunks", "o_chunks", "s_chunks"):
            if getattr(gpu, name) < 0:
                fail(f"gpu {gpu.id}: {name}={getattr(gpu, name)} is negative", gpu.line)
    if len(seen) < program.ngpus:  # the first id without a <gpu> is at most len(seen)
        missing = next(g for g in range(program.ngpus) if g not in seen)
        fail(f"ngpus={program.ngpus} but no <gpu> with id {missing}", program.line)

    for gpu in program.gpus:
        _check_threadblocks(program, gpu, fail)
        sizes = {"i": gpu.i_chunks, "o": gpu.o_chunks, "s": gpu.s_chunks}
        tbs = {tb.id: tb for tb in gpu.threadblocks}
        for tb in gpu.threadblocks:
            for index, step in enumerate(tb.steps):
                _check_step(gpu.id, tb, index, step, sizes, tbs, fail, warn)
    return warnings + limit_warnings(program, path)


def limit_warnings(program: Program, path: str | Path | None = None) -> list[str]:
    """Where ``program`` exceeds the MSCCL runtime's limits (steps per threadblock, cnt,
    threadblocks per channel, channels), one line each."""
    warnings: list[str] = []
    channels: set[int] = set()
    for gpu in program.gpus:
        per_channel = Counter(tb.chan for tb in gpu.threadblocks)
        channels.update(per_channel)
        for chan, count in sorted(per_channel.items()):
            if count > MAX_TBS_PER_CHANNEL:
                message = f"gpu {gpu.id}: {count} threadblocks on channel {chan} (the MSCCL runtime allows {MAX_TBS_PER_CHANNEL})"
                warnings.append(located(message, path, gpu.line))
        for tb in gpu.threadblocks:
            if len(tb.steps) > MAX_STEPS_PER_TB:
                message = f"gpu {gpu.id} tb {tb.id} has {len(tb.steps)} steps (the MSCCL runtime allows {MAX_STEPS_PER_TB} per threadblock)"
                warnings.append(located(message, path, tb.line))
            for step in tb.steps:
                if step.cnt >= MAX_CNT:
                    message = f"{where(gpu.id, tb, step)}: cnt={step.cnt} (the MSCCL runtime requires cnt < {MAX_CNT})"
                    warnings.append(located(message, path, step.line))
    if channels and max(channels) + 1 > MAX_CHANNELS:
        warnings.append(located(f"{max(channels) + 1} channels (the MSCCL runtime allows {MAX_CHANNELS})", path, program.line))
    return warnings


def _check_threadblocks(program: Program, gpu, fail) -> None:
    ids: dict[int, int] = {}
    connections: dict[tuple[str, int, int], Threadblock] = {}
    for tb in gpu.threadblocks:
        if tb.id in ids:
            fail(f"gpu {gpu.id}: tb id {tb.id} appears twice (first at line {ids[tb.id]})", tb.line)
        ids[tb.id] = tb.line
        for role in ("send", "recv"):
            peer = getattr(tb, role)
            if peer == -1:
                continue
            if not 0 <= peer < program.ngpus:
                fail(f"gpu {gpu.id} tb {tb.id}: {role}={peer} is not a GPU (0..{program.ngpus - 1}, or -1)", tb.line)
            if peer == gpu.id:
                fail(f"gpu {gpu.id} tb {tb.id}: {role}={peer} is the GPU itself", tb.line)
            key = (role, peer, tb.chan)
            other = connections.get(key)
            if other is not None:
                fail(
                    f"gpu {gpu.id} tb {tb.id}: tb {other.id} (line {other.line}) already has {role}={peer} on channel "
                    f"{tb.chan}; a connection belongs to one threadblock",
                    tb.line,
                )
            connections[key] = tb
        if tb.chan < 0:
            fail(f"gpu {gpu.id} tb {tb.id}: chan={tb.chan} is negative", tb.line)
    gaps = [i for i in range(len(ids)) if i not in ids]
    if gaps:
        fail(f"gpu {gpu.id}: tb ids must be 0..{len(ids) - 1} without gaps, but {gaps[0]} is missing", gpu.line)


def _check_step(gpu: int, tb: Threadblock, index: int, step: Step, sizes, tbs, fail, warn) -> None:
    kind = step.type
    if step.s != index:
        fail(f"gpu {gpu} tb {tb.id}: step s={step.s} where s={index} was expected (steps are numbered 0, 1, 2... in order)", step.line)
    if kind is StepType.NOP:
        if step.depid == -1:
            warn(f"{where(gpu, tb, step)}: nop without a dependency does nothing", step.line)
    else:
        if step.cnt < 1:
            fail(f"{where(gpu, tb, step)}: cnt={step.cnt} must be at least 1", step.line)
    if kind.sends and tb.send < 0:
        fail(f"{where(gpu, tb, step)}: sends, but tb {tb.id} has no send peer (send=-1)", step.line)
    if kind.receives and tb.recv < 0:
        fail(f"{where(gpu, tb, step)}: receives, but tb {tb.id} has no receive peer (recv=-1)", step.line)
    for used, side, buf, off, verb in (
        (kind.reads_src, "src", step.srcbuf, step.srcoff, "reads"),
        (kind.stores, "dst", step.dstbuf, step.dstoff, "writes"),
    ):
        if not used:
            continue
        size = sizes[buf]
        if off < 0 or off + step.cnt > size:
            fail(
                f"{where(gpu, tb, step)}: {verb} {buf}[{off}:{off + step.cnt}] beyond the {size} chunks of gpu {gpu}'s "
                f"{_BUFFER_NAMES[buf]} buffer ({buf}_chunks={size})",
                step.line,
            )
    if step.depid == -1 and step.deps == -1:
        return
    target_tb = tbs.get(step.depid)
    if target_tb is None:
        fail(f"{where(gpu, tb, step)}: depends on tb {step.depid}, which gpu {gpu} does not have (tb ids 0..{len(tbs) - 1})", step.line)
    if not 0 <= step.deps < len(target_tb.steps):
        fail(
            f"{where(gpu, tb, step)}: depends on step {step.deps} of tb {step.depid}, which has only {len(target_tb.steps)} steps",
            step.line,
        )
    target = target_tb.steps[step.deps]
    if not target.hasdep:
        warn(
            f"{where(gpu, tb, step)}: depends on tb {step.depid} step {step.deps} (line {target.line}), whose hasdep=0; "
            "the MSCCL runtime publishes completion only for hasdep=1 steps and would wait forever",
            step.line,
        )


__all__ = ["MAX_CHANNELS", "MAX_CNT", "MAX_STEPS_PER_TB", "MAX_TBS_PER_CHANNEL", "check_program", "limit_warnings", "located", "where"]
