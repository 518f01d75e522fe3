"""``-a gridpipe``: route-planned All-Gather on 2-D meshes and tori -- proved, replayed exactly,
never below the bound, every link its share; refused off grids."""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest

from chakra_collectives.errors import InputError
from chakra_collectives.ir import Collective
from chakra_collectives.synth import synthesize
from chakra_collectives.synth.channels import build_channels
from chakra_collectives.synth.gridpipe import Grid, PlanVariant, grid_of, plan_all_gather
from chakra_collectives.synth.registry import SynthesisOptions, get
from chakra_collectives.topology import Topology, hypercube, load_topology, mesh2d, ring, switch, torus2d
from chakra_collectives.verify import verify_algorithm
from schema_helpers import schema

MiB = 2**20


@pytest.mark.parametrize(
    ("topology", "grid"),
    [
        (mesh2d(4, 3), Grid(4, 3, wrap=False)),
        (mesh2d(2, 5), Grid(2, 5, wrap=False)),
        (torus2d(8, 8), Grid(8, 8, wrap=True)),
        (torus2d(5, 3), Grid(5, 3, wrap=True)),
        (torus2d(2, 6), Grid(2, 6, wrap=True)),
        (load_topology("hetero-mesh2d:4x4"), Grid(4, 4, wrap=False)),
    ],
)
def test_grids_are_recognised_by_their_links(topology, grid):
    assert grid_of(topology) == grid


def test_other_fabrics_are_not_grids():
    extra = mesh2d(3, 3)
    extra.add_link(0, 8, 50, 500, bidirectional=True)  # one diagonal too many
    missing = Topology(4, name="square-minus-one")  # a 2x2 mesh without one of its links
    for src, dst in ((0, 1), (2, 3), (0, 2)):
        missing.add_link(src, dst, 50, 500, bidirectional=True)
    for topology in (ring(8), hypercube([2, 2, 2]), switch(8), extra, missing):
        assert grid_of(topology) is None, topology.name


@pytest.mark.parametrize("spec", ["torus2d:4x4", "mesh2d:5x3", "torus2d:5x4", "mesh2d:2x4", "torus2d:3x6", "hetero-mesh2d:4x3"])
@pytest.mark.parametrize("collective", [Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_REDUCE])
def test_every_collective_is_proved_and_never_below_the_bound(spec, collective):
    result = synthesize(load_topology(spec), collective, "3MiB", algorithm="gridpipe", chunks_per_npu=2)
    assert verify_algorithm(result.algorithm).ok
    assert result.efficiency is not None and 0 < result.efficiency <= 1
    if collective is not Collective.ALL_REDUCE:
        assert result.predicted_ns == pytest.approx(result.schedule_ns, rel=1e-9)  # the model replays the plan


@pytest.mark.parametrize(("spec", "share"), [("torus2d:8x8", 16), ("torus2d:16x16", 64), ("mesh2d:8x8", 32), ("mesh2d:16x16", 128)])
def test_balanced_plan_gives_every_link_at_most_its_share(spec, share):
    # an NPU gets N - 1 chunks over 4 links on a torus, a mesh corner over 2: no link can carry
    # fewer than ceil((N - 1) / 4) resp. ceil((N - 1) / 2); the balanced plan carries no more
    topology = load_topology(spec)
    channels = build_channels(topology, chunk_bytes=1024)
    schedule = plan_all_gather(grid_of(topology), channels, 1, PlanVariant(balance=True))
    load = np.bincount(schedule.channel, weights=schedule.count, minlength=channels.num_direct)
    assert load.max() == share
    unbalanced = plan_all_gather(grid_of(topology), channels, 1, PlanVariant(balance=False))
    assert np.bincount(unbalanced.channel, weights=unbalanced.count).max() > share


def test_messages_carry_runs_of_one_row_and_every_pair_once():
    topology = torus2d(6, 4)
    schedule = plan_all_gather(grid_of(topology), build_channels(topology, chunk_bytes=1024), 3)
    row_chunks = 6 * 3
    first_row, last_row = schedule.chunk // row_chunks, (schedule.chunk + schedule.count - 1) // row_chunks
    assert np.array_equal(first_row, last_row)
    delivered = schedule.delivery().reshape(24, 72)
    owners = np.arange(72) // 3
    assert np.all((delivered >= 0) == (owners[None, :] != np.arange(24)[:, None]))


def test_refusals_name_the_reason():
    options = SynthesisOptions(size_bytes=MiB)
    with pytest.raises(InputError, match="needs a 2-D mesh or torus without switches; ring:8 is not one"):
        get("gridpipe").make(ring(8), Collective.ALL_GATHER, 8, options)
    with pytest.raises(InputError, match="gridpipe synthesizes all-gather, reduce-scatter, all-reduce, not all-to-all"):
        get("gridpipe").make(torus2d(4, 4), Collective.ALL_TO_ALL, 16, options)


def test_cli_writes_files_that_verify_and_refuses_a_ring_with_exit_2(cli, tmp_path):
    result = cli("synth", "-t", "mesh2d:4x4", "-c", "all-reduce", "-s", "1MiB", "-a", "gridpipe", "-o", str(tmp_path / "ar"), "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    jsonschema.validate(document, schema("synth"))
    assert document["algorithm"] == "gridpipe"
    verified = cli("verify", str(tmp_path / "ar"))
    assert verified.exit_code == 0, verified.output
    refused = cli("synth", "-t", "ring:8", "-a", "gridpipe", "-o", str(tmp_path / "no"))
    assert refused.exit_code == 2
    assert "ring:8 is not one" in " ".join(refused.output.split()) and "Traceback" not in refused.output
    assert not (tmp_path / "no").exists()


def test_variants_planned_in_forked_processes_give_the_serial_choice(monkeypatch):
    """From PARALLEL_PAIRS the variants are planned beside each other in forked processes; the
    plan chosen must be the one the serial planning chooses."""
    from chakra_collectives.synth import gridpipe

    topology = torus2d(6, 4)
    channels = build_channels(topology, chunk_bytes=2**16)
    serial = gridpipe._best_all_gather(grid_of(topology), channels, 1)
    monkeypatch.setattr(gridpipe, "PARALLEL_PAIRS", 1)
    forked = gridpipe._best_all_gather(grid_of(topology), channels, 1)
    assert forked.time_ns == serial.time_ns
    assert np.array_equal(forked.count, serial.count)
