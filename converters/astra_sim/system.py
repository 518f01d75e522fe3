"""ASTRA-sim's system configuration (``system.json``) and remote-memory file.

ASTRA-sim runs a collective from Chakra ETs when the system file names them under
``<collective>-implementation-custom``; ``preferred-dataset-splits`` must be 1 for custom
collectives (ASTRA-sim divides by it, and with more splits no rank finishes;
``et-conventions.md``). Other collectives use a native implementation per network dimension.

>>> from chakra_collectives.ir import Collective
>>> config = system_config({Collective.ALL_REDUCE: "collectives/all_reduce"}, dimensions=2)
>>> config["all-reduce-implementation-custom"], config["all-gather-implementation"]
(['collectives/all_reduce'], ['ring', 'ring'])
"""

from __future__ import annotations

from typing import Any

from chakra_collectives.ir import Collective

CUSTOM_KEYS = {
    Collective.ALL_REDUCE: "all-reduce-implementation-custom",
    Collective.ALL_GATHER: "all-gather-implementation-custom",
    Collective.REDUCE_SCATTER: "reduce-scatter-implementation-custom",
    Collective.ALL_TO_ALL: "all-to-all-implementation-custom",
}
"""The collectives ASTRA-sim runs from Chakra ETs, and their system-configuration keys."""

REMOTE_MEMORY = {"memory-type": "NO_MEMORY_EXPANSION"}
"""The remote-memory configuration of a system without memory expansion."""


def system_config(custom: dict[Collective, str], *, dimensions: int = 1) -> dict[str, Any]:
    """ASTRA-sim's system configuration: custom collectives from ``custom`` (collective ->
    ET prefix, as written in the file), native ``ring`` per dimension for the other types."""
    config: dict[str, Any] = {"scheduling-policy": "FIFO", "preferred-dataset-splits": 1}
    for collective, key in CUSTOM_KEYS.items():
        if collective in custom:
            config[key] = [custom[collective]]
        else:
            config[key.removesuffix("-custom")] = ["ring"] * dimensions
    config["local-mem-bw"] = 50
    return config


__all__ = ["CUSTOM_KEYS", "REMOTE_MEMORY", "system_config"]
