"""A fuzzing campaign: many mutated inputs per reader, crashes counted and saved.

``python fuzz/campaign.py [--runs N] [--seed S] [--targets et,msccl,topology,specs,pytorch] [--cli N] [--commands N] [--kills N]``

* every target of :mod:`targets` gets ``N`` mutations of its seeds (:mod:`mutate`; PyTorch
  trace sets get the structured mutations of :mod:`trace_mutate`); a crash is any exception
  other than the tool's own error -- for ``pytorch`` also a written workload that reading or
  replaying refuses (counted apart as "unreplayable") --, and its input is saved under
  ``fuzz/crashes/TARGET-HASH.bin`` to reproduce it (``python fuzz/reproduce.py FILE``);
* ``--cli N`` runs N odd command lines (specs, sizes, flags) through the real CLI in-process
  and counts tracebacks;
* ``--commands N`` runs N damaged rank sets (one file of four mutated) through every command
  that reads them -- verify, inspect, replay, export-msccl -- and counts tracebacks;
* ``--kills N`` kills N rank-file writes at random moments and checks that nothing reads as
  complete when it is not.

The process's address space is capped (``--address-space``, 4 GiB by default), so an input
that would exhaust memory is a recorded crash rather than a machine the kernel rescues.

Prints one line per target (runs, refused, accepted, crashes, seconds) and exits non-zero when
anything crashed.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from mutate import mutate  # noqa: E402
from targets import TARGETS, WrittenButRefused, mutator, pytorch_seeds, run, seeds  # noqa: E402


def campaign(name: str, runs: int, rng: random.Random) -> dict:
    """``runs`` mutated inputs through target ``name``: counts, and per seed (``by_seed``)."""
    target, starts = TARGETS[name], seeds(name)
    mutate_input = mutator(name)
    counts = {"ok": 0, "refused": 0, "crash": 0, "unreplayable": 0}
    by_seed = [{"ok": 0, "refused": 0, "crash": 0} for _ in starts]
    started = time.perf_counter()
    for _ in range(runs):
        choice = rng.randrange(len(starts))
        data = mutate_input(starts[choice], rng)
        try:
            outcome = run(target, data)
            counts[outcome] += 1
            by_seed[choice][outcome] += 1
        except Exception as error:  # a crash: anything but the tool's own error
            counts["crash"] += 1
            by_seed[choice]["crash"] += 1
            counts["unreplayable"] += isinstance(error, WrittenButRefused)
            digest = hashlib.sha1(data).hexdigest()[:12]
            (HERE / "crashes").mkdir(exist_ok=True)
            (HERE / "crashes" / f"{name}-{digest}.bin").write_bytes(data)
            print(f"  crash in {name} ({digest}):\n" + "".join(traceback.format_exc(limit=-3)), file=sys.stderr)
    return {**counts, "by_seed": by_seed, "seconds": time.perf_counter() - started}


ODD_ARGS = [
    ["synth", "-t", "{spec}", "-a", "ring", "-s", "{size}"],
    ["topo-info", "{spec}", "--no-bfb"],
    ["workload", "microbenchmark", "-c", "{collective}", "-n", "{n}", "-s", "{size}", "-o", "{tmp}/w"],
]
SPECS = ["ring:{n}", "torus2d:{n}x{n}", "switch:{n},bw={bw}", "mesh2d:{n}x2,lat={lat}", "circulant:{n},strides={n}", "kautz:{n},{n}", "ring:{n} x ring:{n}"]
VALUES = ["0", "1", "-1", "2", "3", "1e308", "inf", "nan", "1e-320", "99999999999", "x", "", "2147483648", "4,5", "1.5"]


def cli_campaign(runs: int, rng: random.Random) -> dict:
    import tempfile

    from typer.testing import CliRunner

    from chakra_collectives.cli.app import app

    runner = CliRunner()
    counts = {"ok": 0, "refused": 0, "crash": 0}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(runs):
            fill = {
                "n": rng.choice(VALUES[:6] + ["4", "8", "300"]),
                "bw": rng.choice(VALUES),
                "lat": rng.choice(VALUES),
                "size": rng.choice(VALUES + ["64MiB", "1TiB", "2TiB", "8388608TiB"]),
                "collective": rng.choice(["all-reduce", "broadcast", "nope", ""]),
                "tmp": tmp,
            }
            fill["spec"] = rng.choice(SPECS).format(**fill)
            args = [a.format(**fill) for a in rng.choice(ODD_ARGS)]
            result = runner.invoke(app, args)
            if result.exit_code == 0:
                counts["ok"] += 1
            elif result.exception is None or isinstance(result.exception, SystemExit):
                counts["refused"] += 1
            else:
                counts["crash"] += 1
                print(f"  crash: chakra-coll {' '.join(args)}: {result.exception!r}", file=sys.stderr)
    return {**counts, "seconds": time.perf_counter() - started}


def commands_campaign(runs: int, rng: random.Random) -> dict:
    """``runs`` rank sets (a 4-rank ring all-reduce, one file mutated) through every command
    that reads them (:data:`targets.FILE_COMMANDS`)."""
    from targets import CommandCrash, commands_on_rank_set, ring_all_reduce_files

    counts = {"ok": 0, "refused": 0, "crash": 0}
    started = time.perf_counter()
    base = ring_all_reduce_files()
    for _ in range(runs):
        files = list(base)
        rank = rng.randrange(len(files))
        files[rank] = mutate(files[rank], rng)
        try:
            codes = commands_on_rank_set(files)
        except CommandCrash as crash:
            counts["crash"] += 1
            print(f"  crash: {crash}", file=sys.stderr)
            continue
        counts["ok" if not any(codes) else "refused"] += 1
    return {**counts, "seconds": time.perf_counter() - started}


def kill_campaign(runs: int, rng: random.Random) -> dict:
    import signal
    import subprocess
    import tempfile

    from chakra_collectives.converters.chakra_et import read_algorithm, write_algorithm
    from chakra_collectives.errors import InputError
    from chakra_collectives.ir import Collective
    from chakra_collectives.synth.baselines import ring

    writer = (
        "import sys\nfrom chakra_collectives.converters.chakra_et import write_algorithm\n"
        "from chakra_collectives.ir import Collective\nfrom chakra_collectives.synth.baselines import ring\n"
        "a = ring(Collective.ALL_REDUCE, 512, size_bytes=2**20)\nprint('ready', flush=True)\nwrite_algorithm(a, sys.argv[1])\n"
    )
    counts = {"old": 0, "new": 0, "refused": 0, "crash": 0}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        prefix = Path(tmp) / "ar"
        write_algorithm(ring(Collective.ALL_GATHER, 512, size_bytes=2**20), prefix)
        for _ in range(runs):
            child = subprocess.Popen([sys.executable, "-c", writer, str(prefix)], stdout=subprocess.PIPE, text=True)
            child.stdout.readline()
            time.sleep(rng.uniform(0, 8.0))
            child.send_signal(signal.SIGKILL)
            child.wait()
            try:
                algo = read_algorithm(prefix)
                counts["new" if algo.collective is Collective.ALL_REDUCE else "old"] += 1
            except InputError as error:
                counts["refused" if "interrupted write" in str(error) else "crash"] += 1
            write_algorithm(ring(Collective.ALL_GATHER, 512, size_bytes=2**20), prefix)
            leftovers = [p.name for p in Path(tmp).iterdir() if not p.name.startswith("ar.")]
            if leftovers:
                counts["crash"] += 1
                print(f"  left behind after the next write: {leftovers}", file=sys.stderr)
    return {**counts, "seconds": time.perf_counter() - started}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000, help="mutated inputs per target")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--cli", type=int, default=0, help="odd command lines")
    parser.add_argument("--kills", type=int, default=0, help="writes killed with SIGKILL")
    parser.add_argument("--commands", type=int, default=0, help="damaged rank sets through verify, inspect, replay, export-msccl")
    parser.add_argument(
        "--address-space", type=float, default=4.0, help="GiB this process may map (0: no cap): a runaway input becomes a MemoryError, a crash"
    )
    args = parser.parse_args(argv)
    if args.address_space > 0:
        import resource

        cap = int(args.address_space * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    rng = random.Random(args.seed)
    crashes = 0
    for name in filter(None, args.targets.split(",")):
        result = campaign(name, args.runs, rng)
        crashes += result["crash"]
        unreplayable = f" (of which {result['unreplayable']} written but unreplayable)" if name == "pytorch" else ""
        print(f"{name:9} {args.runs:>6} runs  {result['refused']:>6} refused  {result['ok']:>6} accepted  {result['crash']:>3} crashes{unreplayable}  {result['seconds']:7.1f} s", flush=True)
        if name == "pytorch":
            for (label, _), seen in zip(pytorch_seeds(), result["by_seed"]):
                print(f"  {label:56} {sum(seen.values()):>6} runs  {seen['refused']:>6} refused  {seen['ok']:>6} accepted  {seen['crash']:>3} crashes")
    if args.cli:
        result = cli_campaign(args.cli, rng)
        crashes += result["crash"]
        print(f"{'cli':9} {args.cli:>6} runs  {result['refused']:>6} refused  {result['ok']:>6} accepted  {result['crash']:>3} crashes  {result['seconds']:7.1f} s", flush=True)
    if args.commands:
        result = commands_campaign(args.commands, rng)
        crashes += result["crash"]
        print(f"{'commands':9} {args.commands:>6} runs  {result['refused']:>6} refused  {result['ok']:>6} accepted  {result['crash']:>3} crashes  {result['seconds']:7.1f} s", flush=True)
    if args.kills:
        result = kill_campaign(args.kills, rng)
        crashes += result["crash"]
        print(f"{'kill -9':9} {args.kills:>6} runs  old {result['old']}, new {result['new']}, refused as incomplete {result['refused']}  {result['crash']:>3} crashes  {result['seconds']:7.1f} s", flush=True)
    print(f"crashes: {crashes}")
    return 1 if crashes else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
