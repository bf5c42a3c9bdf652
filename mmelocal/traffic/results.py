"""What a replay or a simulation found, as one JSON shape, plus the HTML report.

Keys (both sources): ``requests``, ``answered``, ``errors`` (total) and
``errors_by_class``, ``hit_ratio`` (the mean of ``ModelCacheHit`` as the emulator and the
service count it: one sample per request that reached its model, 1 when the model was
already loaded, a failed request too; a request refused before it reached a model is none;
None when there was no sample), ``cache_hit_samples`` (those samples), ``cold_starts`` (the
samples of 0: requests that found their model not loaded, answered or not) and
``cold_starts_per_min`` (over the time up to the last request; None when that is 0 s),
``loads``, ``max_loaded`` (most models loaded at once, all instances together; a replay of
``mmelocal serve`` adds ``max_loaded_per_instance``, the most one instance held, and
``emulator_instances``),
``cold_load_s_p50``, ``latency_ms`` (``p50``/``p90``/``p99`` of the answered requests,
with ``warm`` and ``cold`` apart; nearest rank, :mod:`mmelocal.stats`), ``timeline`` (per time
bin: rate, hit ratio, loaded models, p99, instances). A simulation adds ``instance_hours``
and ``cost``.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mmelocal.errors import UserInputError
from mmelocal.stats import nearest_rank

#: timeline bins per report
TIMELINE_BINS = 100


@dataclass(frozen=True)
class TrafficResult:
    """The JSON document (``data``) of one replay or simulation."""

    data: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def write_json(self, path: Path | str) -> Path:
        """Write the JSON document."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.data, indent=2) + "\n", encoding="utf-8")
        return path

    @classmethod
    def read_json(cls, path: Path | str) -> TrafficResult:
        """A result written by :meth:`write_json` (``replay --json`` or ``simulate --json``)."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise UserInputError(f"cannot read traffic result {path}: {exc}") from exc
        return cls.from_document(data, path)

    @classmethod
    def from_document(cls, data: object, path: Path | str) -> TrafficResult:
        """The result a JSON document read from ``path`` holds (a
        :class:`~mmelocal.errors.UserInputError` naming ``path`` when it is none)."""
        if not isinstance(data, dict) or "hit_ratio" not in data:
            raise UserInputError(
                f"{path} is not a traffic result (no hit_ratio): give the --json of "
                "`mmelocal traffic replay` or `simulate`"
            )
        return cls(data)


def _percentiles_ms(values_s: np.ndarray) -> dict[str, float | None]:
    if not len(values_s):
        return {"p50": None, "p90": None, "p99": None}
    ordered = np.sort(values_s).tolist()  # numpy sorts: millions of requests in a simulation
    return {f"p{q}": nearest_rank(ordered, q / 100) * 1e3 for q in (50, 90, 99)}


def _p50(values_s: np.ndarray | None) -> float | None:
    """The median by nearest rank (an observed value); None when there is none."""
    if values_s is None or not len(values_s):
        return None
    return nearest_rank(np.sort(values_s).tolist(), 0.5)


def per_minute(count: int, duration_s: float) -> float | None:
    """``count`` per minute over ``duration_s``; for a trace at one instant (0 s) no rate
    (None), unless there was nothing to count (0)."""
    if duration_s > 0:
        return count / (duration_s / 60.0)
    return None if count else 0.0


def summarize(
    *,
    source: str,
    times_s: np.ndarray,
    latency_s: np.ndarray,
    hit: np.ndarray,
    ok: np.ndarray | None,
    sampled: np.ndarray | None,
    errors: Mapping[str, int],
    loaded: np.ndarray | None,
    load_times_s: np.ndarray,
    loads: int,
    instances: Sequence[tuple[float, int]] = (),
    instance_hours: float | None = None,
    instance_type: str | None = None,
    price_per_hour: float | None = None,
    service_measured: bool = True,
    max_loaded: int | None = None,
    load_cycle_s: np.ndarray | None = None,
    extra: Mapping[str, Any] | None = None,
) -> TrafficResult:
    """One result document from per-request arrays (see the module docstring).

    ``hit``: the request's ``ModelCacheHit`` (its model was already loaded); ``ok``: it was
    answered (None: all were); ``sampled``: it reached its model, so it is a
    ``ModelCacheHit`` sample, answered or not (None: all did). ``load_times_s`` are the
    loads themselves (Triton's load call on the emulator); ``load_cycle_s`` (replay of an
    emulator) how long each load held its instance, eviction and download included: what a
    simulation takes as ``--load-seconds``.
    """
    n = len(times_s)
    ok_mask = np.ones(n, dtype=np.bool_) if ok is None else ok
    sample_mask = np.ones(n, dtype=np.bool_) if sampled is None else sampled
    hits = hit & sample_mask
    samples = int(sample_mask.sum())
    answered = int(ok_mask.sum())
    cold = sample_mask & ~hit
    duration = float(times_s[-1]) if n else 0.0
    cold_count = int(cold.sum())
    lat_ok = latency_s[ok_mask]
    if max_loaded is None:
        max_loaded = int(loaded.max()) if loaded is not None and len(loaded) else 0
    data: dict[str, Any] = {
        "source": source,
        "requests": n,
        "answered": answered,
        "errors": int(sum(errors.values())),
        "errors_by_class": dict(errors),
        "hit_ratio": float(hits.sum() / samples) if samples else None,
        "cache_hit_samples": samples,
        "cold_starts": cold_count,
        "cold_starts_per_min": per_minute(cold_count, duration),
        "loads": int(loads),
        "max_loaded": int(max_loaded),
        "cold_load_s_p50": _p50(load_times_s),
        "cold_load_s": [round(float(x), 4) for x in load_times_s[:10_000]],
        "load_cycle_s_p50": _p50(load_cycle_s),
        "load_cycle_s": [round(float(x), 4) for x in load_cycle_s[:10_000]]
        if load_cycle_s is not None
        else [],
        "duration_s": duration,
        "latency_ms": {
            **_percentiles_ms(lat_ok),
            "warm": _percentiles_ms(latency_s[hits & ok_mask]),
            "cold": _percentiles_ms(latency_s[cold & ok_mask]),
        },
        "latency_measured": service_measured,
    }
    if instances:
        data["instances"] = [[float(t), int(c)] for t, c in instances]
        data["max_instances"] = max(c for _, c in instances)
    if instance_hours is not None:
        data["instance_hours"] = instance_hours
        data["instance_type"] = instance_type
        hours = duration / 3600.0
        if price_per_hour is not None:
            data["cost"] = {
                "price_per_hour": price_per_hour,
                "total": instance_hours * price_per_hour,
                "per_hour": instance_hours * price_per_hour / hours if hours > 0 else None,
            }
        else:
            data["cost"] = None
    if extra:
        data.update(extra)
    data["timeline"] = _timeline(
        times_s, latency_s, hits, ok_mask, sample_mask, loaded, instances, duration
    )
    return TrafficResult(data)


def _timeline(
    times_s: np.ndarray,
    latency_s: np.ndarray,
    hits: np.ndarray,
    ok: np.ndarray,
    sampled: np.ndarray,
    loaded: np.ndarray | None,
    instances: Sequence[tuple[float, int]],
    duration: float,
) -> dict[str, list[Any]]:
    if not len(times_s):
        return {}
    bin_s = max(1.0, math.ceil(duration / TIMELINE_BINS))
    bins = (times_s / bin_s).astype(np.int64)
    count = int(bins[-1]) + 1
    requests = np.bincount(bins, minlength=count)
    samples = np.bincount(bins, weights=sampled, minlength=count)
    hit_count = np.bincount(bins, weights=hits, minlength=count)
    edges = np.searchsorted(bins, np.arange(count + 1))
    p99: list[float | None] = []
    most_loaded: list[int | None] = []
    for b in range(count):
        lo, hi = edges[b], edges[b + 1]
        lat = latency_s[lo:hi][ok[lo:hi]]
        p99.append(nearest_rank(np.sort(lat).tolist(), 0.99) * 1e3 if len(lat) else None)
        if loaded is not None:
            most_loaded.append(int(loaded[lo:hi].max()) if hi > lo else None)
    starts = np.arange(count) * bin_s
    out: dict[str, list[Any]] = {
        "t_s": starts.tolist(),
        "rate_rps": (requests / bin_s).tolist(),
        "hit_ratio": [float(h / a) if a else None for h, a in zip(hit_count, samples, strict=True)],
        "p99_ms": p99,
    }
    if loaded is not None:
        out["loaded"] = most_loaded
    if instances:
        change_t = np.asarray([t for t, _ in instances])
        counts = np.asarray([c for _, c in instances])
        out["instances"] = counts[np.searchsorted(change_t, starts, side="right") - 1].tolist()
    return out


def write_html(result: TrafficResult, path: Path | str, *, title: str) -> Path:
    """An HTML page: the figures as a table and plots over time (rate, hit ratio, loaded
    models, p99 latency, instances when they changed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = result.data
    tl = data.get("timeline") or {}
    panels = [("rate_rps", "requests/s"), ("hit_ratio", "hit ratio"), ("p99_ms", "p99 (ms)")]
    if "loaded" in tl:
        panels.insert(2, ("loaded", "models loaded"))
    if len(set(tl.get("instances", []))) > 1:
        panels.append(("instances", "instances"))
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 2.0 * len(panels)), sharex=True)
    for ax, (key, label) in zip(np.atleast_1d(axes), panels, strict=True):
        values = [np.nan if v is None else v for v in tl.get(key, [])]
        ax.plot(tl.get("t_s", []), values, drawstyle="steps-post")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    np.atleast_1d(axes)[-1].set_xlabel("seconds from the start")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    image = base64.b64encode(buf.getvalue()).decode()
    rows = "".join(
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>"
        for k, v in summary_rows(result)
    )
    notes = "".join(f"<p>{html.escape(n)}</p>" for n in data.get("notes", []))
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        "<style>body{font-family:sans-serif;max-width:60em;margin:auto}"
        "th{text-align:left;padding-right:2em}</style></head><body>"
        f"<h1>{html.escape(title)}</h1><table>{rows}</table>{notes}"
        f"<img alt='over time' src='data:image/png;base64,{image}'></body></html>"
    )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
    return path


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _pair(lat: dict[str, Any] | None) -> str:
    return "-" if lat is None else f"{_ms(lat['p50'])} / {_ms(lat['p99'])}"


