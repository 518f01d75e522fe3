"""What the fuzzers feed: each target takes raw bytes and runs one reader or parser on them.

A target may end with the tool's own error (:class:`~chakra_collectives.errors.ChakraCollError`:
a one-line message and an exit code) -- anything else escaping is a crash. The hypothesis
suite (``tests/test_fuzz.py``), the atheris harness (``fuzz/atheris_run.py``) and the campaign
(``fuzz/campaign.py``) share these targets and the seeds below.

>>> run(spec_parsers, b"64MiB")
'ok'
>>> run(topology_loader, b"npus: 2\\nlinks: [{src: 0, dst: 5}]")
'refused'
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path
from typing import Callable

from chakra_collectives.errors import ChakraCollError

Target = Callable[[bytes], None]


def run(target: Target, data: bytes) -> str:
    """``ok`` or ``refused`` (the tool's own error); any other exception propagates: a crash."""
    try:
        target(data)
    except ChakraCollError:
        return "refused"
    return "ok"


def _in_temp(write_and_read: Callable[[Path], None]) -> None:
    with tempfile.TemporaryDirectory(prefix="chakra-coll-fuzz-") as folder:
        write_and_read(Path(folder))


def et_reader(data: bytes) -> None:
    """``data`` as rank 0 of a one-rank algorithm, then as a workload."""
    from chakra_collectives.converters.chakra_et import read_algorithm
    from chakra_collectives.converters.chakra_et.workload_reader import read_workload

    def go(folder: Path) -> None:
        (folder / "x.0.et").write_bytes(data)
        try:
            read_algorithm(folder / "x")
        except ChakraCollError:
            pass
        read_workload(folder / "x")

    _in_temp(go)


def et_rank_set(files: list[bytes]) -> None:
    """``files`` as ranks 0..N-1 of one algorithm (what verify and inspect read)."""
    from chakra_collectives.converters.chakra_et import read_algorithm
    from chakra_collectives.verify import verify_algorithm

    def go(folder: Path) -> None:
        for rank, data in enumerate(files):
            (folder / f"x.{rank}.et").write_bytes(data)
        verify_algorithm(read_algorithm(folder / "x"))

    _in_temp(go)


FILE_COMMANDS = (
    ("verify", "{x}"),
    ("inspect", "{x}"),
    ("replay", "{w}", "-t", "ring:4", "-a", "all-reduce={x}"),
    ("export-msccl", "{x}", "-o", "{folder}/x.xml"),
)
"""The commands that read an algorithm's rank files, as a user types them."""


def ring_all_reduce_files() -> list[bytes]:
    """The four rank files of a ring all-reduce (1 MiB), as chakra-coll writes them."""
    from chakra_collectives.converters.chakra_et import write_algorithm
    from chakra_collectives.ir import Collective
    from chakra_collectives.synth.baselines import ring

    with tempfile.TemporaryDirectory(prefix="chakra-coll-fuzz-") as folder:
        return [p.read_bytes() for p in write_algorithm(ring(Collective.ALL_REDUCE, 4, size_bytes=2**20), Path(folder) / "a")]


class CommandCrash(Exception):
    """A command ended in a traceback instead of the tool's own one-line error."""


def commands_on_rank_set(files: list[bytes]) -> list[int]:
    """``files`` as ranks 0..N-1 of an algorithm, through every command of
    :data:`FILE_COMMANDS` in-process (replay beside a 4-rank all-reduce microbenchmark).
    Returns the exit codes; 0-4 pass, and an exception other than the CLI's own exit raises
    :class:`CommandCrash`."""
    from typer.testing import CliRunner

    from chakra_collectives.cli.app import app

    runner = CliRunner()
    codes: list[int] = []

    def go(folder: Path) -> None:
        for rank, data in enumerate(files):
            (folder / f"x.{rank}.et").write_bytes(data)
        made = runner.invoke(app, ["workload", "microbenchmark", "-n", "4", "-c", "all-reduce", "-s", "1MiB", "-o", str(folder / "w")])
        assert made.exit_code == 0, made.output
        for command in FILE_COMMANDS:
            args = [a.format(x=folder / "x", w=folder / "w", folder=folder) for a in command]
            result = runner.invoke(app, args)
            if result.exception is not None and not isinstance(result.exception, SystemExit):
                raise CommandCrash(f"chakra-coll {' '.join(args)}: {result.exception!r}") from result.exception
            if result.exit_code not in (0, 1, 2, 3, 4):
                raise CommandCrash(f"chakra-coll {' '.join(args)}: exit code {result.exit_code}")
            codes.append(result.exit_code)

    _in_temp(go)
    return codes


def msccl_importer(data: bytes) -> None:
    """``data`` as an MSCCL-IR XML file, imported at 1 MiB."""
    from chakra_collectives.converters.msccl import read_programs
    from chakra_collectives.converters.msccl.lower import lower_program

    def go(folder: Path) -> None:
        (folder / "algo.xml").write_bytes(data)
        for program in read_programs(folder / "algo.xml"):
            lower_program(program, size_bytes=2**20, path=folder / "algo.xml")

    _in_temp(go)


def topology_loader(data: bytes) -> None:
    """``data`` as a YAML topology file and as an edge list; as a builder spec when it is one line."""
    from chakra_collectives.topology import load_topology

    def go(folder: Path) -> None:
        for name in ("t.yaml", "t.txt"):
            (folder / name).write_bytes(data)
            try:
                load_topology(str(folder / name))
            except ChakraCollError:
                pass
        text = data.decode("utf-8", "replace")
        if text and "\n" not in text and "/" not in text and len(text) < 200:
            load_topology(text)

    _in_temp(go)


def spec_parsers(data: bytes) -> None:
    """``data`` as what users type: a size, a collective, a replay algorithm option, a
    --default-algorithm spec, a memory limit."""
    from chakra_collectives.ir import Collective
    from chakra_collectives.replay.algorithms import DefaultAlgorithms, parse_collective_option
    from chakra_collectives.resources import parse_memory
    from chakra_collectives.units import parse_size

    text = data.decode("utf-8", "replace")
    for parse in (parse_size, Collective.parse, parse_collective_option, DefaultAlgorithms, parse_memory):
        try:
            parse(text)
        except ChakraCollError:
            pass


class WrittenButRefused(Exception):
    """``from-pytorch`` wrote a workload that reading or replaying it then refused."""


def pytorch_converter(data: bytes) -> None:
    """``data`` as a packed trace set (:mod:`trace_mutate`): files named ``h*`` are given as
    execution traces, ``k*`` with ``--kineto``; what is written must then read and replay on
    ``switch:N`` (with its process groups), else :class:`WrittenButRefused`."""
    from trace_mutate import unpack

    from chakra_collectives.converters.chakra_et.workload_reader import read_workload
    from chakra_collectives.converters.pytorch.convert import convert_pytorch
    from chakra_collectives.replay import replay
    from chakra_collectives.replay.groups import ProcessGroups
    from chakra_collectives.topology import load_topology

    def go(folder: Path) -> None:
        hosts, kinetos = [], []
        for index, (name, content) in enumerate(unpack(data).items()):
            path = folder / f"{index}-{Path(name).name or 'x'}"
            path.write_bytes(content)
            (kinetos if name.startswith("k") else hosts).append(path)
        result = convert_pytorch(hosts, kinetos or None, folder / "w")
        try:
            workload = read_workload(folder / "w")
            groups = ProcessGroups.load(folder / "w.json", num_ranks=workload.num_ranks) if result.groups else None
            replay(workload, load_topology(f"switch:{max(2, workload.num_ranks)}"), groups=groups)
        except ChakraCollError as error:
            raise WrittenButRefused(f"from-pytorch wrote {len(result.paths)} file(s) that replay refuses: {error}") from error

    _in_temp(go)


TARGETS: dict[str, Target] = {
    "et": et_reader,
    "msccl": msccl_importer,
    "topology": topology_loader,
    "specs": spec_parsers,
    "pytorch": pytorch_converter,
}


def mutator(name: str) -> Callable[[bytes, random.Random], bytes]:
    """How a target's inputs are mutated: trace sets structurally (:mod:`trace_mutate`), the
    rest byte by byte (:mod:`mutate`)."""
    from mutate import mutate
    from trace_mutate import mutate_traces

    return mutate_traces if name == "pytorch" else mutate


def seeds(name: str) -> list[bytes]:
    """Valid inputs the mutations start from (generated here; no file outside the repository)."""
    if name == "et":
        return [_algorithm_bytes("ring", "all-reduce"), _algorithm_bytes("direct", "all-to-all"), _workload_bytes()]
    if name == "msccl":
        return [_msccl_bytes()]
    if name == "topology":
        return [
            b"npus: 4\nlinks:\n  - {src: 0, dst: 1, bandwidth_gbps: 50, latency_ns: 500, bidirectional: true}\n"
            b"  - {src: 1, dst: 2, bidirectional: true}\n  - {src: 2, dst: 3, bidirectional: true}\n",
            b"0 <-> 1 bw=50 lat=500\n1 <-> 2\n2 <-> 3\n3 -> s0\ns0 -> 0\n",
            b"torus2d:4x4,bw=100",
        ]
    if name == "pytorch":
        return [data for _, data in pytorch_seeds()]
    return [b"64MiB", b"all-reduce=out/ar", b"all-to-all=direct,*=ring", b"50%"]


REAL_HOST_TRACE = Path(__file__).resolve().parents[1].parent / "shared" / "interop" / "chakra" / "pytorch_host_1.0.2-chakra.0.0.4.json"
"""A real PyTorch host trace (Chakra's test data), used as a seed when it is present."""


def pytorch_seeds() -> list[tuple[str, bytes]]:
    """Labelled packed trace sets: the scripted 2-rank DDP step (host + Kineto) in schemas 1.0.1,
    1.0.2 and 1.1.0, with and without record-function ids; a 1.1.0 step with point-to-point
    calls; the real 1.0.2 host trace twice (two ranks, no Kineto) when present."""
    import json
    import sys

    from trace_mutate import pack

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from pytorch_traces import SCHEMAS, ScriptedRun, ddp_step

    found = []
    for schema in SCHEMAS:
        for ids in (True, False):
            files = {}
            for rank in range(2):
                host, kineto = ddp_step(rank, 2, schema=schema, record_function_ids=ids).documents()
                files[f"h{rank}.json"], files[f"k{rank}.json"] = json.dumps(host).encode(), json.dumps(kineto).encode()
            found.append((f"scripted DDP {schema}{'' if ids else ' (no rf_id)'}", pack(files)))
    files = {}
    for rank in range(2):
        run = ScriptedRun(rank=rank, world=2)
        with run.op(1, "step", 2):
            run.p2p(1, "send" if rank == 0 else "recv", 256, 1 - rank, seq=1, kernel_us=5)
            run.collective(1, "all-gather", 1024, seq=2, kernel_us=9)
        host, kineto = run.documents()
        files[f"h{rank}.json"], files[f"k{rank}.json"] = json.dumps(host).encode(), json.dumps(kineto).encode()
    found.append(("scripted send/recv + all-gather 1.1.0", pack(files)))
    if REAL_HOST_TRACE.exists():
        real = REAL_HOST_TRACE.read_bytes()
        found.append(("real host trace 1.0.2 (Chakra's test data) x 2 ranks", pack({"h0.json": real, "h1.json": real})))
    return found


def _algorithm_bytes(name: str, collective: str) -> bytes:
    from chakra_collectives.converters.chakra_et import write_algorithm
    from chakra_collectives.ir import Collective
    from chakra_collectives.synth.registry import SynthesisOptions, get

    algo = get(name).make(None, Collective.parse(collective), 4, SynthesisOptions(size_bytes=2**20)).algorithm  # type: ignore[arg-type]
    with tempfile.TemporaryDirectory() as folder:
        paths = write_algorithm(algo, Path(folder) / "a")
        return paths[1].read_bytes()


def _workload_bytes() -> bytes:
    from chakra_collectives.workload import data_parallel, uniform_model

    with tempfile.TemporaryDirectory() as folder:
        model = uniform_model(layers=2, forward="10us", gradient="1MiB")
        paths = data_parallel(model, 2).write(Path(folder) / "w")
        return paths[0].read_bytes()


def _msccl_bytes() -> bytes:
    import warnings

    from chakra_collectives.converters.msccl.io import write_msccl
    from chakra_collectives.ir import Collective
    from chakra_collectives.synth.baselines import ring

    with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        write_msccl(ring(Collective.ALL_REDUCE, 4, size_bytes=2**20), Path(folder) / "a.xml")
        return (Path(folder) / "a.xml").read_bytes()
