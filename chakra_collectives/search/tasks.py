"""The tasks a search runs, on any executor: produce a collective, verify it, time it alone at
the probe sizes, replay a workload with it, and make the result row of what they found.

Verification, the probes and the replay each need only the produced algorithm, so they are
separate tasks that run side by side on a cluster (a row's longest chain is its synthesis and
the longest of the three, not their sum); :func:`synthesize_collective` runs the first three in
one call. All are plain functions of picklable arguments, so a Dask worker on another machine
runs them as the in-process executor does, with identical results. None raises for a failing
candidate: an error (a producer that cannot build the collective, an algorithm that does not
verify, a replay that deadlocks, or a bug) becomes part of the result, so the search goes on.

>>> from chakra_collectives.topology import load_topology
>>> made = synthesize_collective(load_topology("ring:4"), "ring", Collective.ALL_REDUCE, 2**20, 1, (2**10, 2**20), "default")
>>> made.error, made.verified, made.produced_by, made.probe_ns[1] > made.probe_ns[0]
(None, True, 'ring', True)
>>> synthesize_collective(load_topology("switch:4"), "bfb", Collective.ALL_REDUCE, 2**20, 1, (2**10, 2**20), "default").error
'BFB schedules direct-connect topologies; switch:4 has 1 switch(es)'
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from chakra_collectives.errors import ChakraCollError
from chakra_collectives.ir import Collective, CollectiveAlgorithm
from chakra_collectives.network import predict_time
from chakra_collectives.replay import ProcessGroups, replay
from chakra_collectives.search.executors import within_worker_memory
from chakra_collectives.resources import require
from chakra_collectives.synth import synthesize
from chakra_collectives.synth.footprint import estimate
from chakra_collectives.synth.registry import SynthesisOptions, get
from chakra_collectives.topology import Topology
from chakra_collectives.ir.workload import Workload
from chakra_collectives.verify import verify_algorithm


@dataclass
class SynthesisOutcome:
    """One synthesized (and verified) collective on one topology, or why there is none."""

    algorithm: CollectiveAlgorithm | None
    produced_by: str
    """The producer that made it (for ``best``: the one that won)."""
    error: str | None
    verified: bool
    synthesis_s: float
    verify_s: float
    probe_s: float
    """Seconds timing it alone at the probe sizes."""
    probe_ns: tuple[float, ...] | None
    """Predicted time alone on the topology at each probe size (the algorithm scaled)."""


def _describe(error: BaseException) -> str:
    if isinstance(error, ChakraCollError):
        return str(error)
    return f"{type(error).__name__}: {error}"  # a bug in a producer: recorded, the search goes on


def synthesize_collective(
    topology: Topology,
    algorithm: str,
    collective: Collective,
    size_bytes: int,
    chunks_per_npu: int,
    probe_sizes: tuple[int, ...],
    mode: str,
) -> SynthesisOutcome:
    """Produce ``collective`` with the registered ``algorithm`` (or ``best``), verify it, and time it at the probe sizes."""
    made = produce_collective(topology, algorithm, collective, size_bytes, chunks_per_npu, mode)
    checked = verify_collective(made)
    probed = probe_collective(made, topology, probe_sizes, mode) if checked.verified else Probed(None, 0.0, None)
    return replace(combine(checked, probed), algorithm=made.algorithm if checked.verified and probed.error is None else None)


def produce_collective(topology: Topology, algorithm: str, collective: Collective, size_bytes: int, chunks_per_npu: int, mode: str) -> SynthesisOutcome:
    """Produce ``collective`` with the registered ``algorithm`` (or ``best``): not yet verified, no probes.

    Inside a Dask worker the worker's memory limit holds (:func:`~chakra_collectives.search.executors.within_worker_memory`):
    a synthesis estimated above it fails this row, not the worker.
    """
    started = time.perf_counter()
    produced_by = algorithm
    try:
        with within_worker_memory():
            if algorithm == "best":
                result = synthesize(topology, collective, size_bytes, chunks_per_npu=chunks_per_npu, algorithm="best", network_model=mode)
                algo, produced_by = result.algorithm, result.algorithm_name
            else:
                options = SynthesisOptions(size_bytes=size_bytes, chunks_per_npu=chunks_per_npu)
                require(estimate(algorithm, topology, collective, topology.num_npus, options))  # as synth refuses it
                algo = get(algorithm).make(topology, collective, topology.num_npus, options).algorithm
    except Exception as error:  # noqa: BLE001 -- a failing candidate is recorded, never fatal
        return SynthesisOutcome(None, produced_by, _describe(error), False, time.perf_counter() - started, 0.0, 0.0, None)
    return SynthesisOutcome(algo, produced_by, None, False, time.perf_counter() - started, 0.0, 0.0, None)


@dataclass
class Checked:
    """What verifying a produced collective found, with the production's facts (no algorithm: small to move)."""

    produced_by: str
    synthesis_error: str | None
    synthesis_s: float
    verified: bool
    verify_s: float
    error: str | None
    """Why it does not verify (or could not be verified)."""


