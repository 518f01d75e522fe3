"""Opt-in: run the real ASTRA-sim binaries on what chakra-coll writes and compare with its model.

Set ``ASTRA_SIM_BIN`` to ``AstraSim_Analytical_Congestion_Aware`` of an astra-sim build
(``build/astra_analytical/build.sh``); the congestion-unaware binary is taken from the same
folder (or ``ASTRA_SIM_UNAWARE_BIN``). Skipped otherwise.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
from pathlib import Path

import pytest

from chakra_collectives.converters.astra_sim import AnalyticalNetwork, Dimension
from chakra_collectives.astra_system import SystemConfig, read_comm_groups, simulate
from chakra_collectives.workload import data_parallel, groups_path, hybrid_parallel, microbenchmark
from chakra_collectives.workload.spec import uniform_model

AWARE = os.environ.get("ASTRA_SIM_BIN")
pytestmark = pytest.mark.skipif(not AWARE, reason="set ASTRA_SIM_BIN to an AstraSim_Analytical_Congestion_Aware binary")
REMOTE_MEMORY = {"memory-type": "NO_MEMORY_EXPANSION"}


def binary(backend: str) -> str:
    if backend == "aware":
        return AWARE  # type: ignore[return-value]
    return os.environ.get("ASTRA_SIM_UNAWARE_BIN") or str(Path(AWARE).with_name("AstraSim_Analytical_Congestion_Unaware"))  # type: ignore[arg-type]


def run_binary(backend: str, workdir: Path, workload: str, groups: Path | None = None) -> list[int]:
    """Every rank's ``sys[i] finished, T cycles``, in rank order."""
    (workdir / "remote_memory.json").write_text(json.dumps(REMOTE_MEMORY))
    args = [binary(backend), f"--workload-configuration={workload}", "--system-configuration=system.json",
            "--remote-memory-configuration=remote_memory.json", "--network-configuration=network.yml"]
    if groups is not None:
        args.append(f"--comm-group-configuration={groups}")
    done = subprocess.run(args, cwd=workdir, capture_output=True, text=True, timeout=600)
    found = dict((int(r), int(t)) for r, t in re.findall(r"sys\[(\d+)\] finished, (\d+) cycles", done.stdout + done.stderr))
    return [found[r] for r in sorted(found)]


def random_case(rng: random.Random) -> tuple[AnalyticalNetwork, dict, object, bool]:
    ndim = rng.choice([1, 1, 2, 3])
    kinds = ["Ring", "FullyConnected", "Switch"]
    dims = tuple(Dimension(rng.choice(kinds), rng.choice([4, 8] if ndim == 1 else [2, 4]), rng.choice([25.0, 50.0]), rng.choice([200.0, 500.0])) for _ in range(ndim))
    algorithms = ["ring", "direct", "halvingDoubling"]
    doc = {"scheduling-policy": rng.choice(["FIFO", "LIFO"]), "preferred-dataset-splits": rng.choice([1, 2, 4]),
           "active-chunks-per-dimension": rng.choice([1, 2]), "collective-optimization": rng.choice(["baseline", "localBWAware"]),
           "local-mem-bw": rng.choice([50, 1600]), "endpoint-delay": rng.choice([1, 10])}
    for collective in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all"):
        choices = [a for a in algorithms if not (a == "halvingDoubling" and collective == "all-to-all")]
        doc[f"{collective}-implementation"] = [rng.choice(choices) for _ in dims]
    npus = 1
    for d in dims:
        npus *= d.npus
    if rng.random() < 0.5:
        workload = microbenchmark(rng.choice(["all-reduce", "all-gather", "reduce-scatter", "all-to-all"]), npus, rng.choice([65536, 2**20]))
    else:
        workload = data_parallel(uniform_model(layers=3, forward="20us", gradient="2MiB"), npus)
    return AnalyticalNetwork(dims), doc, workload, ndim == 1


@pytest.mark.parametrize("seed", range(12))
def test_native_collectives_equal_the_binary(tmp_path, seed):
    rng = random.Random(seed)
    network, doc, workload, one = random_case(rng)
    backend = "aware" if one else "unaware"
    workload.write(tmp_path / "w")
    (tmp_path / "network.yml").write_text(network.to_yaml())
    (tmp_path / "system.json").write_text(json.dumps(doc))
    expected = run_binary(backend, tmp_path, "w")
    ours = simulate(tmp_path / "w", network, SystemConfig.from_dict(doc), backend=backend)
    assert ours.finish_ns == expected


@pytest.mark.parametrize("tp, dp", [(2, 4), (4, 2)])
def test_process_groups_equal_the_binary(tmp_path, tp, dp):
    network = AnalyticalNetwork((Dimension("FullyConnected", tp, 100.0, 200.0), Dimension("Switch", dp, 25.0, 700.0)))
    doc = {"preferred-dataset-splits": 2, "local-mem-bw": 1600, "endpoint-delay": 1,
           "all-reduce-implementation": ["ring", "ring"], "all-gather-implementation": ["ring", "ring"],
           "reduce-scatter-implementation": ["ring", "ring"], "all-to-all-implementation": ["ring", "ring"]}
    hybrid_parallel(uniform_model(layers=2, forward="16us", gradient="4MiB", activation="1MiB"), tp, dp).write(tmp_path / "h")
    (tmp_path / "network.yml").write_text(network.to_yaml())
    (tmp_path / "system.json").write_text(json.dumps(doc))
    expected = run_binary("unaware", tmp_path, "h", groups_path(tmp_path / "h"))
    ours = simulate(tmp_path / "h", network, SystemConfig.from_dict(doc), backend="unaware", comm_groups=read_comm_groups(groups_path(tmp_path / "h"), tp * dp))
    assert ours.finish_ns == expected


@pytest.mark.parametrize("spec, algorithm", [("sample_traces/topology/two_servers.yaml", "tacos"), ("torus2d:4x4", "tacos"), ("switch:16", "direct"), ("ring:8", "best"), ("ring:2", "ring")])
def test_handoff_directories_run_with_the_binary_run_sh_picks(tmp_path, spec, algorithm):
    from chakra_collectives.astra_sim import write_astra_sim_dir
    from chakra_collectives.synth import synthesize
    from chakra_collectives.topology import load_topology

    topology = load_topology(str(Path(__file__).parents[1] / spec) if spec.endswith(".yaml") else spec)
    written = write_astra_sim_dir(tmp_path / "d", topology, synthesize(topology, "all-reduce", 2**20, algorithm=algorithm, chunks_per_npu=2).algorithm)
    done = subprocess.run(["sh", str(tmp_path / "d/run.sh")], env={**os.environ, "ASTRA_SIM_BIN": AWARE}, capture_output=True, text=True, timeout=600)  # type: ignore[dict-item]
    times = [int(t) for t in re.findall(r"finished, (\d+) cycles", done.stdout + done.stderr)]
    assert len(times) == topology.num_npus, done.stderr[-500:]
    assert max(times) == written.expected_ns
