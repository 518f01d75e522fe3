"""Process groups (issue 24): group collectives against the group's own bound, concurrent groups,
and hybrid TP x DP / MoE steps with topology-aware producers against rings.

* :func:`group_efficiency_table` -- ``synthesize(..., group=G)`` for rows, columns, strided and
  random subsets of the suite's fabrics: efficiency against the group's own bound
  (:func:`~chakra_collectives.synth.group_bounds`: the fabric's links, the members the only
  sources and sinks) for every producer that serves groups, and the ring's;
* :func:`concurrent_table` -- ``synth --groups``: the data-parallel groups of a TP x DP job at
  once, each plan's time together against the slowest group alone;
* :func:`step_table` -- a hybrid TP x DP and an MoE step replayed with ``*=forestcoll`` (and
  ``*=tacos`` when TACOS serves groups) against ``*=ring``: iteration time and the mean time of
  each kind of group collective.

Targets (issue 24): efficiency >= 0.90 against the group's bound; joint never slower than the
separate syntheses replayed together; no group collective slower than its ring.
The synthesis times are single runs (the tables are about the algorithms, not speed).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections import defaultdict

from chakra_collectives.replay import replay
from chakra_collectives.replay.groups import ProcessGroups
from chakra_collectives.synth import synthesize
from chakra_collectives.synth.concurrent import synthesize_concurrent
from chakra_collectives.synth.registry import get
from chakra_collectives.topology import load_topology
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
    return [name for name in ("tacos", "forestcoll") if get(name).groups]


def group_efficiency_table(fabrics: list[str]) -> list[float]:
    """Print the efficiency table; returns every topology-aware efficiency (for the target)."""
    producers = group_producers()
    print(f"\ngroup collectives, {SIZE // 2**20} MiB: efficiency against the group's own bound ({', '.join(producers)} vs ring)")
    print(f"{'fabric':<14} {'group':<8} {'ranks':>5} {'collective':<11} " + " ".join(f"{p:>10}" for p in producers) + f" {'ring':>7} {'synth s':>8}")
    found = []
    for spec in fabrics:
        fabric = load_topology(spec)
        side = int(spec.split(":")[1].split("x")[-1]) if "x" in spec else 8
        for label, group in subsets(fabric.num_npus, side).items():
            for collective in COLLECTIVES:
                cells = []
                started = time.perf_counter()
                for name in producers:
                    result = synthesize(fabric, collective, SIZE, algorithm=name, group=group)
                    cells.append(result.efficiency)
                    found.append(result.efficiency)
                ring = synthesize(fabric, collective, SIZE, algorithm="ring", group=group).efficiency
                spent = time.perf_counter() - started
                print(f"{spec:<14} {label:<8} {len(group):>5} {collective:<11} " + " ".join(f"{e:>10.3f}" for e in cells) + f" {ring:>7.3f} {spent:>8.1f}")
    if found:
        print(f"median {statistics.median(found):.3f}, min {min(found):.3f}, >= 0.90: {sum(e >= 0.90 for e in found)} of {len(found)}")
    return found


def concurrent_table(cases: list[tuple[str, int]]) -> None:
    """``synth --groups`` over the DP groups of TP x DP (``(fabric, tp)``; DP = NPUs / tp)."""
    print(f"\nconcurrent data-parallel groups, all-reduce {SIZE // 2**20} MiB, forestcoll: time together (slowest alone)")
    print(f"{'fabric':<14} {'tp x dp':<8} " + " ".join(f"{p:>22}" for p in ("separate", "confined", "ring")) + f" {'joint':>9} {'joint/sep':>9}")
    for spec, tp in cases:
        fabric = load_topology(spec)
        dp = fabric.num_npus // tp
        groups = {str(t): tuple(d * tp + t for d in range(dp)) for t in range(tp)}
        result = synthesize_concurrent(fabric, groups, "all-reduce", SIZE, algorithm="forestcoll", bounds=False)
        cells = []
        for name in ("separate", "confined", "ring"):
            plan = result.plans.get(name)
            cells.append("-" if plan is None else f"{plan.together_ns / 1e3:.0f} ({max(plan.alone_ns.values()) / 1e3:.0f}) us")
        ratio = result.joint_ns / result.plans["separate"].together_ns
        print(f"{spec:<14} {f'{tp}x{dp}':<8} " + " ".join(f"{c:>22}" for c in cells) + f" {result.joint.name:>9} {ratio:>9.3f}")


def step_table(cases: list[tuple[str, str, int, int]]) -> None:
    """Hybrid and MoE steps (``(kind, fabric, inner, dp)``) with each producer against ``*=ring``."""
    producers = ["ring", *group_producers()]
    model = uniform_model(layers=4, forward="80us", gradient="32MiB", activation="4MiB", optimizer="40us")
    print("\ntraining steps: iteration time, and mean time of each kind of group collective (us)")
    for kind, spec, inner, dp in cases:
        fabric = load_topology(spec)
        workload = hybrid_parallel(model, inner, dp) if kind == "hybrid" else mixture_of_experts(model, inner, dp)
        groups = ProcessGroups.from_mapping(workload.groups, num_ranks=workload.num_ranks)
        prefix = f"/tmp/bench_groups_{kind}_{spec.replace(':', '_')}"
        workload.write(prefix)
        rows = {}
        for name in producers:
            started = time.perf_counter()
            result = replay(prefix, fabric, default_algorithm=f"*={name}", groups=groups)
            by_role: dict[str, list[float]] = defaultdict(list)
            for call in result.collectives:
                by_role[f"{call.collective} {workload.group_roles.get(call.group, 'world')}"].append(call.time_ns)
            rows[name] = (result.total_ns, {role: statistics.mean(t) for role, t in by_role.items()}, time.perf_counter() - started)
        roles = sorted(rows["ring"][1])
        print(f"{kind} {inner}x{dp} on {spec}: " + ", ".join(roles))
        for name, (total, per_role, spent) in rows.items():
            ratio = total / rows["ring"][0]
            cells = ", ".join(f"{per_role[r] / 1e3:.0f}" for r in roles)
            print(f"  *={name:<11} iteration {total / 1e3:>8.0f} us ({ratio:.3f} of ring's); per kind: {cells}  [{spent:.1f} s]")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small fabrics only (about a minute)")
    parser.add_argument("--tables", default="efficiency,concurrent,steps", help="which tables, comma-separated")
    args = parser.parse_args(argv)
    tables = set(args.tables.split(","))
    fabrics = QUICK_FABRICS if args.quick else FABRICS
    if "efficiency" in tables:
        group_efficiency_table(fabrics)
    if "concurrent" in tables:
        concurrent_table([("torus2d:4x4", 4)] if args.quick else [("torus2d:4x4", 4), ("torus2d:8x8", 8), ("dgx:4x8", 8)])
    if "steps" not in tables:
        return 0
    steps = [("hybrid", "torus2d:4x4", 4, 4), ("moe", "torus2d:4x4", 4, 4)]
    if not args.quick:
        steps += [("hybrid", "torus2d:8x8", 8, 8), ("moe", "torus2d:8x8", 8, 8), ("hybrid", "dgx:4x8", 8, 4), ("moe", "dgx:4x8", 8, 4)]
    step_table(steps)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
