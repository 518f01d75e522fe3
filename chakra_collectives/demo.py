"""The main job on a built-in default, end to end: what ``chakra-coll demo`` (``make demo``) runs.

On the sample topology (2 servers x 4 GPUs, :mod:`~chakra_collectives.samples`) and the
sample data-parallel training iteration:

1. write the topology file and the workload, and read them back as a user's files would be;
2. synthesize an all-reduce with the topology-aware synthesizers (TACOS, ForestColl) and every
   baseline that applies (ring, biring, direct, rhd), each with the chunks per NPU that make it
   fastest, with the predicted time, the lower bounds and the efficiency of each;
3. write each as Chakra ETs, read the files back and verify them (matching, deadlock freedom,
   the all-reduce postcondition);
4. replay the training iteration with each, and compare iteration times;
5. write a Perfetto trace, the replay JSON and three pictures (of the same TACOS algorithm
   the tables report), and a directory ASTRA-sim runs.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from chakra_collectives.astra_sim import AstraSimDir, write_astra_sim_dir
from chakra_collectives.converters.chakra_et import read_algorithm, write_algorithm
from chakra_collectives.converters.chakra_et import read_workload
from chakra_collectives.replay import ReplayResult, replay, write_trace
from chakra_collectives import progress
from chakra_collectives.samples import MODEL_SPEC, RANKS, TACOS_SIZE, sample_topology
from chakra_collectives.synth import SynthesisResult, synthesize
from chakra_collectives.topology import Topology, dump_topology, load_topology
from chakra_collectives.verify import verify_algorithm
from chakra_collectives.verify.report import Report
from chakra_collectives.workload import data_parallel, load_model_spec

TOPOLOGY_AWARE = ("tacos", "forestcoll")
"""The synthesizers that plan for the demo's links."""
ALGORITHMS = (*TOPOLOGY_AWARE, "ring", "biring", "direct", "rhd")
"""The topology-aware synthesizers and every baseline that makes an all-reduce of the demo's 8 ranks."""


@dataclass
class AlgorithmRun:
    """One algorithm through the whole pipeline."""

    name: str
    prefix: Path
    synthesis: SynthesisResult
    report: Report
    replay: ReplayResult


@dataclass
class DemoResult:
    out: Path
    topology: Topology
    topology_file: Path
    workload: Path
    runs: list[AlgorithmRun]
    trace: Path
    replay_json: Path
    pictures: list[Path]
    astra_sim: AstraSimDir
    elapsed_s: float = 0.0
    model_layers: int = 0
    notes: list[str] = field(default_factory=list)

    def run(self, name: str) -> AlgorithmRun:
        return next(r for r in self.runs if r.name == name)

    def speedup(self, baseline: str, over: str = "tacos") -> float:
        """Iteration time with ``baseline`` / with ``over``."""
        return self.run(baseline).replay.total_ns / self.run(over).replay.total_ns

    def best_baseline(self) -> AlgorithmRun:
        """The baseline with the shortest iteration (ties: the first in :data:`ALGORITHMS`)."""
        return min((r for r in self.runs if r.name not in TOPOLOGY_AWARE), key=lambda r: r.replay.total_ns)

    def as_dict(self) -> dict[str, Any]:
        return {
            "output": str(self.out),
            "out": str(self.out),  # deprecated spelling of output, kept for one release
            "topology": {
                "name": self.topology.name,
                "num_npus": self.topology.num_npus,
                "num_links": len(self.topology.links),
                "file": str(self.topology_file),
                "npus": self.topology.num_npus,  # deprecated spellings, kept for one release
                "links": len(self.topology.links),
            },
            "workload": str(self.workload),
            "algorithms": [
                {
                    "algorithm": r.name,
                    "files": f"{r.prefix}.{{rank}}.et",
                    "size_bytes": r.synthesis.algorithm.size_bytes,
                    "chunks_per_npu": r.synthesis.chunks_per_npu,
                    "predicted_ns": r.synthesis.predicted_ns,
                    "best_bound_ns": None if r.synthesis.bounds is None else r.synthesis.bounds.best_ns,
                    "efficiency": r.synthesis.efficiency,
                    "verified": r.report.ok,
                    "iteration_ns": r.replay.total_ns,
                    "exposed_communication_ns": max(x.exposed_communication_ns for x in r.replay.ranks),
                }
                for r in self.runs
            ],
            "speedup": {name: self.speedup(name) for name in ALGORITHMS if name != "tacos"},
            "best_baseline": self.best_baseline().name,
            "trace": str(self.trace),
            "replay_json": str(self.replay_json),
            "pictures": [str(p) for p in self.pictures],
            "astra_sim": self.astra_sim.as_dict(),
            "elapsed_s": self.elapsed_s,
            "deprecated": {"out": "output", "topology.npus": "topology.num_npus", "topology.links": "topology.num_links"},
        }


