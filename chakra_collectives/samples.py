"""The committed examples in ``sample_traces/``, made by the tool: ``make samples`` rewrites them.

* ``topology/two_servers.yaml`` -- 2 servers x 4 GPUs: NVLink between every pair of GPUs of a
  server (150 GB/s, 250 ns), one rail link between GPU ``g`` of each server (25 GB/s, 1 us);
  ASTRA-sim's ``[FullyConnected, Ring]``;
* ``workload/train_step.yaml`` and ``workload/train_step.{rank}.et`` -- one data-parallel
  training iteration of a small transformer-like model on 8 ranks;
* ``workload/hybrid_step.{rank}.et`` and ``hybrid_step.json`` -- the same model with tensor
  parallelism 2 inside data parallelism 4 (process groups);
* ``collectives/all_reduce_tacos.{rank}.et`` -- a TACOS all-reduce synthesized for the topology,
  with the chunks per NPU that make it fastest (as ``synth`` chooses them);
* ``astra-sim/`` -- what ASTRA-sim needs to run a custom ring all-reduce of 1 MiB on Ring 8
  (50 GB/s, 500 ns): the algorithm, the microbenchmark workload, ``network.yml``,
  ``system.json``, ``run.sh`` (``chakra-coll synth -t ring:8 -c all-reduce -s 1MiB -a ring
  --astra-sim sample_traces/astra-sim``).

Everything here is deterministic, so regenerating gives the same bytes (a test checks the
committed files are current).

>>> topology = sample_topology()
>>> topology.describe()
'two-servers: 8 NPUs, 32 links'
"""

from __future__ import annotations

import sys
from pathlib import Path

from chakra_collectives.astra_sim import write_astra_sim_dir
from chakra_collectives.converters.chakra_et import write_algorithm
from chakra_collectives.synth import synthesize
from chakra_collectives.topology import Topology, dump_topology, load_topology
from chakra_collectives.workload import data_parallel, hybrid_parallel, load_model_spec

SERVERS, GPUS = 2, 4
NVLINK = (150.0, 250.0)
RAIL = (25.0, 1000.0)
RANKS = SERVERS * GPUS
TACOS_SIZE = "12MiB"
"""Size the sample all-reduce is written for (the model's largest gradient); it scales to any size."""

TOPOLOGY_FILE = "topology/two_servers.yaml"
MODEL_FILE = "workload/train_step.yaml"
WORKLOAD = "workload/train_step"
HYBRID = "workload/hybrid_step"
TACOS = "collectives/all_reduce_tacos"
ASTRA_SIM = "astra-sim"

MODEL_SPEC = """\
# A small transformer-like model: one data-parallel training iteration of it is
#   chakra-coll workload data-parallel --spec sample_traces/workload/train_step.yaml -n 8 -o sample_traces/workload/train_step
# Times are one device running the whole layer; sizes are bytes (MiB = 2^20).
name: train_step
layers:
  - {name: embedding, forward: 40us, backward: 80us, gradient: 8MiB, activation: 1MiB}
  - {name: block, forward: 120us, backward: 240us, gradient: 12MiB, activation: 1MiB, repeat: 4}
  - {name: head, forward: 40us, backward: 80us, gradient: 8MiB, activation: 1MiB}
optimizer: 50us
"""

README = """\
# sample_traces

Small examples made by chakra-coll itself; `make samples` regenerates them (and a test
checks that the committed bytes are current). Units: bytes, ns, GB/s with 1 GB = 2^30 bytes.

| file | what | made by |
|---|---|---|
| `topology/two_servers.yaml` | 2 servers x 4 GPUs: NVLink between the GPUs of a server (150 GB/s, 250 ns), rail links between GPU g of each server (25 GB/s, 1000 ns); ASTRA-sim's `[FullyConnected, Ring]` | `chakra_collectives.samples.sample_topology` |
| `workload/train_step.yaml` | the model: layers with forward/backward times and gradient/activation sizes | written by hand |
| `workload/train_step.{0..7}.et` | one data-parallel training iteration on 8 ranks: forward, backward with per-layer gradient all-reduces overlapping it, optimizer step | `chakra-coll workload data-parallel --spec sample_traces/workload/train_step.yaml -n 8 -o sample_traces/workload/train_step` |
| `workload/hybrid_step.{0..7}.et`, `hybrid_step.json` | the same model with tensor parallelism 2 inside data parallelism 4; the JSON maps each `pg_name` to its ranks | `chakra-coll workload hybrid --spec sample_traces/workload/train_step.yaml --tp 2 --dp 4 -o sample_traces/workload/hybrid_step` |
| `collectives/all_reduce_tacos.{0..7}.et` | a TACOS all-reduce for the topology (12 MiB, the chunks per NPU that make it fastest; scales to any size) | `chakra-coll synth -t sample_traces/topology/two_servers.yaml -c all-reduce -s 12MiB -a tacos -o sample_traces/collectives/all_reduce_tacos` |
| `astra-sim/` | a directory ASTRA-sim runs as is: a custom ring all-reduce of 1 MiB on Ring 8 (50 GB/s, 500 ns) in `collectives/`, the microbenchmark that calls it in `workload/`, `network.yml`, `system.json`, `remote_memory.json`, `run.sh` | `chakra-coll synth -t ring:8 -c all-reduce -s 1MiB -a ring --astra-sim sample_traces/astra-sim` |

Try: `chakra-coll replay sample_traces/workload/train_step -t sample_traces/topology/two_servers.yaml -a all-reduce=sample_traces/collectives/all_reduce_tacos`
"""


def sample_topology() -> Topology:
    """2 servers x 4 GPUs: NVLink inside a server, a rail link between GPU ``g`` of each server."""
    topology = Topology(RANKS, name="two-servers")
    for server in range(SERVERS):
        base = server * GPUS
        for a in range(GPUS):
            for b in range(a + 1, GPUS):
                topology.add_link(base + a, base + b, *NVLINK, bidirectional=True)
    for gpu in range(GPUS):
        topology.add_link(gpu, GPUS + gpu, *RAIL, bidirectional=True)
    return topology


def write_samples(root: str | Path) -> list[Path]:
    """Write every sample under ``root``; returns the files written."""
    root = Path(root)
    written: list[Path] = []

    def text(name: str, content: str) -> Path:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        written.append(path)
        return path

    text("README.md", README)
    topology = sample_topology()
    text(TOPOLOGY_FILE, dump_topology(topology, comment="2 servers x 4 GPUs: NVLink inside a server, one rail link between GPU g of each server.\nchakra_collectives.samples.sample_topology wrote this file (make samples)."))
    model = load_model_spec(text(MODEL_FILE, MODEL_SPEC))
    written += data_parallel(model, RANKS).write(root / WORKLOAD)
    written += hybrid_parallel(model, 2, RANKS // 2).write(root / HYBRID)
    tacos = synthesize(topology, "all-reduce", TACOS_SIZE, algorithm="tacos")
    written += write_algorithm(tacos.algorithm, root / TACOS)
    ring8 = load_topology("ring:8")
    handoff = write_astra_sim_dir(root / ASTRA_SIM, ring8, synthesize(ring8, "all-reduce", "1MiB", algorithm="ring", chunks_per_npu=1).algorithm)
    written += sorted(p for p in handoff.directory.rglob("*") if p.is_file())
    return written


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0] if args else "sample_traces")
    for path in write_samples(root):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
