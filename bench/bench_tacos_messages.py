"""Where TACOS's All-Gather loses time at scale: its messages, link by link and over time.

``python bench/bench_tacos_messages.py [--full] [--size 64MiB] [--topologies mesh2d:32x32,...] [--layouts row,snake,...]``

The matcher alone (no lowering, no files), one seed, every default merge variant
(:func:`~chakra_collectives.synth.tacos.default_variants`), All-Gather, one chunk per NPU, on
2-D meshes and tori of 256 and 1,024 NPUs (``--full``: 4,096 too, a few minutes per variant
and ~250 MB; no lock needed). Per variant:

* ``eff``: the bound (``lower_bounds(...).best_ns``) over the schedule's time;
* ``chunks/msg``: chunks per message; ``msgs/link``: messages per direct link (mean, and the
  busiest link's);
* ``busy``: the share of the time links carry a message; ``latency``: the share of that busy time
  spent on latency (a message pays its link's latency once, whatever it carries);
* ``diam``: hops of the longest shortest path; ``max msgs``: messages per link the bound allows at
  efficiency 0.93 (a link that carries ``C`` chunks, serialization ``s`` and latency ``l`` each,
  finishes by ``bound / 0.93`` only with at most ``(bound / 0.93 - C s) / l`` messages);
* what ends a message (:func:`message_ends`, shares of the messages): the chunk after its run has
  not reached the sender yet (``lacks``), the destination holds it or is getting it (``held``),
  it is across the edge of the sender's own chunks (``edge``), or the run is at its cap (``cap``).

Then, for the best variant, each tenth of the schedule's time: messages started, chunks per
message, and link busy share.

Findings (2026-11-27, All-Gather 64 MiB): the links are busy (about 1.0 of the time until the
last tenth), and the loss is latency, paid per message: on torus2d:64x64 (0.823) links carry
110 messages each, 9.3 chunks per message (14.9% of busy time is latency), where 0.93 allows 47
-- fewer than the 64 hops the farthest chunk crosses, one message per hop. What the matcher
could change was measured before any IR change (matcher prototypes, same seeds): messages that
carry *any* set of candidate chunks instead of one run of consecutive ids (what several chunk
ranges per message would allow) do not grow past what the links make available -- 1,024-NPU
torus 0.905 -> 0.903 (6.5 chunks/message, cap 8), mesh 0.938 -> 0.917; 4,096-NPU torus with
the cap at 65 chunks 0.823 -> 0.685 (13.2 chunks/message, but a destination's other in-links
starve while one long message carries what they could have). Holding a link back until its
message reaches 2-4 chunks (when more is arriving at its source) loses 23-47% (1,024-NPU torus,
16 KiB chunks: the 4,096-NPU chunk size); preferring runs of up to the cap over runs of 16
(0.823 -> 0.812) or globally rarest chunks first (1,024-NPU torus 0.905 -> 0.901) lose too;
giving each of an NPU's in-links its own range of chunk ids to start runs in (so that what a
corner still misses stays in long runs per link) is even on the mesh (4,096 NPUs 0.885 ->
0.886) and loses on the torus (1,024 NPUs 0.905 -> 0.887). On meshes the links into the
corners decide (on mesh2d:32x32 the corner receives its last chunk at the schedule's end, 163
messages over its 2 links); the rest of the mesh is idle after about half the time. Holding back
only the links into the corners until their message has 8 or 24 chunks loses too (mesh2d:32x32,
16 KiB chunks: 6% and 31% slower).
The greedy's message size is set by how fast chunks reach a link's source, not by their ids.

What ends a message, and three cheaper rules tried against it (2026-11-27, matcher prototypes,
seed 0, one run each at load 7-17; All-Gather 16 MiB on 1,024 NPUs, 16 KiB chunks as at 4,096
NPUs, where the cap is 65 chunks; efficiency of the extending / reaching-back variants, before
0.710 / 0.728 on torus2d:32x32 and 0.745 / 0.793 on mesh2d:32x32). A message stops because the
next chunk id has not reached its sender (torus 53%, mesh 50% of the messages) or its
destination already has it or is getting it (43%, 47%); the sender's own-chunk edge ends 3-4%,
the cap none. (a) A run that preferably continues where its link's last message ended: torus
0.706 / 0.725, mesh 0.750 / 0.791 -- noise (extending runs already prefer starts after what the
destination holds or is getting, the link's last message included). (b) Runs that bridge a
gap of one or two chunks the destination already has (sent again; each costs 305 ns of link
time and saves a 500 ns latency): torus 0.707 / 0.721 (gaps of 1) and 0.707 / 0.728 (up to
2), mesh 0.747 / 0.790 -- messages hardly fewer (207,144 -> 206,478): after a chunk the
destination has comes a longer stretch it has, or one the sender lacks. (c) Several ranges per
message (what an IR range column would allow): each link takes up to ``R`` runs, each the
rule's run among the candidates the earlier runs left, all within the cap, paying one latency:
torus R = 2, 4, 8, 64: 0.756, 0.772, 0.741, 0.606 (extending; reaching back R = 2, 4: 0.753,
0.765), 207,144 -> 163,859 messages at R = 4; mesh reaching back R = 4: 0.802 (+1.2%); at 64
MiB (64 KiB chunks) torus2d:32x32 0.906 -> 0.917 (R = 2) and 0.911 (R = 4). A few ranges gain
1-6%; many starve the destination's other links, as *any* set did above. At 4,096 NPUs (64 MiB,
the same prototype, R = 4, load 4-22): torus2d:64x64 0.818 / 0.823 -> 0.869 / 0.863, 1.40M
messages instead of 2.09M; mesh2d:64x64 reaching back 0.885 -> 0.902, 1.71M messages instead of
2.34M (the plain matcher re-run that day: 0.885 / 0.851, as before, 72-82 CPU s per matching;
the prototype's bookkeeping took 254 and 564). The message
is still limited by what reached its sender since its link's last one.
Several runs as committed (:data:`~chakra_collectives.synth.tacos.SEVERAL_RUNS_VARIANTS`, further
runs from the scarcest candidates; 2026-11-27, seed 0, 1,024-NPU torus, 16 MiB, extending):
0.710 -> 0.773 at up to 4 runs, 237,893 -> 164,579 messages, 4.4 -> 6.4 chunks per message in
3.52 runs (79% of the messages take all 4), latency 27.1% -> 20.5% of the links' busy time; the
last run still ends where the sender lacks the next chunk (47%) or the destination has it (50%).

``--layouts``: the chunk layout, by renumbering a grid's NPUs (chunk ``c`` starts on NPU ``c``;
the same graph, so the same bound): ``row`` (the builders' numbering), ``snake`` (odd rows
reversed), ``morton`` (Z-order), ``hilbert``, ``diagonal`` (by anti-diagonal), ``random``.
Row by row is as good as any (2026-11-27, torus2d:32x32, 16 MiB: 16 KiB chunks as at 4,096
NPUs; the better of the two 1,024-NPU variants): row 107.2 us (5.1 chunks per message), snake
109.9, Morton 108.5, Hilbert 108.4, diagonal 108.3, random 143.9 (2.0 chunks per message): ids
that neighbours share keep runs merging, no numbering of them keeps them longer.
"""

