"""Result files: every bench result is JSON with a ``kind`` field.

``kind`` is ``"capacity"``, ``"estimate"``, ``"loadtest"``, ``"sweep"``, ``"projection"`` or
``"benchmark"``;
:func:`read_result` turns a file back into the matching result object so
``mmelocal report`` can lay out whatever it is given.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, dataclass_transform

from mmelocal.errors import UserInputError

#: kind -> (module, class) of the result type that reads it.
RESULT_TYPES: dict[str, tuple[str, str]] = {
    "capacity": ("mmelocal.bench.capacity.result", "CapacityResult"),
    "estimate": ("mmelocal.bench.estimate.core", "Estimate"),
    "loadtest": ("mmelocal.bench.loadtest.result", "LoadTestResult"),
    "sweep": ("mmelocal.bench.sweep.result", "SweepResult"),
    "projection": ("mmelocal.bench.capacity.projection", "Projection"),
    "benchmark": ("mmelocal.bench.endpoint.result", "BenchmarkResult"),
}


@dataclass_transform(kw_only_default=True, frozen_default=True)
class BenchResult:
    """The base of the JSON-able bench results: a subclass names its ``kind`` once
    (``class Projection(BenchResult, kind="projection")``) and is a frozen, keyword-only
    dataclass. Each subclass still writes its own ``to_dict`` (``kind`` first) and
    ``from_dict``, and is listed in :data:`RESULT_TYPES` under its ``kind``."""

    kind: ClassVar[str]

    def __init_subclass__(cls, *, kind: str, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.kind = kind
        dataclass(frozen=True, kw_only=True)(cls)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data, ``kind`` first (each result type writes its own)."""
        raise NotImplementedError(f"{type(self).__name__} does not write its to_dict")


def output_dir(path: Path | str) -> Path:
    """Create the folder ``path`` (and its parents) for results; UserInputError naming the
    path when that is impossible (a file in the way, no permission)."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        blocker = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), None)
        reason = f"{blocker} is a file" if blocker is not None else exc.strerror or str(exc)
        raise UserInputError(f"cannot create folder {path}: {reason}") from exc
    return path


def write_text(path: Path | str, text: str) -> Path:
    """Write ``text`` to ``path`` (parent folders created); UserInputError when impossible."""
    path = Path(path)
    output_dir(path.parent)
    try:
        path.write_text(text, "utf-8")
    except OSError as exc:
        raise UserInputError(f"cannot write {path}: {exc.strerror or exc}") from exc
    return path


def write_result(result: BenchResult, path: Path | str) -> Path:
    """Write ``result`` as indented JSON (parent folders are created)."""
    return write_text(path, json.dumps(result.to_dict(), indent=2, default=str) + "\n")


def result_from_dict(data: Any, *, origin: str = "<result>") -> Any:
    """The result object for plain data carrying a known ``kind``."""
    if not isinstance(data, dict) or "kind" not in data:
        raise UserInputError(
            f"{origin}: not a bench result (no 'kind' field): give the --json that capacity, "
            "capacity estimate, capacity project, loadtest, sweep or benchmark wrote"
        )
    entry = RESULT_TYPES.get(str(data["kind"]))
    if entry is None:
        raise UserInputError(
            f"{origin}: unknown result kind {data['kind']!r}; known: {', '.join(RESULT_TYPES)}"
        )
    cls = getattr(importlib.import_module(entry[0]), entry[1])
    try:
        return cls.from_dict(data)
    except KeyError as exc:
        raise UserInputError(
            f"{origin}: malformed {data['kind']} result: missing field {exc.args[0]!r}"
        ) from exc
    except (TypeError, ValueError, AttributeError) as exc:
        raise UserInputError(f"{origin}: malformed {data['kind']} result: {exc}") from exc


def read_results(path: Path | str) -> list[Any]:
    """The results in a file written by :func:`write_result` (one object or a list of them,
    as ``results.json`` of a report holds)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text("utf-8"))
    except OSError as exc:
        raise UserInputError(f"cannot read result file {path}: {exc.strerror}") from exc
    except ValueError as exc:
        raise UserInputError(f"{path}: not JSON: {exc}") from exc
    items = data if isinstance(data, list) else [data]
    return [result_from_dict(item, origin=f"{path}") for item in items]


def write_results(results: Sequence[BenchResult], path: Path | str) -> Path:
    """Write one result as an object, several as a JSON list."""
    if len(results) == 1:
        return write_result(results[0], path)
    payload = [r.to_dict() for r in results]
    return write_text(path, json.dumps(payload, indent=2, default=str) + "\n")


__all__ = [
    "RESULT_TYPES",
    "BenchResult",
    "output_dir",
    "read_results",
    "result_from_dict",
    "write_result",
    "write_results",
    "write_text",
]
