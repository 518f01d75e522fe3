"""README's account of how ``best`` chooses: its example's summary is what the command prints now."""

from __future__ import annotations

import re
import shlex

from conftest import REPO


def _example() -> tuple[list[str], str]:
    """The command of README's ``best`` example and the ``chosen`` lines it shows."""
    text = (REPO / "README.md").read_text()
    part = text[text.index("**How `best` (the default) chooses.**") :]
    block = re.search(r"```\n(\$ chakra-coll synth .*?)```", part, flags=re.S).group(1)
    command, *shown = block.splitlines()
    chosen = shown[next(i for i, line in enumerate(shown) if line.startswith("chosen")) :]
    return shlex.split(command[2:]), "\n".join(chosen)


def _chosen(output: str) -> str:
    """The summary's ``chosen`` line with its continuation lines."""
    lines = output.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("chosen"))
    end = next((i for i in range(first + 1, len(lines)) if not lines[i].startswith(" ")), len(lines))
    return "\n".join(lines[first:end])


def test_readme_best_example_shows_what_the_command_prints(cli):
    command, shown = _example()
    assert command[:2] == ["chakra-coll", "synth"]
    result = cli(*command[1:])
    assert result.exit_code == 0, result.output
    assert " ".join(_chosen(result.stdout).split()) == " ".join(shown.split())
    assert "(estimate, skipped)" in shown and "(skipped)" in shown  # it shows what was skipped, and by what
