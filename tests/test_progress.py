"""Progress reporting: the library's tasks, the CLI's line, and synthesis reporting real progress."""

from __future__ import annotations

import io
import os
import threading

import pytest

from rich.console import Console

from chakra_collectives import progress
from chakra_collectives.cli.progress_view import showing_progress
from chakra_collectives.synth import synthesize
from chakra_collectives.topology import load_topology


def test_without_a_listener_tasks_do_nothing():
    with progress.task("alone", total=3) as t:
        t.advance()
        t.update(2, total=5)
    # nothing to observe but that no error occurs and no state leaks into a later listener
    seen = []
    with progress.reporting(seen.append, interval_s=0):
        with progress.task("listened", total=1) as t:
            t.advance()
    assert [u.path for u in seen] == [("listened",)] * 3


def test_nested_fraction_counts_the_open_child_and_labels_pass_through():
    seen = []
    with progress.reporting(seen.append, interval_s=0):
        with progress.task("search", total=2, unit="trials") as search:
            with progress.task("label without total"):
                with progress.task("trial", total=4) as trial:
                    trial.update(2)
            search.update(2)
    moved = [u for u in seen if u.name == "trial" and u.done == 2][0]
    assert moved.fraction == 0.25 and moved.path == ("search", "label without total", "trial")
    assert moved.counts == ((0, 2), (0, None), (2, 4))
    assert seen[-1].finished and seen[-1].fraction == 1.0 and seen[-1].eta_s == 0.0


def test_updates_are_throttled_but_starts_and_ends_always_reported():
    seen = []
    with progress.reporting(seen.append, interval_s=3600):
        with progress.task("many", total=1000) as t:
            for _ in range(1000):
                t.advance()
    assert len(seen) == 2 and not seen[0].finished and seen[1].finished and seen[1].done == 1000


def test_synthesis_reports_trials_and_chunk_matching_and_the_fraction_never_falls():
    seen = []
    with progress.reporting(seen.append, interval_s=0):
        synthesize(load_topology("torus2d:4x4"), "all-gather", "16MiB", chunks_per_npu=2, algorithm="tacos", trials=3)
    matching = [u for u in seen if u.name == "match chunks to links"]
    assert matching and matching[-1].unit == "(NPU, chunk) pairs"
    assert max(u.done for u in matching) == 16 * 32 - 32  # every NPU gets every chunk it lacks
    trials = [u for u in seen if u.unit == "trials"]
    assert trials and max(u.done for u in trials) == max(u.total for u in trials)
    fractions = [u.fraction for u in seen if u.fraction is not None and "all-gather" in u.path]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0


def test_the_cli_draws_one_line_with_what_runs_and_the_time_left():
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=80)
    with showing_progress(console, "synth", delay_s=0):
        # long enough to be drawn while matching (rich redraws 10 times a second; mesh2d:4x4 now takes 0.1 s)
        synthesize(load_topology("mesh2d:8x8"), "all-gather", "16MiB", chunks_per_npu=4, algorithm="tacos", trials=8)
    drawn = out.getvalue()
    assert "matching" in drawn and "left" in drawn and "%" in drawn


def test_nothing_is_drawn_when_stderr_is_not_a_terminal():
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=80)
    with showing_progress(console, "synth", delay_s=0):
        synthesize(load_topology("ring:4"), "all-gather", "1MiB", chunks_per_npu=1)
    assert out.getvalue() == ""


def test_drawing_progress_runs_no_thread_so_work_may_fork():
    """Forked workers (TACOS trials, reading and writing rank files) run only while this process
    has one thread: the progress line must not add a timer or refresh thread."""
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=80)
    threads = []

    def work():
        with progress.task("work", total=3) as t:
            for _ in range(3):
                threads.append(threading.active_count())
                t.advance()

    before = threading.active_count()
    with showing_progress(console, "synth", delay_s=0):
        work()
    assert threads == [before] * 3
    assert "work" in out.getvalue()


def test_a_forked_worker_does_not_report_to_its_parents_callback():
    seen = []
    with progress.reporting(seen.append, interval_s=0):
        with progress.task("parent", total=1):
            reader, writer = os.pipe()
            child = os.fork()
            if child == 0:  # the worker: its task must be the do-nothing one
                os.write(writer, b"idle" if progress.task("child") is progress.task("other") else b"live")
                os._exit(0)
            os.waitpid(child, 0)
            said = os.read(reader, 4)
    assert said == b"idle"
    assert [u.path for u in seen] == [("parent",), ("parent",)]


@pytest.mark.parametrize("workers", [1, 2])
def test_writing_rank_files_reports_files_done_with_a_total(tmp_path, workers):
    from chakra_collectives.converters.chakra_et import write_algorithm
    from chakra_collectives.ir import Collective
    from chakra_collectives.synth.baselines import ring

    seen = []
    with progress.reporting(seen.append, interval_s=0):
        write_algorithm(ring(Collective.ALL_GATHER, 8, size_bytes=2**20), tmp_path / "ag", workers=workers)
    files = [u for u in seen if u.path[-1] == "encode rank files"]
    assert files[0].total == (8 if workers == 1 else 4) and files[-1].finished
    assert max(u.done for u in files) == files[0].total
