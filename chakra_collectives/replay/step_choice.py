"""Keep a synthesized algorithm only where it is faster in the step than the built-in default.

A producer plans a collective for an empty fabric (``synth``), or for the concurrent groups of
one call (``synth --groups``). In a training step the calls of consecutive layers overlap: the
data-parallel all-reduces of four layers share the NICs of a DGX cluster, and there the busiest
link's bytes set the time, not the pipeline of one call. A plan faster alone can be slower
there than the ring -- TACOS's plan for dgx:4x8's groups of four loads the NIC links unevenly
(52, 48, 52 and 40 MiB into the four members per 32 MiB all-reduce; the ring 48 each).

:func:`keep_faster_in_step` replays the step with each kind of call
(:meth:`~chakra_collectives.replay.algorithms.AlgorithmCatalog.kind_of`: collective, concurrent
groups, size) that a user's producer served switched to the built-in default (ring for
all-reduce, direct for all-to-all...; the rest of the step as chosen so far), and keeps the
built-in where the kind's calls are not slower with it, or the step is faster with it. It
repeats until a pass switches nothing, so in the final step every kind still running the
producer's algorithm is faster than the built-in in that very step, and the step no slower for
it (:class:`StepChoice` records both times of each) -- except a kind whose
built-in would not fit the memory limit (``--max-memory``): it keeps the producer's, untimed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from chakra_collectives import progress
from chakra_collectives.errors import LimitError
from chakra_collectives.ir import Collective
from chakra_collectives.network.engine import Timing
from chakra_collectives.replay.algorithms import AlgorithmCatalog, CallKind
from chakra_collectives.replay.expand import ExpandedWorkload
from chakra_collectives.topology import Topology
from chakra_collectives.topology.groups import describe_group


@dataclass
class StepChoice:
    """One kind of call: the producer's algorithm against the built-in default in the step
    (mean time of the kind's calls, ns), and which runs."""

    collective: str
    groups: list[list[int]]
    """The concurrent groups of the kind (one group: a call over those ranks alone)."""
    size_bytes: int | None
    producer: str
    producer_ns: float
    builtin: str
    builtin_ns: float
    kept: str
    producer_step_ns: float = 0.0
    """The step's time with the producer's algorithm for this kind."""
    builtin_step_ns: float = 0.0
    """The step's time with the built-in for this kind."""

    def describe(self) -> str:
        """One line for a warning when the built-in is kept."""
        groups = f"the {len(self.groups)} groups of {len(self.groups[0])} ranks" if len(self.groups) > 1 else f"ranks {describe_group(tuple(self.groups[0]))}"
        size = "" if self.size_bytes is None else f" of {self.size_bytes:,} bytes"
        return (f"{self.producer}'s {self.collective}{size} over {groups} does not make the step faster than the built-in "
                f"{self.builtin}'s ({self.producer_ns / 1e3:,.1f} vs {self.builtin_ns / 1e3:,.1f} us per call, step "
                f"{self.producer_step_ns / 1e3:,.1f} vs {self.builtin_step_ns / 1e3:,.1f} us): {self.builtin} runs there")

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


Attempt = Callable[[], tuple[ExpandedWorkload, Timing]]
"""Expand the workload with the catalog's current choices and run it."""


def call_times(expanded: ExpandedWorkload, timing: Timing, catalog: AlgorithmCatalog) -> dict[CallKind, float]:
    """Mean time (ns) of each kind's calls in one run (first member begins to last member ends)."""
    found: dict[CallKind, list[float]] = {}
    for inst in expanded.instances:
        if not inst.num_tasks or inst.collective == "barrier":
            continue
        nodes = np.asarray(inst.nodes)
        start = float(timing.start[expanded.begin_task[nodes]].min())
        end = float(timing.end[nodes].max())
        kind = catalog.kind_of(Collective.parse(inst.collective), inst.members, inst.size_bytes)
        found.setdefault(kind, []).append(end - start)
    return {kind: float(np.mean(times)) for kind, times in found.items()}


def keep_faster_in_step(catalog: AlgorithmCatalog, attempt: Attempt, first: tuple[ExpandedWorkload, Timing]) -> tuple[ExpandedWorkload, Timing, list[StepChoice]]:
    """Switch to the built-in every kind of call of ``catalog.candidates`` that is not faster with
    its producer in the step, or whose built-in makes the step faster (see the module docstring);
    ``first``: the run with every producer.
    Returns the final run and a choice per candidate kind."""
    current = first
    times = call_times(*current, catalog)
    choices: dict[CallKind, StepChoice] = {}
    with progress.task("time each synthesized kind of call against the built-in in the step", unit="replays") as done:
        changed = True
        while changed:
            changed = False
            for kind, producer in list(catalog.candidates.items()):
                if kind in catalog.fallen_back or kind in catalog.untried or kind not in times:
                    continue
                catalog.fallen_back[kind] = producer
                try:
                    trial = attempt()
                except LimitError:  # the built-in's operations do not fit the memory limit: the producer's run
                    del catalog.fallen_back[kind]
                    catalog.untried.append(kind)
                    continue
                trial_times = call_times(*trial, catalog)
                collective, family, size = kind
                choice = StepChoice(collective.value, [list(g) for g in family], size, producer, times[kind],
                                    catalog.default.builtin_chain(collective)[0], trial_times[kind], producer,
                                    current[1].makespan, trial[1].makespan)
                if trial_times[kind] <= times[kind] or trial[1].makespan < current[1].makespan:
                    choice.kept = choice.builtin
                    current, times, changed = trial, trial_times, True
                else:
                    del catalog.fallen_back[kind]
                choices[kind] = choice
                done.advance()
    return current[0], current[1], [choices[kind] for kind in catalog.candidates if kind in choices]


def chosen_in_step(workload: str | Path, topology: Topology, groups: Mapping[str, tuple[int, ...]], default_algorithm: str) -> AlgorithmCatalog:
    """The catalog of ``default_algorithm`` after the step ``workload`` (an ET prefix whose process
    groups are ``groups``) is replayed on ``topology`` with the in-step choice: its algorithms are
    the ones the step kept (what ``workload --astra-sim`` writes for each group)."""
    from chakra_collectives.replay.groups import ProcessGroups
    from chakra_collectives.replay.replayer import replay

    catalog = AlgorithmCatalog({}, default=default_algorithm, groups=groups)
    replay(workload, topology, groups=ProcessGroups.from_mapping({n: list(m) for n, m in groups.items()}, num_ranks=topology.num_npus), catalog=catalog)
    return catalog


__all__ = ["StepChoice", "call_times", "chosen_in_step", "keep_faster_in_step"]
