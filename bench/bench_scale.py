"""Scale: whole commands at 256 to 16,384 NPUs, each run in a fresh process.

``python bench/bench_scale.py [--full] [--repeat N] [--only synth,baselines,write,read,replay,small] [--before DIR] [--lock FILE] [--collective C] [--topologies T]``

Every row is one command (``chakra-coll ...``) run as a user runs it, in its own process:
wall seconds, CPU seconds (user + system: what the machine's load does not inflate), peak RSS
(the child's ``ru_maxrss``), and the phases the command reports. Tables:

* **synth**: ``synth -t mesh2d|torus2d:RxC -c all-gather -s 64MiB -a tacos -o DIR --json`` at
  256 and 1,024 NPUs (``--full``: 4,096 and 16,384 too): synthesis, prediction, bounds and
  ET-write seconds, operations, files on disk, efficiency against the bound. Targets: 4,096
  NPUs <= 90 s, <= 2 GB, efficiency >= 0.90; 16,384 <= 10 min, <= 8 GB; write memory <= 2x files.
  ``--collective all-reduce`` for the All-Reduce; ``--topologies torus3d:34x34x34`` for the
  TACOS paper's 40K row (``--only synth --collective all-reduce --topologies torus3d:34x34x34
  --lock FILE --timeout 3600``: hours of matching on 2 cores today).
* **baselines**: ring, direct, rhd all-reduce and tree reduce at 1,024 ranks built alone, each in
  a fresh process (target <= 2 s, <= 0.5 GB), and ``synth -t ring:1024 -a ring -c all-reduce``
  whole.
* **write**: TACOS All-Gather synthesized in a fresh process, then written alone: seconds and
  the write's own peak memory above what the process held before it (the kernel's peak-RSS
  mark reset just before the write; forked writer processes counted by their own peak) beside
  the files' size on disk (target: write memory <= 2x the files).
* **read**: the 1,024-rank ring all-reduce's files (5.2M nodes): ``read_algorithm`` alone
  (nodes/s, target >= 600k) and ``inspect --json`` (target <= 10 s).
* **replay**: a 1,024-rank all-reduce microbenchmark with that algorithm on ``ring:1024``
  (target <= 15 s, <= 1.5 GB).
* **probe** (``--only probe``): one TACOS matching at a size too large to finish
  (``--probe torus3d:34x34x34``, the TACOS paper's 40K), stopped after ``--probe-budget``
  seconds: the fraction of (NPU, chunk) pairs matched over time, and what the rest would take.
* **after** (``--only after [--before DIR]``): lowering, prediction and write alone, from one
  matched schedule saved once (``--after torus2d:64x64,torus2d:128x128``), by this checkout and the code in
  ``DIR``: seconds and each phase's peak memory, same schedule, same run.
* **small**: TACOS on 64-NPU meshes in one process (median; target <= 10 ms) and ``synth -t
  mesh2d:8x8 -a tacos`` end to end (target <= 0.7 s).

Medians of ``--repeat`` runs (default 1: the big ones take minutes). The machine is shared:
compare CPU seconds, and ratios within one run: ``--before DIR`` runs every synth command also
from a checkout of the code before (``git worktree add --detach DIR COMMIT``), alternating run
by run, and prints this code's CPU over the other's; ``--lock FILE`` runs each command under
``flock FILE`` (one big run at a time on a shared machine).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent / "chakra-coll"
GIB = 2**30


MONITOR = """
import json, resource, subprocess, sys, time
started = time.perf_counter()
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
wall = time.perf_counter() - started
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"rc": done.returncode, "wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
                  "peak_mib": usage.ru_maxrss / 1024, "stdout": done.stdout, "stderr": done.stderr[-3000:]}))
