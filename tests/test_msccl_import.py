"""MSCCL-IR import: every shared vector is proved, every step type lowers as docs/msccl-ir.md says."""

from __future__ import annotations

import math
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from lxml import etree

from chakra_collectives.converters.chakra_et import read_algorithm, write_algorithm
from chakra_collectives.converters.msccl import MscclWarning, read_msccl, read_programs
from chakra_collectives.converters.msccl.lower import lower_program
from chakra_collectives.errors import InputError
from chakra_collectives.ir import Buffer, Collective, OpKind
from chakra_collectives.ir.algorithm import _empty
from chakra_collectives.verify import verify_algorithm

import et_edit
from msccl_text import algo, gpu, line_of, nop, step, tb

VECTORS = [
    "a2a_allpairs_n8_i1.xml",
    "ag_recdoubling_n8_i1.xml",
    "ag_simple_ring_n4.xml",
    "ar_allpairs_v2_n8_i1.xml",
    "ar_hier_g4_n2_i1_auto.xml",
    "ar_ring_n4_c1_i1_simple.xml",
    "ar_ring_nofuse_n4_c1_i1_simple.xml",
    "astrasim_custom_allreduce.xml",
    "az_bcast_tree_n8_k4_i1.xml",
    "custom_collective_1.xml",
    "rs_ring_inplace_n4_i1.xml",
]
SEND_TYPES = {"s", "rcs", "rrs", "rrcs"}
RECV_TYPES = {"r", "rcs", "rrc", "rrs", "rrcs"}
REDUCE_TYPES = {"rrc", "rrs", "rrcs", "re"}


def _step_types(path: Path) -> list[str]:
    """Step types straight from lxml (independent of our reader)."""
    return [s.get("type") for s in etree.parse(str(path)).iter("step")]


def _kinds(algo, rank=None) -> dict[str, int]:
    mask = np.ones(algo.num_ops, bool) if rank is None else algo.ops.rank == rank
    return {k.name: int(((algo.ops.kind == k) & mask).sum()) for k in OpKind}


def _import(tmp_path: Path, text: str, size: int = 1024, **options):
    path = tmp_path / "algo.xml"
    path.write_text(text)
    return read_msccl(path, size, **options)


# ---------------------------------------------------------------------------- the shared vectors
@pytest.mark.interop
def test_the_vectors_cover_every_step_type(interop):
    types = set()
    for name in VECTORS:
        types.update(_step_types(interop / "msccl" / name))
    assert types == {"s", "r", "rcs", "rrc", "rrs", "rrcs", "cpy", "re", "nop"}


@pytest.mark.interop
@pytest.mark.parametrize("name", VECTORS)
def test_vector_imports_writes_reads_back_and_verifies(interop, tmp_path, name):
    path = interop / "msccl" / name
    with warnings.catch_warnings():
        warnings.simplefilter("error", MscclWarning)  # the corpus is clean for the runtime
        algo = read_msccl(path, 2**20)
    report = verify_algorithm(algo)
    status = {c.name: c.status.value for c in report.checks}
    expected = "skipped" if algo.collective is Collective.CUSTOM else "passed"
    assert report.ok and status == {"structure": "passed", "matching": "passed", "deadlock": "passed", "semantics": expected}
    # operations follow from the step types alone (no partial src/dst overlaps in the corpus)
    types = _step_types(path)
    count = lambda kinds: sum(t in kinds for t in types)  # noqa: E731
    assert _kinds(algo) == {
        "SEND": count(SEND_TYPES),
        "RECV": count(RECV_TYPES),
        "REDUCE": count(REDUCE_TYPES),
        "COPY": count({"cpy"}),
        "COMPUTE": 0,
    }
    written = write_algorithm(algo, tmp_path / "out")
    assert len(written) == algo.num_ranks
    again = read_algorithm(tmp_path / "out")
    assert again.equals(algo)
    assert verify_algorithm(again).ok


def test_vector_labels_become_collectives(interop):
    claimed = {name: read_msccl(interop / "msccl" / name, 2**20) for name in ("az_bcast_tree_n8_k4_i1.xml", "rs_ring_inplace_n4_i1.xml", "custom_collective_1.xml")}
    bcast = claimed["az_bcast_tree_n8_k4_i1.xml"]
    assert bcast.collective is Collective.BROADCAST and bcast.root == 0
    rs = claimed["rs_ring_inplace_n4_i1.xml"]
    assert rs.collective is Collective.REDUCE_SCATTER and rs.inplace
    assert claimed["custom_collective_1.xml"].collective is Collective.CUSTOM