@dataclass
class Probed:
    """A produced collective timed alone at the probe sizes (``probe_ns`` None: not timed)."""

    probe_ns: tuple[float, ...] | None
    probe_s: float
    error: str | None


def verify_collective(made: SynthesisOutcome) -> Checked:
    """Verify a produced collective (a failed production: nothing to verify)."""
    facts = (made.produced_by, made.error, made.synthesis_s)
    if made.algorithm is None:
        return Checked(*facts, False, 0.0, None)
    started = time.perf_counter()
    try:
        with within_worker_memory():
            failure = _verify(made.algorithm)
    except Exception as error:  # noqa: BLE001 -- recorded, never fatal
        return Checked(*facts, False, time.perf_counter() - started, _describe(error))
    verify_s = time.perf_counter() - started
    if failure is not None:
        return Checked(*facts, False, verify_s, f"{made.produced_by}'s {made.algorithm.collective.value} does not verify: {failure}")
    return Checked(*facts, True, verify_s, None)


def probe_collective(made: SynthesisOutcome, topology: Topology, probe_sizes: tuple[int, ...], mode: str) -> Probed:
    """Time a produced collective alone on ``topology`` at each probe size (the algorithm scaled)."""
    if made.algorithm is None:
        return Probed(None, 0.0, None)
    started = time.perf_counter()
    try:
        with within_worker_memory():
            probes = tuple(predict_time(made.algorithm, topology, size_bytes=size, network_model=mode) for size in probe_sizes)
    except Exception as error:  # noqa: BLE001 -- recorded, never fatal
        return Probed(None, time.perf_counter() - started, _describe(error))
    return Probed(probes, time.perf_counter() - started, None)


def combine(checked: Checked, probed: Probed) -> SynthesisOutcome:
    """What :func:`synthesize_collective` reports, from a production's verification and probes
    (without the algorithm): the first failure of the three is the error, and a collective that
    does not verify has no probe figures."""
    outcome = SynthesisOutcome(None, checked.produced_by, None, checked.verified, checked.synthesis_s, checked.verify_s, 0.0, None)
    if checked.synthesis_error is not None or checked.error is not None:
        return replace(outcome, error=checked.synthesis_error or checked.error)
    return replace(outcome, error=probed.error, probe_s=probed.probe_s, probe_ns=probed.probe_ns)


VERIFIED_MEMO = 64
"""Verdicts a process remembers (by :func:`operations_digest`): a producer whose algorithm does
not depend on the size (the ring, BFB) gives the same operations at every size of a
``collective`` workload, verified once."""

_verdicts: dict[str, str | None] = {}


def operations_digest(algo: CollectiveAlgorithm) -> str | None:
    """A digest of everything verification reads (operations, buffers, collective, root); not the
    size, which scales bytes only. ``None`` for a pattern algorithm (its pattern is not hashed).

    >>> from chakra_collectives.synth.baselines import ring
    >>> small, large = (ring(Collective.ALL_REDUCE, 4, size_bytes=s) for s in (2**10, 2**30))
    >>> operations_digest(small) == operations_digest(large) != operations_digest(ring(Collective.ALL_GATHER, 4, size_bytes=2**10))
    True
    """
    if algo.pattern is not None:
        return None
    digest = hashlib.sha256(repr((algo.collective.value, algo.num_ranks, algo.chunk_count, algo.inplace, algo.root)).encode())
    for column in (*(getattr(algo.ops, name) for name in sorted(vars(algo.ops))), algo.input_chunks, algo.output_chunks, algo.scratch_chunks):
        if isinstance(column, np.ndarray):
            digest.update(str((column.dtype, column.shape)).encode())
            digest.update(np.ascontiguousarray(column).tobytes())
    return digest.hexdigest()


