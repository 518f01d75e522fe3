"""ASTRA-sim's system configuration (``system.json``) and remote-memory file: written by
:func:`system_config` for hand-off directories, read by :class:`SystemConfig` for the model of
ASTRA-sim's system layer (:mod:`chakra_collectives.astra_system`).

ASTRA-sim runs a collective from Chakra ETs when the system file names them under
``<collective>-implementation-custom``; ``preferred-dataset-splits`` must be 1 for custom
collectives (ASTRA-sim divides by it, and with more splits no rank finishes;
``docs/et-conventions.md``). Other collectives use a native implementation per network dimension.

>>> from chakra_collectives.ir import Collective
>>> config = system_config({Collective.ALL_REDUCE: "collectives/all_reduce"}, dimensions=2)
>>> config["all-reduce-implementation-custom"], config["all-gather-implementation"]
(['collectives/all_reduce'], ['ring', 'ring'])

Reading (:class:`SystemConfig`). The keys and their defaults are those of ``Sys::initialize_sys`` and
``CollectiveImplLookup::setup_collective_impl_from_config`` (astra-sim 518bd51):

* ``scheduling-policy`` -- ``FIFO`` or ``LIFO``: whether a later collective's chunks queue
  behind (FIFO) or ahead of (LIFO) earlier ones that have not started (``EXPLICIT`` uses each
  COMM_COLL's ``comm_priority``);
* ``preferred-dataset-splits`` -- a collective is cut into this many chunks ("streams"), each
  running the collective's phases on its own; ASTRA-sim divides by it, so it is required;
* ``active-chunks-per-dimension`` -- how many streams run at once on one dimension's queue;
* ``all-reduce-implementation`` (and ``all-gather-``, ``reduce-scatter-``, ``all-to-all-``) --
  one native algorithm per network dimension: ``ring``, ``direct`` (``directN``: at most N
  messages in flight), ``halvingDoubling``, ``doubleBinaryTree``, ``oneRing``, ``oneDirect``,
  ``oneHalvingDoubling`` (one algorithm over all NPUs);
* ``*-implementation-custom`` -- one Chakra ET prefix that runs the collective instead;
* ``collective-optimization`` -- ``baseline`` (an all-reduce is an all-reduce in every
  dimension) or ``localBWAware`` (reduce-scatter up the dimensions, all-reduce in the last,
  all-gather back down);
* ``local-mem-bw`` (GB/s, 1 GB = 10^9 bytes here: ASTRA-sim multiplies by 10^9) -- a reduction
  of ``S`` received bytes costs ``3 * int(S / bw)`` ns (one write, two reads);
* ``endpoint-delay`` (ns, default 10) -- every message waits this long in the endpoint before
  it is sent and after it is received;
* ``local-reduction-delay`` -- used only by the shared-bus model (``model-shared-bus: 1``),
  which this model does not cover.

>>> cfg = SystemConfig.from_dict({"preferred-dataset-splits": 1, "all-reduce-implementation": ["ring"],
...                               "local-mem-bw": 50})
>>> cfg.native["all-reduce"], cfg.endpoint_delay, cfg.policy
(('ring',), 10, 'FIFO')
>>> cfg.reduction_ns(131072)          # 3 * int(131072 B / 50 GB/s)
7863
>>> SystemConfig.from_dict({"all-reduce-implementation": ["ring"]})
Traceback (most recent call last):
...
chakra_collectives.errors.InputError: preferred-dataset-splits is missing: ASTRA-sim divides each collective by it (without it ASTRA-sim crashes)
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chakra_collectives.errors import InputError
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




COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")
"""The collective types ASTRA-sim's system layer runs (others abort it)."""

NATIVE = ("ring", "direct", "halvingDoubling", "doubleBinaryTree", "oneRing", "oneDirect", "oneHalvingDoubling")
_DIRECT = re.compile(r"^(direct|oneDirect)(\d*)$")