def test_both_reduce_scatter_spellings(interop, tmp_path):
    text = (interop / "msccl" / "rs_ring_inplace_n4_i1.xml").read_text()
    assert 'coll="reduce_scatter"' in text
    azure = _import(tmp_path, text.replace('coll="reduce_scatter"', 'coll="reducescatter"'), 2**20)
    assert azure.collective is Collective.REDUCE_SCATTER and verify_algorithm(azure).ok


def test_broadcast_root_is_inferred_and_can_be_stated(interop, tmp_path):
    text = (interop / "msccl" / "az_bcast_tree_n8_k4_i1.xml").read_text()
    # rank 0 is the only one with an input; without that hint it is still the only one that never receives
    hidden = text.replace('i_chunks="0"', 'i_chunks="4"')
    assert _import(tmp_path, hidden, 2**20).root == 0
    stated = read_msccl(interop / "msccl" / "az_bcast_tree_n8_k4_i1.xml", 2**20, root=3)
    assert stated.root == 3
    report = verify_algorithm(stated)
    assert not report.ok and "counterexample" in report.check("semantics").summary


def test_bytes_per_step_are_cnt_times_size_over_nchunksperloop(interop, tmp_path):
    path = interop / "msccl" / "astrasim_custom_allreduce.xml"  # nchunksperloop = 8
    for size in (2**20, 1000, 1001):
        algo = read_msccl(path, size)
        comm = algo.ops.kind <= OpKind.RECV
        assert set(algo.op_bytes()[comm].tolist()) == {math.ceil(size / 8)}
    # the shipped ETs carry the same comm_size: 1 MiB / 8 chunks
    write_algorithm(read_msccl(path, 2**20), tmp_path / "ar")
    _, nodes = et_edit.load(tmp_path / "ar.0.et")
    sizes = {a.int64_val for n in nodes for a in n.attr if a.name == "comm_size"}
    assert sizes == {2**20 // 8}


def test_matches_astra_sims_own_conversion(interop, astra_custom_allreduce):
    ours = read_msccl(interop / "msccl" / "astrasim_custom_allreduce.xml", 2**20)
    theirs = read_algorithm(astra_custom_allreduce)
    assert ours.num_ranks == theirs.num_ranks == 8
    for rank in range(8):
        mine, shipped = _kinds(ours, rank), _kinds(theirs, rank)
        assert (mine["SEND"], mine["RECV"]) == (shipped["SEND"], shipped["RECV"]) == (14, 14)
        assert mine["REDUCE"] == shipped["COMPUTE"] == 7  # their COMP nodes are the reductions
        for kind in (OpKind.SEND, OpKind.RECV):
            a = sorted(ours.op_bytes()[(ours.ops.rank == rank) & (ours.ops.kind == kind)].tolist())
            b = sorted(theirs.op_bytes()[(theirs.ops.rank == rank) & (theirs.ops.kind == kind)].tolist())
            assert a == b


# ---------------------------------------------------------------------------- step semantics
def _ops(algo, rank):
    return list(algo.ops_of(rank))


def _two_rank(steps_on_1: list[str], *, i1=4, o1=4, s1=0, coll="custom", inplace=0, nchunks=4, peer_steps=None) -> str:
    """Rank 1 runs ``steps_on_1`` in one threadblock talking to rank 0, which sends what rank 1
    receives (from i[0]), then receives what rank 1 sends (into o[0])."""
    def count(kinds):
        return sum(1 for s in steps_on_1 if any(f'type="{t}"' in s for t in kinds))

    if peer_steps is None:
        sends = count(RECV_TYPES)
        peer_steps = [step(k, "s", src="i0") for k in range(sends)]
        peer_steps += [step(sends + k, "r", dst="o0") for k in range(count(SEND_TYPES))]
    return algo(
        coll,
        2,
        nchunks,
        gpu(0, 4, 4, 0, tb(0, 1, 1, 0, *peer_steps)),
        gpu(1, i1, o1, s1, tb(0, 0, 0, 0, *steps_on_1)),
        inplace=inplace,
    )


def _rows(algo, rank):
    return [(op.kind.name, op.src and str(op.src), op.dst and str(op.dst)) for op in _ops(algo, rank)]


def test_each_step_type_lowers_to_its_operations(tmp_path):
    # rank 1 has no scratch (s_chunks=0): its threadblock's scratch slot t is s[0]
    cases = {
        "r": [("RECV", None, "o[1]")],
        "rcs": [("RECV", None, "o[1]"), ("SEND", "o[1]", None)],
        "rrs": [("RECV", None, "s[0]"), ("REDUCE", "i[2]", "s[0]"), ("SEND", "s[0]", None)],
        "cpy": [("COPY", "i[2]", "o[1]")],
        "re": [("REDUCE", "i[2]", "o[1]")],
    }
    for kind, expected in cases.items():
        algo = _import(tmp_path, _two_rank([step(0, kind, src="i2", dst="o1")]))
        assert _rows(algo, 1) == expected, kind


def test_reducing_receives_depend_on_how_src_and_dst_overlap(tmp_path):
    same = _import(tmp_path, _two_rank([step(0, "rrc", src="i1", dst="i1")]))
    assert _rows(same, 1) == [("RECV", None, "s[0]"), ("REDUCE", "s[0]", "i[1]")]
    disjoint = _import(tmp_path, _two_rank([step(0, "rrcs", src="i2", dst="o1")]))
    assert _rows(disjoint, 1) == [("RECV", None, "o[1]"), ("REDUCE", "i[2]", "o[1]"), ("SEND", "o[1]", None)]
    peer = [step(0, "s", src="i0", cnt=2), step(1, "r", dst="o0", cnt=2)]
    partial = _import(tmp_path, _two_rank([step(0, "rrcs", src="i1", dst="i2", cnt=2)], s1=3, peer_steps=peer), size=4096)
    # t sits after the scratch the steps touch (none of the declared s_chunks=3) and holds cnt=2 chunks
    assert _rows(partial, 1) == [
        ("RECV", None, "s[0]"),
        ("REDUCE", "i[1]", "s[0]"),
        ("COPY", "s[0]", "i[2]"),
        ("SEND", "s[0]", None),
    ]
    assert int(partial.scratch_chunks[1]) == 2


def test_in_place_aliasing_decides_overlap(tmp_path):
    # in-place all-reduce: o[1] is i[1], so an rrc from i1 into o1 reduces one slot in place
    text = _two_rank([step(0, "rrc", src="i1", dst="o1")], coll="allreduce", inplace=1)
    assert _rows(_import(tmp_path, text), 1)[0] == ("RECV", None, "s[0]")
    out_of_place = _two_rank([step(0, "rrc", src="i1", dst="o1")], coll="allreduce", inplace=0)
    assert _rows(_import(tmp_path, out_of_place), 1)[0] == ("RECV", None, "o[1]")


def test_threadblock_scratch_is_reused_step_after_step(tmp_path):
    steps = [step(k, "rrs", src=f"i{k}", dst=f"i{k}") for k in range(3)]
    text = algo(
        "custom",
        3,
        4,
        gpu(0, 4, 4, 0, tb(0, 1, -1, 0, *[step(k, "s", src=f"i{k}") for k in range(3)])),
        gpu(1, 4, 4, 2, tb(0, 2, 0, 0, *steps)),
        gpu(2, 4, 4, 0, tb(0, -1, 1, 0, *[step(k, "r", dst=f"o{k}") for k in range(3)])),
    )
    lowered = _import(tmp_path, text)
    ops = _ops(lowered, 1)
    receives = [op for op in ops if op.kind is OpKind.RECV]
    # the 2 declared scratch chunks are never touched: the one reused temporary slot is s[0]
    assert {str(op.dst) for op in receives} == {"s[0]"} and int(lowered.scratch_chunks[1]) == 1
    # reuse is safe: the next step's receive waits for the send that read the slot
    for earlier, later in zip(receives, receives[1:]):
        (waited,) = later.deps
        assert ops[waited].kind is OpKind.SEND and str(ops[waited].src) == "s[0]" and earlier.index < waited


# ---------------------------------------------------------------------------- dependencies
def _dependency_program(*tb2_steps: str) -> str:
    return algo(
        "custom",
        1,
        4,
        gpu(
            0,
            4,
            4,
            0,
            tb(0, -1, -1, 0, step(0, "cpy", src="i0", dst="o0", hasdep=1)),
            tb(1, -1, -1, 1, step(0, "cpy", src="i1", dst="o1", hasdep=1)),
            tb(2, -1, -1, 2, *tb2_steps),
        ),
    )


def _deps_by_dst(algo) -> dict[str, set[str]]:
    ops = _ops(algo, 0)
    return {str(op.dst): {str(ops[d].dst) for d in op.deps} for op in ops}


def test_a_run_of_nops_accumulates_dependencies_for_the_next_step(tmp_path):
    text = _dependency_program(
        nop(0, (0, 0)), nop(1, (1, 0)), step(2, "cpy", src="i2", dst="o2"), step(3, "cpy", src="i3", dst="o3"), nop(4, (0, 0))
    )
    lowered = _import(tmp_path, text)
    deps = _deps_by_dst(lowered)
    assert deps["o[2]"] == {"o[0]", "o[1]"}
    assert deps["o[3]"] == {"o[2]"}  # in order within a threadblock
    assert lowered.num_ops == 4  # the trailing nop adds nothing


def test_depid_names_one_step_of_another_threadblock(tmp_path):
    lowered = _import(tmp_path, _dependency_program(step(0, "cpy", src="i2", dst="o2", dep=(1, 0))))
    assert _deps_by_dst(lowered)["o[2]"] == {"o[1]"}


def test_a_dependency_on_a_nop_waits_for_what_the_nop_waits_for(tmp_path):
    text = algo(
        "custom",
        1,
        4,
        gpu(
            0,
            4,
            4,
            0,
            tb(0, -1, -1, 0, step(0, "cpy", src="i0", dst="o0", hasdep=1)),
            tb(1, -1, -1, 1, step(0, "cpy", src="i1", dst="o1"), nop(1, (0, 0))),
            tb(2, -1, -1, 2, step(0, "cpy", src="i2", dst="o2", dep=(1, 1))),
        ),
    )
    with pytest.warns(MscclWarning, match="hasdep=0"):  # MSCCLang never targets a nop; the runtime would hang
        lowered = _import(tmp_path, text)
    assert _deps_by_dst(lowered)["o[2]"] == {"o[0]", "o[1]"}


def test_operations_are_in_a_topological_order(interop):
    algo = read_msccl(interop / "msccl" / "ar_allpairs_v2_n8_i1.xml", 2**20)  # cross-threadblock deps and nops
    owner = np.repeat(np.arange(algo.num_ops), np.diff(algo.ops.dep_ptr))
    assert len(owner) and np.all(algo.ops.dep_idx < owner)


# ---------------------------------------------------------------------------- matching
def test_fifo_matching_is_per_channel_and_every_pair_gets_its_own_tag(tmp_path):
    # two connections 0->1 (channels 0 and 1); the receiver lists channel 1 first
    text = algo(
        "custom",
        2,
        4,
        gpu(0, 4, 0, 0, tb(0, 1, -1, 0, step(0, "s", src="i0"), step(1, "s", src="i1")), tb(1, 1, -1, 1, step(0, "s", src="i2"))),
        gpu(1, 0, 4, 0, tb(0, -1, 0, 1, step(0, "r", dst="o2")), tb(1, -1, 0, 0, step(0, "r", dst="o0"), step(1, "r", dst="o1"))),
    )
    lowered = _import(tmp_path, text)
    sends = {op.tag: op.src.offset for op in _ops(lowered, 0)}
    recvs = {op.tag: op.dst.offset for op in _ops(lowered, 1)}
    assert len(sends) == 3 and sends.keys() == recvs.keys()
    # the k-th send of a connection lands in the k-th receive of the same connection
    assert {sends[t]: recvs[t] for t in sends} == {0: 0, 1: 1, 2: 2}
    assert verify_algorithm(lowered).check("matching").status.value == "passed"


# ---------------------------------------------------------------------------- documents
def test_text_around_and_between_documents_is_ignored(interop, tmp_path):
    first = (interop / "msccl" / "custom_collective_1.xml").read_text()
    second = (interop / "msccl" / "ag_simple_ring_n4.xml").read_text()
    text = "Running custom_collective.py\n" + first + "Check() passed\n" + second + "done\n"
    path = tmp_path / "two.xml"
    path.write_text(text)
    programs = read_programs(path)
    assert [(p.name, p.ngpus, p.line) for p in programs] == [
        ("allgather_ring", 3, 2),
        ("allgather_ring", 4, 2 + first.count("\n") + 1),
    ]
    with pytest.raises(InputError, match="holds 2 <algo> documents, choose one with --index"):
        read_msccl(path, 2**20)
    assert read_msccl(path, 2**20, index=1).collective is Collective.ALL_GATHER
    with pytest.raises(InputError, match="--index 2"):
        read_msccl(path, 2**20, index=2)
    # lines inside the second document are the file's lines
    broken = text.replace('type="rcs"', 'type="xyz"', 1)
    path.write_text(broken)
    with pytest.raises(InputError) as error:
        read_msccl(path, 2**20, index=1)
    assert error.value.line == line_of(broken, 'type="xyz"')


def test_unknown_coll_label_is_imported_as_custom_with_a_warning(interop, tmp_path):
    text = (interop / "msccl" / "custom_collective_1.xml").read_text().replace('coll="custom"', 'coll="barrier"')
    path = tmp_path / "g.xml"
    path.write_text(text)
    with pytest.warns(MscclWarning, match="coll='barrier' has no postcondition"):
        assert read_msccl(path, 1024).collective is Collective.CUSTOM


def test_runtime_limits_and_hangs_are_warned(tmp_path):
    text = _dependency_program(step(0, "cpy", src="i2", dst="o2", dep=(1, 0)))
    path = tmp_path / "a.xml"
    path.write_text(text.replace('hasdep="1"', 'hasdep="0"'))
    imported = lower_program(read_programs(path)[0], size_bytes=1024, path=path)
    assert len(imported.warnings) == 1 and "hasdep=0" in imported.warnings[0]
    dependent = line_of(text, 'depid="1"')
    assert imported.warnings[0].startswith(f"{path}:{dependent}:")
    big = _two_rank([step(0, "r", dst="o0", cnt=80)], o1=80, nchunks=80, peer_steps=[step(0, "s", src="o0", cnt=80)])
    path.write_text(big.replace('<gpu id="0" i_chunks="4" o_chunks="4"', '<gpu id="0" i_chunks="4" o_chunks="80"'))
    assert any("cnt=80" in w for w in lower_program(read_programs(path)[0], size_bytes=2**20, path=path).warnings)
    long = _two_rank([step(k, "r", dst="o0") for k in range(65)])
    path.write_text(long)
    assert any("65 steps" in w for w in lower_program(read_programs(path)[0], size_bytes=2**20, path=path).warnings)


# ---------------------------------------------------------------------------- the IR's aliasing rules
@pytest.mark.parametrize(
    "collective, buffer, offset, rank, expected",
    [
        # docs/msccl-ir.md: in-place all-gather: the input is the output at offset rank * chunks_per_rank
        (Collective.ALL_GATHER, Buffer.INPUT, 1, 3, (Buffer.OUTPUT, 3 * 2 + 1)),
        (Collective.ALL_GATHER, Buffer.OUTPUT, 5, 3, (Buffer.OUTPUT, 5)),
        # in-place reduce-scatter: the output is the input at offset rank * chunks_per_rank
        (Collective.REDUCE_SCATTER, Buffer.OUTPUT, 1, 2, (Buffer.INPUT, 2 * 2 + 1)),
        (Collective.REDUCE_SCATTER, Buffer.INPUT, 6, 2, (Buffer.INPUT, 6)),
        # in-place all-reduce: the output aliases the input
        (Collective.ALL_REDUCE, Buffer.OUTPUT, 7, 1, (Buffer.INPUT, 7)),
        (Collective.ALL_REDUCE, Buffer.SCRATCH, 7, 1, (Buffer.SCRATCH, 7)),
    ],
)
def test_in_place_rules_agree_with_msccl(collective, buffer, offset, rank, expected):
    shell = _empty(collective, num_ranks=4, inplace=True)  # 8 chunks, 2 per rank
    assert tuple(int(v) for v in shell.resolve(rank, buffer, offset)) == (int(expected[0]), expected[1])
    custom = replace(shell, collective=Collective.CUSTOM)  # declares no aliasing
    assert tuple(int(v) for v in custom.resolve(rank, buffer, offset)) == (int(buffer), offset)
