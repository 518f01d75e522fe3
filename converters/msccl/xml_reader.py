"""Parse MSCCL-IR XML text into :class:`~.program.Program` objects, remembering XML lines.

MSCCLang's example programs print their XML on stdout, sometimes with extra lines around it
(e.g. ``Check()`` messages) and, for ``custom_collective.py``, two ``<algo>`` documents back to
back. The reader therefore finds every ``<algo>...</algo>`` span in the text, ignores what lies
between them, and parses each span with lxml *at its original line*, so every error names the
line of the file the user has open.

>>> text = '''compiling...
... <algo name="x" proto="Simple" nchannels="1" nchunksperloop="1" ngpus="2" coll="custom" inplace="0">
...   <gpu id="0" i_chunks="1" o_chunks="0" s_chunks="0">
...     <tb id="0" send="1" recv="-1" chan="0">
...       <step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
...     </tb>
...   </gpu>
...   <gpu id="1" i_chunks="0" o_chunks="1" s_chunks="0">
...     <tb id="0" send="-1" recv="0" chan="0">
...       <step s="0" type="r" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
...     </tb>
...   </gpu>
... </algo>
... Check passed'''
>>> [(p.name, p.ngpus, p.num_steps, p.gpus[1].threadblocks[0].steps[0].line) for p in parse_documents(text)]
[('x', 2, 2, 10)]
"""

from __future__ import annotations

import re
from pathlib import Path

from lxml import etree

from chakra_collectives.errors import InputError
from chakra_collectives.converters.msccl.program import BUFFER_LETTERS, Gpu, Program, Step, StepType, Threadblock

_ALGO_START = re.compile(r"<algo\b")
_ALGO_END = re.compile(r"</algo\s*>")
_KNOWN_ALGO_ATTRS = frozenset({"name", "proto", "nchannels", "nchunksperloop", "ngpus", "coll", "inplace"})
_STEP_TYPES = {t.value: t for t in StepType}


