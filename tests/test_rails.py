"""Rails: the All-Reduce between a DGX-like fabric's servers over every NIC."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from chakra_collectives.errors import InputError
from chakra_collectives.ir import Collective
from chakra_collectives.network.collective import simulate_collective
from chakra_collectives.synth import group_bounds, synthesize
from chakra_collectives.synth.rails import find_islands, rails_all_reduce
from chakra_collectives.topology import load_topology
from chakra_collectives.verify import verify_algorithm

MIB = 2**20


@pytest.mark.parametrize("group", [(0, 8, 16, 24), (1, 5, 9, 13, 17, 21, 25, 29), (1, 8, 13, 15, 16, 24, 28, 31), None])
@pytest.mark.parametrize("depth", [0, 16])
def test_rails_verify_and_cross_the_servers_2k_minus_2_times(group, depth):
    fabric = load_topology("dgx:4x8")
    size = 16 * MIB
    algo = rails_all_reduce(fabric, group, size, chunks_per_npu=8, depth=depth)
    assert verify_algorithm(algo).ok
    timing = simulate_collective(algo, fabric)
    hub = fabric.num_npus
    down = [i for i, link in enumerate(fabric.links) if link.src == hub]
    # every position enters the other three servers once to be reduced and once more as a result:
    # 2(k-1) M through the NIC downlinks, the least any All-Reduce moves (bounds.multiway_cut_bound)
    assert timing.links.bytes[down].sum() == pytest.approx(6 * size, rel=0.02)
    assert timing.time_ns >= group_bounds(fabric, Collective.ALL_REDUCE, size, group).best_ns


def test_rails_beat_the_other_producers_on_dgx_groups_and_best_keeps_them():
    fabric = load_topology("dgx:4x8")
    strided = (1, 5, 9, 13, 17, 21, 25, 29)
    rails = synthesize(fabric, Collective.ALL_REDUCE, 64 * MIB, algorithm="rails", group=strided, chunks_per_npu=32)
    forest = synthesize(fabric, Collective.ALL_REDUCE, 64 * MIB, algorithm="forestcoll", group=strided)
    assert rails.predicted_ns < forest.predicted_ns
    assert rails.efficiency > 0.75  # 601.4 us against the servers' 468.75 us
    assert rails.algorithm.placement == strided


def test_islands_are_the_servers_that_hold_members():
    fabric = load_topology("dgx:4x8")
    found = find_islands(fabric, (3, 12, 13, 30))
    assert found.members == [[0], [1, 2], [3]] and found.rails == 8 and found.switch == 32
    assert found.ports[1] == list(range(8, 16))
    assert find_islands(fabric, tuple(range(8))) is None  # one server: no rails between servers
    assert find_islands(load_topology("torus2d:4x4"), (0, 1)) is None


def test_rails_refuse_a_group_inside_one_server_and_best_does_not_try_them():
    fabric = load_topology("dgx:2x4")
    with pytest.raises(InputError, match="rails needs a fabric of islands"):
        synthesize(fabric, Collective.ALL_REDUCE, MIB, algorithm="rails", group=(0, 1, 2))
    best = synthesize(fabric, Collective.ALL_REDUCE, MIB, algorithm="best", group=(0, 1, 2), chunks_per_npu=1)
    assert "rails" not in {c.name for c in best.candidates}
    across = synthesize(fabric, Collective.ALL_REDUCE, MIB, algorithm="best", group=(0, 4), chunks_per_npu=2)
    assert "rails" in {c.name for c in across.candidates}


def test_synth_writes_one_et_per_group_rank_with_its_routes_and_verify_proves_it(tmp_path):
    prefix = tmp_path / "dp"
    command = [sys.executable, "-m", "chakra_collectives", "synth", "-t", "dgx:4x8", "-c", "all-reduce", "-s", "8MiB", "-a", "rails",
               "--group", "0,8,16,24", "-k", "4", "-o", str(prefix), "--json"]
    summary = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
    assert summary["algorithm"] == "rails" and sorted(p.name for p in tmp_path.iterdir()) == [f"dp.{r}.et" for r in range(4)]
    verdict = subprocess.run([sys.executable, "-m", "chakra_collectives", "verify", str(prefix), "--json"], capture_output=True, text=True, check=True)
    assert json.loads(verdict.stdout)["ok"]
    from converters.chakra_et.reader import read_algorithm

    algo = read_algorithm(prefix)
    assert algo.placement == (0, 8, 16, 24) and algo.routes  # the rails' paths through the other GPUs' NICs
    assert all(path[0] in algo.placement and path[-1] in algo.placement for path in algo.routes)
    assert np.count_nonzero(algo.ops.route >= 0) > 0
    bad = subprocess.run([*command[:-7], "--group", "0-3", "-o", str(tmp_path / "no")], capture_output=True, text=True)  # one server
    assert bad.returncode == 2 and "rails needs" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    assert not list(tmp_path.glob("no*"))
