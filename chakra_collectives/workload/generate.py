"""Workload generators: a collective microbenchmark, a data-parallel iteration, hybrid TP + DP.

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


def _comp(builder: WorkloadBuilder, rank: int, layer: Layer, phase: str, duration_ns: float, deps: list[int], share: int = 1) -> int:
    """A layer's forward or backward COMP (``share``: tensor-parallel degree dividing the work)."""
    _whole_micros(duration_ns / share, f"layer {layer.name!r} {phase}" + (f" / tp {share}" if share > 1 else ""))
    ops = None
    if layer.forward_ops is not None:
        ops = layer.forward_ops * (1 if phase == "forward" else 2) / share
    return builder.comp(
        rank,
        duration_ns=duration_ns / share,
        name=f"{phase} {layer.name}",
        deps=deps,
        num_ops=None if ops is None else round(ops),
        tensor_size=None if ops is None else -(-layer.gradient_bytes // share),
    )


def _whole_micros(duration_ns: float, what: str) -> None:
    if duration_ns != round(duration_ns / 1000) * 1000:
        raise InputError(f"{what} is {duration_ns:g} ns, not a whole number of microseconds (Chakra stores duration_micros)")


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


def hybrid_parallel(model: ModelSpec, tp: int, dp: int, *, involved_dim: bool = False) -> GeneratedWorkload:
    """Tensor parallelism of degree ``tp`` inside data parallelism of degree ``dp`` (``tp x dp`` ranks).

    Rank ``r`` is tensor-parallel rank ``r % tp`` of data-parallel replica ``r // tp`` (tensor
    groups are consecutive ranks, as in Megatron-LM). Each rank runs ``1/tp`` of every layer:
    compute and gradients are divided by ``tp``; after each layer's forward and backward the
    tensor group all-reduces the layer's ``activation`` bytes (the next layer waits for it), and
    the data-parallel group all-reduces the rank's gradient shard after the layer's backward.

    Groups are named ``"1"``, ``"2"``, ... (ASTRA-sim keys communicator groups by number and
    reserves ``"0"`` for the world): tensor groups first, then data-parallel groups.
    ``involved_dim=True`` also writes ``involved_dim`` -- ``[true, false]`` on tensor-parallel
    collectives, ``[false, true]`` on data-parallel ones -- for an ASTRA-sim network whose first
    dimension joins each tensor group and second dimension each data-parallel group.
    """
    if tp < 2 or dp < 2:
        raise InputError(f"hybrid parallelism needs --tp and --dp of at least 2 (got tp={tp}, dp={dp}); for data parallelism alone use data-parallel")
    missing = [layer.name for layer in model.layers if layer.activation_bytes is None]
    if missing:
        where = f"{model.source}: " if model.source else ""
        raise InputError(f"{where}layer {missing[0]!r} has no activation size: tensor parallelism all-reduces it (give activation, or --activation)")
    tensor_groups = {str(1 + d): [d * tp + t for t in range(tp)] for d in range(dp)}
    data_groups = {str(1 + dp + t): [d * tp + t for d in range(dp)] for t in range(tp)}
    roles = {**{g: "tensor parallel" for g in tensor_groups}, **{g: "data parallel" for g in data_groups}}
    tp_dims = [True, False] if involved_dim else None
    dp_dims = [False, True] if involved_dim else None
    builder = WorkloadBuilder(tp * dp)
    for rank in range(tp * dp):
        tensor_group, data_group = str(1 + rank // tp), str(1 + dp + rank % tp)

        def tensor_all_reduce(layer: Layer, phase: str, deps: list[int]) -> list[int]:
            return [builder.collective(rank, Collective.ALL_REDUCE, layer.activation_bytes, name=f"tp all-reduce {phase} {layer.name}",
                                       pg_name=tensor_group, involved_dim=tp_dims, deps=deps)]

        previous: list[int] = []
        for layer in model.layers:
            previous = tensor_all_reduce(layer, "forward", [_comp(builder, rank, layer, "forward", layer.forward_ns, previous, tp)])
        reduces = []
        for layer in reversed(model.layers):
            backward = _comp(builder, rank, layer, "backward", layer.backward_ns, previous, tp)
            shard = -(-layer.gradient_bytes // tp)
            reduces.append(builder.collective(rank, Collective.ALL_REDUCE, shard, name=f"dp all-reduce gradients {layer.name}",
                                              pg_name=data_group, involved_dim=dp_dims, deps=[backward]))
            previous = tensor_all_reduce(layer, "backward", [backward])
        if model.optimizer_ns > 0:
            _whole_micros(model.optimizer_ns / tp, f"optimizer / tp {tp}")
            builder.comp(rank, duration_ns=model.optimizer_ns / tp, name="optimizer step", deps=reduces + previous)
    return GeneratedWorkload("hybrid", model.name, builder, groups={**tensor_groups, **data_groups}, group_roles=roles)


__all__ = ["GeneratedWorkload", "data_parallel", "groups_path", "hybrid_parallel", "microbenchmark", "size_label"]
