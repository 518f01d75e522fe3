"""Verdicts say exactly what was proved, and the exit code follows (0 verified, 1 wrong, 3 not proved)."""

from __future__ import annotations

import json
from dataclasses import replace

import jsonschema
import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chakra_collectives.converters.chakra_et import write_algorithm
from chakra_collectives.errors import InputError
from chakra_collectives.ir import AlgorithmBuilder, Buffer, Collective, OpKind
from chakra_collectives.ir.execution import execute
from chakra_collectives.ir.matching import match_messages
from chakra_collectives.synth.baselines import binomial_tree, ring
from chakra_collectives.synth.tacos import tacos
from chakra_collectives.topology import load_topology
from chakra_collectives.verify import EXIT_UNPROVED, Verdict, races, verify_algorithm
from chakra_collectives.verify.report import Status

from schema_helpers import schema


def _bytes_only(algo):
    """The same algorithm as foreign files describe it: bytes, no chunk identity."""
    ops = algo.ops
    moving = ops.kind != OpKind.COMPUTE
    nbytes = np.where(moving, ops.count.astype(np.int64) * algo.chunk_bytes(), ops.nbytes)
    return algo.with_ops(replace(ops, count=np.where(moving, -1, ops.count), nbytes=nbytes))


def test_bytes_only_files_are_not_proved_and_say_what_was():
    report = verify_algorithm(_bytes_only(ring(Collective.ALL_REDUCE, 4, size_bytes=4 * 2**20)))
    assert report.verdict is Verdict.UNPROVED and report.exit_code == EXIT_UNPROVED and not report.ok
    assert report.proved == ["structure", "matching", "deadlock"]
    assert report.check("semantics").status is Status.SKIPPED and report.check("semantics").required
    assert report.conclusion().startswith("NOT PROVED: all-reduce over 4 ranks -- cannot prove what the files compute")


def test_custom_collectives_are_verified_for_what_they_claim():
    report = verify_algorithm(ring(Collective.ALL_REDUCE, 4, size_bytes=4096), collective=Collective.CUSTOM)
    assert report.verdict is Verdict.VERIFIED and report.exit_code == 0
    assert "no postcondition" in report.conclusion()


def test_claiming_an_in_place_all_gather_of_an_in_place_all_reduce_is_wrong_not_a_crash():
    algo = replace(ring(Collective.ALL_REDUCE, 4, size_bytes=4096), inplace=True)
    report = verify_algorithm(algo, collective=Collective.ALL_GATHER)
    semantics = report.check("semantics")
    assert report.verdict is Verdict.WRONG and report.exit_code == 1
    assert semantics.status is Status.FAILED and semantics.summary.endswith("the files are not an in-place all-gather")


def test_rooted_collectives_need_a_root_in_range():
    algo = ring(Collective.ALL_REDUCE, 4, size_bytes=4096)
    with pytest.raises(InputError, match="broadcast has a root rank.*give --root R"):
        verify_algorithm(algo, collective=Collective.BROADCAST)
    with pytest.raises(InputError, match="root 4 is not a rank"):
        verify_algorithm(algo, collective=Collective.BROADCAST, root=4)
    tree = binomial_tree(Collective.BROADCAST, 5, size_bytes=5 * 64, root=2)
    assert verify_algorithm(tree).ok and verify_algorithm(tree, root=2).ok
    stated_wrong = verify_algorithm(tree, root=1)
    assert stated_wrong.verdict is Verdict.WRONG and "counterexample" in stated_wrong.check("semantics").summary


