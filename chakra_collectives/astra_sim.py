"""Hand collectives to ASTRA-sim: a directory it runs with no hand edits.

:func:`write_astra_sim_dir` writes, under one directory, everything ASTRA-sim's analytical
backend takes on its command line (``AstraSimDir.command``: ``AstraSim_Analytical_Congestion_Aware
--workload-configuration=... --system-configuration=... --remote-memory-configuration=...
--network-configuration=... [--comm-group-configuration=...]``), for the binary that accepts
the network: the congestion-aware one for a one-dimension network, the congestion-unaware one
(which does not model contention) for several dimensions -- the aware binary exits on those.
A one-dimension Ring of 2 NPUs is written as FullyConnected 2 (the same links; the aware binary
aborts on a Ring of 2).

* ``collectives/NAME.{rank}.et`` -- the algorithms, as custom collectives;
* ``system.json`` -- ``all-reduce-implementation-custom`` (etc.) pointing at them
  (:func:`~chakra_collectives.converters.astra_sim.system_config`);
* ``network.yml`` -- the analytical network, when the topology is a product of Ring /
  FullyConnected / Switch dimensions (:func:`~chakra_collectives.converters.astra_sim.analytical_network`
  says why not otherwise);
* ``remote_memory.json`` -- no memory expansion;
* ``workload/NAME.{rank}.et`` -- by default one collective of the algorithm's type and size
  (``comm_size`` as ASTRA-sim reads it: an all-gather's is each rank's shard; ASTRA-sim runs a
  custom collective at the size it was written for, whatever the workload's ``comm_size``);
  ``run.sh`` -- the command line, run from the directory (paths are relative).

``expected_ns`` is what the model of ASTRA-sim (:mod:`chakra_collectives.astra_system`)
predicts the chosen binary reports: the largest ``sys[i] finished, T cycles``.

The file formats are :mod:`chakra_collectives.converters`' (``chakra_et``, ``astra_sim``);
this module only assembles the directory and predicts what ASTRA-sim will report.

>>> import tempfile, pathlib
>>> from chakra_collectives.synth.baselines import ring
>>> from chakra_collectives.topology import load_topology
>>> with tempfile.TemporaryDirectory() as tmp:
...     written = write_astra_sim_dir(pathlib.Path(tmp) / "astra", load_topology("ring:4"), ring(Collective.ALL_GATHER, 4, size_bytes=2**20))
...     files = sorted(p.name for p in (pathlib.Path(tmp) / "astra").iterdir())
>>> files, written.expected_ns         # 3 steps of int(500 + 256 KiB / 50 GB/s) ns
(['collectives', 'network.yml', 'remote_memory.json', 'run.sh', 'system.json', 'workload'], 16146.0)
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import stat
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from chakra_collectives.converters.astra_sim import CUSTOM_KEYS, REMOTE_MEMORY, AnalyticalNetwork, NotExpressible, analytical_network, system_config
from chakra_collectives.converters.chakra_et import write_algorithm
from chakra_collectives.astra_system.report import default_backend
from chakra_collectives.converters.chakra_et.workload_reader import read_workload
from chakra_collectives.converters.chakra_et.columns_file import save_columns
from chakra_collectives.converters.chakra_et.writer import write_algorithm_hashed
from chakra_collectives.converters.chakra_et.written_workload import written_workload
from chakra_collectives.ir.workload import Workload, collective_name
from chakra_collectives.errors import InputError
from chakra_collectives.ir import Collective, CollectiveAlgorithm
from chakra_collectives.topology import Topology
from chakra_collectives.workload import GeneratedWorkload, groups_path, microbenchmark

BINARIES = {"aware": "AstraSim_Analytical_Congestion_Aware", "unaware": "AstraSim_Analytical_Congestion_Unaware"}
"""ASTRA-sim's analytical binaries by backend."""
BINARY = BINARIES["aware"]
BUILD_DIR = "build/astra_analytical/build/bin"
"""Where ASTRA-sim's build script puts the analytical binaries, inside an astra-sim checkout."""
BINARY_PATH = f"{BUILD_DIR}/{BINARY}"


