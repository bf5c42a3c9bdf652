"""The CloudWatch names SageMaker endpoints publish under: namespaces, dimensions, metric
names and units.

Source: "Amazon SageMaker AI metrics in Amazon CloudWatch",
https://docs.aws.amazon.com/sagemaker/latest/dg/monitoring-cloudwatch.html (endpoint
invocation metrics in ``AWS/SageMaker``, instance metrics in ``/aws/sagemaker/Endpoints``,
both with the dimensions ``EndpointName`` and ``VariantName``, 1-minute periods; latencies
in microseconds).
"""

from __future__ import annotations

from typing import Final

#: Namespace of the invocation metrics.
INVOCATION_NAMESPACE: Final = "AWS/SageMaker"
#: Namespace of the instance (container host) metrics.
INSTANCE_NAMESPACE: Final = "/aws/sagemaker/Endpoints"
#: The dimensions of every endpoint metric, in this order.
DIMENSIONS: Final = ("EndpointName", "VariantName")

#: The multi-model endpoint's cache hit metric (1 when the target was loaded, else 0).
MODEL_CACHE_HIT: Final = "ModelCacheHit"
#: Invocation metrics (``AWS/SageMaker``) -> CloudWatch unit.
INVOCATION_METRICS: Final[dict[str, str]] = {
    "Invocations": "None",
    "Invocation4XXErrors": "None",
    "Invocation5XXErrors": "None",
    "InvocationsPerInstance": "None",
    "ModelLatency": "Microseconds",
    "OverheadLatency": "Microseconds",
    "ModelLoadingWaitTime": "Microseconds",
    "ModelLoadingTime": "Microseconds",
    "ModelUnloadingTime": "Microseconds",
    "ModelDownloadingTime": "Microseconds",
    MODEL_CACHE_HIT: "None",
}
#: Instance metrics (``/aws/sagemaker/Endpoints``) -> CloudWatch unit.
INSTANCE_METRICS: Final[dict[str, str]] = {
    "LoadedModelCount": "None",
    "CPUUtilization": "Percent",
    "MemoryUtilization": "Percent",
    "DiskUtilization": "Percent",
    "GPUUtilization": "Percent",
    "GPUMemoryUtilization": "Percent",
}
#: Instance metrics that exist only where a GPU is read.
GPU_METRICS: Final = frozenset({"GPUUtilization", "GPUMemoryUtilization"})
#: What stands in locally for a GPU metric when no GPU is read.
LOCAL_STAND_IN: Final[dict[str, str]] = {
    "GPUUtilization": "CPUUtilization",
    "GPUMemoryUtilization": "MemoryUtilization",
}

#: Alarm states and the comparison operators an alarm may use.
ALARM_STATES: Final = ("OK", "ALARM", "INSUFFICIENT_DATA")
COMPARISON_OPERATORS: Final = (
    "GreaterThanOrEqualToThreshold",
    "GreaterThanThreshold",
    "LessThanThreshold",
    "LessThanOrEqualToThreshold",
)
TREAT_MISSING_DATA: Final = ("breaching", "notBreaching", "ignore", "missing")

__all__ = [
    "ALARM_STATES",
    "COMPARISON_OPERATORS",
    "DIMENSIONS",
    "GPU_METRICS",
    "INSTANCE_METRICS",
    "INSTANCE_NAMESPACE",
    "INVOCATION_METRICS",
    "INVOCATION_NAMESPACE",
    "LOCAL_STAND_IN",
    "MODEL_CACHE_HIT",
    "TREAT_MISSING_DATA",
]