def read_text(path: str | Path) -> str:
    """The file's text (UTF-8; undecodable bytes are an input error naming the file)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", path=path) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InputError("not UTF-8 text (is this an MSCCL-IR XML file?)", path=path, line=line) from None


def parse_documents(text: str, path: str | Path | None = None) -> list[Program]:
    """Every ``<algo>`` document in ``text``, in order (text around and between them is ignored)."""
    spans = _document_spans(text)
    if not spans:
        _raise_no_algo(text, path)
    programs = []
    line = 1
    position = 0
    for start, stop in spans:
        line += text.count("\n", position, start)
        position = start
        column = start - (text.rfind("\n", 0, start) + 1)
        # pad so that lxml sees the document at its real line (and column) in the file
        padded = "\n" * (line - 1) + " " * column + text[start:stop]
        programs.append(_parse_one(padded, path))
    return programs


def _document_spans(text: str) -> list[tuple[int, int]]:
    starts = [m.start() for m in _ALGO_START.finditer(text)]
    spans = []
    for n, start in enumerate(starts):
        limit = starts[n + 1] if n + 1 < len(starts) else len(text)
        end = _ALGO_END.search(text, start, limit)
        spans.append((start, end.end() if end else limit))
    return spans


def _raise_no_algo(text: str, path: str | Path | None) -> None:
    if not text.strip():
        raise InputError("empty file: no <algo> document", path=path)
    root = _parse_xml(text, path)
    raise InputError(f"root element is <{root.tag}>, not <algo>: not an MSCCL-IR document", path=path, line=root.sourceline)


_PARSER = etree.XMLParser(huge_tree=True, remove_comments=True, remove_pis=True, resolve_entities=False, no_network=True)


def _parse_xml(text: str, path: str | Path | None):
    try:
        return etree.fromstring(text.encode("utf-8"), _PARSER)
    except etree.XMLSyntaxError as exc:
        message = exc.msg or str(exc)
        message = re.sub(r"\s*\(<string>, line \d+\)$", "", message)
        raise InputError(f"malformed XML: {message}", path=path, line=exc.lineno or None) from None


def _parse_one(text: str, path: str | Path | None) -> Program:
    root = _parse_xml(text, path)
    where = _Where(path)
    a = root.attrib
    line = root.sourceline
    where.text(root)
    program = Program(
        name=a.get("name", ""),
        coll=where.required(a, "coll", line, "algo"),
        ngpus=where.integer(a, "ngpus", line, "algo"),
        nchunksperloop=where.integer(a, "nchunksperloop", line, "algo"),
        nchannels=where.integer(a, "nchannels", line, "algo", default=0),
        inplace=where.flag(a, "inplace", line, "algo"),
        proto=a.get("proto", "Simple"),
        extra={k: v for k, v in a.items() if k not in _KNOWN_ALGO_ATTRS},
        line=line,
    )
    for gpu_el in root:
        where.expect(gpu_el, "gpu", "algo")
        ga = gpu_el.attrib
        gline = gpu_el.sourceline
        gpu = Gpu(
            id=where.integer(ga, "id", gline, "gpu"),
            i_chunks=where.integer(ga, "i_chunks", gline, "gpu"),
            o_chunks=where.integer(ga, "o_chunks", gline, "gpu"),
            s_chunks=where.integer(ga, "s_chunks", gline, "gpu", default=0),
            line=gline,
        )
        program.gpus.append(gpu)
        for tb_el in gpu_el:
            where.expect(tb_el, "tb", "gpu")
            ta = tb_el.attrib
            tline = tb_el.sourceline
            tb = Threadblock(
                id=where.integer(ta, "id", tline, "tb"),
                send=where.integer(ta, "send", tline, "tb", default=-1),
                recv=where.integer(ta, "recv", tline, "tb", default=-1),
                chan=where.integer(ta, "chan", tline, "tb", default=0),
                line=tline,
            )
            gpu.threadblocks.append(tb)
            append = tb.steps.append
            for step_el in tb_el:
                where.expect(step_el, "step", "tb")
                append(_step(step_el, where))
    return program


_CANONICAL = ["s", "type", "srcbuf", "srcoff", "dstbuf", "dstoff", "cnt", "depid", "deps", "hasdep"]
"""Step attributes in the order MSCCLang (and our writer) emit them."""


def _step(element, where: "_Where") -> Step:
    try:  # fast path for MSCCLang's canonical steps; anything unusual is diagnosed by _checked_step
        if element.keys() != _CANONICAL:
            raise ValueError
        s, type_text, srcbuf, srcoff, dstbuf, dstoff, cnt, depid, deps, hasdep = element.values()
        if srcbuf not in _LETTERS or dstbuf not in _LETTERS:
            raise ValueError
        return Step(
            int(s),
            _STEP_TYPES[type_text],
            srcbuf,
            int(srcoff),
            dstbuf,
            int(dstoff),
            int(cnt),
            int(depid),
            int(deps),
            _FLAGS[hasdep],
            element.sourceline,
        )
    except (KeyError, TypeError, ValueError):
        return _checked_step(element, where)


_LETTERS = frozenset(BUFFER_LETTERS)
_FLAGS = {"0": False, "1": True}


def _checked_step(element, where: "_Where") -> Step:
    """A step with optional attributes defaulted and every problem reported at its line."""
    a = element.attrib
    line = element.sourceline
    type_text = a.get("type")
    if type_text is None:
        raise where.error("<step> lacks attribute type", line)
    try:
        step_type = StepType.parse(type_text)
    except InputError as error:
        raise error.located(path=where.path, line=line) from None
    integer = where.integer
    srcbuf = a.get("srcbuf", "i")
    dstbuf = a.get("dstbuf", "o")
    for name, letter in (("srcbuf", srcbuf), ("dstbuf", dstbuf)):
        if letter not in _LETTERS:
            raise where.error(f"<step> {name}={letter!r} is not a buffer (i, o or s)", line)
    return Step(
        s=integer(a, "s", line, "step"),
        type=step_type,
        srcbuf=srcbuf,
        srcoff=integer(a, "srcoff", line, "step", default=-1),
        dstbuf=dstbuf,
        dstoff=integer(a, "dstoff", line, "step", default=-1),
        cnt=integer(a, "cnt", line, "step", default=0 if step_type is StepType.NOP else None),
        depid=integer(a, "depid", line, "step", default=-1),
        deps=integer(a, "deps", line, "step", default=-1),
        hasdep=where.flag(a, "hasdep", line, "step"),
        line=line,
    )


class _Where:
    """Builds located errors and converts attributes."""

    def __init__(self, path: str | Path | None) -> None:
        self.path = path

    def error(self, message: str, line: int | None) -> InputError:
        return InputError(message, path=self.path, line=line)

    def required(self, attrs, name: str, line: int, element: str) -> str:
        value = attrs.get(name)
        if value is None:
            raise self.error(f"<{element}> lacks attribute {name}", line)
        return value

    def integer(self, attrs, name: str, line: int, element: str, default: int | None = None) -> int:
        value = attrs.get(name)
        if value is None:
            if default is None:
                raise self.error(f"<{element}> lacks attribute {name}", line)
            return default
        try:
            number = int(value)
        except ValueError:
            raise self.error(f"<{element}> {name}={value[:40]!r} is not an integer", line) from None
        if not -(2**31) <= number < 2**31:  # ids, offsets and counts of the runtime are 32-bit
            raise self.error(f"<{element}> {name}={value[:40]} does not fit a 32-bit integer", line)
        return number

    def flag(self, attrs, name: str, line: int, element: str) -> bool:
        value = attrs.get(name, "0")
        if value not in ("0", "1"):
            raise self.error(f"<{element}> {name}={value!r} must be 0 or 1", line)
        return value == "1"

    def expect(self, element, tag: str, parent: str) -> None:
        if element.tag != tag:
            raise self.error(f"unexpected element <{element.tag}> inside <{parent}> (expected <{tag}>)", element.sourceline)
        self.text(element)

    def text(self, element) -> None:
        for content in (element.text, element.tail):
            if content is not None and content.strip():
                raise self.error(f"unexpected text {content.strip()[:30]!r} in <{element.tag}>", element.sourceline)


__all__ = ["parse_documents", "read_text"]
