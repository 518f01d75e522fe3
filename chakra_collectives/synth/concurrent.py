"""Concurrent process groups: every group of one collective call, planned so they share the links.

The data-parallel groups of a TP x DP job all-reduce at the same time. A group synthesized alone
(:func:`~chakra_collectives.synth.synthesize` with ``group=``) may relay through the other
groups' NPUs and links, which are just as busy. :func:`synthesize_concurrent` times every group
alone, the separate syntheses run together on the shared fabric
(:func:`~chakra_collectives.network.collective.simulate_together`), and the alternatives it
plans jointly, keeping the plan whose slowest group finishes first:

``separate``
    each group's own synthesis (relays anywhere);
``confined``
    each group synthesized on the fabric without the links that touch another group's members
    (when the producer plans for the topology's links and every group stays connected so): the
    groups cannot step on each other;
``flow``
    for collectives that only move data (all-to-all, gather, scatter) with TACOS: one
    multicommodity-flow LP over every group's demands at once
    (:func:`~chakra_collectives.synth.multipath.joint_flows`), each group matched along its share
    of it (:func:`~chakra_collectives.synth.tacos.tacos_for_group`'s ``flows``; once per class of
    groups the fabric's symmetries carry onto one another, whose shares they carry alike), the
    chunks per rank that make the groups fastest together;
``ring``
    the ring baseline in each group's rank order (the network's routes).

The joint plan is the best of those run together, so it is never slower than the separate
syntheses replayed together.

>>> from chakra_collectives.topology import load_topology
>>> columns = {str(c): (c, c + 4, c + 8, c + 12) for c in range(4)}
>>> result = synthesize_concurrent(load_topology("torus2d:4x4"), columns, "all-gather", "4MiB", algorithm="forestcoll")
>>> result.joint_ns <= result.plans["separate"].together_ns
True
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

from chakra_collectives import progress
from chakra_collectives.bounds import SUPPORTED as BOUNDED
from chakra_collectives.bounds import concurrent_bound_ns
from chakra_collectives.errors import InputError
from chakra_collectives.ir import Collective, CollectiveAlgorithm
from chakra_collectives.ir.demand import demand_for
from chakra_collectives.network.collective import predict_time, simulate_together
from chakra_collectives.synth.embedding import carried, embed
from chakra_collectives.synth.registry import SynthesisOptions, get
from chakra_collectives.topology import Topology
from chakra_collectives.topology.groups import GroupView, carrying_symmetry, check_group, disjoint_groups, group_view
from chakra_collectives.units import parse_size


@dataclass
class GroupPlan:
    """One way to run every group: an algorithm per group, each alone and all together."""

    name: str
    algorithms: dict[str, CollectiveAlgorithm]
    alone_ns: dict[str, float]
    together_ns: float = 0.0
    """When the slowest group finishes, all running at once."""
    finish_ns: dict[str, float] = field(default_factory=dict)
    """When each group finishes, all running at once."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "together_ns": self.together_ns,
            "groups": {
                name: {"alone_ns": self.alone_ns[name], "together_ns": self.finish_ns[name], "algorithm": algo.name}
                for name, algo in self.algorithms.items()
            },
        }


@dataclass
class ConcurrentResult:
    """Every plan (see the module docstring) and the joint one, fastest together."""

    topology: Topology
    collective: Collective
    size_bytes: int
    groups: dict[str, tuple[int, ...]]
    plans: dict[str, GroupPlan]
    skipped: dict[str, str]
    """Plans not made, and why."""
    bounds_ns: dict[str, float] = field(default_factory=dict)
    """Each group's own lower bound (alone on the fabric)."""
    together_bound_ns: float | None = None
    """A lower bound on all the groups at once (:func:`~chakra_collectives.bounds.concurrent_bound_ns`:
    the groups share the cuts' links); ``None`` without bounds."""

    @property
    def efficiency(self) -> float | None:
        """The together bound over the joint plan's time."""
        return None if self.together_bound_ns is None else self.together_bound_ns / self.joint_ns

    @property
    def joint(self) -> GroupPlan:
        """The plan whose slowest group finishes first (ties: the order of :data:`PLANS`)."""
        return min(self.plans.values(), key=lambda plan: (plan.together_ns, PLANS.index(plan.name)))

    @property
    def joint_ns(self) -> float:
        return self.joint.together_ns

    def as_dict(self) -> dict[str, Any]:
        return {
            "topology": self.topology.name,
            "collective": self.collective.value,
            "size_bytes": self.size_bytes,
            "groups": {name: list(members) for name, members in self.groups.items()},
            "bounds_ns": self.bounds_ns,
            "together_bound_ns": self.together_bound_ns,
            "efficiency": self.efficiency,
            "plans": {name: plan.as_dict() for name, plan in self.plans.items()},
            "skipped": self.skipped,
            "joint": self.joint.name,
            "joint_ns": self.joint_ns,
        }


