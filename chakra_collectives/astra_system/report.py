"""``replay --network-model astra-sim --system system.json``: the ASTRA-sim model behind the replay command.

:func:`replay_astra_sim` takes what a user hands ASTRA-sim -- workload ETs, a topology that is
an analytical network, the system JSON, communicator groups -- plus ``-c`` algorithms (which
become custom collectives, as ``*-implementation-custom`` would), runs the model
(:func:`~chakra_collectives.astra_system.driver.simulate`) and reports per rank and per
collective what ASTRA-sim would print.

Custom collectives run at the size their files were written for, as in ASTRA-sim; a call whose
``comm_size`` differs gets a warning. ``rescale=True`` writes each custom algorithm again for
every size it is called with (exactly, for files that carry chunk identity) -- what a user of
chakra-coll's scalable files wants, and what ASTRA-sim does not do.

The backend is ASTRA-sim's congestion-aware one on a one-dimension network and the
congestion-unaware one otherwise (the aware binary refuses more than one dimension); the
unaware backend does not model contention, which the result says.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from chakra_collectives.astra_system.backends import BACKENDS
from chakra_collectives.astra_system.driver import COLLECTIVE_TYPES, read_comm_groups, simulate
from chakra_collectives.converters.astra_sim import AnalyticalNetwork, NotExpressible, analytical_network
from chakra_collectives.converters.astra_sim.system import SystemConfig
from chakra_collectives.converters.chakra_et import GROUP_FIELD, read_algorithm, write_algorithm
from chakra_collectives.converters.chakra_et.reader import written_size
from chakra_collectives.converters.chakra_et.workload_reader import read_workload
from chakra_collectives.errors import InputError
from chakra_collectives.ir import Collective
from chakra_collectives.ir.workload import NodeKind, Workload
from chakra_collectives.replay.algorithms import parse_collective_option
from chakra_collectives.topology import Topology
from chakra_collectives.units import format_size


UNAWARE_NOTE = "the congestion-unaware backend does not model contention: messages sharing a link do not wait for one another"


def default_backend(network: AnalyticalNetwork) -> str:
    """What ASTRA-sim can run: the aware binary for one dimension (not a Ring of 2), else unaware."""
    dims = network.dimensions
    if len(dims) == 1 and not (dims[0].kind == "Ring" and dims[0].npus == 2):
        return "aware"
    return "unaware"


@dataclass
class AstraSimReplay:
    """What the model predicts ASTRA-sim prints for a workload, and when each collective ran."""

    workload: str
    network: str
    backend: str
    system: str
    total_ns: int
    ranks: list[dict[str, Any]]
    collectives: list[dict[str, Any]]
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "network": self.network,
            "backend": self.backend,
            "system": self.system,
            "total_ns": self.total_ns,
            "ranks": self.ranks,
            "collectives": self.collectives,
            "warnings": self.warnings,
            "network_model": "astra-sim",
            "mode": "astra-sim",  # deprecated spelling of network_model, kept for one release
            "deprecated": {"mode": "network_model"},
        }


def network_of(topology: Topology) -> AnalyticalNetwork:
    try:
        return analytical_network(topology)
    except NotExpressible as exc:
        raise InputError(f"{exc.message}; ASTRA-sim's analytical backends need such a network") from None


def replay_astra_sim(
    workload: str | Path | Workload,
    topology: Topology,
    system: str | Path,
    *,
    backend: str | None = None,
    comm_groups: str | Path | None = None,
    collectives: list[str] | None = None,
    rescale: bool = False,
    override: bool = False,
) -> AstraSimReplay:
    """Run the ASTRA-sim model; see the module docstring. ``collectives``: ``TYPE=PREFIX`` (or
    ``PREFIX``) custom algorithms; files that say they implement another type are refused
    unless ``override``."""
    config = SystemConfig.from_file(system)
    network = network_of(topology)
    chosen = backend or default_backend(network)
    if chosen not in BACKENDS:
        raise InputError(f"unknown ASTRA-sim backend {chosen!r} (valid: {', '.join(BACKENDS)})")
    work = workload if isinstance(workload, Workload) else read_workload(workload)
    groups = read_comm_groups(comm_groups, work.num_ranks) if comm_groups else None
    warnings: list[str] = []
    custom = dict(config.custom)
    system_dir = Path(system).resolve().parent
    for option in collectives or []:
        kind, prefix = parse_collective_option(option)
        if GROUP_FIELD in prefix:
            raise InputError(
                f"--algorithm {option}: ASTRA-sim's system runs one custom algorithm per collective type; "
                "for one per group, write them with workload hybrid|moe --astra-sim DIR -t TOPOLOGY"
            )
        claimed = read_algorithm(prefix).collective
        if kind is not None and claimed not in (kind, Collective.CUSTOM) and not override:
            raise InputError(
                f"--algorithm {option}: the files implement {claimed.value}, not {kind.value}; "
                f"give {claimed.value}={prefix}, or --override-collective to run them as {kind.value}"
            )
        kind = kind or claimed
        if kind.value not in COLLECTIVE_TYPES.values():
            raise InputError(f"ASTRA-sim runs custom all-reduce, all-gather, reduce-scatter and all-to-all; not {kind.value}")
        custom[kind.value] = str(Path(prefix).resolve())
    for kind, prefix in list(custom.items()):
        custom[kind] = str(_locate(prefix, system_dir))
    if custom and config.splits != 1:
        raise InputError(f"preferred-dataset-splits is {config.splits}; custom collectives need 1 (ASTRA-sim: no rank finishes otherwise)", path=system)
    with tempfile.TemporaryDirectory(prefix="chakra-coll-astra-") as scratch:
        custom, size_notes = _sized_customs(work, custom, rescale, Path(scratch), groups or {})
        warnings += size_notes
        config = replace(config, custom=custom)
        result = simulate(work, network, config, backend=chosen, comm_groups=groups)
    if chosen == "unaware":
        warnings.append(UNAWARE_NOTE)
    warnings += result.warnings
    ranks = [
        {"rank": r, "finish_ns": finish, "exposed_communication_ns": exposed}
        for r, (finish, exposed) in enumerate(zip(result.finish_ns, result.exposed_ns))
    ]
    return AstraSimReplay(
        workload=str(work.prefix if isinstance(workload, Workload) else workload),
        network=_describe(network),
        backend=chosen,
        system=f"{system} ({config.describe()})",
        total_ns=result.makespan_ns,
        ranks=ranks,
        collectives=_collectives(work, result, config),
        warnings=warnings,
    )


def _locate(prefix: str, system_dir: Path) -> Path:
    """A custom prefix as ASTRA-sim resolves it (working directory), else next to the system file."""
    path = Path(prefix)
    for candidate in (path, system_dir / path):
        if Path(f"{candidate}.0.et").exists() or Path(f"{candidate}.0.et.gz").exists():
            return candidate.resolve()
    raise InputError(f"custom collective {prefix}: no {prefix}.0.et in the working directory or next to the system file")


def _sized_customs(work, custom: dict[str, str], rescale: bool, scratch: Path, groups: dict[int, list[int]]) -> tuple[dict[str, str], list[str]]:
    """Warn where calls differ from the written size under the collective's convention (an
    all-gather's ``comm_size`` is each rank's shard: :meth:`Collective.size_of_call`); with
    ``rescale``, one prefix per ``comm_size``, written at the size that call means."""
    notes: list[str] = []
    if not custom:
        return custom, notes
    sizes: dict[str, dict[int, int]] = {}  # kind -> comm_size -> the collective's size
    coll = work.node_type == NodeKind.COMM_COLL
    pg_names = [work.pg_name[i] for i in coll.nonzero()[0].tolist()]
    for t, s, pg in zip(work.comm_type[coll].tolist(), work.comm_size[coll].tolist(), pg_names):
        kind = COLLECTIVE_TYPES.get(t)
        if kind in custom:
            members = len(groups.get(int(pg), ())) if pg is not None and pg.isdigit() else 0
            sizes.setdefault(kind, {})[s] = Collective.parse(kind).size_of_call(s, members or work.num_ranks)
    resized: dict[str, str] = dict(custom)
    for kind, called in sizes.items():
        written = written_size(custom[kind])  # chakra-coll's files say it in their first record
        if written is None:
            written = read_algorithm(custom[kind], collective=Collective.parse(kind)).size_bytes
        other = sorted((s, size) for s, size in called.items() if size != written)
        if not other:
            continue
        if not rescale:
            shown = ", ".join(format_size(size) if size == s else f"{format_size(size)} (comm_size {format_size(s)} per rank)" for s, size in other)
            notes.append(
                f"custom {kind} {custom[kind]} was written for {format_size(written)}; ASTRA-sim runs it at that size "
                f"whatever the workload's comm_size ({shown} here); --rescale scales it to each call"
            )
            continue
        algo = read_algorithm(custom[kind], collective=Collective.parse(kind))
        for comm_size, size in sorted(called.items()):
            target = scratch / f"{kind}_{comm_size}" / "c"
            write_algorithm(algo, target, size_bytes=size)
            resized[f"{kind}@{comm_size}"] = str(target)
        notes.append(f"custom {kind} rescaled to each call's size (--rescale; ASTRA-sim itself would run {format_size(algo.size_bytes)} every time)")
    return resized, notes


def _collectives(work, result, config: SystemConfig) -> list[dict[str, Any]]:
    """Rank 0's view of every COMM_COLL it runs (ASTRA-sim's ranks agree in symmetric workloads)."""
    rows = []
    bounds = work.rank_bounds()
    for g in range(int(bounds[0]), int(bounds[1])):
        if work.node_type[g] != NodeKind.COMM_COLL:
            continue
        kind = COLLECTIVE_TYPES.get(int(work.comm_type[g]), "broadcast")
        start, end = result.start_ns[g], result.end_ns[g]
        rows.append({
            "node": int(work.node_id[g]),
            "collective": kind,
            "group": work.pg_name[g],
            "size_bytes": int(work.comm_size[g]),
            "implementation": "custom" if kind in config.custom else "/".join(config.implementations(kind)) or "-",
            "start_ns": None if np.isnan(start) else int(start),
            "end_ns": None if np.isnan(end) else int(end),
        })
    return rows


def _describe(network: AnalyticalNetwork) -> str:
    return " x ".join(f"{d.kind} {d.npus} ({d.bandwidth_gbps:g} GB/s, {d.latency_ns:g} ns)" for d in network.dimensions)
