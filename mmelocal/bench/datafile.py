"""Reading the bench's YAML data files (GPU cards, prices, load shapes) with one-line errors."""

from __future__ import annotations

from typing import Any

import yaml

from mmelocal.errors import UserInputError


def parse_yaml(text: str, *, origin: str) -> Any:
    """``yaml.safe_load(text)``; a syntax error becomes one UserInputError line naming
    ``origin``, the line and column, and the problem (PyYAML's own message spans lines)."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = ""
        mark = getattr(exc, "problem_mark", None)
        if mark is not None:
            where = f" at line {mark.line + 1}, column {mark.column + 1}"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserInputError(f"{origin}: not valid YAML{where}: {problem}") from exc


__all__ = ["parse_yaml"]
