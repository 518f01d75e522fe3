"""PyTorch execution traces (+ Kineto traces) of every rank -> workload ETs ``PREFIX.{rank}.et``.

Each rank's pair is read (:mod:`.host_trace`, :mod:`.kineto`), linked (:mod:`.link`), its
collective calls found (:mod:`.collectives`) and turned into a graph (:mod:`.timeline`); then
the ranks are put together:

* **ranks**: Kineto's ``distributedInfo.rank`` or the rank ``record_param_comms`` records,
  else the files' order (natural sort); output rank ``i`` is the ``i``-th;
* **process groups**: the default group (``pg_name`` ``"0"``, or all ranks) is written without
  ``pg_name``; other groups keep PyTorch's numeric names (``"1"``, ``"2"``..., as ASTRA-sim's
  communicator-group file expects) and go to ``PREFIX.json``;
* **matching**: the k-th call of a group must be the same collective on every member;
  uneven sizes (``all_to_allv``) are replayed at the largest, with a warning;
* ``replicate=N`` copies one rank's trace to ``N`` ranks (an SPMD job traced on one rank).

>>> import tempfile, pathlib, json
>>> t = [14, 15, 0, 262144, 4, "cuda:0"]
>>> doc = {"schema": "1.0.1", "pid": 1, "nodes": [
...   {"id": 2, "name": "[pytorch|profiler|execution_trace|thread]", "parent": 1, "tid": 1},
...   {"id": 3, "name": "c10d::allreduce_", "parent": 2, "tid": 1, "inputs": [[t]], "input_types": ["GenericList[Tensor(float)]"]}]}
>>> with tempfile.TemporaryDirectory() as tmp:
...     host = pathlib.Path(tmp) / "host.json"
...     _ = host.write_text(json.dumps(doc))
...     result = convert_pytorch([host], None, pathlib.Path(tmp) / "w", replicate=4)
>>> len(result.paths), result.collectives[0]["collective"], result.collectives[0]["size_bytes"]
(4, 'all-reduce', 1048576)
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chakra_collectives.converters.pytorch.collectives import CollectiveCall, find_collectives
from chakra_collectives.converters.pytorch.completion import blocking_cycle, label
from chakra_collectives.converters.pytorch.fields import TraceRepairs
from chakra_collectives.converters.pytorch.host_trace import HostTrace, is_kineto_document, load_json, parse_host_trace
from chakra_collectives.converters.pytorch.kineto import KinetoTrace, parse_kineto, read_kineto
from chakra_collectives.converters.pytorch.link import LinkedTrace, link_traces
from chakra_collectives.converters.pytorch.timeline import COLL, CPU, GPU, RECV, SEND, RankGraph, build_rank_graph
from chakra_collectives.errors import InputError
from chakra_collectives.ir import Collective
from chakra_collectives.converters.chakra_et.workload_reader import read_encoded_workload
from chakra_collectives.converters.chakra_et.workload_writer import WorkloadBuilder
from chakra_collectives.limits import check_npus, check_size

BARRIER_COMM_TYPE = 9


@dataclass
class RankSource:
    """One rank's inputs and what was made of them."""

    host: HostTrace
    kineto: KinetoTrace | None
    linked: LinkedTrace
    graph: RankGraph
    rank_hint: int | None


@dataclass
class Conversion:
    """What :func:`convert_pytorch` wrote and found."""

    paths: list[Path]
    ranks: list[dict[str, Any]]
    collectives: list[dict[str, Any]]
    """Rank 0's calls in order: type, bytes, group, measured NCCL time."""
    groups: dict[str, list[int]]
    warnings: list[str] = field(default_factory=list)
    repairs: dict[str, int] = field(default_factory=dict)
    """What reading the traces repaired: :data:`.fields.REPAIRS` kind -> count."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "files": [str(p) for p in self.paths],
            "ranks": self.ranks,
            "collectives": self.collectives,
            "groups": self.groups,
            "warnings": self.warnings,
            "repairs": self.repairs,
        }


def natural_key(path: Path) -> list:
    """Sort key that orders ``rank2`` before ``rank10``."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", str(path))]


