"""The one registry of algorithm producers: every synthesizer and baseline, by name.

A :class:`Synthesizer` is a name, a factory with one signature --
``make(topology, collective, num_ranks, options) -> Synthesized`` -- and what the rest of the
tool needs to know about it: the collectives it implements, the rank counts it accepts,
whether it plans for the whole topology, whether ``best`` tries it, and, optionally, the
messages it will send (a cheap lower bound on its time lets ``best`` skip it).
:func:`~chakra_collectives.synth.synthesize` (``chakra-coll synth --algorithm``),
``best``, and the replayer's built-in defaults (``chakra-coll replay --default-algorithm``) all
read this registry, so a producer registered once appears everywhere.

Producers register themselves in their own module (:func:`register`); the built-in ones are
listed in :data:`PRODUCERS`, whose modules are imported when a producer is first asked for
(:func:`get`, :func:`synthesizers`), so a command that runs one producer does not import the
others. :data:`PRODUCERS`' order, then the order of registration, is the order ``best`` breaks
ties in:

>>> from chakra_collectives.ir import Collective
>>> [s.name for s in synthesizers()]
['tacos', 'ring', 'biring', 'direct', 'rhd', 'tree', 'bfb', 'forestcoll', 'rails', 'milp', 'gridpipe', 'chains', 'flowcast']
>>> get("rhd").supports(Collective.ALL_REDUCE, 8), get("rhd").supports(Collective.ALL_REDUCE, 6)
(True, False)
>>> from chakra_collectives.topology import ring
>>> made = get("ring").make(ring(4), Collective.ALL_GATHER, 4, SynthesisOptions(size_bytes=2**20))
>>> made.algorithm.describe()
'all-gather over 4 ranks, 4 chunks, 28 ops (ring)'
>>> get("donut")
Traceback (most recent call last):
...
chakra_collectives.errors.InputError: unknown algorithm 'donut' (valid: tacos, ring, biring, direct, rhd, tree, bfb, forestcoll, rails, milp, gridpipe, chains, flowcast)
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable

from chakra_collectives.errors import InputError
from chakra_collectives.limits import check_size

if TYPE_CHECKING:  # annotations only: the registry imports no numpy (synth --help lists its names)
    import numpy as np

    from chakra_collectives.ir import Collective, CollectiveAlgorithm
    from chakra_collectives.ir.parts import AlgorithmParts
    from chakra_collectives.ir.pattern import ChunkPattern
    from chakra_collectives.network.bottleneck import Bottleneck
    from chakra_collectives.topology import Topology


@dataclass(frozen=True)
class SynthesisOptions:
    """What a factory may be asked beyond the topology, collective and rank count.

    Every producer reads what applies to it and ignores the rest.
    """

    size_bytes: int
    """The collective's size (bytes of the larger per-rank buffer): ``algorithm.size_bytes``."""
    chunks_per_npu: int = 1
    """Chunks each rank's share is cut into (TACOS's ``K``; a baseline's chunks per rank)."""
    seed: int = 0
    """Seed of any random choice (TACOS's tie-breaking)."""
    trials: int | None = None
    """Seeds to try (``None``: the producer's default)."""
    root: int = 0
    """Root rank of broadcast / reduce."""
    any_size: bool = False
    """The algorithm will be rescaled to other sizes (the replayer scales it to every call):
    produce one whose shape does not depend on ``size_bytes`` (TACOS then keeps single-chunk
    messages and one seed; ForestColl the optimum's trees in one piece each)."""
    trees_per_npu: int | str | None = None
    """ForestColl's ``k``: a positive integer, ``"optimal"``, or ``None``/``"auto"`` (its choice)."""
    chunks_per_tree: int | None = None
    """ForestColl's pipeline pieces per tree (``None``: its choice)."""
    group: tuple[int, ...] | None = None
    """A process group embedded in the topology: the fabric NPUs of the group's ranks, in rank
    order (group rank ``i`` runs on NPU ``group[i]``); the other NPUs and switches only carry
    traffic. ``None``: every NPU, rank ``r`` on NPU ``r``. A producer that serves groups returns
    an algorithm over ``len(group)`` ranks whose ``placement`` is ``group``."""
    pattern: ChunkPattern | None = None
    """The pre- and postcondition of a :attr:`Collective.PATTERN` collective (``synth --pattern``)."""
    several_runs: bool = False
    """TACOS's All-Gather messages may carry several runs of chunk ids (``synth --several-runs``;
    :data:`~chakra_collectives.synth.tacos.SEVERAL_RUNS_VARIANTS`)."""

    in_parts: bool = False
    """The caller only writes the algorithm and reports its summary: a producer may return it as
    :class:`~chakra_collectives.ir.parts.AlgorithmParts`, lowered a range of ranks at a time
    when written (TACOS's large All-Gather), instead of whole."""
    written: bool = False
    """The caller writes the algorithm (``synth -o``): asked :attr:`in_parts`, its parts are then
    lowered one at a time, which the memory estimate counts; without it only the summary is read."""

    time_limit_s: float | None = None
    """Seconds an exact solver (``milp``) may search (``None``: its default); when they run out
    it returns the best schedule found and the gap it proved."""
    to_beat_ns: float | None = None
    """A time the caller keeps unless this production is faster (the ``K`` search's time at the
    previous ``K``): a producer may put off work that cannot end below it, and skip it when what
    it found without it shows it cannot matter (TACOS: the trials whose matching floor is not
    below it, skipped when the others' best is below that floor). What it returns is the same."""

    def __post_init__(self) -> None:
        if self.time_limit_s is not None and not self.time_limit_s > 0:
            raise InputError(f"time limit must be positive, got {self.time_limit_s} s")
        if not self.size_bytes > 0:
            raise InputError(f"collective size must be positive, got {self.size_bytes}")
        check_size(self.size_bytes, "collective size")
        if self.chunks_per_npu < 1:
            raise InputError(f"chunks per NPU must be positive, got {self.chunks_per_npu}")
        if self.trials is not None and self.trials < 1:
            raise InputError(f"trials must be positive, got {self.trials}")
        if self.chunks_per_tree is not None and self.chunks_per_tree < 1:
            raise InputError(f"chunks per tree must be positive, got {self.chunks_per_tree}")
        if isinstance(self.trees_per_npu, int) and self.trees_per_npu < 1:
            raise InputError(f"trees per NPU must be positive, got {self.trees_per_npu}")
        if isinstance(self.trees_per_npu, str) and self.trees_per_npu not in ("auto", "optimal"):
            raise InputError(f"trees per NPU must be a positive integer, 'optimal' or 'auto', not {self.trees_per_npu!r}")


