"""Run every benchmark (bench/bench_*.py) in turn: ``make bench``.

Each benchmark is a script with a ``main(argv)`` that prints its own table. Pass names to run
a subset: ``python bench/run.py et_io verify``.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str]) -> int:
    wanted = set(argv)
    scripts = sorted(HERE.glob("bench_*.py"))
    for script in scripts:
        name = script.stem.removeprefix("bench_")
        if wanted and name not in wanted:
            continue
        spec = importlib.util.spec_from_file_location(script.stem, script)
        module = importlib.util.module_from_spec(spec)
        sys.path.insert(0, str(HERE))
        spec.loader.exec_module(module)
        print(f"\n=== {name} ===", flush=True)
        started = time.perf_counter()
        module.main([])
        print(f"({name}: {time.perf_counter() - started:.1f} s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
