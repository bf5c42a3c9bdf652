"""Application Auto Scaling's numbers for SageMaker endpoint variants.

Sources (read 2026-11):

* Target tracking: "How target tracking scaling for Application Auto Scaling works",
  https://docs.aws.amazon.com/autoscaling/application/userguide/target-tracking-scaling-policy-overview.html
  (the service creates and manages the alarms; it scales out quickly and in gradually) and
  "Target tracking scaling policies for Application Auto Scaling",
  https://docs.aws.amazon.com/autoscaling/application/userguide/application-auto-scaling-target-tracking.html
* The alarms target tracking creates for a SageMaker variant, as DescribeAlarms shows them:
  high "InvocationsPerInstance > 1500 for 3 datapoints within 3 minutes", low
  "InvocationsPerInstance < 1350 for 15 datapoints within 15 minutes" for a target of 1500
  (so the low threshold is 90 % of the target),
  https://repost.aws/questions/QUf450Wsd9RROGGOIwaolN9w/sagemaker-autoscaling-delay
* Cooldown defaults: 300 s for scale-in and scale-out on "Amazon SageMaker endpoint
  variants" (ScaleInCooldown / ScaleOutCooldown in TargetTrackingScalingPolicyConfiguration,
  Application Auto Scaling API reference; the CDK documents the same defaults),
  https://docs.aws.amazon.com/autoscaling/application/APIReference/API_TargetTrackingScalingPolicyConfiguration.html
* The predefined metric: "Automatic scaling of Amazon SageMaker AI models" and "Load testing
  your auto scaling configuration" (``SageMakerVariantInvocationsPerInstance`` is the
  per-minute sum of ``InvocationsPerInstance``),
  https://docs.aws.amazon.com/sagemaker/latest/dg/endpoint-auto-scaling.html,
  https://docs.aws.amazon.com/sagemaker/latest/dg/endpoint-scaling-loadtest.html
"""

from __future__ import annotations

from typing import Final, NamedTuple

from mmelocal.facts.cloudwatch import INVOCATION_NAMESPACE

#: SageMaker's CloudWatch metrics come in 1-minute periods.
METRIC_PERIOD_S: Final = 60

#: Target tracking's scale-out alarm: 3 datapoints within 3 minutes over the target.
HIGH_ALARM_EVALUATION_PERIODS: Final = 3
HIGH_ALARM_DATAPOINTS: Final = 3

#: Its scale-in alarm: 15 datapoints within 15 minutes under the low threshold.
LOW_ALARM_EVALUATION_PERIODS: Final = 15
LOW_ALARM_DATAPOINTS: Final = 15

#: The scale-in alarm's threshold is this fraction of the target value.
LOW_ALARM_THRESHOLD_FACTOR: Final = 0.9


class TrackingAlarm(NamedTuple):
    """One of the two alarms target tracking creates: the side its name says, how it
    compares, "M out of N" datapoints, and its threshold as a fraction of the target value."""

    side: str
    comparison: str
    evaluation_periods: int
    datapoints_to_alarm: int
    threshold_factor: float


#: Target tracking's scale-out alarm (over the target) and scale-in alarm (under
#: :data:`LOW_ALARM_THRESHOLD_FACTOR` of it), the local AWS's and the rules' alike.
HIGH_ALARM: Final = TrackingAlarm(
    "High", "GreaterThanThreshold", HIGH_ALARM_EVALUATION_PERIODS, HIGH_ALARM_DATAPOINTS, 1.0
)
LOW_ALARM: Final = TrackingAlarm(
    "Low",
    "LessThanThreshold",
    LOW_ALARM_EVALUATION_PERIODS,
    LOW_ALARM_DATAPOINTS,
    LOW_ALARM_THRESHOLD_FACTOR,
)

#: Cooldown defaults for SageMaker endpoint variants.
DEFAULT_SCALE_OUT_COOLDOWN_S: Final = 300.0
DEFAULT_SCALE_IN_COOLDOWN_S: Final = 300.0
#: A step scaling policy's ``Cooldown`` when the request leaves it out (SageMaker variants).
DEFAULT_STEP_COOLDOWN_S: Final = 300.0
#: The cooldowns of the GPU-utilization target tracking policy the MME-on-GPU guide gives
#: (``mmelocal deploy`` puts it): scale in slowly, scale out at the service's default.
MME_GPU_SCALE_IN_COOLDOWN_S: Final = 600
MME_GPU_SCALE_OUT_COOLDOWN_S: Final = 300