def run_demo(out: str | Path = "demo-out", *, on_step: Callable[[str], None] | None = None, pictures: bool = True) -> DemoResult:
    """Run the demo into ``out`` (see the module docstring); progress goes to
    :mod:`chakra_collectives.progress` (``on_step(name)``, deprecated, is also called)."""
    step = on_step or (lambda name: None)
    started = time.perf_counter()
    out = Path(out)
    with progress.task("demo", total=len(ALGORITHMS) + 2, unit="steps") as steps:
        step("topology and workload")
        with progress.task("topology and workload"):
            topology_file = out / "topology" / "two_servers.yaml"
            topology_file.parent.mkdir(parents=True, exist_ok=True)
            topology_file.write_text(dump_topology(sample_topology(), comment="the demo's topology: 2 servers x 4 GPUs (chakra-coll demo)"))
            topology = load_topology(str(topology_file))
            model_file = out / "workload" / "train_step.yaml"
            model_file.parent.mkdir(parents=True, exist_ok=True)
            model_file.write_text(MODEL_SPEC)
            model = load_model_spec(model_file)
            workload_prefix = out / "workload" / "train_step"
            data_parallel(model, RANKS).write(workload_prefix)
            workload = read_workload(workload_prefix)
        steps.advance()

        runs = []
        for name in ALGORITHMS:
            step(f"{name}: synthesize, verify, replay")
            with progress.task(name):
                synthesis = synthesize(topology, "all-reduce", TACOS_SIZE, algorithm=name)
                prefix = out / "collectives" / f"all_reduce_{name}"
                write_algorithm(synthesis.algorithm, prefix)
                from_files = read_algorithm(prefix)
                report = verify_algorithm(from_files, subject=str(prefix))
                result = replay(workload, topology, algorithms={from_files.collective: from_files}, record_links=name == "tacos")
            runs.append(AlgorithmRun(name, prefix, synthesis, report, result))
            steps.advance()

        step("trace and pictures")
        with progress.task("trace and pictures"):
            tacos = runs[0]
            trace = write_trace(tacos.replay, topology, out / "train_step.tacos.trace.json")
            replay_json = out / "replay.tacos.json"
            replay_json.write_text(json.dumps(tacos.replay.as_dict(timeline=True), indent=1) + "\n")
            drawn: list[Path] = []
            if pictures:
                from chakra_collectives.plot import load_replay_document, plot_algorithm, plot_links, plot_timeline

                document = load_replay_document(replay_json, need_links=True)
                drawn.append(plot_timeline(document, out / "timeline.png"))
                drawn.append(plot_links(document, out / "links.png"))
                drawn.append(plot_algorithm(tacos.synthesis.algorithm, topology, out / "algorithm.png"))  # the algorithm the tables report

            step("ASTRA-sim directory")
            handoff = write_astra_sim_dir(out / "astra-sim", topology, tacos.synthesis.algorithm)
        steps.advance()
    return DemoResult(
        out=out,
        topology=topology,
        topology_file=topology_file,
        workload=workload_prefix,
        runs=runs,
        trace=trace,
        replay_json=replay_json,
        pictures=drawn,
        astra_sim=handoff,
        elapsed_s=time.perf_counter() - started,
        model_layers=len(model.layers),
    )


__all__ = ["ALGORITHMS", "AlgorithmRun", "DemoResult", "run_demo"]