from __future__ import annotations

import argparse
import sys
import time

import networkx as nx
import numpy as np

from chakra_collectives.bounds import lower_bounds
from chakra_collectives.ir import Collective
from chakra_collectives.synth.channels import build_channels
from chakra_collectives.synth.matcher import match_all_gather, message_caps
from chakra_collectives.synth.schedule import Schedule
from chakra_collectives.synth.tacos import default_variants, distinct_variants
from chakra_collectives.topology import Topology, load_topology
from chakra_collectives.units import parse_size

TARGET = 0.93
DECILES = 10
LAYOUTS = ("row", "snake", "morton", "hilbert", "diagonal", "random")


def _hilbert(side: int, x: int, y: int) -> int:
    """Position of cell ``(x, y)`` along the Hilbert curve of a ``side x side`` grid (``side`` a power of 2)."""
    d, s = 0, side // 2
    while s > 0:
        rx, ry = int(x & s > 0), int(y & s > 0)
        d += s * s * ((3 * rx) ^ ry)
        if ry == 0:
            if rx == 1:
                x, y = s - 1 - x, s - 1 - y
            x, y = y, x
        s //= 2
    return d


def _morton(row: int, col: int) -> int:
    return sum((((col >> b) & 1) << (2 * b)) | (((row >> b) & 1) << (2 * b + 1)) for b in range(16))


