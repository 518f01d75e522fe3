"""Messages of several chunk ranges, split into messages of one range each.

A SEND or RECV may move several ranges of chunks as one message (:meth:`~chakra_collectives.ir.ops.OpTable.runs`);
formats whose steps move one run of consecutive chunks (MSCCL-IR's ``cnt``) need one message per
range. :func:`split_ranges` gives that algorithm: each such SEND and RECV becomes one operation
per range, in order, with the same dependencies, and whatever waited for it waits for all of
them. Piece ``j > 0`` of a message is tagged ``tag + j * stride`` (``stride``: one more than the
largest tag), so every message between two ranks keeps its own tag.

>>> from chakra_collectives.ir.ops import Buffer, OpKind, OpTable
>>> from chakra_collectives.ir.algorithm import CollectiveAlgorithm
>>> import numpy as np
>>> table = OpTable.from_rows([
...     dict(rank=0, kind=OpKind.SEND, peer=1, tag=0, src=(Buffer.INPUT, 0), count=2, more=[(3, 1)]),
...     dict(rank=1, kind=OpKind.RECV, peer=0, tag=0, dst=(Buffer.OUTPUT, 0), count=2, more=[(3, 1)]),
...     dict(rank=1, kind=OpKind.COPY, src=(Buffer.OUTPUT, 0), dst=(Buffer.SCRATCH, 0), count=1, deps=[0]),
... ])
>>> split = split_ranges(table)
>>> [(split.op(i).kind.name, split.op(i).tag, str(split.op(i).src or split.op(i).dst), split.op(i).count) for i in range(4)]
[('SEND', 0, 'i[0]', 1), ('SEND', 1, 'i[3]', 1), ('RECV', 0, 'o[0]', 1), ('RECV', 1, 'o[3]', 1)]
>>> split.op(4).deps      # the COPY waits for both pieces of the RECV
(0, 1)
"""

from __future__ import annotations

import numpy as np

from chakra_collectives.ir.ops import OpKind, OpTable


def split_ranges(ops: OpTable) -> OpTable:
    """``ops`` with every message of several chunk ranges split into one message per range
    (see the module docstring); ``ops`` itself when every message moves one range."""
    if not ops.multi_range:
        return ops
    size = len(ops)
    pieces = 1 + np.diff(ops.more_ptr).astype(np.int64)
    start = np.cumsum(pieces) - pieces  # each operation's first piece
    owner = np.repeat(np.arange(size, dtype=np.int64), pieces)
    piece = np.arange(len(owner), dtype=np.int64) - start[owner]
    own = np.where(ops.kind == OpKind.RECV, ops.dst_off, ops.src_off).astype(np.int64)
    _, offset, count = ops.runs(np.arange(size), own)
    recv = ops.kind[owner] == OpKind.RECV
    stride = int(ops.tag.max(initial=0)) + 1
    tag = np.where(ops.tag[owner] >= 0, ops.tag[owner].astype(np.int64) + piece * stride, ops.tag[owner])
    columns = {
        name: getattr(ops, name)[owner]
        for name in ("rank", "kind", "peer", "src_buf", "dst_buf", "nbytes", "duration_ns", "route", "threadblock", "channel")
    }
    # byte-only operations have no ranges; a piece's bytes follow from its count
    columns["nbytes"] = np.where(pieces[owner] > 1, -1, columns["nbytes"])
    columns["src_off"] = np.where(recv | (ops.src_off[owner] < 0), ops.src_off[owner], offset)
    columns["dst_off"] = np.where(recv, offset, ops.dst_off[owner])
    # dependencies: each piece waits for every piece of what its operation waited for
    dep_owner = np.repeat(np.arange(size, dtype=np.int64), np.diff(ops.dep_ptr))
    target = ops.dep_idx.astype(np.int64)
    per_target = pieces[target]
    expanded = np.repeat(start[target], per_target) + (np.arange(int(per_target.sum())) - np.repeat(np.cumsum(per_target) - per_target, per_target))
    degree = np.bincount(dep_owner, weights=per_target, minlength=size).astype(np.int64)  # per operation, after expansion
    edge_start = np.cumsum(degree) - degree
    new_degree = degree[owner]
    dep_ptr = np.zeros(len(owner) + 1, dtype=np.int64)
    np.cumsum(new_degree, out=dep_ptr[1:])
    # piece p of operation i copies operation i's expanded list
    source = np.repeat(edge_start[owner], new_degree) + (np.arange(int(new_degree.sum())) - np.repeat(dep_ptr[:-1], new_degree))
    dep_idx = expanded[source]
    return OpTable.from_columns(dep_ptr=dep_ptr, dep_idx=dep_idx, tag=tag, count=count, **columns)


__all__ = ["split_ranges"]
