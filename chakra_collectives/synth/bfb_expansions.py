"""BFB on expanded topologies, built from their bases' BFB programs (Zhao et al.'s expansions).

**Line graph.**
In ``L(G)`` the NPU ``l = (c -> e)`` (a link of ``G``) is ``dist_G(b, c) + 1`` hops from the NPU
``(a -> b)``, and its in-neighbours are the links ``(x -> c)``, one per in-link of ``c`` in ``G``.
So at step ``t + 1`` the shards ``l`` receives are those of the links into the NPUs ``b`` that
``c`` receives at step ``t`` of ``G``'s BFB, and a link ``(a -> b)`` may come over ``(x -> c)``
exactly when ``G``'s program lets ``b`` come over ``x -> c``. ``L(G)``'s program at ``(l, t+1)``
is ``G``'s program at ``(c, t)`` with every shard ``b`` counted once per link into ``b``
(``d`` times in a ``d``-regular ``G``), less ``l`` itself (when ``e`` is ``t`` hops from ``c``);
step 1 receives every in-neighbour's own shard over its own link. No search runs on ``L(G)``:
its programs come from the base's groups and candidate links, and are solved as any BFB program.

**Cartesian product** ``G x H``: ``(g, h)`` is ``dist_G(g, g') + dist_H(h, h')`` hops from
``(g', h')``, whose in-links are ``G``'s into ``g'`` (at ``h'``) and ``H``'s into ``h'`` (at ``g'``).
A shard may come over the ``G`` links ``G``'s program allows for ``g`` (when ``g != g'``) and over
the ``H`` links ``H``'s program allows for ``h`` (when ``h != h'``): every group of the product's
program at step ``t`` is a pair of a ``G`` group at step ``t1`` and an ``H`` group at ``t - t1``
(or one of them alone, the other coordinate equal), with the product of their counts.

**Degree expansion** ``G * n``: ``u_i`` is ``dist_G(u, v)`` hops from ``v_j`` (``u != v``) and may
come over every copy of the links ``G`` allows for ``u`` (from step 2; at step 1 each copy of an
in-neighbour sends its own shard over its own link): ``G``'s program with every column and every
count ``n`` times; the other copies of ``v`` come at the step of the shortest cycle through ``v``,
over the copies of ``v``'s in-neighbours on such a cycle.

:func:`derived_solution` picks the rule; tests check every ``(NPU, step)`` optimum equals the one
solved on the expanded topology's own distances.

>>> from chakra_collectives.topology import load_topology
>>> derived = line_graph_solution(load_topology("line(kautz:2,2)"))
>>> direct = solve_bfb(bfb_problem(load_topology("kautz:2,3")))
>>> derived.step_loads == direct.step_loads          # L(K(2,2)) is K(2,3)
True
"""

from __future__ import annotations

import time
from fractions import Fraction

import numpy as np

from chakra_collectives.errors import InputError
from chakra_collectives.synth.bfb import BfbSolution, StepProgram, bfb_problem, solve_bfb, solve_program
from chakra_collectives.topology.core import Topology
from chakra_collectives.topology.expansions import origin


def base_solution(topology: Topology) -> BfbSolution:
    """BFB's programs of ``topology``: derived from its bases when it is an expansion, else solved directly."""
    return derived_solution(topology) or solve_bfb(bfb_problem(topology))


def derived_solution(topology: Topology) -> BfbSolution | None:
    """The BFB programs of an expansion from its bases' (``None`` for other topologies)."""
    found = origin(topology)
    if found is None:
        return None
    return {"line": line_graph_solution, "cartesian": product_solution, "degree": degree_solution}[found.kind](topology)


class _Collector:
    """Programs solved once each, cells and step loads of a derived solution."""

    def __init__(self, steps: int) -> None:
        self.programs: dict[tuple, StepProgram] = {}
        self.solutions: dict[tuple, object] = {}
        self.cells: list = []
        self.step_loads = [Fraction(0)] * steps
        self.lp_s = 0.0

    def add(self, v: int, t: int, program: StepProgram, into: np.ndarray, group: np.ndarray, members: np.ndarray) -> None:
        used = np.flatnonzero(program.counts)
        if len(used) == 0:  # its only shard was the NPU itself
            return
        if len(used) < len(program.counts):  # drop emptied groups, renumber the rest
            renumber = np.full(len(program.counts), -1)
            renumber[used] = np.arange(len(used))
            program = StepProgram(program.masks[used], program.counts[used], program.rates)
            group = renumber[group]
        key = program.key()
        if key not in self.solutions:
            self.programs[key] = program
            self.solutions[key] = solve_program(program)
            self.lp_s += self.solutions[key].lp_s
        self.step_loads[t - 1] = max(self.step_loads[t - 1], self.solutions[key].load)
        self.cells.append((v, t, key, into, group, members))

    def solution(self, problem, started: float) -> BfbSolution:
        steps = self.step_loads
        while steps and steps[-1] == 0:  # a bound on the steps was used; the diameter may be smaller
            steps = steps[:-1]
        return BfbSolution(problem, self.programs, self.solutions, self.cells, steps, self.lp_s, time.perf_counter() - started)


