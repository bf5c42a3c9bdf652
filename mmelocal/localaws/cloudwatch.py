"""The endpoints' metrics in the local AWS's CloudWatch, and alarms that change state.

:class:`ControlLoop` is the platform's clock: every period (``60 / time_scale`` real
seconds) it publishes each running variant's metrics into moto through CloudWatch's API
(``PutMetricData``, real timestamps, the cloud's names, namespaces, dimensions and units
from :mod:`mmelocal.facts.cloudwatch`), keeps a copy with the raw values
(:class:`~.metric_store.MetricStore`), evaluates every metric alarm on those metrics with
:func:`mmelocal.rules.autoscaling.alarm_state` (moto never does) and sets the new states
through ``SetAlarmState``, then lets the autoscaler act (:mod:`.scaling`).

:class:`CloudWatchOverlay` completes moto's answers where it falls short: alarms start at
``INSUFFICIENT_DATA``, ``DescribeAlarmHistory``, and percentile statistics
(``ExtendedStatistics``, ``pNN`` in ``GetMetricData``) for the published metrics.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import logging
import math
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from mmelocal.errors import UserInputError
from mmelocal.facts.autoscaling import METRIC_PERIOD_S
from mmelocal.facts.cloudwatch import (
    EVALUATION_RANGE_EXTRA_PERIODS,
    INSTANCE_METRICS,
    INSTANCE_NAMESPACE,
    INVOCATION_METRICS,
    INVOCATION_NAMESPACE,
    low_sample_count,
    published_unit,
)
from mmelocal.localaws.background import BackgroundThread
from mmelocal.localaws.metric_store import (
    STANDARD_STATISTICS,
    MetricStore,
    is_percentile,
    series_key,
)
from mmelocal.rules.autoscaling import alarm_state

logger = logging.getLogger(__name__)

#: the emulator's counters published as they are (their per-period increase)
_COUNTERS = ("Invocations", "Invocation4XXErrors", "Invocation5XXErrors")
#: counted as the service sends them: "For each 4xx response, 1 is sent; otherwise, 0 is
#: sent" (SageMaker Developer Guide, endpoint invocation metrics), one sample per invocation
_ERROR_COUNTS = ("Invocation4XXErrors", "Invocation5XXErrors")
#: the emulator's summaries published with their raw values
_SUMMARIES = tuple(
    name for name in INVOCATION_METRICS if name not in (*_COUNTERS, "InvocationsPerInstance")
)
_WORDS = {
    "GreaterThanThreshold": "greater than",
    "GreaterThanOrEqualToThreshold": "greater than or equal to",
    "LessThanThreshold": "less than",
    "LessThanOrEqualToThreshold": "less than or equal to",
}
#: (region) -> a boto3 client of the local AWS for that service (mmelocal's own calls)
ClientFor = Callable[[str, str], Any]


@dataclass
class Running:
    """One variant in service: what the control loop reads its metrics from."""

    region: str
    endpoint_name: str
    variant_name: str
    fleet: Any  # localaws.fleet.Fleet


@dataclass
class HistoryItem:
    """One ``DescribeAlarmHistory`` item; ``number``: its place in the order items were
    recorded (unique: what orders items of the same ``time_s``)."""

    region: str
    alarm_name: str
    time_s: float
    kind: str
    summary: str
    data: dict[str, Any]
    number: int

    def described(self) -> dict[str, Any]:
        """The item as the API answers it."""
        return {
            "AlarmName": self.alarm_name,
            "AlarmType": "MetricAlarm",
            "Timestamp": self.time_s,
            "HistoryItemType": self.kind,
            "HistorySummary": self.summary,
            "HistoryData": json.dumps(self.data),
        }


class _Reader:
    """Per-fleet deltas of the emulator's counters and summaries between two reads (the
    cursor is keyed by the fleet itself: an id() is reused once a deleted endpoint's fleet
    is gone, and a new fleet must start from zero)."""

    def __init__(self) -> None:
        self._last: weakref.WeakKeyDictionary[Any, dict[str, int]] = weakref.WeakKeyDictionary()
        self._sums: weakref.WeakKeyDictionary[Any, dict[str, float]] = weakref.WeakKeyDictionary()

    def read(self, fleet: Any) -> tuple[dict[str, list[float]], dict[str, tuple[int, float]]]:
        """The values recorded since the last read (a summary's: those its recent window
        still holds; an error count's: its 0s and 1s) and, per summary and error count,
        the exact sample count and sum of all of them."""
        emulator = fleet.server.emulator

        async def snapshot() -> tuple[dict[str, int], dict[str, tuple[int, float, list[float]]]]:
            summaries = emulator.metrics.summaries
            taken = {
                name: (summaries[name].count, summaries[name].total, list(summaries[name].recent))
                for name in _SUMMARIES
                if name in summaries
            }
            return dict(emulator.metrics.counters), taken

        counters, summaries = fleet.server.call(snapshot(), timeout_s=10.0)
        last = self._last.setdefault(fleet, {})
        sums = self._sums.setdefault(fleet, {})
        out: dict[str, list[float]] = {}
        totals: dict[str, tuple[int, float]] = {}
        for name in _COUNTERS:
            now = int(counters.get(name, 0))
            out[name] = [float(now - last.get(name, 0))]
            last[name] = now
        calls = int(out["Invocations"][0])
        for name in _ERROR_COUNTS:
            errors = int(out[name][0])
            if calls > 0:  # 1 or 0 per invocation: Sum the errors, Average the error rate
                out[name] = ([0.0] if errors < calls else []) + ([1.0] if errors else [])
                totals[name] = (calls, float(errors))
        for name, (count, total, recent) in summaries.items():
            new = count - last.get(name, 0)
            new_sum = total - sums.get(name, 0.0)
            last[name], sums[name] = count, total
            if new > 0 and recent:
                out[name] = recent[-min(new, len(recent)) :]
                totals[name] = (new, new_sum)
        return out, totals

    def forget(self, alive: Iterable[Any]) -> None:
        keep = set(alive)
        for key in [k for k in list(self._last.keys()) if k not in keep]:
            del self._last[key]
            self._sums.pop(key, None)


class ControlLoop:
    """The platform's clock (see the module docstring). ``running()`` lists the variants
    in service; ``on_tick(now_s)`` callbacks run after each evaluation."""

    def __init__(
        self,
        *,
        client_for: ClientFor,
        running: Callable[[], list[Running]],
        regions: Callable[[], Iterable[str]],
        time_scale: float = 1.0,
        store: MetricStore | None = None,
    ) -> None:
        if not time_scale > 0:
            raise ValueError(f"time_scale must be > 0, got {time_scale}")
        self._client_for = client_for
        self._running = running
        self._regions = regions
        self.time_scale = time_scale
        self.store = store or MetricStore()
        self.history: list[HistoryItem] = []
        self.history_lock = threading.Lock()
        self._recorded = itertools.count()
        self.on_tick: list[Callable[[float], None]] = []
        self._reader = _Reader()
        self._loop = BackgroundThread(self._run, "localaws-clock")
        self.ticks = 0
        self._tick_done = threading.Condition()
        #: one period published at a time: a tick by hand waits for the clock's own
        self._tick_lock = threading.Lock()

    @property
    def period_s(self) -> float:
        """One CloudWatch period on this clock, in real seconds."""
        return METRIC_PERIOD_S / self.time_scale

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> None:
        """Run on a background thread until :meth:`stop`."""
        self._loop.start()

    def stop(self) -> None:
        """Stop ticking (idempotent)."""
        self._loop.stop()

    def wait_ticks(self, count: int, timeout_s: float) -> bool:
        """Wait until ``count`` more periods were published and evaluated (tests)."""
        with self._tick_done:
            target = self.ticks + count
            return self._tick_done.wait_for(lambda: self.ticks >= target, timeout=timeout_s)

    def _run(self) -> None:
        while not self._loop.stopping.is_set():
            period = self.period_s
            boundary = (math.floor(time.time() / period) + 1) * period
            if self._loop.stopping.wait(max(0.0, boundary - time.time())):
                return
            try:
                self.tick(boundary - period, boundary)
            except Exception:
                logger.exception("the local AWS's control loop failed a period; it goes on")
            with self._tick_done:
                self.ticks += 1
                self._tick_done.notify_all()

    def tick(self, start_s: float, end_s: float) -> None:
        """Publish the period ``[start_s, end_s)``, evaluate the alarms, run the callbacks
        (one tick at a time: a call is published once whichever tick reads it)."""
        with self._tick_lock:
            self._tick(start_s, end_s)

    def _tick(self, start_s: float, end_s: float) -> None:
        running = self._running()
        for item in running:
            try:
                self._publish(item, start_s)
            except Exception as exc:  # a fleet stopping under us: its data ends here
                logger.debug(
                    "no metrics from %s/%s: %s", item.endpoint_name, item.variant_name, exc
                )
        self._reader.forget(item.fleet for item in running)
        for region in list(self._regions()):
            self._evaluate(region, end_s)
        for callback in list(self.on_tick):
            callback(end_s)

    # -- publishing --------------------------------------------------------------------
    def _publish(self, item: Running, start_s: float) -> None:
        deltas, totals = self._reader.read(item.fleet)
        instances = max(1, item.fleet.instance_count)
        deltas["InvocationsPerInstance"] = [deltas["Invocations"][0] / instances]
        gauges = self._gauges(item.fleet)
        dimensions = [
            {"Name": "EndpointName", "Value": item.endpoint_name},
            {"Name": "VariantName", "Value": item.variant_name},
        ]
        stamp = dt.datetime.fromtimestamp(start_s, dt.UTC)
        cloudwatch = self._client_for("cloudwatch", item.region)
        for namespace, units, values in (
            (INVOCATION_NAMESPACE, INVOCATION_METRICS, deltas),
            (INSTANCE_NAMESPACE, INSTANCE_METRICS, gauges),
        ):
            data = []
            for name, unit in units.items():
                points = values.get(name)
                if not points:
                    continue
                count, total = totals.get(name, (len(points), sum(points)))
                self.store.add(
                    series_key(namespace, name, dimensions),
                    start_s,
                    points,
                    count=count,
                    total=total,
                )
                datum: dict[str, Any] = {
                    "MetricName": name,
                    "Dimensions": dimensions,
                    "Timestamp": stamp,
                    "Unit": unit,
                    "StorageResolution": 1,
                }
                if count == 1:
                    datum["Value"] = points[0]
                else:
                    datum["StatisticValues"] = {
                        "SampleCount": float(count),
                        "Sum": float(total),
                        "Minimum": float(min(points)),
                        "Maximum": float(max(points)),
                    }
                data.append(datum)
            for first in range(0, len(data), 500):
                cloudwatch.put_metric_data(
                    Namespace=namespace, MetricData=data[first : first + 500]
                )

    @staticmethod
    def _gauges(fleet: Any) -> dict[str, list[float]]:
        """The instance metrics of the period, one sample per running instance (those
        draining included, as :attr:`~mmelocal.localaws.fleet.Fleet.instance_count`
        counts them), as the service emits them: each is what is "used by the containers
        on an instance" (SageMaker Developer Guide, endpoint metrics), and
        ``LoadedModelCount`` "is emitted per instance" (multi-model endpoint instance
        metrics). Their Average is then per instance, Minimum and Maximum the extremes
        among the instances, SampleCount the instances."""
        emulator = fleet.server.emulator
        loaded, disks = fleet.server.call(
            _call(
                lambda: (_loaded_per_instance(emulator), emulator.disk_utilization_per_instance())
            ),
            timeout_s=10.0,
        )
        gauges = {
            name: samples
            for name, samples in emulator.read_gauges_per_instance().items()
            if name in INSTANCE_METRICS
        }
        gauges["LoadedModelCount"] = loaded
        gauges["DiskUtilization"] = disks
        return gauges

    # -- alarms ------------------------------------------------------------------------
    def _evaluate(self, region: str, end_s: float) -> None:
        cloudwatch = self._client_for("cloudwatch", region)
        alarms: list[dict[str, Any]] = []
        for page in cloudwatch.get_paginator("describe_alarms").paginate(
            AlarmTypes=["MetricAlarm"]
        ):
            alarms.extend(page.get("MetricAlarms", []))
        for alarm in alarms:
            if "MetricName" not in alarm or "Namespace" not in alarm:
                continue  # metric math: not evaluated locally
            key = series_key(alarm["Namespace"], alarm["MetricName"], alarm.get("Dimensions", []))
            if not self.store.knows(key):
                continue  # not a metric this local AWS publishes
            statistic = alarm.get("ExtendedStatistic") or alarm.get("Statistic") or "Average"
            periods = int(alarm["EvaluationPeriods"])
            count = periods + EVALUATION_RANGE_EXTRA_PERIODS  # the alarm's evaluation range
            values: list[float | None] = [None] * count
            unit = alarm.get("Unit")
            period_s = float(alarm["Period"]) / self.time_scale
            if not unit or unit == published_unit(alarm["Namespace"], alarm["MetricName"]):
                # (a unit the metric is not published in finds no datapoint: PutMetricAlarm)
                values = self.store.periods(
                    key, end_s=end_s, period_s=period_s, count=count, statistic=statistic
                )
            # a percentile alarm that ignores low sample counts (PutMetricAlarm)
            least = None
            if alarm.get("EvaluateLowSampleCountPercentile") == "ignore":
                least = low_sample_count(statistic)
            counts = None
            if least is not None:
                counts = self.store.periods(
                    key, end_s=end_s, period_s=period_s, count=count, statistic="SampleCount"
                )
            try:
                state = alarm_state(
                    values,
                    threshold=float(alarm["Threshold"]),
                    comparison=alarm["ComparisonOperator"],
                    evaluation_periods=periods,
                    datapoints_to_alarm=int(alarm.get("DatapointsToAlarm") or periods),
                    treat_missing_data=alarm.get("TreatMissingData") or "missing",
                    current_state=alarm["StateValue"],
                    sample_counts=counts,
                    min_sample_count=least,
                )
            except UserInputError as exc:  # moto took it; one such alarm stops no other
                logger.warning("alarm %s is not evaluated: %s", alarm["AlarmName"], exc)
                continue
            if state != alarm["StateValue"]:
                self._set_state(cloudwatch, region, alarm, state, values, end_s)

    def _set_state(
        self,
        cloudwatch: Any,
        region: str,
        alarm: dict[str, Any],
        state: str,
        values: list[float | None],
        end_s: float,
    ) -> None:
        present = [v for v in values if v is not None]
        words = _WORDS.get(alarm["ComparisonOperator"], alarm["ComparisonOperator"])
        if state == "INSUFFICIENT_DATA":
            reason = "Insufficient Data: no datapoints were received for the evaluation periods."
        else:
            shown = ", ".join(f"{v:g}" for v in present[-5:])
            verb = "was" if state == "ALARM" else "was not"
            reason = (
                f"Threshold Crossed: {len(present)} datapoint(s) [{shown}] {verb} {words} "
                f"the threshold ({float(alarm['Threshold']):g})."
            )
        data = {
            "version": "1.0",
            "queryDate": dt.datetime.fromtimestamp(end_s, dt.UTC).isoformat(),
            "statistic": alarm.get("ExtendedStatistic") or alarm.get("Statistic"),
            "period": alarm["Period"],
            "recentDatapoints": present,
            "threshold": alarm["Threshold"],
        }
        cloudwatch.set_alarm_state(
            AlarmName=alarm["AlarmName"],
            StateValue=state,
            StateReason=reason[:1023],
            StateReasonData=json.dumps(data),
        )
        self.record(
            region,
            alarm["AlarmName"],
            "StateUpdate",
            f"Alarm updated from {alarm['StateValue']} to {state}",
            {
                "oldState": {"stateValue": alarm["StateValue"]},
                "newState": {"stateValue": state, "stateReason": reason},
            },
        )
        logger.info(
            "alarm %s: %s -> %s (%s)", alarm["AlarmName"], alarm["StateValue"], state, reason
        )

    def record(
        self, region: str, alarm: str, kind: str, summary: str, data: dict[str, Any]
    ) -> None:
        """Add one item to the alarm history."""
        with self.history_lock:
            number = next(self._recorded)
            self.history.append(
                HistoryItem(region, alarm, time.time(), kind, summary, data, number)
            )
            if len(self.history) > 100_000:
                del self.history[:10_000]


async def _call(function: Callable[[], Any]) -> Any:
    return function()


def _loaded_per_instance(emulator: Any) -> list[float]:
    """The models loaded on each running instance (those draining included, as
    :attr:`~mmelocal.localaws.fleet.Fleet.instance_count` counts them)."""
    return [float(len(i.loaded())) for i in (*emulator.instances, *emulator.draining)]


__all__ = ["STANDARD_STATISTICS", "ControlLoop", "HistoryItem", "Running", "is_percentile"]
