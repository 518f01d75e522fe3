"""The package's import graph keeps its layering: producers -> IR -> consumers, formats in converters.

Every module of ``chakra_collectives`` is parsed (not imported) and each ``import`` /
``from ... import`` naming the package becomes an edge; imports under ``if TYPE_CHECKING:``
are annotations only and are skipped. Packages are the top-level subpackages and modules
(``synth``, ``ir``, ``bounds``...), and each format under ``converters`` on its own.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

import chakra_collectives

REPO = Path(__file__).resolve().parents[1]
SOURCE_ROOTS = {"chakra_collectives": REPO / "chakra_collectives", "chakra_collectives.converters": REPO / "converters"}
"""Package name -> folder: ``converters/`` is mapped into the package by pyproject's package-dir."""


def _module_name(path: Path) -> str:
    package, root = max(((p, r) for p, r in SOURCE_ROOTS.items() if path.is_relative_to(r)), key=lambda pr: len(pr[1].parts))
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(p for p in (package, *parts) if p != "__init__")


def _source_files() -> list[Path]:
    return sorted({p for root in SOURCE_ROOTS.values() for p in root.rglob("*.py")})


def _package(module: str) -> str:
    """``chakra_collectives.synth.tacos`` -> ``synth``; ``...converters.msccl.lift`` -> ``converters.msccl``."""
    parts = module.split(".")[1:]
    if not parts:
        return "(root)"
    if parts[0] == "converters" and len(parts) > 1:
        return ".".join(parts[:2])
    return parts[0]


