"""``chakra-coll``: the command-line interface (one module per command, loaded when used).

See :mod:`chakra_collectives.cli.app` for how commands are registered and listed (its ``app``
is the Typer application; this package imports it only when :func:`main` runs).
"""

from __future__ import annotations

import sys

from chakra_collectives.cli.start_up import pause_collector, single_blas_thread


def main() -> None:
    """Run the CLI. Memory that runs out where even the one-line error could not be formatted
    (the command's frames still held it) ends here, after they are released: one line, exit 4.
    No garbage collection runs while the command's modules load and OpenBLAS starts no thread
    pool (:mod:`.start_up`), and freed memory is kept for reuse
    (:func:`~chakra_collectives.resources.reuse_freed_memory`)."""
    single_blas_thread()
    pause_collector()
    from chakra_collectives.cli.app import app
    from chakra_collectives.resources import reuse_freed_memory

    reuse_freed_memory()
    try:
        app()
    except MemoryError:
        sys.stderr.write(
            "chakra-coll: error: ran out of memory; ask for less work, or set a lower --max-memory "
            "so that the work is refused before it starts\n"
        )
        raise SystemExit(4) from None


__all__ = ["main"]
