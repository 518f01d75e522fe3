"""Which collective algorithm each COMM_COLL node runs: given ones, or a built-in default.

``--algorithm all-reduce=out/ar`` reads ``out/ar.{rank}.et``; ``--algorithm out/ar`` takes
the collective from the files' metadata (files chakra-collectives wrote record it).
``--algorithm all-reduce=out/dp_{group}`` reads every set ``out/dp_NAME.{rank}.et`` (what
``synth --groups FILE -o out/dp`` writes, one per group): each serves the calls over the ranks it
was placed on (its ``cc_placement``), and calls over other groups run the
``--default-algorithm``'s (:class:`GroupAlgorithms`). Without an
algorithm for a collective type, a built-in producer of the synthesizer registry
(:mod:`~chakra_collectives.synth.registry`) is generated for each group size it is needed for
(for each group, when it plans for the topology's links: TACOS, ForestColl, BFB -- those that
serve process groups plan for the group's members with the rest of the fabric relaying), for any
size: every call scales it to its own size.

Which producer is chosen per collective type (``--default-algorithm``, :class:`DefaultAlgorithms`):
``TYPE=NAME`` entries and a ``*=NAME`` catch-all, comma-separated, each ``NAME`` possibly a
fallback chain ``tacos|ring`` (the first that can build the call is used). A bare ``NAME`` is
``*=NAME``. The user's entries go over :data:`DEFAULT_ALGORITHMS`, and the catch-all serves only
the types its producer implements -- so ``--default-algorithm tacos`` still runs broadcasts as
trees and all-to-alls directly.

>>> from chakra_collectives.topology import ring
>>> catalog = AlgorithmCatalog({}, default="ring")
>>> algo, label = catalog.get(Collective.ALL_GATHER, (0, 1, 2, 3), ring(4))
>>> label, algo.num_ranks
('ring (built-in)', 4)
>>> catalog.get(Collective.BROADCAST, (0, 1, 2, 3), ring(4))[1]
'tree (built-in)'
>>> DefaultAlgorithms("broadcast=tree,all-to-all=direct,*=tacos|ring").chain(Collective.ALL_REDUCE)
('tacos', 'ring')
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Mapping

from chakra_collectives.converters.chakra_et import GROUP_FIELD, group_prefixes, read_algorithm
from chakra_collectives.errors import InputError
from chakra_collectives.ir import Collective, CollectiveAlgorithm
from chakra_collectives.synth.registry import SynthesisOptions, get, names
from chakra_collectives.topology import Topology
from chakra_collectives.synth.embedding import carried
from chakra_collectives.topology.groups import describe_group, family_isomorphism


def parse_collective_option(text: str) -> tuple[Collective | None, str]:
    """``"all-reduce=out/ar"`` -> ``(ALL_REDUCE, "out/ar")``; ``"out/ar"`` -> ``(None, "out/ar")``."""
    name, sep, prefix = text.partition("=")
    if not sep:
        return None, text
    if not prefix:
        raise InputError(f"--algorithm {text!r}: expected COLLECTIVE=PREFIX such as all-reduce=out/ar")
    return Collective.parse(name), prefix


class GroupAlgorithms(dict):
    """One collective's algorithms for process groups, by the ranks each was placed on
    (``-a TYPE=PREFIX_{group}``; the sets ``synth --groups`` writes)."""

    def __init__(self, source: str) -> None:
        super().__init__()
        self.source = source

    def add(self, algo: CollectiveAlgorithm, prefix: str) -> None:
        """Serve the calls over ``algo.placement`` with ``algo`` (an :class:`InputError` if it has none or
        another set already serves them)."""
        if not algo.placement:
            raise InputError(f"{prefix}: its files name no placement (cc_placement), so no group to serve: write them with synth --group or --groups")
        if algo.placement in self:
            raise InputError(f"two {algo.collective.value} algorithms given for the group on ranks {describe_group(algo.placement)}")
        self[algo.placement] = algo


def load_algorithms(options: list[str], *, override: bool = False) -> dict[Collective, CollectiveAlgorithm | GroupAlgorithms]:
    """Read every ``--algorithm`` option; one algorithm per collective type, or sets for groups.

    ``TYPE=PREFIX`` whose files say they implement another collective is refused (an all-gather
    run as an all-reduce would replay silently wrong) unless ``override`` is set; files that do
    not say (foreign ETs) take ``TYPE``. A ``PREFIX`` with ``{group}`` reads every set it stands
    for into a :class:`GroupAlgorithms` (several such options of one type are merged)."""
    found: dict[Collective, CollectiveAlgorithm | GroupAlgorithms] = {}
    for text in options:
        collective, prefix = parse_collective_option(text)
        if GROUP_FIELD not in prefix:
            algo = _read_given(text, collective, prefix, prefix, override)
            if algo.collective in found:
                raise InputError(f"two algorithms given for {algo.collective.value}")
            found[algo.collective] = algo
            continue
        prefixes = group_prefixes(prefix)
        if not prefixes:
            raise InputError(
                f"--algorithm {text}: no files {prefix}.{{rank}}.et for any group (synth --groups FILE -o P writes P_{GROUP_FIELD}.{{rank}}.et)"
            )
        for each in prefixes.values():
            algo = _read_given(text, collective, str(each), prefix, override)
            entry = found.setdefault(algo.collective, GroupAlgorithms(prefix))
            if not isinstance(entry, GroupAlgorithms):
                raise InputError(f"two algorithms given for {algo.collective.value}: {prefix} for groups, and one for every call")
            entry.add(algo, str(each))
    return found


def _read_given(text: str, collective: Collective | None, prefix: str, shown: str, override: bool) -> CollectiveAlgorithm:
    """The files ``prefix`` (of the option ``text``, whose prefix is ``shown``) as the ``collective`` given."""
    algo = read_algorithm(prefix)
    if collective is not None and algo.collective is not collective:
        if algo.collective is not Collective.CUSTOM and not override:
            raise InputError(
                f"--algorithm {text}: the files implement {algo.collective.value}, not {collective.value}; "
                f"give {algo.collective.value}={shown}, or --override-collective to run them as {collective.value}"
            )
        algo = read_algorithm(prefix, collective=collective)
    if not algo.name:
        algo = replace(algo, name=Path(prefix).name)
    if collective is None and algo.collective is Collective.CUSTOM:
        raise InputError(f"{prefix}: the files do not say which collective they implement; use --algorithm NAME={shown}")
    return algo


DEFAULT_ALGORITHMS = "all-to-all=direct,broadcast=tree,reduce=tree,*=ring"
"""The built-in producers per collective type: every ASTRA-sim microbenchmark (all-reduce,
all-gather, reduce-scatter, all-to-all) and every data-parallel trace (broadcasts, then
all-reduces) replays without options."""


class DefaultAlgorithms:
    """``TYPE=NAME[|NAME...]`` entries over :data:`DEFAULT_ALGORITHMS` (see the module docstring)."""

    def __init__(self, spec: str = DEFAULT_ALGORITHMS) -> None:
        self.spec = spec
        self.user = self._parse(spec)
        self.builtin = self._parse(DEFAULT_ALGORITHMS)

    @staticmethod
    def _parse(spec: str) -> dict[Collective | None, tuple[str, ...]]:
        entries: dict[Collective | None, tuple[str, ...]] = {}
        for item in (part.strip() for part in spec.split(",")):
            if not item:
                continue
            kind, sep, chain_text = item.rpartition("=") if "=" in item else ("*", "=", item)
            chain = tuple(name.strip().lower() for name in chain_text.split("|"))
            if not all(chain):
                raise InputError(f"--default-algorithm {spec!r}: empty algorithm name in {item!r}")
            for name in chain:
                if name not in names():
                    raise InputError(f"unknown default algorithm {name!r} (available: {', '.join(sorted(names()))})")
            key = None if kind.strip() == "*" else Collective.parse(kind)
            entries[key] = chain
        return entries

    def chain(self, collective: Collective) -> tuple[str, ...]:
        """The producers to try for ``collective``, in order (empty: none is configured)."""
        if collective in self.user:
            return self.user[collective]
        fitting = tuple(n for n in self.user.get(None, ()) if collective in get(n).collectives)
        if fitting:
            return fitting
        return self.builtin_chain(collective)

    def builtin_chain(self, collective: Collective) -> tuple[str, ...]:
        """The producers :data:`DEFAULT_ALGORITHMS` names for ``collective`` (what a call falls back
        to when the user's producer is not faster in the step)."""
        if collective in self.builtin:
            return self.builtin[collective]
        return tuple(n for n in self.builtin[None] if collective in get(n).collectives)


def concurrent_family(members: tuple[int, ...], groups: Mapping[str, tuple[int, ...]]) -> tuple[tuple[int, ...], ...]:
    """``members`` and the groups of ``groups`` that run beside it: those of its size disjoint from
    it and from each other (in the file's order), sorted -- the groups of one parallel dimension.

    >>> concurrent_family((0, 2), {"1": (0, 1), "2": (2, 3), "3": (0, 2), "4": (1, 3)})
    ((0, 2), (1, 3))
    """
    family = [members]
    taken = set(members)
    for group in groups.values():
        group = tuple(group)
        if len(group) == len(members) and taken.isdisjoint(group):
            family.append(group)
            taken.update(group)
    return tuple(sorted(family))


CallKind = tuple[Collective, tuple[tuple[int, ...], ...], "int | None"]
"""A kind of call (:meth:`AlgorithmCatalog.kind_of`): collective, concurrent groups, size."""


class AlgorithmCatalog:
    """Given algorithms by collective type, else the built-in default (generated once per size)."""

    def __init__(
        self, given: Mapping[Collective, CollectiveAlgorithm | GroupAlgorithms], *, default: str | None = DEFAULT_ALGORITHMS, written_size: bool = False,
        groups: Mapping[str, tuple[int, ...]] | None = None,
    ) -> None:
        self.given = given
        self.default = None if default is None else DefaultAlgorithms(default)
        self.written_size = written_size
        """Given algorithms run at the size their files were written for (ASTRA-sim's rule for
        custom collectives) instead of being scaled to each call."""
        self._built: dict[tuple[str, Collective, int | tuple[int, ...]], CollectiveAlgorithm] = {}
        self.warnings: list[str] = []
        self._missing: dict[tuple[str, Collective], list[tuple[int, ...]]] = {}
        self._missing_note: dict[tuple[str, Collective], str] = {}
        self.groups = dict(groups or {})
        """The workload's process groups: a producer that serves groups plans a group together with
        the disjoint groups of its size (the other groups of its parallel dimension, which run the
        same collectives at the same time; :func:`concurrent_family`)."""
        self._joint: dict[tuple[str, Collective, tuple[tuple[int, ...], ...], int], dict[tuple[int, ...], CollectiveAlgorithm]] = {}
        self._ring_plans: set[tuple] = set()
        self.candidates: dict[CallKind, str] = {}
        """The kinds of call a default producer other than the built-in's served (kind -> producer):
        what :mod:`~chakra_collectives.replay.step_choice` times against the built-in in the step."""
        self.fallen_back: dict[CallKind, str] = {}
        """Kinds that run the built-in default instead (kind -> the producer it replaced)."""
        self.untried: list[CallKind] = []
        """Kinds whose built-in was not timed: the step with it would not fit the memory limit."""

    def kind_of(self, collective: Collective, members: tuple[int, ...], size_bytes: int | None) -> CallKind:
        """The kind of a call: its collective, its group's :func:`concurrent_family` and its size
        (every call of one kind runs one plan)."""
        return collective, concurrent_family(tuple(members), self.groups), size_bytes

    def get(
        self, collective: Collective, members: tuple[int, ...], topology: Topology, size_bytes: int | None = None,
    ) -> tuple[CollectiveAlgorithm, str]:
        """The algorithm for ``collective`` over ranks ``members``, and a label for reports
        (``size_bytes``: the call's, for producers that plan concurrent groups jointly)."""
        group_size = len(members)
        algo = self.given.get(collective)
        if isinstance(algo, GroupAlgorithms):
            placed = algo.get(tuple(members))
            if placed is not None:
                return placed, placed.name or "given"
            self._uncovered(algo.source, collective, tuple(members))
            algo = None
        if algo is not None:
            if algo.num_ranks != group_size:
                raise InputError(
                    f"the {collective.value} algorithm has {algo.num_ranks} ranks but the collective runs over a group of {group_size}"
                )
            return algo, algo.name or "given"
        if self.default is None:
            raise InputError(f"no algorithm for {collective.value}: give --algorithm {collective.value}=PREFIX or --default-algorithm")
        kind = self.kind_of(collective, members, size_bytes)
        replaced = self.fallen_back.get(kind)
        chain = self.default.chain(collective) if replaced is None else self.default.builtin_chain(collective)
        if not chain:
            raise InputError(
                f"no built-in algorithm implements {collective.value}: give --algorithm {collective.value}=PREFIX"
            )
        reasons = []
        for name in chain:
            try:
                built = self._build(name, collective, members, topology, size_bytes)
            except InputError as error:
                reasons.append(f"{name}: {error.message}")
                continue
            if reasons:
                note = f"{name} used for {collective.value} over {group_size} ranks ({'; '.join(reasons)})"
                if note not in self.warnings:
                    self.warnings.append(note)
            if replaced is not None:
                return built, f"{name} (built-in; {replaced}'s not faster in the step)"
            plan = built.provenance.get("concurrent_plan")
            if name not in self.default.builtin_chain(collective) and (name, *kind) not in self._ring_plans:
                self.candidates.setdefault(kind, name)
            return built, f"{name} (built-in)" if plan is None else f"{name} (built-in; {plan})"
        if len(chain) == 1:
            raise InputError(
                f"no algorithm for {collective.value}: the built-in {chain[0]} cannot make one ({reasons[0].split(': ', 1)[1]}); "
                f"give --algorithm {collective.value}=PREFIX"
            )
        raise InputError(f"no algorithm for {collective.value}: none of the built-ins can make one ({'; '.join(reasons)}); "
                         f"give --algorithm {collective.value}=PREFIX")

    def _uncovered(self, source: str, collective: Collective, members: tuple[int, ...]) -> None:
        """Note (one warning per set) that ``source`` has no algorithm for the group ``members``."""
        groups = self._missing.setdefault((source, collective), [])
        if members in groups:
            return
        groups.append(members)
        note = (f"{source} has no {collective.value} for the group{'s' if len(groups) > 1 else ''} on ranks "
                f"{'; '.join(describe_group(g) for g in groups)}: {'they run' if len(groups) > 1 else 'it runs'} the --default-algorithm's")
        if len(groups) > 1:
            self.warnings.remove(self._missing_note[(source, collective)])
        self._missing_note[(source, collective)] = note
        self.warnings.append(note)

    def _build(self, name: str, collective: Collective, members: tuple[int, ...], topology: Topology, size_bytes: int | None) -> CollectiveAlgorithm:
        synthesizer = get(name)
        group_size = len(members)
        family = concurrent_family(members, self.groups)
        if synthesizer.groups and len(family) > 1 and size_bytes is not None and collective in synthesizer.collectives:
            return self._build_jointly(name, collective, family, topology, size_bytes)[members]
        key = (name, collective, members if synthesizer.whole_topology else group_size)
        built = self._built.get(key)
        if built is None:
            if collective not in synthesizer.collectives:
                raise InputError(f"{name} does not implement {collective.value}")
            # the size is the group's: chunk-identified algorithms scale exactly to each call
            options = SynthesisOptions(size_bytes=group_size, any_size=True, group=members)
            if synthesizer.whole_topology:  # planned for the group's NPUs (placement = members), or refused with the reason
                made = synthesizer.build(topology, collective, options)
            else:  # one algorithm per group size, placed on each call's members
                made = synthesizer.make(topology, collective, group_size, options)
            built = self._built[key] = made.algorithm
        return built

    def _build_jointly(
        self, name: str, collective: Collective, family: tuple[tuple[int, ...], ...], topology: Topology, size_bytes: int,
    ) -> dict[tuple[int, ...], CollectiveAlgorithm]:
        """Every group of ``family`` planned at once for calls of ``size_bytes``
        (:func:`~chakra_collectives.synth.concurrent.synthesize_concurrent`: the fastest together of
        separate syntheses, syntheses confined to each group's links, and rings)."""
        from chakra_collectives.synth.concurrent import synthesize_concurrent

        key = (name, collective, family, size_bytes)
        if key not in self._joint:
            carried_plan = self._carried_jointly(key, topology)
            if carried_plan is not None:
                self._joint[key] = carried_plan
                return carried_plan
            result = synthesize_concurrent(topology, {str(i): g for i, g in enumerate(family)}, collective, size_bytes, algorithm=name, bounds=False)
            joint = result.joint
            if joint.name == "ring":  # nothing to time against the built-in ring in the step
                self._ring_plans.add(key)
            note = f"{joint.name} plan of {len(family)} concurrent groups"
            self._joint[key] = {
                g: replace(joint.algorithms[str(i)], provenance={**joint.algorithms[str(i)].provenance, "concurrent_plan": note})
                for i, g in enumerate(family)
            }
        return self._joint[key]

    def _carried_jointly(self, key: tuple, topology: Topology) -> dict[tuple[int, ...], CollectiveAlgorithm] | None:
        """The plan of an earlier family of the same producer, collective and size carried onto the
        family of ``key`` by an automorphism of the fabric
        (:func:`~chakra_collectives.topology.groups.family_isomorphism`: a hybrid step's tensor-parallel
        rows and data-parallel columns of a square torus), or ``None``: no such family planned."""
        name, collective, family, size_bytes = key
        for (other_name, other_collective, other, other_size), plans in self._joint.items():
            if (other_name, other_collective, other_size) != (name, collective, size_bytes):
                continue
            perm = family_isomorphism(topology, other, family)
            if perm is None:
                continue
            if (other_name, other_collective, other, other_size) in self._ring_plans:
                self._ring_plans.add(key)
            return {g: replace(carried(plans[source], perm, topology), name=plans[source].name) for source, g in zip(other, family)}
        return None

    def run_size(self, collective: Collective, call_size: int, algo: CollectiveAlgorithm, label: str) -> tuple[int, str | None]:
        """The size ``algo`` runs at for a call of ``call_size`` bytes, and a warning if that differs.

        >>> from chakra_collectives.synth.baselines import ring
        >>> algo = ring(Collective.ALL_REDUCE, 4, size_bytes=2**20)
        >>> AlgorithmCatalog({Collective.ALL_REDUCE: algo}, written_size=True).run_size(Collective.ALL_REDUCE, 2**21, algo, "ar")[0]
        1048576
        >>> AlgorithmCatalog({Collective.ALL_REDUCE: algo}).run_size(Collective.ALL_REDUCE, 2**21, algo, "ar")
        (2097152, None)
        """
        given = self.given.get(collective)
        is_given = any(a is algo for a in given.values()) if isinstance(given, GroupAlgorithms) else given is algo
        if not self.written_size or not is_given or call_size == algo.size_bytes:
            return call_size, None
        return algo.size_bytes, (
            f"{label} was written for {algo.size_bytes:,} bytes and runs at that size, as ASTRA-sim runs a custom collective, "
            f"for a call of {call_size:,} bytes (--rescale scales it to each call)"
        )
