"""Unequal shares of a process group's all-reduce (:mod:`chakra_collectives.synth.shares`): who
reduces how much, from the members' bandwidth; the verifier proves the all-reduce whatever the
shares, and whole-fabric collectives keep ``K`` chunks per rank."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from chakra_collectives.converters.chakra_et import read_algorithm, write_algorithm
from chakra_collectives.ir import Collective, OpKind
from chakra_collectives.synth.shares import bandwidth_shares, owner_starts, share_layouts
from chakra_collectives.synth.tacos import tacos, tacos_for_group
from chakra_collectives.topology import load_topology
from chakra_collectives.topology.groups import group_view
from chakra_collectives.verify import verify_algorithm

MIB = 2**20


@given(st.lists(st.floats(min_value=0.5, max_value=400.0), min_size=2, max_size=12))
def test_shares_make_every_member_receive_its_all_gather_in_the_same_time(bandwidth):
    """Member ``i`` receives ``1 - s_i`` of the buffer at ``b_i``: with a share it takes the same
    time as every other member with one; a member without a share would be done sooner even
    receiving all of it; the shares are a split of the buffer."""
    b = np.asarray(bandwidth)
    shares = bandwidth_shares(b)
    assert shares.sum() == pytest.approx(1.0) and (shares >= 0).all()
    owning = shares > 1e-12
    times = (1 - shares[owning]) / b[owning]
    assert times.max() == pytest.approx(times.min(), rel=1e-9)
    assert (1 / b[~owning] <= times.max() * (1 + 1e-9)).all()


@given(st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=1, max_size=10).filter(lambda s: sum(s) > 0), st.integers(1, 200))
def test_owner_starts_are_whole_chunks_near_the_shares(raw, num_chunks):
    shares = np.asarray(raw) / sum(raw)
    starts = owner_starts(shares, num_chunks)
    counts = np.diff(starts)
    assert starts[0] == 0 and starts[-1] == num_chunks and (counts >= 0).all()
    if num_chunks >= len(shares):
        assert (counts >= 1).all()
    if (shares * num_chunks >= 1).all():
        assert np.abs(counts - shares * num_chunks).max() < 1


def test_a_mesh_row_gives_its_corners_more_to_own():
    """mesh2d:8x8's first row: corners have 2 links, the others 3 (through the relays below), so
    the corners own (1 - 7 * 2/22) = 8/22 of the buffer, the others 1/22 each."""
    view = group_view(load_topology("mesh2d:8x8"), tuple(range(8))).topology
    bandwidth, half, equal = share_layouts(view, 11)   # 88 chunks: 32 for a corner, 4 for the others
    assert np.diff(bandwidth).tolist() == [32, 4, 4, 4, 4, 4, 4, 32]
    exact = 88 * (np.array([8, 1, 1, 1, 1, 1, 1, 8]) / 22 + 1 / 8) / 2   # halfway to equal: 21.5 and 7.5 chunks
    assert np.diff(half).sum() == 88 and np.abs(np.diff(half) - exact).max() < 1
    assert equal is None


@settings(max_examples=12, deadline=None)
@given(st.lists(st.integers(0, 15), min_size=2, max_size=6, unique=True), st.integers(1, 4))
@example([0, 1, 2, 3], 4)   # a row: its unequal shares are kept (the round trip below)
def test_a_groups_all_reduce_with_unequal_shares_is_proved(members, k):
    """Any subset of a 4x4 mesh (members with 2, 3 or 4 links): the all-reduce the verifier proves,
    every rank reducing the share the bandwidth gives it where TACOS kept those shares (where the
    equal shares' phases were faster, it keeps those: no ``owner_chunks``)."""
    fabric = load_topology("mesh2d:4x4")
    group = tuple(members)
    found = tacos_for_group(fabric, group, Collective.ALL_REDUCE, MIB, chunks_per_npu=k)
    algo = found.algorithm
    assert verify_algorithm(algo).ok
    if "owner_chunks" not in algo.provenance:
        assert all(p.schedule.owner_start is None for p in found.phases)
        return
    starts = found.phases[0].schedule.owner_start
    assert any(layout is not None and np.array_equal(layout, starts) for layout in share_layouts(group_view(fabric, group).topology, k))
    assert algo.provenance["owner_chunks"] == ",".join(map(str, np.diff(starts).tolist()))
    assert all(np.array_equal(p.schedule.owner_start, starts) for p in found.phases)
    # each rank's first operation copies its own share of the input into the result
    ops = algo.ops
    first = np.searchsorted(ops.rank, np.arange(len(group)))
    assert (ops.kind[first] == OpKind.COPY).all()
    assert ops.src_off[first].tolist() == starts[:-1].tolist() and ops.count[first].tolist() == np.diff(starts).tolist()


def test_an_unequal_all_reduce_round_trips_through_et_files(tmp_path):
    fabric = load_topology("mesh2d:4x4")
    found = tacos_for_group(fabric, (0, 1, 2, 3), Collective.ALL_REDUCE, 4 * MIB, chunks_per_npu=4)
    assert found.algorithm.provenance["owner_chunks"] == "6,2,2,6"
    write_algorithm(found.algorithm, tmp_path / "ar")
    again = read_algorithm(tmp_path / "ar")
    assert again.collective is Collective.ALL_REDUCE and again.chunk_count == 16 and verify_algorithm(again).ok


def test_whole_fabric_collectives_keep_k_chunks_per_rank():
    """Without a group nothing changes: the mesh's corners are not given larger shares."""
    found = tacos(load_topology("mesh2d:3x3"), Collective.ALL_REDUCE, 9 * MIB, chunks_per_npu=2)
    assert all(p.schedule.owner_start is None for p in found.phases)
    assert "owner_chunks" not in found.algorithm.provenance


def test_synth_names_the_unequal_shares_and_writes_an_all_reduce_the_verifier_proves(cli, tmp_path):
    result = cli("synth", "-t", "mesh2d:4x4", "-c", "all-reduce", "-s", "4MiB", "-a", "tacos", "--group", "0-3", "-k", "4", "-o", tmp_path / "row")
    assert result.exit_code == 0, result.stdout
    text = " ".join(result.stdout.split())
    assert "unequal shares by bandwidth: ranks reduce 6, 2, 2, 6 of the 16 chunks" in text
    assert "against equal-share reduce-scatter + all-gather algorithms" in text
    checked = cli("verify", tmp_path / "row", "--json")
    assert checked.exit_code == 0 and json.loads(checked.stdout)["ok"]


def test_synth_o_of_a_group_all_reduce_written_in_parts_names_its_shares(cli, tmp_path):
    """A mesh row's all-reduce that predicts itself is written a range of ranks at a time
    (``AlgorithmParts``): the summary still names the unequal shares, and the files verify."""
    result = cli("synth", "-t", "mesh2d:8x8", "-c", "all-reduce", "-s", "64MiB", "-a", "tacos", "--group", "0-7", "-o", tmp_path / "row")
    assert result.exit_code == 0, result.stdout
    assert "unequal shares by bandwidth: ranks reduce" in " ".join(result.stdout.split())
    checked = cli("verify", tmp_path / "row", "--json")
    assert checked.exit_code == 0 and json.loads(checked.stdout)["ok"]
