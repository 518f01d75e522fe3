"""MSCCLang-shaped all-pairs all-reduce programs, as MSCCL-IR text (built with :mod:`msccl_text`).

The shape of msccl-tools' ``allreduce_a100_allpairs`` with the manual threadblock policy: each
rank's threadblock ``j`` sends to and receives from rank ``j`` (threadblock ``rank`` has no
peer); every rank scatters block ``j`` of its input (``n`` chunks, one ``cnt=n`` step) into
rank ``j``'s scratch, reduces the ``n - 1`` copies it receives chunk by chunk -- chunk ``t`` of
its block on threadblock ``t`` -- and sends its reduced block to every other rank, after a run
of nops that waits for every threadblock's last reduction. Instance ``i`` is a copy on channel
``i``, threadblocks ``i * n ...`` and chunks ``i * n * n ...`` (blocked replication).

A threadblock with a peer has ``n + 3`` real steps (s, r, ``n - 1`` reductions, s, r) and
``n - 2`` nops, ``2n + 1`` steps whatever the number of instances: 17 for 8 ranks, 33 for 16.
"""

from __future__ import annotations

from msccl_text import algo, gpu, nop, step, tb


def allpairs_allreduce(n: int, instances: int = 1) -> str:
    """The in-place all-reduce of ``n`` ranks, ``instances`` copies (see the module docstring)."""
    share = n * n
    gpus = []
    for r in range(n):
        others = [q for q in range(n) if q != r]
        tbs = []
        for inst in range(instances):
            base, scratch, tb0 = inst * share, inst * n * (n - 1), inst * n
            for t in range(n):
                steps: list[str] = []
                if t != r:
                    slot_on_t = scratch + [q for q in range(n) if q != t].index(r) * n
                    steps.append(step(len(steps), "s", src=f"i{base + t * n}", dst=f"s{slot_on_t}", cnt=n))
                    steps.append(step(len(steps), "r", src=f"i{base + r * n}", dst=f"s{scratch + others.index(t) * n}", cnt=n, hasdep=1))
                for k, sender in enumerate(others):  # chunk t of each received block, into my block
                    last = k == n - 2
                    steps.append(
                        step(len(steps), "re", src=f"s{scratch + k * n + t}", dst=f"i{base + r * n + t}", dep=(tb0 + sender, 1), hasdep=int(last))
                    )
                if t != r:
                    waits = [(tb0 + u, _last_reduce(u, r, n)) for u in range(n) if u != t]
                    for dep in waits[:-1]:
                        steps.append(nop(len(steps), dep))
                    steps.append(step(len(steps), "s", src=f"i{base + r * n}", dst=f"i{base + r * n}", cnt=n, dep=waits[-1]))
                    steps.append(step(len(steps), "r", src=f"i{base + t * n}", dst=f"i{base + t * n}", cnt=n))
                tbs.append(tb(tb0 + t, t if t != r else -1, t if t != r else -1, inst, *steps))
        gpus.append(gpu(r, instances * share, 0, instances * n * (n - 1), *tbs))
    text = algo("allreduce", n, instances * share, *gpus, inplace=1, name="allreduce_pairs")
    return text.replace('nchannels="1"', f'nchannels="{instances}"', 1)


def _last_reduce(t: int, rank: int, n: int) -> int:
    """Index of the last reduction in threadblock ``t`` of ``rank`` (after its s and r, if it has peers)."""
    return (0 if t == rank else 2) + n - 2
