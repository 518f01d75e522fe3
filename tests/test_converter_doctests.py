"""The doctests of ``converters/``, run under the package's own module names.

``converters/`` is a top-level folder mapped to ``chakra_collectives.converters``; pytest's
``--doctest-modules`` would import its files a second time as ``converters.*`` (a different
module, with different exception classes), so they are run here instead, one test per module.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import chakra_collectives.converters as converters


def _modules() -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages(converters.__path__, prefix=f"{converters.__name__}."))


def test_every_converter_module_is_found():
    assert {"chakra_collectives.converters.chakra_et.writer", "chakra_collectives.converters.msccl.lift"} <= set(_modules())


@pytest.mark.parametrize("name", _modules())
def test_doctests(name: str):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, verbose=False, report=True)
    assert result.failed == 0, f"{result.failed} of {result.attempted} doctest examples failed in {name} (see output above)"
