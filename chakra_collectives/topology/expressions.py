"""Topology expressions: expansions of builder specs or files, written as a spec.

Grammar (whitespace around ``x`` separates product operands; ``4x4`` stays a shape)::

    expr   := term (" x " term)*                   Cartesian product, left to right
    term   := "line(" expr ")"                     line graph
            | "cartesian(" expr "," expr ")"       Cartesian product
            | "degree(" expr "," COPIES ")"        degree expansion
            | "(" expr ")"
            | SPEC                                 a builder spec or a topology file

A comma inside ``cartesian(...)`` splits where the right operand starts (a name followed by
``:`` or ``(``), so ``cartesian(circulant:8,strides=1,3,ring:4)`` works; ``degree``'s copies
are its last comma-separated item. Parenthesize an operand to be explicit.

>>> evaluate("line(fully-connected:3)").describe()
'line(fully-connected:3): 6 NPUs, 12 links'
>>> evaluate("ring:4 x ring:2").describe()
'ring:4 x ring:2: 8 NPUs, 24 links'
>>> evaluate("cartesian(circulant:8,strides=1,3,ring:3)").num_npus
24
>>> evaluate("line(ring:4")
Traceback (most recent call last):
...
chakra_collectives.errors.InputError: malformed topology expression 'line(ring:4': missing ')'
"""

from __future__ import annotations

import re
from typing import Callable

from chakra_collectives.errors import InputError
from chakra_collectives.topology import expansions
from chakra_collectives.topology.core import Topology

_PRODUCT = re.compile(r"\s+[xX×]\s+")
_OPERATORS = ("line", "cartesian", "degree")


def is_expression(spec: str) -> bool:
    """Does ``spec`` use an expansion (parentheses or `` x ``)?

    >>> is_expression("torus2d:4x4"), is_expression("ring:4 x ring:4"), is_expression("line(ring:3)")
    (False, True, True)
    """
    text = spec.strip()
    return "(" in text or ")" in text or bool(_PRODUCT.search(text))


def evaluate(spec: str, *, load: Callable[[str], Topology] | None = None, force: bool = False, npu_limit: int | None = None) -> Topology:
    """Build the topology an expression describes; ``load`` reads the plain specs (default :func:`load_topology`)."""
    if load is None:
        from chakra_collectives.topology.loaders import load_topology

        load = load_topology
    return _Evaluator(spec, load, force, npu_limit).expression(spec.strip())


class _Evaluator:
    def __init__(self, spec: str, load: Callable[[str], Topology], force: bool, npu_limit: int | None) -> None:
        self.spec = spec
        self.load = load
        self.limits = {"force": force, "npu_limit": npu_limit}

    def fail(self, what: str) -> InputError:
        return InputError(f"malformed topology expression {self.spec!r}: {what}")

    def expression(self, text: str) -> Topology:
        operands = _split_top_level(text, _PRODUCT, self)
        result = self.term(operands[0])
        for operand in operands[1:]:
            result = expansions.cartesian(result, self.term(operand), **self.limits)
        return result

    def term(self, text: str) -> Topology:
        text = text.strip()
        if not text:
            raise self.fail("an operand is empty")
        lowered = text.lower()
        for op in _OPERATORS:
            if lowered.startswith(f"{op}("):
                inner = self.inside(text, len(op))
                return getattr(self, f"apply_{op}")(inner)
        if text.startswith("("):
            return self.expression(self.inside(text, 0))
        if "(" in text or ")" in text:
            raise self.fail(f"unknown operation in {text!r} (valid: {', '.join(_OPERATORS)})")
        return self.load(text)

    def inside(self, text: str, start: int) -> str:
        """What the parenthesis at ``text[start]`` encloses; it must close at the end of ``text``."""
        depth = 0
        for index in range(start, len(text)):
            depth += {"(": 1, ")": -1}.get(text[index], 0)
            if depth == 0:
                if text[index + 1:].strip():
                    raise self.fail(f"unexpected {text[index + 1:].strip()!r} after ')'")
                return text[start + 1:index]
        raise self.fail("missing ')'")

    def apply_line(self, inner: str) -> Topology:
        return expansions.line_graph(self.expression(inner), **self.limits)

    def apply_cartesian(self, inner: str) -> Topology:
        parts = _split_top_level(inner, re.compile(","), self)
        for cut in range(1, len(parts)):
            right = parts[cut].strip()
            if re.match(r"^\(|^[A-Za-z][\w-]*\s*[:(]|^[\w./-]+\.\w+$", right):
                return expansions.cartesian(self.expression(",".join(parts[:cut])), self.expression(",".join(parts[cut:])), **self.limits)
        raise self.fail("cartesian(G,H) needs two topologies")

    def apply_degree(self, inner: str) -> Topology:
        parts = _split_top_level(inner, re.compile(","), self)
        if len(parts) < 2 or not parts[-1].strip().isdigit():
            raise self.fail("degree(G,COPIES) needs a topology and a whole number of copies")
        return expansions.degree_expand(self.expression(",".join(parts[:-1])), int(parts[-1]), **self.limits)


def _split_top_level(text: str, separator: re.Pattern[str], evaluator: _Evaluator) -> list[str]:
    """``text`` split at ``separator`` where no parenthesis is open."""
    parts, depth, start, index = [], 0, 0, 0
    while index < len(text):
        char = text[index]
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise evaluator.fail("unbalanced ')'")
        elif depth == 0:
            match = separator.match(text, index)
            if match and match.end() > index:
                parts.append(text[start:index])
                start = index = match.end()
                continue
        index += 1
    if depth:
        raise evaluator.fail("missing ')'")
    parts.append(text[start:])
    return parts


__all__ = ["evaluate", "is_expression"]
