"""README's tutorial, run command by command; its ASTRA-sim command line, checked against the tool."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys

from conftest import REPO

from test_astra_sim import FAKE_ASTRA_SIM
from test_plot import assert_picture


def section(title_start: str) -> str:
    text = (REPO / "README.md").read_text()
    start = text.index(f"\n## {title_start}")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def shell_lines(markdown: str) -> list[str]:
    """The commands of every ```sh block, continuation lines joined, comments dropped."""
    lines = []
    for block in re.findall(r"```sh\n(.*?)```", markdown, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #", 1)[0].strip()
            if line and not line.startswith("#"):
                lines.append(line)
    return lines


def test_tutorial_runs_end_to_end(cli, tmp_path, monkeypatch):
    shutil.copytree(REPO / "sample_traces", tmp_path / "sample_traces")
    monkeypatch.chdir(tmp_path)
    fake = tmp_path / "fake_astra_sim"
    fake.write_text(f"#!{sys.executable}\n{FAKE_ASTRA_SIM}")
    fake.chmod(0o755)
    commands = shell_lines(section("Tutorial"))
    assert len(commands) >= 10
    ran_astra_sim = False
    for line in commands:
        words = shlex.split(line)
        env = {}
        while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):
            key, _, value = words.pop(0).partition("=")
            env[key] = value
        if words[0] == "chakra-coll":
            target = None
            if ">" in words:
                words, target = words[: words.index(">")], words[words.index(">") + 1]
            result = cli(*words[1:])
            assert result.exit_code == 0, f"{line}\n{result.output}"
            if target:
                (tmp_path / target).write_text(result.stdout)
        else:  # running ASTRA-sim: a stand-in binary that checks every file it is given exists
            assert words[:2] == ["sh", "out/astra-sim/run.sh"], line
            done = subprocess.run(words, env={**os.environ, **env, "ASTRA_SIM_BIN": str(fake)}, capture_output=True, text=True)
            assert done.returncode == 0, done.stderr
            assert "finished" in done.stdout
            ran_astra_sim = True
    assert ran_astra_sim
    for picture in ("timeline.png", "links.svg", "algorithm.png"):
        assert_picture(tmp_path / "out" / picture)
    for promised in ("step.trace.json", "astra-sim/system.json", "astra-sim/network.yml", "ar_tacos.0.et", "step.7.et"):
        assert (tmp_path / "out" / promised).is_file(), promised


def test_readme_astra_sim_command_is_what_the_tool_prints(cli, tmp_path, monkeypatch):
    shutil.copytree(REPO / "sample_traces", tmp_path / "sample_traces")
    monkeypatch.chdir(tmp_path)
    commands = shell_lines(section("Use with ASTRA-sim"))
    synth, run = commands[:2]
    result = cli(*shlex.split(synth)[1:])
    assert result.exit_code == 0, result.output
    lines = [line.strip() for line in result.stdout.splitlines()]
    printed = lines[lines.index("run it (one line):") + 1]
    assert run == printed
    for argument in run.split()[5:]:  # every file the command names exists in the directory
        path = argument.split("=", 1)[1]
        assert (tmp_path / "out/astra-sim" / path).is_file() or (tmp_path / "out/astra-sim" / f"{path}.0.et").is_file(), path


def test_readme_commands_elsewhere_are_valid(cli, tmp_path, monkeypatch):
    """The workload and pictures sections' commands run too (with the replay JSON they draw)."""
    shutil.copytree(REPO / "sample_traces", tmp_path / "sample_traces")
    monkeypatch.chdir(tmp_path)
    result = cli("replay", "sample_traces/workload/train_step", "-t", "sample_traces/topology/two_servers.yaml", "--json")
    (tmp_path / "replay.json").write_text(result.stdout)
    for title in ("Writing workloads", "Pictures"):
        for line in shell_lines(section(title)):
            result = cli(*shlex.split(line)[1:])
            assert result.exit_code == 0, f"{line}\n{result.output}"
