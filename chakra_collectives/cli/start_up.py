"""The garbage collector paused while ``chakra-coll`` starts.

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

_paused = False


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
