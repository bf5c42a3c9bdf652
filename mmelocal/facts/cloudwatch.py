"""The CloudWatch names SageMaker endpoints publish under: namespaces, dimensions, metric
names and units.

Source: "Amazon SageMaker AI metrics in Amazon CloudWatch",
https://docs.aws.amazon.com/sagemaker/latest/dg/monitoring-cloudwatch.html (endpoint
invocation metrics in ``AWS/SageMaker``, instance metrics in ``/aws/sagemaker/Endpoints``,
both with the dimensions ``EndpointName`` and ``VariantName``, 1-minute periods; latencies
in microseconds).
"""

from __future__ import annotations

from fractions import Fraction
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


def published_unit(namespace: str, metric: str) -> str | None:
    """The unit an endpoint metric is published in (None: not one of them)."""
    table = {INVOCATION_NAMESPACE: INVOCATION_METRICS, INSTANCE_NAMESPACE: INSTANCE_METRICS}
    return table.get(namespace, {}).get(metric)


#: Instance metrics that exist only where a GPU is read.
GPU_METRICS: Final = frozenset({"GPUUtilization", "GPUMemoryUtilization"})
#: What stands in locally for a GPU metric when no GPU is read.
LOCAL_STAND_IN: Final[dict[str, str]] = {
    "GPUUtilization": "CPUUtilization",
    "GPUMemoryUtilization": "MemoryUtilization",
}

#: How CloudWatch rounds a statistics query's StartTime down, by its age (GetMetricStatistics
#: and GetMetricData API reference, StartTime): (age up to, in seconds; rounded down to a
#: multiple of this many seconds): under 15 days to the minute, to 63 days to 5 minutes,
#: older to the hour. A Period of 5, 10, 20 or 30 s rounds to a multiple of itself.
START_TIME_ROUNDING_S: Final = ((15 * 86_400, 60), (63 * 86_400, 300), (None, 3600))
SUB_MINUTE_PERIODS_S: Final = (5, 10, 20, 30)

#: How many datapoints beyond its EvaluationPeriods an alarm retrieves (its "evaluation
#: range"), among which missing ones are skipped before the treat-missing-data setting is
#: used: CloudWatch User Guide, "How alarm state is evaluated when data is missing" (its
#: examples retrieve the 5 most recent datapoints for 3 evaluation periods; the exact number
#: "depends on the length of the alarm period" and is not published: mmelocal's choice
#: follows the examples)
EVALUATION_RANGE_EXTRA_PERIODS: Final = 2

#: PutLogEvents' limits on one call (botocore's logs model): "The maximum batch size is
#: 1,048,576 bytes. This size is calculated as the sum of all event messages in UTF-8, plus
#: 26 bytes for each log event", "The maximum number of log events in a batch is 10,000",
#: and "the time span in a single batch cannot exceed 24 hours".
PUT_LOG_EVENTS_MAX_BYTES: Final = 1_048_576
PUT_LOG_EVENTS_EVENT_OVERHEAD_BYTES: Final = 26
PUT_LOG_EVENTS_MAX_EVENTS: Final = 10_000
PUT_LOG_EVENTS_MAX_SPAN_MS: Final = 24 * 3_600_000
#: One event's limit (PutLogEvents and InputLogEvent, botocore's logs model: "Each log event
#: can be no larger than 1 MB"; 1 MB taken as 1,048,576 bytes, as the batch's limit is).
PUT_LOG_EVENTS_MAX_EVENT_BYTES: Final = 1_048_576
#: The most UTF-8 bytes one event's message can carry: a batch of that event alone counts
#: them plus 26 against :data:`PUT_LOG_EVENTS_MAX_BYTES`, so whether or not the event's own
#: limit counts the 26, a message can be no longer than this (1,048,550 bytes).
LOG_EVENT_MAX_MESSAGE_BYTES: Final = (
    min(PUT_LOG_EVENTS_MAX_EVENT_BYTES, PUT_LOG_EVENTS_MAX_BYTES)
    - PUT_LOG_EVENTS_EVENT_OVERHEAD_BYTES
)

#: PutMetricAlarm's ``EvaluateLowSampleCountPercentile`` values (botocore's cloudwatch model).
LOW_SAMPLE_COUNT_CHOICES: Final = ("evaluate", "ignore")


def low_sample_count(statistic: str) -> float | None:
    """The sample count under which a period is too small for the percentile ``statistic``
    (``pNN``), where ``EvaluateLowSampleCountPercentile`` applies (CloudWatch User Guide,
    "Percentile-based alarms and low data samples": "For percentiles between 0.5 (inclusive)
    and 1.00 (exclusive), this setting is used when there are fewer than 10/(1-percentile)
    data points during the evaluation period [...] For percentiles between 0 and 0.5
    (exclusive), the setting is used when there are fewer than 10/percentile data points");
    None outside those ranges (p0, p100) or for another statistic."""
    if not statistic.startswith("p"):
        return None
    try:
        percentile = Fraction(statistic[1:]) / 100  # exact: p99.9 is 999/1000
    except (ValueError, ZeroDivisionError):
        return None
    if Fraction(1, 2) <= percentile < 1:
        return float(10 / (1 - percentile))
    if 0 < percentile < Fraction(1, 2):
        return float(10 / percentile)
    return None


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
    "EVALUATION_RANGE_EXTRA_PERIODS",
    "GPU_METRICS",
    "INSTANCE_METRICS",
    "INSTANCE_NAMESPACE",
    "INVOCATION_METRICS",
    "INVOCATION_NAMESPACE",
    "LOCAL_STAND_IN",
    "LOG_EVENT_MAX_MESSAGE_BYTES",
    "LOW_SAMPLE_COUNT_CHOICES",
    "MODEL_CACHE_HIT",
    "PUT_LOG_EVENTS_EVENT_OVERHEAD_BYTES",
    "PUT_LOG_EVENTS_MAX_BYTES",
    "PUT_LOG_EVENTS_MAX_EVENTS",
    "PUT_LOG_EVENTS_MAX_EVENT_BYTES",
    "PUT_LOG_EVENTS_MAX_SPAN_MS",
    "START_TIME_ROUNDING_S",
    "SUB_MINUTE_PERIODS_S",
    "TREAT_MISSING_DATA",
    "low_sample_count",
    "published_unit",
]
