"""Bad MSCCL-IR input: one-line errors at the XML line, non-zero exit, nothing written; mutants caught."""

from __future__ import annotations

import copy
import random
from pathlib import Path

import pytest
from lxml import etree

from chakra_collectives.converters.msccl import read_msccl
from chakra_collectives.errors import ChakraCollError
from chakra_collectives.verify import verify_algorithm

from msccl_text import algo, gpu, line_of, step, tb


def _ring3(steps0=None, steps1=None, steps2=None) -> str:
    """A 3-rank all-gather ring, one message per hop (each rank forwards what it received)."""
    steps0 = steps0 or [step(0, "cpy", src="i0", dst="o0"), step(1, "s", src="i0", dst="o0"), step(2, "rcs", src="o2", dst="o2"), step(3, "r", src="o1", dst="o1")]
    steps1 = steps1 or [step(0, "cpy", src="i0", dst="o1"), step(1, "s", src="i0", dst="o1"), step(2, "rcs", src="o0", dst="o0"), step(3, "r", src="o2", dst="o2")]
    steps2 = steps2 or [step(0, "cpy", src="i0", dst="o2"), step(1, "s", src="i0", dst="o2"), step(2, "rcs", src="o1", dst="o1"), step(3, "r", src="o0", dst="o0")]
    return algo(
        "allgather",
        3,
        3,
        gpu(0, 1, 3, 0, tb(0, 1, 2, 0, *steps0)),
        gpu(1, 1, 3, 0, tb(0, 2, 0, 0, *steps1)),
        gpu(2, 1, 3, 0, tb(0, 0, 1, 0, *steps2)),
    )


def test_the_base_program_is_correct(tmp_path):
    path = tmp_path / "ring.xml"
    path.write_text(_ring3())
    assert verify_algorithm(read_msccl(path, 3 * 1024)).ok


def _edit(text: str, needle: str, replacement: str, occurrence: int = 0) -> tuple[str, int]:
    """Replace the ``occurrence``-th ``needle``; return the text and that line."""
    line = line_of(text, needle, occurrence)
    lines = text.splitlines(keepends=True)
    lines[line - 1] = lines[line - 1].replace(needle, replacement, 1)
    return "".join(lines), line


BASE = _ring3()
S0 = 'type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1"'  # rank 0's send
RCS1 = 'type="rcs" srcbuf="o" srcoff="0" dstbuf="o" dstoff="0" cnt="1"'  # rank 1 receives it
RCS2 = 'type="rcs" srcbuf="o" srcoff="1" dstbuf="o" dstoff="1" cnt="1"'  # rank 2 forwards to rank 0
R0 = 'type="r" srcbuf="o" srcoff="1" dstbuf="o" dstoff="1"'  # rank 0 receives that


def _case(needle: str, replacement: str, code: int, message: str, at: str | None = None, occurrence: int = 0):
    """The edited text, the line the error must name (the edit's, or the line holding ``at``), ..."""
    text, line = _edit(BASE, needle, replacement, occurrence)
    return text, (line if at is None else line_of(text, at)), code, message