def _verify(algo: CollectiveAlgorithm) -> str | None:
    """Why ``algo`` does not verify (``None``: it does); a verdict this process reached before on
    the same operations is reused."""
    key = operations_digest(algo)
    if key is not None and key in _verdicts:
        return _verdicts[key]
    report = verify_algorithm(algo)
    failed = next((c for c in report.checks if c.status.value == "failed"), None)
    failure = None if report.ok else (f"{failed.name}: {failed.summary}" if failed else "not proved")
    if key is not None:
        if len(_verdicts) >= VERIFIED_MEMO:
            _verdicts.pop(next(iter(_verdicts)))
        _verdicts[key] = failure
    return failure


def warm_up() -> int:
    """Nothing: calling it makes a worker import this module (and the engines) before the first task; its pid."""
    return os.getpid()


def replay_workload(
    topology: Topology,
    workload: Workload,
    groups: ProcessGroups,
    group_algorithm: str,
    mode: str,
    collectives: list[Collective],
    *made: SynthesisOutcome,
) -> dict[str, Any] | None:
    """Replay ``workload`` on ``topology`` with the produced algorithms: the row's replay columns
    (``None``: a production failed, nothing to replay).

    ``made[i]`` is the algorithm for ``collectives[i]`` (collectives over every rank); the rest
    -- collectives over process groups, or types the algorithm set does not name -- run
    ``group_algorithm``.
    """
    if any(m.algorithm is None for m in made):
        return None
    started = time.perf_counter()
    try:
        with within_worker_memory():
            result = replay(
                workload, topology,
                algorithms={c: m.algorithm for c, m in zip(collectives, made)},  # type: ignore[misc]
                default_algorithm=group_algorithm, groups=groups, network_model=mode,
            )
    except Exception as error:  # noqa: BLE001 -- recorded, the search goes on
        return {"status": "failed", "error": _describe(error), "replay_s": time.perf_counter() - started}
    exposed = [r.exposed_communication_ns for r in result.ranks]
    return {
        "replay_s": time.perf_counter() - started,
        "status": "ok",
        "error": None,
        "iteration_ns": result.total_ns,
        "exposed_comm_ns": max(exposed),
        "exposed_comm_mean_ns": sum(exposed) / len(exposed),
        "comm_ns": max(r.communication_ns for r in result.ranks),
        "collectives": json.dumps(
            [{"collective": c.collective, "size_bytes": c.size_bytes, "members": c.members, "group": c.group, "algorithm": c.algorithm, "time_ns": c.time_ns}
             for c in result.collectives]
        ),
    }


def finish_row(meta: dict[str, Any], group_algorithm: str, collectives: list[Collective], replayed: dict[str, Any] | None, *checks: Checked | Probed) -> dict[str, Any]:
    """One result row: ``meta`` (key, labels, topology facts...), then per collective its
    verification and probes (``checks``: ``Checked, Probed`` for each of ``collectives``), then the
    replay's columns -- a row fails with the first failure of its syntheses, verifications and
    probes (its replay then does not count), else with its replay's."""
    outcomes = [combine(checks[i], checks[i + 1]) for i in range(0, len(checks), 2)]  # type: ignore[arg-type]
    row = dict(meta)
    row["synthesis_s"] = sum(o.synthesis_s for o in outcomes)
    row["verify_s"] = sum(o.verify_s for o in outcomes)
    row["probe_s"] = sum(o.probe_s for o in outcomes)
    row["verified"] = all(o.verified for o in outcomes)
    row["algorithm_used"] = ",".join(sorted({o.produced_by for o in outcomes})) or group_algorithm
    if outcomes and outcomes[0].probe_ns is not None:
        row["probe_collective"] = collectives[0].value
        row["probe_small_ns"], row["probe_large_ns"] = outcomes[0].probe_ns[0], outcomes[0].probe_ns[-1]
    failed = [o.error for o in outcomes if o.error is not None]
    if failed:
        row.update(status="failed", error=failed[0])
        return row
    assert replayed is not None, "every production succeeded, so the workload was replayed"
    row.update(replayed)
    return row


__all__ = [
    "Checked", "Probed", "SynthesisOutcome", "VERIFIED_MEMO", "combine", "finish_row", "operations_digest", "probe_collective", "produce_collective",
    "replay_workload", "synthesize_collective", "verify_collective", "warm_up",
]