#: How a step scaling policy aggregates its alarm's datapoints into the value its steps are
#: chosen by (StepScalingPolicyConfiguration's ``MetricAggregationType``, Application Auto
#: Scaling API reference: "Valid values are Minimum, Maximum, and Average. If the
#: aggregation type is null, the value is treated as Average").
METRIC_AGGREGATION_TYPES: Final = ("Average", "Minimum", "Maximum")
DEFAULT_METRIC_AGGREGATION_TYPE: Final = "Average"

#: Application Auto Scaling's names for a SageMaker variant.
SERVICE_NAMESPACE: Final = "sagemaker"
SCALABLE_DIMENSION: Final = "sagemaker:variant:DesiredInstanceCount"
RESOURCE_ID_FORMAT: Final = "endpoint/{endpoint}/variant/{variant}"

#: How many items one page of a Describe call holds when ``MaxResults`` is left out, which
#: is also the most it may ask for (botocore's application-autoscaling model, MaxResults:
#: DescribeScalableTargets "can be between 1 and 50. The default value is 50";
#: DescribeScalingPolicies "can be between 1 and 10. The default value is 10";
#: DescribeScalingActivities and DescribeScheduledActions "between 1 and 50", default 50).
#: The model gives the member no ``min``/``max``: the range is in its documentation only.
SCALABLE_TARGETS_PAGE_SIZE: Final = 50
SCALING_POLICIES_PAGE_SIZE: Final = 10
SCALING_ACTIVITIES_PAGE_SIZE: Final = 50
SCHEDULED_ACTIONS_PAGE_SIZE: Final = 50
#: operation -> the largest ``MaxResults`` it takes (the smallest is 1)
MOST_MAX_RESULTS: Final[dict[str, int]] = {
    "DescribeScalableTargets": SCALABLE_TARGETS_PAGE_SIZE,
    "DescribeScalingPolicies": SCALING_POLICIES_PAGE_SIZE,
    "DescribeScalingActivities": SCALING_ACTIVITIES_PAGE_SIZE,
    "DescribeScheduledActions": SCHEDULED_ACTIONS_PAGE_SIZE,
}

#: Predefined metric type -> (namespace, metric name, statistic) of the alarms it makes.
PREDEFINED_METRICS: Final[dict[str, tuple[str, str, str]]] = {
    "SageMakerVariantInvocationsPerInstance": (
        INVOCATION_NAMESPACE,
        "InvocationsPerInstance",
        "Sum",
    ),
}

#: How the service words the causes of target-tracking activities (DescribeScalingActivities).
ALARM_CAUSE_FORMAT: Final = "monitor alarm {alarm} in state ALARM triggered policy {policy}"
#: The high and low alarms' names: ``TargetTracking-{resource}-AlarmHigh-{uuid}``.
ALARM_NAME_FORMAT: Final = "TargetTracking-{resource}-Alarm{side}-{suffix}"

__all__ = [
    "ALARM_CAUSE_FORMAT",
    "ALARM_NAME_FORMAT",
    "DEFAULT_METRIC_AGGREGATION_TYPE",
    "DEFAULT_SCALE_IN_COOLDOWN_S",
    "DEFAULT_SCALE_OUT_COOLDOWN_S",
    "DEFAULT_STEP_COOLDOWN_S",
    "HIGH_ALARM",
    "HIGH_ALARM_DATAPOINTS",
    "HIGH_ALARM_EVALUATION_PERIODS",
    "LOW_ALARM",
    "LOW_ALARM_DATAPOINTS",
    "LOW_ALARM_EVALUATION_PERIODS",
    "LOW_ALARM_THRESHOLD_FACTOR",
    "METRIC_AGGREGATION_TYPES",
    "METRIC_PERIOD_S",
    "MME_GPU_SCALE_IN_COOLDOWN_S",
    "MME_GPU_SCALE_OUT_COOLDOWN_S",
    "MOST_MAX_RESULTS",
    "PREDEFINED_METRICS",
    "RESOURCE_ID_FORMAT",
    "SCALABLE_DIMENSION",
    "SCALABLE_TARGETS_PAGE_SIZE",
    "SCALING_ACTIVITIES_PAGE_SIZE",
    "SCALING_POLICIES_PAGE_SIZE",
    "SCHEDULED_ACTIONS_PAGE_SIZE",
    "SERVICE_NAMESPACE",
    "TrackingAlarm",
]