PLANS = ("separate", "confined", "flow", "ring")

FLOW_COLLECTIVES = (Collective.ALL_TO_ALL, Collective.GATHER, Collective.SCATTER)
"""What the ``flow`` plan serves: unicast pieces, one demand per group."""


def check_concurrent_groups(groups: Mapping[str, Any], num_npus: int, *, what: str) -> dict[str, tuple[int, ...]]:
    """The groups of one concurrent call, checked: each a group of the fabric
    (:func:`~chakra_collectives.topology.groups.check_group`), no two sharing a rank."""
    if not groups:
        raise InputError(f"{what}: no groups")
    checked = {str(name): check_group(members, num_npus, what=f"{what}: group {name!r}") for name, members in groups.items()}
    disjoint_groups(checked, what=what)
    return checked


def confined_view(topology: Topology, groups: Mapping[str, tuple[int, ...]], name: str) -> GroupView:
    """Group ``name``'s view of ``topology`` (:func:`~chakra_collectives.topology.groups.group_view`)
    without the links that touch a member of another group."""
    view = group_view(topology, groups[name])
    others = {m for other, members in groups.items() if other != name for m in members}
    fabric = view.fabric_node
    confined = Topology(view.topology.num_npus, num_switches=view.topology.num_switches, name=f"{topology.name} confined to group {name}")
    for link in view.topology.links:
        if int(fabric[link.src]) not in others and int(fabric[link.dst]) not in others:
            confined.add_link(link.src, link.dst, link.bandwidth_gbps, link.latency_ns)
    return GroupView(confined, fabric)


def synthesize_concurrent(
    topology: Topology,
    groups: Mapping[str, Any],
    collective: Collective | str,
    size_bytes: int | str,
    *,
    algorithm: str = "forestcoll",
    bounds: bool = True,
    **options: Any,
) -> ConcurrentResult:
    """Plan ``collective`` over every group of ``groups`` (name -> fabric NPUs in rank order;
    disjoint) running at once (see the module docstring). ``options`` go to
    :func:`~chakra_collectives.synth.synthesize` (``chunks_per_npu``, ``trees_per_npu``...)."""
    from chakra_collectives.synth import group_bounds, synthesize

    collective = Collective.parse(collective) if isinstance(collective, str) else collective
    nbytes = parse_size(size_bytes)
    topology.validate()
    checked = check_concurrent_groups(groups, topology.num_npus, what="groups")
    plans: dict[str, GroupPlan] = {}
    skipped: dict[str, str] = {}
    with progress.task("concurrent groups"):
        first = next(iter(checked))
        made = synthesize(topology, collective, nbytes, algorithm=algorithm, group=checked[first], bounds="none", **options)
        producer = made.algorithm_name
        separate = _by_symmetry(topology, checked, {first: made.algorithm},
                                lambda members: synthesize(topology, collective, nbytes, algorithm=algorithm, group=members, bounds="none", **options).algorithm)
        plans["separate"] = GroupPlan("separate", separate, {n: predict_time(a, topology) for n, a in separate.items()})
        if get(producer).groups:
            try:
                plans["confined"] = _confined(topology, checked, collective, nbytes, producer, options)
            except InputError as error:
                skipped["confined"] = error.message
        else:
            skipped["confined"] = f"{producer} does not plan for the topology's links"
        flow_bound_ns = None
        if producer == "tacos" and collective in FLOW_COLLECTIVES:
            made_flow, flow_bound_ns = _joint_flow(topology, checked, collective, nbytes, options)
            if made_flow is None:
                skipped["flow"] = "the joint multicommodity-flow LP is too large"
            else:
                plans["flow"] = made_flow
        if collective in get("ring").collectives:
            rings = {n: get("ring").build(topology, collective, SynthesisOptions(size_bytes=nbytes, group=m)).algorithm for n, m in checked.items()}
            plans["ring"] = GroupPlan("ring", rings, {n: predict_time(a, topology) for n, a in rings.items()})
        for plan in plans.values():
            finish = simulate_together(list(plan.algorithms.values()), topology)
            plan.finish_ns = dict(zip(plan.algorithms, finish))
            plan.together_ns = max(finish)
        found = ConcurrentResult(topology, collective, nbytes, checked, plans, skipped)
        if bounds and collective in BOUNDED:
            found.bounds_ns = {n: group_bounds(topology, collective, nbytes, m).best_ns for n, m in checked.items()}
            found.together_bound_ns, _ = concurrent_bound_ns(topology, collective, nbytes, checked.values())
        elif bounds and flow_bound_ns is not None:  # the joint LP's optimum bounds every group at once
            found.bounds_ns = {n: group_bounds(topology, collective, nbytes, m, root=int(options.get("root", 0))).best_ns for n, m in checked.items()}
            found.together_bound_ns = max(flow_bound_ns, *found.bounds_ns.values())
    return found


