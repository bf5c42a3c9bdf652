"""Traffic as data: a trace is one row per request, ``timestamp,target_model[,payload_bytes]``.

``timestamp`` is seconds from the start (a float), rows sorted by it; ``target_model`` the
TargetModel the request names; ``payload_bytes`` (optional) the request body's size. CSV
with that header, or JSON lines with the same keys. :func:`read_trace` checks every row
before anything runs and names the line of the first bad one.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from mmelocal.errors import UserInputError

COLUMNS = ("timestamp", "target_model")
OPTIONAL_COLUMNS = ("payload_bytes",)
#: A first timestamp this large (10^9 s, 31.7 years; 2001-09-09 as a Unix time) is a Unix
#: time copied from a log, not seconds from the start: refused with the fix, rather than
#: a replay that waits decades for its first request.
UNIX_TIME_FLOOR_S = 1e9


@dataclass(frozen=True, eq=False)
class Trace:
    """Requests in time order: ``times_s[i]`` and ``model_ids[i]`` (an index into
    ``models``), with ``payload_bytes[i]`` when the trace had that column."""

    times_s: np.ndarray
    model_ids: np.ndarray
    models: tuple[str, ...]
    payload_bytes: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.times_s)

    @property
    def duration_s(self) -> float:
        """The time of the last request (0 for an empty trace)."""
        return float(self.times_s[-1]) if len(self.times_s) else 0.0

    def rows(self) -> Iterator[tuple[float, str]]:
        """``(timestamp, target_model)`` per request, in order."""
        models = self.models
        for t, m in zip(self.times_s.tolist(), self.model_ids.tolist(), strict=True):
            yield t, models[m]

    def peak_rate_rps(self, window_s: float = 1.0) -> float:
        """The most requests in any ``window_s`` bin, per second."""
        if not len(self.times_s):
            return 0.0
        counts = np.bincount((self.times_s / window_s).astype(np.int64))
        return float(counts.max()) / window_s


def _fail(origin: str, line: int, what: str) -> UserInputError:
    return UserInputError(f"{origin} line {line}: {what}")


class _Builder:
    def __init__(self, origin: str, with_payload: bool) -> None:
        self.origin = origin
        self.times: list[float] = []
        self.ids: list[int] = []
        self.payloads: list[int] | None = [] if with_payload else None
        self.index: dict[str, int] = {}
        self.last = 0.0

    def add(self, line: int, stamp: Any, target: Any, payload: Any = None) -> None:
        try:
            t = float(stamp)
        except (TypeError, ValueError):
            raise _fail(self.origin, line, f"timestamp {stamp!r} is not a number") from None
        if not np.isfinite(t) or t < 0:
            raise _fail(self.origin, line, f"timestamp {t!r} must be >= 0 seconds from the start")
        if not self.times and t >= UNIX_TIME_FLOOR_S:
            raise _fail(
                self.origin,
                line,
                f"timestamp {t:g} looks like a Unix time, not seconds from the start: "
                "subtract the first row's time from every row (docs: Traces, exporting one "
                "from your own logs)",
            )
        if t < self.last:
            raise _fail(
                self.origin,
                line,
                f"timestamp {t:g} comes before the previous row's {self.last:g}: the trace must "
                "be sorted by time (sort it, e.g. `sort -t, -k1,1g`, keeping the header first)",
            )
        name = str(target).strip() if target is not None else ""
        if not name:
            raise _fail(self.origin, line, "target_model is empty")
        if self.payloads is not None:
            try:
                size = int(payload)
            except (TypeError, ValueError):
                raise _fail(
                    self.origin, line, f"payload_bytes {payload!r} is not an integer"
                ) from None
            if size < 0:
                raise _fail(self.origin, line, f"payload_bytes must be >= 0, got {size}")
            self.payloads.append(size)
        self.last = t
        self.times.append(t)
        ids = self.index
        self.ids.append(ids.setdefault(name, len(ids)))

    def build(self) -> Trace:
        if not self.times:
            raise UserInputError(f"{self.origin}: the trace has no requests")
        return Trace(
            times_s=np.asarray(self.times, dtype=np.float64),
            model_ids=np.asarray(self.ids, dtype=np.int32),
            models=tuple(self.index),
            payload_bytes=None
            if self.payloads is None
            else np.asarray(self.payloads, dtype=np.int64),
        )


def _check_columns(origin: str, line: int, columns: list[str]) -> bool:
    if tuple(columns[:2]) != COLUMNS:
        raise _fail(
            origin,
            line,
            f"the columns must start with timestamp,target_model; got {','.join(columns)}",
        )
    unknown = [c for c in columns[2:] if c not in OPTIONAL_COLUMNS]
    if unknown:
        raise _fail(
            origin,
            line,
            f"unknown column {unknown[0]!r}: a trace has timestamp,target_model and "
            "optionally payload_bytes",
        )
    return "payload_bytes" in columns


def read_trace(path: Path | str) -> Trace:
    """Read and check a CSV or JSON-lines trace (the format is told by its first character).
    UTF-8, with or without the byte order mark spreadsheets write."""
    path = Path(path)
    origin = str(path)
    try:
        handle = path.open("r", encoding="utf-8-sig", newline="")
    except OSError as exc:
        raise UserInputError(f"cannot read trace {path}: {exc.strerror}") from exc
    with handle:
        try:
            first = handle.read(1)
            handle.seek(0)
            if first == "{":
                return _read_jsonl(handle, origin)
            return _read_csv(handle, origin)
        except UnicodeDecodeError as exc:
            raise UserInputError(
                f"{origin} is not UTF-8 text (byte {exc.start} cannot be decoded: "
                f"{exc.reason}): save it as UTF-8"
            ) from None


def _read_csv(handle: TextIO, origin: str) -> Trace:
    reader = csv.reader(handle)
    header = next(reader, None)
    if header is None:
        raise UserInputError(f"{origin}: empty file; a trace starts with timestamp,target_model")
    columns = [c.strip() for c in header]
    builder = _Builder(origin, _check_columns(origin, 1, columns))
    width = len(columns)
    add = builder.add
    for line, row in enumerate(reader, start=2):
        if len(row) != width:
            if not row:
                continue
            raise _fail(
                origin, line, f"expected {width} fields ({','.join(columns)}), got {len(row)}"
            )
        add(line, *row)
    return builder.build()


def _read_jsonl(handle: TextIO, origin: str) -> Trace:
    builder: _Builder | None = None
    for line, text in enumerate(handle, start=1):
        if not text.strip():
            continue
        try:
            row = json.loads(text)
        except json.JSONDecodeError as exc:
            raise _fail(origin, line, f"not JSON: {exc.msg}") from None
        if not isinstance(row, dict):
            raise _fail(origin, line, "each line must be a JSON object")
        keys = list(row)
        ordered = [k for k in (*COLUMNS, *OPTIONAL_COLUMNS) if k in row]
        missing = [k for k in COLUMNS if k not in row]
        if missing:
            raise _fail(origin, line, f"missing key {missing[0]!r}")
        unknown = [k for k in keys if k not in (*COLUMNS, *OPTIONAL_COLUMNS)]
        if unknown:
            _check_columns(origin, line, [*COLUMNS, *unknown])
        if builder is None:
            builder = _Builder(origin, "payload_bytes" in ordered)
        if (builder.payloads is not None) != ("payload_bytes" in row):
            raise _fail(origin, line, "payload_bytes must be on every line or on none")
        builder.add(line, row["timestamp"], row["target_model"], row.get("payload_bytes"))
    if builder is None:
        raise UserInputError(f"{origin}: the trace has no requests")
    return builder.build()


def write_trace(trace: Trace, path: Path | str) -> Path:
    """Write ``trace`` as CSV (or JSON lines when the name ends in ``.jsonl``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    models = trace.models
    times = trace.times_s.tolist()
    ids = trace.model_ids.tolist()
    sizes = trace.payload_bytes.tolist() if trace.payload_bytes is not None else None
    with path.open("w", encoding="utf-8", newline="") as out:
        if path.suffix == ".jsonl":
            for i, (t, m) in enumerate(zip(times, ids, strict=True)):
                row: dict[str, object] = {"timestamp": round(t, 6), "target_model": models[m]}
                if sizes is not None:
                    row["payload_bytes"] = sizes[i]
                out.write(json.dumps(row) + "\n")
            return path
        header = [*COLUMNS, *(["payload_bytes"] if sizes is not None else [])]
        out.write(",".join(header) + "\n")
        if sizes is None:
            out.writelines(f"{t:.6f},{models[m]}\n" for t, m in zip(times, ids, strict=True))
        else:
            out.writelines(
                f"{t:.6f},{models[m]},{s}\n" for t, m, s in zip(times, ids, sizes, strict=True)
            )
    return path


__all__ = [
    "COLUMNS",
    "OPTIONAL_COLUMNS",
    "UNIX_TIME_FLOOR_S",
    "Trace",
    "read_trace",
    "write_trace",
]
