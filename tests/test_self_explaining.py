"""The product explains itself: no pointer to files a user does not have, runnable 'next'
commands, and the README's examples produce what it says."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest

from conftest import REPO


def _texts():
    yield REPO / "README.md", (REPO / "README.md").read_text()
    for path in sorted((REPO / "docs").glob("*.md")) + [REPO / "sample_traces/README.md"]:
        yield path, path.read_text()


def test_no_pointer_outside_the_repository():
    for path, text in _texts():
        assert "../shared" not in text and "../interop" not in text, path
        for name in re.findall(r"\b([\w-]+\.md)\b", text):
            assert (REPO / name).exists() or (REPO / "docs" / name).exists() or (REPO / "sample_traces" / name).exists(), (path, name)
    for source in list((REPO / "chakra_collectives").rglob("*.py")) + list((REPO / "converters").rglob("*.py")):
        text = source.read_text()
        for name in re.findall(r"(?<![\w/])((?:design|et-conventions|msccl-ir)\.md)", text):
            pytest.fail(f"{source} cites {name} without docs/: users do not have it")


def test_demo_next_commands_run_as_printed(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = cli("demo", "-o", "d")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    commands = [line.strip() for line in lines[lines.index(next(l for l in lines if l.endswith("Next, try:"))) + 1 :] if line.startswith("  ")]
    assert len(commands) == 5
    for command in commands:
        words = shlex.split(command)
        assert words[0] == "chakra-coll"  # the way this run was started (in-process: the name on the PATH)
        ran = cli(*words[1:])
        assert ran.exit_code == 0, f"{command}\n{ran.output}"


def test_invocation_names_the_venv_when_chakra_coll_is_not_on_the_path(monkeypatch, tmp_path):
    from chakra_collectives.cli.app import invocation

    script = tmp_path / ".venv" / "bin" / "chakra-coll"
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/sh\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", [str(script)])
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert invocation() == ".venv/bin/chakra-coll"
    monkeypatch.setattr(shutil, "which", lambda name: str(script))
    assert invocation() == "chakra-coll"


def test_readme_astra_sim_network_example_gives_the_time_it_states(cli, monkeypatch):
    text = (REPO / "README.md").read_text()
    part = text[text.index("### The network model") :]
    block = re.search(r"```sh\n(.*?)```", part, flags=re.S).group(1)
    monkeypatch.chdir(REPO)
    result = cli(*shlex.split(block.replace("\\\n", " "))[1:])
    assert result.exit_code == 0, result.output
    stated = re.search(r"finishes at ([\d,]+) ns", part).group(1)
    assert f"({stated} ns)" in result.stdout
    assert f"predicts: sys[*] finished, {stated.replace(',', '')} cycles" in (REPO / "sample_traces/astra-sim/run.sh").read_text()