# --------------------------------------------------------------------------- directory
@dataclass
class AstraSimDir:
    """What :func:`write_astra_sim_dir` wrote, and how to run it."""

    directory: Path
    workload: str
    """Workload prefix, relative to the directory."""
    collectives: dict[str, str]
    """Collective name -> ET prefix, relative to the directory."""
    network: AnalyticalNetwork | None
    network_reason: str | None
    """Why there is no ``network.yml`` (``None`` when there is one)."""
    comm_groups: str | None = None
    expected_ns: float | None = None
    """What the model of ASTRA-sim predicts the binary reports (the slowest rank's cycles)."""
    warnings: list[str] = field(default_factory=list)
    backend: str = "aware"
    """Which binary runs the directory: ``aware`` (one dimension) or ``unaware``."""

    def arguments(self) -> list[str]:
        network = "network.yml" if self.network is not None else "YOUR_NETWORK.yml"
        args = [
            f"--workload-configuration={self.workload}",
            "--system-configuration=system.json",
            "--remote-memory-configuration=remote_memory.json",
            f"--network-configuration={network}",
        ]
        if self.comm_groups:
            args.append(f"--comm-group-configuration={self.comm_groups}")
        return args

    @property
    def binary(self) -> str:
        return BINARIES[self.backend]

    def command(self, binary: str | None = None) -> str:
        """The shell command, run from inside the directory."""
        binary = binary or f"$ASTRA_SIM/{BUILD_DIR}/{self.binary}"
        return f"cd {self.directory} && {binary} " + " ".join(self.arguments())

    def as_dict(self) -> dict[str, Any]:
        return {
            "directory": str(self.directory),
            "workload": self.workload,
            "collectives": self.collectives,
            "network": None if self.network is None else self.network.document(),
            "network_reason": self.network_reason,
            "comm_groups": self.comm_groups,
            "expected_ns": self.expected_ns,
            "backend": self.backend,
            "binary": self.binary,
            "command": self.command(),
            "warnings": self.warnings,
        }


def write_astra_sim_dir(
    directory: str | Path,
    topology: Topology,
    algorithms: CollectiveAlgorithm | list[CollectiveAlgorithm],
    *,
    workload: GeneratedWorkload | None = None,
) -> AstraSimDir:
    """Write a directory ASTRA-sim runs as is (see the module docstring); all or nothing.

    ``workload`` defaults to one collective of the (single) algorithm's type and size. An
    existing ``directory`` is replaced only if it is one this function wrote before.
    """
    directory = Path(directory)
    algos = [algorithms] if isinstance(algorithms, CollectiveAlgorithm) else list(algorithms)
    if not algos:
        raise InputError("no collective algorithm to hand to ASTRA-sim")
    seen: set[Collective] = set()
    for algo in algos:
        if algo.collective not in CUSTOM_KEYS:
            raise InputError(f"ASTRA-sim runs custom {', '.join(c.value for c in CUSTOM_KEYS)} only, not {algo.collective.value}")
        if algo.collective in seen:
            raise InputError(f"two algorithms for {algo.collective.value}: ASTRA-sim takes one custom implementation per collective")
        if algo.num_ranks != topology.num_npus:
            raise InputError(f"the {algo.collective.value} algorithm has {algo.num_ranks} ranks but {topology.name} has {topology.num_npus} NPUs")
        seen.add(algo.collective)
    if workload is None:
        if len(algos) != 1:
            raise InputError("several algorithms: give the workload that calls them")
        workload = microbenchmark(algos[0].collective, algos[0].num_ranks, _comm_size(algos[0], algos[0].size_bytes))
    try:
        network, reason = analytical_network(topology), None
    except NotExpressible as error:
        network, reason = None, error.message
    if network is not None and len(network.dimensions) == 1 and network.dimensions[0].kind == "Ring" and network.dimensions[0].npus == 2:
        network = AnalyticalNetwork((replace(network.dimensions[0], kind="FullyConnected"),))
    return _all_or_nothing(directory, lambda staging: _write(staging, directory, topology, algos, workload, network, reason))


