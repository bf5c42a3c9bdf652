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


class _Instance:
    def __init__(self, loaded: int, disk_percent: float = 0.0) -> None:
        self._loaded = [f"model-{i}.tar.gz" for i in range(loaded)]
        self.disk_percent = disk_percent

    def loaded(self) -> list[str]:
        return self._loaded


class _Emulator:
    def __init__(self, metrics: Metrics, loaded: tuple[int, ...] = (1,)) -> None:
        self.metrics = metrics
        self.instances = [_Instance(count) for count in loaded]
        self.draining: list[_Instance] = []

    def gauges(self) -> dict[str, float]:
        return {"LoadedModelCount": float(sum(len(i.loaded()) for i in self.instances))}

    def read_gauges(self) -> dict[str, float]:
        return {"CPUUtilization": 10.0}

    def disk_utilization_per_instance(self) -> list[float]:
        return [i.disk_percent for i in (*self.instances, *self.draining)]


class _Server:
    def __init__(self, metrics: Metrics, loaded: tuple[int, ...]) -> None:
        self.emulator = _Emulator(metrics, loaded)

    def call(self, coro: Any, timeout_s: float) -> Any:
        return asyncio.run(coro)


class _Fleet:
    def __init__(self, metrics: Metrics, loaded: tuple[int, ...] = (1,)) -> None:
        self.server = _Server(metrics, loaded)
        self.instance_count = len(loaded)


def _published(
    metrics: Metrics, loaded: tuple[int, ...] = (1,)
) -> tuple[dict[str, dict[str, Any]], ControlLoop]:
    cloudwatch = _CloudWatch()
    loop = ControlLoop(client_for=lambda service, region: cloudwatch, running=list, regions=list)
    loop._publish(Running("us-east-1", "e", "v", _Fleet(metrics, loaded)), 0.0)
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


def test_loaded_model_count_is_one_sample_per_instance() -> None:
    """LoadedModelCount "is emitted per instance. The Average statistic [...] tells you the
    average number of models loaded per instance. The Sum statistic tells you the total
    number of models loaded across all instances" (SageMaker Developer Guide, "Multi-Model
    Endpoint Model Instance Metrics"): 3 and 5 models on two instances are 2 samples, sum 8."""
    data, _ = _published(Metrics(), loaded=(3, 5))
    stats = data["LoadedModelCount"]["StatisticValues"]
    assert stats == {"SampleCount": 2.0, "Sum": 8.0, "Minimum": 3.0, "Maximum": 5.0}


def test_cpu_utilization_is_averaged_over_the_instances_it_was_read_on() -> None:
    """CPUUtilization is the average per instance ("the default view in CloudWatch shows
    the average CPU utilization across all instances"): the emulator reads the instances
    in service (80 % on one), so a second one draining does not halve it."""
    metrics = Metrics()
    fleet = _Fleet(metrics, loaded=(1,))
    fleet.server.emulator.read_gauges = lambda: {"CPUUtilization": 80.0}  # type: ignore[method-assign]
    fleet.server.emulator.draining.append(_Instance(0))
    fleet.instance_count = 2  # as Fleet.instance_count counts a draining instance
    cloudwatch = _CloudWatch()
    loop = ControlLoop(client_for=lambda service, region: cloudwatch, running=list, regions=list)
    loop._publish(Running("us-east-1", "e", "v", fleet), 0.0)
    assert cloudwatch.data["CPUUtilization"]["Value"] == 80.0


def test_disk_utilization_is_one_sample_per_instance() -> None:
    """Each instance has its own storage volume, and its DiskUtilization is its own
    sample: 20 % and 60 % on two instances are 2 samples (Average 40 %), not one datum."""
    metrics = Metrics()
    fleet = _Fleet(metrics, loaded=(0, 0))
    for inst, percent in zip(fleet.server.emulator.instances, (20.0, 60.0), strict=True):
        inst.disk_percent = percent
    cloudwatch = _CloudWatch()
    loop = ControlLoop(client_for=lambda service, region: cloudwatch, running=list, regions=list)
    loop._publish(Running("us-east-1", "e", "v", fleet), 0.0)
    stats = cloudwatch.data["DiskUtilization"]["StatisticValues"]
    assert stats == {"SampleCount": 2.0, "Sum": 80.0, "Minimum": 20.0, "Maximum": 60.0}
