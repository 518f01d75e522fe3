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


@pytest.mark.parametrize("command, name", [("verify", "prefix"), ("replay", "workload"), ("synth", "groups_file")])
@pytest.mark.parametrize("where", ["missing/x", "here", "here/a.0.et", "unreadable"])
def test_lean_path_gives_typers_value_and_error(tmp_path, monkeypatch, command, name, where):
    """A path argument becomes the ``Path`` typer's coercion gives, through typer's own checks
    (an unreadable file is refused with typer's message)."""
    import os
    from typer._coercion import build_runtime_param

    import chakra_collectives.cli.replay_cmd  # noqa: F401  (registers the commands)
    import chakra_collectives.cli.verify_cmd  # noqa: F401
    from chakra_collectives.cli.app import _REGISTERED

    (tmp_path / "here").mkdir()
    (tmp_path / "here" / "a.0.et").write_bytes(b"")
    (tmp_path / "unreadable").write_bytes(b"")
    (tmp_path / "unreadable").chmod(0)
    if where == "unreadable" and os.access(tmp_path / "unreadable", os.R_OK):
        pytest.skip("running as a user who reads any file")
    monkeypatch.chdir(tmp_path)
    group = typer.main.get_command(_REGISTERED[command])
    param = next(p for p in group.params if p.name == name)
    install([param])
    assert param._runtime_param.annotation is not None  # the lean path, not typer's adapter
    ctx = typer.Context(group)
    outcomes = []
    for coercion in (param._runtime_param, build_runtime_param(param.type_descriptor)):
        try:
            outcomes.append(coercion.coerce(where, param=param, ctx=ctx))
        except typer.BadParameter as error:
            outcomes.append(("refused", error.format_message()))
    lean, full = outcomes
    assert lean == full and type(lean) is type(full)
    assert (where == "unreadable") == isinstance(lean, tuple)


@pytest.mark.parametrize("args", [["-k", "four"], ["-k", "1.5"], ["--time-budget", "soon"]])
def test_malformed_numbers_get_typers_error(args):
    result = CliRunner().invoke(app, ["synth", "-t", "ring:4", *args])
    assert result.exit_code == 2
    assert "Invalid value" in result.output


def test_verify_runs_without_pydantic(tmp_path):
    from chakra_collectives.converters.chakra_et import write_algorithm
    from chakra_collectives.ir import Collective
    from chakra_collectives.synth.baselines import ring

    write_algorithm(ring(Collective.ALL_GATHER, 4, size_bytes=2**20), tmp_path / "ag")
    code = (
        f"import sys; sys.argv = ['chakra-coll', 'verify', {str(tmp_path / 'ag')!r}, '--json'];"
        "from chakra_collectives.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "sys.stderr.write(str('pydantic' in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert '"ok": true' in done.stdout
    assert done.stderr.strip().endswith("False")


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
