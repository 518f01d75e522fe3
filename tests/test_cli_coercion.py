"""Plain option values are coerced without pydantic, to what typer's own coercion gives."""

from __future__ import annotations

import subprocess
import sys

import pytest
import typer
from typer.testing import CliRunner

from chakra_collectives.cli.app import app
from chakra_collectives.cli.coercion import install


def _synth():
    import chakra_collectives.cli.synth_cmd  # noqa: F401  (registers synth)
    from chakra_collectives.cli.app import _REGISTERED

    return typer.main.get_command(_REGISTERED["synth"])


@pytest.mark.parametrize(
    "name, value",
    [("size", "64MiB"), ("chunks_per_npu", "4"), ("chunks_per_npu", "-3"), ("seed", 0), ("time_budget", "2.5"), ("time_budget", "10"),
     ("time_budget", 3), ("time_limit", None), ("pattern_file", None), ("algorithm", "tacos")],
)
def test_lean_coercion_gives_typers_value(name, value):
    from typer._coercion import build_runtime_param

    command = _synth()
    param = next(p for p in command.params if p.name == name)
    install([param])
    ctx = typer.Context(command)
    lean = param._runtime_param.coerce(value, param=param, ctx=ctx)
    full = build_runtime_param(param.type_descriptor).coerce(value, param=param, ctx=ctx)
    assert lean == full and type(lean) is type(full)


@pytest.mark.parametrize("args", [["-k", "four"], ["-k", "1.5"], ["--time-budget", "soon"]])
def test_malformed_numbers_get_typers_error(args):
    result = CliRunner().invoke(app, ["synth", "-t", "ring:4", *args])
    assert result.exit_code == 2
    assert "Invalid value" in result.output


def test_synth_runs_without_pydantic():
    code = (
        "import sys; sys.argv = ['chakra-coll', 'synth', '-t', 'ring:4', '-c', 'all-gather', '-a', 'ring', '-k', '2', '--json'];"
        "from chakra_collectives.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "sys.stderr.write(str('pydantic' in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert '"chunks_per_npu": 2' in done.stdout
    assert done.stderr.strip().endswith("False")