def _channel_finder(problem):
    n = problem.num_npus
    keys = problem.src * n + problem.dst
    order = np.argsort(keys)

    def channels(sources: np.ndarray, target: int) -> np.ndarray:
        wanted = np.asarray(sources, dtype=np.int64) * n + target
        return order[np.searchsorted(keys[order], wanted)]

    return channels


def product_solution(topology: Topology) -> BfbSolution | None:
    """The BFB programs of ``topology = G x H`` from ``G``'s and ``H``'s (see the module docstring)."""
    found = origin(topology)
    if found is None or found.kind != "cartesian":
        return None
    started = time.perf_counter()
    left, right = (base_solution(t) for t in found.operands)
    problem = bfb_problem(topology)
    n_left = left.problem.num_npus
    b_max = max(problem.bandwidth)
    channels = _channel_finder(problem)
    collector = _Collector(len(left.step_loads) + len(right.step_loads))
    by_node = lambda solution: _cells_by_node(solution)  # noqa: E731
    left_cells, right_cells = by_node(left), by_node(right)
    for h2 in range(right.problem.num_npus):
        for g2 in range(n_left):
            v = g2 + n_left * h2
            g_into, h_into = _into(left, g2), _into(right, h2)
            senders = np.concatenate([left.problem.src[g_into] + n_left * h2, g2 + n_left * right.problem.src[h_into]])
            into = channels(senders, v)
            rates = tuple(problem.bandwidth[int(i)] / b_max for i in into)
            g_cells = {0: _identity_cell(g2)} | left_cells[g2]
            h_cells = {0: _identity_cell(h2)} | right_cells[h2]
            for t in range(1, len(collector.step_loads) + 1):
                masks, counts, groups, members = [], [], [], []
                for t1 in range(max(0, t - max(h_cells)), min(t, max(g_cells)) + 1):
                    t2 = t - t1
                    if t1 not in g_cells or t2 not in h_cells:
                        continue
                    g_masks, g_counts, g_members = _cell_groups(left, g_cells[t1], len(g_into))
                    h_masks, h_counts, h_members = _cell_groups(right, h_cells[t2], len(h_into))
                    for a in range(len(g_counts)):
                        for b in range(len(h_counts)):
                            masks.append(np.concatenate([g_masks[a], h_masks[b]]))
                            counts.append(g_counts[a] * h_counts[b])
                            cell_members = (g_members[a][:, None] + n_left * h_members[b][None, :]).ravel()
                            members.append(cell_members)
                            groups.append(np.full(len(cell_members), len(masks) - 1))
                if masks:
                    program = StepProgram(np.array(masks, dtype=bool), np.array(counts, dtype=np.int64), rates)
                    collector.add(v, t, program, into, np.concatenate(groups), np.concatenate(members))
    return collector.solution(problem, started)


def _cells_by_node(solution: BfbSolution) -> list[dict[int, tuple]]:
    cells: list[dict[int, tuple]] = [dict() for _ in range(solution.problem.num_npus)]
    for cell in solution.cells:
        cells[cell[0]][cell[1]] = cell
    return cells


def _identity_cell(v: int) -> tuple:
    """The coordinate that stays: one shard (``v`` itself), allowed over none of that side's links."""
    return (v, 0, None, None, np.zeros(1, dtype=np.int64), np.array([v]))


def _cell_groups(solution: BfbSolution, cell: tuple, width: int) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """A cell's group masks (``width`` columns; none for the identity), counts and members."""
    _, _, key, _, group, members = cell
    if key is None:
        return np.zeros((1, width), dtype=bool), np.ones(1, dtype=np.int64), [members]
    program = solution.programs[key]
    return _canonical_masks(solution, cell), program.counts, [members[group == g] for g in range(len(program.counts))]


def _canonical_masks(solution: BfbSolution, cell: tuple) -> np.ndarray:
    """A cell's masks with their columns in :func:`_into` order (a derived cell may list its links otherwise)."""
    v, _, key, into, _, _ = cell
    masks = solution.programs[key].masks
    canonical = _into(solution, v)
    if np.array_equal(into, canonical):
        return masks
    column = np.searchsorted(canonical, into)  # canonical is sorted (channel ids)
    out = np.zeros((len(masks), len(canonical)), dtype=bool)
    out[:, column] = masks
    return out


