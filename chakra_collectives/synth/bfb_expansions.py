"""BFB on a line graph, built from its base's BFB programs (Zhao et al.'s line-graph expansion).

In ``L(G)`` the NPU ``l = (c -> e)`` (a link of ``G``) is ``dist_G(b, c) + 1`` hops from the NPU
``(a -> b)``, and its in-neighbours are the links ``(x -> c)``, one per in-link of ``c`` in ``G``.
So at step ``t + 1`` the shards ``l`` receives are those of the links into the NPUs ``b`` that
``c`` receives at step ``t`` of ``G``'s BFB, and a link ``(a -> b)`` may come over ``(x -> c)``
exactly when ``G``'s program lets ``b`` come over ``x -> c``. ``L(G)``'s program at ``(l, t+1)``
is ``G``'s program at ``(c, t)`` with every shard ``b`` counted once per link into ``b``
(``d`` times in a ``d``-regular ``G``), less ``l`` itself (when ``e`` is ``t`` hops from ``c``);
step 1 receives every in-neighbour's own shard over its own link. No search runs on ``L(G)``:
its programs come from the base's groups and candidate links, and are solved as any BFB program.

>>> from chakra_collectives.topology import load_topology
>>> derived = line_graph_solution(load_topology("line(kautz:2,2)"))
>>> direct = solve_bfb(bfb_problem(load_topology("kautz:2,3")))
>>> derived.step_loads == direct.step_loads          # L(K(2,2)) is K(2,3)
True
"""

from __future__ import annotations

import time

import numpy as np

from chakra_collectives.errors import InputError
from chakra_collectives.synth.bfb import BfbSolution, StepProgram, bfb_problem, solve_bfb, solve_program
from chakra_collectives.topology.core import Topology
from chakra_collectives.topology.expansions import origin


def base_solution(topology: Topology) -> BfbSolution:
    """BFB's programs of ``topology``: derived from its base when it is a line graph, else solved directly."""
    return line_graph_solution(topology) or solve_bfb(bfb_problem(topology))


def line_graph_solution(topology: Topology) -> BfbSolution | None:
    """The BFB programs of ``topology = line(G)`` from ``G``'s (see the module docstring); ``None`` for other topologies."""
    found = origin(topology)
    if found is None or found.kind != "line":
        return None
    started = time.perf_counter()
    (base,) = found.operands
    pairs = [(l.src, l.dst) for l in base.links]
    if len(set(pairs)) != len(pairs):
        raise InputError(f"BFB from the base: {base.name} has parallel links; solve line({base.name}) directly")
    below = base_solution(base)
    problem = bfb_problem(topology)
    n = problem.num_npus
    b_max = max(problem.bandwidth)
    link_of = {pair: index for index, pair in enumerate(pairs)}
    channel_keys = problem.src * n + problem.dst
    order = np.argsort(channel_keys)

    def channels(sources: np.ndarray, target: int) -> np.ndarray:
        keys = sources.astype(np.int64) * n + target
        return order[np.searchsorted(channel_keys[order], keys)]

    into_node = [np.array(base.in_links[v], dtype=np.int64) for v in range(base.num_npus)]  # G-links into each NPU
    programs: dict[tuple, StepProgram] = {}
    solutions: dict[tuple, object] = {}
    cells = []
    step_loads = [0] * (len(below.step_loads) + 1)
    lp_s = 0.0

    def solve(program: StepProgram) -> tuple:
        nonlocal lp_s
        key = program.key()
        if key not in solutions:
            programs[key] = program
            solutions[key] = solve_program(program)
            lp_s += solutions[key].lp_s
        return key

    base_src = below.problem.src
    # step 1: every in-neighbour (x -> c) of l = (c -> e) sends its own shard over its own link
    for l, (c, _) in enumerate(pairs):
        senders = np.array([link_of[(int(x), c)] for x in base_src[_into(below, c)]], dtype=np.int64)
        into = channels(senders, l)
        rates = tuple(problem.bandwidth[int(i)] / b_max for i in into)
        key = solve(StepProgram(np.eye(len(senders), dtype=bool), np.ones(len(senders), dtype=np.int64), rates))
        step_loads[0] = max(step_loads[0], solutions[key].load)
        cells.append((l, 1, key, into, np.arange(len(senders)), senders))
    # step t + 1 of l = (c -> e) from G's cell (c, t)
    out_of = [[] for _ in range(base.num_npus)]
    for l, (c, _) in enumerate(pairs):
        out_of[c].append(l)
    for c, t, key, into_base, group, shards in below.cells:
        program = below.programs[key]
        senders = np.array([link_of[(int(x), c)] for x in base_src[into_base]], dtype=np.int64)
        members = np.concatenate([into_node[int(b)] for b in shards])
        member_group = np.repeat(group, [len(into_node[int(b)]) for b in shards])
        for l in out_of[c]:
            keep = members != l
            lifted_members, lifted_group = members[keep], member_group[keep]
            counts = np.bincount(lifted_group, minlength=len(program.counts))
            used = np.flatnonzero(counts)
            renumber = np.full(len(counts), -1)
            renumber[used] = np.arange(len(used))
            into = channels(senders, l)
            rates = tuple(problem.bandwidth[int(i)] / b_max for i in into)
            lifted = StepProgram(program.masks[used], counts[used], rates)
            lifted_key = solve(lifted)
            step_loads[t] = max(step_loads[t], solutions[lifted_key].load)
            cells.append((l, t + 1, lifted_key, into, renumber[lifted_group], lifted_members))
    return BfbSolution(problem, programs, solutions, cells, step_loads, lp_s, time.perf_counter() - started)


def _into(solution: BfbSolution, v: int) -> np.ndarray:
    """Channel ids into ``v`` in the order :func:`solve_bfb` uses (by channel id)."""
    return np.flatnonzero(solution.problem.dst == v)


__all__ = ["base_solution", "line_graph_solution"]
