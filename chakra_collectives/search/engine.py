"""Plan a search (every evaluation and what it needs) and run it on an executor, resumably.

An **evaluation** is one (topology, algorithm set, chunking, workload variant) at one NPU
count. Its key hashes everything that determines its result (the topology's spec or file
bytes, port bandwidth and latency, the algorithm names, chunks, the workload's parameters or
file bytes, the network model, the probe sizes), so rerunning a space skips exactly the
evaluations already in the results table and recomputes those whose inputs changed.

Tasks: per (topology, producer, collective, size, chunks) -- shared by every evaluation that
needs it -- one :func:`~chakra_collectives.search.tasks.produce_collective`, then its
:func:`~chakra_collectives.search.tasks.verify_collective` and
:func:`~chakra_collectives.search.tasks.probe_collective`; per evaluation one
:func:`~chakra_collectives.search.tasks.replay_workload` of its productions (beside their
verification and probes, not after them: a long row's chain is its synthesis and the longest
of the three) and one small :func:`~chakra_collectives.search.tasks.finish_row` that makes the
row. What uses a production runs before new syntheses start (higher priority), so rows reach
the table early; a production is released once its last evaluation has finished.

>>> import tempfile, pathlib
>>> from chakra_collectives.search.space import parse_space
>>> from chakra_collectives.search.executors import InProcess
>>> from chakra_collectives.search.table import ResultTable
>>> space = parse_space("npus: 8\\ntopologies: [ring:8, torus2d:2x4]\\nalgorithms: [ring, direct]\\nworkload: {kind: data-parallel, layers: 2}")
>>> out = pathlib.Path(tempfile.mkdtemp())
>>> plan = plan_search(space, out / "workloads")
>>> len(plan.evaluations), plan.synthesis_count()
(4, 4)
>>> run = run_search(plan, InProcess(), ResultTable(out / "results.parquet"))
>>> run.evaluated, run.already_done, run.lost
(4, 0, [])
>>> run_search(plan, InProcess(), ResultTable(out / "results.parquet")).already_done
4
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chakra_collectives import progress
from chakra_collectives.ir import Collective
from chakra_collectives.search.candidates import BuiltTopology, Skipped, build_choice, identity_key
from chakra_collectives.search.space import AlgorithmSet, SearchSpace
from chakra_collectives.search.table import ResultTable
from chakra_collectives.search.tasks import finish_row, probe_collective, produce_collective, replay_workload, verify_collective
from chakra_collectives.search.workloads import PreparedWorkload, prepare, workload_variants
from chakra_collectives.synth.registry import get

SEARCH_VERSION = 2
"""Part of every key: bump it when a change to the evaluation changes results."""


@dataclass(frozen=True)
class SynthesisNeed:
    """One collective to synthesize on one topology."""

    topology_key: str
    algorithm: str
    collective: Collective
    size_bytes: int
    chunks_per_npu: int

    @property
    def key(self) -> str:
        return identity_key([self.topology_key, self.algorithm, self.collective.value, self.size_bytes, self.chunks_per_npu])


@dataclass
class Evaluation:
    """One row of the results table to be."""

    key: str
    topology: BuiltTopology
    topology_key: str
    algorithms: AlgorithmSet
    chunks_per_npu: int
    workload: PreparedWorkload
    needs: list[SynthesisNeed]

    @property
    def npus(self) -> int:
        return self.topology.topology.num_npus

    @property
    def group(self) -> tuple[int, str]:
        """What evaluations are ranked against each other: same NPU count and workload."""
        return self.npus, self.workload.variant.label

    def meta(self, space: SearchSpace) -> dict[str, Any]:
        facts = self.topology.facts
        return {
            "key": self.key,
            "space": space.name,
            "num_npus": self.npus,
            "topology": self.topology.label,
            "candidate": self.topology.choice.entry,
            "topology_name": self.topology.topology.name,
            "family": self.topology.family,
            "algorithm": self.algorithms.label,
            "chunks_per_npu": self.chunks_per_npu,
            "workload": self.workload.variant.label,
            "diameter": facts.diameter,
            "num_links": facts.links,
            "num_switches": facts.switches,
            "ports_per_npu": facts.ports_per_npu,
            "cost": facts.cost,
            "bandwidth_scale": facts.bandwidth_scale,
            "probe_small_bytes": space.probe_sizes[0],
            "probe_large_bytes": space.probe_sizes[1],
        }


@dataclass
class SearchPlan:
    """Every evaluation of a space, and every candidate left out with its reason."""

    space: SearchSpace
    evaluations: list[Evaluation]
    skipped: list[Skipped]
    topologies: dict[str, BuiltTopology]
    workloads: list[PreparedWorkload]
    not_applicable: list[Skipped] = field(default_factory=list)
    """``topology / algorithm set`` pairs whose producer does not make a collective the workload
    needs, or does not apply to the topology (BFB on a switched one): not evaluated, not failed."""

    def synthesis_count(self) -> int:
        return len({need.key for e in self.evaluations for need in e.needs})

    def by_key(self) -> dict[str, Evaluation]:
        return {e.key: e for e in self.evaluations}


def plan_search(space: SearchSpace, workload_folder: Path) -> SearchPlan:
    """Build every topology candidate, write every workload variant, and list the evaluations.

    Raises :class:`InputError` for mistakes in the space (unknown families, a workload whose
    rank count differs from the NPU count); candidates that cannot be built or break a
    constraint are :class:`Skipped`. Reports its steps through :mod:`chakra_collectives.progress`.
    """
    with progress.task("plan"):
        return _plan(space, workload_folder)


def _plan(space: SearchSpace, workload_folder: Path) -> SearchPlan:
    skipped: list[Skipped] = []
    not_applicable: list[Skipped] = []
    topologies: dict[str, BuiltTopology] = {}
    by_npus: dict[int, list[tuple[str, BuiltTopology]]] = {}
    for npus in space.npus or (None,):
        for choice in space.topology_choices(npus):
            with progress.task(f"topology {choice.label}"):
                built = build_choice(choice, space, npus)
            if isinstance(built, Skipped):
                skipped.append(built)
                continue
            key = identity_key(built.identity)
            if key in topologies:
                skipped.append(Skipped(choice.label, npus, f"same topology as {topologies[key].label}", choice.line))
                continue
            topologies[key] = built
            by_npus.setdefault(built.topology.num_npus, []).append((key, built))
    variants = {npus: workload_variants(space, npus) for npus in by_npus}  # every mistake found before a file is written
    workloads: list[PreparedWorkload] = []
    evaluations: list[Evaluation] = []
    for npus, candidates in by_npus.items():
        for variant in variants[npus]:
            if isinstance(variant, Skipped):
                skipped.append(variant)
                continue
            with progress.task(f"workload {variant.label} ({npus} NPUs)"):
                prepared = prepare(variant, workload_folder)
            workloads.append(prepared)
            for topology_key, built in candidates:
                for algorithms in space.algorithms:
                    reason = _not_applicable(built, algorithms, prepared)
                    if reason is not None:
                        item = Skipped(f"{built.label} / {algorithms.label}", npus, reason, built.choice.line)
                        if item not in not_applicable:
                            not_applicable.append(item)
                        continue
                    for chunks in space.chunks_per_npu:
                        evaluations.append(_evaluation(space, built, topology_key, algorithms, chunks, prepared))
    return SearchPlan(space, evaluations, skipped, topologies, workloads, not_applicable)


def _not_applicable(built: BuiltTopology, algorithms: AlgorithmSet, prepared: PreparedWorkload) -> str | None:
    """Why ``algorithms`` cannot make a collective ``prepared`` needs on ``built`` (None: it can)."""
    for collective in prepared.world:
        name = algorithms.name_for(collective)
        if name is None or name == "best":
            continue
        producer = get(name)
        if collective not in producer.collectives:
            return f"{name} does not make {collective.value} (it makes {', '.join(c.value for c in producer.collectives)})"
        if not producer.fits(built.topology):
            return f"{name} does not apply to {built.topology.name}: {producer.summary}"
    return None


def _evaluation(space: SearchSpace, built: BuiltTopology, topology_key: str, algorithms: AlgorithmSet, chunks: int, prepared: PreparedWorkload) -> Evaluation:
    needs = []
    for collective, size in prepared.world.items():
        name = algorithms.name_for(collective)
        if name is not None:
            needs.append(SynthesisNeed(topology_key, name, collective, size, chunks))
    key = identity_key(
        {
            "version": SEARCH_VERSION,
            "topology": built.identity,
            "algorithms": algorithms.names,
            "chunks": chunks,
            "workload": prepared.variant.identity,
            "npus": built.topology.num_npus,
            "network_model": space.network_model,
            "probe_sizes": space.probe_sizes,
            "group_algorithm": space.group_algorithm if prepared.group_collectives or len(needs) < len(prepared.world) else None,
        }
    )
    return Evaluation(key, built, topology_key, algorithms, chunks, prepared, needs)


@dataclass
class SearchRun:
    """What one run did."""

    evaluated: int = 0
    already_done: int = 0
    syntheses: int = 0
    lost: list[str] = field(default_factory=list)
    """Evaluations the engine could not run (a worker died too often): rerun to retry them."""
    seconds: float = 0.0
    executor: str = ""
    workers: int = 1

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def run_search(
    plan: SearchPlan,
    executor: Any,
    table: ResultTable,
) -> SearchRun:
    """Run every evaluation of ``plan`` not yet in ``table``; each row is appended as it finishes.

    Progress (:mod:`chakra_collectives.progress`): a task ``evaluate`` over the engine's tasks
    (syntheses and evaluations), advanced as each finishes.
    """
    started = time.perf_counter()
    space = plan.space
    done = table.keys()
    todo = [e for e in plan.evaluations if e.key not in done]
    run = SearchRun(already_done=len(plan.evaluations) - len(todo), executor=executor.description, workers=executor.workers)
    nonce = uuid.uuid4().hex[:8]
    shared_topologies: dict[str, Any] = {}
    shared_workloads: dict[int, Any] = {}
    syntheses: dict[str, tuple[Any, Any, Any]] = {}  # need key -> (production, verification, probes)
    waiting: dict[str, int] = {}
    handles: list[tuple[str, Any, Any]] = []  # (kind, handle, evaluation or need key) in submission order
    replays: dict[int, Any] = {}
    for evaluation in todo:
        if evaluation.topology_key not in shared_topologies:
            shared_topologies[evaluation.topology_key] = executor.share(evaluation.topology.topology)
        topology = shared_topologies[evaluation.topology_key]
        workload_id = id(evaluation.workload)
        if workload_id not in shared_workloads:
            shared_workloads[workload_id] = executor.share(evaluation.workload.workload)
        made, checks = [], []
        for need in evaluation.needs:
            if need.key not in syntheses:
                produced = executor.submit(
                    produce_collective, topology, need.algorithm, need.collective, need.size_bytes, need.chunks_per_npu, space.network_model,
                    priority=0, key=f"produce-{need.key}-{nonce}",
                )
                verified = executor.submit(verify_collective, produced, priority=1, key=f"verify-{need.key}-{nonce}")
                probed = executor.submit(
                    probe_collective, produced, topology, space.probe_sizes, space.network_model, priority=1, key=f"probe-{need.key}-{nonce}"
                )
                syntheses[need.key] = (produced, verified, probed)
                handles += [("synthesis", h, need.key) for h in syntheses[need.key]]
            waiting[need.key] = waiting.get(need.key, 0) + 1
            made.append(syntheses[need.key][0])
            checks += syntheses[need.key][1:]
        collectives = [n.collective for n in evaluation.needs]
        replayed = executor.submit(
            replay_workload, topology, shared_workloads[workload_id], evaluation.workload.groups, space.group_algorithm, space.network_model,
            collectives, *made, priority=1, key=f"replay-{evaluation.key}-{nonce}",
        )
        handle = executor.submit(
            finish_row, evaluation.meta(space), space.group_algorithm, collectives, replayed, *checks, priority=2, key=f"row-{evaluation.key}-{nonce}"
        )
        replays[id(handle)] = replayed
        handles += [("replay", replayed, evaluation), ("evaluation", handle, evaluation)]
    run.syntheses = len(syntheses)
    evaluation_of = {id(h): e for kind, h, e in handles if kind == "evaluation"}
    with progress.task("evaluate", total=len(handles), unit="tasks") as tasks:
        for handle, error in executor.as_completed([h for _, h, _ in handles]):
            tasks.advance()
            evaluation = evaluation_of.get(id(handle))
            if evaluation is None:
                continue
            if error is not None:
                run.lost.append(f"{evaluation.topology.label} / {evaluation.algorithms.label} / {evaluation.workload.variant.label}: {type(error).__name__}: {error}")
            else:
                table.append(executor.fetch(handle))
                run.evaluated += 1
            executor.release(handle)
            executor.release(replays.pop(id(handle)))
            for need in evaluation.needs:
                waiting[need.key] -= 1
                if waiting[need.key] == 0:
                    for task in syntheses.pop(need.key):
                        executor.release(task)
    run.seconds = time.perf_counter() - started
    return run


__all__ = ["Evaluation", "SEARCH_VERSION", "SearchPlan", "SearchRun", "SynthesisNeed", "plan_search", "run_search"]