def _runtime_nodes(tree: ast.AST):
    """Every node except those inside ``if TYPE_CHECKING:`` blocks."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            stack.extend(node.orelse)
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def _imports() -> list[tuple[str, str, list[str]]]:
    """``(importer, imported module, names)`` for every import of the package by the package."""
    found = []
    for path in _source_files():
        importer = _module_name(path)
        for node in _runtime_nodes(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("chakra_collectives"):
                found.append((importer, node.module, [a.name for a in node.names]))
            elif isinstance(node, ast.Import):
                found += [(importer, a.name, []) for a in node.names if a.name.startswith("chakra_collectives")]
    return found


IMPORTS = _imports()


def _foreign_imports(prefix: str) -> set[str]:
    """Modules of the package that import a module whose name starts with ``prefix`` (outside the package)."""
    found = set()
    for path in _source_files():
        for node in _runtime_nodes(ast.parse(path.read_text(), filename=str(path))):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if any(n.startswith(prefix) for n in names):
                found.add(_module_name(path))
    return found


def _edges() -> set[tuple[str, str]]:
    return {(_package(a), _package(b)) for a, b, _ in IMPORTS if _package(a) != _package(b)}


def test_the_walk_sees_the_package():
    packages = {_package(a) for a, _, _ in IMPORTS}
    assert {"ir", "verify", "synth", "network", "replay", "workload", "converters.chakra_et", "converters.msccl", "converters.astra_sim"} <= packages
    assert ("replay", "network") in _edges()  # an edge the code certainly has


def test_no_import_cycles_between_packages():
    graph = nx.DiGraph(sorted(e for e in _edges() if e[0] != "(root)"))
    assert list(nx.simple_cycles(graph)) == []


def test_verify_is_a_pure_consumer():
    """Only the front ends (CLI, demo, search, ``inspect``'s summary, the package root) import verify/."""
    importers = {_package(a) for a, b, _ in IMPORTS if _package(b) == "verify" and _package(a) != "verify"}
    assert importers <= {"cli", "demo", "search", "summary", "(root)"}, importers


def test_no_private_name_crosses_a_package():
    crossing = [(a, b, name) for a, b, names in IMPORTS for name in names if name.startswith("_") and _package(a) != _package(b)]
    assert crossing == []


def test_workload_does_not_import_replay():
    assert ("workload", "replay") not in _edges()


def test_the_ir_and_the_topology_import_no_producer_or_consumer():
    # lazy_names: a leaf (imports nothing of the package) whose names the ir re-exports on first use
    allowed = {"ir": {"errors", "units", "limits", "lazy_names"}, "topology": {"errors", "units", "limits", "locate", "converters.astra_sim"}}
    for package, allowed_targets in allowed.items():
        targets = {b for a, b in _edges() if a == package}
        assert targets <= allowed_targets, (package, targets - allowed_targets)


def test_formats_do_not_import_the_engines():
    """converters/ read and write files into the IR and topologies; they never need a simulation."""
    engines = {"network", "synth", "replay", "verify", "bounds", "workload", "cli", "demo"}
    for a, b in _edges():
        if a.startswith("converters"):
            assert b not in engines, (a, b)


@pytest.mark.parametrize("internal", ["matcher", "schedule", "channels", "lowering", "best"])
def test_tacos_internals_stay_in_synth(internal):
    users = {a for a, b, _ in IMPORTS if b == f"chakra_collectives.synth.{internal}" and _package(a) != "synth"}
    assert users == set()


def test_this_checkout_tests_its_own_package():
    """The installed package is this checkout's: chakra_collectives and its converters/ folder."""
    import chakra_collectives.converters as converters

    assert Path(chakra_collectives.__file__).resolve().parent == SOURCE_ROOTS["chakra_collectives"]
    assert Path(converters.__file__).resolve().parent == SOURCE_ROOTS["chakra_collectives.converters"]


def test_every_package_folder_is_listed_in_pyproject():
    """pyproject lists packages explicitly (converters/ is mapped): a new folder must be listed to ship."""
    tomllib = pytest.importorskip("tomllib")
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    folders = {_module_name(init) for root in SOURCE_ROOTS.values() for init in root.rglob("__init__.py")}
    assert folders == listed


def test_only_converters_know_chakras_schema():
    """Chakra's protobuf types stay in the format: the rest of the package speaks :class:`NodeKind`."""
    importers = _foreign_imports("chakra.schema")
    assert importers, "the walk should see the converters' imports"
    assert {m for m in importers if _package(m) != "converters.chakra_et"} == set()


def test_the_workload_type_comes_from_the_ir():
    """``Workload`` is a domain type (``ir.workload``): no module takes it, or its helpers, from a reader."""
    domain = {"Workload", "NodeKind", "collective_name", "node_type_name", "NO_COLLECTIVE"}
    from_formats = [(a, b, n) for a, b, names in IMPORTS for n in names if n in domain and b.startswith("chakra_collectives.converters")]
    assert from_formats == []


def _definitions() -> dict[str, set[str]]:
    """Top-level function and class name -> the modules defining it."""
    found: dict[str, set[str]] = {}
    for path in _source_files():
        for node in ast.parse(path.read_text(), filename=str(path)).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                found.setdefault(node.name, set()).add(_module_name(path))
    return found


def test_one_of_each_shared_helper_and_type():
    """The index of an entry within its group is ``ir.grouping.occurrence`` (it was written five times);
    the schedule TACOS, BFB and the lowering share lives in ``synth.schedule``, not in TACOS's matcher."""
    defined = _definitions()
    assert defined["occurrence"] == {"chakra_collectives.ir.grouping"}
    assert not {"_cumcount", "_occurrence", "_rank_index", "_tags"} & set(defined)
    assert defined["Schedule"] == {"chakra_collectives.synth.schedule"}
    assert defined["Workload"] == {"chakra_collectives.ir.workload"}


@pytest.mark.parametrize("literal", ['"forward": "50us"', '["string", "integer"]', '["string", "number"]'])
def test_model_defaults_and_schema_fragments_are_written_once(literal):
    """The model defaults and the size / duration schema fragments live in ``workload.spec``; the
    CLI and the search space import them."""
    writers = {_module_name(p) for p in _source_files() if literal in p.read_text()}
    assert writers == {"chakra_collectives.workload.spec"}


def test_one_implementation_of_astra_sims_per_rank_rule():
    """"One GPU COMP, one CPU op, one communication in flight per rank" is ``ir.workload.execution_units``;
    both replays (the network model's ``concurrency="astra-sim"`` and the ASTRA-sim system model, event by
    event or, when no unit makes a node wait, level by level) use it."""
    users = {a for a, b, names in IMPORTS if b == "chakra_collectives.ir.workload" and "execution_units" in names}
    assert users == {"chakra_collectives.replay.expand", "chakra_collectives.astra_system.driver", "chakra_collectives.astra_system.levels"}


@pytest.mark.parametrize("package", ["synth", "synth/forestcoll"])
def test_a_package_init_names_what_it_offers(package):
    """The orchestration lives in modules named for it; ``__init__`` imports and re-exports."""
    tree = ast.parse((SOURCE_ROOTS["chakra_collectives"] / package / "__init__.py").read_text())
    defined = [node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))]
    assert defined == []


def test_one_entry_point_chooses_the_replay():
    """``workload_replay.replay_workload`` chooses between the network model's replay and the ASTRA-sim
    model; the CLI calls it, and imports neither the ASTRA-sim model nor the replay function itself."""
    assert {(a, b) for a, b, _ in IMPORTS if _package(a) == "cli" and _package(b) == "astra_system"} == set()
    assert {a for a, _, names in IMPORTS if "replay_astra_sim" in names} == {"chakra_collectives.workload_replay"}
    cli_replays = {a for a, b, names in IMPORTS if _package(a) == "cli" and _package(b) == "replay" and "replay" in names}
    assert cli_replays == set()
    assert {a for a, _, names in IMPORTS if "replay_workload" in names} >= {"chakra_collectives.cli.replay_cmd"}


def test_max_flow_is_computed_in_one_place():
    """``flow.maxflow.FlowNetwork`` is the one max-flow (scipy's, networkx's or its own Dinic): BFB's
    chunk splits and the bisection (``flow.bisection``, above the topology) use it."""
    callers = {_module_name(p) for p in _source_files() if any(name in p.read_text() for name in ("maximum_flow", "minimum_cut", "preflow_push"))}
    assert callers == {"chakra_collectives.flow.maxflow"}
    users = {a for a, b, names in IMPORTS if b == "chakra_collectives.flow.maxflow" and "FlowNetwork" in names}
    assert {"chakra_collectives.synth.bfb", "chakra_collectives.flow.bisection"} <= users