def summary_rows(result: TrafficResult) -> list[tuple[str, str]]:
    """The headline figures as (name, text) rows, for the CLI table and the HTML page."""
    d = result.data
    lat = d["latency_ms"]
    hit = d["hit_ratio"]
    rows = [
        ("source", d["source"]),
        ("requests", f"{d['requests']:,}"),
        ("errors", f"{d['errors']:,}" + (f" {d['errors_by_class']}" if d["errors"] else "")),
        ("hit ratio (ModelCacheHit)", "-" if hit is None else f"{hit:.3f}"),
        (
            "cold starts",
            "-"
            if d["cold_starts"] is None
            else f"{d['cold_starts']:,} ("
            + (
                "rate: the trace spans 0 s"
                if d["cold_starts_per_min"] is None
                else f"{d['cold_starts_per_min']:.2f}/min"
            )
            + ")",
        ),
        ("loads", f"{d['loads']:,}"),
        ("most models loaded at once", f"{d['max_loaded']:,}"),
        (
            "cold-load time p50 (s)",
            "-" if d["cold_load_s_p50"] is None else f"{d['cold_load_s_p50']:.2f}",
        ),
        (
            "latency p50 / p90 / p99 (ms)",
            f"{_ms(lat['p50'])} / {_ms(lat['p90'])} / {_ms(lat['p99'])}",
        ),
        ("warm p50 / p99 (ms)", _pair(lat["warm"])),
        ("cold p50 / p99 (ms)", _pair(lat["cold"])),
    ]
    if d.get("download_seconds_source") is not None:
        rows.append(
            ("downloads (artifacts deleted)", f"{d['downloads']:,} ({d['artifacts_deleted']:,})")
        )
    if d.get("failed_loads"):
        rows.append((f"failed loads (past {d['load_limit_s']:g} s)", f"{d['failed_loads']:,}"))
    if "instance_hours" in d:
        rows.append(("instance-hours", f"{d['instance_hours']:.3f}"))
        if d.get("max_instances") is not None:
            rows.append(("most instances", f"{d['max_instances']}"))
        cost = d.get("cost")
        if cost:
            rows.append(
                ("cost (total / per hour)", f"{cost['total']:.2f} / {_ms(cost['per_hour'])}")
            )
    return rows


__all__ = [
    "TIMELINE_BINS",
    "TrafficResult",
    "per_minute",
    "summarize",
    "summary_rows",
    "write_html",
]
