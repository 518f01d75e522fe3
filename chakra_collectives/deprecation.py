"""Old keyword names that still work for one release, with a ``DeprecationWarning``.

>>> import warnings
>>> @renamed_keyword("mode", "network_model")
... def run(*, network_model="default"):
...     return network_model
>>> with warnings.catch_warnings(record=True) as caught:
...     warnings.simplefilter("always")
...     run(mode="astra-sim"), str(caught[0].message)
('astra-sim', 'mode is deprecated; use network_model')
>>> run(network_model="default")
'default'
"""

from __future__ import annotations

import functools
import warnings
from typing import Callable, TypeVar

F = TypeVar("F", bound=Callable)


def renamed_keyword(old: str, new: str) -> Callable[[F], F]:
    """Let a function also be called with ``old=``, the previous name of its keyword ``new``
    (one name everywhere: the CLI, the library, JSON); it warns and goes in the next release."""

    def decorate(function: F) -> F:
        @functools.wraps(function)
        def call(*args, **kwargs):
            if old in kwargs:
                if new in kwargs:
                    raise TypeError(f"give {new} or its old name {old}, not both")
                warnings.warn(f"{old} is deprecated; use {new}", DeprecationWarning, stacklevel=2)
                kwargs[new] = kwargs.pop(old)
            return function(*args, **kwargs)

        return call  # type: ignore[return-value]

    return decorate


__all__ = ["renamed_keyword"]
