"""Memory estimates against measured peaks: is every estimate an upper envelope?

For each request a user may make at scale, the estimate is what the command itself says when
refused (run with ``--max-memory 1B``: "... needs about 1.2 GiB ...") and the peak is the
resident set of the same command run to completion in a fresh monitored process. The table
prints both, the peak above a bare start of the CLI (what the estimate models), and their
ratio: a ratio below 1 is an estimate that would let the machine thrash.

``python bench/bench_estimates.py [--quick]``
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

BIN = Path(sys.executable).parent / "chakra-coll"
UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
MONITOR = """
import json, resource, subprocess, sys, time
started = time.perf_counter()
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"rc": done.returncode, "wall_s": time.perf_counter() - started, "peak": usage.ru_maxrss * 1024,
                  "stderr": done.stderr[-2000:]}))
"""


def peak(args: list) -> dict:
    """Run ``args`` to completion in a fresh monitored process: exit code, wall, peak RSS bytes."""
    done = subprocess.run([sys.executable, "-c", MONITOR, *map(str, args)], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def stated_estimate(args: list) -> tuple[float, str]:
    """The estimate the command states for its main work when its limit is just too small: a
    limit of 1 byte first; while what it refuses is reading its input (and the command does
    more than read), a limit that lets the reading through."""
    limit = 1
    for _ in range(4):
        done = subprocess.run([BIN, *map(str, args), "--max-memory", f"{limit}B"], capture_output=True, text=True)
        found = re.search(r"(reading|synthesizing|replaying) .*? needs about ([\d.]+) (\w+) \((.*?)\), above", done.stderr)
        if done.returncode != 4 or found is None:
            raise RuntimeError(f"{' '.join(map(str, args))}: no estimate in {done.stderr!r}")
        nbytes = float(found.group(2)) * UNITS[found.group(3)]
        if found.group(1) != "reading" or args[0] == "inspect":
            return nbytes, f"{found.group(1)}: {found.group(4)}"
        held = re.search(r"([\d.]+) (\w+) already in use", done.stderr)
        limit = int((float(held.group(1)) * UNITS[held.group(2)] if held else 0) + nbytes + 2**20)
    raise RuntimeError(f"{' '.join(map(str, args))}: refused only for reading")


def cases(tmp: Path, quick: bool) -> list[tuple[str, list, list]]:
    """(label, setup commands, measured command)."""
    dp = lambda n, layers: [BIN, "workload", "data-parallel", "-n", n, "--layers", layers, "-o", tmp / f"dp{n}x{layers}"]  # noqa: E731
    rows = [
        ("synth tacos AG mesh2d:16x16", [], ["synth", "-t", "mesh2d:16x16", "-c", "all-gather", "-s", "64MiB", "-a", "tacos", "-k", "1"]),
        ("synth tacos AR torus2d:16x16", [], ["synth", "-t", "torus2d:16x16", "-c", "all-reduce", "-s", "64MiB", "-a", "tacos", "-k", "1"]),
        ("synth ring AR ring:512", [], ["synth", "-t", "ring:512", "-c", "all-reduce", "-s", "1MiB", "-a", "ring"]),
        ("synth direct AR ring:256", [], ["synth", "-t", "ring:256", "-c", "all-reduce", "-s", "1MiB", "-a", "direct"]),
        ("synth rhd AR ring:1024", [], ["synth", "-t", "ring:1024", "-c", "all-reduce", "-s", "1MiB", "-a", "rhd"]),
        ("replay DP 64 ranks x 50 layers torus2d:8x8", [dp(64, 50)], ["replay", tmp / "dp64x50", "-t", "torus2d:8x8"]),
        ("replay DP 256 ranks x 10 layers torus2d:16x16", [dp(256, 10)], ["replay", tmp / "dp256x10", "-t", "torus2d:16x16"]),
        (
            "inspect ring AR, 256 rank files",
            [[BIN, "synth", "-t", "ring:256", "-a", "ring", "-c", "all-reduce", "-s", "1MiB", "-o", tmp / "ar256"]],
            ["inspect", tmp / "ar256"],
        ),
    ]
    if not quick:
        rows += [
            ("synth tacos AG mesh2d:32x32", [], ["synth", "-t", "mesh2d:32x32", "-c", "all-gather", "-s", "64MiB", "-a", "tacos", "-k", "1"]),
            ("synth ring AR ring:1024", [], ["synth", "-t", "ring:1024", "-c", "all-reduce", "-s", "1MiB", "-a", "ring"]),
            ("replay DP 1,024 ranks x 2 layers torus2d:32x32", [dp(1024, 2)], ["replay", tmp / "dp1024x2", "-t", "torus2d:32x32"]),
        ]
    return rows


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="only the cases that take seconds")
    args = parser.parse_args(argv)
    bare = peak([BIN, "synth", "-t", "ring:2", "-a", "ring"])["peak"]
    print(f"a bare start of the CLI: {bare / 2**20:.0f} MiB; figures in MiB")
    print(f"{'request':<46} {'estimate':>9} {'peak':>7} {'above':>7} {'ratio':>6}  counts")
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        for label, setup, command in cases(tmp, args.quick or "--quick" in argv):
            for step in setup:
                subprocess.run(list(map(str, step)), capture_output=True, check=True)
            estimate, what = stated_estimate(command)
            measured = peak([BIN, *command])
            if measured["rc"] != 0:
                raise RuntimeError(f"{label}: exit {measured['rc']}: {measured['stderr']}")
            above = measured["peak"] - bare
            ratio = f"{estimate / above:>6.2f}" if above > 2**20 else f"{'-':>6}"  # within the start-up's own spread
            print(f"{label:<46} {estimate / 2**20:>9.0f} {measured['peak'] / 2**20:>7.0f} {max(above, 0) / 2**20:>7.0f} {ratio}  {what}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