def test_cli_exit_codes_and_json(cli, tmp_path):
    write_algorithm(replace(ring(Collective.ALL_REDUCE, 4, size_bytes=4 * 2**20), inplace=True), tmp_path / "ar")
    wrong = cli("verify", tmp_path / "ar", "--collective", "all-gather")
    assert wrong.exit_code == 1 and "Traceback" not in wrong.output and "NOT verified: all-gather over 4 ranks" in wrong.stdout
    missing_root = cli("verify", tmp_path / "ar", "--collective", "broadcast")
    assert missing_root.exit_code == 2 and "give --root R" in missing_root.stderr and missing_root.stdout == ""
    rooted = cli("verify", tmp_path / "ar", "--collective", "broadcast", "--root", "1", "--json")
    document = json.loads(rooted.stdout)
    assert rooted.exit_code == 1 and document["root"] == 1 and document["verdict"] == "wrong"
    write_algorithm(ring(Collective.ALL_REDUCE, 4, size_bytes=4 * 2**20), tmp_path / "good")
    ok = cli("verify", tmp_path / "good", "--json")
    document = json.loads(ok.stdout)
    jsonschema.validate(document, schema("verify"))
    assert ok.exit_code == 0 and document["collective"] == "all-reduce" and document["num_ranks"] == 4 and document["exit_code"] == 0
    assert document["proved"] == ["structure", "matching", "deadlock", "semantics"] and document["inplace"] is False


def test_cli_unproved_exits_3_unless_allowed(cli, astra_custom_allreduce):
    result = cli("verify", astra_custom_allreduce)
    assert result.exit_code == EXIT_UNPROVED and "NOT PROVED: all-reduce over 8 ranks" in " ".join(result.stdout.split())
    assert "verified" not in result.stdout.replace("NOT verified", "")
    document = json.loads(cli("verify", astra_custom_allreduce, "--json").stdout)
    jsonschema.validate(document, schema("verify"))
    assert document["verdict"] == "unproved" and document["ok"] is False and document["exit_code"] == EXIT_UNPROVED
    assert cli("verify", astra_custom_allreduce, "--allow-unproved").exit_code == 0


def test_imported_ring_is_proved_for_every_order_exactly(cli, interop, tmp_path):
    # ASTRA-sim's custom all-reduce as MSCCL-IR: 8 ranks, 280 operations (the old bounded search gave up on it)
    assert cli("import-msccl", interop / "msccl" / "astrasim_custom_allreduce.xml", "-o", tmp_path / "ring").exit_code == 0
    result = cli("verify", tmp_path / "ring", "--json")
    document = json.loads(result.stdout)
    semantics = next(c for c in document["checks"] if c["name"] == "semantics")
    assert result.exit_code == 0 and "for every execution order" in semantics["summary"]


# ------------------------------------------------------------------ exact happens-before
def _graph(algo, partner):
    graph = nx.DiGraph()
    graph.add_nodes_from(range(algo.num_ops))
    owner = np.repeat(np.arange(algo.num_ops), np.diff(algo.ops.dep_ptr))
    graph.add_edges_from(zip(algo.ops.dep_idx.tolist(), owner.tolist()))
    sends = np.flatnonzero((algo.ops.kind == OpKind.SEND) & (partner >= 0))
    graph.add_edges_from(zip(sends.tolist(), partner[sends].tolist()))
    return graph


_ALGORITHMS = {
    "tacos torus": lambda: tacos(load_topology("torus2d:3x3"), Collective.ALL_REDUCE, 9 * 64, chunks_per_npu=2).algorithm,
    "tacos switch": lambda: tacos(load_topology("dgx:2x2"), Collective.ALL_GATHER, 4 * 64, chunks_per_npu=2).algorithm,
    "ring": lambda: ring(Collective.ALL_REDUCE, 5, size_bytes=5 * 64),
}


@settings(max_examples=25, deadline=None)
@given(name=st.sampled_from(sorted(_ALGORITHMS)), seed=st.integers(0, 2**32 - 1), budget_words=st.sampled_from([1, 1000]))
def test_happens_before_agrees_with_graph_reachability(name, seed, budget_words, monkeypatch_module):
    algo = _ALGORITHMS[name]()
    partner = match_messages(algo).partner
    rng = np.random.default_rng(seed)
    a = rng.integers(0, algo.num_ops, 300)
    b = rng.integers(0, algo.num_ops, 300)
    # a budget of one word per operation forces 64-source blocks: many passes, same answers
    monkeypatch_module.setattr(races, "MEMORY_BUDGET_BYTES", budget_words * 8 * algo.num_ops)
    got = races.happens_before(algo, partner, a, b)
    graph = _graph(algo, partner)
    expected = [x != y and nx.has_path(graph, int(x), int(y)) for x, y in zip(a, b)]
    assert got.tolist() == expected


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def test_race_check_has_no_budget_on_a_long_ring():
    algo = ring(Collective.ALL_REDUCE, 64, size_bytes=64 * 64)
    partner = match_messages(algo).partner
    assert races.find_race(algo, partner, execute(algo, partner).order) is None


