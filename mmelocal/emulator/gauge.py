"""One instance's memory as the platform reads it: fresh probe readings and the limit.

The probe's reading is blocking (``/proc`` or NVML), so :meth:`MemoryGauge.read` runs it on
the gauge's own thread: never queued behind the default executor's long work (downloads
and extractions of artifacts run there, for minutes with a large one). The limit the
loaded set may use is ``threshold x total`` of the last reading, or an absolute override
(demos and tests set one). :meth:`MemoryGauge.read_utilization` is the instance's own
CloudWatch instance metrics (one sample per instance, as the service emits them).
"""

from __future__ import annotations

from mmelocal.emulator.own_thread import OwnThread
from mmelocal.emulator.probes import MemoryProbe, MemoryReading, TreeCpuMeter


class MemoryGauge:
    """Readings of one instance's :class:`~mmelocal.emulator.probes.MemoryProbe`."""

    def __init__(self, probe: MemoryProbe, *, threshold: float) -> None:
        self.probe = probe
        self.threshold = threshold
        self.last_reading: MemoryReading | None = None
        #: an absolute memory limit in bytes instead of threshold x total (demos, tests)
        self.limit_override_bytes: int | None = None
        # one reading at a time; the idle thread ends with the gauge
        self._reader = OwnThread("mmelocal-gauge")
        #: the CPU of the instance's processes, one baseline per reader of it
        self._cpu: dict[str, TreeCpuMeter] = {}

    async def read(self) -> MemoryReading:
        """A fresh reading (on the gauge's thread); kept as :attr:`last_reading`."""
        reading = await self._reader.run(self.probe.read)
        self.last_reading = reading
        return reading

    def read_utilization(self, server_pid: int | None, *, reader: str) -> dict[str, float]:
        """This instance's instance metrics, read now (blocking: call it off the event
        loop), each as SageMaker defines it for one instance ("used by the containers on an
        instance", the Developer Guide's endpoint metrics): ``CPUUtilization`` (percent of
        one core, summed over the server ``server_pid`` and its children),
        ``MemoryUtilization`` (the host probe's share of the budget; the machine's memory
        beside a GPU probe), and with a GPU probe ``GPUMemoryUtilization`` and
        ``GPUUtilization`` (when NVML reports it). The reading is kept as
        :attr:`last_reading`. ``CPUUtilization`` covers the time since ``reader``'s
        previous reading (each reader, such as a ``/metrics`` scrape or the local
        CloudWatch's period, has its own baseline)."""
        reading = self.probe.read()
        self.last_reading = reading
        meter = self._cpu.get(reader) or self._cpu.setdefault(reader, TreeCpuMeter())
        out = {"CPUUtilization": meter.percent(server_pid)}
        if self.probe.kind == "gpu":
            import psutil

            out["MemoryUtilization"] = float(psutil.virtual_memory().percent)
            out["GPUMemoryUtilization"] = 100.0 * reading.used_fraction
            if reading.utilization_percent is not None:
                out["GPUUtilization"] = float(reading.utilization_percent)
        else:
            out["MemoryUtilization"] = 100.0 * reading.used_fraction
        return out

    @property
    def limit_bytes(self) -> int:
        """Memory the loaded set may use: threshold x total (or the override when set)."""
        if self.limit_override_bytes is not None:
            return self.limit_override_bytes
        total = self.last_reading.total_bytes if self.last_reading else 0
        return max(1, int(self.threshold * total))

    @property
    def free_bytes(self) -> int:
        """Room left under the limit at the last reading."""
        used = self.last_reading.used_bytes if self.last_reading else 0
        return self.limit_bytes - used


__all__ = ["MemoryGauge"]
