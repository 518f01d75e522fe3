"""Small, realistic PyTorch profiler traces for the converter tests: host execution trace +
Kineto trace of the same scripted run, in any execution-trace schema.

:class:`ScriptedRun` plays a program on a simulated clock, recording it the way PyTorch does:
every operator becomes a host node (id at its start, ``parent`` = caller, ``rf_id``) and a
Kineto ``cpu_op`` (``ts``/``dur``, ``External id``, optionally ``Record function id``); every
launch a ``cudaLaunchKernel`` runtime event plus a kernel on its stream with the same
``correlation``, and the ``ac2g`` flow pair. Collectives are recorded as ProcessGroupNCCL
does: ``c10d::allreduce_`` > ``record_param_comms`` > ``nccl:all_reduce`` > NCCL kernel.

:func:`ddp_step` is a data-parallel training step with known ground truth (:data:`DDP_KERNELS`,
:data:`DDP_COLLECTIVES`): a broadcast, two forward GEMMs, a backward on the autograd thread
with two gradient all-reduces, waits, an optimizer, and a synchronizing ``.item()``.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

SCHEMAS = ("1.0.1", "1.0.2-chakra.0.0.4", "1.1.0-chakra.0.0.4")
KINETO_TID = {1: 4100, 2: 4200}
COMPUTE_STREAM, NCCL_STREAM = 7, 20
BACKEND_ID = 8214
DTYPE_NAMES = {4: ("float", "Float"), 2: ("c10::BFloat16", "BFloat16"), 8: ("long int", "Long")}


class ScriptedRun:
    def __init__(self, *, rank: int = 0, world: int = 2, schema: str = SCHEMAS[-1], record_function_ids: bool = True,
                 nccl_args: bool = True) -> None:
        self.rank, self.world, self.schema = rank, world, schema
        self.record_function_ids, self.nccl_args = record_function_ids, nccl_args
        self.nodes: list[dict] = []
        self.events: list[dict] = []
        self.next_id = 3  # 1: process root, 2: main thread root
        self.thread_root = {1: 2}
        self.clock = {1: 1000.0, 2: 1000.0}
        self.stream_free: dict[int, float] = {}
        self.correlation = 5000
        self.rf_id = 0
        self.external = 100
        self.stack: dict[int, list[int]] = {1: [], 2: []}
        self.tensor = 10
        self.cpu_busy_us = 0.0
        """Host time spent in operators and launches, blocked time excluded (the ground truth)."""
        self._host_node(1, "[pytorch|profiler|execution_trace|process]", 1, 0, [], [], [], [])
        self._host_node(2, "[pytorch|profiler|execution_trace|thread]", 1, 1, [], [], [], [])

    # ------------------------------------------------------------------ recording
    def _attrs(self, tid: int, rf_id: int | None) -> dict:
        return {"rf_id": rf_id or 0, "fw_parent": 0, "seq_id": -1, "scope": 0, "tid": tid, "fw_tid": 0, "op_schema": ""}

    def _host_node(self, node_id, name, parent, tid, values, types, out_values, out_types, extra_attrs=None, rf_id=None):
        attrs = self._attrs(tid, rf_id)
        if self.schema == "1.0.1":
            node = {"id": node_id, "name": name, "parent": parent, **attrs, "inputs": values, "input_types": types,
                    "input_shapes": [[] for _ in values], "outputs": out_values, "output_types": out_types,
                    "output_shapes": [[] for _ in out_values]}
        else:
            attr_list = [{"name": k, "type": "uint64" if isinstance(v, int) else "string", "value": v} for k, v in attrs.items()]
            attr_list += [{"name": k, "type": "string" if isinstance(v, str) else "int64", "value": v} for k, v in (extra_attrs or {}).items()]
            node = {"id": node_id, "name": name, "ctrl_deps": parent,
                    "inputs": {"values": values, "shapes": [[] for _ in values], "types": types},
                    "outputs": {"values": out_values, "shapes": [[] for _ in out_values], "types": out_types},
                    "attrs": attr_list}
        self.nodes.append(node)

    def thread(self, tid: int) -> None:
        """Start the host thread ``tid`` (its root node)."""
        root = self.next_id
        self.next_id += 1
        self.thread_root[tid] = root
        self._host_node(root, "[pytorch|profiler|execution_trace|thread]", 1, tid, [], [], [], [])

    @contextlib.contextmanager
    def op(self, tid: int, name: str, self_us: float, *, values=(), types=(), out_values=(), out_types=(), extra_attrs=None,
           category: str = "cpu_op"):
        node_id, self.next_id = self.next_id, self.next_id + 1
        rf_id, self.rf_id = self.rf_id, self.rf_id + 1
        parent = self.stack[tid][-1] if self.stack[tid] else self.thread_root[tid]
        self._host_node(node_id, name, parent, tid, list(values), list(types), list(out_values), list(out_types), extra_attrs, rf_id)
        start = self.clock[tid]
        self.clock[tid] += self_us
        self.cpu_busy_us += self_us
        self.stack[tid].append(node_id)
        yield node_id
        self.stack[tid].pop()
        self.external += 1
        args = {"External id": self.external, "Ev Idx": len(self.events)}
        if self.record_function_ids:
            args["Record function id"] = rf_id
        self.events.append({"ph": "X", "cat": category, "name": name, "pid": 77, "tid": KINETO_TID[tid], "ts": start,
                            "dur": self.clock[tid] - start, "args": args})

    def launch(self, tid: int, kernel: str, dur: float, stream: int = COMPUTE_STREAM, args: dict | None = None,
               category: str = "kernel") -> None:
        self.correlation += 1
        corr, at = self.correlation, self.clock[tid]
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 77, "tid": KINETO_TID[tid],
                            "ts": at, "dur": 2.0, "args": {"External id": self.external, "cbid": 211, "correlation": corr}})
        self.events.append({"ph": "s", "id": corr, "pid": 77, "tid": KINETO_TID[tid], "ts": at, "cat": "ac2g", "name": "ac2g"})
        self.clock[tid] += 2.0
        self.cpu_busy_us += 2.0
        start = max(at + 3.0, self.stream_free.get(stream, 0.0))
        self.stream_free[stream] = start + dur
        self.events.append({"ph": "X", "cat": category, "name": kernel, "pid": 0, "tid": stream, "ts": start, "dur": dur,
                            "args": {"External id": corr, "device": 0, "stream": stream, "correlation": corr, **(args or {})}})
        self.events.append({"ph": "f", "id": corr, "pid": 0, "tid": stream, "ts": start, "cat": "ac2g", "name": "ac2g", "bp": "e"})

    def synchronize(self, tid: int) -> float:
        """``cudaStreamSynchronize``: the thread blocks until every stream is idle; returns the µs blocked."""
        until = max(self.stream_free.values(), default=self.clock[tid])
        blocked = max(0.0, until - self.clock[tid]) + 1.0
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": 77,
                            "tid": KINETO_TID[tid], "ts": self.clock[tid], "dur": blocked, "args": {"correlation": 1}})
        self.clock[tid] += blocked
        return blocked

    def new_tensor(self, numel: int, itemsize: int = 4) -> list:
        self.tensor += 2
        return [self.tensor, self.tensor + 1, 0, numel, itemsize, f"cuda:{self.rank}"]

    def collective(self, tid: int, kind: str, numel: int, *, seq: int, kernel_us: float, itemsize: int = 4,
                   pg_name: str = "0", pg_ranks: list[int] | None = None) -> None:
        """One ``torch.distributed`` call as ProcessGroupNCCL records it."""
        ranks = pg_ranks if pg_ranks is not None else list(range(self.world))
        size = len(ranks)
        inp = self.new_tensor(numel, itemsize)
        tensor_type = f"Tensor({DTYPE_NAMES[itemsize][0]})"
        c10d = {"all-reduce": "allreduce_", "broadcast": "broadcast_", "all-gather": "allgather_",
                "reduce-scatter": "reduce_scatter_", "all-to-all": "alltoall_base_", "gather": "gather_"}[kind]
        record_name = {"all-reduce": "allreduce", "broadcast": "broadcast", "all-gather": "all_gather",
                       "reduce-scatter": "reduce_scatter", "all-to-all": "all_to_all", "gather": "gather"}[kind]
        nccl = {"all-reduce": "all_reduce", "broadcast": "broadcast", "all-gather": "all_gather",
                "reduce-scatter": "reduce_scatter", "all-to-all": "all_to_all", "gather": "gather"}[kind]
        if kind == "all-gather":
            outs = [[self.new_tensor(numel, itemsize) for _ in range(size)]]
            out_types = ["GenericList[" + ",".join([tensor_type] * size) + "]"]
            in_n, out_n = numel, numel * size
        elif kind == "reduce-scatter":
            outs, out_types = [[self.new_tensor(numel // size, itemsize)]], [f"GenericList[{tensor_type}]"]
            in_n, out_n = numel, numel // size
        else:
            outs, out_types = [[inp]], [f"GenericList[{tensor_type}]"]
            in_n = out_n = numel
        if self.schema == "1.0.1":
            pg_value, tail = 94594108284448, [[], []]
        elif self.schema.startswith("1.0.2"):
            pg_value, tail = BACKEND_ID, [[], [], size]
        else:
            pg_value, tail = [pg_name, "default_pg"], [[], [], ranks[0], (ranks[1] - ranks[0]) if size > 1 else 1, size]
        values = [[inp], seq, pg_value, self.rank, record_name, *tail]
        types = [f"GenericList[{tensor_type}]", "Int", "Int" if not isinstance(pg_value, list) else "Tuple[String,String]",
                 "Int", "String", "GenericList[]", "GenericList[]"] + ["Int"] * (len(tail) - 2)
        extra = None
        if self.schema.startswith("1.1"):
            extra = {"collective_name": record_name, "dtype": DTYPE_NAMES[itemsize][1], "in_msg_nelems": in_n,
                     "out_msg_nelems": out_n, "in_split_size": "[]", "out_split_size": "[]", "global_rank_start": ranks[0],
                     "global_rank_stride": (ranks[1] - ranks[0]) if size > 1 else 1, "pg_name": pg_name,
                     "pg_desc": "default_pg", "pg_size": size}
        kernel_args = {}
        if self.nccl_args:
            kernel_args = {"Collective name": record_name, "In msg nelems": in_n, "Out msg nelems": out_n,
                           "Group size": size, "dtype": DTYPE_NAMES[itemsize][1], "In split size": "[]",
                           "Out split size": "[]", "Process Group Name": pg_name, "Process Group Description": "default_pg",
                           "Process Group Ranks": str(ranks)}
        kernel = "ncclDevKernel_" + {"all-reduce": "AllReduce_Sum_f32_RING_LL", "broadcast": "Broadcast_RING_LL",
                                     "all-gather": "AllGather_RING_LL", "reduce-scatter": "ReduceScatter_Sum_f32_RING_LL",
                                     "all-to-all": "SendRecv", "gather": "SendRecv"}[kind] + "(ncclDevComm*, unsigned long, ncclWork*)"
        with self.op(tid, f"c10d::{c10d}", 4, values=[[inp], "<Object>", -1], types=[f"GenericList[{tensor_type}]", "Object", "Int"]):
            with self.op(tid, "record_param_comms", 3, values=values, types=types, out_values=outs, out_types=out_types,
                         extra_attrs=extra):
                with self.op(tid, f"nccl:{nccl}", 2, values=[inp], types=[tensor_type]):
                    self.launch(tid, kernel, kernel_us, NCCL_STREAM, kernel_args)

    def p2p(self, tid: int, kind: str, numel: int, peer: int, *, seq: int, kernel_us: float, tag: int = 0) -> None:
        """``dist.send`` / ``dist.recv`` of ``numel`` floats to / from global rank ``peer``."""
        tensor = self.new_tensor(numel)
        op = "c10d::send" if kind == "send" else "c10d::recv_"
        pg_value = 94594108284448 if self.schema == "1.0.1" else (BACKEND_ID if self.schema.startswith("1.0.2") else ["0", "default_pg"])
        values = [[tensor], seq, pg_value, self.rank, kind, [], []]
        types = ["GenericList[Tensor(float)]", "Int", "Int", "Int", "String", "GenericList[]", "GenericList[]"]
        with self.op(tid, op, 4, values=[[tensor], "<Object>", peer, tag], types=["GenericList[Tensor(float)]", "Object", "Int", "Int"]):
            with self.op(tid, "record_param_comms", 3, values=values, types=types):
                with self.op(tid, f"nccl:{kind}", 2, values=[tensor], types=["Tensor(float)"]):
                    self.launch(tid, "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)", kernel_us, NCCL_STREAM)

    def wait(self, tid: int, seq: int) -> None:
        if self.schema == "1.0.1":
            values, types = [seq, 0, 0, "wait", [], []], ["Int", "Int", "Int", "String", "GenericList[]", "GenericList[]"]
        elif self.schema.startswith("1.0.2"):
            values, types = [seq, 0, 0, "wait", [], [], 1], ["Int", "Int", "Int", "String", "GenericList[]", "GenericList[]", "Int"]
        else:
            values = [seq, ["", ""], 0, "wait", [], [], -1, -1, 1]
            types = ["Int", "Tuple[String,String]", "Int", "String", "GenericList[]", "GenericList[]", "Int", "Int", "Int"]
        with self.op(tid, "record_param_comms", 2, values=values, types=types,
                     extra_attrs={"collective_name": "wait"} if self.schema.startswith("1.1") else None):
            pass

    # ------------------------------------------------------------------ output
    def documents(self) -> tuple[dict, dict]:
        nodes = list(self.nodes)
        if self.schema != "1.0.1":
            groups = [{"pg_name": "0", "pg_desc": "default_pg", "backend_id": BACKEND_ID, "backend_config": "cuda:nccl",
                       "ranks": [], "group_size": self.world, "group_count": 1}]
            node = {"id": self.next_id, "name": "## process_group:init ##", "ctrl_deps": 2,
                    "inputs": {"values": [json.dumps(groups)], "shapes": [[]], "types": ["String"]},
                    "outputs": {"values": [], "shapes": [], "types": []}, "attrs": []}
            nodes.insert(2, node)
        host = {"schema": self.schema, "pid": 77, "time": "2024-01-01 00:00:00", "start_ts": 0, "nodes": nodes, "finish_ts": 1}
        kineto = {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": self.rank, "world_size": self.world},
                  "traceEvents": sorted(self.events, key=lambda e: e["ts"]), "traceName": "scripted"}
        return host, kineto


DDP_KERNELS = {"broadcast": 40.0, "gemm_fwd1": 100.0, "gemm_fwd2": 120.0, "loss": 10.0, "gemm_bwd2": 240.0,
               "all_reduce_2": 300.0, "gemm_bwd1": 200.0, "all_reduce_3": 200.0, "sgd_update": 30.0, "copy_loss": 2.0}
"""Kernel durations of :func:`ddp_step` in µs (``sgd_update`` runs twice)."""
DDP_GPU_COMPUTE_US = [100.0, 120.0, 10.0, 240.0, 200.0, 30.0, 30.0, 2.0]
DDP_COLLECTIVES = [("broadcast", 256 * 1024 * 4), ("all-reduce", 2 * 2**20), ("all-reduce", 2**20)]
"""``(type, bytes)`` of the step's collectives, in call order."""