CASES = {
    "malformed XML": _case("</tb>", "</tbx>", 2, "malformed XML", occurrence=1),
    "unknown step type": _case('type="rcs"', 'type="rrcx"', 2, "unknown step type 'rrcx'", occurrence=2),
    "non-integer attribute": _case('cnt="1"', 'cnt="one"', 2, "cnt='one' is not an integer", occurrence=4),
    "unexpected element": _case('<step s="3"', '<stop s="3"', 2, "unexpected element <stop> inside <tb>"),
    "dependency on a missing step": _case(
        'depid="-1" deps="-1"', 'depid="0" deps="9"', 1, "depends on step 9 of tb 0, which has only 4 steps", occurrence=5
    ),
    "dependency on a missing threadblock": _case(
        'depid="-1" deps="-1"', 'depid="3" deps="0"', 1, "depends on tb 3, which gpu 1 does not have", occurrence=5
    ),
    "send with no matching receive": _case(
        R0, R0.replace('"r"', '"cpy"'), 1, "send #2 to gpu 0 on channel 0 has no matching receive: gpu 0 (tb 0) receives only 1", at=RCS2
    ),
    "receive with no matching send": _case(
        S0,
        S0.replace('"s"', '"cpy"'),
        1,
        "receive #2 from gpu 0 on channel 0 has no matching send: gpu 0 (tb 0) sends only 1",
        at='type="r" srcbuf="o" srcoff="2"',
    ),
    "cnt mismatch": _case(RCS1, RCS1.replace('cnt="1"', 'cnt="2"'), 1, "sends cnt=1 to gpu 1 on channel 0, but the matching receive", at=S0),
    "buffer out of range": _case(
        'type="rcs" srcbuf="o" srcoff="2" dstbuf="o" dstoff="2"',
        'type="rcs" srcbuf="o" srcoff="2" dstbuf="o" dstoff="3"',
        1,
        "writes o[3:4] beyond the 3 chunks of gpu 0's output buffer",
    ),
    "send without a send peer": _case(
        '<tb id="0" send="1" recv="2"', '<tb id="0" send="-1" recv="2"', 1, "sends, but tb 0 has no send peer", at=S0
    ),
    "steps out of order": _case('<step s="2"', '<step s="5"', 1, "step s=5 where s=2 was expected"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_one_line_at_the_xml_line_and_writes_nothing(cli, tmp_path, case):
    text, line, code, needle = CASES[case]
    path = tmp_path / "algo.xml"
    path.write_text(text)
    out = tmp_path / "out"
    result = cli("import-msccl", path, "--size", "1MiB", "-o", out / "ar")
    assert result.exit_code == code, result.stderr
    stderr = result.stderr
    assert stderr.startswith("chakra-coll: error: ") and stderr.count("\n") == 1 and "Traceback" not in stderr
    assert f"{path}:{line}: " in stderr, stderr
    assert needle in stderr, stderr
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "empty file: no <algo> document"),
        ("<foo/>\n", ":1: root element is <foo>, not <algo>"),
        ("Check failed\n<algo ngpus='1' nchunksperloop='1'>\n</algo>\n", ":2: <algo> lacks attribute coll"),
        ("<algo ngpus='2' nchunksperloop='1' coll='custom'>\n  <gpu id='0' i_chunks='1' o_chunks='0'/>\n</algo>\n", ":1: ngpus=2 but no <gpu> with id 1"),
    ],
)
def test_documents_that_are_not_msccl_ir(tmp_path, text, message):
    path = tmp_path / "a.xml"
    path.write_text(text)
    with pytest.raises(ChakraCollError) as error:
        read_msccl(path, 1024)
    assert message in str(error.value) and str(error.value).startswith(str(path))


def test_a_connection_belongs_to_one_threadblock(tmp_path):
    text = algo(
        "custom",
        2,
        2,
        gpu(0, 2, 0, 0, tb(0, 1, -1, 0, step(0, "s", src="i0")), tb(1, 1, -1, 0, step(0, "s", src="i1"))),
        gpu(1, 0, 2, 0, tb(0, -1, 0, 0, step(0, "r", dst="o0"), step(1, "r", dst="o1"))),
    )
    path = tmp_path / "a.xml"
    path.write_text(text)
    with pytest.raises(ChakraCollError, match="already has send=1 on channel 0") as error:
        read_msccl(path, 1024)
    assert error.value.line == line_of(text, '<tb id="1"')


def test_a_cycle_of_dependencies_is_reported_at_a_step(tmp_path):
    text = algo(
        "custom",
        1,
        2,
        gpu(
            0,
            2,
            2,
            0,
            tb(0, -1, -1, 0, step(0, "cpy", src="i0", dst="o0", dep=(1, 0), hasdep=1)),
            tb(1, -1, -1, 1, step(0, "cpy", src="i1", dst="o1", dep=(0, 0), hasdep=1)),
        ),
    )
    path = tmp_path / "a.xml"
    path.write_text(text)
    with pytest.raises(ChakraCollError, match="dependency cycle on gpu 0: tb 1 step 0 -> tb 0 step 0 -> tb 1 step 0") as error:
        read_msccl(path, 1024)
    assert error.value.exit_code == 1 and error.value.line == line_of(text, 'dstoff="1"')