def test_direct_edges_are_found_past_int32_products(monkeypatch):
    """A ring all-gather's every conflicting pair (a RECV, then the SEND that forwards its slot) is one
    dependency; with 79,800 operations ``dep * size`` passes 2**31, and the pairs must still be
    recognised as direct edges, not sent to the (slow, exact) reachability search."""
    algo = ring(Collective.ALL_GATHER, 200, size_bytes=200)
    assert algo.num_ops**2 > 2**31
    partner = match_messages(algo).partner
    asked = []
    exact = races.happens_before
    monkeypatch.setattr(races, "happens_before", lambda algo, partner, a, b: asked.append(len(a)) or exact(algo, partner, a, b))
    assert races.find_race(algo, partner, execute(algo, partner).order) is None
    assert asked == []


@settings(max_examples=80, deadline=None)
@given(messages=st.lists(st.tuples(st.integers(0, 2), st.integers(1, 2)), min_size=1, max_size=6), rnd=st.randoms(use_true_random=False),
       chained=st.booleans())
def test_finishes_agrees_with_execution(messages, rnd, chained):
    """Random 3-rank programs: each rank's sends and receives in a random order, each waiting for
    the one before it (``chained``) or for nothing; many deadlock with rendezvous sends, some
    with eager ones too."""
    from chakra_collectives.ir import AlgorithmBuilder, Buffer
    from chakra_collectives.ir.execution import finishes

    program: dict[int, list[tuple[str, int, int]]] = {0: [], 1: [], 2: []}
    for tag, (src, hop) in enumerate(messages):
        program[src].append(("send", (src + hop) % 3, tag))
        program[(src + hop) % 3].append(("recv", src, tag))
    b = AlgorithmBuilder(Collective.CUSTOM, num_ranks=3, chunk_count=1, size_bytes=64)
    for rank, steps in program.items():
        rnd.shuffle(steps)
        last: list[int] = []
        for kind, peer, tag in steps:
            if kind == "send":
                op = b.send(rank, peer, tag=tag, src=(Buffer.INPUT, 0), count=1, deps=last)
            else:
                op = b.recv(rank, peer, tag=tag, dst=(Buffer.OUTPUT, 0), count=1, deps=last)
            last = [op] if chained else []
    algo = b.build(input_chunks=[1, 1, 1], output_chunks=[1, 1, 1])
    partner = match_messages(algo).partner
    for semantics in ("eager", "rendezvous"):
        assert finishes(algo, partner, semantics=semantics) == execute(algo, partner, semantics=semantics).finished


@pytest.mark.parametrize(
    "make",
    [
        lambda: tacos(load_topology("torus2d:3x3"), Collective.ALL_TO_ALL, 9 * 9 * 64, chunks_per_npu=2).algorithm,
        lambda: tacos(load_topology("dgx:2x4"), Collective.ALL_TO_ALL, 8 * 8 * 64).algorithm,
        lambda: tacos(load_topology("mesh2d:3x3"), Collective.GATHER, 9 * 64, root=4).algorithm,
        lambda: ring(Collective.ALL_GATHER, 5, size_bytes=5 * 64),
        lambda: binomial_tree(Collective.BROADCAST, 6, size_bytes=64, root=2),
    ],
    ids=["tacos all-to-all torus", "tacos all-to-all dgx", "tacos gather", "ring all-gather", "tree broadcast"],
)
def test_moves_computed_with_numpy_match_the_symbolic_run(make):
    """The level-at-a-time numpy run of a move-only algorithm leaves every slot as the fifo run does."""
    from chakra_collectives.verify.semantics import run_moves, run_symbolically

    algo = make()
    partner = match_messages(algo).partner
    moved = run_moves(algo, partner)
    assert moved is not None and moved.fault is None
    assert moved.storage == run_symbolically(algo, partner, order="fifo").storage
    assert sorted(moved.execution.order) == list(range(algo.num_ops))


