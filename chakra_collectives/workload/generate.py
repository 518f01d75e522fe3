"""Workload generators: a collective microbenchmark, a data-parallel iteration, hybrid TP + DP,
an expert-parallel mixture-of-experts step.

Every generator returns a :class:`GeneratedWorkload` (per-rank nodes built with
:class:`~chakra_collectives.converters.chakra_et.WorkloadBuilder`, plus process groups for hybrid
parallelism); :meth:`GeneratedWorkload.write` writes ``PREFIX.{rank}.et`` -- and
``PREFIX.json``, ASTRA-sim's communicator-group file, when there are groups -- all or nothing.
The files are what ASTRA-sim's workload feeder reads (``docs/et-conventions.md``): COMP nodes with
``duration_micros`` and ``is_cpu_op = false`` (plus uint64 ``num_ops`` / ``tensor_size`` when
the spec gives operations, for roofline mode); COMM_COLL nodes with int64 ``comm_type`` and
``comm_size``, ``is_cpu_op = false`` and, for groups, ``pg_name``; no METADATA nodes.

>>> w = microbenchmark("all-reduce", 8, 2**20)
>>> w.name, w.num_ranks, w.summary()["collectives"]
('all_reduce_8npus_1MB', 8, [{'collective': 'all-reduce', 'size_bytes': 1048576, 'group': None, 'count': 1}])
>>> from chakra_collectives.workload.spec import uniform_model
>>> dp = data_parallel(uniform_model(layers=3, forward="10us", gradient="1MiB", optimizer="5us"), 4)
>>> dp.summary()["nodes_per_rank"], dp.summary()["compute_ns_per_rank"]
(10, 95000.0)
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chakra_collectives.errors import InputError
from chakra_collectives.ir import Collective
from chakra_collectives.converters.chakra_et.workload_reader import NODE_KINDS
from chakra_collectives.converters.chakra_et.workload_writer import WorkloadBuilder
from chakra_collectives.ir.workload import NodeKind, collective_name
from chakra_collectives.workload.spec import Layer, ModelSpec


def groups_path(prefix: str | Path) -> Path:
    """``PREFIX.json``: where a workload's communicator groups are written."""
    return Path(f"{prefix}.json")


@dataclass
class GeneratedWorkload:
    """A workload ready to write: per-rank nodes and, for hybrid parallelism, its groups."""

    kind: str
    name: str
    builder: WorkloadBuilder
    groups: dict[str, list[int]] = field(default_factory=dict)
    """ASTRA-sim's communicator groups: ``{pg_name: [ranks...]}`` (empty: every collective spans all ranks)."""
    group_roles: dict[str, str] = field(default_factory=dict)
    """What each group is for (``"tensor parallel"``...), for summaries."""
    notes: list[str] = field(default_factory=list)
    """What the generator changed of the model to write it (e.g. durations rounded to whole microseconds)."""

    @property
    def num_ranks(self) -> int:
        return self.builder.num_ranks

    def write(self, prefix: str | Path) -> list[Path]:
        """Write the rank files (and ``PREFIX.json`` with the groups); returns every path written."""
        extra = {}
        if self.groups:
            extra[groups_path(prefix)] = (json.dumps(self.groups, indent=2) + "\n").encode()
        return self.builder.write(prefix, extra=extra) + list(extra)

    def summary(self) -> dict[str, Any]:
        """Nodes, compute time and collectives of rank 0 (every rank has the same shape)."""
        nodes = self.builder.nodes[0]
        compute = sum(n.duration_micros * 1000.0 for n in nodes if NODE_KINDS[n.type] is NodeKind.COMP)
        calls: Counter[tuple[str, int, str | None]] = Counter()
        for node in nodes:
            if NODE_KINDS[node.type] is NodeKind.COMM_COLL:
                attrs = {a.name: a for a in node.attr}
                group = attrs["pg_name"].string_val if "pg_name" in attrs else None
                role = self.group_roles.get(group) if group is not None else None
                calls[(collective_name(attrs["comm_type"].int64_val), attrs["comm_size"].int64_val, role or group)] += 1
        return {
            "kind": self.kind,
            "name": self.name,
            "num_ranks": self.num_ranks,
            "nodes_per_rank": len(nodes),
            "compute_ns_per_rank": compute,
            "collectives": [
                {"collective": c, "size_bytes": s, "group": g, "count": n} for (c, s, g), n in calls.items()
            ],
            "collective_bytes_per_rank": sum(s * n for (_, s, _), n in calls.items()),
            "groups": self.groups,
            "notes": self.notes,
            "ranks": self.num_ranks,  # deprecated spelling of num_ranks, kept for one release
            "deprecated": {"ranks": "num_ranks"},
        }


