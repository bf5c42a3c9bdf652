"""PNG plots of bench results (matplotlib's Agg canvas: no display, no global pyplot state).

Every function returns PNG bytes. Inputs are the plain result objects of
:mod:`~mmelocal.bench.loadtest.runner`, :mod:`~mmelocal.bench.capacity.loop` and
:mod:`~mmelocal.bench.sweep.runner`, typed loosely here so this module imports none of them.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from itertools import pairwise
from typing import Any

from mmelocal.errors import MissingDependencyError
from mmelocal.units import MiB


def _figure(width_in: float = 7.5, height_in: float = 4.0) -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise MissingDependencyError("matplotlib", extra="bench", feature="report plots") from exc
    return Figure(figsize=(width_in, height_in), dpi=100, layout="constrained")


def _png(fig: Any) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()


def _from_zero(ax: Any) -> None:
    """Start the y axis at 0 (a dip from 2,300 to 1,900 must not look like a collapse) and
    keep 10 % headroom above the highest point."""
    ax.relim()
    ax.autoscale_view()
    ax.set_ylim(0, max(ax.get_ylim()[1], 1e-9) * 1.1)


def _integer_x(ax: Any) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _none_to_nan(values: Sequence[float | None]) -> list[float]:
    return [float("nan") if v is None else float(v) for v in values]


def _users_axis(ax: Any, steps: Sequence[Any]) -> list[float]:
    """x positions for ``steps``: their user counts when these only rise (the stepped shape);
    otherwise the steps in order, labelled with name and users (a spike shape goes back down,
    and a line drawn against users would double back on itself)."""
    users = [step.users for step in steps]
    if all(a < b for a, b in pairwise(users)):
        ax.set_xlabel("users")
        _integer_x(ax)
        return [float(u) for u in users]
    xs = [float(i) for i in range(len(steps))]
    ax.set_xticks(xs, [f"{step.name}\n{step.users} users" for step in steps], fontsize=8)
    ax.set_xlabel("step")
    return xs


def loadtest_latency_throughput(result: Any) -> bytes:
    """Latency percentiles (left) and throughput (right) against users, one point per step."""
    steps = result.steps
    fig = _figure(9.0, 4.0)
    left, right = fig.subplots(1, 2)
    xs = _users_axis(left, steps)
    for attr, label in (
        ("avg_latency_ms", "avg"),
        ("p50_latency_ms", "p50"),
        ("p95_latency_ms", "p95"),
        ("p99_latency_ms", "p99"),
    ):
        left.plot(xs, _none_to_nan([getattr(s, attr) for s in steps]), marker="o", label=label)
    left.set_ylabel("latency (ms)")
    per = "against users" if left.get_xlabel() == "users" else "per step"
    left.set_title(f"Latency {per}")
    _from_zero(left)
    left.grid(alpha=0.3)
    left.legend()
    _users_axis(right, steps)
    right.plot(xs, [s.throughput_rps for s in steps], marker="o", color="tab:green")
    right.set_ylabel("requests / s")
    right.set_title(f"Throughput {per}")
    _from_zero(right)
    right.grid(alpha=0.3)
    return _png(fig)


def loadtest_success_failure(result: Any) -> bytes:
    """Stacked bars of successful and failed requests per step."""
    steps = result.steps
    labels = [f"{step.users}" for step in steps]
    xs = list(range(len(steps)))
    fig = _figure()
    ax = fig.subplots()
    ok = [step.successes for step in steps]
    bad = [step.failures for step in steps]
    ax.bar(xs, ok, color="tab:green", label="successful")
    ax.bar(xs, bad, bottom=ok, color="tab:red", label="failed")
    for x, good, failed in zip(xs, ok, bad, strict=True):
        if failed:  # a few failures among thousands would be an invisible sliver of red
            ax.text(
                x,
                good + failed,
                f"{failed:,} failed",
                ha="center",
                va="bottom",
                color="tab:red",
                fontsize=8,
            )
    ax.set_xticks(xs, labels)
    ax.set_xlabel("users (per step)")
    ax.set_ylabel("requests")
    ax.set_title("Successful and failed requests per step")
    ax.set_ylim(0, max([g + f for g, f in zip(ok, bad, strict=True)], default=0) * 1.2 or 1)
    ax.legend(loc="upper left", ncols=2)
    return _png(fig)


def capacity_memory(result: Any) -> bytes:
    """Memory in use against models loaded, with the baseline and the threshold line."""
    fig = _figure()
    ax = fig.subplots()
    counts = [0] + [load.copies for load in result.loads]
    used = [result.baseline_bytes / MiB] + [load.used_bytes / MiB for load in result.loads]
    ax.plot(counts, used, marker="o", label=f"used ({result.probe})")
    ax.axhline(
        result.threshold * result.total_bytes / MiB,
        color="tab:red",
        linestyle="--",
        label=f"threshold {result.threshold:.0%} of {result.total_bytes / MiB:,.0f} MiB",
    )
    crossing = getattr(result, "next_copy", None)
    if crossing is not None:
        ax.plot(
            [counts[-1], crossing.copies],
            [used[-1], crossing.used_bytes / MiB],
            linestyle=":",
            color="tab:red",
        )
        ax.scatter(
            [crossing.copies],
            [crossing.used_bytes / MiB],
            marker="X",
            s=80,
            color="tab:red",
            zorder=3,
            label=f"copy {crossing.copies} crossed",
        )
    _from_zero(ax)
    _integer_x(ax)
    ax.set_xlabel("models loaded")
    ax.set_ylabel("memory in use (MiB)")
    ax.set_title(f"Memory against models loaded: {result.label or result.source}")
    ax.grid(alpha=0.3)
    ax.legend()
    return _png(fig)


def sweep_comparison(result: Any) -> bytes:
    """Invocations per minute per instance (left) and latency at that load (right)."""
    rows = [row for row in result.rows if row.status == "ok"]
    fig = _figure(9.0, 4.0)
    left, right = fig.subplots(1, 2)
    names = [row.name for row in rows]
    xs = list(range(len(rows)))
    per_minute = _none_to_nan([row.invocations_per_minute for row in rows])
    left.bar(xs, per_minute, color="tab:blue")
    for x, value in zip(xs, per_minute, strict=True):
        if math.isnan(value):
            left.text(x, 0, "none within\nthe limit", ha="center", va="bottom", fontsize=8)
    left.set_xticks(xs, names, rotation=30)
    cpu = getattr(result, "relative_only", False)  # a CPU's rate, for a GPU instance type
    left.set_ylabel(
        "invocations / minute, this CPU host" if cpu else "invocations / minute / instance"
    )
    left.set_title(
        "CPU throughput within the latency limit" if cpu else "Throughput within the latency limit"
    )
    right.bar(xs, _none_to_nan([row.p99_latency_ms for row in rows]), color="tab:orange")
    right.axhline(result.max_latency_ms, color="tab:red", linestyle="--", label="limit")
    right.set_xticks(xs, names, rotation=30)
    right.set_ylabel("p99 latency at that load (ms)")
    right.set_title("CPU latency at that load" if cpu else "Latency at that load")
    right.legend()
    return _png(fig)


def sweep_throughput_curves(result: Any) -> bytes:
    """Throughput against users for every configuration that ran."""
    fig = _figure()
    ax = fig.subplots()
    for row in result.rows:
        if row.loadtest is None:
            continue
        steps = row.loadtest.steps
        ax.plot(
            [s.users for s in steps], [s.throughput_rps for s in steps], marker="o", label=row.name
        )
    ax.set_xlabel("users")
    ax.set_ylabel("requests / s")
    _from_zero(ax)
    _integer_x(ax)
    ax.set_title("Throughput against users per configuration")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)  # beside, not on, the lines
    return _png(fig)


__all__ = [
    "capacity_memory",
    "loadtest_latency_throughput",
    "loadtest_success_failure",
    "sweep_comparison",
    "sweep_throughput_curves",
]
