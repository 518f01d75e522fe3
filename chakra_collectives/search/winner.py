"""The winner of a group, as files: its topology, its collective algorithms, an ASTRA-sim folder.

For the best row of a group (:mod:`~chakra_collectives.search.report`) the winner's
collectives are synthesized again here (synthesis is deterministic: the same algorithms the
search timed) and written under ``DIR``:

* ``topology.yaml`` -- the fabric as chakra-coll's topology file (``load_topology`` reads it);
* ``collectives/NAME.{rank}.et`` -- each synthesized collective (``chakra-coll verify`` proves it);
* ``astra-sim/`` -- what ASTRA-sim runs: the collectives as custom implementations, the
  workload, the system and network files, ``run.sh``
  (:func:`~chakra_collectives.astra_sim.write_astra_sim_dir`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chakra_collectives.astra_sim import write_astra_sim_dir
from chakra_collectives.converters.chakra_et import write_algorithm
from chakra_collectives.errors import ChakraCollError, InputError
from chakra_collectives.search.engine import Evaluation
from chakra_collectives.search.space import SearchSpace
from chakra_collectives.search.tasks import synthesize_collective
from chakra_collectives.topology import dump_topology


@dataclass
class WinnerFiles:
    """What :func:`write_winner` wrote."""

    directory: Path
    topology: Path
    collectives: dict[str, str] = field(default_factory=dict)
    """Collective -> ET prefix."""
    astra_sim: Path | None = None
    astra_sim_command: str | None = None
    note: str | None = None
    """Why something was not written (e.g. no ASTRA-sim folder for group-only collectives)."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "directory": str(self.directory),
            "topology": str(self.topology),
            "collectives": self.collectives,
            "astra_sim": None if self.astra_sim is None else str(self.astra_sim),
            "astra_sim_command": self.astra_sim_command,
            "note": self.note,
        }


def write_winner(evaluation: Evaluation, space: SearchSpace, directory: Path) -> WinnerFiles:
    """Write the files of ``evaluation`` (a group's best) under ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    topology = evaluation.topology.topology
    topology_file = directory / "topology.yaml"
    comment = f"chakra-coll search {space.name}: winner for {evaluation.workload.variant.label} ({evaluation.topology.label}, {evaluation.algorithms.label})"
    topology_file.write_text(dump_topology(topology, comment=comment))
    files = WinnerFiles(directory, topology_file)
    algorithms = []
    for need in evaluation.needs:
        made = synthesize_collective(topology, need.algorithm, need.collective, need.size_bytes, need.chunks_per_npu, space.probe_sizes, space.network_model)
        if made.error is not None or made.algorithm is None:
            raise InputError(f"the winner's {need.collective.value} could not be made again: {made.error}")
        prefix = directory / "collectives" / need.collective.value.replace("-", "_")
        write_algorithm(made.algorithm, prefix)
        files.collectives[need.collective.value] = str(prefix)
        algorithms.append(made.algorithm)
    if not algorithms:
        files.note = f"no ASTRA-sim folder: every collective of {evaluation.workload.variant.label} runs over process groups ({space.group_algorithm})"
        return files
    try:
        written = write_astra_sim_dir(directory / "astra-sim", topology, algorithms, workload=evaluation.workload.variant.generated)
    except ChakraCollError as error:
        files.note = f"no ASTRA-sim folder: {error}"
        return files
    files.astra_sim = written.directory
    files.astra_sim_command = written.command()
    return files


__all__ = ["WinnerFiles", "write_winner"]
