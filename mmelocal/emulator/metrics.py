"""The emulator's metrics under SageMaker's CloudWatch names, in Prometheus text format.

Times are in microseconds, as CloudWatch reports them. Time metrics are Prometheus
summaries (``_count``, ``_sum`` and the 0.5/0.9/0.99 quantiles of a recent window);
``ModelCacheHit`` is a summary of 0/1 values, so its average is the hit ratio; the
invocation counters are counters; instance figures (utilizations, ``LoadedModelCount``)
are gauges read when scraped. Recording is O(1) and lock-free (one event loop); a served
invocation's times are kept as one tuple and folded into the summaries when they are read.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from mmelocal.errors import UserInputError
from mmelocal.facts.cloudwatch import INSTANCE_METRICS, INVOCATION_METRICS
from mmelocal.facts.runtime_api import DEFAULT_VARIANT_NAME
from mmelocal.stats import nearest_rank

#: name -> help text; the order is the order in the exposition.
SUMMARIES: dict[str, str] = {
    "ModelCacheHit": "1 when the target was already loaded (average = hit ratio)",
    "ModelLoadingWaitTime": "microseconds an invocation waited for its model to load",
    "ModelLoadingTime": "microseconds Triton took to load a model",
    "ModelUnloadingTime": "microseconds Triton took to unload a model",
    "ModelDownloadingTime": "microseconds to download and extract a model artifact",
    "ModelLatency": "microseconds the model (Triton) took to answer",
    "OverheadLatency": "microseconds the platform added beside the model",
}
COUNTERS: dict[str, str] = {
    "Invocations": "invocations received",
    "Invocation4XXErrors": "invocations the model answered with a 4xx status (Triton's "
    "status; the platform's own where no model answer came)",
    "Invocation5XXErrors": "invocations the model answered with a 5xx status (Triton's "
    "status; the platform's own where no model answer came)",
    "ModelLoads": "models loaded into Triton",
    "ModelUnloads": "models unloaded from Triton",
    "ModelEvictions": "models unloaded to make room (least recently used)",
    "InvocationRetries": "invocations forwarded again (after a 404 or 507 from Triton, or a "
    "kept-alive connection Triton had closed)",
}
GAUGES: dict[str, str] = {
    "LoadedModelCount": "models loaded in Triton",
    "MemoryUtilization": "percent of the memory budget (host) in use",
    "GPUMemoryUtilization": "percent of GPU memory in use",
    "GPUUtilization": "percent GPU utilization",
    "CPUUtilization": "percent CPU of the Triton processes (100 = one core)",
    "DiskUtilization": "percent of the artifact disk budget in use",
}
QUANTILES = (0.5, 0.9, 0.99)
#: served invocations recorded before they are folded into the summaries (when nothing
#: reads them sooner): recording one is an append
_FOLD_EVERY = 512
#: the emulator's own counters (not CloudWatch metrics: mmelocal's additions)
OWN_COUNTERS = frozenset(("ModelLoads", "ModelUnloads", "ModelEvictions", "InvocationRetries"))


def _check_names() -> None:
    """Every CloudWatch name here is one of :mod:`mmelocal.facts.cloudwatch`'s (their home)."""
    cloudwatch = {*INVOCATION_METRICS, *INSTANCE_METRICS}
    unknown = {*SUMMARIES, *GAUGES, *(set(COUNTERS) - OWN_COUNTERS)} - cloudwatch
    if unknown:
        raise RuntimeError(f"metric names not in mmelocal.facts.cloudwatch: {sorted(unknown)}")


_check_names()


@dataclass
class Summary:
    """Count, sum and a bounded window of recent values."""

    window: int = 4096
    count: int = 0
    total: float = 0.0
    recent: deque[float] = field(default_factory=deque)

    def __post_init__(self) -> None:
        if self.window < 1:
            raise UserInputError(f"window must be >= 1, got {self.window}")
        self.recent = deque(maxlen=self.window)

    def observe(self, value: float) -> None:
        """Record one value."""
        self.count += 1
        self.total += value
        self.recent.append(value)

    def observe_all(self, values: list[float]) -> None:
        """Record ``values`` in order (as many :meth:`observe` calls would)."""
        total = self.total
        for value in values:
            total += value
        self.total = total
        self.count += len(values)
        self.recent.extend(values)

    @property
    def mean(self) -> float:
        """Average over all values (NaN when none)."""
        return self.total / self.count if self.count else math.nan

    def quantiles(self, qs: Iterable[float] = QUANTILES) -> dict[float, float]:
        """Quantiles of the recent window."""
        values = sorted(self.recent)
        return {q: nearest_rank(values, q) for q in qs}


