"""The tool's own error types: every failure a user can cause is one of these.

Each error renders as one line that says where (file, XML line, rank, node id) and what is
wrong; the CLI prints it and exits with :attr:`ChakraCollError.exit_code`, never a traceback.

>>> str(InputError("truncated record", path="ar.3.et", rank=3, node=17))
'ar.3.et: rank 3: node 17: truncated record'
>>> str(InputError("unknown step type x", path="algo.xml", line=12))
'algo.xml:12: unknown step type x'
>>> AlgorithmError("deadlock").exit_code
1
>>> LimitError("ring:100000 has 100,000 NPUs, above the limit of 65,536").exit_code
4
"""

from __future__ import annotations

from os import PathLike


class ChakraCollError(Exception):
    """Base class of every error chakra-collectives raises on purpose.

    ``exit_code`` is what the CLI returns: 2 for unreadable input or bad arguments,
    1 when an algorithm was read fine but is wrong, 4 when a request is refused because it
    exceeds a documented size or memory limit (:class:`LimitError`).
    """

    exit_code = 2

    def __init__(
        self,
        message: str,
        *,
        path: str | PathLike[str] | None = None,
        line: int | None = None,
        rank: int | None = None,
        node: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.path = None if path is None else str(path)
        self.line = line
        self.rank = rank
        self.node = node

    def __reduce__(self):
        # keep the location fields when an error crosses a process boundary
        location = {"path": self.path, "line": self.line, "rank": self.rank, "node": self.node}
        return (_rebuild, (type(self), self.message, location))

    def located(self, **where: object) -> "ChakraCollError":
        """Return the same error with missing location fields filled in from ``where``."""
        for key, value in where.items():
            if getattr(self, key) is None and value is not None:
                setattr(self, key, str(value) if key == "path" else value)
        return self

    def __str__(self) -> str:
        parts = []
        if self.path is not None:
            parts.append(self.path if self.line is None else f"{self.path}:{self.line}")
        elif self.line is not None:
            parts.append(f"line {self.line}")
        if self.rank is not None:
            parts.append(f"rank {self.rank}")
        if self.node is not None:
            parts.append(f"node {self.node}")
        parts.append(self.message)
        return ": ".join(parts)


def _rebuild(kind: type, message: str, location: dict) -> ChakraCollError:
    return kind(message, **location)


class InputError(ChakraCollError):
    """The input cannot be read or understood (missing file, bad bytes, bad argument)."""

    exit_code = 2


class AlgorithmError(ChakraCollError):
    """The input was read, but the algorithm it describes is wrong."""

    exit_code = 1


class LimitError(InputError):
    """The request is well-formed but exceeds a documented limit (README "Limits"): a size,
    an NPU or link count, or the memory it would need. The message says the figure, the limit
    and how to proceed (a smaller request, or ``--max-memory``)."""

    exit_code = 4
