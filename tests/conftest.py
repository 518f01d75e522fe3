"""Shared fixtures: the interop vectors in ../shared (skipped when absent) and a CLI runner."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import settings
from typer.testing import CliRunner

from chakra_collectives.cli.app import app

REPO = Path(__file__).resolve().parents[1]
SHARED_INTEROP = REPO.parent / "shared" / "interop"

# Property tests judge results, not speed: on a shared 2-core machine one example may take
# longer than hypothesis's 200 ms deadline, which would fail a correct test at random.
settings.register_profile("shared-machine", deadline=None)
settings.load_profile("shared-machine")


@pytest.fixture
def interop() -> Path:
    """``../shared/interop``; tests that need it skip cleanly when it is absent."""
    if not SHARED_INTEROP.is_dir():
        pytest.skip("../shared/interop is not present (interop vectors are optional)")
    return SHARED_INTEROP


@pytest.fixture
def astra_custom_allreduce(interop: Path) -> Path:
    """Prefix of ASTRA-sim's shipped custom ring all-reduce (8 NPUs, 1 MiB)."""
    return interop / "astra-sim/examples/system/custom_collectives/custom_ring_allreduce_8npus_1MB/custom_allreduce"


@pytest.fixture
def cli(monkeypatch):
    """Run ``chakra-coll ARGS...`` in-process on an 80-column terminal; returns the result
    (exit_code, stdout, stderr). Output wraps there as a user's would (on spaces), so check
    phrases in ``" ".join(result.stdout.split())`` when they may wrap."""
    from chakra_collectives.cli.app import console, err_console

    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setattr(console.made, "_width", 80)  # the consoles themselves (made when first used)
    monkeypatch.setattr(err_console.made, "_width", 80)
    runner = CliRunner()

    def run(*args: object):
        return runner.invoke(app, [str(a) for a in args])

    return run


@pytest.fixture(scope="module", params=["python", "compiled"])
def event_loop(request):
    """Run a module's tests with each event loop (:data:`~chakra_collectives.network.engine.COMPILED_TASKS`
    set so that every graph takes it): the Python loop, then the compiled one (numba; skipped
    when not installed). Use with ``pytestmark = pytest.mark.usefixtures("event_loop")``."""
    from chakra_collectives.network import engine

    if request.param == "compiled":
        pytest.importorskip("numba")
    saved = engine.COMPILED_TASKS
    engine.COMPILED_TASKS = 0 if request.param == "compiled" else 2**62
    yield request.param
    engine.COMPILED_TASKS = saved
