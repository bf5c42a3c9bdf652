"""Traffic as data: a trace is one row per request, ``timestamp,target_model[,payload_bytes]``.

``timestamp`` is seconds from the start (a float), rows sorted by it; ``target_model`` the
TargetModel the request names; ``payload_bytes`` (optional) the request body's size. CSV
with that header, or JSON lines with the same keys. :func:`read_trace` checks every row
before anything runs and names the line of the first bad one; a :class:`Trace` made in
Python is checked by the same rules (:func:`_first_problem` for the values, the service's
TargetModel rule from :mod:`mmelocal.facts.sagemaker` for the names).
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
from mmelocal.facts.sagemaker import target_model_problem

COLUMNS = ("timestamp", "target_model")
OPTIONAL_COLUMNS = ("payload_bytes",)
#: A first timestamp this large (10^9 s, 31.7 years; 2001-09-09 as a Unix time) is a Unix
#: time copied from a log, not seconds from the start: refused with the fix, rather than
#: a replay that waits decades for its first request.
UNIX_TIME_FLOOR_S = 1e9


@dataclass(frozen=True, eq=False)
class Trace:
    """Requests in time order: ``times_s[i]`` and ``model_ids[i]`` (an index into
    ``models``), with ``payload_bytes[i]`` when the trace had that column.

    Checked when built, as :func:`read_trace` checks a file: times finite, >= 0, sorted and
    not Unix times; every name in ``models`` a TargetModel the service takes
    (:func:`~mmelocal.facts.sagemaker.target_model_problem`); payloads whole bytes >= 0.
    A UserInputError names the first request at fault."""

    times_s: np.ndarray
    model_ids: np.ndarray
    models: tuple[str, ...]
    payload_bytes: np.ndarray | None = None

    def __post_init__(self) -> None:
        times = _array("times_s", self.times_s, "iuf", "seconds (numbers)")
        ids = _array("model_ids", self.model_ids, "iu", "indexes into models (integers)")
        sizes = (
            None
            if self.payload_bytes is None
            else _array("payload_bytes", self.payload_bytes, "iu", "whole bytes (integers)")
        )
        for name, other in (("model_ids", ids), ("payload_bytes", sizes)):
            if other is not None and len(other) != len(times):
                raise UserInputError(
                    f"Trace: times_s has {len(times)} request(s) and {name} {len(other)}: give "
                    "one value per request"
                )
        object.__setattr__(self, "times_s", times)
        object.__setattr__(self, "model_ids", ids)
        object.__setattr__(self, "payload_bytes", sizes)
        object.__setattr__(self, "models", tuple(self.models))
        for k, name in enumerate(self.models):
            problem = target_model_problem(name) if isinstance(name, str) else "not a string"
            if problem is not None:
                raise UserInputError(f"Trace: models[{k}] {name!r}: {problem}")
        outside = (ids < 0) | (ids >= len(self.models))
        if outside.any():
            i = int(np.argmax(outside))
            raise UserInputError(
                f"Trace: model_ids[{i}] is {int(ids[i])}, not an index into the "
                f"{len(self.models)} model name(s) of models"
            )
        found = _first_problem(times, sizes)
        if found is not None:
            i, column, what = found
            raise UserInputError(f"Trace: request {i} ({column}[{i}]): {what}")

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

    def sped_up(self, speed: float) -> Trace:
        """The same requests ``speed`` times faster (every time divided by ``speed``): the
        traffic a replay at ``--speed`` sends."""
        if not speed > 0:
            raise UserInputError(f"speed must be > 0, got {speed:g}")
        return Trace(
            times_s=self.times_s / speed,
            model_ids=self.model_ids,
            models=self.models,
            payload_bytes=self.payload_bytes,
        )

    def peak_rate_rps(self, window_s: float = 1.0) -> float:
        """The most requests in any ``window_s`` bin, per second."""
        if not len(self.times_s):
            return 0.0
        counts = np.bincount((self.times_s / window_s).astype(np.int64))
        return float(counts.max()) / window_s


def _array(name: str, value: Any, kinds: str, what: str) -> np.ndarray:
    """``value`` as a 1-D array whose dtype is one of ``kinds`` (numpy's kind letters)."""
    array = np.asarray(value)
    if array.ndim != 1 or array.dtype.kind not in kinds:
        raise UserInputError(
            f"Trace: {name} must be a 1-D array of {what}, got {array.ndim}-D {array.dtype}"
        )
    return array


def _first_problem(times: np.ndarray, sizes: np.ndarray | None) -> tuple[int, str, str] | None:
    """The first request that breaks the rules of a trace's values: (its index, the column,
    what is wrong), or None. The one home of those rules: :class:`Trace` and
    :func:`read_trace` (which names the line) both ask it."""
    found: list[tuple[int, str, str]] = []
    bad = ~np.isfinite(times) | (times < 0)
    if bad.any():
        i = int(np.argmax(bad))
        found.append(
            (i, "times_s", f"timestamp {float(times[i])!r} must be >= 0 seconds from the start")
        )
    if len(times) and np.isfinite(times[0]) and times[0] >= UNIX_TIME_FLOOR_S:
        found.append(
            (
                0,
                "times_s",
                f"timestamp {float(times[0]):g} looks like a Unix time, not seconds from the "
                "start: subtract the first row's time from every row (docs: Traces, exporting "
                "one from your own logs)",
            )
        )
    back = np.flatnonzero(times[1:] < times[:-1])
    if back.size:
        i = int(back[0]) + 1
        found.append(
            (
                i,
                "times_s",
                f"timestamp {float(times[i]):g} comes before the previous row's "
                f"{float(times[i - 1]):g}: the trace must be sorted by time (sort it, e.g. "
                "`sort -t, -k1,1g`, keeping the header first)",
            )
        )
    if sizes is not None:
        negative = sizes < 0
        if negative.any():
            i = int(np.argmax(negative))
            found.append((i, "payload_bytes", f"payload_bytes must be >= 0, got {int(sizes[i])}"))
    return min(found, key=lambda f: f[0]) if found else None


def _fail(origin: str, line: int, what: str) -> UserInputError:
    return UserInputError(f"{origin} line {line}: {what}")


class _Builder:
    """Reads a trace's rows (each value of the right kind, each new TargetModel by the
    service's rule as it is met); the rules over the values are :func:`_first_problem`'s,
    asked at the end and before any other fault is reported, so the first bad line is
    named whatever is wrong with it."""

    def __init__(self, origin: str, with_payload: bool) -> None:
        self.origin = origin
        self.times: list[float] = []
        self.ids: list[int] = []
        self.lines: list[int] = []
        self.payloads: list[int] | None = [] if with_payload else None
        self.index: dict[str, int] = {}

    def fail(self, line: int, what: str) -> UserInputError:
        """The fault at ``line``, or an earlier one among the rows read so far."""
        earlier = _first_problem(self._times(), self._sizes())
        if earlier is not None and self.lines[earlier[0]] < line:
            return _fail(self.origin, self.lines[earlier[0]], earlier[2])
        return _fail(self.origin, line, what)

    def _times(self) -> np.ndarray:
        return np.asarray(self.times, dtype=np.float64)

    def _sizes(self) -> np.ndarray | None:
        return None if self.payloads is None else np.asarray(self.payloads, dtype=np.int64)

    def add(self, line: int, stamp: Any, target: Any, payload: Any = None) -> None:
        try:
            if isinstance(stamp, bool):  # JSON true is no time (float(True) is 1.0)
                raise TypeError
            t = float(stamp)
        except (TypeError, ValueError):
            raise self.fail(line, f"timestamp {stamp!r} is not a number") from None
        if not isinstance(target, str):
            raise self.fail(line, f"target_model {target!r} is not a string")
        name = target.strip()
        if name not in self.index:
            problem = target_model_problem(name)
            if problem is not None:
                raise self.fail(line, problem)
        if self.payloads is not None:
            self.payloads.append(self._size(line, payload))
        self.lines.append(line)
        self.times.append(t)
        ids = self.index
        self.ids.append(ids.setdefault(name, len(ids)))

    def _size(self, line: int, payload: Any) -> int:
        """``payload_bytes`` as whole bytes: an integer, or text or a float that is one
        (never cut: 3.7 is refused, not read as 3)."""
        if isinstance(payload, float) and payload.is_integer():
            return int(payload)
        if isinstance(payload, int | str) and not isinstance(payload, bool):
            try:
                return int(payload)
            except ValueError:
                pass
        raise self.fail(line, f"payload_bytes {payload!r} is not an integer")

    def build(self) -> Trace:
        if not self.times:
            raise UserInputError(f"{self.origin}: the trace has no requests")
        times, sizes = self._times(), self._sizes()
        found = _first_problem(times, sizes)
        if found is not None:
            raise _fail(self.origin, self.lines[found[0]], found[2])
        return Trace(
            times_s=times,
            model_ids=np.asarray(self.ids, dtype=np.int32),
            models=tuple(self.index),
            payload_bytes=sizes,
        )


def _columns_problem(columns: list[str]) -> str | None:
    if tuple(columns[:2]) != COLUMNS:
        return f"the columns must start with timestamp,target_model; got {','.join(columns)}"
    unknown = [c for c in columns[2:] if c not in OPTIONAL_COLUMNS]
    if unknown:
        return (
            f"unknown column {unknown[0]!r}: a trace has timestamp,target_model and "
            "optionally payload_bytes"
        )
    return None


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
    problem = _columns_problem(columns)
    if problem is not None:
        raise _fail(origin, 1, problem)
    builder = _Builder(origin, "payload_bytes" in columns)
    width = len(columns)
    add = builder.add
    for line, row in enumerate(reader, start=2):
        if len(row) != width:
            if not row:
                continue
            raise builder.fail(
                line, f"expected {width} fields ({','.join(columns)}), got {len(row)}"
            )
        add(line, *row)
    return builder.build()


def _read_jsonl(handle: TextIO, origin: str) -> Trace:
    builder: _Builder | None = None

    def fail(line: int, what: str) -> UserInputError:
        return _fail(origin, line, what) if builder is None else builder.fail(line, what)

    for line, text in enumerate(handle, start=1):
        if not text.strip():
            continue
        try:
            row = json.loads(text)
        except json.JSONDecodeError as exc:
            raise fail(line, f"not JSON: {exc.msg}") from None
        if not isinstance(row, dict):
            raise fail(line, "each line must be a JSON object")
        missing = [k for k in COLUMNS if k not in row]
        if missing:
            raise fail(line, f"missing key {missing[0]!r}")
        unknown = [k for k in row if k not in (*COLUMNS, *OPTIONAL_COLUMNS)]
        problem = _columns_problem([*COLUMNS, *unknown])
        if problem is not None:
            raise fail(line, problem)
        if builder is None:
            builder = _Builder(origin, "payload_bytes" in row)
        if (builder.payloads is not None) != ("payload_bytes" in row):
            raise fail(line, "payload_bytes must be on every line or on none")
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