def convert_pytorch(
    hosts: list[Path], kinetos: list[Path] | None, prefix: str | Path, *, replicate: int | None = None, strict: bool = False,
) -> Conversion:
    """Convert one ``(host, kineto)`` pair per rank and write ``PREFIX.{rank}.et``.

    Kineto traces among ``hosts`` are told by their content and taken as Kineto traces (so
    ``--kineto a.json b.json`` means both). Every field read is checked (:mod:`.fields`); what
    can be repaired is, and said in the warnings (``strict``: refused). What is written reads
    back under :func:`~chakra_collectives.converters.chakra_et.workload_reader.read_workload`'s
    checks, or nothing is written.
    """
    repairs = TraceRepairs(strict=strict)
    host_traces: list[HostTrace] = []
    found_kineto: list[KinetoTrace] = []
    for path in sorted(hosts, key=natural_key):
        document = load_json(path, "PyTorch execution trace")
        if is_kineto_document(document):
            found_kineto.append(parse_kineto(document, path, repairs))
        else:
            host_traces.append(parse_host_trace(document, path, repairs))
    found_kineto += [read_kineto(path, repairs) for path in kinetos or []]
    found_kineto.sort(key=lambda trace: natural_key(trace.path))
    if not host_traces and found_kineto:
        raise InputError("a Kineto trace, and no execution trace given: give the execution traces too", path=found_kineto[0].path)
    if not host_traces:
        raise InputError("no execution trace given")
    if found_kineto and len(found_kineto) != len(host_traces):
        raise InputError(
            f"{len(host_traces)} execution traces but {len(found_kineto)} Kineto traces: give one Kineto trace per rank, or none"
        )
    if replicate is not None and (replicate < 1 or len(host_traces) != 1):
        raise InputError("--replicate N copies one rank's trace: give exactly one execution trace (and N >= 1)")
    check_npus(replicate or len(host_traces), "--replicate" if replicate else "the traces")
    kineto_traces: list[KinetoTrace | None] = list(found_kineto) or [None] * len(host_traces)
    sources = _pair(host_traces, kineto_traces)
    warnings: list[str] = []
    if repairs.summary():
        warnings.append(repairs.summary())
    for source in sources:
        warnings.extend(source.linked.warnings)
    if kineto_traces[0] is None:
        timed = any(source.linked.times for source in sources)
        warnings.append(
            "no Kineto trace: GPU work is unknown"
            + ("; CPU operators take the times the execution trace records" if timed else
               " and the execution trace records no times: every compute node takes 0 ns (give --kineto DEVICE.json)")
        )
    num_ranks = replicate or len(sources)
    groups, names = _groups(sources, num_ranks, warnings)
    sizes = _match_calls(sources, names, groups, warnings)
    builder = WorkloadBuilder(num_ranks)
    for rank, source in enumerate(sources):
        _write_rank(builder, rank, source, names, sizes, warnings)
    if replicate:
        if any(node.kind in (SEND, RECV) for node in sources[0].graph.nodes):
            raise InputError("--replicate copies one rank's trace, and its send/recv calls name one peer: they cannot be copied",
                             path=sources[0].host.path)
        builder.replicate(0)
    extra = {}
    if groups:  # ASTRA-sim's communicator-group file, where `chakra-coll workload` writes it too
        extra[Path(f"{prefix}.json")] = (json.dumps(groups, indent=2) + "\n").encode()
    hosts_of_rank = [source.host.path for source in sources]
    paths = builder.write(prefix, extra=extra, check=lambda files, paths: _check_written(files, paths, hosts_of_rank)) + list(extra)
    return Conversion(
        paths=paths,
        ranks=[_rank_summary(i, s) for i, s in enumerate(sources)],
        collectives=[_call_summary(node.call, names, sizes, node.measured_us) for node in sources[0].graph.nodes if node.call is not None],
        groups=groups,
        warnings=list(dict.fromkeys(warnings)),
        repairs=dict(repairs.counts),
    )


def _check_written(files: list[bytes], paths: list[Path], hosts: list[Path]) -> None:
    """Refuse a conversion whose rank files would not read as a workload (the reader's own checks),
    naming the trace the rank came from."""
    distinct = list({id(data): rank for rank, data in enumerate(files)}.values())  # --replicate: one file, N ranks

    def refuse(rank: int, message: str) -> InputError:
        source = hosts[rank] if rank < len(hosts) else hosts[0]
        return InputError(f"the converted workload would not replay: rank {rank}: {message}", path=source)

    try:
        workload = read_encoded_workload([files[r] for r in distinct], [paths[r] for r in distinct])
    except InputError as error:
        raise refuse(distinct[int(error.rank or 0)], error.message) from None
    try:
        cycle = blocking_cycle(workload)
    except InputError as error:
        raise InputError(f"the converted workload would not replay: {error.message}", path=hosts[0]) from None
    if cycle:
        shown = " -> ".join(label(workload, i) for i in cycle[:8]) + (" -> ..." if len(cycle) > 8 else "")
        raise refuse(distinct[int(workload.rank[cycle[0]])], (
            f"its nodes would wait for each other forever ({shown}: each waits for the next; a collective or send/recv "
            "is named by its first rank's node): the traces' times, ids or call orders contradict each other"))