def _confined(topology, groups, collective, nbytes, producer, options) -> GroupPlan:
    """Each group planned by ``producer`` on its :func:`confined_view` (the chunks per NPU that
    make it fastest there, unless ``options`` name them), embedded in the fabric."""
    from chakra_collectives.synth import synthesize

    names = {members: name for name, members in groups.items()}

    def confined(members: tuple[int, ...]) -> CollectiveAlgorithm:
        view = confined_view(topology, groups, names[members])
        algo = synthesize(view.topology, collective, nbytes, algorithm=producer, bounds="none", **options).algorithm
        return replace(embed(algo, view, topology), name=f"{algo.name or producer} (confined)")

    made = _by_symmetry(topology, groups, {}, confined)
    return GroupPlan("confined", made, {n: predict_time(a, topology) for n, a in made.items()})


def _joint_flow(
    topology: Topology, groups: Mapping[str, tuple[int, ...]], collective: Collective, nbytes: int, options: Mapping[str, Any]
) -> tuple[GroupPlan | None, float | None]:
    """The ``flow`` plan (see the module docstring): ``K`` = 1, 2, 4, ... while the groups together
    get faster (or at most :data:`~chakra_collectives.synth.synthesis.GROUP_MULTIPATH_SLACK` slower),
    and the joint LP's optimum (ns; a bound on all the groups at once); ``None`` for both when the
    joint LP is too large."""
    from chakra_collectives.synth.multipath import joint_flows
    from chakra_collectives.synth.synthesis import GROUP_MULTIPATH_SLACK, auto_chunk_counts
    from chakra_collectives.synth.tacos import tacos_for_group

    root = int(options.get("root", 0))
    given = options.get("chunks_per_npu")
    views = {g: group_view(topology, members) for g, members in groups.items()}
    names = {members: g for g, members in groups.items()}
    counts = [int(given)] if given else auto_chunk_counts(max(len(m) for m in groups.values()), group=True)
    best: GroupPlan | None = None
    bound_ns: float | None = None
    previous = float("inf")
    with progress.task("joint flow", total=len(counts), unit="K") as done:
        for k in counts:
            demands = {g: demand_for(collective, num_npus=len(m), chunks_per_npu=k, root=root) for g, m in groups.items()}
            chunk_bytes = {g: float(-(-nbytes // (len(m) * k))) for g, m in groups.items()}
            solved = joint_flows(topology, views, demands, chunk_bytes)
            if solved is None:
                return best, bound_ns
            optimum, flows = solved
            bound_ns = optimum if bound_ns is None else min(bound_ns, optimum)

            def along_flow(members: tuple[int, ...], k: int = k, flows: dict = flows) -> CollectiveAlgorithm:
                made = tacos_for_group(topology, members, collective, nbytes, chunks_per_npu=k, root=root, seed=int(options.get("seed", 0)), flows=flows[names[members]])
                return replace(made.algorithm, name="tacos (joint flow)")

            made = _by_symmetry(topology, groups, {}, along_flow)
            finish = simulate_together(list(made.values()), topology)
            plan = GroupPlan("flow", made, {g: predict_time(a, topology) for g, a in made.items()}, max(finish), dict(zip(made, finish)))
            if best is None or plan.together_ns < best.together_ns:
                best = plan
            done.advance()
            if plan.together_ns >= previous * (1 + GROUP_MULTIPATH_SLACK):
                break
            previous = plan.together_ns
    return best, bound_ns


def _by_symmetry(
    topology: Topology, groups: Mapping[str, tuple[int, ...]], made: dict[str, CollectiveAlgorithm], plan: Callable[[tuple[int, ...]], CollectiveAlgorithm],
) -> dict[str, CollectiveAlgorithm]:
    """An algorithm per group: ``plan(members)`` for the first of each class of groups a symmetry of
    the fabric carries onto one another (the family kept whole), the others carried
    (:func:`~chakra_collectives.synth.embedding.carried`); ``made``: groups already planned."""
    family = list(groups.values())
    found = dict(made)
    for name, members in groups.items():
        if name in found:
            continue
        for source, algo in list(found.items()):
            perm = carrying_symmetry(topology, groups[source], members, family)
            if perm is not None:
                found[name] = replace(carried(algo, perm, topology), name=algo.name)
                break
        else:
            found[name] = plan(members)
    return {name: found[name] for name in groups}


__all__ = ["ConcurrentResult", "GroupPlan", "PLANS", "check_concurrent_groups", "confined_view", "synthesize_concurrent"]
