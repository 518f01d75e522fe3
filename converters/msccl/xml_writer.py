"""Format a :class:`~.program.Program` as MSCCL-IR XML, as MSCCLang prints it.

Two-space indentation, every step attribute present, attributes in MSCCLang's order. Names
are XML-escaped.

>>> from chakra_collectives.converters.msccl.program import Gpu, Program, Step, StepType, Threadblock
>>> tb = Threadblock(id=0, send=1, steps=[Step(s=0, type=StepType.SEND, srcbuf="i", srcoff=0, dstbuf="o", dstoff=0, cnt=1)])
>>> program = Program(name="a<b", coll="custom", ngpus=1, nchunksperloop=1, nchannels=1, inplace=False,
...                   gpus=[Gpu(id=0, i_chunks=1, o_chunks=0, s_chunks=0, threadblocks=[tb])])
>>> print(format_program(program), end="")
<algo name="a&lt;b" proto="Simple" nchannels="1" nchunksperloop="1" ngpus="1" coll="custom" inplace="0">
  <gpu id="0" i_chunks="1" o_chunks="0" s_chunks="0">
    <tb id="0" send="1" recv="-1" chan="0">
      <step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
  </gpu>
</algo>
"""

from __future__ import annotations

from xml.sax.saxutils import quoteattr

from chakra_collectives.converters.msccl.program import Program


def format_program(program: Program) -> str:
    """The XML text of ``program`` (one document, newline-terminated)."""
    extra = "".join(f" {key}={quoteattr(value)}" for key, value in program.extra.items())
    lines = [
        f"<algo name={quoteattr(program.name)} proto={quoteattr(program.proto)} nchannels=\"{program.nchannels}\" "
        f"nchunksperloop=\"{program.nchunksperloop}\" ngpus=\"{program.ngpus}\" coll={quoteattr(program.coll)} "
        f"inplace=\"{int(program.inplace)}\"{extra}>"
    ]
    append = lines.append
    for gpu in program.gpus:
        append(f'  <gpu id="{gpu.id}" i_chunks="{gpu.i_chunks}" o_chunks="{gpu.o_chunks}" s_chunks="{gpu.s_chunks}">')
        for tb in gpu.threadblocks:
            append(f'    <tb id="{tb.id}" send="{tb.send}" recv="{tb.recv}" chan="{tb.chan}">')
            for st in tb.steps:
                append(
                    f'      <step s="{st.s}" type="{st.type.value}" srcbuf="{st.srcbuf}" srcoff="{st.srcoff}" '
                    f'dstbuf="{st.dstbuf}" dstoff="{st.dstoff}" cnt="{st.cnt}" depid="{st.depid}" deps="{st.deps}" '
                    f'hasdep="{int(st.hasdep)}"/>'
                )
            append("    </tb>")
        append("  </gpu>")
    append("</algo>")
    return "\n".join(lines) + "\n"


__all__ = ["format_program"]
