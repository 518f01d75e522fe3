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
from typing import Any, Callable, TypeVar

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


def renamed_argument(old_names: dict[str, Any], old: str, new: str, value: Any, default: Any) -> Any:
    """:func:`renamed_keyword` for a function that takes ``**old_names`` itself: a wrapper's frame
    would keep every argument alive while the function runs (``replay`` lets go of its
    algorithms before timing). ``value`` is what ``new`` was given (``default``: nothing).

    >>> import warnings
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")
    ...     renamed_argument({"mode": "astra-sim"}, "mode", "network_model", None, None)
    'astra-sim'
    """
    unexpected = sorted(set(old_names) - {old})
    if unexpected:
        raise TypeError(f"unexpected keyword argument {unexpected[0]!r}")
    if old not in old_names:
        return value
    if value is not default:
        raise TypeError(f"give {new} or its old name {old}, not both")
    warnings.warn(f"{old} is deprecated; use {new}", DeprecationWarning, stacklevel=3)
    return old_names[old]


__all__ = ["renamed_argument", "renamed_keyword"]