@dataclass(frozen=True)
class Synthesized:
    """What a factory returns: the algorithm, and what producing it found out."""

    algorithm: CollectiveAlgorithm | AlgorithmParts
    """Whole, or in parts only when :attr:`SynthesisOptions.in_parts` asked for it."""
    schedule_ns: float | None = None
    """The producer's own estimate of the time, when it plans with the network model (TACOS)."""
    predicted_ns: float | None = None
    """The network model's time (tacos mode) when the producer already predicted it while
    choosing among its variants (ForestColl); ``synthesize`` then does not predict again."""
    bottleneck: "Bottleneck | None" = None
    """What limited :attr:`predicted_ns` (its run's busiest link), when the producer's run found
    it; ``synthesize`` then does not run the network model again to say."""
    details: dict[str, Any] = field(default_factory=dict)
    """Producer-specific facts for reports (TACOS: ``seed``, ``trials``, ``phase_seeds``,
    ``phase_latency_ratios``; ForestColl: ``forestcoll``, a dict of its optimum and trees)."""


Factory = Callable[["Topology", "Collective", int, SynthesisOptions], Synthesized]
"""``make(topology, collective, num_ranks, options)``: rank ``r`` of the result runs on NPU ``r``
when the producer plans for the whole topology; otherwise only ``num_ranks`` matters."""

MessageList = Callable[["Collective", int, SynthesisOptions], "tuple[np.ndarray, np.ndarray, np.ndarray]"]
"""``messages(collective, num_ranks, options) -> (src, dst, nbytes)``: every message the
producer would send, known without building the algorithm."""


def _any_count(num_ranks: int) -> bool:
    return True


def _any_topology(topology: Topology) -> bool:
    return True


