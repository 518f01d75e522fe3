"""The tool a newcomer meets: demo wall time, workload generation, replay timeline, pictures.

* demo: :func:`chakra_collectives.demo.run_demo` end to end (synthesis, verification, three
  replays, trace, three pictures, ASTRA-sim directory), in process;
* workload: a data-parallel iteration of 48 layers written for N ranks (nodes/s over every
  rank file's nodes), as ``chakra-coll workload data-parallel`` does;
* timeline: :func:`~chakra_collectives.replay.timeline.timeline_document` of the sample
  iteration's replay (what ``replay --json`` adds), and the replay itself for scale;
* pictures: ``plot timeline`` / ``links`` / ``algorithm`` on the sample files, PNG.

Target (issue 6): the demo runs "well under a minute" from a fresh clone (its import time --
about 2.5 s of which is jsonschema's format checkers -- comes on top of the in-process time).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from timing import median_seconds

from chakra_collectives.converters.chakra_et import read_algorithm
from chakra_collectives.demo import run_demo
from chakra_collectives.plot import load_replay_document, plot_algorithm, plot_links, plot_timeline
from chakra_collectives.converters.chakra_et import read_workload
from chakra_collectives.replay import replay
from chakra_collectives.replay.timeline import timeline_document
from chakra_collectives.samples import write_samples
from chakra_collectives.topology import load_topology
from chakra_collectives.workload import data_parallel, uniform_model

RANKS = [64, 256, 1024]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        demo_s, _ = median_seconds(lambda: run_demo(tmp / "demo"), repeat=args.repeat, warmup=0)
        print(f"demo (in process): median {demo_s:.2f} s over {args.repeat} runs")

        print(f"\n{'ranks':>6} {'nodes':>9} {'write s':>8} {'nodes/s':>10}")
        model = uniform_model(layers=48, forward="50us", gradient="16MiB", optimizer="20us")
        for ranks in RANKS:
            nodes = ranks * (3 * 48 + 1)
            seconds, _ = median_seconds(lambda: data_parallel(model, ranks).write(tmp / "w"), repeat=args.repeat)
            print(f"{ranks:>6} {nodes:>9,} {seconds:>8.3f} {nodes / seconds:>10,.0f}")

        write_samples(tmp / "s")
        topology = load_topology(str(tmp / "s/topology/two_servers.yaml"))
        tacos = read_algorithm(tmp / "s/collectives/all_reduce_tacos")
        work = read_workload(tmp / "s/workload/train_step")
        run = lambda: replay(work, topology, algorithms={tacos.collective: tacos}, record_links=True)  # noqa: E731
        replay_s, _ = median_seconds(run, repeat=args.repeat)
        result = run()
        timeline_s, _ = median_seconds(lambda: timeline_document(result), repeat=args.repeat)
        print(f"\nsample iteration: replay {replay_s * 1e3:.1f} ms ({result.num_tasks:,} tasks, {len(result.timing.links.intervals):,} hops); "
              f"timeline document {timeline_s * 1e3:.1f} ms ({timeline_s / replay_s:.2f} x the replay)")

        import json

        (tmp / "r.json").write_text(json.dumps(result.as_dict(timeline=True)))
        document = load_replay_document(tmp / "r.json", need_links=True)
        print(f"\n{'picture':>10} {'median s':>9}")
        for name, draw in (
            ("timeline", lambda: plot_timeline(document, tmp / "t.png")),
            ("links", lambda: plot_links(document, tmp / "l.png")),
            ("algorithm", lambda: plot_algorithm(tacos, topology, tmp / "a.png")),
        ):
            seconds, _ = median_seconds(draw, repeat=args.repeat)
            print(f"{name:>10} {seconds:>9.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