def _pair(hosts: list[HostTrace], kinetos: list[KinetoTrace | None]) -> list[RankSource]:
    found = [find_collectives(h) for h in hosts]
    host_ranks = [_host_rank(calls) for calls, _ in found]
    kineto_ranks = [k.rank if k is not None else None for k in kinetos]
    if all(k is not None for k in kinetos) and None not in kineto_ranks and len(set(kineto_ranks)) == len(kinetos):
        if None not in host_ranks and sorted(host_ranks) == sorted(kineto_ranks):
            by_rank = dict(zip(kineto_ranks, kinetos))
            kinetos = [by_rank[r] for r in host_ranks]
        else:
            host_ranks = kineto_ranks
    sources = []
    for host, kineto, rank, (calls, waits) in zip(hosts, kinetos, host_ranks, found):
        linked = link_traces(host, kineto)
        sources.append(RankSource(host, kineto, linked, build_rank_graph(linked, calls, waits), rank))
    if None not in host_ranks and len(set(host_ranks)) == len(host_ranks):
        sources.sort(key=lambda s: s.rank_hint)
    return sources


def _host_rank(calls: list[CollectiveCall]) -> int | None:
    ranks = [c.rank for c in calls if c.rank is not None and c.pg_name in (None, "0")]
    return ranks[0] if ranks else None


# ---------------------------------------------------------------------- process groups
def _groups(sources: list[RankSource], num_ranks: int, warnings: list[str]) -> tuple[dict[str, list[int]], dict[str, str | None]]:
    """ASTRA-sim communicator groups and, per PyTorch ``pg_name``, the name written (``None``: all ranks)."""
    members: dict[str, set[int]] = {}
    declared: dict[str, tuple[int, ...]] = {}
    sizes: dict[str, int] = {}
    present_ranks = {s.rank_hint for s in sources}
    for rank, source in enumerate(sources):
        for call in source.graph.calls:
            key = call.pg_name if call.pg_name is not None else "0"
            members.setdefault(key, set()).add(rank)
            if call.pg_ranks:
                declared[key] = call.pg_ranks
            if call.group_size:
                sizes[key] = call.group_size
    names: dict[str, str | None] = {}
    groups: dict[str, list[int]] = {}
    taken = {k for k in members if k.isdigit() and k != "0"}
    next_name = 1
    for key in sorted(members, key=natural_key):
        size = sizes.get(key) or len(declared.get(key, ())) or 0
        if key == "0" or (size >= num_ranks and len(members[key]) == len(sources)):
            names[key] = None
            if size > num_ranks and len(sources) == num_ranks:
                warnings.append(
                    f"process group {key!r} has {size} ranks but the traces cover {num_ranks}: its collectives run over the "
                    f"{num_ranks} traced rank(s) (--replicate {size} runs one rank's trace on all {size})"
                )
            continue
        if key.isdigit():
            name = key
        else:
            while str(next_name) in taken:
                next_name += 1
            name = str(next_name)
            taken.add(name)
        names[key] = name
        ranks = declared.get(key)
        if ranks and set(ranks) <= present_ranks | set(range(num_ranks)) and None not in present_ranks:
            position = {s.rank_hint: i for i, s in enumerate(sources)}
            groups[name] = sorted(position.get(r, r) for r in ranks if r in position)
        else:
            groups[name] = sorted(members[key])
    return groups, names


def _match_calls(
    sources: list[RankSource], names: dict[str, str | None], groups: dict[str, list[int]], warnings: list[str],
) -> dict[int, int]:
    """Check that the k-th call of each group is one collective on every member (and that only
    members call it); unify sizes.

    Returns the size to write for calls whose ranks disagree (``id(call)`` -> bytes).
    """
    sequences: dict[str | None, dict[int, list[CollectiveCall]]] = {}
    for rank, source in enumerate(sources):
        for call in source.graph.calls:
            if call.kind in ("send", "recv"):
                continue
            group = names.get(call.pg_name if call.pg_name is not None else "0")
            sequences.setdefault(group, {}).setdefault(rank, []).append(call)
    sizes: dict[int, int] = {}
    uneven = 0
    for group, per_rank in sequences.items():
        label = "the default group" if group is None else f"group {group!r}"
        members = groups.get(group, range(len(sources))) if group is not None else range(len(sources))
        outsiders = sorted(set(per_rank) - set(members))
        if outsiders:
            raise InputError(f"rank {outsiders[0]} calls collectives of {label}, whose ranks are {list(members)}")
        counts = {rank: len(per_rank.get(rank, [])) for rank in members}
        if len(set(counts.values())) > 1:
            shown = ", ".join(f"rank {r}: {n}" for r, n in sorted(counts.items()))
            raise InputError(
                f"the ranks' traces do not call the same collectives in {label} ({shown}): "
                "were they traced over the same iterations?"
            )
        for position, calls in enumerate(zip(*per_rank.values())):
            kinds = {c.kind for c in calls}
            if len(kinds) > 1:
                ranks = list(per_rank)
                detail = ", ".join(f"rank {r}: {c.kind} (host op {c.root.id})" for r, c in zip(ranks, calls))
                raise InputError(f"collective #{position + 1} of {label} differs between ranks: {detail}")
            values = {c.size_bytes for c in calls}
            if len(values) > 1:
                uneven += 1
                for c in calls:
                    sizes[id(c)] = max(values)
    if uneven:
        warnings.append(
            f"{uneven} collective(s) move different sizes on different ranks (all_to_allv...): each is replayed at its largest size"
        )
    return sizes