@dataclass(frozen=True)
class Synthesizer:
    name: str
    """What ``--algorithm`` and ``--default-algorithm`` take."""
    make: Factory
    collectives: tuple[Collective, ...]
    """The collectives it implements."""
    summary: str
    """One line for help texts."""
    whole_topology: bool = False
    """It plans for the topology's links, rank ``r`` on NPU ``r`` (TACOS): it can serve only a
    collective over every NPU. Otherwise the algorithm depends on ``num_ranks`` alone."""
    groups: bool = False
    """It plans for the topology's links and serves a process group embedded in it
    (``options.group``: the members exchange, the other NPUs and switches relay). A producer that
    does not plan for the whole topology serves any group by its rank count alone."""
    groups_refusal: str = ""
    """Why a producer that plans for the whole topology does not serve process groups (its
    refusal says it)."""
    candidate: bool = True
    """``best`` tries it."""
    accepts: Callable[[int], bool] = _any_count
    """Which rank counts ``best`` may try it for (rhd: powers of two); the factory still
    refuses what it cannot build, with the reason."""
    fits: Callable[[Topology], bool] = _any_topology
    """Which topologies ``best`` may try it on (BFB: direct-connect ones, no switches)."""
    fits_group: Callable[[Topology, "tuple[int, ...] | None"], bool] | None = None
    """Which ranks of a topology ``best`` may try it for (``None``: every NPU; rails: members in two
    islands or more); ``None``: any it :meth:`serves`."""
    messages: MessageList | None = None
    """Its messages without building it (lets ``best`` bound its time and skip it)."""
    floor: Callable[[Topology, Collective, SynthesisOptions, str], float] | None = None
    """``floor(topology, collective, options, network_model) -> ns``: when it has no message
    list, a cheap floor on its time from its own model (BFB's step model), which ``best``
    skips it by."""
    switch_handling: str = "messages routed through the switches by the network model"
    """How its messages cross switches (for reports)."""
    footprint: Callable[[Topology, Collective, int, SynthesisOptions], "tuple[float, str]"] | None = None
    """``footprint(topology, collective, num_ranks, options) -> (bytes, what they count)``: the
    memory producing and predicting it needs, before it runs
    (:mod:`~chakra_collectives.synth.footprint`; ``None``: the ``(NPU, chunk)`` pair model)."""
    chunked: bool = True
    """It reads ``chunks_per_npu``; when False (ForestColl cuts its trees' shares itself),
    ``synthesize`` builds it once instead of once per ``K`` it tries."""

    def supports(self, collective: Collective, num_ranks: int) -> bool:
        """Whether it can build ``collective`` over ``num_ranks`` ranks."""
        return collective in self.collectives and self.accepts(num_ranks)

    def serves(self, topology: Topology, group: tuple[int, ...] | None) -> bool:
        """Whether it can build for ``group`` of ``topology`` (``None``: every NPU)."""
        return group is None or self.groups or not self.whole_topology or group == tuple(range(topology.num_npus))

    def tried_by_best(self, collective: Collective, num_ranks: int, topology: Topology | None = None, group: "tuple[int, ...] | None" = None) -> bool:
        """Whether ``best`` tries it for ``collective`` over ``num_ranks`` ranks: a :attr:`candidate`
        that :meth:`supports` them and, when ``topology`` is given, :attr:`fits` it and
        :meth:`serves` ``group`` of it (``None``: every NPU; :attr:`fits_group`)."""
        return self.candidate and self.supports(collective, num_ranks) and (
            topology is None or self.fits(topology) and self.serves(topology, group) and (self.fits_group is None or self.fits_group(topology, group)))

    def build(self, topology: Topology, collective: Collective, options: SynthesisOptions) -> Synthesized:
        """:attr:`make` for ``options.group`` of ``topology`` (``None``: every NPU, rank ``r`` on
        NPU ``r``). The algorithm's ``placement`` is the group: a topology-agnostic producer is
        built for the group's rank count and placed on it; a producer that plans for the topology
        is asked for the group when it serves groups (:attr:`groups`) and refuses otherwise.

        >>> from chakra_collectives.ir import Collective
        >>> from chakra_collectives.topology import torus2d
        >>> made = get("ring").build(torus2d(4, 4), Collective.ALL_GATHER, SynthesisOptions(size_bytes=2**20, group=(0, 4, 8, 12)))
        >>> made.algorithm.num_ranks, made.algorithm.placement
        (4, (0, 4, 8, 12))
        """
        group = options.group
        if group is not None and group == tuple(range(topology.num_npus)):
            group, options = None, replace(options, group=None)
        if group is None:
            return self.make(topology, collective, topology.num_npus, options)
        if not self.serves(topology, group):
            why = f" ({self.groups_refusal})" if self.groups_refusal else ""
            raise InputError(
                f"{self.name} synthesizes for the whole topology ({topology.num_npus} NPUs) and does not serve process groups{why}; "
                f"this collective runs over {len(group)} ranks"
            )
        made = self.make(topology, collective, len(group), options)
        if made.algorithm.placement != group:
            made = replace(made, algorithm=replace(made.algorithm, placement=group))
        return made


