"""What the control loop publishes into CloudWatch for one period: the statistics of
every invocation in it, however many the emulator's recent window keeps."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from types import SimpleNamespace
from typing import Any

import pytest

from mmelocal.emulator.emulator import Emulator
from mmelocal.emulator.gauge import MemoryGauge
from mmelocal.emulator.metrics import Metrics, Summary
from mmelocal.emulator.probes import MemoryReading, TreeCpuMeter
from mmelocal.localaws.cloudwatch import ControlLoop, Running


class _CloudWatch:
    def __init__(self) -> None:
        self.data: dict[str, dict[str, Any]] = {}

    def put_metric_data(self, Namespace: str, MetricData: list[dict[str, Any]]) -> None:
        for datum in MetricData:
            self.data[datum["MetricName"]] = datum


class _Probe:
    """A memory probe whose reading is fixed: ``memory_percent`` of 1000 bytes in use and,
    on a GPU, ``gpu_percent`` of its compute."""

    def __init__(self, kind: str, memory_percent: float, gpu_percent: float | None) -> None:
        self.kind = kind
        self.name = f"stand-in {kind}"
        self.reading = MemoryReading(
            used_bytes=int(memory_percent * 10),
            total_bytes=1000,
            utilization_percent=gpu_percent,
        )

    def read(self) -> MemoryReading:
        return self.reading


class _Instance:
    """One instance: its loaded models, its disk, and its memory gauge over a :class:`_Probe`
    (read through the emulator's own code); the CPU of its server ``pid``."""

    def __init__(
        self,
        loaded: int,
        disk_percent: float = 0.0,
        *,
        memory_percent: float = 0.0,
        kind: str = "host",
        gpu_percent: float | None = None,
        pid: int | None = None,
    ) -> None:
        self._loaded = [f"model-{i}.tar.gz" for i in range(loaded)]
        self.disk_percent = disk_percent
        self.probe = _Probe(kind, memory_percent, gpu_percent)
        self.gauge = MemoryGauge(self.probe, threshold=0.9)
        self.launcher = SimpleNamespace(pid=lambda: pid)

    def loaded(self) -> list[str]:
        return self._loaded


class _Emulator:
    def __init__(self, metrics: Metrics, loaded: tuple[int, ...] = (1,)) -> None:
        self.metrics = metrics
        self.instances = [_Instance(count) for count in loaded]
        self.draining: list[_Instance] = []

    #: the emulator's own reading of its instances
    read_gauges_per_instance = Emulator.read_gauges_per_instance
    #: and its reading for a ``/metrics`` scrape
    read_gauges: Any = Emulator.read_gauges

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


def _stats(data: dict[str, dict[str, Any]], name: str) -> dict[str, float]:
    return dict(data[name]["StatisticValues"])


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


def test_error_counts_are_one_sample_per_invocation() -> None:
    """Invocation4XXErrors and Invocation5XXErrors: "For each 4xx response, 1 is sent;
    otherwise, 0 is sent" (SageMaker Developer Guide, endpoint invocation metrics): one
    500 and one 400 among 10 invocations are Sum 1 of SampleCount 10 each, so the Average
    is the error rate (0.1), not the count of errors (one datum of 1)."""
    metrics = Metrics()
    for _ in range(8):
        metrics.record_served(200, 0.0, 0.001, cache_hit=True)
    metrics.record_served(500, 0.0, 0.001, cache_hit=True)
    metrics.record_invocation(400)
    data, _ = _published(metrics)
    assert data["Invocations"]["Value"] == 10.0
    one_in_ten = {"SampleCount": 10.0, "Sum": 1.0, "Minimum": 0.0, "Maximum": 1.0}
    assert _stats(data, "Invocation4XXErrors") == one_in_ten
    assert _stats(data, "Invocation5XXErrors") == one_in_ten


def test_a_period_with_no_invocations_publishes_zero_errors() -> None:
    data, _ = _published(Metrics())
    assert data["Invocation5XXErrors"]["Value"] == 0.0


def test_loaded_model_count_is_one_sample_per_instance() -> None:
    """LoadedModelCount "is emitted per instance. The Average statistic [...] tells you the
    average number of models loaded per instance. The Sum statistic tells you the total
    number of models loaded across all instances" (SageMaker Developer Guide, "Multi-Model
    Endpoint Model Instance Metrics"): 3 and 5 models on two instances are 2 samples, sum 8."""
    data, _ = _published(Metrics(), loaded=(3, 5))
    stats = data["LoadedModelCount"]["StatisticValues"]
    assert stats == {"SampleCount": 2.0, "Sum": 8.0, "Minimum": 3.0, "Maximum": 5.0}


def test_memory_and_cpu_utilization_are_one_sample_per_instance(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """MemoryUtilization and CPUUtilization are each "used by the containers on an
    instance" (SageMaker Developer Guide, endpoint metrics): 20 % and 60 % of memory, 80 %
    and 0 % of CPU on two instances (the idle one draining) are 2 samples each, Average
    40 %, not one averaged datum whose Minimum, Maximum and SampleCount say nothing of
    the instances (a target-tracking policy on CPUUtilization reads the Average)."""
    cpu = {101: 80.0, 102: 0.0}
    monkeypatch.setattr(TreeCpuMeter, "percent", lambda self, pid: cpu[pid])
    fleet = _Fleet(Metrics(), loaded=(1,))
    emulator = fleet.server.emulator
    emulator.instances = [_Instance(1, memory_percent=20.0, pid=101)]
    emulator.draining.append(_Instance(0, memory_percent=60.0, pid=102))
    fleet.instance_count = 2  # as Fleet.instance_count counts a draining instance
    cloudwatch = _CloudWatch()
    loop = ControlLoop(client_for=lambda service, region: cloudwatch, running=list, regions=list)
    loop._publish(Running("us-east-1", "e", "v", fleet), 0.0)
    memory = {"SampleCount": 2.0, "Sum": 80.0, "Minimum": 20.0, "Maximum": 60.0}
    assert _stats(cloudwatch.data, "MemoryUtilization") == memory
    cpu_stats = {"SampleCount": 2.0, "Sum": 80.0, "Minimum": 0.0, "Maximum": 80.0}
    assert _stats(cloudwatch.data, "CPUUtilization") == cpu_stats


def test_gpu_utilizations_are_one_sample_per_instance() -> None:
    """GPUUtilization and GPUMemoryUtilization are each instance's own GPU: 30 % and 90 %
    busy, 25 % and 75 % of memory on two instances are 2 samples each (Average 60 % and
    50 %; Maximum 90 % shows the hot one an average hides)."""
    fleet = _Fleet(Metrics(), loaded=(1, 1))
    fleet.server.emulator.instances = [
        _Instance(1, kind="gpu", memory_percent=25.0, gpu_percent=30.0),
        _Instance(1, kind="gpu", memory_percent=75.0, gpu_percent=90.0),
    ]
    cloudwatch = _CloudWatch()
    loop = ControlLoop(client_for=lambda service, region: cloudwatch, running=list, regions=list)
    loop._publish(Running("us-east-1", "e", "v", fleet), 0.0)
    busy = {"SampleCount": 2.0, "Sum": 120.0, "Minimum": 30.0, "Maximum": 90.0}
    assert _stats(cloudwatch.data, "GPUUtilization") == busy
    memory = {"SampleCount": 2.0, "Sum": 100.0, "Minimum": 25.0, "Maximum": 75.0}
    assert _stats(cloudwatch.data, "GPUMemoryUtilization") == memory
    assert _stats(cloudwatch.data, "MemoryUtilization")["SampleCount"] == 2.0


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


#: a Triton stand-in: idle until told, then about 0.3 s of CPU, then idle again
_BURN = (
    "import sys, time\n"
    "sys.stdin.readline()\n"
    "t = time.process_time()\n"
    "while time.process_time() - t < 0.3: pass\n"
    "print('burnt', flush=True)\n"
    "sys.stdin.readline()\n"
)


def test_a_scrape_does_not_shorten_the_periods_cpu_utilization() -> None:
    """The period's CPUUtilization covers the period: a ``/metrics`` scrape (Prometheus
    scrapes every 15 s) read the same "since the previous call" CPU figure, so what the
    local CloudWatch published covered only the time since the last scrape: here 0 % for
    a period whose server was busy until just before that scrape."""
    child = subprocess.Popen(
        [sys.executable, "-c", _BURN], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        fleet = _Fleet(Metrics())
        emulator = fleet.server.emulator
        emulator.instances = [_Instance(1, pid=child.pid)]
        cloudwatch = _CloudWatch()
        loop = ControlLoop(
            client_for=lambda service, region: cloudwatch, running=list, regions=list
        )
        running = Running("us-east-1", "e", "v", fleet)
        loop._publish(running, 0.0)  # the period begins
        emulator.read_gauges()  # a scrape
        child.stdin.write(b"go\n")
        child.stdin.flush()
        assert child.stdout.readline() == b"burnt\n"
        scraped = emulator.read_gauges()["CPUUtilization"]  # the next scrape
        loop._publish(running, 60.0)  # the period ends
        published = cloudwatch.data["CPUUtilization"]["Value"]
    finally:
        child.kill()
        child.wait()
    assert scraped > 5.0
    assert published > 0.5 * scraped, (published, scraped)
