"""Workloads as ASTRA-sim runs them: Chakra ETs of compute and collectives, one file per rank.

* :mod:`~chakra_collectives.workload.spec` -- a model's layers (flags or a small YAML file);
* :mod:`~chakra_collectives.workload.generate` -- :func:`microbenchmark` (one collective),
  :func:`data_parallel` (a training iteration whose gradient all-reduces overlap the backward
  pass), :func:`hybrid_parallel` (tensor + data parallelism over process groups) and
  :func:`mixture_of_experts` (expert-parallel all-to-alls + data-parallel all-reduces).

>>> import tempfile, pathlib
>>> from chakra_collectives.replay import replay
>>> from chakra_collectives.topology import ring
>>> with tempfile.TemporaryDirectory() as tmp:
...     paths = microbenchmark("all-gather", 4, 2**20).write(pathlib.Path(tmp) / "ag")
...     result = replay(pathlib.Path(tmp) / "ag", ring(4))
>>> [p.name for p in paths], result.collectives[0].collective
(['ag.0.et', 'ag.1.et', 'ag.2.et', 'ag.3.et'], 'all-gather')
"""

from chakra_collectives.workload.generate import (
    GeneratedWorkload,
    data_parallel,
    groups_path,
    hybrid_parallel,
    microbenchmark,
    mixture_of_experts,
    stored_duration_ns,
)
from chakra_collectives.workload.spec import Layer, ModelSpec, load_model_spec, uniform_model

__all__ = [
    "GeneratedWorkload",
    "Layer",
    "ModelSpec",
    "data_parallel",
    "groups_path",
    "hybrid_parallel",
    "load_model_spec",
    "microbenchmark",
    "mixture_of_experts",
    "stored_duration_ns",
    "uniform_model",
]
