"""Which collective algorithm each COMM_COLL node runs: given ones, or a built-in default.

``--collective all-reduce=out/ar`` reads ``out/ar.{rank}.et``; ``--collective out/ar`` takes
the collective from the files' metadata (files chakra-collectives wrote record it). Without an
algorithm for a collective type, the built-in ``--default-algorithm`` -- any producer of the
synthesizer registry (:mod:`~chakra_collectives.synth.registry`) -- is generated for each group
size it is needed for (for each group, when it plans for the whole topology), for any size:
every call scales it to its own size.

>>> from chakra_collectives.topology import ring
>>> catalog = AlgorithmCatalog({}, default="ring")
>>> algo, label = catalog.get(Collective.ALL_GATHER, (0, 1, 2, 3), ring(4))
>>> label, algo.num_ranks
('ring (built-in)', 4)
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from chakra_collectives.converters.chakra_et import read_algorithm
from chakra_collectives.errors import InputError
from chakra_collectives.ir import Collective, CollectiveAlgorithm
from chakra_collectives.synth.registry import SynthesisOptions, get, names
from chakra_collectives.topology import Topology


def parse_collective_option(text: str) -> tuple[Collective | None, str]:
    """``"all-reduce=out/ar"`` -> ``(ALL_REDUCE, "out/ar")``; ``"out/ar"`` -> ``(None, "out/ar")``."""
    name, sep, prefix = text.partition("=")
    if not sep:
        return None, text
    if not prefix:
        raise InputError(f"--collective {text!r}: expected COLLECTIVE=PREFIX such as all-reduce=out/ar")
    return Collective.parse(name), prefix


def load_algorithms(options: list[str]) -> dict[Collective, CollectiveAlgorithm]:
    """Read every ``--collective`` option; one algorithm per collective type."""
    found: dict[Collective, CollectiveAlgorithm] = {}
    for text in options:
        collective, prefix = parse_collective_option(text)
        algo = read_algorithm(prefix, collective=collective)
        if not algo.name:
            algo = replace(algo, name=Path(prefix).name)
        if collective is None:
            collective = algo.collective
            if collective is Collective.CUSTOM:
                raise InputError(
                    f"{prefix}: the files do not say which collective they implement; use --collective NAME={prefix}"
                )
        if collective in found:
            raise InputError(f"two algorithms given for {collective.value}")
        found[collective] = algo
    return found


class AlgorithmCatalog:
    """Given algorithms by collective type, else the built-in default (generated once per size)."""

    def __init__(self, given: dict[Collective, CollectiveAlgorithm], *, default: str | None = "ring") -> None:
        if default is not None and default not in names():
            raise InputError(f"unknown default algorithm {default!r} (available: {', '.join(sorted(names()))})")
        self.given = given
        self.default = default
        self._built: dict[tuple[Collective, int | tuple[int, ...]], CollectiveAlgorithm] = {}

    def get(self, collective: Collective, members: tuple[int, ...], topology: Topology) -> tuple[CollectiveAlgorithm, str]:
        """The algorithm for ``collective`` over ranks ``members``, and a label for reports."""
        group_size = len(members)
        algo = self.given.get(collective)
        if algo is not None:
            if algo.num_ranks != group_size:
                raise InputError(
                    f"the {collective.value} algorithm has {algo.num_ranks} ranks but the collective runs over a group of {group_size}"
                )
            return algo, algo.name or "given"
        if self.default is None:
            raise InputError(f"no algorithm for {collective.value}: give --collective {collective.value}=PREFIX or --default-algorithm")
        synthesizer = get(self.default)
        key = (collective, members if synthesizer.whole_topology else group_size)
        built = self._built.get(key)
        if built is None:
            try:
                if synthesizer.whole_topology and members != tuple(range(topology.num_npus)):
                    raise InputError(
                        f"{self.default} synthesizes for the whole topology ({topology.num_npus} NPUs); "
                        f"this collective runs over {group_size} ranks"
                    )
                # the size is the group's: chunk-identified algorithms scale exactly to each call
                options = SynthesisOptions(size_bytes=group_size, any_size=True)
                built = self._built[key] = synthesizer.make(topology, collective, group_size, options).algorithm
            except InputError as error:
                raise InputError(
                    f"no algorithm for {collective.value}: the built-in {self.default} cannot make one ({error.message}); "
                    f"give --collective {collective.value}=PREFIX"
                ) from None
        return built, f"{self.default} (built-in)"
