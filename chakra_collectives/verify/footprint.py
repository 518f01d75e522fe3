"""What verifying an algorithm costs in memory, known before it starts.

The symbolic run keeps a value for every slot of every rank's input, output and scratch
buffers (a ``(chunk, ranks)`` pair; a reduction makes a new one), and its numpy levels and
the race check (a block of ranks at a time) lay out a few columns per operation. Measured on
BFB all-reduces (``hypercube:9``, 9 chunks per NPU: 4.7M slots, 1.34M operations, 1.26 GiB
above the operation table; ``hypercube:10`` with one chunk per NPU: 2.1M slots, 4.95M
operations, 0.76 GiB), :data:`PER_SLOT` and :data:`PER_OPERATION` are an upper envelope.

>>> from chakra_collectives.ir import Collective
>>> from chakra_collectives.synth.baselines import ring
>>> e = verification_estimate(ring(Collective.ALL_REDUCE, 1024, size_bytes=2**20))
>>> e.work
'3.15M (rank, chunk) slots, 5.24M operations'
>>> round(e.nbytes / 2**30, 2)
1.43
"""

from __future__ import annotations

import numpy as np

from chakra_collectives.ir import CollectiveAlgorithm
from chakra_collectives.resources import Estimate, count

PER_SLOT = 320
"""Bytes per buffer slot the symbolic run holds (measured about 265 with reductions at 512 ranks)."""
PER_OPERATION = 100
"""Bytes per operation of the symbolic run's levels and the race check (measured about 52)."""
ADVICE = "verify fewer chunks per NPU (--chunks-per-npu) or fewer ranks"


def verification_estimate(algo: CollectiveAlgorithm) -> Estimate:
    """The memory :func:`~chakra_collectives.verify.verify_algorithm` needs for ``algo``."""
    per_rank = np.maximum(np.asarray(algo.input_chunks), algo.chunk_count) + np.maximum(np.asarray(algo.output_chunks), algo.chunk_count)
    slots = float(np.broadcast_to(per_rank, (algo.num_ranks,)).sum()) + float(np.broadcast_to(np.asarray(algo.scratch_chunks), (algo.num_ranks,)).sum())
    operations = float(algo.num_ops)
    return Estimate(
        f"verifying {algo.describe()}",
        PER_SLOT * slots + PER_OPERATION * operations,
        f"{count(slots)} (rank, chunk) slots, {count(operations)} operations",
        ADVICE,
    )


__all__ = ["PER_OPERATION", "PER_SLOT", "verification_estimate"]
