"""Baselines: every one verifies, and simple cases meet their closed-form times."""

from __future__ import annotations

import pytest

from chakra_collectives.errors import InputError
from chakra_collectives.ir import Collective
from chakra_collectives.network import predict_time
from chakra_collectives.synth.baselines import bidirectional_ring, binomial_tree, direct, recursive_halving_doubling, ring
from chakra_collectives.topology import load_topology
from chakra_collectives.verify import verify_algorithm
from network_helpers import transfer_ns

SUPPORTED = {
    "ring": ["all-gather", "reduce-scatter", "all-reduce"],
    "biring": ["all-gather", "reduce-scatter", "all-reduce"],
    "direct": ["all-gather", "reduce-scatter", "all-reduce", "all-to-all"],
    "rhd": ["all-gather", "reduce-scatter", "all-reduce"],
    "tree": ["broadcast", "reduce"],
}
BUILD = {"ring": ring, "biring": bidirectional_ring, "direct": direct, "rhd": recursive_halving_doubling, "tree": binomial_tree}


@pytest.mark.parametrize("name, collective", [(n, c) for n, cs in SUPPORTED.items() for c in cs])
@pytest.mark.parametrize("ranks", [2, 3, 4, 5, 8])
def test_every_baseline_verifies(name, collective, ranks):
    if name == "rhd" and ranks & (ranks - 1):
        pytest.skip("power of two only")
    kwargs = {"chunks": 2, "root": ranks - 1} if name == "tree" else {"chunks_per_npu": 2}
    algo = BUILD[name](Collective.parse(collective), ranks, size_bytes=2**20, **kwargs)
    report = verify_algorithm(algo)
    assert report.ok, report.checks


def test_refusals():
    with pytest.raises(InputError, match="power-of-two"):
        recursive_halving_doubling(Collective.ALL_REDUCE, 6, size_bytes=2**20)
    with pytest.raises(InputError, match="tree does not implement all-reduce"):
        binomial_tree(Collective.ALL_REDUCE, 4, size_bytes=2**20)
    with pytest.raises(InputError, match="direct does not implement broadcast"):
        direct(Collective.BROADCAST, 4, size_bytes=2**20)


def test_closed_forms_on_a_fully_connected_network():
    # direct all-gather on fully-connected N: every link carries one share, all in parallel
    n, size = 8, 8 * 2**20
    topo = load_topology(f"fully-connected:{n}")
    hop = transfer_ns(topo.links[0], size // n)
    assert predict_time(direct(Collective.ALL_GATHER, n, size_bytes=size), topo) == pytest.approx(hop)
    # recursive doubling: log2 N steps moving 1, 2, 4 shares
    rd = recursive_halving_doubling(Collective.ALL_GATHER, n, size_bytes=size)
    expected = sum(transfer_ns(topo.links[0], (size // n) * 2**i) for i in range(3))
    assert predict_time(rd, topo) == pytest.approx(expected)
    # binomial broadcast of one chunk: ceil(log2 N) hops one after another
    tree = binomial_tree(Collective.BROADCAST, n, size_bytes=size)
    assert predict_time(tree, topo) == pytest.approx(3 * transfer_ns(topo.links[0], size))


def test_bidirectional_ring_halves_the_ring_time():
    n, size = 8, 8 * 2**20
    topo = load_topology(f"ring:{n}")
    one = predict_time(ring(Collective.ALL_GATHER, n, size_bytes=size), topo)
    two = predict_time(bidirectional_ring(Collective.ALL_GATHER, n, size_bytes=size), topo)
    assert two == pytest.approx((n - 1) * transfer_ns(topo.links[0], size / (2 * n)))
    assert two < 0.55 * one


# ---------------------------------------------------------------------- column-wise = one op at a time
import baseline_reference as reference  # noqa: E402  (the op-at-a-time AlgorithmBuilder versions)
import numpy as np  # noqa: E402
from hypothesis import given, settings, strategies as st  # noqa: E402

from chakra_collectives.ir import Buffer  # noqa: E402
from chakra_collectives.ir.steps import StepBuilder  # noqa: E402

REFERENCE = {
    "ring": reference.ring, "biring": reference.bidirectional_ring, "direct": reference.direct,
    "rhd": reference.recursive_halving_doubling, "tree": reference.binomial_tree,
}


@settings(max_examples=60, deadline=None)
@given(
    case=st.sampled_from([(n, c) for n, cs in SUPPORTED.items() for c in cs]),
    ranks=st.integers(2, 20),
    k=st.integers(1, 3),
    root=st.integers(0, 19),
)
def test_column_wise_baselines_equal_the_op_at_a_time_reference(case, ranks, k, root):
    """Same operations, order, tags, dependencies and buffers as building them one call at a time."""
    name, collective = case
    if name == "rhd":
        ranks = 1 << (ranks.bit_length() - 1)
    tree = name == "tree"
    ours_kwargs = {"chunks": k, "root": root % ranks} if tree else {"chunks_per_npu": k}
    reference_kwargs = {"chunks": k, "root": root % ranks} if tree else {"chunks_per_rank": k}  # the reference keeps the old name
    ours = BUILD[name](Collective.parse(collective), ranks, size_bytes=2**20, **ours_kwargs)
    theirs = REFERENCE[name](Collective.parse(collective), ranks, size_bytes=2**20, **reference_kwargs)
    assert ours.equals(theirs)


def test_step_builder_refuses_two_writes_of_one_slot_in_a_step():
    b = StepBuilder(Collective.ALL_GATHER, num_ranks=3, chunk_count=3, size_bytes=3)
    with pytest.raises(ValueError, match="twice"):
        b.transfer(np.array([0, 1]), np.array([2, 2]), src=(Buffer.INPUT, 0), dst=(Buffer.OUTPUT, 0), count=1)


def test_large_baselines_use_compact_columns():
    algo = ring(Collective.ALL_REDUCE, 64, size_bytes=2**20)
    assert algo.ops.dep_idx.dtype == np.int32 and algo.ops.src_off.dtype == np.int32
