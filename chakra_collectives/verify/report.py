"""What a verification found, stage by stage, and the verdict: what exactly was proved.

A report's :attr:`~Report.verdict` is one of

* ``verified`` -- everything the claim asks was proved (for a collective with a postcondition:
  structure, matching, deadlock freedom *and* the postcondition in every execution order);
* ``wrong`` -- a stage failed: the algorithm is not what it claims (with a counterexample);
* ``unproved`` -- nothing wrong was found, but a stage the claim needs could not run (files
  without chunk identity cannot show what they compute): only :attr:`~Report.proved` holds.

The CLI exits with :attr:`~Report.exit_code`: 0, 1 and 3 (:data:`EXIT_UNPROVED`); 2 is for
input it cannot read.

>>> report = Report(subject="out/ar", collective="all-reduce", num_ranks=4)
>>> report.add(Check("structure", Status.PASSED, "4 ranks, 40 operations"))
>>> report.add(Check("semantics", Status.SKIPPED, "cannot prove what the files compute", required=True))
>>> report.verdict.value, report.exit_code, report.proved
('unproved', 3, ['structure'])
>>> report.add(Check("matching", Status.FAILED, "rank 1: node 4: RECV from rank 0 tag 2 has no matching SEND"))
>>> report.verdict.value, report.exit_code, report.ok
('wrong', 1, False)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

SCHEMA_VERSION = 1
"""Version of ``chakra-coll verify --json`` (``schemas/verify.schema.json``)."""

EXIT_UNPROVED = 3
"""Exit code when nothing is wrong but what was asked could not be proved."""


class Status(str, Enum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"


class Verdict(str, Enum):
    VERIFIED = "verified"
    WRONG = "wrong"
    UNPROVED = "unproved"


@dataclass
class Check:
    """One stage of verification: its status, a one-line summary and optional details.

    ``required``: a skipped stage that the claim needs (its skip makes the verdict
    ``unproved``); a stage skipped because the claim asks nothing of it (a custom collective
    has no postcondition) or because an earlier stage failed is not.
    """

    name: str
    status: Status
    summary: str
    details: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    required: bool = False


@dataclass
class Report:
    subject: str
    checks: list[Check] = field(default_factory=list)
    collective: str = ""
    """The collective the verification holds the files to (claimed by them or stated)."""
    num_ranks: int = 0
    chunk_count: int = 0
    root: int | None = None
    inplace: bool = False
    send_semantics: tuple[str, ...] = ("eager",)
    """Send semantics under which deadlock freedom was required."""

    def add(self, check: Check) -> None:
        self.checks.append(check)

    @property
    def verdict(self) -> Verdict:
        if any(c.status is Status.FAILED for c in self.checks):
            return Verdict.WRONG
        if any(c.status is Status.SKIPPED and c.required for c in self.checks):
            return Verdict.UNPROVED
        return Verdict.VERIFIED

    @property
    def ok(self) -> bool:
        """True only when the verdict is ``verified``."""
        return self.verdict is Verdict.VERIFIED

    @property
    def proved(self) -> list[str]:
        """The stages that passed: what holds, whatever the verdict."""
        return [c.name for c in self.checks if c.status is Status.PASSED]

    @property
    def exit_code(self) -> int:
        return {Verdict.VERIFIED: 0, Verdict.WRONG: 1, Verdict.UNPROVED: EXIT_UNPROVED}[self.verdict]

    def check(self, name: str) -> Check | None:
        return next((c for c in self.checks if c.name == name), None)

    def conclusion(self) -> str:
        """One line a person reads: the verdict and exactly what it covers.

        >>> report = Report(subject="x", collective="all-gather", num_ranks=8)
        >>> for name in ("structure", "matching", "deadlock"):
        ...     report.add(Check(name, Status.PASSED, ""))
        >>> report.add(Check("semantics", Status.SKIPPED, "cannot prove what the files compute", required=True))
        >>> report.conclusion()
        'NOT PROVED: all-gather over 8 ranks -- cannot prove what the files compute; proved only: well-formed, messages match, deadlock-free with eager sends'
        """
        proved = [_MEANING[name](self) for name in self.proved if name in _MEANING]
        verdict = self.verdict
        claim = f"{self.collective} over {self.num_ranks} ranks"
        if verdict is Verdict.VERIFIED:
            if self.collective == "custom":
                return f"verified: {', '.join(proved)} (custom collective: no postcondition to prove)"
            return f"verified: {claim} -- {', '.join(proved)}"
        if verdict is Verdict.WRONG:
            failed = next(c for c in self.checks if c.status is Status.FAILED)
            return f"NOT verified: {claim} -- {failed.name} check failed: {failed.summary}"
        missing = next(c for c in self.checks if c.status is Status.SKIPPED and c.required)
        return f"NOT PROVED: {claim} -- {missing.summary}; proved only: {', '.join(proved) or 'nothing'}"

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "subject": self.subject,
            "collective": self.collective,
            "num_ranks": self.num_ranks,
            "chunk_count": self.chunk_count,
            "root": self.root,
            "inplace": self.inplace,
            "send_semantics": list(self.send_semantics),
            "verdict": self.verdict.value,
            "ok": self.ok,
            "proved": self.proved,
            "exit_code": self.exit_code,
            "conclusion": self.conclusion(),
            "checks": [
                {"name": c.name, "status": c.status.value, "required": c.required, "summary": c.summary, "details": c.details, **c.data}
                for c in self.checks
            ],
        }


_MEANING = {
    "structure": lambda r: "well-formed",
    "matching": lambda r: "messages match",
    "deadlock": lambda r: f"deadlock-free with {' and '.join(r.send_semantics)} sends",
    "semantics": lambda r: "postcondition holds in every execution order",
}
