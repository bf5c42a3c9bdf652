"""A model benchmarked on an endpoint: capacity, then the load test over the loaded copies.

The published procedure (aws-samples/sagemaker-mme-gpu-benchmarking) ends with one
comparison per model: for each framework, the models loaded, the lowest latency, the
highest throughput and the most concurrent users among the load-test steps without a
failed request, and the PyTorch-to-TensorRT difference. :class:`BenchmarkResult` (JSON
``kind = "benchmark"``) holds one framework's run; :func:`comparison_rows` lays several
out as that table, per instance type and model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mmelocal.bench.capacity.result import CapacityResult
from mmelocal.bench.loadtest.result import LoadTestResult
from mmelocal.bench.loadtest.shape import WARMUP_STAGE_NAME
from mmelocal.bench.results import BenchResult
from mmelocal.builder.backends import KIND_SHORT_NAMES

#: format -> the framework name the published comparison uses
FRAMEWORKS = KIND_SHORT_NAMES
#: the metrics compared, with whether higher is better
METRICS = (
    ("max_models_loaded", True),
    ("latency_ms", False),
    ("throughput_rps", True),
    ("max_users", True),
)


class BenchmarkResult(BenchResult, kind="benchmark"):
    """One model in one framework on one instance type (capacity + load test)."""

    model: str
    framework: str
    instance_type: str
    endpoint: str
    capacity: CapacityResult
    loadtest: LoadTestResult | None = None

    @property
    def max_models_loaded(self) -> int:
        """Copies loaded within the threshold."""
        return self.capacity.count

    def _good_steps(self) -> list[Any]:
        """The measured steps without a failure: not the warm-up, as in the published
        summary, unless the test was only its warm-up (``--max-users`` 10 or fewer)."""
        if self.loadtest is None:
            return []
        steps = [s for s in self.loadtest.steps if s.name != WARMUP_STAGE_NAME]
        return [s for s in steps or self.loadtest.steps if s.failures == 0 and s.requests > 0]

    @property
    def latency_ms(self) -> float | None:
        """Lowest mean latency among the steps (warm-up aside) without a failure."""
        values = [s.avg_latency_ms for s in self._good_steps() if s.avg_latency_ms is not None]
        return min(values, default=None)

    @property
    def throughput_rps(self) -> float | None:
        """Highest request rate among the steps (warm-up aside) without a failure."""
        return max((s.throughput_rps for s in self._good_steps()), default=None)

    @property
    def on_cpu(self) -> bool:
        """True when the figures come from a CPU run (host memory, CPU latency), not a GPU."""
        return self.capacity.on_host_memory

    @property
    def figures_from(self) -> str:
        """Where every figure of this run was taken (``local AWS, CPU host memory, as
        ml.g4dn.xlarge; latency and throughput on CPU``)."""
        where = self.capacity.measured_where
        return f"{where}; latency and throughput on CPU" if self.on_cpu else where

    @property
    def max_users(self) -> int | None:
        """Highest user count before the first failed request."""
        return None if self.loadtest is None else self.loadtest.max_users_without_failure

    def to_dict(self) -> dict[str, Any]:
        """Plain data (``kind`` tells ``mmelocal report`` what this is)."""
        return {
            "kind": self.kind,
            "model": self.model,
            "framework": self.framework,
            "instance_type": self.instance_type,
            "endpoint": self.endpoint,
            "max_models_loaded": self.max_models_loaded,
            "latency_ms": self.latency_ms,
            "throughput_rps": self.throughput_rps,
            "max_users": self.max_users,
            "figures_from": self.figures_from,
            "capacity": self.capacity.to_dict(),
            "loadtest": self.loadtest.to_dict() if self.loadtest else None,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BenchmarkResult:
        """Inverse of :meth:`to_dict` (derived numbers are recomputed)."""
        loadtest = data.get("loadtest")
        return cls(
            model=str(data["model"]),
            framework=str(data["framework"]),
            instance_type=str(data["instance_type"]),
            endpoint=str(data.get("endpoint", "")),
            capacity=CapacityResult.from_dict(data["capacity"]),
            loadtest=LoadTestResult.from_dict(loadtest) if loadtest else None,
        )


def framework_of(model_format: str) -> str:
    """``torchscript`` -> ``pt``, ``tensorrt`` -> ``trt`` (others as they are)."""
    return FRAMEWORKS.get(model_format, model_format)


def percent_difference(base: float | None, other: float | None) -> float | None:
    """``(other - base) / base`` in percent (None when either is missing or base is 0)."""
    if base is None or other is None or base == 0:
        return None
    return round(100.0 * (other - base) / base, 1)


def comparison_rows(results: Sequence[BenchmarkResult]) -> list[dict[str, Any]]:
    """One row per (instance type, model, framework), then, where both ran, one row
    ``trt vs pt (%)``: TensorRT's difference from PyTorch for every metric."""
    groups: dict[tuple[str, str], dict[str, BenchmarkResult]] = {}
    for result in results:
        groups.setdefault((result.instance_type, result.model), {})[result.framework] = result
    rows: list[dict[str, Any]] = []
    for (instance_type, model), by_framework in sorted(groups.items()):
        for framework, result in sorted(by_framework.items()):
            rows.append(
                {
                    "instance_type": instance_type,
                    "model": model,
                    "framework": framework,
                    **{name: getattr(result, name) for name, _ in METRICS},
                    "figures_from": result.figures_from,
                }
            )
        pt, trt = by_framework.get("pt"), by_framework.get("trt")
        if pt is not None and trt is not None:
            rows.append(
                {
                    "instance_type": instance_type,
                    "model": model,
                    "framework": "trt vs pt (%)",
                    **{
                        name: percent_difference(getattr(pt, name), getattr(trt, name))
                        for name, _ in METRICS
                    },
                    "figures_from": "; ".join(dict.fromkeys((pt.figures_from, trt.figures_from))),
                }
            )
    return rows


def step_rows(results: Sequence[BenchmarkResult]) -> list[dict[str, Any]]:
    """Every load-test step of every run, one row each: the published
    ``summary_results.csv`` (model, instance type, platform, models loaded, then the step),
    and a last column, ``figures_from``, saying where the figures were taken."""
    rows: list[dict[str, Any]] = []
    for result in results:
        for step in result.loadtest.steps if result.loadtest else ():
            rows.append(
                {
                    "model_name": result.model,
                    "instance_type": result.instance_type,
                    "platform": result.framework,
                    "max_models_loaded": result.max_models_loaded,
                    "users": step.users,
                    "throughput_rps": step.throughput_rps,
                    "avg_latency_ms": step.avg_latency_ms,
                    "p50_latency_ms": step.p50_latency_ms,
                    "max_latency_ms": step.max_latency_ms,
                    "successful_requests": step.successes,
                    "failed_requests": step.failures,
                    "figures_from": result.figures_from,
                }
            )
    return rows


__all__ = [
    "FRAMEWORKS",
    "METRICS",
    "BenchmarkResult",
    "comparison_rows",
    "framework_of",
    "percent_difference",
    "step_rows",
]
