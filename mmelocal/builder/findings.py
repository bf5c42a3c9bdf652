"""One finding of a static check (``validate``, the MME layout rules)."""

from __future__ import annotations

from dataclasses import dataclass

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


__all__ = ["SEVERITIES", "Problem"]