def renumbered(topology: Topology, rows: int, cols: int, layout: str) -> Topology:
    """``topology`` (a ``rows x cols`` grid numbered row by row) with its NPUs renumbered in ``layout`` order."""
    if layout == "random":
        new_id = np.random.default_rng(1).permutation(rows * cols)
    else:
        key = {
            "row": lambda r, c: r * cols + c,
            "snake": lambda r, c: r * cols + (c if r % 2 == 0 else cols - 1 - c),
            "morton": _morton,
            "hilbert": lambda r, c: _hilbert(max(rows, cols), c, r),
            "diagonal": lambda r, c: ((r + c) % rows, r),
        }[layout]
        ranked = sorted(range(rows * cols), key=lambda i: key(i // cols, i % cols))
        new_id = np.empty(rows * cols, dtype=np.int64)
        new_id[ranked] = np.arange(rows * cols)
    result = Topology(topology.num_npus, name=f"{topology.name} ({layout})")
    for link in topology.links:
        result.add_link(int(new_id[link.src]), int(new_id[link.dst]), link.bandwidth_gbps, link.latency_ns)
    return result


def message_ends(schedule: Schedule, caps: np.ndarray) -> dict[str, float]:
    """Why each message stops where it does: the share of messages whose next chunk id (the one a
    longer run would take next) is past its ``caps`` (per direct channel) -- ``cap`` -- or across
    the edge of the sender's own chunks -- ``edge`` -- or not yet at the sender -- ``lacks`` -- or
    already matched to the destination (it holds it or a message brings it) -- ``held``; a message
    of several runs (:attr:`~chakra_collectives.synth.tacos.MergeVariant.ranges`): its last run's."""
    c, k = schedule.num_chunks, schedule.chunks_per_npu
    index = schedule.delivery()
    message, start, length = schedule.runs()  # a message of several runs: the chunk after its last
    last = np.searchsorted(message, np.arange(schedule.num_transfers), side="right") - 1
    following = (start + length)[last].astype(np.int64)
    own_first = schedule.src.astype(np.int64) * k
    capped = schedule.count >= caps[schedule.channel]
    edge = ~capped & ((following >= c) | (following == own_first) | (following == own_first + k))
    rest = ~capped & ~edge
    following = np.minimum(following, c - 1)
    at_src = index[schedule.src.astype(np.int64) * c + following]
    arrives = np.where(at_src >= 0, schedule.end[np.maximum(at_src, 0)], 0.0)  # the owner holds it from 0
    lacks = rest & (arrives > schedule.start)
    at_dst = index[schedule.dst.astype(np.int64) * c + following]
    held = rest & ~lacks & (at_dst >= 0) & (schedule.start[np.maximum(at_dst, 0)] <= schedule.start)
    total = len(schedule.start)
    return {name: float(mask.sum()) / total for name, mask in (("cap", capped), ("edge", edge), ("lacks", lacks), ("held", held))}


def profile(spec: str, size_bytes: int, layout: str = "row") -> None:
    topology = load_topology(spec)
    if layout != "row":
        rows, cols = (int(side) for side in spec.split(":")[1].split("x"))
        topology = renumbered(topology, rows, cols, layout)
        spec = f"{spec} {layout}"
    n = topology.num_npus
    channels = build_channels(topology, chunk_bytes=-(-size_bytes // n))
    bound = lower_bounds(topology, Collective.ALL_GATHER, size_bytes, method="exact").best_ns
    diameter = nx.diameter(nx.DiGraph(list(zip(channels.direct_src.tolist(), channels.direct_dst.tolist()))))
    links = channels.direct_link
    latency = channels.link_latency[links]
    serial = channels.chunk_bytes / channels.link_rate[links]
    best = None
    for variant in distinct_variants(channels, default_variants(n, 1)):
        started = time.perf_counter()
        schedule = match_all_gather(
            channels, 1, seed=0, latency_ratio=variant.latency_ratio, extend_held=variant.extend_held, reach_back=variant.reach_back,
            ranges=variant.ranges,
        )
        seconds = time.perf_counter() - started
        total = schedule.time_ns
        channel = schedule.channel
        msgs = np.bincount(channel, minlength=channels.num_direct)
        chunks = np.bincount(channel, weights=schedule.count, minlength=channels.num_direct)
        busy = schedule.end - schedule.start
        latency_share = float(latency[channel].sum() / busy.sum())
        allowed = (bound / TARGET - chunks * serial) / latency
        ends = message_ends(schedule, message_caps(channels, variant.latency_ratio)[0])
        print(
            f"{spec:<15} {str(variant):<34} {bound / total:>5.3f} {schedule.count.mean():>10.1f} {msgs.mean():>8.1f} {msgs.max():>6d} "
            f"{busy.sum() / (channels.num_direct * total):>5.2f} {latency_share:>7.3f} {diameter:>5d} {max(0.0, float(allowed.min())):>8.0f} {seconds:>7.1f} "
            + " ".join(f"{ends[name]:>5.2f}" for name in ("lacks", "held", "edge", "cap")),
            flush=True,
        )
        if best is None or total < best.time_ns:
            best = schedule
    assert best is not None
    edges = np.linspace(0.0, best.time_ns, DECILES + 1)
    tenth = np.clip(np.searchsorted(edges, best.start, side="right") - 1, 0, DECILES - 1)
    # busy time inside each tenth (messages may span several)
    overlap = np.clip(np.minimum(best.end[:, None], edges[None, 1:]) - np.maximum(best.start[:, None], edges[None, :-1]), 0.0, None).sum(axis=0)
    print(f"  best variant by tenth of its time: messages / chunks per message / busy  ({spec})")
    for d in range(DECILES):
        chosen = tenth == d
        mean = best.count[chosen].mean() if chosen.any() else 0.0
        print(f"  {d + 1:>4}/10 {int(chosen.sum()):>9,} {mean:>6.1f} {overlap[d] / (channels.num_direct * best.time_ns / DECILES):>5.2f}")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="also the 4,096-NPU mesh and torus")
    parser.add_argument("--size", default="64MiB", help="All-Gather size (default 64MiB)")
    parser.add_argument("--topologies", help="comma-separated topologies instead of the default list")
    parser.add_argument("--layouts", default="row", help=f"chunk layouts of 2-D grids, comma-separated ({', '.join(LAYOUTS)}; default row)")
    args = parser.parse_args(argv)
    layouts = args.layouts.split(",")
    if not set(layouts) <= set(LAYOUTS):
        parser.error(f"--layouts: choose from {', '.join(LAYOUTS)}")
    sides = (16, 32, 64) if args.full else (16, 32)
    specs = args.topologies.split(",") if args.topologies else [f"{shape}:{s}x{s}" for s in sides for shape in ("mesh2d", "torus2d")]
    print(f"All-Gather {args.size}, 1 chunk per NPU, matcher only, seed 0")
    print(f"{'topology':<15} {'variant':<34} {'eff':>5} {'chunks/msg':>10} {'msgs/link':>8} {'max':>6} {'busy':>5} {'latency':>7} {'diam':>5} {'max msgs':>8} {'s':>7} {'lacks':>5} {'held':>5} {'edge':>5} {'cap':>5}")
    for spec in specs:
        for layout in layouts:
            profile(spec, parse_size(args.size), layout)


if __name__ == "__main__":
    main(sys.argv[1:])
