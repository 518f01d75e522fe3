"""README's "Replaying a PyTorch training step", run command by command on scripted traces of 4 ranks."""

from __future__ import annotations

import json
import shlex

from pytorch_traces import ddp_step
from test_tutorial import section, shell_lines


def test_pytorch_section_runs_end_to_end(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "traces").mkdir()
    for rank in range(4):
        host, kineto = ddp_step(rank, 4).documents()
        (tmp_path / "traces" / f"rank{rank}_et.json").write_text(json.dumps(host))
        (tmp_path / "traces" / f"rank{rank}_kineto.json").write_text(json.dumps(kineto))
    commands = shell_lines(section("Replaying a PyTorch training step"))
    assert [shlex.split(c)[1] for c in commands] == ["workload", "inspect", "synth", "replay", "replay"]
    outputs = []
    for line in commands:
        result = cli(*shlex.split(line)[1:])
        assert result.exit_code == 0, f"{line}\n{result.output}"
        outputs.append(result.stdout)
    assert all((tmp_path / "out" / f"step.{r}.et").is_file() for r in range(4))
    synthesized, builtin = outputs[3], outputs[4]
    assert "all-reduce" in synthesized and "tree (built-in)" in synthesized and "ring (built-in)" not in synthesized
    assert "ring (built-in)" in builtin