"""


def measured(args: list, *, repeat: int = 1, env: dict | None = None, lock: str | None = None, cwd: Path | None = None, limit_s: int = 900) -> dict:
    """``args`` run ``repeat`` times, each under a fresh monitor process (so ``ru_maxrss`` is this
    command's own peak): median wall and CPU seconds, the largest peak RSS, the last stdout.
    ``lock``: each run waits for ``flock LOCK`` (outside the monitor: the wait is not timed), at most ``limit_s`` seconds.
    ``cwd``: the folder they run in, whose ``chakra_collectives`` a ``python -c`` or ``-m`` imports
    first (ahead of ``PYTHONPATH``)."""
    results = []
    wait = ["flock", lock, "nice", "-n", "10", "timeout", str(limit_s)] if lock else []
    for _ in range(repeat):
        done = subprocess.run([*wait, sys.executable, "-c", MONITOR, *map(str, args)], capture_output=True, text=True, check=True, env=env, cwd=cwd)
        result = json.loads(done.stdout)
        if result["rc"] != 0:
            raise RuntimeError(f"{' '.join(map(str, args))} failed ({result['rc']}):\n{result['stderr']}")
        results.append(result)
    return {
        "wall_s": statistics.median(r["wall_s"] for r in results),
        "cpu_s": statistics.median(r["cpu_s"] for r in results),
        "peak_mib": max(r["peak_mib"] for r in results),
        "stdout": results[-1]["stdout"],
    }


def disk_mib(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.iterdir()) / 2**20


# ---------------------------------------------------------------------------- tables
def synth_table(
    sizes: list[int], repeat: int, shapes: list[str], before: str | None = None, lock: str | None = None, collective: str = "all-gather",
    topologies: list[str] | None = None, limit_s: int = 900,
) -> None:
    """The synth rows; ``before``: each command also run from that checkout (run in it, so that
    ``python -m`` imports its code), the two alternating run by run, with the CPU ratio (this
    code / before). ``topologies``: these specs instead of ``shapes`` x ``sizes``."""
    print(f"\nsynth -c {collective} -s 64MiB -a tacos -o DIR (whole command; seconds; MiB)")
    header = f"{'topology':<16} {'NPUs':>6} {'wall':>7} {'cpu':>7} {'synth':>7} {'predict':>7} {'bounds':>7} {'write':>7} {'ops':>11} {'files':>7} {'peak':>7} {'eff':>6} {'bounds':>6}"
    print(header)
    old_env = {**os.environ, "PYTHONPATH": str(Path(before).resolve())} if before else None
    specs = topologies or [f"{shape}:{int(round(n**0.5))}x{int(round(n**0.5))}" for shape in shapes for n in sizes]
    for spec in specs:
        runs: dict[str, list[dict]] = {"this": [], "before": []}
        for _ in range(repeat):
            for label, env in (("before", old_env), ("this", None)):
                if label == "before" and not before:
                    continue
                command = [sys.executable, "-m", "chakra_collectives"] if before else [BIN]  # the same start-up both sides
                with tempfile.TemporaryDirectory() as tmp:
                    out = Path(tmp) / "c"
                    r = measured([*command, "synth", "-t", spec, "-c", collective, "-s", "64MiB", "-a", "tacos", "-o", out, "--json"],
                                 env=env, lock=lock, cwd=Path(before).resolve() if label == "before" else None, limit_s=limit_s)
                    r["files"] = disk_mib(Path(tmp))
                runs[label].append(r)
        for label in ("before", "this") if before else ("this",):
            rs = runs[label]
            s = json.loads(rs[-1]["stdout"])
            n = s["num_npus"]
            r = {key: statistics.median(x[key] for x in rs) for key in ("wall_s", "cpu_s", "files")}
            eff = s["efficiency"]
            print(
                f"{spec if label == 'this' else spec + ' before':<16} {n:>6} {r['wall_s']:>7.1f} {r['cpu_s']:>7.1f} {s['synthesis_s']:>7.1f} {s['predict_s']:>7.1f} "
                f"{s['bounds_s']:>7.1f} {s['et_write_s']:>7.1f} {s['operations']:>11,} {r['files']:>7.0f} {max(x['peak_mib'] for x in rs):>7.0f} "
                f"{eff if eff is None else format(eff, '.3f'):>6} {s['bounds_method'] or '-':>6}",
                flush=True,
            )
        if before:
            ratio = statistics.median(runs["this"][i]["cpu_s"] / runs["before"][i]["cpu_s"] for i in range(repeat))
            print(f"{'':<16} CPU this / before: {ratio:.2f} (median of {repeat} alternating pairs)", flush=True)


BASELINE = """
import json, resource, sys, time
from chakra_collectives.ir import Collective
from chakra_collectives.synth.registry import SynthesisOptions, get
from chakra_collectives.topology import load_topology
name, collective, ranks = sys.argv[1], Collective.parse(sys.argv[2]), int(sys.argv[3])
started, cpu = time.perf_counter(), time.process_time()
algo = get(name).make(load_topology(f"ring:{ranks}"), collective, ranks, SynthesisOptions(size_bytes=2**20)).algorithm
print(json.dumps({"ops": algo.num_ops, "s": time.perf_counter() - started, "cpu": time.process_time() - cpu}))
"""


def baselines_table(repeat: int) -> None:
    print("\nbaselines at 1,024 ranks, 1 MiB: the producer alone (fresh process; peak RSS includes start-up)")
    print(f"{'algorithm':<10} {'collective':<11} {'ops':>11} {'wall':>7} {'cpu':>7} {'peak':>7}")
    for name, collective in (("ring", "all-reduce"), ("direct", "all-reduce"), ("rhd", "all-reduce"), ("tree", "reduce")):
        r = measured([sys.executable, "-c", BASELINE, name, collective, "1024"], repeat=repeat)
        s = json.loads(r["stdout"])
        print(f"{name:<10} {collective:<11} {s['ops']:>11,} {s['s']:>7.2f} {s['cpu']:>7.2f} {r['peak_mib']:>7.0f}", flush=True)
    r = measured([BIN, "synth", "-t", "ring:1024", "-c", "all-reduce", "-s", "1MiB", "-a", "ring", "--json"], repeat=repeat)
    s = json.loads(r["stdout"])
    print(f"whole `synth -t ring:1024 -a ring -c all-reduce -s 1MiB`: {r['wall_s']:.1f} s (cpu {r['cpu_s']:.1f} s; synthesis "
          f"{s['synthesis_s']:.1f} s, prediction {s['predict_s']:.1f} s, bounds {s['bounds_s']:.1f} s), peak {r['peak_mib']:.0f} MiB", flush=True)


WRITE_ALONE = """
import json, os, resource, sys, tempfile, time
from pathlib import Path
from chakra_collectives.converters.chakra_et import write_algorithm
from chakra_collectives.synth.tacos import tacos
from chakra_collectives.topology import load_topology

def status(key):
    return next(int(line.split()[1]) / 1024 for line in open("/proc/self/status") if line.startswith(key))

algo = tacos(load_topology(sys.argv[1]), "all-gather", 64 * 2**20, trials=1).algorithm
with tempfile.TemporaryDirectory() as tmp:
    held = status("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # the peak-RSS mark starts again from here
    started = time.perf_counter()
    write_algorithm(algo, Path(tmp) / "ag")
    seconds = time.perf_counter() - started
    files = sum(p.stat().st_size for p in Path(tmp).iterdir()) / 2**20
print(json.dumps({"ops": algo.num_ops, "s": seconds, "held": held, "peak": status("VmHWM"),
                  "worker_peak": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, "files": files}))
"""


def write_table(sizes: list[int], repeat: int) -> None:
    print("\nwrite_algorithm alone (TACOS all-gather, 64 MiB; MiB): the write's peak above what was held")
    print(f"{'topology':<16} {'ops':>11} {'write s':>8} {'files':>7} {'held':>7} {'+write':>7} {'worker':>7} {'ratio':>6}")
    for n in sizes:
        side = int(round(n**0.5))
        spec = f"torus2d:{side}x{side}"
        r = measured([sys.executable, "-c", WRITE_ALONE, spec], repeat=repeat)
        w = json.loads(r["stdout"])
        extra = max(w["peak"] - w["held"], w["worker_peak"] - w["held"], 0.0)
        print(f"{spec:<16} {w['ops']:>11,} {w['s']:>8.2f} {w['files']:>7.0f} {w['held']:>7.0f} {w['peak'] - w['held']:>7.0f} "
              f"{w['worker_peak']:>7.0f} {extra / w['files']:>6.2f}", flush=True)


READ = """
import json, sys, time
from chakra_collectives.converters.chakra_et import read_algorithm
started = time.perf_counter(); cpu = time.process_time()
algo = read_algorithm(sys.argv[1])
print(json.dumps({"nodes": algo.num_ops, "s": time.perf_counter() - started, "cpu": time.process_time() - cpu}))
"""

WRITE = """
import sys
from chakra_collectives.converters.chakra_et import write_algorithm
from chakra_collectives.ir import Collective
from chakra_collectives.synth.baselines import ring
write_algorithm(ring(Collective.ALL_REDUCE, int(sys.argv[2]), size_bytes=2**20), sys.argv[1])
"""


def read_and_replay_tables(repeat: int, *, replay: bool) -> None:
    ranks = 1024
    with tempfile.TemporaryDirectory() as tmp:
        prefix = Path(tmp) / "ar"
        subprocess.run([sys.executable, "-c", WRITE, prefix, str(ranks)], check=True)
        files = disk_mib(Path(tmp))
        print(f"\nthe {ranks}-rank ring all-reduce: {files:.0f} MiB in {ranks} files")
        r = measured([sys.executable, "-c", READ, prefix], repeat=repeat)
        read = json.loads(r["stdout"])
        print(f"{'read_algorithm':<28} {read['nodes']:>10,} nodes {read['s']:>7.1f} s ({read['nodes'] / read['s']:>9,.0f} nodes/s; "
              f"cpu {read['cpu']:.1f} s), peak {r['peak_mib']:.0f} MiB")
        r = measured([BIN, "inspect", prefix, "--json"], repeat=repeat)
        print(f"{'inspect --json':<28} {'':>16} {r['wall_s']:>7.1f} s (cpu {r['cpu_s']:.1f} s), peak {r['peak_mib']:.0f} MiB", flush=True)
        if not replay:
            return
        workload = Path(tmp) / "mb"
        subprocess.run([BIN, "workload", "microbenchmark", "-c", "all-reduce", "-s", "1MiB", "-n", str(ranks), "-o", workload], check=True, capture_output=True)
        r = measured([BIN, "replay", workload, "-t", f"ring:{ranks}", "-c", f"all-reduce={prefix}", "--no-timeline", "--json"], repeat=repeat)
        print(f"{'replay (microbenchmark)':<28} {'':>16} {r['wall_s']:>7.1f} s (cpu {r['cpu_s']:.1f} s), peak {r['peak_mib']:.0f} MiB", flush=True)


SMALL = """
import json, statistics, sys, time
from chakra_collectives.synth.tacos import tacos
from chakra_collectives.topology import load_topology
topo = load_topology(sys.argv[1])
walls, cpus = [], []
for _ in range(int(sys.argv[2])):
    started, cpu = time.perf_counter(), time.process_time()
    tacos(topo, "all-gather", 64 * 2**20, trials=1)
    walls.append(time.perf_counter() - started)
    cpus.append(time.process_time() - cpu)
print(json.dumps([statistics.median(walls), statistics.median(cpus)]))
"""


def small_table(repeat: int) -> None:
    print("\n64 NPUs: TACOS All-Gather, one trial (median of 9 in one process) and `synth` end to end")
    for spec in ("mesh2d:8x8", "torus2d:8x8", "hypercube:4x4x4"):
        wall, cpu = json.loads(subprocess.run([sys.executable, "-c", SMALL, spec, "9"], capture_output=True, text=True, check=True).stdout)
        print(f"{spec:<16} tacos {wall * 1000:7.1f} ms (cpu {cpu * 1000:.1f} ms)", flush=True)
    r = measured([BIN, "synth", "-t", "mesh2d:8x8", "-c", "all-gather", "-s", "64MiB", "-a", "tacos", "--json"], repeat=max(repeat, 3))
    print(f"{'synth mesh2d:8x8':<16} end to end {r['wall_s']:.2f} s (cpu {r['cpu_s']:.2f} s), peak {r['peak_mib']:.0f} MiB")
    r = measured([BIN, "--help"], repeat=max(repeat, 3))
    print(f"{'chakra-coll --help':<16} {r['wall_s']:.2f} s (cpu {r['cpu_s']:.2f} s): the start-up every command pays")


PROFILE = """
import json, resource, sys, time
from pathlib import Path
from chakra_collectives import progress
from chakra_collectives.converters.chakra_et import write_algorithm
from chakra_collectives.synth import synthesize
from chakra_collectives.topology import load_topology

NAMES = {"phases": "matching", "lower to operations": "lowering", "predict": "prediction", "lower bounds": "bounds",
         "what limits it": "bottleneck", "write ETs": "write"}

def status(key):
    return next(int(line.split()[1]) / 1024 for line in open("/proc/self/status") if line.startswith(key))

def phase_of(path):
    known = [NAMES[p] for p in path if p in NAMES]
    return known[-1] if known else "other"

current, started = ["start-up"], [time.perf_counter()]
rows = []

def seen(update):
    phase = phase_of(update.path[:-1] if update.finished else update.path)
    if phase != current[0]:
        now = time.perf_counter()
        rows.append((current[0], now - started[0], status("VmHWM"), status("VmRSS")))
        Path("/proc/self/clear_refs").write_text("5")  # the peak mark starts again at what is held now
        current[0], started[0] = phase, now

spec, collective, out = sys.argv[1], sys.argv[2], sys.argv[3]
Path("/proc/self/clear_refs").write_text("5")
with progress.reporting(seen, interval_s=0.5):
    result = synthesize(load_topology(spec), collective, 64 * 2**20, algorithm="tacos")
    with progress.task("write ETs"):
        write_algorithm(result.algorithm, out)
rows.append((current[0], time.perf_counter() - started[0], status("VmHWM"), status("VmRSS")))
phases = {}
for phase, seconds, peak, held in rows:  # a phase entered twice: seconds add up, the larger peak
    s, p, _ = phases.get(phase, (0.0, 0.0, 0.0))
    phases[phase] = (s + seconds, max(p, peak), held)
print(json.dumps({"phases": phases, "ops": result.algorithm.num_ops,
                  "children": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
"""


def profile_table(sizes: list[int], collective: str, shapes: list[str]) -> None:
    """Where a TACOS run's memory goes: at every change of phase (the deepest of matching,
    lowering, prediction, bounds, write that the progress reports name) the process's peak RSS
    since the last change (the kernel's mark, reset at each change) and what it holds then.
    Trial processes and forked writers have their own memory: their largest peak is 'children'."""
    print(f"\nmemory by phase: synth -c {collective} -s 64MiB -a tacos -o DIR in one process (seconds; MiB: peak in the phase / held at its end)")
    for shape in shapes:
        for n in sizes:
            side = int(round(n**0.5))
            spec = f"{shape}:{side}x{side}"
            with tempfile.TemporaryDirectory() as tmp:
                r = measured([sys.executable, "-c", PROFILE, spec, collective, Path(tmp) / "ag"])
            p = json.loads(r["stdout"])
            cells = "  ".join(f"{phase} {seconds:.1f} s {peak:.0f}/{held:.0f}" for phase, (seconds, peak, held) in p["phases"].items())
            print(f"{spec:<16} {p['ops']:>11,} ops, wall {r['wall_s']:.1f} s, cpu {r['cpu_s']:.1f} s, peak {r['peak_mib']:.0f} "
                  f"(children {p['children']:.0f}): {cells}", flush=True)


MATCH_ONCE = """
import dataclasses, json, sys, time, numpy as np
from chakra_collectives.synth.channels import build_channels
from chakra_collectives.synth.tacos import default_variants, _match
from chakra_collectives.topology import load_topology
spec, out = sys.argv[1], sys.argv[2]
topology = load_topology(spec)
n = topology.num_npus
channels = build_channels(topology, chunk_bytes=-(-64 * 2**20 // n))
cpu = time.process_time()
schedule = _match(channels, 1, 0, default_variants(n, 1)[0])
cpu = time.process_time() - cpu
np.savez(out, **{f.name: np.asarray(getattr(schedule, f.name)) for f in dataclasses.fields(schedule)})
print(json.dumps({"cpu_s": cpu, "messages": schedule.num_transfers, "pairs": n * (n - 1), "time_ns": schedule.time_ns,
                  "events": len(np.unique(schedule.end))}))  # the matcher steps from arrival time to arrival time
"""

AFTER = """
import json, resource, sys, tempfile, time
from pathlib import Path
import numpy as np
from chakra_collectives.converters.chakra_et import write_algorithm
from chakra_collectives.synth.channels import build_channels
from chakra_collectives.synth.lowering import all_gather_algorithm
from chakra_collectives.synth.schedule import Schedule
from chakra_collectives.topology import load_topology

def status(key):
    return next(int(line.split()[1]) / 1024 for line in open("/proc/self/status") if line.startswith(key))

spec, cached = sys.argv[1], sys.argv[2]
topology = load_topology(spec)
with np.load(cached) as saved:
    fields = {name: saved[name] for name in saved.files}
schedule = Schedule(**{name: (value.item() if value.ndim == 0 else value) for name, value in fields.items()})
del fields
rows = {}
mark = [time.perf_counter(), time.process_time()]

def phase(name):
    rows[name] = (time.perf_counter() - mark[0], time.process_time() - mark[1], status("VmHWM"), status("VmRSS"))
    Path("/proc/self/clear_refs").write_text("5")
    mark[:] = [time.perf_counter(), time.process_time()]

phase("load")
by_parts = sys.argv[4] == "parts"  # lowered range by range as the files are written (write_parts): never whole
algo = None if by_parts else all_gather_algorithm(schedule, size_bytes=64 * 2**20)
phase("lowering")
channels = build_channels(topology, chunk_bytes=-(-64 * 2**20 // schedule.num_chunks))
try:  # the code of this change: a large schedule is its own prediction
    from chakra_collectives.synth.schedule_timing import predicts_itself, schedule_prediction
except ImportError:  # the code before
    predicts_itself = lambda channels: False
if predicts_itself(channels):
    predicted, limit = schedule_prediction([schedule], channels)
    how = "schedule"
else:  # the network model's run
    from chakra_collectives.network.bottleneck import busiest_link
    from chakra_collectives.network.collective import simulate_collective
    timing = simulate_collective(algo, topology)
    predicted, limit = timing.time_ns, busiest_link(timing)
    del timing
    how = "model"
del channels
phase("prediction")
with tempfile.TemporaryDirectory(dir=sys.argv[3]) as tmp:
    if by_parts:
        from chakra_collectives.converters.chakra_et import write_parts
        lengths = 1 + schedule.program_lengths()
        write_parts(lambda ranks: all_gather_algorithm(schedule, size_bytes=64 * 2**20, ranks=ranks), lengths, Path(tmp) / "ag", size_bytes=64 * 2**20)
        operations = int(lengths.sum())
    else:
        del schedule
        write_algorithm(algo, Path(tmp) / "ag")
        operations = algo.num_ops
    files = sum(p.stat().st_size for p in Path(tmp).iterdir()) / 2**20
    phase("write")
print(json.dumps({"rows": rows, "ops": operations, "predicted": predicted, "link": [limit.src, limit.dst, limit.messages], "how": how,
                  "files": files, "children": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
"""


def after_matching_table(specs: list[str], cache: Path, before: Path | None) -> None:
    """What follows TACOS's matching, alone: one matched All-Gather schedule (64 MiB, K=1, the
    large phases' first merge variant, runs that extend held, the faster to match; seed 0) saved once in ``cache`` (matching it takes most of
    a 16,384-NPU run), then lowered, predicted and written in a fresh process -- by this
    checkout (``this``; ``parts``: lowered a range of ranks at a time as the files are written,
    ``write_parts``, never whole) and, with ``before``, by another one (a folder holding its ``chakra_collectives``,
    e.g. ``git archive main``) from the same schedule: seconds, CPU seconds, and each phase's
    peak RSS (the kernel's mark reset between phases) and what it holds at its end."""
    print("\nafter the matching: lower, predict, write one saved schedule (s / CPU s / MiB peak in the phase / held at its end)")
    cache.mkdir(parents=True, exist_ok=True)
    for spec in specs:
        saved = cache / f"{spec.replace(':', '-')}-ag.npz"
        if not saved.exists():
            r = measured([sys.executable, "-c", MATCH_ONCE, spec, saved])
            m = json.loads(r["stdout"])
            print(f"{spec}: one matching {r['wall_s']:.0f} s wall, {m['cpu_s']:.0f} CPU s ({m['pairs'] / m['cpu_s']:,.0f} pairs per CPU s), "
                  f"{m['events']:,} events ({m['events'] / m['cpu_s']:,.0f} per CPU s), peak {r['peak_mib']:.0f} MiB, {m['messages']:,} messages, "
                  f"{m['time_ns']:.0f} ns -> {saved}", flush=True)
        for label, code in (("this", None), ("parts", None), ("before", before)):
            if label == "before" and before is None:
                continue
            r = measured([sys.executable, "-c", AFTER, spec, saved, tempfile.gettempdir(), label], cwd=code)
            p = json.loads(r["stdout"])
            cells = "  ".join(f"{name} {s:.1f}/{c:.1f} s {peak:.0f}/{held:.0f}" for name, (s, c, peak, held) in p["rows"].items() if name != "load")
            peak = max(row[2] for row in p["rows"].values())  # the phases' marks (each reset the process's)
            print(f"{spec:<16} {label:<6} {p['ops']:>11,} ops, wall {r['wall_s']:.1f} s, cpu {r['cpu_s']:.1f} s, peak {peak:.0f} "
                  f"(writers {p['children']:.0f}), files {p['files']:.0f}; predicted {p['predicted']:.0f} ns by the {p['how']}, busiest "
                  f"{p['link']}; write {1e6 * p['rows']['write'][1] / p['ops']:.2f} CPU us an op (this process; forked writers not counted); {cells}", flush=True)


PROBE = """
import json, sys, time
from chakra_collectives import progress
from chakra_collectives.synth.channels import build_channels
from chakra_collectives.synth.matcher import match_all_gather
from chakra_collectives.synth.tacos import default_variants
from chakra_collectives.topology import load_topology

def status(key):
    return next(int(line.split()[1]) / 1024 for line in open("/proc/self/status") if line.startswith(key))

class Budget(Exception):
    pass

spec, budget, every = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
started = time.perf_counter()
topo = load_topology(spec)
n = topo.num_npus
channels = build_channels(topo, chunk_bytes=-(-64 * 2**20 // n))
variant = default_variants(n, 1, switched=bool(topo.num_switches))[0]
samples = [(time.perf_counter() - started, 0.0, status("VmRSS"), time.process_time())]
begun = [None]

def seen(update):
    if update.name != "match chunks to links" or update.total is None:
        return
    now = time.perf_counter() - started
    if begun[0] is None:
        begun[0] = now
    if now - samples[-1][0] >= every or update.done >= update.total:
        samples.append((now, update.done / update.total, status("VmRSS"), time.process_time()))
    if now > budget:
        raise Budget()

finished = True
try:
    with progress.reporting(seen, interval_s=1.0):
        schedule = match_all_gather(channels, 1, seed=0, latency_ratio=variant.latency_ratio, extend_held=variant.extend_held,
                                    reach_back=variant.reach_back, ranges=variant.ranges)
except Budget:
    finished = False
print(json.dumps({"npus": n, "set_up_s": begun[0], "samples": samples, "finished": finished, "peak": status("VmHWM")}))
"""


def probe_table(specs: list[str], budget_s: float) -> None:
    """How fast one TACOS matching advances at sizes too large to finish: the first large-phase
    merge variant on ``specs`` (All-Gather of 64 MiB, one chunk per NPU), stopped after
    ``budget_s`` seconds; the (NPU, chunk) pairs matched over time, the rate of the last tenth
    per CPU second (what a loaded machine does not inflate), and the CPU hours the rest would
    take at that rate."""
    print(f"\nmatching probe: one TACOS All-Gather matching (64 MiB, K=1), stopped after {budget_s:.0f} s")
    for spec in specs:
        r = measured([sys.executable, "-c", PROBE, spec, str(budget_s), str(budget_s / 20)])
        p = json.loads(r["stdout"])
        samples = p["samples"]
        t1, f1, _, c1 = samples[-1]
        t0, f0, _, c0 = samples[max(0, len(samples) - 1 - max(1, len(samples) // 10))]
        rate = (f1 - f0) / (c1 - c0) if c1 > c0 else 0.0
        left_h = (1 - f1) / rate / 3600 if rate > 0 else float("inf")
        curve = "  ".join(f"{c:.0f}:{f:.4f}:{m:.0f}" for _, f, m, c in samples[:: max(1, len(samples) // 10)])
        print(f"{spec:<18} {p['npus']:>6} NPUs: set-up {p['set_up_s']:.0f} s, matched {f1:.4f} of the pairs in {t1:.0f} s wall, "
              f"{c1:.0f} s CPU ({'finished' if p['finished'] else 'stopped'}); last rate {rate * 3600:.3f} of the pairs per CPU hour "
              f"-> {left_h:.1f} CPU h more; peak {p['peak']:.0f} MiB\n    CPU s:fraction:RSS MiB  {curve}", flush=True)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="also 4,096 and 16,384 NPUs, and the replay")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--only", default="synth,baselines,write,read,small", help="tables to print (synth, baselines, write, read, replay, small, profile, probe, after)")
    parser.add_argument("--sizes", default=None, help="NPU counts of the synth table (default 256,1024; --full adds 4096,16384)")
    parser.add_argument("--shapes", default="mesh2d,torus2d", help="topology families of the synth and profile tables")
    parser.add_argument("--before", default=None, help="synth table: also run each command from this checkout (a worktree of the code before), alternating, with CPU ratios; after table: also the code in this folder, same schedule")
    parser.add_argument("--lock", default=None, help="synth table: run each command under `flock LOCK` (a shared machine's big-run lock)")
    parser.add_argument("--timeout", type=int, default=900, help="synth table under --lock: seconds each command may run")
    parser.add_argument("--collective", default="all-gather", help="synth table: the collective (all-gather, reduce-scatter, all-reduce)")
    parser.add_argument("--topologies", default=None, help="synth table: these topologies (comma-separated, e.g. torus3d:34x34x34) instead of --shapes x --sizes")
    parser.add_argument("--probe", default="torus3d:34x34x34", help="topologies of the probe table (comma-separated)")
    parser.add_argument("--probe-budget", type=float, default=1200.0, help="seconds each probe matching may run")
    parser.add_argument("--after", default="torus2d:64x64,torus2d:128x128", help="topologies of the after-matching table (comma-separated)")
    parser.add_argument("--schedules", type=Path, default=Path(tempfile.gettempdir()) / "chakra-coll-schedules", help="where the after table keeps its matched schedules")
    args = parser.parse_args(argv)
    only = set(args.only.split(","))
    if args.full:
        only.add("replay")
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else ([256, 1024, 4096, 16384] if args.full else [256, 1024])
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    if "small" in only:
        small_table(args.repeat)
    if "baselines" in only:
        baselines_table(args.repeat)
    if "write" in only:
        write_table([n for n in sizes if n <= 4096], args.repeat)
    if "read" in only or "replay" in only:
        read_and_replay_tables(args.repeat, replay="replay" in only)
    if "synth" in only:
        synth_table(sizes, args.repeat, args.shapes.split(","), before=args.before, lock=args.lock, collective=args.collective,
                    topologies=args.topologies.split(",") if args.topologies else None, limit_s=args.timeout)
    if "profile" in only:
        profile_table(sizes, "all-gather", args.shapes.split(","))
    if "probe" in only:
        probe_table(args.probe.split(","), args.probe_budget)
    if "after" in only:
        after_matching_table(args.after.split(","), args.schedules, Path(args.before) if args.before else None)
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main(sys.argv[1:])