class Metrics:
    """Counters, summaries and gauge sources of one emulated endpoint."""

    def __init__(
        self, *, endpoint_name: str = "local", variant_name: str = DEFAULT_VARIANT_NAME
    ) -> None:
        self.labels = {"EndpointName": endpoint_name, "VariantName": variant_name}
        self._summaries = {name: Summary() for name in SUMMARIES}
        self.counters = dict.fromkeys(COUNTERS, 0)
        self._gauges: Callable[[], Mapping[str, float]] | None = None
        #: served invocations not yet folded into the summaries: (overhead s, model
        #: latency s, cache hit, load wait s), folded when the summaries are read
        self._served: list[tuple[float, float, bool, float]] = []

    @property
    def summaries(self) -> dict[str, Summary]:
        """The summaries, every recorded value included."""
        if self._served:
            self._fold()
        return self._summaries

    def _fold(self) -> None:
        """Fold the served invocations recorded so far into the summaries, in order."""
        served, self._served = self._served, []
        summaries = self._summaries
        summaries["ModelCacheHit"].observe_all([1.0 if s[2] else 0.0 for s in served])
        # a miss waited for its model; a hit waited only when its recovery reloaded it
        summaries["ModelLoadingWaitTime"].observe_all(
            [s[3] * 1e6 for s in served if not s[2] or s[3] > 0.0]
        )
        summaries["ModelLatency"].observe_all([s[1] * 1e6 for s in served])
        # negative readings as 0 (max(0.0, x), NaN included)
        summaries["OverheadLatency"].observe_all(
            [s[0] * 1e6 if s[0] > 0.0 else 0.0 for s in served]
        )

    def set_gauge_source(self, source: Callable[[], Mapping[str, float]]) -> None:
        """A callable returning the current gauge values (called at scrape time)."""
        self._gauges = source

    def observe(self, name: str, value: float) -> None:
        """Record ``value`` on the summary ``name`` (microseconds for times)."""
        self.summaries[name].observe(value)

    def inc(self, name: str, by: int = 1) -> None:
        """Increase the counter ``name``."""
        self.counters[name] += by

    def _count_invocation(self, status: int) -> None:
        """Count one invocation and its 4xx/5xx class, CloudWatch's meaning: the status
        the model returned (Triton's, not the caller's: Triton's 500 reaches the caller
        as a 424 ``ModelError`` and counts as a 5xx); where no model answer came (a
        failed load, a refusal), the status the platform answered."""
        counters = self.counters
        counters["Invocations"] += 1
        if 400 <= status < 500:
            counters["Invocation4XXErrors"] += 1
        elif status >= 500:
            counters["Invocation5XXErrors"] += 1

    def record_invocation(
        self, status: int, overhead_s: float | None = None, cache_hit: bool | None = None
    ) -> None:
        """One invocation no model answered (``status``: the platform's answer);
        ``overhead_s``: the time the platform added beside the model
        (``OverheadLatency``, negative readings as 0); ``cache_hit``: whether its model
        was already loaded, for a call that got as far as its model (``ModelCacheHit``
        counts every InvokeEndpoint request "for which the model was already loaded",
        its average the ratio of those: a failed call is a sample too, 0 for a model
        that was not loaded); None for a call refused before (no sample)."""
        if overhead_s is not None:
            self.summaries["OverheadLatency"].observe(max(0.0, overhead_s) * 1e6)
        if cache_hit is not None:
            self.summaries["ModelCacheHit"].observe(1.0 if cache_hit else 0.0)
        self._count_invocation(status)

    def record_served(
        self,
        status: int,
        overhead_s: float,
        model_latency_s: float,
        cache_hit: bool,
        wait_s: float = 0.0,
    ) -> None:
        """One invocation Triton answered with ``status``, in one call (the invocation
        path's): the cache hit, the load wait (misses, and hits whose recovery waited for a
        reload), the model's latency, the
        overhead, and the counts (:meth:`_count_invocation`'s). The summaries take the
        values when next read (:attr:`summaries`), at most :data:`_FOLD_EVERY` later."""
        served = self._served
        served.append((overhead_s, model_latency_s, cache_hit, wait_s))
        if len(served) >= _FOLD_EVERY:
            self._fold()
        self._count_invocation(status)

    def snapshot(self) -> dict[str, object]:
        """Plain data: counters, summary count/mean/p50/p99, gauges (for JSON and tests)."""
        out: dict[str, object] = dict(self.counters)
        for name, summary in self.summaries.items():
            qs = summary.quantiles((0.5, 0.99))
            out[name] = {
                "count": summary.count,
                "mean": _finite(summary.mean),
                "p50": _finite(qs[0.5]),
                "p99": _finite(qs[0.99]),
            }
        if self._gauges is not None:
            out.update(self._gauges())
        return out

    def render(self, gauges: Mapping[str, float] | None = None) -> str:
        """The Prometheus text exposition (version 0.0.4)."""
        labels = ",".join(f'{k}="{_escape(v)}"' for k, v in self.labels.items())
        lines: list[str] = []
        values = gauges if gauges is not None else (self._gauges() if self._gauges else {})
        for name, help_text in GAUGES.items():
            if name not in values:
                continue
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
            lines.append(f"{name}{{{labels}}} {_num(values[name])}")
        for name, help_text in COUNTERS.items():
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} counter"]
            lines.append(f"{name}{{{labels}}} {self.counters[name]}")
        for name, help_text in SUMMARIES.items():
            summary = self.summaries[name]
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} summary"]
            for q, v in summary.quantiles().items():
                lines.append(f'{name}{{{labels},quantile="{q}"}} {_num(v)}')
            lines.append(f"{name}_sum{{{labels}}} {_num(summary.total)}")
            lines.append(f"{name}_count{{{labels}}} {summary.count}")
        return "\n".join(lines) + "\n"


def _finite(value: float) -> float | None:
    """None for NaN (JSON has no NaN)."""
    return None if math.isnan(value) else value


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _num(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.3f}"


def parse_prometheus(text: str) -> dict[str, float]:
    """``{"name{labels}": value}`` from an exposition (for tests and the demo)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        out[key] = float(value)
    return out


__all__ = [
    "COUNTERS",
    "GAUGES",
    "SUMMARIES",
    "Metrics",
    "Summary",
    "parse_prometheus",
]
