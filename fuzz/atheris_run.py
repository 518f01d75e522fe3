"""Coverage-guided fuzzing of one target with atheris (``pip install -e '.[fuzz]'``).

``python fuzz/atheris_run.py TARGET [libFuzzer options]``, e.g.
``python fuzz/atheris_run.py et -atheris_runs=20000 -max_len=4096``. TARGET is one of
``et``, ``msccl``, ``topology``, ``specs``, ``pytorch`` (:mod:`targets`); the corpus starts from their seeds.
The tool's own errors are expected; any other exception stops the run with its input saved
by libFuzzer (``crash-*``).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import atheris  # noqa: E402

with atheris.instrument_imports(include=["chakra_collectives"]):
    # the readers and parsers the targets call, imported here so that atheris sees their branches
    import chakra_collectives.converters.chakra_et.reader  # noqa: E402,F401
    import chakra_collectives.converters.chakra_et.workload_reader  # noqa: E402,F401
    import chakra_collectives.converters.msccl.lower  # noqa: E402,F401
    import chakra_collectives.converters.pytorch.convert  # noqa: E402,F401
    import chakra_collectives.replay.algorithms  # noqa: E402,F401
    import chakra_collectives.topology.loaders  # noqa: E402,F401
    import chakra_collectives.units  # noqa: E402,F401

from targets import TARGETS, run, seeds  # noqa: E402


def main(argv: list[str]) -> None:
    if len(argv) < 2 or argv[1] not in TARGETS:
        raise SystemExit(f"usage: python fuzz/atheris_run.py {{{','.join(TARGETS)}}} [libFuzzer options]")
    name = argv[1]
    target = TARGETS[name]
    corpus = Path(tempfile.mkdtemp(prefix=f"chakra-coll-{name}-corpus-"))
    for index, data in enumerate(seeds(name)):
        (corpus / f"seed-{index}").write_bytes(data)
    atheris.Setup([argv[0], *argv[2:], str(corpus)], lambda data: run(target, data))
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
