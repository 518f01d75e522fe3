"""Nothing half-done: a multi-file write is all or nothing as readers see it, a killed write
leaves nothing a reader takes for complete, the next write cleans up, errors name the user's
path, and ``-o DIR/`` writes inside DIR."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chakra_collectives.converters.chakra_et import read_algorithm, write_algorithm
from chakra_collectives.converters.chakra_et.commit import commit_files, marker_path
from chakra_collectives.errors import InputError
from chakra_collectives.ir import Collective
from chakra_collectives.synth.baselines import ring
from chakra_collectives.verify import verify_algorithm


def dead_pid() -> int:
    """The id of a process that has ended."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_killed_rename_leaves_a_marker_that_readers_refuse(tmp_path):
    write_algorithm(ring(Collective.ALL_REDUCE, 4, size_bytes=2**20), tmp_path / "ar")
    marker_path(tmp_path / "ar").write_text(f"{dead_pid()}\n")  # what kill -9 between renames leaves
    with pytest.raises(InputError, match="an interrupted write .* left these files incomplete; rerun the command"):
        read_algorithm(tmp_path / "ar")


def test_the_next_write_cleans_what_a_killed_one_left(tmp_path):
    pid = dead_pid()
    (tmp_path / f".ar.{pid}.partial").mkdir()
    (tmp_path / f".ar.{pid}.partial" / "ar.0.et").write_bytes(b"half")
    (tmp_path / f".ar.3.et.{pid}.tmp").write_bytes(b"old style")
    marker_path(tmp_path / "ar").write_text(f"{pid}\n")
    algo = ring(Collective.ALL_GATHER, 4, size_bytes=2**20)
    write_algorithm(algo, tmp_path / "ar")
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"ar.{r}.et" for r in range(4)]
    assert read_algorithm(tmp_path / "ar").equals(algo)


def test_a_failed_write_keeps_the_old_files_and_names_the_users_path(tmp_path):
    old = ring(Collective.ALL_GATHER, 4, size_bytes=2**20)
    write_algorithm(old, tmp_path / "ar")

    def contents():
        yield b"rank 0"
        raise OSError(28, "No space left on device", str(tmp_path / f".ar.{os.getpid()}.partial" / "ar.1.et"))

    with pytest.raises(InputError) as error:
        commit_files([tmp_path / f"ar.{r}.et" for r in range(4)], contents(), name="ar")
    assert ".partial" not in str(error.value) and "ar.1.et: cannot write: No space left on device" in str(error.value)
    assert read_algorithm(tmp_path / "ar").equals(old)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"ar.{r}.et" for r in range(4)]


def test_ranks_written_by_several_processes_are_the_files_one_process_writes(tmp_path):
    algo = ring(Collective.ALL_REDUCE, 6, size_bytes=2**20)
    write_algorithm(algo, tmp_path / "one" / "ar", workers=1)
    write_algorithm(algo, tmp_path / "two" / "ar", workers=2)
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == [f"ar.{r}.et" for r in range(6)]
    for rank in range(6):
        assert (tmp_path / "two" / f"ar.{rank}.et").read_bytes() == (tmp_path / "one" / f"ar.{rank}.et").read_bytes()


def test_a_worker_process_that_cannot_write_fails_the_whole_write_and_keeps_the_old_files(tmp_path, monkeypatch):
    old = ring(Collective.ALL_GATHER, 4, size_bytes=2**20)
    write_algorithm(old, tmp_path / "ar")
    real_write = Path.write_bytes

    def disk_full_for_rank_3(path, data):
        if path.name == "ar.3.et":  # written by the forked worker (ranks 2-3)
            raise OSError(28, "No space left on device", str(path))
        return real_write(path, data)

    monkeypatch.setattr(Path, "write_bytes", disk_full_for_rank_3)
    with pytest.raises(InputError) as error:
        write_algorithm(ring(Collective.ALL_REDUCE, 4, size_bytes=2**20), tmp_path / "ar", workers=2)
    assert str(error.value) == f"{tmp_path / 'ar.3.et'}: cannot write: No space left on device"
    monkeypatch.undo()
    assert read_algorithm(tmp_path / "ar").equals(old)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"ar.{r}.et" for r in range(4)]