@pytest.mark.parametrize(
    "make",
    [
        lambda: ring(Collective.ALL_REDUCE, 5, size_bytes=5 * 64),
        lambda: ring(Collective.REDUCE_SCATTER, 4, size_bytes=4 * 64),
        lambda: tacos(load_topology("mesh2d:3x3"), Collective.ALL_REDUCE, 9 * 64, chunks_per_npu=2).algorithm,
        lambda: tacos(load_topology("dgx:2x4"), Collective.REDUCE_SCATTER, 8 * 64).algorithm,
        lambda: binomial_tree(Collective.REDUCE, 6, size_bytes=64, root=3),
    ],
    ids=["ring all-reduce", "ring reduce-scatter", "tacos all-reduce mesh", "tacos reduce-scatter dgx", "tree reduce"],
)
def test_reductions_computed_with_numpy_match_the_symbolic_run(make):
    """Reductions extend the numpy run's value table: every slot ends as in the fifo run (the
    sums over the same ranks), and the verifier proves the collective."""
    from chakra_collectives.verify.semantics import run_moves, run_symbolically

    algo = make()
    partner = match_messages(algo).partner
    moved = run_moves(algo, partner)
    assert moved is not None and moved.fault is None
    assert moved.storage == run_symbolically(algo, partner, order="fifo").storage
    assert verify_algorithm(algo).ok


def test_an_unsound_reduction_is_left_to_the_symbolic_run_which_names_it():
    """Rank 0 adds rank 1's chunk into its output twice: the numpy run stops (None) and the
    verifier reports the fifo run's fault, the rank counted twice."""
    from chakra_collectives.verify.semantics import run_moves

    b = AlgorithmBuilder(Collective.ALL_REDUCE, num_ranks=2, chunk_count=1, size_bytes=64)
    own = [b.copy(r, src=(Buffer.INPUT, 0), dst=(Buffer.OUTPUT, 0), count=1) for r in range(2)]
    received = [b.transfer(1 - r, r, src=(Buffer.INPUT, 0), dst=(Buffer.SCRATCH, 0), count=1)[1] for r in range(2)]
    first = b.reduce(0, src=(Buffer.SCRATCH, 0), dst=(Buffer.OUTPUT, 0), count=1, deps=[own[0], received[0]])
    b.reduce(0, src=(Buffer.SCRATCH, 0), dst=(Buffer.OUTPUT, 0), count=1, deps=[first])
    b.reduce(1, src=(Buffer.SCRATCH, 0), dst=(Buffer.OUTPUT, 0), count=1, deps=[own[1], received[1]])
    algo = b.build(scratch_chunks=[1, 1])
    assert run_moves(algo, match_messages(algo).partner) is None
    semantics = verify_algorithm(algo).check("semantics")
    assert semantics.status is Status.FAILED
    assert "counts rank(s) 1 twice in chunk 0" in " ".join([semantics.summary, *semantics.details])


@pytest.mark.parametrize("ranks", [6, 9])
def test_race_check_rank_by_rank_finds_the_race_of_the_whole_run(monkeypatch, ranks):
    """The accesses are laid out a block of ranks at a time: with every rank its own block, the
    race found (the first along the order, over every slot of every rank) is the one found with
    all ranks in one block; a race-free algorithm stays race-free."""
    algo = ring(Collective.ALL_REDUCE, ranks, size_bytes=ranks * 64)
    partner = match_messages(algo).partner
    loose = replace(algo, ops=replace(algo.ops, dep_ptr=np.zeros(algo.num_ops + 1, dtype=np.int64), dep_idx=np.zeros(0, dtype=np.int64)))
    orders = {name: execute(a, partner).order for name, a in (("ring", algo), ("loose", loose))}
    whole = races.find_race(loose, partner, orders["loose"])
    assert whole is not None and len(races._rank_blocks(loose)) == 1
    monkeypatch.setattr(races, "ACCESSES_PER_BLOCK", 1)
    assert races._rank_blocks(loose) == [(r, r + 1) for r in range(ranks)]
    assert races.find_race(loose, partner, orders["loose"]) == whole
    assert races.find_race(algo, partner, orders["ring"]) is None
