"""Start-up time of the command (issue 11: ``--help`` <= 0.5 s, ``inspect`` of a small file <= 1 s).

Each command runs in a fresh process (what a user waits for), timed from outside; medians of 7
runs after one warm-up (the page cache holds the files). ``python bench/bench_startup.py OTHER``
also times another checkout's ``.venv/bin/chakra-coll`` in the same run, interleaved, for a
ratio on a machine whose load changes.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "sample_traces" / "collectives" / "all_reduce_tacos"
COMMANDS = {
    "chakra-coll --help": ["--help"],
    "chakra-coll inspect (8 small files)": ["inspect", str(SAMPLE)],
    "chakra-coll verify (8 small files)": ["verify", str(SAMPLE)],
}
TARGETS = {"chakra-coll --help": 0.5, "chakra-coll inspect (8 small files)": 1.0}


def _time(binary: Path, args: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run([str(binary), *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env={**os.environ, "COLUMNS": "80"})
    return time.perf_counter() - started


def main(argv: list[str]) -> None:
    ours = REPO / ".venv" / "bin" / "chakra-coll"
    other = Path(argv[0]) / ".venv" / "bin" / "chakra-coll" if argv else None
    binaries = {"this checkout": ours, **({f"{argv[0]}": other} if other is not None else {})}
    print(f"fresh process per run, median of 7 (load average {os.getloadavg()[0]:.1f})")
    print(f"{'command':<38}" + "".join(f"{name[-24:]:>26}" for name in binaries) + "   target")
    for label, args in COMMANDS.items():
        samples: dict[str, list[float]] = {name: [] for name in binaries}
        for binary in binaries.values():
            _time(binary, args)  # warm-up
        for _ in range(7):
            for name, binary in binaries.items():  # interleaved: both see the same load
                samples[name].append(_time(binary, args))
        medians = {name: statistics.median(values) for name, values in samples.items()}
        target = f"<= {TARGETS[label]:.1f} s" if label in TARGETS else ""
        print(f"{label:<38}" + "".join(f"{medians[name]:>24.2f} s" for name in binaries) + f"   {target}")
        if other is not None:
            print(f"{'':<38}{'ratio (other / this)':>26}{medians[argv[0]] / medians['this checkout']:>24.1f}x")


if __name__ == "__main__":
    main(sys.argv[1:])