def test_an_unwritable_folder_is_named_as_the_user_gave_it(cli, tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        if os.access(folder, os.W_OK):
            pytest.skip("running as a user who may write anywhere")
        result = cli("synth", "-t", "ring:4", "-a", "ring", "-o", folder / "ar")
        assert result.exit_code == 2 and ".tmp" not in result.output and ".partial" not in result.output
    finally:
        folder.chmod(0o700)


WRITER = """
import sys
from chakra_collectives.converters.chakra_et import write_algorithm
from chakra_collectives.ir import Collective
from chakra_collectives.synth.baselines import ring
algo = ring(Collective.ALL_REDUCE, 256, size_bytes=2**20, chunks_per_npu=2)
print("ready", flush=True)
write_algorithm(algo, sys.argv[1])
"""


@pytest.mark.parametrize("delay", [0.0, 0.05, 0.15, 0.3])
def test_kill_9_during_a_write_never_leaves_files_that_read_as_complete(tmp_path, delay):
    """A 256-rank write killed at some moment: the prefix reads as the old algorithm, the new
    one, or is refused as incomplete -- never a mix read as if whole."""
    old = ring(Collective.ALL_GATHER, 256, size_bytes=2**20)
    write_algorithm(old, tmp_path / "ar")
    child = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path / "ar")], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "ready"
    time.sleep(delay)
    child.send_signal(signal.SIGKILL)
    child.wait()
    try:
        algo = read_algorithm(tmp_path / "ar")
    except InputError as error:
        assert "interrupted write" in str(error)
    else:
        assert algo.collective in (Collective.ALL_GATHER, Collective.ALL_REDUCE)
        assert verify_algorithm(algo).ok
    new = ring(Collective.ALL_REDUCE, 256, size_bytes=2**20)
    write_algorithm(new, tmp_path / "ar")  # the next write succeeds and cleans up
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"ar.{r}.et" for r in range(256))
    assert read_algorithm(tmp_path / "ar").equals(new)


@pytest.mark.parametrize(
    "args, expected",
    [
        (["synth", "-t", "ring:4", "-a", "ring", "-c", "all-gather", "-s", "1MiB", "-o", "{d}/"], "all_gather_ring.0.et"),
        (["workload", "microbenchmark", "-c", "all-reduce", "-n", "4", "-s", "1MiB", "-o", "{d}/"], "microbenchmark.0.et"),
        (["workload", "microbenchmark", "-c", "all-reduce", "-n", "4", "-s", "1MiB", "-o", "{d}"], "microbenchmark.0.et"),
    ],
)
def test_output_into_a_folder_writes_inside_it(cli, tmp_path, args, expected):
    folder = tmp_path / "d2"
    if not args[-1].endswith("/"):
        folder.mkdir()  # an existing folder without the slash means inside it too
    result = cli(*[a.replace("{d}", str(folder)) for a in args])
    assert result.exit_code == 0, result.output
    assert (folder / expected).exists()
    assert not any(p.name.startswith("d2.") for p in tmp_path.iterdir())


def test_import_msccl_into_a_folder_names_the_files_after_the_xml(cli, tmp_path, interop):
    xml = interop / "msccl" / "ag_simple_ring_n4.xml"
    result = cli("import-msccl", xml, "-o", f"{tmp_path / 'd2'}/")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "d2" / "ag_simple_ring_n4.0.et").exists()


@pytest.mark.parametrize("astra", [False, True])
def test_replay_refuses_files_claimed_as_another_collective(cli, tmp_path, astra):
    cli("synth", "-t", "ring:4", "-a", "ring", "-c", "all-gather", "-s", "1MiB", "-o", tmp_path / "ag")
    cli("workload", "microbenchmark", "-c", "all-reduce", "-n", "4", "-s", "1MiB", "-o", tmp_path / "mb")
    extra = []
    if astra:
        cli("synth", "-t", "ring:4", "-a", "ring", "-c", "all-reduce", "-s", "1MiB", "--astra-sim", tmp_path / "as")
        extra = ["--network-model", "astra-sim", "--system", tmp_path / "as" / "system.json"]
    result = cli("replay", tmp_path / "mb", "-t", "ring:4", "-a", f"all-reduce={tmp_path / 'ag'}", *extra)
    assert result.exit_code == 2
    assert "the files implement all-gather, not all-reduce" in " ".join(result.output.split())
    overridden = cli("replay", tmp_path / "mb", "-t", "ring:4", "-a", f"all-reduce={tmp_path / 'ag'}", "--override-collective", *extra)
    assert overridden.exit_code in (0, 1, 2) and "Traceback" not in overridden.output
    assert "the files implement" not in overridden.output