def ddp_step(rank: int = 0, world: int = 2, **options) -> ScriptedRun:
    """A data-parallel training step (see the module docstring); rank ``r``'s first GEMM takes
    ``r`` µs longer, so ranks can be told apart."""
    run = ScriptedRun(rank=rank, world=world, **options)
    with run.op(1, "ProfilerStep#1", 3, category="user_annotation"):
        run.collective(1, "broadcast", 256 * 1024, seq=1, kernel_us=DDP_KERNELS["broadcast"])
        run.wait(1, 1)
        for name in ("gemm_fwd1", "gemm_fwd2"):
            with run.op(1, "aten::linear", 5):
                with run.op(1, "aten::addmm", 8):
                    run.launch(1, name, DDP_KERNELS[name] + (rank if name == "gemm_fwd1" else 0))
        with run.op(1, "aten::sum", 4):
            run.launch(1, "loss", DDP_KERNELS["loss"])
    run.thread(2)
    run.clock[2] = run.clock[1] + 20.0  # backward() hands over to the autograd thread
    for grad, seq, numel in (("gemm_bwd2", 2, 2**19), ("gemm_bwd1", 3, 2**18)):
        with run.op(2, "autograd::engine::evaluate_function: AddmmBackward0", 6):
            with run.op(2, "aten::mm", 7):
                run.launch(2, grad, DDP_KERNELS[grad])
        run.collective(2, "all-reduce", numel, seq=seq, kernel_us=DDP_KERNELS[f"all_reduce_{seq}"])
    run.wait(2, 2)
    run.wait(2, 3)
    run.clock[1] = run.clock[2] + 15.0  # and back
    with run.op(1, "Optimizer.step#SGD.step", 5, category="user_annotation"):
        for _ in range(2):
            with run.op(1, "aten::add_", 6):
                run.launch(1, "sgd_update", DDP_KERNELS["sgd_update"])
    with run.op(1, "aten::item", 3):
        with run.op(1, "aten::_local_scalar_dense", 4):
            run.launch(1, "copy_loss", DDP_KERNELS["copy_loss"], category="gpu_memcpy")
            run.synchronize(1)
    with run.op(1, "aten::detach", 5):  # host work after the device caught up
        pass
    return run


