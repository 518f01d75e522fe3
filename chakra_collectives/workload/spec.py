"""A model as the workload generators see it: layers with compute times and tensor sizes.

A spec is given by flags (``L`` identical layers) or by a small YAML file::

    name: train_step                  # optional: names the nodes and the summary
    layers:
      - {name: embedding, forward: 20us, backward: 40us, gradient: 2MiB}
      - name: block
        forward: 60us                 # time of the layer on one device (ns, us, ms, s)
        backward: 120us               # optional, default 2 x forward
        gradient: 8MiB                # bytes of the layer's weight gradients
        activation: 1MiB              # optional: output activation bytes (hybrid's TP all-reduce)
        ops: 2.1e9                    # optional: forward operations (ASTRA-sim's roofline num_ops)
        repeat: 4                     # optional: this layer 4 times
    optimizer: 30us                   # optional: the optimizer step after all gradients

Durations are whole microseconds in the written files (Chakra's ``duration_micros``), so a
duration that is not a whole number of microseconds is refused rather than rounded. Every
problem is reported as one line with the file's line number.

>>> spec = uniform_model(layers=2, forward="10us", gradient="4MiB")
>>> [(l.name, l.forward_ns, l.backward_ns, l.gradient_bytes) for l in spec.layers]
[('layer0', 10000.0, 20000.0, 4194304), ('layer1', 10000.0, 20000.0, 4194304)]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from chakra_collectives.errors import InputError
from chakra_collectives.locate import line_of
from chakra_collectives.units import parse_duration, parse_size

DURATION_SCHEMA = {"type": ["string", "number"], "description": "A duration: 20us, 1.5ms, 250ns, or a number of ns."}
SIZE_SCHEMA = {"type": ["string", "integer"], "description": "A size in bytes: 8MiB, 1GB, 4096."}
"""JSON Schema fragments of a duration and a size, shared by every schema with such keys."""

MODEL_DEFAULTS = {"layers": 4, "forward": "50us", "gradient": "16MiB", "activation": "2MiB", "optimizer": "20us"}
"""What :func:`uniform_model` describes when a key is not given (``chakra-coll workload``'s flags,
``search``'s workload entries)."""

MODEL_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "chakra-coll model spec (workload data-parallel / hybrid)",
    "type": "object",
    "required": ["layers"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string"},
        "optimizer": DURATION_SCHEMA,
        "layers": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["forward", "gradient"],
                "additionalProperties": False,
                "properties": {
                    "name": {"type": "string"},
                    "forward": DURATION_SCHEMA,
                    "backward": DURATION_SCHEMA,
                    "gradient": SIZE_SCHEMA,
                    "activation": SIZE_SCHEMA,
                    "ops": {"type": ["number", "string"], "description": "Operations (YAML reads 2.1e9 as text: both are accepted)."},
                    "repeat": {"type": "integer", "minimum": 1},
                },
            },
        },
    },
}


@dataclass(frozen=True)
class Layer:
    """One layer as one device runs it whole (no tensor parallelism)."""

    name: str
    forward_ns: float
    backward_ns: float
    gradient_bytes: int
    activation_bytes: int | None = None
    """Bytes of the layer's output activations (what tensor parallelism all-reduces)."""
    forward_ops: float | None = None
    """Operations of the forward pass (ASTRA-sim's roofline ``num_ops``); backward: twice."""


@dataclass(frozen=True)
class ModelSpec:
    """Layers in forward order and the optimizer step."""

    name: str
    layers: tuple[Layer, ...]
    optimizer_ns: float = 0.0
    source: str | None = field(default=None, compare=False)
    """The file it came from, for error messages."""


def _duration(text: str | float) -> float:
    """A duration in ns that the ET can hold exactly (whole microseconds)."""
    value_ns = parse_duration(text)
    if value_ns != round(value_ns / 1000) * 1000:
        raise InputError(f"{value_ns:g} ns is not a whole number of microseconds (Chakra stores duration_micros)")
    return value_ns


def _operations(value: Any) -> float:
    try:
        count = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{value!r} is not a number of operations") from None
    if not count > 0:
        raise InputError(f"{value!r}: the number of operations must be positive")
    return count


