"""Columns kept beside rank files (converters/chakra_et/columns_file.py) against decoding the
files, and every reason they are not used: other bytes, other reading code, a damaged or foreign
file, another read policy, what the file cannot keep."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from chakra_collectives.converters.chakra_et import columns_file, workload_reader, write_algorithm
from chakra_collectives.converters.chakra_et.columns_file import columns_path, load_columns, save_columns
from chakra_collectives.converters.chakra_et.read_policy import ReadPolicy
from chakra_collectives.converters.chakra_et.reader import rank_files
from chakra_collectives.converters.chakra_et.workload_reader import read_workload
from chakra_collectives.converters.chakra_et.workload_writer import single_collective_workload
from chakra_collectives.converters.chakra_et.writer import write_algorithm_hashed
from chakra_collectives.converters.chakra_et.written_workload import written_workload
from chakra_collectives.ir import Collective
from chakra_collectives.synth.baselines import direct, ring
from chakra_collectives.synth.tacos import tacos
from chakra_collectives.topology import load_topology

MIB = 2**20


def algorithms():
    yield "ring all-reduce", ring(Collective.ALL_REDUCE, 8, size_bytes=MIB), {}
    yield "tacos all-reduce, timed reductions", tacos(load_topology("mesh2d:2x3"), Collective.ALL_REDUCE, MIB).algorithm, {"reduce_bandwidth_gbps": 7.3}
    yield "direct all-to-all", direct(Collective.ALL_TO_ALL, 5, size_bytes=MIB), {}


def decoded(prefix):
    """The files decoded (the columns file, if any, put aside meanwhile)."""
    kept = columns_path(prefix)
    aside = kept.with_name("aside.npz")
    if kept.exists():
        kept.rename(aside)
    try:
        return read_workload(prefix)
    finally:
        if aside.exists():
            aside.rename(kept)


def same_workload(mine, theirs):
    for name in columns_file.COLUMNS:
        a, b = getattr(mine, name), getattr(theirs, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name
    assert mine.pg_name == theirs.pg_name and mine.involved_dim == theirs.involved_dim
    assert mine.paths == theirs.paths and mine.num_ranks == theirs.num_ranks and mine.prefix == theirs.prefix
    assert mine.repairs.summary() == theirs.repairs.summary()


def saved(tmp_path, algo=None, options=None):
    algo = algo or ring(Collective.ALL_REDUCE, 4, size_bytes=MIB)
    prefix = tmp_path / "c"
    write_algorithm(algo, prefix, **(options or {}))
    assert save_columns(written_workload(algo, prefix, **(options or {})), prefix, rank_files(prefix), min_bytes=0)
    return prefix


def no_decoding(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("decoded the rank files")

    monkeypatch.setattr(workload_reader, "decode_rank_files", refuse)


@pytest.mark.parametrize("label, algo, options", list(algorithms()), ids=[case[0] for case in algorithms()])
def test_kept_columns_read_as_the_files_decode(tmp_path, monkeypatch, label, algo, options):
    prefix = saved(tmp_path, algo, options)
    files = decoded(prefix)
    no_decoding(monkeypatch)
    kept = read_workload(prefix)
    same_workload(kept, files)
    assert read_workload(str(prefix)).prefix == str(prefix)


def sha256_of_files(paths):
    """The digest as the module documents it, from the files on disk: SHA-256 over each file's
    size (8 bytes, little-endian) and SHA-256, in rank order."""
    outer = hashlib.sha256()
    for path in paths:
        data = path.read_bytes()
        outer.update(len(data).to_bytes(8, "little") + hashlib.sha256(data).digest())
    return outer.hexdigest()


@pytest.mark.parametrize("workers", [1, 3])
def test_the_writers_digest_is_the_files_digest(tmp_path, monkeypatch, workers):
    algo = ring(Collective.ALL_REDUCE, 7, size_bytes=MIB)  # 3 workers: 3 shares of ranks, 2 in forked processes
    prefix = tmp_path / "c"
    paths, digest = write_algorithm_hashed(algo, prefix, workers=workers)
    assert paths == rank_files(prefix) and digest == sha256_of_files(paths)
    assert digest == columns_file.files_digest(paths)
    monkeypatch.setattr(columns_file, "files_digest", lambda paths: pytest.fail("read the files back to save"))
    assert save_columns(written_workload(algo, prefix), prefix, paths, min_bytes=0, digest=digest)
    monkeypatch.undo()
    files = decoded(prefix)
    no_decoding(monkeypatch)
    same_workload(read_workload(prefix), files)


def test_columns_saved_with_a_wrong_digest_are_not_used(tmp_path):
    algo = ring(Collective.ALL_REDUCE, 4, size_bytes=MIB)
    prefix = tmp_path / "c"
    paths, digest = write_algorithm_hashed(algo, prefix)
    wrong = hashlib.sha256(b"other files").hexdigest()
    assert save_columns(written_workload(algo, prefix), prefix, paths, min_bytes=0, digest=wrong)
    assert load_columns(prefix, paths) is None  # validated against the files on reading, whatever the writer said
    assert save_columns(written_workload(algo, prefix), prefix, paths, min_bytes=0, digest=digest)
    assert load_columns(prefix, paths) is not None


def test_files_with_other_bytes_are_decoded(tmp_path):
    prefix = saved(tmp_path)
    write_algorithm(ring(Collective.ALL_GATHER, 4, size_bytes=MIB), prefix)  # same ranks, other nodes
    assert load_columns(prefix, rank_files(prefix)) is None
    read = read_workload(prefix)
    same_workload(read, decoded(prefix))
    assert len(read) == len(written_workload(ring(Collective.ALL_GATHER, 4, size_bytes=MIB), prefix))


def test_one_changed_byte_is_noticed(tmp_path):
    prefix = saved(tmp_path)
    path = rank_files(prefix)[3]
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    assert load_columns(prefix, rank_files(prefix)) is None


def test_columns_kept_by_other_reading_code_are_ignored(tmp_path, monkeypatch):
    prefix = saved(tmp_path)
    assert load_columns(prefix, rank_files(prefix)) is not None
    monkeypatch.setattr(columns_file, "_READER_DIGEST", ["another reader"])
    assert load_columns(prefix, rank_files(prefix)) is None


def test_another_read_policy_decodes(tmp_path, monkeypatch):
    prefix = saved(tmp_path)
    calls = []
    real = workload_reader.decode_rank_files
    monkeypatch.setattr(workload_reader, "decode_rank_files", lambda *a, **k: calls.append(1) or real(*a, **k))
    read_workload(prefix)
    assert calls == []
    read_workload(prefix, ReadPolicy.strict())
    assert calls == [1]


@pytest.mark.parametrize("damage", ["garbage", "truncated", "no meta", "short column", "pickled column", "dependency out of range"])
def test_a_damaged_or_foreign_columns_file_is_ignored(tmp_path, damage):
    prefix = saved(tmp_path)
    target = columns_path(prefix)
    if damage == "garbage":
        target.write_bytes(b"not a zip file")
    elif damage == "truncated":
        target.write_bytes(target.read_bytes()[:200])
    else:
        with np.load(target) as kept:
            arrays = {name: kept[name] for name in kept.files}
        meta = json.loads(arrays["meta"].tobytes())
        if damage == "no meta":
            del arrays["meta"]
        elif damage == "short column":
            arrays["node_id"] = arrays["node_id"][:-1]
        elif damage == "pickled column":
            arrays["node_id"] = np.array([object()] * meta["nodes"], dtype=object)
        else:
            arrays["dep_idx"] = arrays["dep_idx"] + meta["nodes"]
        with open(target, "wb") as handle:
            np.savez(handle, **arrays)
    assert load_columns(prefix, rank_files(prefix)) is None
    same_workload(read_workload(prefix), decoded(prefix))


def test_what_the_file_cannot_keep_is_not_saved(tmp_path):
    prefix = tmp_path / "w"
    single_collective_workload(prefix, "all-reduce", 4, MIB)  # COMM_COLL nodes are read with their process groups
    work = read_workload(prefix)
    work.pg_name[0] = "tp"
    assert not save_columns(work, prefix, rank_files(prefix), min_bytes=0)
    assert not columns_path(prefix).exists()


def test_small_files_get_no_columns_file(tmp_path):
    algo = ring(Collective.ALL_REDUCE, 4, size_bytes=MIB)
    write_algorithm(algo, tmp_path / "c")
    assert not save_columns(written_workload(algo, tmp_path / "c"), tmp_path / "c", rank_files(tmp_path / "c"))
    assert not columns_path(tmp_path / "c").exists()


def test_synth_astra_sim_keeps_the_columns_and_replay_reads_them(cli, tmp_path, monkeypatch):
    """Above the size threshold (lowered here) the directory carries the columns; ``replay
    --system`` then predicts what decoding predicts."""
    monkeypatch.setattr(columns_file, "SAVED_BYTES", 0)
    directory = tmp_path / "astra"
    assert cli("synth", "-t", "ring:8", "-a", "ring", "-c", "all-reduce", "-s", "1MiB", "--astra-sim", directory).exit_code == 0
    kept = columns_path(directory / "collectives" / "all_reduce")
    assert kept.is_file()
    replay = ["replay", directory / "workload" / "all_reduce_8npus_1MB", "-t", directory / "network.yml",
              "--network-model", "astra-sim", "--system", directory / "system.json", "--json"]
    with_columns = cli(*replay)
    assert with_columns.exit_code == 0, with_columns.output
    kept.unlink()
    decoding = cli(*replay)
    assert decoding.exit_code == 0
    assert json.loads(with_columns.stdout) == json.loads(decoding.stdout)
    assert json.loads(decoding.stdout)["total_ns"] > 0
