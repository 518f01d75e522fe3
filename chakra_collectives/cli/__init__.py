"""``chakra-coll``: the command-line interface (one module per command)."""

from chakra_collectives.cli import inspect_cmd, msccl_cmd, replay_cmd, synth_cmd, verify_cmd  # noqa: F401  (registers the commands)
from chakra_collectives.cli import demo_cmd, plot_cmd, topo_info_cmd, workload_cmd  # noqa: F401
from chakra_collectives.cli import pytorch_cmd  # noqa: F401  (after workload_cmd: it joins its group)
from chakra_collectives.cli.app import app


def main() -> None:
    app()


__all__ = ["app", "main"]
