"""Process groups (issue 24): group collectives against the group's own bound, concurrent groups,
and hybrid TP x DP / MoE steps with topology-aware producers against rings.

* :func:`group_efficiency_table` -- ``synthesize(..., group=G)`` for rows, columns, strided and
  random subsets of the suite's fabrics: efficiency against the group's own bound
  (:func:`~chakra_collectives.synth.group_bounds`: the fabric's links, the members the only
  sources and sinks) for every producer that serves groups (rails: members in two DGX servers or
  more), the best of ``best``'s candidates among them (what ``best`` keeps), and the ring's;
* :func:`concurrent_table` -- ``synth --groups``: the data-parallel groups of a TP x DP job at
  once, each plan's time together against the slowest group alone;
* :func:`step_table` -- a hybrid TP x DP and an MoE step replayed with ``*=forestcoll`` (and
  ``*=tacos`` when TACOS serves groups) against ``*=ring``: iteration time and the mean time of
  each kind of group collective.

Targets (issue 24): efficiency >= 0.90 against the group's bound; joint never slower than the
separate syntheses replayed together; no group collective slower than its ring.
The synthesis times are single runs (the tables are about the algorithms, not speed).

All-to-all and patterns:

All-to-all tables (TACOS's forwarding matcher, :mod:`chakra_collectives.synth.forwarding`):

* ``all_to_all_512_table``: the 512-NPU all-to-all (torus3d:8x8x8, 64 MiB per rank) synthesized
  and written by one ``chakra-coll synth`` command, then verified by ``chakra-coll verify``:
  wall and CPU seconds, peak RSS, predicted time and efficiency against the best bound (targets:
  synth + verify <= 70 s, efficiency >= 0.85; PCCL took 11.68 min to synthesize it);
* ``all_to_all_suite_table``: efficiency against the exact multicommodity-flow bound on every
  suite topology up to 64 NPUs (target >= 0.90), K chosen by predicted time as ``synth`` does;
* ``group_all_to_all_table``: the same for the groups of :func:`group_efficiency_table`, with the
  floor of one-piece messages (latency per message, fill and drain of the links through
  non-members: what the flow pipeline cannot beat at those K).

Run from the repository root: ``.venv/bin/python bench/bench_groups.py [--quick] [--tables ...] [--repeat N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from bench_scale import BIN, measured

from chakra_collectives.ir import Collective
from chakra_collectives.ir.demand import demand_for
from chakra_collectives.synth import synthesize
from chakra_collectives.synth.channels import build_channels
from chakra_collectives.synth.concurrent import synthesize_concurrent
from chakra_collectives.synth.multipath import piece_message_floor_ns
from chakra_collectives.synth.registry import get
from chakra_collectives.topology import load_topology
from chakra_collectives.topology.groups import group_view
from chakra_collectives.workload import hybrid_parallel, mixture_of_experts, uniform_model

SIZE = 64 * 2**20
FABRICS = ["torus2d:8x8", "mesh2d:8x8", "dgx:4x8", "switch:64"]
QUICK_FABRICS = ["torus2d:4x4", "dgx:2x8"]
COLLECTIVES = ["all-gather", "all-reduce"]


def subsets(num_npus: int, side: int) -> dict[str, tuple[int, ...]]:
    """A row, a column, a strided and a random subset (seed 0) of ``num_npus`` NPUs laid out ``side`` wide."""
    rng = random.Random(0)
    return {
        "row": tuple(range(side)),
        "column": tuple(range(0, num_npus, side)),
        "strided": tuple(range(1, num_npus, max(2, num_npus // 8))),
        "random": tuple(sorted(rng.sample(range(num_npus), min(8, num_npus // 2)))),
    }


def group_producers() -> list[str]:
    """The producers that plan for a group's links (the registry's ``groups`` capability)."""
    return [name for name in ("tacos", "forestcoll", "rails", "flowcast", "chains") if get(name).groups]


def serves(name: str, fabric, collective: str, group: tuple[int, ...]) -> bool:
    """Whether producer ``name`` serves ``collective`` over ``group`` (rails: members in two servers
    or more); ``best`` tries it when it is also a candidate (chains is not)."""
    producer = get(name)
    return producer.supports(Collective(collective), len(group)) and producer.fits(fabric) and (
        producer.fits_group is None or producer.fits_group(fabric, group))


def group_efficiency_table(fabrics: list[str], collectives: list[str] = COLLECTIVES, producers: list[str] | None = None) -> list[float]:
    """Print the efficiency table (``producers``: default every one that serves groups; ``-``
    where one does not serve the case); returns the best of them per case (what ``best`` keeps,
    for the target). ``rs+ag cap``: the most an all-reduce that reduce-scatters and all-gathers
    with equal shares can reach (the group's all-reduce bound over twice its all-gather's; TACOS's
    group all-reduce may pass it with unequal shares)."""
    producers = group_producers() if producers is None else producers
    print(f"\ngroup collectives, {SIZE // 2**20} MiB: efficiency against the group's own bound ({', '.join(producers)} vs ring)")
    print(f"{'fabric':<14} {'group':<8} {'ranks':>5} {'collective':<11} " + " ".join(f"{p:>10}" for p in producers) + f" {'best of':>7} {'ring':>7} {'rs+ag cap':>9} {'synth s':>8}")
    found = []
    mine: dict[str, list[float]] = defaultdict(list)
    for spec in fabrics:
        fabric = load_topology(spec)
        side = int(spec.split(":")[1].split("x")[-1]) if "x" in spec else 8
        for label, group in subsets(fabric.num_npus, side).items():
            for collective in collectives:
                cells = []
                started = time.perf_counter()
                for name in producers:
                    if not serves(name, fabric, collective, group):
                        cells.append(None)
                        continue
                    result = synthesize(fabric, collective, SIZE, algorithm=name, group=group)
                    cells.append(result.efficiency)
                    mine[name].append(result.efficiency)
                best_of = max((e for name, e in zip(producers, cells) if e is not None and get(name).candidate), default=None)
                if best_of is not None:
                    found.append(best_of)
                ring_result = synthesize(fabric, collective, SIZE, algorithm="ring", group=group)
                ring, bounds = ring_result.efficiency, ring_result.bounds
                cap = "-" if bounds.reduce_scatter_all_gather_ns is None else f"{bounds.best_ns / bounds.reduce_scatter_all_gather_ns:.3f}"
                spent = time.perf_counter() - started
                print(f"{spec:<14} {label:<8} {len(group):>5} {collective:<11} " + " ".join("-".rjust(10) if e is None else f"{e:>10.3f}" for e in cells)
                      + ("-".rjust(8) if best_of is None else f" {best_of:>7.3f}") + f" {ring:>7.3f} {cap:>9} {spent:>8.1f}")
    for name, values in mine.items():
        print(f"{name}: median {statistics.median(values):.3f} over {len(values)}")
    if found:
        print(f"best of them: median {statistics.median(found):.3f}, min {min(found):.3f}, >= 0.90: {sum(e >= 0.90 for e in found)} of {len(found)}")
    return found


def concurrent_table(cases: list[tuple[str, int]], collective: str = "all-reduce", algorithm: str = "forestcoll") -> None:
    """``synth --groups`` over the DP groups of TP x DP (``(fabric, tp)``; DP = NPUs / tp); for
    all-to-all with TACOS also the joint flow plan and the together bound."""
    plans = ("separate", "confined", "flow", "ring") if collective == "all-to-all" else ("separate", "confined", "ring")
    print(f"\nconcurrent groups (the columns of TP x DP), {collective} {SIZE // 2**20} MiB, {algorithm}: time together (slowest alone)")
    print(f"{'fabric':<14} {'tp x dp':<8} " + " ".join(f"{p:>22}" for p in plans) + f" {'joint':>9} {'joint/sep':>9} {'bound us':>9}")
    for spec, tp in cases:
        fabric = load_topology(spec)
        dp = fabric.num_npus // tp
        groups = {str(t): tuple(d * tp + t for d in range(dp)) for t in range(tp)}
        result = synthesize_concurrent(fabric, groups, collective, SIZE, algorithm=algorithm, bounds=collective == "all-to-all")
        cells = []
        for name in plans:
            plan = result.plans.get(name)
            cells.append("-" if plan is None else f"{plan.together_ns / 1e3:.0f} ({max(plan.alone_ns.values()) / 1e3:.0f}) us")
        ratio = result.joint_ns / result.plans["separate"].together_ns
        bound = "-" if result.together_bound_ns is None else f"{result.together_bound_ns / 1e3:.0f}"
        print(f"{spec:<14} {f'{tp}x{dp}':<8} " + " ".join(f"{c:>22}" for c in cells) + f" {result.joint.name:>9} {ratio:>9.3f} {bound:>9}")


def step_table(cases: list[tuple[str, str, int, int]], before: str | None = None) -> None:
    """Hybrid and MoE steps (``(kind, fabric, inner, dp)``) with each producer against ``*=ring``:
    each a whole ``chakra-coll replay`` command (wall and CPU seconds, peak RSS); ``before``: also
    run from that checkout (the code before), the two alternating. The step choices (this code:
    each producer's kind of call against the built-in in the same step) are printed under each row."""
    producers = ["ring", *(name for name in group_producers() if get(name).candidate)]
    model = uniform_model(layers=4, forward="80us", gradient="32MiB", activation="4MiB", optimizer="40us")
    print(f"\ntraining steps: iteration time, and mean time of each kind of group collective (us); load {os.getloadavg()[0]:.1f}")
    for kind, spec, inner, dp in cases:
        workload = hybrid_parallel(model, inner, dp) if kind == "hybrid" else mixture_of_experts(model, inner, dp)
        prefix = Path(tempfile.gettempdir()) / f"bench_groups_{kind}_{spec.replace(':', '_')}"
        workload.write(prefix)
        roles: list[str] = []
        print(f"{kind} {inner}x{dp} on {spec}")
        ring_total = None
        for name in producers:
            for label in ("before", "this") if before else ("this",):
                command = [sys.executable, "-m", "chakra_collectives", "replay", prefix, "-t", spec, "--comm-groups", f"{prefix}.json",
                           "--default-algorithm", f"*={name}", "--json"]
                run = measured(command, cwd=Path(before).resolve() if label == "before" else None)
                document = json.loads(run["stdout"])
                by_role: dict[str, list[float]] = defaultdict(list)
                for call in document["collectives"]:
                    by_role[f"{call['collective']} {workload.group_roles.get(call['group'], 'world')}"].append(call["time_ns"])
                roles = roles or sorted(by_role)
                total = document["total_ns"]
                ring_total = ring_total or total
                cells = ", ".join(f"{r} {statistics.mean(by_role[r]) / 1e3:.0f}" for r in roles)
                print(f"  *={name:<11}{' before' if label == 'before' else '':<7} iteration {total / 1e3:>7.0f} us ({total / ring_total:.3f} of ring's); "
                      f"{cells}  [{run['wall_s']:.1f} s wall, {run['cpu_s']:.1f} s CPU, {run['peak_mib']:.0f} MiB]", flush=True)
                for choice in document.get("step_choices", []) if label == "this" else []:
                    print(f"      in the step: {choice['collective']} over {len(choice['groups'])} x {len(choice['groups'][0])} ranks, "
                          f"{name} {choice['producer_ns'] / 1e3:.0f} us vs {choice['builtin']} {choice['builtin_ns'] / 1e3:.0f} us: {choice['kept']} runs")


A2A_SUITE = ["ring:8", "ring:64", "mesh2d:4x4", "mesh2d:8x8", "torus2d:4x4", "torus2d:8x8", "torus3d:4x4x4", "hypercube:4x4x4",
             "hetero-mesh2d:8x8", "switch:16", "switch:64", "dgx:4x8", "fully-connected:8"]
"""The suite topologies of up to 64 NPUs (bench_synth's, and small tori and switches)."""
A2A_TARGET = 0.90


FLOOR_KS = (1, 2, 4, 8, 16, 32, 64)
"""The chunk counts over which :func:`one_piece_floor_ns` looks for the lowest floor."""


def one_piece_floor_ns(fabric, group: tuple[int, ...]) -> tuple[float, int]:
    """The least :func:`~chakra_collectives.synth.multipath.piece_message_floor_ns` of the group's
    all-to-all over :data:`FLOOR_KS` and its K: no schedule of one-piece messages at those K
    (the flow pipeline's) is faster."""
    view = group_view(fabric, group).topology
    n = len(group)
    floors = {}
    for k in FLOOR_KS:
        channels = build_channels(view, chunk_bytes=-(-SIZE // (n * k)))
        floors[k] = piece_message_floor_ns(channels, demand_for(Collective.ALL_TO_ALL, num_npus=n, chunks_per_npu=k))
    k = min((k for k in floors if floors[k] is not None), key=lambda k: floors[k])
    return floors[k], k


def group_all_to_all_table(fabrics: list[str]) -> list[float]:
    """TACOS's all-to-all over each suite group (several routes per pair, :mod:`chakra_collectives.synth.multipath`,
    matched or pipelined along them, :mod:`chakra_collectives.synth.flowpipe`: ``plan`` says which)
    against the group's exact flow bound, and the floor of one-piece messages
    (:func:`one_piece_floor_ns`: ``1-piece`` is the flow bound over it, the most the pipeline
    could reach); returns the efficiencies."""
    print(f"\ngroup all-to-all, {SIZE // 2**20} MiB: TACOS against the group's exact flow bound")
    print(f"{'fabric':<14} {'group':<8} {'ranks':>5} {'K':>3} {'TACOS us':>9} {'flow us':>9} {'eff':>6} {'plan':>13} {'floor us':>9} {'at K':>4} {'1-piece':>7} {'synth s':>8}")
    found = []
    for spec in fabrics:
        fabric = load_topology(spec)
        side = int(spec.split(":")[1].split("x")[-1]) if "x" in spec else 8
        for label, group in subsets(fabric.num_npus, side).items():
            started = time.perf_counter()
            result = synthesize(fabric, Collective.ALL_TO_ALL, SIZE, algorithm="tacos", group=group, bounds="exact")
            spent = time.perf_counter() - started
            bound = result.bounds.flow_ns or result.bounds.best_ns
            found.append(bound / result.predicted_ns)
            floor, floor_k = one_piece_floor_ns(fabric, group)
            print(
                f"{spec:<14} {label:<8} {len(group):>5} {result.chunks_per_npu:>3} {result.predicted_ns / 1e3:>9.1f} {bound / 1e3:>9.1f} "
                f"{found[-1]:>6.3f} {result.algorithm.provenance.get('matching', '-'):>13} {floor / 1e3:>9.1f} {floor_k:>4} {bound / floor:>7.3f} {spent:>8.1f}"
            )
    if found:
        print(f"median {statistics.median(found):.3f}, min {min(found):.3f}, >= 0.90: {sum(e >= 0.90 for e in found)} of {len(found)}")
    return found


def all_to_all_512_table(repeat: int) -> bool:
    """Whole-command time, peak memory and efficiency of the 512-NPU all-to-all; True if on target."""
    print(f"512-NPU all-to-all (torus3d:8x8x8, 64 MiB per rank), median of {repeat}; load {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as folder:
        prefix = Path(folder) / "a2a"
        synth = measured([BIN, "synth", "-t", "torus3d:8x8x8", "-c", "all-to-all", "-s", "64MiB", "-a", "tacos", "-o", prefix, "--json"], repeat=repeat)
        summary = json.loads(synth["stdout"])
        verify = measured([BIN, "verify", prefix, "--json"], repeat=repeat)
        verdict = json.loads(verify["stdout"])
    total = synth["wall_s"] + verify["wall_s"]
    efficiency = summary["efficiency"]
    print(f"{'step':8} {'wall s':>8} {'CPU s':>8} {'peak MiB':>9}")
    for name, run in (("synth", synth), ("verify", verify)):
        print(f"{name:8} {run['wall_s']:8.1f} {run['cpu_s']:8.1f} {run['peak_mib']:9.0f}")
    print(
        f"total {total:.1f} s (target <= 70 s; PCCL 700.8 s); {summary['operations']:,} operations; synthesis {summary['synthesis_s']:.1f} s, "
        f"prediction {summary['predict_s']:.1f} s, bounds {summary['bounds_s']:.1f} s, ET write {summary['et_write_s']:.1f} s; "
        f"predicted {summary['predicted_ns'] / 1e3:.1f} us, best bound {summary['bounds']['best_ns'] / 1e3:.1f} us, "
        f"efficiency {efficiency:.3f} (target >= 0.85); verified: {verdict['ok']}"
    )
    return total <= 70 and efficiency >= 0.85 and verdict["ok"]


def all_to_all_suite_table() -> list[str]:
    """Efficiency against the exact flow bound on the suite up to 64 NPUs; the topologies below target."""
    header = f"{'topology':20} {'NPUs':>4} {'K':>2} {'TACOS us':>9} {'flow us':>9} {'cut us':>9} {'eff':>6} {'direct us':>10} {'synth s':>8}"
    print(header)
    print("-" * len(header))
    misses = []
    for spec in A2A_SUITE:
        topology = load_topology(spec)
        started = time.perf_counter()
        found = synthesize(topology, Collective.ALL_TO_ALL, SIZE, algorithm="tacos", bounds="exact")
        seconds = time.perf_counter() - started
        direct = synthesize(topology, Collective.ALL_TO_ALL, SIZE, algorithm="direct", bounds="none", chunks_per_npu=1)
        bounds = found.bounds
        flow = bounds.flow_ns
        efficiency = (flow or bounds.best_ns) / found.predicted_ns
        print(
            f"{spec:20} {topology.num_npus:4} {found.chunks_per_npu:2} {found.predicted_ns / 1e3:9.1f} "
            f"{(flow or float('nan')) / 1e3:9.1f} {bounds.cut_ns / 1e3:9.1f} {efficiency:6.3f} {direct.predicted_ns / 1e3:10.1f} {seconds:8.2f}"
        )
        if flow is None or efficiency < A2A_TARGET:
            misses.append(spec)
    print(f"target: efficiency >= {A2A_TARGET} against the exact flow bound; below: {', '.join(misses) or 'none'}")
    return misses


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small fabrics only, no 512-NPU all-to-all (a few minutes)")
    parser.add_argument("--tables", default="efficiency,concurrent,steps,all-to-all,group-a2a,a2a-512", help="which tables, comma-separated")
    parser.add_argument("--repeat", type=int, default=1, help="runs of the 512-NPU all-to-all command (median)")
    parser.add_argument("--collectives", default=",".join(COLLECTIVES), help="efficiency table: which collectives, comma-separated")
    parser.add_argument("--producers", default=None, help="efficiency table: which producers (default: every one that serves groups)")
    parser.add_argument("--fabrics", default=None, help="efficiency and group all-to-all tables: which fabrics, comma-separated (default: the suite's)")
    parser.add_argument("--before", default=None, help="steps table: also run each replay from this checkout of the code before (git archive REV | tar -x -C DIR)")
    args = parser.parse_args(argv)
    tables = set(args.tables.split(","))
    fabrics = args.fabrics.split(",") if args.fabrics else QUICK_FABRICS if args.quick else FABRICS
    if "efficiency" in tables:
        group_efficiency_table(fabrics, args.collectives.split(","), None if args.producers is None else args.producers.split(","))
    if "concurrent" in tables:
        concurrent_table([("torus2d:4x4", 4)] if args.quick else [("torus2d:4x4", 4), ("torus2d:8x8", 8), ("dgx:4x8", 8)])
        concurrent_table([("torus2d:4x4", 4)] if args.quick else [("torus2d:4x4", 4), ("torus2d:8x8", 8)], "all-to-all", "tacos")
    if "steps" in tables:
        steps = [("hybrid", "torus2d:4x4", 4, 4), ("moe", "torus2d:4x4", 4, 4)]
        if not args.quick:
            steps += [("hybrid", "torus2d:8x8", 8, 8), ("moe", "torus2d:8x8", 8, 8), ("hybrid", "dgx:4x8", 8, 4), ("moe", "dgx:4x8", 8, 4)]
        step_table(steps, before=args.before)
    if "all-to-all" in tables:
        all_to_all_suite_table()
    if "group-a2a" in tables:
        group_all_to_all_table(fabrics)
    if "a2a-512" in tables and not args.quick:
        all_to_all_512_table(args.repeat)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
