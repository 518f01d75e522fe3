"""What a verification found, stage by stage.

>>> report = Report(subject="out/ar")
>>> report.add(Check("structure", Status.PASSED, "4 ranks, 40 operations"))
>>> report.add(Check("semantics", Status.FAILED, "rank 1 output[2] holds nothing"))
>>> report.ok, report.exit_code
(False, 1)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class Status(str, Enum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"


@dataclass
class Check:
    """One stage of verification: its verdict, a one-line summary and optional details."""

    name: str
    status: Status
    summary: str
    details: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class Report:
    subject: str
    checks: list[Check] = field(default_factory=list)

    def add(self, check: Check) -> None:
        self.checks.append(check)

    @property
    def ok(self) -> bool:
        return all(c.status is not Status.FAILED for c in self.checks)

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def check(self, name: str) -> Check | None:
        return next((c for c in self.checks if c.name == name), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "subject": self.subject,
            "ok": self.ok,
            "checks": [
                {"name": c.name, "status": c.status.value, "summary": c.summary, "details": c.details, **c.data}
                for c in self.checks
            ],
        }
