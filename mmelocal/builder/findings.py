"""One finding of a static check (``validate``, the MME layout rules)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True)
class Problem:
    """One finding: a stable ``code`` (e.g. ``io.dtype``), where, what, and how bad."""

    code: str
    path: str
    message: str
    severity: str = "error"

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")


class Recorder(Protocol):
    """What the checks record their findings in (``validate``'s ``ValidationReport``)."""

    def add(self, code: str, path: Path | str, message: str, severity: str = "error") -> None:
        """Record a problem."""


__all__ = ["SEVERITIES", "Problem", "Recorder"]
