"""Argument values of PyTorch execution-trace operators: tensors, their bytes, scalar types.

The execution trace observer writes every operator argument as a value plus a type string.
A tensor is ``[tensor_id, storage_id, offset, numel, itemsize, device]`` with type
``Tensor(float)``; lists nest as ``GenericList[Tensor(float),Tensor(float)]``. Collective
metadata names element types as c10 ``ScalarType`` names (``Float``, ``BFloat16``...).

>>> tensor_bytes([[5, 6, 0, 1024, 4, "cuda:0"]], ["Tensor(float)"])
4096
>>> tensor_bytes([[[1, 2, 0, 8, 2, "cuda:0"], [3, 4, 0, 8, 2, "cuda:0"]]], ["GenericList[Tensor(half),Tensor(half)]"])
32
>>> tensor_bytes([[[[1, 2, 0, 1, 4, "cuda:0"], [3, 4, 0, 1, 4, "cuda:0"]]]], ["GenericList[GenericList[Tensor(float),Tensor(float)]]"])
8
>>> scalar_type_bytes("BFloat16"), scalar_type_bytes("Float")
(2, 4)
"""

from __future__ import annotations

from typing import Any

from chakra_collectives.errors import InputError

SCALAR_TYPE_BYTES = {
    "byte": 1, "char": 1, "bool": 1, "qint8": 1, "quint8": 1, "quint4x2": 1, "quint2x4": 1,
    "float8_e5m2": 1, "float8_e4m3fn": 1, "float8_e5m2fnuz": 1, "float8_e4m3fnuz": 1, "uint8": 1, "int8": 1,
    "short": 2, "half": 2, "bfloat16": 2, "uint16": 2, "int16": 2, "float16": 2,
    "int": 4, "float": 4, "qint32": 4, "complexhalf": 4, "uint32": 4, "int32": 4, "float32": 4,
    "long": 8, "double": 8, "complexfloat": 8, "uint64": 8, "int64": 8, "float64": 8,
    "complexdouble": 16,
}
"""Bytes per element of the c10 ``ScalarType`` names collective metadata uses (lower case)."""


def scalar_type_bytes(name: str) -> int | None:
    """Element size of a ``ScalarType`` name (``Float``, ``c10::BFloat16``...), ``None`` if unknown."""
    key = str(name).strip().lower().removeprefix("c10::").removeprefix("torch.").replace(" ", "")
    return SCALAR_TYPE_BYTES.get(key)


def is_tensor(value: Any) -> bool:
    """``[id, storage, offset, numel, itemsize, device]``: five integers, then the device."""
    return (
        isinstance(value, list)
        and len(value) >= 5
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value[:5])
    )


MAX_NESTING = 32
"""Deepest list of arguments read (``GenericList[GenericList[...]]``); real traces nest two or three."""


def split_types(type_text: str) -> list[str]:
    """Element types of ``GenericList[A,B[C,D]]`` -> ``['A', 'B[C,D]']`` (top-level commas only).

    >>> split_types("GenericList[Tensor(float),GenericList[Int,Int]]")
    ['Tensor(float)', 'GenericList[Int,Int]']
    >>> split_types("GenericList[Tensor(float)")
    Traceback (most recent call last):
    ...
    chakra_collectives.errors.InputError: type 'GenericList[Tensor(float)' is not balanced
    """
    opening, closing = type_text.find("["), type_text.rfind("]")
    if opening < 0 or closing < opening:
        raise InputError(f"type {type_text[:60]!r} is not balanced")
    inner = type_text[opening + 1 : closing]
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(inner):
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
            if depth < 0:
                raise InputError(f"type {type_text[:60]!r} is not balanced")
        elif ch == "," and depth == 0:
            parts.append(inner[start:i])
            start = i + 1
    if depth:
        raise InputError(f"type {type_text[:60]!r} is not balanced")
    if inner[start:]:
        parts.append(inner[start:])
    return parts


def tensors_of(value: Any, type_text: str, depth: int = 0) -> list[list]:
    """Every tensor in one argument, guided by its type string."""
    if not isinstance(type_text, str):
        return []
    if type_text.startswith("Tensor"):
        return [value] if is_tensor(value) else []
    if type_text.startswith("GenericList[") and isinstance(value, list):
        if depth >= MAX_NESTING:
            raise InputError(f"an argument nests lists more than {MAX_NESTING} deep")
        types = split_types(type_text)
        if len(types) == 1 and len(value) > 1:  # some writers give one element type for a whole list
            types = types * len(value)
        found: list[list] = []
        for element, element_type in zip(value, types):
            found.extend(tensors_of(element, element_type, depth + 1))
        return found
    return []


def tensor_bytes(values: list, types: list) -> int:
    """Total bytes (numel x itemsize) of every tensor among ``values`` (one per ``types`` entry);
    a tensor with a negative element count or size is an :class:`InputError` (without a place:
    the caller names the node).

    >>> tensor_bytes([[5, 6, 0, -1024, 4, "cuda:0"]], ["Tensor(float)"])
    Traceback (most recent call last):
    ...
    chakra_collectives.errors.InputError: a tensor has -1024 elements of 4 bytes
    """
    total = 0
    for value, type_text in zip(values or [], types or []):
        for tensor in tensors_of(value, type_text):
            numel, itemsize = tensor[3], tensor[4]
            if numel < 0 or itemsize < 0:
                raise InputError(f"a tensor has {numel} elements of {itemsize} bytes")
            total += numel * itemsize
    return total