def _flag(parse, text: Any, flag: str) -> Any:
    try:
        return parse(text)
    except InputError as error:
        raise InputError(f"{flag}: {error.message}") from None


def uniform_model(
    *,
    layers: int,
    forward: str | float,
    gradient: str | int,
    backward: str | float | None = None,
    activation: str | int | None = None,
    optimizer: str | float = 0,
    name: str = "model",
) -> ModelSpec:
    """``layers`` identical layers (what the command's flags describe)."""
    if layers < 1:
        raise InputError(f"--layers must be positive, got {layers}")
    forward_ns = _flag(_duration, forward, "--forward")
    layer = dict(
        forward_ns=forward_ns,
        backward_ns=2 * forward_ns if backward is None else _flag(_duration, backward, "--backward"),
        gradient_bytes=_flag(parse_size, gradient, "--gradient"),
        activation_bytes=None if activation is None else _flag(parse_size, activation, "--activation"),
    )
    return ModelSpec(
        name=name,
        layers=tuple(Layer(name=f"layer{i}", **layer) for i in range(layers)),
        optimizer_ns=_flag(_duration, optimizer, "--optimizer"),
    )


def load_model_spec(path: str | Path) -> ModelSpec:
    """Read and validate a model spec YAML (or JSON) file; errors carry the file and line."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise InputError(f"cannot read model spec: {error.strerror}", path=path) from None
    except UnicodeDecodeError:
        raise InputError("not a text file (expected a YAML model spec)", path=path) from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise InputError(f"invalid YAML: {problem}", path=path, line=None if mark is None else mark.line + 1) from None
    import jsonschema  # imported on first use: it takes seconds to import (its format grammars)

    validator = jsonschema.Draft202012Validator(MODEL_SCHEMA)
    error = jsonschema.exceptions.best_match(validator.iter_errors(document))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path)
        message = error.message.replace("Additional properties are not allowed", "unknown key(s)")
        raise InputError(f"{'at ' + where + ': ' if where else ''}{message}", path=path, line=line_of(text, list(error.absolute_path)))
    return _from_document(document, path, text)


def _from_document(document: dict[str, Any], path: Path, text: str) -> ModelSpec:
    def parsed(keys: list[Any], parse, what: str):
        try:
            return parse(_at(document, keys))
        except InputError as error:
            raise InputError(f"{what}: {error.message}", path=path, line=line_of(text, keys)) from None

    layers: list[Layer] = []
    for index, entry in enumerate(document["layers"]):
        base = ["layers", index]
        name = entry.get("name", f"layer{index}")
        forward = parsed(base + ["forward"], _duration, f"layer {name!r} forward")
        backward = 2 * forward if "backward" not in entry else parsed(base + ["backward"], _duration, f"layer {name!r} backward")
        gradient = parsed(base + ["gradient"], parse_size, f"layer {name!r} gradient")
        activation = parsed(base + ["activation"], parse_size, f"layer {name!r} activation") if "activation" in entry else None
        ops = parsed(base + ["ops"], _operations, f"layer {name!r} ops") if "ops" in entry else None
        repeat = entry.get("repeat", 1)
        for copy in range(repeat):
            layers.append(
                Layer(
                    name=name if repeat == 1 else f"{name}{copy}",
                    forward_ns=forward,
                    backward_ns=backward,
                    gradient_bytes=gradient,
                    activation_bytes=activation,
                    forward_ops=ops,
                )
            )
    optimizer = parsed(["optimizer"], _duration, "optimizer") if "optimizer" in document else 0.0
    return ModelSpec(name=document.get("name", path.stem), layers=tuple(layers), optimizer_ns=optimizer, source=str(path))


def _at(document: Any, keys: list[Any]) -> Any:
    for key in keys:
        document = document[key]
    return document


__all__ = ["DURATION_SCHEMA", "Layer", "MODEL_DEFAULTS", "MODEL_SCHEMA", "ModelSpec", "SIZE_SCHEMA", "load_model_spec", "uniform_model"]