def _all_or_nothing(directory: Path, write: Callable[[Path], AstraSimDir]) -> AstraSimDir:
    """``write(staging)`` into a staging folder beside ``directory``, then swapped in; nothing
    is left behind when writing fails (a disk error is one line naming the file)."""
    _check_target(directory)
    staging = directory.with_name(f".{directory.name}.{os.getpid()}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        result = write(staging)
        _swap_in(staging, directory)
    except OSError as error:
        shutil.rmtree(staging, ignore_errors=True)
        raise InputError(f"cannot write: {error.strerror}", path=error.filename or directory) from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return result


PER_NODE_FILE = "per_node_collectives.yaml"
"""The ``per-node-custom-implementation`` map a grouped directory's ``system.json`` names."""

AlgorithmFor = Callable[[Collective, tuple[int, ...], int], CollectiveAlgorithm]
"""``algorithm_for(collective, members, size_bytes)``: the algorithm one call runs."""


def write_grouped_astra_sim_dir(
    directory: str | Path, topology: Topology, workload: GeneratedWorkload, algorithm_for: AlgorithmFor,
) -> AstraSimDir:
    """A directory ASTRA-sim runs ``workload`` from, every collective call over a process group
    with its own algorithm; all or nothing.

    ASTRA-sim's ``per-node-custom-implementation`` (``docs/et-conventions.md``) maps a workload
    node id to a custom collective's ET prefix, one map for every rank's file. The workload is
    written with rank ``r``'s node ids moved up by ``r`` times a power of ten above any id, so
    that every rank's collective nodes have ids of their own; each distinct (collective, group,
    size) gets its algorithm from ``algorithm_for`` written as ``collectives/TYPE_gGROUP_SIZE``
    at that size (ASTRA-sim runs a custom collective at the size it was written for; its ranks
    are the group's positions, the group's i-th member running rank i), and
    ``per_node_collectives.yaml`` maps every collective node to it. Collective types the workload
    does not call keep ASTRA-sim's native ring. ``expected_ns`` stays ``None``: chakra-coll's model
    of ASTRA-sim does not read per-node maps.
    """
    directory = Path(directory)
    if not workload.groups:
        raise InputError("the workload has no process groups: use write_astra_sim_dir")
    try:
        network, reason = analytical_network(topology), None
    except NotExpressible as error:
        network, reason = None, error.message
    return _all_or_nothing(directory, lambda staging: _write_grouped(staging, directory, topology, workload, algorithm_for, network, reason))


def _write_grouped(root, directory, topology, workload, algorithm_for, network, reason) -> AstraSimDir:
    root.mkdir(parents=True)
    renumbered = copy.deepcopy(workload)
    nodes = renumbered.builder.nodes
    stride = 10 ** len(str(max(len(rank_nodes) for rank_nodes in nodes)))
    per_node: dict[int, str] = {}
    written: dict[tuple[str, str, int], str] = {}
    for rank, rank_nodes in enumerate(nodes):
        for node in rank_nodes:
            node.id += rank * stride
            for deps in (node.data_deps, node.ctrl_deps):
                shifted = [d + rank * stride for d in deps]
                del deps[:]
                deps.extend(shifted)
            attrs = {a.name: a for a in node.attr}
            if "comm_type" not in attrs or "pg_name" not in attrs:
                continue
            group = attrs["pg_name"].string_val
            members = tuple(renumbered.groups[group])
            collective = Collective.parse(collective_name(attrs["comm_type"].int64_val))
            if collective not in CUSTOM_KEYS or len(members) < 2:
                continue
            size = attrs["comm_size"].int64_val * (len(members) if collective is Collective.ALL_GATHER else 1)
            key = (collective.value, group, size)
            if key not in written:
                prefix = f"collectives/{collective.value.replace('-', '_')}_g{group}_{size}"
                write_algorithm(algorithm_for(collective, members, size), root / prefix, size_bytes=size)
                written[key] = prefix
            per_node[int(node.id)] = written[key]
    workload_prefix = f"workload/{renumbered.name}"
    renumbered.write(root / workload_prefix)
    comm_groups = str(groups_path(workload_prefix))
    dims = 1 if network is None else len(network.dimensions)
    config = system_config({}, dimensions=dims)
    config["per-node-custom-implementation"] = PER_NODE_FILE
    (root / "system.json").write_text(json.dumps(config, indent=2) + "\n")
    (root / PER_NODE_FILE).write_text("".join(f"{node}: {prefix}\n" for node, prefix in sorted(per_node.items())))
    (root / "remote_memory.json").write_text(json.dumps(REMOTE_MEMORY, indent=2) + "\n")
    if network is not None:
        (root / "network.yml").write_text(network.to_yaml())
    collectives = {f"{c} group {g} ({size} B)": prefix for (c, g, size), prefix in written.items()}
    result = AstraSimDir(directory, workload_prefix, collectives, network, reason, comm_groups)
    if network is not None:
        result.backend = default_backend(network)
    result.warnings.append(
        f"{len(per_node)} collective nodes run {len(written)} custom algorithms through {PER_NODE_FILE}; "
        "chakra-coll's model of ASTRA-sim does not read per-node maps, so no expected time"
    )
    run = root / "run.sh"
    run.write_text(_run_script(result, topology))
    run.chmod(run.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return result


_MARKERS = ("system.json", "run.sh")


def _check_target(directory: Path) -> None:
    if directory.exists():
        if not directory.is_dir():
            raise InputError("exists and is not a directory", path=directory)
        if any(directory.iterdir()) and not all((directory / m).is_file() for m in _MARKERS):
            raise InputError("exists and is not a directory chakra-coll wrote for ASTRA-sim; choose a new one", path=directory)


def _swap_in(staging: Path, directory: Path) -> None:
    old = directory.with_name(f".{directory.name}.{os.getpid()}.old")
    if directory.exists():
        os.replace(directory, old)
    os.replace(staging, directory)
    shutil.rmtree(old, ignore_errors=True)


def _write(
    root: Path,
    directory: Path,
    topology: Topology,
    algos: list[CollectiveAlgorithm],
    workload: GeneratedWorkload,
    network: AnalyticalNetwork | None,
    reason: str | None,
) -> AstraSimDir:
    root.mkdir(parents=True)
    collectives = {algo.collective.value: f"collectives/{algo.collective.value.replace('-', '_')}" for algo in algos}
    # what the custom ETs read as, for the model (no second reading); the model runs before they are written
    # (their writer forks: after it, the model cost about 0.7 s more system time at 1,024 ranks)
    as_read = {prefix: written_workload(algo, root / prefix) for algo, prefix in zip(algos, collectives.values())}
    written = {prefix: workload_read for prefix, workload_read in as_read.items() if workload_read is not None}
    if len(written) < len(algos):  # the model reads some of them: write them first
        _write_collectives(root, algos, collectives, written)
    workload_prefix = f"workload/{workload.name}"
    workload.write(root / workload_prefix)
    comm_groups = str(groups_path(workload_prefix)) if workload.groups else None
    custom = {Collective.parse(name): prefix for name, prefix in collectives.items()}
    dims = 1 if network is None else len(network.dimensions)
    (root / "system.json").write_text(json.dumps(system_config(custom, dimensions=dims), indent=2) + "\n")
    (root / "remote_memory.json").write_text(json.dumps(REMOTE_MEMORY, indent=2) + "\n")
    if network is not None:
        (root / "network.yml").write_text(network.to_yaml())
    result = AstraSimDir(directory, workload_prefix, collectives, network, reason, comm_groups)
    result.warnings = _size_warnings(workload, algos)
    if network is not None:
        result.backend = default_backend(network)
        if result.backend == "unaware":
            result.warnings.append(
                f"{len(network.dimensions)} network dimensions: run.sh runs {BINARIES['unaware']} (the aware binary takes one); "
                "it does not model contention: messages sharing a link never wait for one another"
            )
        result.expected_ns = _expected_ns(root, workload_prefix, comm_groups, network, result.backend, written)
    if len(written) == len(algos):
        _write_collectives(root, algos, collectives, written)
    run = root / "run.sh"
    run.write_text(_run_script(result, topology))
    run.chmod(run.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return result


def _write_collectives(root: Path, algos: list[CollectiveAlgorithm], collectives: dict[str, str], written: dict[str, Workload]) -> None:
    """Each algorithm's ETs, and beside those built in memory (``written``) the columns they read as."""
    for algo in algos:
        prefix = collectives[algo.collective.value]
        _, digest = write_algorithm_hashed(algo, root / prefix)  # the files' digest as written: none read back
        if prefix in written:
            save_columns(written[prefix], root / prefix, written[prefix].paths, digest=digest)  # replay reads these instead of decoding large ETs


def _size_warnings(workload: GeneratedWorkload, algos: list[CollectiveAlgorithm]) -> list[str]:
    """Calls a custom collective cannot serve as written: another size, or another group size."""
    by_type = {algo.collective.value: algo for algo in algos}
    warnings = []
    seen = set()
    for node in workload.builder.nodes[0]:
        attrs = {a.name: a for a in node.attr}
        if "comm_type" not in attrs:
            continue
        name = collective_name(attrs["comm_type"].int64_val)
        algo = by_type.get(name)
        ranks = len(workload.groups[attrs["pg_name"].string_val]) if "pg_name" in attrs else workload.num_ranks
        if algo is None:
            continue
        size = Collective.parse(name).size_of_call(attrs["comm_size"].int64_val, ranks)  # all-gather: comm_size is the shard
        if (name, size, ranks) in seen:
            continue
        seen.add((name, size, ranks))
        if ranks != algo.num_ranks:
            warnings.append(f"the workload calls {name} over {ranks} ranks but the custom ETs have {algo.num_ranks}")
        elif size != algo.size_bytes:
            warnings.append(
                f"the workload calls {name} of {size} bytes but the custom ETs move {algo.size_bytes}; "
                "ASTRA-sim runs a custom collective at the size it was written for"
            )
    return warnings


def _comm_size(algo: CollectiveAlgorithm, size_bytes: int) -> int:
    """``comm_size`` of a call of ``algo``'s collective of ``size_bytes`` (the IR's size, the larger
    buffer): each rank's input, so an all-gather's shard."""
    return size_bytes // algo.num_ranks if algo.collective is Collective.ALL_GATHER else size_bytes


def _expected_ns(
    root: Path, workload_prefix: str, comm_groups: str | None, network: AnalyticalNetwork, backend: str, written: dict[str, Workload]
) -> float | None:
    """The model's prediction of the slowest rank's ``sys[i] finished, T cycles`` (``written``:
    custom prefixes and what their files read as)."""
    from chakra_collectives.astra_system import SystemConfig, read_comm_groups, simulate

    work = read_workload(root / workload_prefix)
    groups = read_comm_groups(root / comm_groups, work.num_ranks) if comm_groups else None
    config = SystemConfig.from_file(root / "system.json")
    try:
        result = simulate(work, network, config, backend=backend, comm_groups=groups, custom_base=root, custom_read=written)
    except InputError:
        return None
    return float(result.makespan_ns) if result.finished else None


def _run_script(result: AstraSimDir, topology: Topology) -> str:
    lines = [
        "#!/bin/sh",
        f"# Run ASTRA-sim's analytical backend on {topology.name} (written by chakra-coll).",
        "# Set ASTRA_SIM to your astra-sim checkout (built with build/astra_analytical/build.sh),",
        "# or ASTRA_SIM_BIN to the binary itself.",
    ]
    if result.backend == "unaware":
        lines += [
            f"# The network has {len(result.network.dimensions)} dimensions and {BINARIES['aware']} takes one",  # type: ignore[union-attr]
            f"# (it exits: 'only support 1-dim topology'), so this runs {BINARIES['unaware']},",
            "# which does not model contention: messages sharing a link never wait for one another.",
        ]
    if result.network is None:
        lines += [f"# No network.yml: {result.network_reason}.", "# Set NETWORK to an ASTRA-sim network file of your own."]
    if result.expected_ns is not None:
        lines.append(f"# chakra-coll's model of ASTRA-sim predicts: sys[*] finished, {result.expected_ns:.0f} cycles")
    lines += [
        "set -e",
        'cd "$(dirname "$0")"',
        f'BIN="${{ASTRA_SIM_BIN:-${{ASTRA_SIM:?set ASTRA_SIM to your astra-sim checkout}}/{BUILD_DIR}/{result.binary}}}"',
    ]
    if result.backend == "unaware":
        lines.append('case "$BIN" in *_Congestion_Aware) BIN="${BIN%_Congestion_Aware}_Congestion_Unaware" ;; esac')
    args = result.arguments()
    if result.network is None:
        args = [a if not a.startswith("--network-configuration=") else '--network-configuration="${NETWORK:?set NETWORK to an ASTRA-sim network file}"' for a in args]
    lines.append('exec "$BIN" \\')
    lines += [f"    {a} \\" for a in args[:-1]] + [f"    {args[-1]}"]
    return "\n".join(lines) + "\n"


__all__ = ["AstraSimDir", "BINARIES", "BINARY", "PER_NODE_FILE", "write_astra_sim_dir", "write_grouped_astra_sim_dir"]
