"""Verify that an algorithm is well-formed, cannot deadlock and computes its collective.

Stages, each reported as passed / failed / skipped:

1. ``structure``  -- operations well-formed, chunk references inside buffers, deps acyclic;
2. ``matching``   -- every SEND pairs with one RECV on ``(src, dst, tag)``, FIFO, equal size;
3. ``deadlock``   -- the dependency + message graph runs to completion under eager sends
   (ASTRA-sim's semantics; required by default) and under rendezvous sends (reported; required
   with ``send_semantics=("eager", "rendezvous")``), see :mod:`~chakra_collectives.ir.execution`;
4. ``semantics``  -- symbolic execution proves the collective's postcondition, or gives a
   counterexample (see :mod:`~chakra_collectives.verify.semantics`), and a happens-before
   check proves no two unordered operations touch one slot with a write (see
   :mod:`~chakra_collectives.verify.races`), so the proof holds for every execution order.
   Skipped for custom collectives and for files without chunk identity.

A failed stage stops the stages that need it.

>>> from chakra_collectives.ir import Collective
>>> from chakra_collectives.synth.baselines import ring
>>> report = verify_algorithm(ring(Collective.ALL_REDUCE, 4, size_bytes=2**20))
>>> [(c.name, c.status.value) for c in report.checks]
[('structure', 'passed'), ('matching', 'passed'), ('deadlock', 'passed'), ('semantics', 'passed')]
"""

from __future__ import annotations

from dataclasses import replace

from chakra_collectives.errors import InputError
from chakra_collectives.ir import Collective, CollectiveAlgorithm, OpKind
from chakra_collectives.ir.execution import describe_stuck, execute
from chakra_collectives.ir.matching import match_messages
from chakra_collectives.verify.races import find_race
from chakra_collectives.verify.report import Check, Report, Status
from chakra_collectives.verify.semantics import first_difference, output_view, postcondition_violation, run_symbolically
from chakra_collectives.ir.structure import structural_problems

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
    send_semantics: tuple[str, ...] = ("eager",),
) -> Report:
    """Run every stage on ``algo`` (claiming ``collective`` instead of its own, if given).

    ``send_semantics`` lists the send semantics under which the algorithm must not deadlock;
    the others are checked too and reported as notes. The default, eager, is ASTRA-sim's.
    """
    unknown = set(send_semantics) - set(SEMANTICS)
    if unknown:
        raise InputError(f"unknown send semantics {sorted(unknown)} (valid: {', '.join(SEMANTICS)})")
    if collective is not None and collective is not algo.collective:
        algo = replace(algo, collective=collective)
    report = Report(subject=subject or algo.describe())
    n_comm = int((algo.ops.kind <= OpKind.RECV).sum())

    problems = structural_problems(algo)
    if problems:
        report.add(Check("structure", Status.FAILED, problems[0], problems[1:]))
        _skip_rest(report, "structure")
        return report
    report.add(Check("structure", Status.PASSED, f"{algo.num_ranks} ranks, {algo.num_ops} operations, acyclic dependencies"))

    matching = match_messages(algo)
    if matching.problems:
        report.add(Check("matching", Status.FAILED, matching.problems[0], matching.problems[1:]))
        _skip_rest(report, "matching")
        return report
    report.add(Check("matching", Status.PASSED, f"{n_comm // 2} messages, every SEND pairs with one RECV of equal size"))

    needs_semantics = algo.collective is not Collective.CUSTOM and algo.has_chunk_identity
    first_run = run_symbolically(algo, matching.partner, order="fifo") if needs_semantics else None
    finishes: dict[str, bool] = {}
    notes: list[str] = []
    failure: list[str] = []
    for semantics in SEMANTICS:
        if semantics == "eager" and first_run is not None:
            execution = first_run.execution
        else:
            execution = execute(algo, matching.partner, semantics=semantics)
        finishes[semantics] = execution.finished
        if not execution.finished:
            lines = describe_stuck(algo, matching.partner, execution, semantics)
            if semantics in send_semantics and not failure:
                failure = [f"deadlock with {semantics} sends: {lines[0]}", *lines[1:]]
            else:
                notes.append(f"note: with {semantics} sends it would deadlock ({_SEMANTICS_MEANING[semantics]}): {lines[0]}")
                notes += ["  " + line for line in lines[1:]]
    if failure:
        report.add(Check("deadlock", Status.FAILED, failure[0], failure[1:] + notes, {"finishes": finishes}))
    else:
        held = " and ".join(s for s in SEMANTICS if finishes[s])
        report.add(Check("deadlock", Status.PASSED, f"runs to completion with {held} sends", notes, {"finishes": finishes}))
    if not finishes["eager"]:
        report.add(Check("semantics", Status.SKIPPED, "not checked: the algorithm does not run to completion"))
        return report

    if algo.collective is Collective.CUSTOM:
        report.add(Check("semantics", Status.SKIPPED, "custom collective: no postcondition to prove (structure and deadlock only)"))
        return report
    if first_run is None:
        report.add(Check("semantics", Status.SKIPPED, "no chunk identity in the files (bytes only): cannot prove what is computed"))
        return report
    race_check = find_race(algo, matching.partner, first_run.execution.order)
    orders = "every execution order (no data races)"
    race = race_check.race
    second_outputs = None
    if not race_check.complete:
        # ordering paths too long to check exactly: compare two extreme valid orders instead
        second_run = run_symbolically(algo, matching.partner, order="lifo")
        second_outputs = output_view(algo, second_run.storage)
        orders = "two extreme execution orders (the exact race check exceeded its budget)"
    fault = first_run.fault
    first_outputs = output_view(algo, first_run.storage)
    violation = postcondition_violation(algo, first_outputs)
    if second_outputs is not None:
        fault = fault or second_run.fault
        violation = violation or postcondition_violation(algo, second_outputs)
        difference = first_difference(first_outputs, second_outputs)
        race = race or (difference and f"{difference}")
    if fault or violation or race:
        summary = violation or (f"data race: {race}" if race else fault)
        details = [d for d in (fault and f"first fault: {fault}", race and violation and f"data race: {race}") if d]
        report.add(Check("semantics", Status.FAILED, summary, details))
    else:
        report.add(Check("semantics", Status.PASSED, f"computes {algo.collective.value} (postcondition proved on every output slot, for {orders})"))
    return report


def _skip_rest(report: Report, failed: str) -> None:
    for name in ("matching", "deadlock", "semantics"):
        if report.check(name) is None and name != failed:
            report.add(Check(name, Status.SKIPPED, f"not checked: {failed} failed"))


__all__ = ["Check", "Report", "Status", "verify_algorithm"]