PRODUCERS: dict[str, str] = {
    "tacos": "tacos", "ring": "baselines", "biring": "baselines", "direct": "baselines", "rhd": "baselines", "tree": "baselines",
    "bfb": "bfb", "forestcoll": "forestcoll", "rails": "rails", "milp": "milp", "gridpipe": "gridpipe", "chains": "chains", "flowcast": "flowcast",
}
"""Every built-in producer's name, in the order ``best`` breaks ties in, and the module of
:mod:`chakra_collectives.synth` that registers it, imported when it is first asked for
(``synth -t mesh2d:8x8 -a tacos`` imports neither ForestColl, BFB, the MILP nor gridpipe)."""

_REGISTRY: dict[str, Synthesizer] = {}

_BUILT_IN: dict[str, Synthesizer] = {}
"""Every producer of :data:`PRODUCERS` once registered: a registry replaced after its module ran
(a test's scratch copy) gets it back from here."""


def register(synthesizer: Synthesizer) -> Synthesizer:
    """Add ``synthesizer`` to the registry (after the ones already there) and return it."""
    if synthesizer.name in _REGISTRY or synthesizer.name == "best":
        raise ValueError(f"a synthesizer named {synthesizer.name!r} is already registered")
    _REGISTRY[synthesizer.name] = synthesizer
    if synthesizer.name in PRODUCERS:
        _BUILT_IN[synthesizer.name] = synthesizer
    return synthesizer


def _load(name: str) -> None:
    """Register the built-in producer ``name`` (of :data:`PRODUCERS`) if it is not yet: import its module."""
    if name in _REGISTRY or name not in PRODUCERS:
        return
    importlib.import_module(f"chakra_collectives.synth.{PRODUCERS[name]}")
    if name not in _REGISTRY and name in _BUILT_IN:
        _REGISTRY[name] = _BUILT_IN[name]


def get(name: str) -> Synthesizer:
    """The synthesizer called ``name`` (case-insensitive); :class:`InputError` if there is none."""
    _load(name.lower())
    found = _REGISTRY.get(name.lower())
    if found is None:
        raise InputError(f"unknown algorithm {name!r} (valid: {', '.join(names())})")
    return found


def synthesizers() -> list[Synthesizer]:
    """Every synthesizer: the built-in ones in :data:`PRODUCERS`' order, then the others in registration order."""
    for name in PRODUCERS:
        _load(name)
    return [_REGISTRY[name] for name in PRODUCERS if name in _REGISTRY] + [s for name, s in _REGISTRY.items() if name not in PRODUCERS]


DEFAULT_ALGORITHM = "best"
"""What :func:`~chakra_collectives.synth.synthesize` and ``chakra-coll synth`` produce unless
told otherwise: the search over every applicable producer (:mod:`~chakra_collectives.synth.best`)."""


def algorithm_names() -> list[str]:
    """Names ``--algorithm`` accepts: ``best``, then every registered producer (importing none).

    >>> algorithm_names()
    ['best', 'tacos', 'ring', 'biring', 'direct', 'rhd', 'tree', 'bfb', 'forestcoll', 'rails', 'milp', 'gridpipe', 'chains', 'flowcast']
    """
    return ["best", *names()]


def names() -> list[str]:
    """Every synthesizer's name, in :func:`synthesizers`' order (importing none)."""
    return [*PRODUCERS, *(name for name in _REGISTRY if name not in PRODUCERS)]


__all__ = ["DEFAULT_ALGORITHM", "PRODUCERS", "algorithm_names", "Factory", "MessageList", "SynthesisOptions", "Synthesized", "Synthesizer", "get", "names", "register", "synthesizers"]
