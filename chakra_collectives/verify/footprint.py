"""What verifying an algorithm costs in memory, known before it starts.

The numpy symbolic run (:func:`~chakra_collectives.verify.semantics.run_moves`) keeps per slot
the index of its value, per initial value its chunk and rank, and per reduced slot a new value
whose ranks are a bitset (a word per 64 ranks); its levels and the race check (a block of ranks
at a time, at most :data:`~chakra_collectives.verify.races.ACCESSES_PER_BLOCK` slot accesses)
lay out a few columns per operation. Measured on BFB all-reduces (2026-11-27): ``hypercube:10``
with 10 chunks per NPU (32.6M slots, 10.5M reduced, 5.18M operations) peaks 2.37 GiB above the
operation table, ``hypercube:9`` (7.4M slots, 2.35M reduced, 1.34M operations) 0.79 GiB;
:data:`PER_SLOT`, :data:`PER_OPERATION` and :data:`PER_ACCESS` with the bitset words are an
upper envelope. An algorithm that run cannot take (a faulty reduction, a deadlock) is run in
Python, a tuple per slot: :func:`symbolic_run_estimate`, asked for before that run.

>>> from chakra_collectives.ir import Collective
>>> from chakra_collectives.synth.baselines import ring
>>> algo = ring(Collective.ALL_REDUCE, 1024, size_bytes=2**20)
>>> e = verification_estimate(algo)
>>> e.work
'3.15M (rank, chunk) slots, 1.05M reduced, 5.24M operations'
>>> round(e.nbytes / 2**30, 2)
1.1
>>> round(symbolic_run_estimate(algo).nbytes / 2**30, 2)
1.43
"""

from __future__ import annotations

import numpy as np

from chakra_collectives.ir import CollectiveAlgorithm, OpKind
from chakra_collectives.resources import Estimate, count
from chakra_collectives.verify.races import ACCESSES_PER_BLOCK

PER_SLOT = 16
"""Bytes per buffer slot of the numpy run (its value's index, an initial value's chunk and rank)."""
PER_REDUCED = 16
"""Bytes per reduced slot besides its ranks' bitset (its chunk, the level's operands)."""
PER_OPERATION = 100
"""Bytes per operation of the numpy run's levels and execution order."""
PER_ACCESS = 110
"""Bytes per slot access of one block of the race check (measured about 105)."""
PYTHON_PER_SLOT = 320
"""Bytes per buffer slot of the Python symbolic run (measured about 265 with reductions at 512 ranks)."""
ADVICE = "verify fewer chunks per NPU (--chunks-per-npu) or fewer ranks"


def _slots(algo: CollectiveAlgorithm) -> float:
    per_rank = np.maximum(np.asarray(algo.input_chunks), algo.chunk_count) + np.maximum(np.asarray(algo.output_chunks), algo.chunk_count)
    return float(np.broadcast_to(per_rank, (algo.num_ranks,)).sum()) + float(np.broadcast_to(np.asarray(algo.scratch_chunks), (algo.num_ranks,)).sum())


def verification_estimate(algo: CollectiveAlgorithm) -> Estimate:
    """The memory :func:`~chakra_collectives.verify.verify_algorithm` needs for ``algo``."""
    moved = np.maximum(algo.ops.count.astype(np.int64), 0)
    reduced = float(moved[algo.ops.kind == OpKind.REDUCE].sum())
    accesses = min(2.0 * float(moved.sum()), float(ACCESSES_PER_BLOCK))
    slots, operations = _slots(algo), float(algo.num_ops)
    bitset = 8 * ((algo.num_ranks + 63) // 64)
    return Estimate(
        f"verifying {algo.describe()}",
        PER_SLOT * slots + (PER_REDUCED + bitset) * reduced + PER_OPERATION * operations + PER_ACCESS * accesses,
        f"{count(slots)} (rank, chunk) slots, {count(reduced)} reduced, {count(operations)} operations",
        ADVICE,
    )


def symbolic_run_estimate(algo: CollectiveAlgorithm) -> Estimate:
    """The memory of the Python symbolic run, which finds and reports a fault the numpy run cannot take."""
    slots, operations = _slots(algo), float(algo.num_ops)
    return Estimate(
        f"finding the fault of {algo.describe()} slot by slot",
        PYTHON_PER_SLOT * slots + PER_OPERATION * operations,
        f"{count(slots)} (rank, chunk) slots, {count(operations)} operations",
        ADVICE,
    )


__all__ = ["PER_ACCESS", "PER_OPERATION", "PER_REDUCED", "PER_SLOT", "PYTHON_PER_SLOT", "symbolic_run_estimate", "verification_estimate"]
