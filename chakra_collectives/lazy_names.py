"""Names a package re-exports but imports on first use (PEP 562), so that importing the
package does not import every module behind its names.

>>> homes = {"sqrt": "math", "dedent": "textwrap"}
>>> names = LazyNames("demo", homes, {})
>>> names("dedent")("  x")
'x'
>>> names("cbrt")
Traceback (most recent call last):
...
AttributeError: module 'demo' has no attribute 'cbrt'
>>> names.listed({"other"})
['dedent', 'other', 'sqrt']
"""

from __future__ import annotations

from importlib import import_module
from typing import Any, Iterable, Mapping, MutableMapping


class LazyNames:
    """A package's ``__getattr__``: each name of ``homes`` (name -> module) is imported from its
    module when first read, then kept in ``namespace`` (the package's ``globals()``)."""

    def __init__(self, package: str, homes: Mapping[str, str], namespace: MutableMapping[str, Any]) -> None:
        self.package, self.homes, self.namespace = package, homes, namespace

    def __call__(self, name: str) -> Any:
        home = self.homes.get(name)
        if home is None:
            raise AttributeError(f"module {self.package!r} has no attribute {name!r}")
        value = getattr(import_module(home), name)
        self.namespace[name] = value
        return value

    def listed(self, present: Iterable[str]) -> list[str]:
        """The package's ``__dir__``: the names ``present`` and the lazy ones."""
        return sorted(set(present) | set(self.homes))


__all__ = ["LazyNames"]
