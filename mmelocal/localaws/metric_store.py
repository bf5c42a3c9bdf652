"""The datapoints the local AWS publishes, kept per period beside moto's copy.

moto stores and sums datapoints; it has no percentiles and never evaluates an alarm. The
control loop (:mod:`.cloudwatch`) writes every datum it sends to moto here too, with the
raw values of each period, so alarm evaluation and percentile statistics read them without
reaching into moto. Times are real seconds since the epoch.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from mmelocal.facts.cloudwatch import START_TIME_ROUNDING_S, SUB_MINUTE_PERIODS_S
from mmelocal.stats import nearest_rank

#: (namespace, metric name, sorted (dimension name, value) pairs)
SeriesKey = tuple[str, str, tuple[tuple[str, str], ...]]
STANDARD_STATISTICS = ("SampleCount", "Sum", "Average", "Minimum", "Maximum")


def series_key(namespace: str, metric: str, dimensions: Iterable[dict[str, str]]) -> SeriesKey:
    """The key of a metric and its dimensions (``[{"Name": ..., "Value": ...}]``)."""
    return namespace, metric, tuple(sorted((d["Name"], d["Value"]) for d in dimensions))


@dataclass
class Datum:
    """One published datum: its time, aggregate and (bounded) raw values."""

    time_s: float
    count: float
    total: float
    minimum: float
    maximum: float
    values: list[float] = field(default_factory=list)


def aggregate(data: Sequence[Datum], statistic: str) -> float | None:
    """``statistic`` (a standard one or ``pNN``/``pNN.N``) over ``data``; None when empty."""
    count = sum(d.count for d in data)
    if not data or count == 0:
        return None
    if statistic == "SampleCount":
        return count
    if statistic == "Sum":
        return sum(d.total for d in data)
    if statistic == "Average":
        return sum(d.total for d in data) / count
    if statistic == "Minimum":
        return min(d.minimum for d in data)
    if statistic == "Maximum":
        return max(d.maximum for d in data)
    if statistic.startswith("p"):
        values = sorted(v for d in data for v in d.values)
        if not values:
            return None
        return nearest_rank(values, float(statistic[1:]) / 100.0)
    raise ValueError(f"unknown statistic {statistic!r}")


def rounded_start(start_s: float, period_s: float, now_s: float) -> float:
    """A statistics query's StartTime as CloudWatch rounds it down: to the minute when it
    is under 15 days old, 5 minutes under 63 days, else the hour; to a multiple of the
    period for periods of 5, 10, 20 and 30 s (:data:`~mmelocal.facts.cloudwatch.
    START_TIME_ROUNDING_S`)."""
    if period_s in SUB_MINUTE_PERIODS_S:
        step = float(period_s)
    else:
        age = now_s - start_s
        step = next(s for limit, s in START_TIME_ROUNDING_S if limit is None or age < limit)
    return math.floor(start_s / step) * step


def is_percentile(statistic: str) -> bool:
    """True for ``p0``..``p100`` (with decimals), CloudWatch's percentile statistics."""
    if not statistic.startswith("p"):
        return False
    try:
        return 0.0 <= float(statistic[1:]) <= 100.0
    except ValueError:
        return False


class MetricStore:
    """Published datapoints per series, for ``retention_s`` (thread-safe); percentiles come
    from at most ``values_per_datum`` raw values of each datum (its newest)."""

    def __init__(self, *, retention_s: float = 3600.0, values_per_datum: int = 1000) -> None:
        self.retention_s = retention_s
        self.values_per_datum = values_per_datum
        self._series: dict[SeriesKey, deque[Datum]] = {}
        self._lock = threading.Lock()

    def add(
        self,
        key: SeriesKey,
        time_s: float,
        values: Sequence[float],
        *,
        count: float | None = None,
        total: float | None = None,
    ) -> None:
        """Record the raw ``values`` of one datum (at least one); ``count`` and ``total``:
        its sample count and sum when ``values`` are only the last of them."""
        if not values:
            return
        kept = list(values[-self.values_per_datum :])
        datum = Datum(
            time_s,
            float(len(values) if count is None else count),
            float(sum(values) if total is None else total),
            min(values),
            max(values),
            kept,
        )
        with self._lock:
            series = self._series.setdefault(key, deque())
            series.append(datum)
            while series and series[0].time_s < time_s - self.retention_s:
                series.popleft()

    def knows(self, key: SeriesKey) -> bool:
        """True when this local AWS publishes ``key``."""
        with self._lock:
            return key in self._series

    def keys(self) -> list[SeriesKey]:
        """Every series published."""
        with self._lock:
            return list(self._series)

    def between(self, key: SeriesKey, start_s: float, end_s: float) -> list[Datum]:
        """The data of ``key`` in ``[start_s, end_s)``."""
        with self._lock:
            series = list(self._series.get(key, ()))
        return [d for d in series if start_s <= d.time_s < end_s]

    def periods(
        self, key: SeriesKey, *, end_s: float, period_s: float, count: int, statistic: str
    ) -> list[float | None]:
        """``statistic`` for each of the ``count`` periods of ``period_s`` ending at
        ``end_s``, oldest first (None: no data in that period)."""
        start = end_s - count * period_s
        data = self.between(key, start, end_s)
        out: list[float | None] = []
        for index in range(count):
            low = start + index * period_s
            inside = [d for d in data if low <= d.time_s < low + period_s]
            out.append(aggregate(inside, statistic))
        return out

    def datapoints(
        self,
        key: SeriesKey,
        *,
        start_s: float,
        end_s: float,
        period_s: float,
        statistics: Sequence[str],
    ) -> list[tuple[float, dict[str, float]]]:
        """``(period start, {statistic: value})`` for each period with data in
        ``[start_s, end_s)``."""
        data = self.between(key, start_s, end_s)
        out = []
        periods = max(1, math.ceil((end_s - start_s) / period_s))
        for index in range(periods):
            low = start_s + index * period_s
            inside = [d for d in data if low <= d.time_s < low + period_s]
            if not inside:
                continue
            values = {s: aggregate(inside, s) for s in statistics}
            out.append((low, {s: v for s, v in values.items() if v is not None}))
        return out


__all__ = [
    "STANDARD_STATISTICS",
    "Datum",
    "MetricStore",
    "SeriesKey",
    "aggregate",
    "is_percentile",
    "rounded_start",
    "series_key",
]
