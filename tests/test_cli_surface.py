"""What a user sees of the command line: help that says everything and fits 80 columns, the
order commands are listed in, one vocabulary with its old spellings deprecated, output that
never breaks a path, and a start that imports nothing heavy for --help."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from chakra_collectives.cli.app import COMMANDS

cli_app = importlib.import_module("chakra_collectives.cli.app")
from chakra_collectives.converters.chakra_et import single_collective_workload, write_algorithm
from chakra_collectives.ir import Collective
from chakra_collectives.synth.baselines import ring

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "sample_traces"


def _all_helps(cli) -> dict[str, str]:
    helps = {}
    for name, _, _ in COMMANDS:
        helps[name] = cli(name, "--help").stdout
        if name in ("plot", "workload"):
            for sub in ("timeline", "links", "algorithm") if name == "plot" else ("microbenchmark", "data-parallel", "hybrid", "from-pytorch"):
                helps[f"{name} {sub}"] = cli(name, sub, "--help").stdout
    return helps


@pytest.fixture(scope="module")
def helps():
    from typer.testing import CliRunner

    runner = CliRunner(env={"COLUMNS": "80"})
    return _all_helps(lambda *args: runner.invoke(cli_app.app, list(args)))


def test_top_level_help_lists_commands_in_the_order_a_user_meets_them(cli):
    text = cli("--help").stdout
    listed = [line.split()[0] for line in text[text.index("Commands:"):].splitlines()[1:] if line.startswith("  ") and not line.startswith("    ")]
    assert listed == [name for name, _, _ in COMMANDS]
    assert listed[:4] == ["demo", "synth", "verify", "replay"]


def test_every_help_fits_80_columns_shows_an_example_and_keeps_brackets(helps):
    for name, text in helps.items():
        assert text.startswith("Usage: chakra-coll"), name
        lines = text.splitlines()
        assert max(len(line) for line in lines) <= 80, (name, max(lines, key=len))
        assert "…" not in text and "[bold]" not in text and "<bool>" not in text, name
        if name not in ("plot", "workload"):
            assert "Example" in text, name
    replay = helps["replay"]
    assert '{"pg_name": [ranks, ...], ...}' in replay and "sys[i] finished" in replay and "--default-algorithm TYPE=NAME,..." in replay


def test_options_do_not_break_inside_a_word(helps):
    # click broke help text at hyphens ("all-" / "reduce=out/ar"); ours wraps on spaces only
    import re

    for name, text in helps.items():
        for line in text.splitlines():
            assert not re.search(r"[A-Za-z0-9]-$", line.rstrip()), (name, line)


def test_short_help_in_the_table_is_each_commands_first_line():
    for name, modules, short in COMMANDS:
        for module in (modules,) if isinstance(modules, str) else modules:
            importlib.import_module(f"chakra_collectives.cli.{module}")
        command = typer.main.get_command(cli_app._REGISTERED[name])
        first = (command.help or "").strip().splitlines()[0]
        assert first == short, name


def test_every_registered_command_is_listed():
    import pkgutil

    import chakra_collectives.cli as package

    for module in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"chakra_collectives.cli.{module.name}")
    assert set(cli_app._REGISTERED) == {name for name, _, _ in COMMANDS}


@pytest.mark.parametrize("args", [["--help"], ["synth", "--help"]])
def test_help_imports_no_library(args):
    """The top-level help, and synth's (its producers listed by the registry, which imports none)."""
    code = (
        f"import sys; from chakra_collectives.cli import main; sys.argv = ['chakra-coll', *{args!r}]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'numpy', 'networkx', 'scipy', 'matplotlib', 'lxml', 'google'})\n"
        "print('HEAVY', heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "HEAVY []" in out


def test_synth_with_one_producer_imports_only_what_it_runs():
    """``synth -a tacos`` (the small case a user times first) imports TACOS alone of the producers,
    no scipy, networkx or numpy.ma (np.median's), and writes nothing it would need protobuf for;
    with ``--json`` it prints nothing through rich, and does not import it; the garbage collector,
    paused while the modules loaded, runs again (what start-up made frozen out of its sight);
    ``best`` still finds every producer."""
    code = (
        "import sys; from chakra_collectives.cli import main\n"
        "sys.argv = ['chakra-coll', 'synth', '-t', 'mesh2d:4x4', '-c', 'all-gather', '-a', 'tacos', '--json']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "loaded = {m for m in sys.modules}\n"
        "others = ['forestcoll', 'bfb', 'milp', 'gridpipe', 'baselines', 'rails', 'chains', 'flowcast']\n"
        "print('LOADED', sorted(m for m in ['scipy', 'networkx', 'numpy.ma', 'google.protobuf', 'chakra', 'matplotlib', 'yaml', 'rich', 'numba'] if m in loaded),"
        " sorted(p for p in others if 'chakra_collectives.synth.' + p in loaded))\n"
        "import gc; print('COLLECTING', gc.isenabled(), gc.get_freeze_count() > 10000)\n"
        "from chakra_collectives.synth.registry import synthesizers\n"
        "print('ALL', [s.name for s in synthesizers()])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert '"algorithm": "tacos"' in out and "LOADED [] []" in out and "COLLECTING True True" in out
    assert "ALL ['tacos', 'ring', 'biring', 'direct', 'rhd', 'tree', 'bfb', 'forestcoll', 'rails', 'milp', 'gridpipe', 'chains', 'flowcast']" in out


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads in /proc")
def test_a_command_runs_on_one_thread():
    """numpy's OpenBLAS starts no thread pool under ``chakra-coll`` (its idle threads spin for
    tens of ms of CPU at every start; no command does dense linear algebra), unless the user
    chose a number of BLAS threads."""
    code = (
        "import os, sys; from chakra_collectives.cli import main\n"
        "sys.argv = ['chakra-coll', 'synth', '-t', 'mesh2d:4x4', '-c', 'all-gather', '-a', 'tacos', '--json']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('THREADS', len(os.listdir('/proc/self/task')), os.environ['OPENBLAS_NUM_THREADS'])"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    assert "THREADS 1 1" in out
    chosen = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env={**env, "OPENBLAS_NUM_THREADS": "3"}).stdout
    assert chosen.split("THREADS")[1].split()[1] == "3"


# ---------------------------------------------------------------------------- one vocabulary
@pytest.fixture
def replay_inputs(tmp_path):
    single_collective_workload(tmp_path / "w", "all-reduce", 4, 2**20)
    write_algorithm(ring(Collective.ALL_REDUCE, 4, size_bytes=2**20), tmp_path / "ar")
    return tmp_path


@pytest.mark.parametrize(
    "new, old, warning",
    [
        (["-a", "all-reduce={ar}"], ["-c", "all-reduce={ar}"], "-c/--collective TYPE=PREFIX is deprecated for replay"),
        (["--network-model", "astra-sim"], ["--mode", "astra-sim"], "--mode is deprecated"),
        (["--network-model", "default"], ["--network-model", "tacos"], "network model 'tacos' is deprecated"),
        (["--reduce-bandwidth-gbps", "100"], ["--reduce-bandwidth", "100"], "--reduce-bandwidth is deprecated"),
    ],
)
def test_old_replay_spellings_still_work_and_warn(cli, replay_inputs, new, old, warning):
    args = ["replay", replay_inputs / "w", "-t", "ring:4", "--json", "--no-timeline"]
    fill = lambda words: [w.format(ar=replay_inputs / "ar") for w in words]  # noqa: E731
    current = cli(*args, *fill(new))
    previous = cli(*args, *fill(old))
    assert current.exit_code == previous.exit_code == 0, previous.output
    assert current.stdout == previous.stdout and warning not in current.stderr
    assert f"chakra-coll: warning: {warning}" in previous.stderr and "next release" in previous.stderr


def test_old_and_new_spelling_together_are_refused(cli, replay_inputs):
    result = cli("replay", replay_inputs / "w", "-t", "ring:4", "--mode", "default", "--network-model", "default")
    assert result.exit_code == 2 and "give --network-model or its old spelling --mode, not both" in result.stderr


def test_import_msccl_old_reduce_option(cli, tmp_path):
    from chakra_collectives.converters.msccl import write_msccl

    write_msccl(ring(Collective.ALL_REDUCE, 4, size_bytes=2**20), tmp_path / "r.xml")
    old = cli("import-msccl", tmp_path / "r.xml", "-o", tmp_path / "a", "--reduce-gbps", "10")
    new = cli("import-msccl", tmp_path / "r.xml", "-o", tmp_path / "b", "--reduce-bandwidth-gbps", "10")
    assert old.exit_code == new.exit_code == 0 and "--reduce-gbps is deprecated" in old.stderr
    assert (tmp_path / "a.0.et").read_bytes() == (tmp_path / "b.0.et").read_bytes()


def test_sizes_take_suffixes_everywhere(cli, tmp_path):
    write_algorithm(ring(Collective.ALL_REDUCE, 4, size_bytes=2**20), tmp_path / "ar")
    result = cli("export-msccl", tmp_path / "ar", "-o", tmp_path / "ar.xml", "--min-bytes", "1MiB", "--max-bytes", "1GiB")
    assert result.exit_code == 0, result.output
    assert 'minBytes="1048576"' in (tmp_path / "ar.xml").read_text() and 'maxBytes="1073741824"' in (tmp_path / "ar.xml").read_text()
    bad = cli("export-msccl", tmp_path / "ar", "-o", tmp_path / "x.xml", "--min-bytes", "2GiB", "--max-bytes", "1GiB")
    assert bad.exit_code == 2 and "is more than --max-bytes" in bad.stderr


def test_library_takes_the_same_strings_and_names():
    from chakra_collectives.bounds import lower_bounds
    from chakra_collectives.topology import load_topology

    topology = load_topology("ring:8")
    assert lower_bounds(topology, "all-reduce", "12MiB") == lower_bounds(topology, Collective.ALL_REDUCE, 12 * 2**20)
    assert ring(Collective.ALL_GATHER, 4, size_bytes=64, chunks_per_npu=2).chunk_count == 8
    with pytest.warns(DeprecationWarning, match="chunks_per_rank is deprecated; use chunks_per_npu"):
        old = ring(Collective.ALL_GATHER, 4, size_bytes=64, chunks_per_rank=2)
    assert old.equals(ring(Collective.ALL_GATHER, 4, size_bytes=64, chunks_per_npu=2))


# ---------------------------------------------------------------------------- output at 80 columns
def test_paths_are_never_broken_and_lines_fit(cli, tmp_path):
    deep = tmp_path / ("a_rather_long_directory_name_" * 3) / "and_a_long_prefix_for_the_algorithm_files"
    result = cli("synth", "-t", "ring:4", "-c", "all-gather", "-s", "1MiB", "-o", deep)
    assert result.exit_code == 0, result.output
    assert f"{deep}.{{rank}}.et" in result.stdout  # on one line, whole
    for command in (["inspect", deep], ["verify", deep]):
        out = cli(*command).stdout
        assert str(deep) in out.splitlines()[0], command
        assert all(len(line) <= 80 for line in out.splitlines() if str(deep) not in line), command


def test_tables_fit_80_columns(cli):
    outputs = [
        cli("inspect", SAMPLES / "collectives/all_reduce_tacos").stdout,
        cli("replay", SAMPLES / "workload/hybrid_step", "-t", SAMPLES / "topology/two_servers.yaml", "--comm-groups", SAMPLES / "workload/hybrid_step.json").stdout,
        cli("synth", "-t", "torus2d:4x4", "-c", "all-reduce", "-s", "64MiB").stdout,
    ]
    for out in outputs:
        assert max(len(line) for line in out.splitlines() if "sample_traces" not in line) <= 80
        assert " us" not in out  # microseconds are µs
