"""Write small MSCCL-IR documents in tests, one line per element (so XML lines are predictable)."""

from __future__ import annotations


def step(s: int, type: str, src: str = "i0", dst: str = "o0", cnt: int = 1, dep: tuple[int, int] = (-1, -1), hasdep: int = 0) -> str:
    """``<step>`` with ``src``/``dst`` written as buffer letter + offset (``"s3"``)."""
    return (
        f'      <step s="{s}" type="{type}" srcbuf="{src[0]}" srcoff="{src[1:]}" dstbuf="{dst[0]}" dstoff="{dst[1:]}" '
        f'cnt="{cnt}" depid="{dep[0]}" deps="{dep[1]}" hasdep="{hasdep}"/>'
    )


def nop(s: int, dep: tuple[int, int]) -> str:
    return step(s, "nop", src="i-1", dst="o-1", cnt=0, dep=dep)


def tb(id: int, send: int, recv: int, chan: int, *steps: str) -> str:
    return "\n".join([f'    <tb id="{id}" send="{send}" recv="{recv}" chan="{chan}">', *steps, "    </tb>"])


def gpu(id: int, i: int, o: int, s: int, *tbs: str) -> str:
    return "\n".join([f'  <gpu id="{id}" i_chunks="{i}" o_chunks="{o}" s_chunks="{s}">', *tbs, "  </gpu>"])


def algo(coll: str, ngpus: int, nchunks: int, *gpus: str, inplace: int = 0, name: str = "test") -> str:
    head = (
        f'<algo name="{name}" proto="Simple" nchannels="1" nchunksperloop="{nchunks}" ngpus="{ngpus}" '
        f'coll="{coll}" inplace="{inplace}">'
    )
    return "\n".join([head, *gpus, "</algo>"]) + "\n"


def line_of(text: str, needle: str, occurrence: int = 0) -> int:
    """1-based line of the ``occurrence``-th line containing ``needle``."""
    hits = [n for n, line in enumerate(text.splitlines(), start=1) if needle in line]
    return hits[occurrence]
