"""``chakra-coll``: the command-line interface (one module per command, loaded when used).

See :mod:`chakra_collectives.cli.app` for how commands are registered and listed.
"""

from chakra_collectives.cli.app import app


def main() -> None:
    app()


__all__ = ["app", "main"]
