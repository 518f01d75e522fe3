"""Verify that an algorithm is well-formed, cannot deadlock and computes its collective.

Stages, each reported as passed / failed / skipped:

1. ``structure``  -- operations well-formed, chunk references inside buffers, deps acyclic;
2. ``matching``   -- every SEND pairs with one RECV on ``(src, dst, tag)``, FIFO, equal size;
3. ``deadlock``   -- the dependency + message graph runs to completion under eager sends
   (ASTRA-sim's semantics; required by default) and under rendezvous sends (reported; required
   with ``send_semantics=("eager", "rendezvous")``), see :mod:`~chakra_collectives.ir.execution`;
4. ``semantics``  -- symbolic execution proves the collective's postcondition, or gives a
   counterexample (see :mod:`~chakra_collectives.verify.semantics`), and an exact
   happens-before check proves no two unordered operations touch one slot with a write (see
   :mod:`~chakra_collectives.verify.races`), so the proof holds for every execution order.
   Not needed for custom collectives; files without chunk identity cannot be proved (the
   verdict is then ``unproved``, see :class:`~chakra_collectives.verify.report.Report`).

A failed stage stops the stages that need it.

>>> from chakra_collectives.ir import Collective
>>> from chakra_collectives.synth.baselines import ring
>>> report = verify_algorithm(ring(Collective.ALL_REDUCE, 4, size_bytes=2**20))
>>> [(c.name, c.status.value) for c in report.checks]
[('structure', 'passed'), ('matching', 'passed'), ('deadlock', 'passed'), ('semantics', 'passed')]
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from chakra_collectives import progress
from chakra_collectives.errors import InputError
from chakra_collectives.ir import Buffer, Collective, CollectiveAlgorithm, OpKind
from chakra_collectives.ir.execution import describe_stuck, execute, finishes
from chakra_collectives.ir.matching import match_messages
from chakra_collectives.ir.structure import structural_problems
from chakra_collectives.resources import require
from chakra_collectives.verify.footprint import symbolic_run_estimate, verification_estimate
from chakra_collectives.verify.races import find_race
from chakra_collectives.verify.report import EXIT_UNPROVED, Check, Report, Status, Verdict
from chakra_collectives.verify.semantics import SemanticRun, run_moves, run_symbolically

SEMANTICS = ("eager", "rendezvous")
_SEMANTICS_MEANING = {
    "eager": "a send completes without waiting for its receive, as in ASTRA-sim",
    "rendezvous": "a send waits until its receive is posted, as MPI_Ssend or a runtime with bounded buffers",
}


def verify_algorithm(
    algo: CollectiveAlgorithm,
    *,
    subject: str = "",
    collective: Collective | None = None,
    root: int | None = None,
    send_semantics: tuple[str, ...] = ("eager",),
) -> Report:
    """Run every stage on ``algo``, holding it to ``collective`` (default: the one it claims).

    ``root`` states the root of a broadcast / reduce (default: the algorithm's own); a rooted
    collective without one, or a root that is not a rank, is an
    :class:`~chakra_collectives.errors.InputError`. ``send_semantics`` lists the send semantics
    under which the algorithm must not deadlock; the others are checked too and reported as
    notes. The default, eager, is ASTRA-sim's. An algorithm whose verification would not fit the
    memory limit (:func:`~chakra_collectives.verify.footprint.verification_estimate`) is refused
    with a :class:`~chakra_collectives.errors.LimitError` before any stage runs.
    """
    unknown = set(send_semantics) - set(SEMANTICS)
    if unknown:
        raise InputError(f"unknown send semantics {sorted(unknown)} (valid: {', '.join(SEMANTICS)})")
    if collective is not None and collective is not algo.collective:
        algo = replace(algo, collective=collective)
    if root is not None and root != algo.root:
        algo = replace(algo, root=root)
    if algo.collective.has_root:
        if algo.root is None:
            raise InputError(f"{algo.collective.value} has a root rank, and neither the files nor the call name it: give --root R")
        if not 0 <= algo.root < algo.num_ranks:
            raise InputError(f"root {algo.root} is not a rank of this {algo.num_ranks}-rank algorithm (0..{algo.num_ranks - 1})")
    require(verification_estimate(algo))  # too large for the memory limit: refused before anything is laid out
    report = Report(
        subject=subject or algo.describe(),
        collective=algo.collective.value,
        num_ranks=algo.num_ranks,
        chunk_count=algo.chunk_count,
        root=algo.root if algo.collective.has_root else None,
        inplace=algo.inplace,
        send_semantics=tuple(s for s in SEMANTICS if s in send_semantics),
    )
    with progress.task("verify"):
        _run_stages(algo, report, send_semantics)
    return report


def _run_stages(algo: CollectiveAlgorithm, report: Report, send_semantics: tuple[str, ...]) -> None:
    n_comm = int((algo.ops.kind <= OpKind.RECV).sum())
    with progress.task("structure"):
        problems = structural_problems(algo)
    if problems:
        report.add(Check("structure", Status.FAILED, problems[0], problems[1:]))
        _skip_rest(report, "structure")
        return
    report.add(Check("structure", Status.PASSED, f"{algo.num_ranks} ranks, {algo.num_ops} operations, acyclic dependencies"))

    with progress.task("matching"):
        matching = match_messages(algo)
    if matching.problems:
        report.add(Check("matching", Status.FAILED, matching.problems[0], matching.problems[1:]))
        _skip_rest(report, "matching")
        return
    report.add(Check("matching", Status.PASSED, f"{n_comm // 2} messages, every SEND pairs with one RECV of equal size"))

    misfit = None if algo.collective is Collective.CUSTOM else claim_misfit(algo)
    needs_semantics = algo.collective is not Collective.CUSTOM and algo.has_chunk_identity and misfit is None
    with progress.task("symbolic execution"):
        moved = run_moves(algo, matching.partner) if needs_semantics else None  # numpy, when every reduction is sound
        first_run = moved or (_run_in_python(algo, matching.partner) if needs_semantics else None)
    finished: dict[str, bool] = {}
    notes: list[str] = []
    failure: list[str] = []
    for semantics in SEMANTICS:
        if semantics == "eager" and first_run is not None:
            execution = first_run.execution
        else:
            with progress.task(f"deadlock, {semantics} sends"):
                if finishes(algo, matching.partner, semantics=semantics):  # decided with numpy: no order needed
                    finished[semantics] = True
                    continue
                execution = execute(algo, matching.partner, semantics=semantics)  # where it gets stuck
        finished[semantics] = execution.finished
        if not execution.finished:
            lines = describe_stuck(algo, matching.partner, execution, semantics)
            if semantics in send_semantics and not failure:
                failure = [f"deadlock with {semantics} sends: {lines[0]}", *lines[1:]]
            else:
                notes.append(f"note: with {semantics} sends it would deadlock ({_SEMANTICS_MEANING[semantics]}): {lines[0]}")
                notes += ["  " + line for line in lines[1:]]
    if failure:
        report.add(Check("deadlock", Status.FAILED, failure[0], failure[1:] + notes, {"finishes": finished}))
    else:
        held = " and ".join(s for s in SEMANTICS if finished[s])
        report.add(Check("deadlock", Status.PASSED, f"runs to completion with {held} sends", notes, {"finishes": finished}))
    if not finished["eager"]:
        report.add(Check("semantics", Status.SKIPPED, "cannot prove what the algorithm computes: it does not run to completion with eager sends", required=not failure))
        return

    if algo.collective is Collective.CUSTOM:
        report.add(Check("semantics", Status.SKIPPED, "custom collective: no postcondition to prove (structure and deadlock only)"))
        return
    if misfit is not None:
        report.add(Check("semantics", Status.FAILED, misfit))
        return
    if first_run is None:
        report.add(Check("semantics", Status.SKIPPED, "cannot prove what the files compute: they carry no chunk identity (bytes only)", required=True))
        return
    with progress.task("data races"):
        race = find_race(algo, matching.partner, first_run.execution.order)
    if race and moved is not None:  # what the fifo order computes is reported, whichever order found the race
        first_run = _run_in_python(algo, matching.partner)
    fault = first_run.fault
    violation = first_run.violation(algo)
    if fault or violation or race:
        summary = violation or (f"data race: {race}" if race else fault)
        details = [d for d in (fault and f"first fault: {fault}", race and violation and f"data race: {race}") if d]
        report.add(Check("semantics", Status.FAILED, summary, details))
    else:
        report.add(
            Check("semantics", Status.PASSED, f"computes {algo.collective.value} (postcondition proved on every output slot, for every execution order: no data races)")
        )


def _run_in_python(algo: CollectiveAlgorithm, partner: np.ndarray) -> SemanticRun:
    """The fifo symbolic run, slot by slot, which names the first fault; refused up front when
    its tuple per slot would not fit the memory limit (:func:`symbolic_run_estimate`)."""
    require(symbolic_run_estimate(algo))
    return run_symbolically(algo, partner, order="fifo")


def claim_misfit(algo: CollectiveAlgorithm) -> str | None:
    """Why the files cannot be the collective they are held to, from buffer shapes alone (``None``: they can).

    The collective's input and output views must fit the storage; in particular an in-place
    collective aliases one buffer onto another, and every operation must then still land
    inside it (an all-reduce's input, read as an in-place all-gather's, reaches past the
    output).

    >>> from chakra_collectives.synth.baselines import ring
    >>> algo = replace(ring(Collective.ALL_REDUCE, 4, size_bytes=4096), inplace=True)
    >>> claim_misfit(algo) is None
    True
    >>> claim_misfit(replace(algo, collective=Collective.ALL_GATHER))
    'rank 1: node 1: reads input[3:4], which an in-place all-gather keeps at output[4:5], beyond its 4 chunks: the files are not an in-place all-gather'
    """
    ops = algo.ops
    declared = np.stack([algo.input_chunks, algo.output_chunks, algo.scratch_chunks]).astype(np.int64)
    storage = declared.copy()
    storage[:2] = np.maximum(storage[:2], algo.chunk_count)  # the verifier's storage: at least one chunk per collective chunk
    for buf_col, off_col, verb in ((ops.src_buf, ops.src_off, "reads"), (ops.dst_buf, ops.dst_off, "writes")):
        has = (buf_col >= 0) & (ops.count > 0)
        if not np.any(has):
            continue
        rank = ops.rank[has].astype(np.int64)
        buf, off = algo.resolve(rank, buf_col[has], off_col[has])
        buf = np.broadcast_to(buf, rank.shape).astype(np.int64)
        off = np.broadcast_to(off, rank.shape).astype(np.int64)
        chosen = np.flatnonzero(has)
        op, start, length = ops.runs(chosen, off)  # every range of a several-range message, resolved
        _, own_start, _ = ops.runs(chosen, off_col[has])
        at = np.searchsorted(chosen, op)  # each range's operation among those chosen
        over = np.flatnonzero(start + length > storage[buf[at], rank[at]])
        if len(over):
            r = int(over[0])
            i, j = int(op[r]), int(at[r])
            names = ("input", "output", "scratch")
            what = f"in-place {algo.collective.value}" if algo.inplace else algo.collective.value
            what = ("an " if what[0] in "aeiou" else "a ") + what
            count = int(length[r])
            return (
                f"rank {ops.rank[i]}: node {ops.node_id[i]}: {verb} {names[buf_col[i]]}[{own_start[r]}:{own_start[r] + count}], "
                f"which {what} keeps at {names[buf[j]]}[{start[r]}:{start[r] + count}], beyond its {storage[buf[j], rank[j]]} chunks: "
                f"the files are not {what}"
            )
    return None


def _skip_rest(report: Report, failed: str) -> None:
    for name in ("matching", "deadlock", "semantics"):
        if report.check(name) is None and name != failed:
            report.add(Check(name, Status.SKIPPED, f"not checked: {failed} failed"))


__all__ = ["EXIT_UNPROVED", "Check", "Report", "Status", "Verdict", "claim_misfit", "verify_algorithm"]
