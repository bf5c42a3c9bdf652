"""CloudWatch's API where moto falls short (an overlay on its JSON answers).

* ``PutMetricAlarm``: a new alarm starts at ``INSUFFICIENT_DATA``, as the service starts it
  (moto: OK), an updated one keeps its state (moto: OK again), and both go into the
  history;
* ``DescribeAlarmHistory`` (moto: not implemented) from the control loop's history, its
  token a cursor in the ``ScanBy`` order (:mod:`.paging`);
* ``SetAlarmState``: a change of state goes into the history and runs the actions the new
  state has at once (``actions``: the autoscaler's, for scaling policies), as the service
  does; reason data that is not JSON answers ``InvalidFormat``;
* percentiles: ``GetMetricStatistics`` with ``ExtendedStatistics`` and ``GetMetricData``
  with a ``pNN`` stat, computed from the raw values the control loop kept
  (:class:`~.metric_store.MetricStore`) for the metrics it publishes.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Callable
from typing import Any

from mmelocal.errors import AwsServiceError
from mmelocal.facts.cloudwatch import published_unit
from mmelocal.localaws.app.wsgi import Forward
from mmelocal.localaws.cloudwatch import ControlLoop
from mmelocal.localaws.metric_store import (
    STANDARD_STATISTICS,
    is_percentile,
    rounded_start,
    series_key,
)
from mmelocal.localaws.paging import Order, one_page

#: (region, the alarm as DescribeAlarms shows it after the change, its StateReasonData
#: parsed) -> None: what runs the actions of an alarm a user's SetAlarmState changed
Actions = Callable[[str, dict[str, Any], dict[str, Any]], None]


def _seconds(value: Any) -> float:
    """A JSON-protocol timestamp (epoch seconds, or ISO 8601) in epoch seconds."""
    if isinstance(value, int | float):
        return float(value)
    text = str(value).replace("Z", "+00:00")
    try:
        return float(text)
    except ValueError:
        stamp = dt.datetime.fromisoformat(text)
        if stamp.tzinfo is None:
            stamp = stamp.replace(tzinfo=dt.UTC)
        return stamp.timestamp()


#: a new alarm's state and reason (PutMetricAlarm API reference: "When this operation
#: creates an alarm, the alarm state is immediately set to INSUFFICIENT_DATA")
INITIAL_STATE = "INSUFFICIENT_DATA"
INITIAL_REASON = "Unchecked: Initial alarm creation"


def start_unchecked(cloudwatch: Any, name: str) -> None:
    """Give an alarm just created the state the service starts it in (moto: OK)."""
    cloudwatch.set_alarm_state(AlarmName=name, StateValue=INITIAL_STATE, StateReason=INITIAL_REASON)


def keep_state(cloudwatch: Any, before: dict[str, Any]) -> None:
    """Give an alarm put again the state ``before`` (its DescribeAlarms answer) showed: the
    service leaves an updated alarm's state unchanged (PutMetricAlarm API reference), moto
    makes it again in OK."""
    cloudwatch.set_alarm_state(
        AlarmName=before["AlarmName"],
        StateValue=before["StateValue"],
        StateReason=before.get("StateReason") or INITIAL_REASON,
        StateReasonData=before.get("StateReasonData") or "{}",
    )


class CloudWatchOverlay:
    """The overlay (see the module docstring); ``internal(region)`` is mmelocal's own
    CloudWatch client."""

    def __init__(
        self, loop: ControlLoop, internal: Callable[[str], Any], actions: Actions | None = None
    ) -> None:
        self._loop = loop
        self._internal = internal
        self._actions = actions

    def __call__(
        self, region: str, operation: str, params: dict[str, Any], forward: Forward
    ) -> tuple[int, Any] | None:
        if operation == "PutMetricAlarm":
            return self._put_alarm(region, params, forward)
        if operation == "SetAlarmState":
            return self._set_state(region, params, forward)
        if operation == "DescribeAlarmHistory":
            return 200, self._history(region, params)
        if operation == "GetMetricStatistics" and params.get("ExtendedStatistics"):
            return self._statistics(params, forward)
        if operation == "GetMetricData":
            return self._metric_data(params, forward)
        return None

    def _put_alarm(self, region: str, params: dict[str, Any], forward: Forward) -> tuple[int, Any]:
        name = str(params.get("AlarmName", ""))
        found = self._internal(region).describe_alarms(AlarmNames=[name])["MetricAlarms"]
        existed = bool(found)
        status, answer = forward(params)
        if status == 200 and existed:
            keep_state(self._internal(region), found[0])
        if status == 200 and not existed:
            start_unchecked(self._internal(region), name)
            self._loop.record(
                region, name, "ConfigurationUpdate", f'Alarm "{name}" created', {"type": "Create"}
            )
        elif status == 200:
            self._loop.record(
                region, name, "ConfigurationUpdate", f'Alarm "{name}" updated', {"type": "Update"}
            )
        return status, answer

    def _set_state(self, region: str, params: dict[str, Any], forward: Forward) -> tuple[int, Any]:
        """A user's ``SetAlarmState``: "When the updated state differs from the previous
        value, the action configured for the appropriate state is invoked", and the change
        is seen "through DescribeAlarmHistory" (SetAlarmState API reference)."""
        try:
            data = json.loads(params["StateReasonData"]) if "StateReasonData" in params else {}
        except ValueError:
            raise AwsServiceError(
                "Data was not syntactically valid JSON (StateReasonData)", code="InvalidFormat"
            ) from None
        name = str(params.get("AlarmName", ""))
        found = self._internal(region).describe_alarms(AlarmNames=[name])["MetricAlarms"]
        status, answer = forward(params)
        if status != 200 or not found or found[0]["StateValue"] == params.get("StateValue"):
            return status, answer
        before, state = found[0]["StateValue"], str(params["StateValue"])
        reason = str(params.get("StateReason", ""))
        self._loop.record(
            region,
            name,
            "StateUpdate",
            f"Alarm updated from {before} to {state}",
            {
                "oldState": {"stateValue": before},
                "newState": {"stateValue": state, "stateReason": reason},
            },
        )
        if self._actions is not None:
            changed = {**found[0], "StateValue": state, "StateReason": reason}
            self._actions(region, changed, data if isinstance(data, dict) else {})
        return status, answer

    def _history(self, region: str, params: dict[str, Any]) -> dict[str, Any]:
        name = params.get("AlarmName")
        kind = params.get("HistoryItemType")
        start = _seconds(params["StartDate"]) if "StartDate" in params else None
        end = _seconds(params["EndDate"]) if "EndDate" in params else None
        with self._loop.history_lock:
            items = [
                item for item in self._loop.history
                if item.region == region
                and (name is None or item.alarm_name == name)
                and (kind is None or item.kind == kind)
                and (start is None or item.time_s >= start)
                and (end is None or item.time_s <= end)
            ]  # fmt: skip
        return one_page(
            items,
            params,
            key="AlarmHistoryItems",
            order=Order(
                name="Timestamp",
                key=lambda item: (item.time_s, item.number),
                descending=params.get("ScanBy", "TimestampDescending") == "TimestampDescending",
            ),
            size_param="MaxRecords",
            default_size=100,
            invalid_token_code="InvalidNextToken",
        )

    def _statistics(self, params: dict[str, Any], forward: Forward) -> tuple[int, Any] | None:
        key = series_key(params["Namespace"], params["MetricName"], params.get("Dimensions", []))
        if not self._loop.store.knows(key):
            raise AwsServiceError(
                "mmelocal computes percentiles (ExtendedStatistics) for the endpoint metrics "
                "it publishes only; ask for Statistics on this metric",
                code="InvalidParameterCombination",
            )
        wanted = [*params.get("Statistics", []), *params["ExtendedStatistics"]]
        for statistic in params["ExtendedStatistics"]:
            if not is_percentile(statistic):
                raise AwsServiceError(
                    f"The value {statistic} for parameter ExtendedStatistics is not supported.",
                    code="InvalidParameterValue",
                )
        period = float(params["Period"])
        unit = published_unit(params["Namespace"], params["MetricName"])
        points = self._loop.store.datapoints(
            key,
            start_s=rounded_start(_seconds(params["StartTime"]), period, time.time()),
            end_s=_seconds(params["EndTime"]),
            period_s=period,
            statistics=wanted,
        )
        if params.get("Unit") and params["Unit"] != unit:
            points = []  # data in another unit than asked: none (GetMetricStatistics' Unit)
        datapoints = []
        for start, values in points:
            point: dict[str, Any] = {"Timestamp": start}
            if unit is not None:
                point["Unit"] = unit
            for statistic, value in values.items():
                if statistic in STANDARD_STATISTICS:
                    point[statistic] = value
                else:
                    point.setdefault("ExtendedStatistics", {})[statistic] = value
            datapoints.append(point)
        return 200, {"Label": params["MetricName"], "Datapoints": datapoints}

    def _metric_data(self, params: dict[str, Any], forward: Forward) -> tuple[int, Any] | None:
        queries = params.get("MetricDataQueries", [])
        ours = [
            q for q in queries
            if is_percentile(str(q.get("MetricStat", {}).get("Stat", "")))
        ]  # fmt: skip
        if not ours:
            return None
        rest = [q for q in queries if q not in ours]
        results: list[dict[str, Any]] = []
        if rest:
            status, answer = forward({**params, "MetricDataQueries": rest})
            if status != 200:
                return status, answer
            results = list(answer.get("MetricDataResults", []))
        start, end = _seconds(params["StartTime"]), _seconds(params["EndTime"])
        for query in ours:
            stat = query["MetricStat"]
            metric = stat["Metric"]
            key = series_key(
                metric["Namespace"], metric["MetricName"], metric.get("Dimensions", [])
            )
            points = self._loop.store.datapoints(
                key,
                start_s=rounded_start(start, float(stat["Period"]), time.time()),
                end_s=end,
                period_s=float(stat["Period"]),
                statistics=[stat["Stat"]],
            )
            points = [(t, v) for t, v in points if stat["Stat"] in v]
            asked = stat.get("Unit")
            if asked and asked != published_unit(metric["Namespace"], metric["MetricName"]):
                points = []  # no data in the unit asked (MetricStat's Unit)
            if params.get("ScanBy", "TimestampDescending") == "TimestampDescending":
                points.reverse()
            results.append(
                {
                    "Id": query["Id"],
                    "Label": query.get("Label", metric["MetricName"]),
                    "Timestamps": [t for t, _ in points],
                    "Values": [v[stat["Stat"]] for _, v in points],
                    "StatusCode": "Complete",
                }
            )
        order = {q["Id"]: i for i, q in enumerate(queries)}
        results.sort(key=lambda r: order.get(r["Id"], len(order)))
        return 200, {"MetricDataResults": results, "Messages": []}


__all__ = [
    "INITIAL_REASON",
    "INITIAL_STATE",
    "Actions",
    "CloudWatchOverlay",
    "keep_state",
    "start_unchecked",
]