def degree_solution(topology: Topology) -> BfbSolution | None:
    """The BFB programs of ``topology = G * n`` from ``G``'s (see the module docstring)."""
    found = origin(topology)
    if found is None or found.kind != "degree":
        return None
    started = time.perf_counter()
    (base,) = found.operands
    copies = found.copies
    below = base_solution(base)
    problem = bfb_problem(topology)
    b_max = max(problem.bandwidth)
    channels = _channel_finder(problem)
    hops = below.problem.distance
    cells = _cells_by_node(below)
    steps = max(len(below.step_loads), int(problem.distance.max()))
    collector = _Collector(steps)
    for v in range(base.num_npus):
        into_base = _into(below, v)
        x = below.problem.src[into_base]
        senders_base = np.repeat(x * copies, copies) + np.tile(np.arange(copies), len(x))
        back = hops[v, x]  # a copy of v comes over x_k when x is on a shortest cycle through v
        cycle = int((back + 1).min()) if len(x) else 0
        for j in range(copies):
            target = v * copies + j
            into = channels(senders_base, target)
            rates = tuple(problem.bandwidth[int(i)] / b_max for i in into)
            for t in range(1, steps + 1):
                masks, counts, groups, members = [], [], [], []
                if t in cells[v]:
                    program = below.programs[cells[v][t][2]]
                    program_masks = _canonical_masks(below, cells[v][t])
                    _, _, _, _, group, shards = cells[v][t]
                    for g in range(len(program.counts)):
                        if t == 1:  # an in-neighbour's copy u_i has its own shard only: over its own link
                            for i in range(copies):
                                mask = np.zeros(len(x) * copies, dtype=bool)
                                mask[np.flatnonzero(program_masks[g]) * copies + i] = True
                                masks.append(mask)
                                counts.append(program.counts[g])
                                lifted = shards[group == g] * copies + i
                                members.append(lifted)
                                groups.append(np.full(len(lifted), len(masks) - 1))
                            continue
                        masks.append(np.repeat(program_masks[g], copies))
                        counts.append(program.counts[g] * copies)
                        lifted = (shards[group == g][:, None] * copies + np.arange(copies)[None, :]).ravel()
                        members.append(lifted)
                        groups.append(np.full(len(lifted), len(masks) - 1))
                if t == cycle and copies > 1:
                    masks.append(np.repeat(back + 1 == cycle, copies))
                    siblings = np.array([v * copies + i for i in range(copies) if i != j])
                    counts.append(copies - 1)
                    members.append(siblings)
                    groups.append(np.full(len(siblings), len(masks) - 1))
                if masks:
                    program = StepProgram(np.array(masks, dtype=bool), np.array(counts, dtype=np.int64), rates)
                    collector.add(target, t, program, into, np.concatenate(groups), np.concatenate(members))
    return collector.solution(problem, started)


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
    b_max = max(problem.bandwidth)
    link_of = {pair: index for index, pair in enumerate(pairs)}
    channels = _channel_finder(problem)
    into_node = [np.array(base.in_links[v], dtype=np.int64) for v in range(base.num_npus)]  # G-links into each NPU
    collector = _Collector(len(below.step_loads) + 1)
    base_src = below.problem.src
    # step 1: every in-neighbour (x -> c) of l = (c -> e) sends its own shard over its own link
    for l, (c, _) in enumerate(pairs):
        senders = np.array([link_of[(int(x), c)] for x in base_src[_into(below, c)]], dtype=np.int64)
        into = channels(senders, l)
        rates = tuple(problem.bandwidth[int(i)] / b_max for i in into)
        identity = StepProgram(np.eye(len(senders), dtype=bool), np.ones(len(senders), dtype=np.int64), rates)
        collector.add(l, 1, identity, into, np.arange(len(senders)), senders)
    # step t + 1 of l = (c -> e) from G's cell (c, t)
    out_of: list[list[int]] = [[] for _ in range(base.num_npus)]
    for l, (c, _) in enumerate(pairs):
        out_of[c].append(l)
    for cell in below.cells:
        c, t, key, _, group, shards = cell
        masks = _canonical_masks(below, cell)
        senders = np.array([link_of[(int(x), c)] for x in base_src[_into(below, c)]], dtype=np.int64)
        members = np.concatenate([into_node[int(b)] for b in shards])
        member_group = np.repeat(group, [len(into_node[int(b)]) for b in shards])
        for l in out_of[c]:
            keep = members != l
            counts = np.bincount(member_group[keep], minlength=len(masks))
            into = channels(senders, l)
            rates = tuple(problem.bandwidth[int(i)] / b_max for i in into)
            collector.add(l, t + 1, StepProgram(masks, counts, rates), into, member_group[keep], members[keep])
    return collector.solution(problem, started)


def _into(solution: BfbSolution, v: int) -> np.ndarray:
    """Channel ids into ``v`` in the order :func:`solve_bfb` uses (by channel id)."""
    return np.flatnonzero(solution.problem.dst == v)


__all__ = ["base_solution", "degree_solution", "derived_solution", "line_graph_solution", "product_solution"]
