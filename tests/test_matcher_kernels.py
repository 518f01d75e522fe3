"""The compiled matcher kernels' incremental state (:mod:`chakra_collectives.synth.matcher_kernels`)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

kernels = pytest.importorskip("chakra_collectives.synth.matcher_kernels", exc_type=ImportError)  # numba: an optional dependency


def _by(ends: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The channels grouped by ``ends`` (NPU): CSR pointers and channel ids."""
    order = np.argsort(ends, kind="stable")
    return np.searchsorted(ends[order], np.arange(n + 1)), order


def _rederived(held: np.ndarray, wanted: np.ndarray, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """The candidate summary worked out from scratch in numpy: bit ``w`` of row ``c`` when word ``w`` of ``held[src[c]] & wanted[dst[c]]`` is nonzero."""
    nonzero = (held[src] & wanted[dst]) != 0
    padded = np.zeros((len(src), -(-held.shape[1] // 64) * 64), dtype=bool)
    padded[:, : held.shape[1]] = nonzero
    return np.packbits(padded, axis=1, bitorder="little").view(np.uint64)


@st.composite
def states(draw):
    n = draw(st.integers(2, 6))
    words = draw(st.sampled_from([1, 3, 65, 70]))  # summaries of one and of two words
    channels = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)).filter(lambda c: c[0] != c[1]), min_size=1, max_size=12))
    seed = draw(st.integers(0, 2**32 - 1))
    steps = draw(st.lists(st.tuples(st.booleans(), st.integers(0, n - 1), st.integers(0, words * 64 - 1), st.integers(1, 130)), max_size=25))
    return n, words, np.array(channels, dtype=np.int64), seed, steps


@settings(max_examples=60, deadline=None)
@given(states())
def test_the_candidate_summary_kept_as_runs_change_is_the_rederived_one(state):
    """Setting runs of ``held`` (chunks arriving) and clearing runs of ``wanted`` (chunks matched) in
    any order, on random bitsets, with repeated channels and NPUs without any: the summary
    :func:`set_runs` keeps equals the one worked out again from the rows after every step."""
    n, words, channels, seed, steps = state
    rng = np.random.default_rng(seed)
    sparse = rng.integers(0, 2**64, size=(2, n, words), dtype=np.uint64) & rng.integers(0, 2**64, size=(2, n, words), dtype=np.uint64)
    held, wanted = sparse[0] & rng.integers(0, 2**64, size=(n, words), dtype=np.uint64), sparse[1]
    wanted[rng.random((n, words)) < 0.4] = 0  # whole words wanted or not
    src, dst = channels[:, 0], channels[:, 1]
    out_ptr, out_channels = _by(src, n)
    in_ptr, in_channels = _by(dst, n)
    summary = kernels.candidate_words(held, wanted, src, dst)
    assert np.array_equal(summary, _rederived(held, wanted, src, dst))
    for arriving, npu, first, count in steps:
        count = min(count, words * 64 - first)
        rows, firsts, counts = np.array([npu]), np.array([first]), np.array([count])
        if arriving:
            kernels.set_runs(held, wanted, summary, rows, firsts, counts, out_ptr, out_channels, dst)
        else:
            kernels.set_runs(wanted, held, summary, rows, firsts, counts, in_ptr, in_channels, src, clear=True)
        assert np.array_equal(summary, _rederived(held, wanted, src, dst))