# ---------------------------------------------------------------------- writing
def _comm_args(call: CollectiveCall) -> tuple[Collective, int | None]:
    if call.kind == "barrier":
        return Collective.ALL_REDUCE, BARRIER_COMM_TYPE
    return Collective.parse(call.kind or ""), None


def _write_rank(
    builder: WorkloadBuilder, rank: int, source: RankSource, names: dict[str, str | None], sizes: dict[int, int], warnings: list[str],
) -> None:
    graph = source.graph
    kineto_path = source.kineto.path if source.kineto is not None else source.host.path

    def error(call: CollectiveCall, message: str, kind: type[InputError] = InputError) -> InputError:
        if call.root.id >= 0:
            return kind(f"host op {call.root.id} ({call.root.name}): {message}", path=source.host.path)
        return kind(f"NCCL kernel {call.name[:60]!r}: {message}", path=kineto_path)

    def checked_size(call: CollectiveCall, size: int) -> int:
        if size < 0:
            raise error(call, f"{call.kind} of {size} bytes: a size cannot be negative")
        try:
            return check_size(size, f"{call.kind} size")
        except InputError as refused:
            raise error(call, refused.message, type(refused)) from None

    carried = {CPU: 0.0, GPU: 0.0}
    for node in graph.nodes:  # node i of the graph becomes node id i of the rank file
        deps = node.deps
        if node.kind in (CPU, GPU):
            # error diffusion: each chain's rounded total stays within 1 us of the exact one
            exact = carried[node.kind] + node.duration_us
            micros = round(exact) - round(carried[node.kind])
            carried[node.kind] = exact
            builder.comp(rank, duration_ns=micros * 1000.0, name=node.label, deps=deps, cpu=node.kind == CPU)
            continue
        call = node.call
        assert call is not None
        if node.kind in (SEND, RECV):
            size = max(1, checked_size(call, call.size_bytes))
            peer = call.peer if call.peer is not None else 0
            if call.pg_ranks and 0 <= peer < len(call.pg_ranks):  # a group rank -> the global rank
                peer = call.pg_ranks[peer]
            if not 0 <= peer < builder.num_ranks or peer == rank:
                raise error(call, f"its peer rank {peer} is not another of the {builder.num_ranks} ranks traced")
            if not -(2**31) <= call.tag < 2**31:
                raise error(call, f"its tag {call.tag} is not a 32-bit integer")
            make = builder.send if node.kind == SEND else builder.recv
            make(rank, peer, size, tag=call.tag, deps=deps)
            continue
        collective, comm_type = _comm_args(call)
        pg = names.get(call.pg_name if call.pg_name is not None else "0")
        size = checked_size(call, sizes.get(id(call), call.size_bytes))
        builder.collective(rank, collective, size, name=call.root.name, pg_name=pg, deps=deps, comm_type=comm_type)
    for call in graph.dropped_calls:
        warnings.append(f"rank {rank}: {call.name} (host op {call.root.id}) is not a collective the replayer knows: left out")


def _rank_summary(rank: int, source: RankSource) -> dict[str, Any]:
    graph = source.graph
    kinds = Counter(node.kind for node in graph.nodes)
    return {
        "rank": rank,
        "host_trace": str(source.host.path),
        "schema": source.host.schema,
        "kineto_trace": str(source.kineto.path) if source.kineto else None,
        "linked_by": source.linked.method,
        "host_ops": len(source.host.ops),
        "host_ops_timed": source.linked.matched,
        "gpu_events_of_other_iterations": source.linked.outside,
        "nodes": len(graph.nodes),
        "cpu_nodes": kinds.get(CPU, 0),
        "gpu_nodes": kinds.get(GPU, 0),
        "collective_nodes": kinds.get(COLL, 0) + kinds.get(SEND, 0) + kinds.get(RECV, 0),
        "cpu_us": round(graph.cpu_us, 3),
        "gpu_us": round(graph.gpu_us, 3),
    }


def _call_summary(call: CollectiveCall, names: dict[str, str | None], sizes: dict[int, int], measured: float | None) -> dict[str, Any]:
    return {
        "collective": call.kind,
        "name": call.name,
        "size_bytes": sizes.get(id(call), call.size_bytes),
        "group": names.get(call.pg_name if call.pg_name is not None else "0"),
        "host_op": call.root.id,
        "measured_us": measured,
    }