def write_pair(run: ScriptedRun, directory: Path, stem: str) -> tuple[Path, Path]:
    host, kineto = run.documents()
    host_path, kineto_path = directory / f"{stem}_host.json", directory / f"{stem}_kineto.json"
    host_path.write_text(json.dumps(host))
    kineto_path.write_text(json.dumps(kineto))
    return host_path, kineto_path


def layered_step(rank: int = 0, world: int = 8, layers: int = 600, **options) -> ScriptedRun:
    """A larger data-parallel step: ``layers`` linear layers forward (3 operators, 2 kernels
    each), backward on the autograd thread (2 operators, 1 kernel each) and one gradient
    all-reduce per layer (3 operators), then waits: ``9 x layers`` operators per rank."""
    run = ScriptedRun(rank=rank, world=world, **options)
    with run.op(1, "ProfilerStep#1", 3, category="user_annotation"):
        for _ in range(layers):
            with run.op(1, "aten::linear", 5):
                with run.op(1, "aten::addmm", 8):
                    run.launch(1, "gemm_fwd", 50.0 + rank)
                with run.op(1, "aten::relu", 3):
                    run.launch(1, "relu_fwd", 5.0)
    run.thread(2)
    run.clock[2] = run.clock[1] + 20.0
    for layer in range(layers):
        with run.op(2, "autograd::engine::evaluate_function: AddmmBackward0", 6):
            with run.op(2, "aten::mm", 7):
                run.launch(2, "gemm_bwd", 100.0)
        run.collective(2, "all-reduce", 2**16, seq=layer + 1, kernel_us=60.0)
    for layer in range(layers):
        run.wait(2, layer + 1)
    return run