# ---------------------------------------------------------------------------- mutants of the shared vectors
MUTATED = ["ar_ring_n4_c1_i1_simple.xml", "ar_allpairs_v2_n8_i1.xml", "a2a_allpairs_n8_i1.xml", "az_bcast_tree_n8_k4_i1.xml", "ar_hier_g4_n2_i1_auto.xml", "rs_ring_inplace_n4_i1.xml"]


def _mutants(path: Path, how: str, count: int, seed: int):
    """Deterministic mutants: drop a step, change a local offset, or swap a threadblock's peer."""
    tree = etree.parse(str(path))
    steps = [s for s in tree.iter("step") if s.get("type") != "nop"]
    rng = random.Random(seed)
    for victim in rng.sample(range(len(steps)), min(count, len(steps))):
        mutant = copy.deepcopy(tree)
        target = [s for s in mutant.iter("step") if s.get("type") != "nop"][victim]
        kind = target.get("type")
        if how == "drop":
            parent = target.getparent()
            parent.remove(target)
            for index, sibling in enumerate(parent):
                sibling.set("s", str(index))
        elif how == "offset":
            # what the step reads locally (src), or for plain receives where it stores (dst)
            field = "dstoff" if kind in ("r", "rcs") else "srcoff"
            buffer = target.get(field[:3] + "buf")
            gpu_el = target.getparent().getparent()
            size = int(gpu_el.get({"i": "i_chunks", "o": "o_chunks", "s": "s_chunks"}[buffer]))
            cnt = int(target.get("cnt"))
            choices = [o for o in range(size - cnt + 1) if o != int(target.get(field))]
            if not choices:
                continue
            target.set(field, str(rng.choice(choices)))
        else:  # swap: the threadblock talks to another peer instead
            tb_el = target.getparent()
            role = "send" if kind in ("s", "rcs", "rrs", "rrcs") else "recv" if kind != "cpy" and kind != "re" else None
            if role is None:
                continue
            ngpus = int(mutant.getroot().get("ngpus"))
            me = int(tb_el.getparent().get("id"))
            peer = int(tb_el.get(role))
            tb_el.set(role, str(rng.choice([g for g in range(ngpus) if g not in (me, peer)])))
        yield victim, etree.tostring(mutant).decode()


def _caught(tmp_path: Path, text: str) -> str:
    path = tmp_path / "mutant.xml"
    path.write_text(text)
    try:
        algo = read_msccl(path, 2**20)
    except ChakraCollError as error:
        assert error.line is not None, str(error)  # import errors point at the XML
        return "import"
    report = verify_algorithm(algo)
    assert not report.ok
    return "verify"


@pytest.mark.interop
@pytest.mark.parametrize("name", MUTATED)
@pytest.mark.parametrize("how", ["drop", "offset", "swap"])
def test_mutants_of_the_vectors_are_caught(interop, tmp_path, name, how):
    caught = [_caught(tmp_path, text) for _, text in _mutants(interop / "msccl" / name, how, count=6, seed=len(name))]
    assert caught
    if how == "offset":
        # a wrong offset still imports; verify proves it wrong with a counterexample (or a fault)
        assert set(caught) == {"verify"}


def test_verify_prints_a_counterexample_for_a_wrong_offset(cli, interop, tmp_path):
    text = (interop / "msccl" / "ar_ring_n4_c1_i1_simple.xml").read_text()
    # rank 2's last receive lands one slot off
    wrong, _ = _edit(text, 'type="r" srcbuf="i" srcoff="3" dstbuf="i" dstoff="3"', 'type="r" srcbuf="i" srcoff="3" dstbuf="i" dstoff="2"')
    path = tmp_path / "wrong.xml"
    path.write_text(wrong)
    assert cli("import-msccl", path, "-o", tmp_path / "w").exit_code == 0
    result = cli("verify", tmp_path / "w")
    assert result.exit_code == 1 and "counterexample" in result.stdout and "NOT verified" in result.stdout
