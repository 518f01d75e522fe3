"""What ``chakra-coll`` sets before it imports anything: one BLAS thread, and the garbage
collector paused while it starts.

numpy loads OpenBLAS, which starts a pool of threads (one per further core) that spin, waiting
for work, for a while after they start: 25-30 ms of CPU for each ``chakra-coll`` process
(``python -c "import numpy"``: 0.19 against 0.16 CPU s, wall 0.58 against 0.46 s on two busy
cores), for nothing, as no command does dense linear algebra. :func:`single_blas_thread` asks
for one thread (``OPENBLAS_NUM_THREADS=1``, unless the user set it); the processes a command
starts inherit it.

>>> env = {}; single_blas_thread(env); env
{'OPENBLAS_NUM_THREADS': '1'}
>>> env = {"OPENBLAS_NUM_THREADS": "2"}; single_blas_thread(env); env
{'OPENBLAS_NUM_THREADS': '2'}

Starting a command builds some 10^5 objects that live until the process ends (numpy's, typer's
and the command's modules, classes and functions); each full collection on the way walks all
of them, to free nothing: about 60 ms of a 0.4 s ``synth -t mesh2d:8x8 -a tacos --json`` (CPU,
measured). :func:`pause_collector` (the console script, before it imports anything) stops
collections; :func:`resume_collector` (a command starting) moves what start-up made out of
the collector's sight for good (:func:`gc.freeze`) and collects again as usual. In a process
that did not pause it (tests running commands in-process), resuming does nothing.

>>> import gc
>>> pause_collector(); gc.isenabled()
False
>>> resume_collector(); gc.isenabled(), gc.get_freeze_count() > 0
(True, True)
>>> gc.unfreeze()
"""

from __future__ import annotations

import gc
import os
from typing import MutableMapping

_paused = False


def single_blas_thread(environ: MutableMapping[str, str] = os.environ) -> None:
    """Ask OpenBLAS (loaded with numpy, after this) for one thread in ``environ``, unless it names a number already."""
    environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def pause_collector() -> None:
    """Stop garbage collections until :func:`resume_collector` (if they run now)."""
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True


def resume_collector() -> None:
    """Freeze what exists and collect again, if :func:`pause_collector` stopped collections."""
    global _paused
    if _paused:
        _paused = False
        gc.freeze()
        gc.enable()