@dataclass(frozen=True)
class SystemConfig:
    """What a system JSON configures (see the module docstring for each field's meaning)."""

    splits: int = 1
    active_chunks: int = 1
    policy: str = "FIFO"
    optimization: str = "baseline"
    native: dict[str, tuple[str, ...]] = field(default_factory=dict)
    custom: dict[str, str] = field(default_factory=dict)
    local_mem_bw_gbps: float = 0.0
    endpoint_delay: int = 10
    local_reduction_delay: int = 1
    source: str = "<system>"

    @classmethod
    def from_file(cls, path: str | Path) -> "SystemConfig":
        """Read a system JSON; errors name the file."""
        try:
            document = json.loads(Path(path).read_text())
        except OSError as exc:
            raise InputError(f"cannot read system configuration: {exc.strerror or exc}", path=path) from None
        except json.JSONDecodeError as exc:
            raise InputError(f"not JSON: {exc.msg} (line {exc.lineno})", path=path) from None
        try:
            return cls.from_dict(document, source=str(path))
        except InputError as exc:
            raise exc.located(path=path) from None

    @classmethod
    def from_dict(cls, document: Any, *, source: str = "<system>") -> "SystemConfig":
        if not isinstance(document, dict):
            raise InputError("a system configuration is a JSON object")
        if "preferred-dataset-splits" not in document:
            raise InputError("preferred-dataset-splits is missing: ASTRA-sim divides each collective by it (without it ASTRA-sim crashes)")
        splits = _positive_int(document, "preferred-dataset-splits")
        active = _positive_int(document, "active-chunks-per-dimension", default=1)
        policy = document.get("scheduling-policy", "FIFO")
        if policy not in ("FIFO", "LIFO", "EXPLICIT"):
            raise InputError(f"scheduling-policy is {policy!r}; ASTRA-sim knows FIFO, LIFO and EXPLICIT")
        optimization = document.get("collective-optimization", "baseline")
        if optimization not in ("baseline", "localBWAware"):
            raise InputError(f"collective-optimization is {optimization!r}; ASTRA-sim knows baseline and localBWAware")
        if int(document.get("model-shared-bus", 0) or 0) == 1:
            raise InputError("model-shared-bus: 1 (ASTRA-sim's LogGP memory bus) is not modeled; remove it or set it to 0")
        if int(document.get("roofline-enabled", 0) or 0) != 0:
            raise InputError("roofline-enabled is not modeled (COMP nodes take their duration_micros); set it to 0")
        native: dict[str, tuple[str, ...]] = {}
        custom: dict[str, str] = {}
        for collective in COLLECTIVES:
            key = f"{collective}-implementation"
            if key in document:
                names = document[key]
                if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                    raise InputError(f"{key} must be a list of algorithm names, one per dimension")
                for name in names:
                    if name not in NATIVE and not _DIRECT.match(name):
                        raise InputError(f"{key}: unknown algorithm {name!r} (ASTRA-sim knows {', '.join(NATIVE)}, directN)")
                native[collective] = tuple(names)
            key = f"{collective}-implementation-custom"
            if key in document:
                prefixes = document[key]
                if not isinstance(prefixes, list) or len(prefixes) != 1 or not isinstance(prefixes[0], str):
                    raise InputError(f"{key} must list exactly one Chakra ET prefix (ASTRA-sim throws otherwise)")
                custom[collective] = prefixes[0]
        if "per-node-custom-implementation" in document:
            raise InputError("per-node-custom-implementation is not modeled; use *-implementation-custom")
        if custom and splits != 1:
            raise InputError(f"preferred-dataset-splits is {splits}; with custom collectives ASTRA-sim needs 1 (otherwise no rank finishes)")
        lmb = float(document.get("local-mem-bw", 0) or 0)
        if lmb < 0:
            raise InputError(f"local-mem-bw is {lmb}; it must not be negative")
        endpoint = _number(document, "endpoint-delay", 10)
        reduction = _number(document, "local-reduction-delay", 1)
        return cls(
            splits=splits,
            active_chunks=active,
            policy=policy,
            optimization=optimization,
            native=native,
            custom=custom,
            local_mem_bw_gbps=lmb,
            endpoint_delay=int(endpoint),
            local_reduction_delay=int(reduction),
            source=source,
        )

    def reduction_ns(self, nbytes: int) -> int:
        """Local memory time of reducing ``nbytes`` received bytes: write + two reads.

        ASTRA-sim (``PacketBundle::call``) charges ``int(S / (bw * 1e9) * 1e9)`` three times;
        without ``local-mem-bw`` that is a division by zero, which ASTRA-sim's x86 build turns
        into 0 ns.
        """
        if self.local_mem_bw_gbps <= 0:
            return 0
        rate = self.local_mem_bw_gbps * 1_000_000_000
        return 3 * int(nbytes / rate * 1e9)

    def implementations(self, collective: str) -> tuple[str, ...]:
        """The native algorithm per dimension for ``collective`` (empty when not configured)."""
        return self.native.get(collective, ())

    def describe(self) -> str:
        parts = [f"splits {self.splits}", f"active chunks {self.active_chunks}", self.policy, self.optimization]
        parts.append(f"local-mem-bw {self.local_mem_bw_gbps:g} GB/s" if self.local_mem_bw_gbps else "no local-mem-bw")
        parts.append(f"endpoint-delay {self.endpoint_delay} ns")
        return ", ".join(parts)


def direct_window(name: str) -> int:
    """``direct`` -> -1 (all peers at once), ``direct4`` -> 4.

    >>> direct_window("direct"), direct_window("direct4"), direct_window("oneDirect2")
    (-1, 4, 2)
    """
    match = _DIRECT.match(name)
    if match is None:
        raise InputError(f"{name!r} is not a direct algorithm")
    return int(match.group(2)) if match.group(2) else -1


def _positive_int(document: dict, key: str, default: int | None = None) -> int:
    value = document.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value or value < 1:
        raise InputError(f"{key} is {value!r}; it must be a positive integer")
    return int(value)


def _number(document: dict, key: str, default: float) -> float:
    value = document.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise InputError(f"{key} is {value!r}; it must be a non-negative number")
    return value


__all__ = ["COLLECTIVES", "CUSTOM_KEYS", "NATIVE", "REMOTE_MEMORY", "SystemConfig", "direct_window", "system_config"]
