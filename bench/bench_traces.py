"""Real traces: Chakra's feeder trace (rank 0 of a DDP run, 3,664 nodes, 182k dependencies)
replicated to 64 ranks, read with the default repairs and replayed on switch:64 with the
default algorithms (5 all-reduces as rings, 2 broadcasts as trees, over 64 ranks).

* read: ``read_workload`` of the 64 byte-identical files (decoded once, as SPMD copies are),
  and of 64 files that differ in their GlobalMetadata only (every one decoded);
* replay: ``replay()`` of the parsed workload (expansion, simulation, statistics);
* end to end: a fresh process reading and replaying, with its peak memory (max RSS), as
  ``chakra-coll replay`` does;
* convert: ``from-pytorch`` on the scripted 2-rank DDP step of the tests (host + Kineto), and
  the median of ``--repeat`` conversions of an 8-rank step of 5,405 host operators per rank
  (``layered_step``, 600 layers: 12,000 GPU events and 600 all-reduces per rank);
  ``--convert-only`` runs these alone (they need nothing outside the repository).

Targets (issue 16): reading >= 300k nodes/s; replay <= 10 s. Needs ``../shared/interop``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from timing import median_seconds

from chakra.schema.protobuf.et_def_pb2 import AttributeProto, GlobalMetadata

from chakra_collectives.converters.chakra_et import read_workload
from chakra_collectives.converters.chakra_et.stream import frame, load_bytes, split_records
from chakra_collectives.replay import replay
from chakra_collectives.topology import load_topology

FEEDER = Path(__file__).resolve().parents[1].parent / "shared" / "interop" / "chakra" / "feeder_chakra.0.et"
RANKS = 64
TOPOLOGY = f"switch:{RANKS}"

_CHILD = """
import resource, sys, time
from chakra_collectives.converters.chakra_et import read_workload
from chakra_collectives.replay import replay
from chakra_collectives.topology import load_topology
started = time.perf_counter()
result = replay(read_workload(sys.argv[1]), load_topology(sys.argv[2]))
print(time.perf_counter() - started, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, result.total_ns)
"""


def _replicate(directory: Path, *, distinct: bool) -> Path:
    data = FEEDER.read_bytes()
    if distinct:
        body = load_bytes(FEEDER)
        _, payload, end = split_records(body, FEEDER)[0]
        metadata = GlobalMetadata.FromString(body[payload:end])
    for rank in range(RANKS):
        if distinct:
            own = GlobalMetadata()
            own.CopyFrom(metadata)
            own.attr.append(AttributeProto(name="rank", int64_val=rank))
            data = frame(own.SerializeToString()) + body[end:]
        (directory / f"feeder.{rank}.et").write_bytes(data)
    return directory / "feeder"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--convert-only", action="store_true", help="only the from-pytorch lines")
    args = parser.parse_args(argv)
    if args.convert_only:
        with tempfile.TemporaryDirectory() as tmp:
            _convert(Path(tmp), args.repeat)
        return 0
    if not FEEDER.exists():
        print(f"skipped: {FEEDER} is not present")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("same", "distinct"):
            Path(tmp, name).mkdir()
        same = _replicate(Path(tmp, "same"), distinct=False)
        distinct = _replicate(Path(tmp, "distinct"), distinct=True)
        workload = read_workload(same)
        nodes = len(workload)
        print(f"{RANKS} ranks x {nodes // RANKS:,} nodes = {nodes:,} nodes, {len(workload.dep_idx):,} dependencies after repairs")
        print(f"{'read':<40} {'median s':>9} {'nodes/s':>10}")
        for label, prefix in (("byte-identical rank files", same), ("distinct rank files (metadata differs)", distinct)):
            seconds, _ = median_seconds(lambda: read_workload(prefix), repeat=args.repeat)
            print(f"{label:<40} {seconds:>9.3f} {nodes / seconds:>10,.0f}", flush=True)
        topology = load_topology(TOPOLOGY)
        holder = {}
        seconds, _ = median_seconds(lambda: holder.setdefault("r", replay(workload, topology)), repeat=max(1, args.repeat // 2))
        result = holder["r"]
        print(f"replay on {TOPOLOGY} (defaults): median {seconds:.2f} s, {result.num_tasks:,} tasks, simulated {result.total_ns / 1e6:.3f} ms")
        child = subprocess.run([sys.executable, "-c", _CHILD, str(same), TOPOLOGY], capture_output=True, text=True, check=True)
        wall, rss, _ = (float(x) for x in child.stdout.split())
        print(f"fresh process, read + replay: {wall:.2f} s, peak memory (max RSS) {rss:,.0f} MiB")
        _convert(Path(tmp), args.repeat)
    return 0


def _convert(tmp: Path, repeat: int) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from pytorch_traces import ddp_step, layered_step, write_pair

    from chakra_collectives.converters.pytorch.convert import convert_pytorch

    pairs = [write_pair(ddp_step(r, 2), tmp, f"r{r}") for r in range(2)]
    started = time.perf_counter()
    convert_pytorch([h for h, _ in pairs], [k for _, k in pairs], tmp / "ddp")
    print(f"from-pytorch, scripted 2-rank DDP step (host + Kineto): {time.perf_counter() - started:.3f} s")
    pairs = [write_pair(layered_step(r, 8), tmp, f"big{r}") for r in range(8)]
    seconds, samples = median_seconds(lambda: convert_pytorch([h for h, _ in pairs], [k for _, k in pairs], tmp / "big"), repeat=repeat)
    shown = ", ".join(f"{s:.2f}" for s in samples)
    print(f"from-pytorch, 8 ranks x 5,405 host operators (host + Kineto): median {seconds:.2f} s of {repeat} ({shown})")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
