"""What the control loop publishes into CloudWatch for one period: the statistics of
every invocation in it, however many the emulator's recent window keeps."""

from __future__ import annotations

import asyncio
from typing import Any

from mmelocal.emulator.metrics import Metrics, Summary
from mmelocal.localaws.cloudwatch import ControlLoop, Running


class _CloudWatch:
    def __init__(self) -> None:
        self.data: dict[str, dict[str, Any]] = {}

    def put_metric_data(self, Namespace: str, MetricData: list[dict[str, Any]]) -> None:
        for datum in MetricData:
            self.data[datum["MetricName"]] = datum


class _Emulator:
    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def gauges(self) -> dict[str, float]:
        return {"LoadedModelCount": 1.0}

    def read_gauges(self) -> dict[str, float]:
        return {"CPUUtilization": 10.0}


class _Server:
    def __init__(self, metrics: Metrics) -> None:
        self.emulator = _Emulator(metrics)

    def call(self, coro: Any, timeout_s: float) -> Any:
        return asyncio.run(coro)


class _Fleet:
    instance_count = 1

    def __init__(self, metrics: Metrics) -> None:
        self.server = _Server(metrics)


def _published(metrics: Metrics) -> tuple[dict[str, dict[str, Any]], ControlLoop]:
    cloudwatch = _CloudWatch()
    loop = ControlLoop(client_for=lambda service, region: cloudwatch, running=list, regions=list)
    loop._publish(Running("us-east-1", "e", "v", _Fleet(metrics)), 0.0)
    return cloudwatch.data, loop


def test_a_period_with_more_calls_than_the_window_publishes_them_all() -> None:
    """CloudWatch's SampleCount and Sum of ModelLatency cover every invocation of the
    period (as Invocations does), not only the emulator's recent window of values."""
    metrics = Metrics()
    metrics._summaries["ModelLatency"] = Summary(window=4)
    for value in range(1, 11):  # 10 served calls, 1..10 s of model latency
        metrics.record_served(200, 0.0, float(value), cache_hit=True)
    data, loop = _published(metrics)
    stats = data["ModelLatency"]["StatisticValues"]
    assert data["Invocations"]["Value"] == 10.0
    assert (stats["SampleCount"], stats["Sum"]) == (10.0, 55e6)
    assert stats["Maximum"] == 10e6
    (series,) = [s for k, s in loop.store._series.items() if k[1] == "ModelLatency"]
    assert (series[-1].count, series[-1].total) == (10.0, 55e6)