def size_label(nbytes: int) -> str:
    """ASTRA-sim's size labels in workload names: ``1MB`` for 1 MiB, ``4KB``, ``100B``.

    >>> size_label(2**20), size_label(3 * 2**30), size_label(1536)
    ('1MB', '3GB', '1536B')
    """
    for unit, scale in (("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if nbytes % scale == 0:
            return f"{nbytes // scale}{unit}"
    return f"{nbytes}B"


def _check_ranks(num_ranks: int) -> None:
    if num_ranks < 2:
        raise InputError(f"a workload needs at least 2 ranks, got {num_ranks}")


def microbenchmark(collective: str | Collective, num_ranks: int, size_bytes: int) -> GeneratedWorkload:
    """One collective of ``size_bytes`` over ``num_ranks`` ranks: ASTRA-sim's microbenchmarks.

    Nodes are named as ASTRA-sim names its own (``all_reduce_8npus_1MB``).
    """
    _check_ranks(num_ranks)
    kind = Collective.parse(collective) if isinstance(collective, str) else collective
    if kind.chakra_comm_type is None or kind.has_root:
        raise InputError(f"{kind.value} has no ASTRA-sim workload form (use all-reduce, all-gather, reduce-scatter or all-to-all)")
    if size_bytes <= 0:
        raise InputError(f"collective size must be positive, got {size_bytes}")
    name = f"{kind.value.replace('-', '_')}_{num_ranks}npus_{size_label(size_bytes)}"
    builder = WorkloadBuilder(num_ranks)
    builder.collective(0, kind, size_bytes, name=name)
    builder.replicate(0)
    return GeneratedWorkload("microbenchmark", name, builder)


def stored_duration_ns(duration_ns: float) -> float:
    """What Chakra's ``duration_micros`` holds of ``duration_ns``: the nearest whole microsecond
    (halves round up), and at least 1 µs of any positive work.

    >>> stored_duration_ns(12500.0), stored_duration_ns(3333.3), stored_duration_ns(400.0), stored_duration_ns(0.0)
    (13000.0, 3000.0, 1000.0, 0.0)
    """
    if duration_ns <= 0:
        return 0.0
    return max(1, math.floor(duration_ns / 1000 + 0.5)) * 1000.0


@dataclass
class _Rounding:
    """Durations a generator derived (a layer's time / tp) and what the files store of them."""

    exact_ns: float = 0.0
    stored_ns: float = 0.0
    changed: dict[float, float] = field(default_factory=dict)

    def store(self, duration_ns: float, rank: int) -> float:
        stored = stored_duration_ns(duration_ns)
        if rank == 0:  # every rank runs the same compute: rank 0 stands for all
            self.exact_ns += duration_ns
            self.stored_ns += stored
            if stored != duration_ns:
                self.changed[duration_ns] = stored
        return stored

    def note(self, why: str) -> list[str]:
        """One note saying what was rounded and by how much a rank's step compute changed."""
        if not self.changed:
            return []
        from chakra_collectives.units import format_time_ns

        examples = ", ".join(f"{format_time_ns(a)} -> {format_time_ns(b)}" for a, b in sorted(self.changed.items())[:3])
        delta = self.stored_ns - self.exact_ns
        return [
            f"{why} is not a whole number of microseconds (Chakra stores duration_micros): rounded ({examples}); "
            f"a rank's compute per step is {format_time_ns(self.stored_ns)} instead of {format_time_ns(self.exact_ns)} "
            f"({'+' if delta >= 0 else '-'}{format_time_ns(abs(delta))}, {100 * delta / self.exact_ns:+.2f}%)"
        ]


def _comp(builder: WorkloadBuilder, rank: int, layer: Layer, phase: str, duration_ns: float, deps: list[int],
          share: int = 1, rounding: _Rounding | None = None) -> int:
    """A layer's forward or backward COMP (``share``: tensor-parallel degree dividing the work,
    the quotient rounded to whole microseconds through ``rounding``)."""
    ops = None
    if layer.forward_ops is not None:
        ops = layer.forward_ops * (1 if phase == "forward" else 2) / share
    return builder.comp(
        rank,
        duration_ns=duration_ns / share if rounding is None else rounding.store(duration_ns / share, rank),
        name=f"{phase} {layer.name}",
        deps=deps,
        num_ops=None if ops is None else round(ops),
        tensor_size=None if ops is None else -(-layer.gradient_bytes // share),
    )


def data_parallel(model: ModelSpec, num_ranks: int) -> GeneratedWorkload:
    """One data-parallel training iteration on every rank.

    Forward through the layers, then backward in reverse; each layer's gradient all-reduce
    depends only on that layer's backward, so it overlaps the backward of the layers before it;
    the optimizer step waits for every all-reduce.
    """
    _check_ranks(num_ranks)
    builder = WorkloadBuilder(num_ranks)
    previous: list[int] = []
    for layer in model.layers:
        previous = [_comp(builder, 0, layer, "forward", layer.forward_ns, previous)]
    reduces = []
    for layer in reversed(model.layers):
        previous = [_comp(builder, 0, layer, "backward", layer.backward_ns, previous)]
        reduces.append(builder.collective(0, Collective.ALL_REDUCE, layer.gradient_bytes, name=f"all-reduce gradients {layer.name}", deps=previous))
    if model.optimizer_ns > 0:
        builder.comp(0, duration_ns=model.optimizer_ns, name="optimizer step", deps=reduces)
    builder.replicate(0)  # every rank runs the same program
    return GeneratedWorkload("data-parallel", model.name, builder)



def _require_activations(model: ModelSpec, why: str) -> None:
    """Refuse a model with a layer that has no activation size (``why``: what needs it)."""
    missing = [layer.name for layer in model.layers if layer.activation_bytes is None]
    if missing:
        where = f"{model.source}: " if model.source else ""
        raise InputError(f"{where}layer {missing[0]!r} has no activation size: {why} (give activation, or --activation)")


def _two_level_groups(inner: int, outer: int, inner_role: str) -> tuple[dict[str, list[int]], dict[str, list[int]], dict[str, str]]:
    """The groups of an ``inner x outer`` job: consecutive ranks form the ``inner`` groups
    (named ``"1"`` .. ``str(outer)``), then the data-parallel groups across them; with roles.

    >>> inner, data, roles = _two_level_groups(2, 3, "tensor parallel")
    >>> inner, data, roles["4"]
    ({'1': [0, 1], '2': [2, 3], '3': [4, 5]}, {'4': [0, 2, 4], '5': [1, 3, 5]}, 'data parallel')
    """
    inner_groups = {str(1 + d): [d * inner + i for i in range(inner)] for d in range(outer)}
    data_groups = {str(1 + outer + i): [d * inner + i for d in range(outer)] for i in range(inner)}
    roles = {**{g: inner_role for g in inner_groups}, **{g: "data parallel" for g in data_groups}}
    return inner_groups, data_groups, roles


def hybrid_parallel(model: ModelSpec, tp: int, dp: int, *, involved_dim: bool = False) -> GeneratedWorkload:
    """Tensor parallelism of degree ``tp`` inside data parallelism of degree ``dp`` (``tp x dp`` ranks).

    Rank ``r`` is tensor-parallel rank ``r % tp`` of data-parallel replica ``r // tp`` (tensor
    groups are consecutive ranks, as in Megatron-LM). Each rank runs ``1/tp`` of every layer:
    compute and gradients are divided by ``tp``; after each layer's forward and backward the
    tensor group all-reduces the layer's ``activation`` bytes (the next layer waits for it), and
    the data-parallel group all-reduces the rank's gradient shard after the layer's backward.
    A compute time that ``tp`` does not divide into whole microseconds is rounded to what
    Chakra stores (:func:`stored_duration_ns`), and the workload's ``notes`` say by how much
    a rank's step changed.

    Groups are named ``"1"``, ``"2"``, ... (ASTRA-sim keys communicator groups by number and
    reserves ``"0"`` for the world): tensor groups first, then data-parallel groups.
    ``involved_dim=True`` also writes ``involved_dim`` -- ``[true, false]`` on tensor-parallel
    collectives, ``[false, true]`` on data-parallel ones -- for an ASTRA-sim network whose first
    dimension joins each tensor group and second dimension each data-parallel group.
    """
    if tp < 2 or dp < 2:
        raise InputError(f"hybrid parallelism needs --tp and --dp of at least 2 (got tp={tp}, dp={dp}); for data parallelism alone use data-parallel")
    _require_activations(model, "tensor parallelism all-reduces it")
    tensor_groups, data_groups, roles = _two_level_groups(tp, dp, "tensor parallel")
    tp_dims = [True, False] if involved_dim else None
    dp_dims = [False, True] if involved_dim else None
    builder = WorkloadBuilder(tp * dp)
    rounding = _Rounding()
    for rank in range(tp * dp):
        tensor_group, data_group = str(1 + rank // tp), str(1 + dp + rank % tp)

        def tensor_all_reduce(layer: Layer, phase: str, deps: list[int]) -> list[int]:
            return [builder.collective(rank, Collective.ALL_REDUCE, layer.activation_bytes, name=f"tp all-reduce {phase} {layer.name}",
                                       pg_name=tensor_group, involved_dim=tp_dims, deps=deps)]

        previous: list[int] = []
        for layer in model.layers:
            previous = tensor_all_reduce(layer, "forward", [_comp(builder, rank, layer, "forward", layer.forward_ns, previous, tp, rounding)])
        reduces = []
        for layer in reversed(model.layers):
            backward = _comp(builder, rank, layer, "backward", layer.backward_ns, previous, tp, rounding)
            shard = -(-layer.gradient_bytes // tp)
            reduces.append(builder.collective(rank, Collective.ALL_REDUCE, shard, name=f"dp all-reduce gradients {layer.name}",
                                              pg_name=data_group, involved_dim=dp_dims, deps=[backward]))
            previous = tensor_all_reduce(layer, "backward", [backward])
        if model.optimizer_ns > 0:
            builder.comp(rank, duration_ns=rounding.store(model.optimizer_ns / tp, rank), name="optimizer step", deps=reduces + previous)
    return GeneratedWorkload("hybrid", model.name, builder, groups={**tensor_groups, **data_groups}, group_roles=roles,
                             notes=rounding.note(f"compute / tp {tp}"))


def mixture_of_experts(model: ModelSpec, ep: int, dp: int) -> GeneratedWorkload:
    """An expert-parallel mixture-of-experts training step: ``ep`` expert-parallel ranks inside
    data parallelism of degree ``dp`` (``ep x dp`` ranks).

    Rank ``r`` is expert-parallel rank ``r % ep`` of replica ``r // ep`` (expert groups are
    consecutive ranks). Every layer is an MoE layer: its forward is half before the router
    (attention, gating), then the **dispatch** all-to-all of the layer's ``activation`` bytes (the
    tokens each rank sends to the experts) in the expert group, the other half in the experts,
    and the **combine** all-to-all bringing the expert outputs back. The backward runs the same in
    reverse (combine's gradient, experts, dispatch's gradient, the rest), and after each layer's
    backward the data-parallel group all-reduces the rank's ``gradient`` bytes (its experts and
    its copy of the dense weights), overlapping the backward of the layers before it.

    Groups are named as :func:`hybrid_parallel` names them: expert groups ``"1"`` .. ``"dp"``,
    then data-parallel groups.

    >>> from chakra_collectives.workload.spec import uniform_model
    >>> moe = mixture_of_experts(uniform_model(layers=2, forward="20us", gradient="4MiB", activation="1MiB"), 4, 2)
    >>> [(c["collective"], c["group"], c["count"]) for c in moe.summary()["collectives"]]
    [('all-to-all', 'expert parallel', 8), ('all-reduce', 'data parallel', 2)]
    >>> moe.groups["1"], moe.groups["3"]
    ([0, 1, 2, 3], [0, 4])
    """
    if ep < 2 or dp < 2:
        raise InputError(f"a mixture-of-experts step needs --ep and --dp of at least 2 (got ep={ep}, dp={dp})")
    _require_activations(model, "the experts' all-to-alls move it")
    expert_groups, data_groups, roles = _two_level_groups(ep, dp, "expert parallel")
    builder = WorkloadBuilder(ep * dp)
    rounding = _Rounding()
    for rank in range(ep * dp):
        expert_group, data_group = str(1 + rank // ep), str(1 + dp + rank % ep)

        def all_to_all(layer: Layer, what: str, deps: list[int]) -> list[int]:
            return [builder.collective(rank, Collective.ALL_TO_ALL, layer.activation_bytes, name=f"all-to-all {what} {layer.name}",
                                       pg_name=expert_group, deps=deps)]

        def half(layer: Layer, phase: str, part: str, duration_ns: float, deps: list[int]) -> list[int]:
            return [builder.comp(rank, duration_ns=rounding.store(duration_ns / 2, rank), name=f"{phase} {layer.name} {part}", deps=deps)]

        previous: list[int] = []
        for layer in model.layers:
            previous = all_to_all(layer, "dispatch", half(layer, "forward", "attention", layer.forward_ns, previous))
            previous = all_to_all(layer, "combine", half(layer, "forward", "experts", layer.forward_ns, previous))
        reduces = []
        for layer in reversed(model.layers):
            previous = all_to_all(layer, "combine gradient", previous)
            previous = all_to_all(layer, "dispatch gradient", half(layer, "backward", "experts", layer.backward_ns, previous))
            previous = half(layer, "backward", "attention", layer.backward_ns, previous)
            reduces.append(builder.collective(rank, Collective.ALL_REDUCE, layer.gradient_bytes, name=f"dp all-reduce gradients {layer.name}",
                                              pg_name=data_group, deps=previous))
        if model.optimizer_ns > 0:
            builder.comp(rank, duration_ns=model.optimizer_ns, name="optimizer step", deps=reduces + previous)
    return GeneratedWorkload("moe", model.name, builder, groups={**expert_groups, **data_groups}, group_roles=roles,
                             notes=rounding.note("a layer's forward / 2 or backward / 2"))


__all__ = ["GeneratedWorkload", "data_parallel", "groups_path", "hybrid_parallel", "microbenchmark", "mixture_of_experts", "size_label", "stored_duration_ns"]
