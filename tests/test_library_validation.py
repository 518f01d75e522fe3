"""Every public entry point checks its inputs and raises the tool's own errors (not only the CLI)."""

from __future__ import annotations

import pytest

from chakra_collectives.bounds import lower_bounds
from chakra_collectives.converters.chakra_et import single_collective_workload
from chakra_collectives.converters.msccl import MscclOptions, write_msccl
from chakra_collectives.converters.msccl.lift import lift_algorithm
from chakra_collectives.errors import InputError
from chakra_collectives.ir import Collective
from chakra_collectives.ir.execution import execute
from chakra_collectives.ir.matching import match_messages
from chakra_collectives.network import NetworkModel, predict_time
from chakra_collectives.replay import replay
from chakra_collectives.synth import synthesize
from chakra_collectives.synth.baselines import bidirectional_ring, binomial_tree, direct, recursive_halving_doubling, ring
from chakra_collectives.synth.tacos import tacos
from chakra_collectives.topology import Topology


def _two_islands() -> Topology:
    """Built by hand, so no loader has checked it: NPUs {0, 1} and {2, 3} are not linked."""
    topo = Topology(4, name="islands")
    topo.add_link(0, 1, 50.0, 500.0, bidirectional=True)
    topo.add_link(2, 3, 50.0, 500.0, bidirectional=True)
    return topo


ALGO = ring(Collective.ALL_GATHER, 4, size_bytes=2**20)


@pytest.mark.parametrize(
    "call",
    [
        lambda topo, tmp: tacos(topo, Collective.ALL_GATHER, 2**20),
        lambda topo, tmp: synthesize(topo, "all-gather", 2**20),
        lambda topo, tmp: predict_time(ALGO, topo),
        lambda topo, tmp: lower_bounds(topo, Collective.ALL_GATHER, 2**20),
        lambda topo, tmp: NetworkModel(topo),
        lambda topo, tmp: replay(single_collective_workload(tmp / "w", "all-gather", 4, 2**20)[0], topo),
    ],
    ids=["tacos", "synthesize", "predict_time", "lower_bounds", "NetworkModel", "replay"],
)
def test_a_disconnected_hand_built_topology_is_refused(call, tmp_path):
    with pytest.raises(InputError, match=r"^islands: NPU 2 cannot be reached from NPU 0$"):
        call(_two_islands(), tmp_path)


def test_connectedness_is_checked_again_after_a_change():
    topo = Topology(2, name="pair")
    topo.add_link(0, 1, 50.0, 500.0, bidirectional=True)
    NetworkModel(topo)
    topo.add_switch()
    topo.add_link(0, 2, 50.0, 500.0)  # the switch is a node too, but only NPUs must reach each other
    assert NetworkModel(topo).topology is topo
    lonely = Topology(3, name="grown")
    lonely.add_link(0, 1, 50.0, 500.0, bidirectional=True)
    with pytest.raises(InputError, match="NPU 2 cannot be reached"):
        NetworkModel(lonely)
    lonely.add_link(1, 2, 50.0, 500.0, bidirectional=True)
    assert NetworkModel(lonely).topology is lonely


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: tacos(Topology(2), Collective.ALL_GATHER, 0), "collective size must be positive, got 0"),
        (lambda: tacos(Topology(2), Collective.BROADCAST, 64), "TACOS synthesizes all-gather, reduce-scatter, all-reduce, all-to-all, gather, scatter, pattern, not broadcast"),
        (lambda: ring(Collective.ALL_GATHER, 4, size_bytes=-1), "collective size must be positive, got -1"),
        (lambda: ring(Collective.ALL_GATHER, 4, size_bytes=64, chunks_per_npu=0), "chunks must be positive, got 0"),
        (lambda: bidirectional_ring(Collective.ALL_GATHER, 4, size_bytes=64, chunks_per_npu=-2), "chunks must be positive, got -2"),
        (lambda: direct(Collective.ALL_TO_ALL, 4, size_bytes=0), "collective size must be positive, got 0"),
        (lambda: recursive_halving_doubling(Collective.ALL_REDUCE, 4, size_bytes=64, chunks_per_npu=0), "chunks must be positive, got 0"),
        (lambda: binomial_tree(Collective.BROADCAST, 4, size_bytes=64, chunks=0), "chunks must be positive, got 0"),
        (lambda: lift_algorithm(ALGO, MscclOptions(proto="bogus")), "proto must be Simple, LL or LL128, not 'bogus'"),
        (lambda: MscclOptions(min_bytes=-5), "min_bytes and max_bytes must not be negative, got -5 and 0"),
        (lambda: MscclOptions(max_bytes=-1), "min_bytes and max_bytes must not be negative, got 0 and -1"),
        (lambda: execute(ALGO, match_messages(ALGO).partner, semantics="lazy"), "unknown send semantics 'lazy'"),
        (lambda: execute(ALGO, match_messages(ALGO).partner, order="random"), "unknown execution order 'random'"),
    ],
)
def test_bad_arguments_raise_input_errors(call, message):
    with pytest.raises(InputError) as error:
        call()
    assert message in str(error.value)


def test_a_refused_msccl_write_leaves_no_file(tmp_path):
    with pytest.raises(InputError):
        write_msccl(ALGO, tmp_path / "x.xml", MscclOptions(proto="LL64"))
    assert not list(tmp_path.iterdir())
