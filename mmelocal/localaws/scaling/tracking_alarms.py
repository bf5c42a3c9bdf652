"""The alarms target tracking creates (``TargetTracking-<resource>-AlarmHigh/Low-<uuid>``):
made when a policy is put (the control loop evaluates them like any alarm), listed in
``DescribeScalingPolicies``, deleted with their policy; and the metric a target tracking
policy tracks."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

from mmelocal.errors import AwsServiceError
from mmelocal.facts.autoscaling import (
    ALARM_NAME_FORMAT,
    HIGH_ALARM,
    LOW_ALARM,
    METRIC_PERIOD_S,
    PREDEFINED_METRICS,
    SERVICE_NAMESPACE,
)
from mmelocal.facts.cloudwatch import GPU_METRICS, INSTANCE_NAMESPACE, LOCAL_STAND_IN
from mmelocal.localaws.cloudwatch_api import start_unchecked
from mmelocal.localaws.metric_store import MetricStore, series_key
from mmelocal.localaws.scaling.bookkeeping import PolicyBook
from mmelocal.localaws.scaling.records import parse_resource

logger = logging.getLogger(__name__)

#: (namespace, metric name, dimensions, statistic)
TrackedMetric = tuple[str, str, list[dict[str, str]], str]


def tracked_metric(params: dict[str, Any]) -> TrackedMetric:
    """The metric a target tracking policy (PutScalingPolicy's parameters, or the policy as
    described) tracks; an unknown predefined metric is refused as the service refuses it."""
    config = params["TargetTrackingScalingPolicyConfiguration"]
    located = parse_resource(str(params["ResourceId"])) or ("", "")
    predefined = config.get("PredefinedMetricSpecification")
    if predefined:
        kind = predefined.get("PredefinedMetricType", "")
        if kind not in PREDEFINED_METRICS:
            raise AwsServiceError(
                f"Unsupported predefined metric type {kind} for SageMaker; supported: "
                f"{', '.join(PREDEFINED_METRICS)}",
                code="ValidationException",
            )
        namespace, metric, statistic = PREDEFINED_METRICS[kind]
        dimensions = [
            {"Name": "EndpointName", "Value": located[0]},
            {"Name": "VariantName", "Value": located[1]},
        ]
        return namespace, metric, dimensions, statistic
    custom = config.get("CustomizedMetricSpecification") or {}
    return (
        str(custom.get("Namespace", "")),
        str(custom.get("MetricName", "")),
        list(custom.get("Dimensions") or []),
        str(custom.get("Statistic") or "Average"),
    )


class TrackingAlarms:
    """Target tracking's alarms in the local CloudWatch (see the module docstring);
    ``client_for(service, region)`` gives mmelocal's own clients."""

    def __init__(
        self, client_for: Callable[[str, str], Any], store: MetricStore, book: PolicyBook
    ) -> None:
        self._client_for = client_for
        self._store = store
        self._book = book

    def policy_put(self, region: str, params: dict[str, Any], answer: dict[str, Any]) -> None:
        """After moto recorded a policy: create its alarms (target tracking) and say when a
        GPU metric can never fire here; adds ``Alarms`` to ``answer``."""
        config = params.get("TargetTrackingScalingPolicyConfiguration")
        arn = str(answer.get("PolicyARN", ""))
        if params.get("ServiceNamespace") != SERVICE_NAMESPACE or not config or not arn:
            return
        self.delete_alarms(region, arn)
        namespace, metric, dimensions, statistic = tracked_metric(params)
        if namespace == INSTANCE_NAMESPACE and metric in GPU_METRICS and not self._has_gpu(params):
            logger.warning(
                "policy %s tracks %s, which is only published where a GPU is read: with no GPU "
                "here it never fires. %s (same namespace and dimensions) is the local stand-in.",
                params.get("PolicyName"),
                metric,
                LOCAL_STAND_IN[metric],
            )
        target = float(config["TargetValue"])
        resource = str(params["ResourceId"])
        cloudwatch = self._client_for("cloudwatch", region)
        names, alarms = [], []
        for alarm in (HIGH_ALARM, LOW_ALARM):
            if alarm is LOW_ALARM and config.get("DisableScaleIn"):
                continue
            name = ALARM_NAME_FORMAT.format(resource=resource, side=alarm.side, suffix=uuid.uuid4())
            cloudwatch.put_metric_alarm(
                AlarmName=name,
                AlarmDescription=f"DO NOT EDIT OR DELETE. For TargetTrackingScaling policy {arn}.",
                AlarmActions=[arn],
                Namespace=namespace,
                MetricName=metric,
                Dimensions=dimensions,
                Statistic=statistic,
                Period=METRIC_PERIOD_S,
                EvaluationPeriods=alarm.evaluation_periods,
                DatapointsToAlarm=alarm.datapoints_to_alarm,
                Threshold=target * alarm.threshold_factor,
                ComparisonOperator=alarm.comparison,
            )
            start_unchecked(cloudwatch, name)  # a new alarm, as any (moto starts it OK)
            names.append(name)
            described = cloudwatch.describe_alarms(AlarmNames=[name])["MetricAlarms"]
            alarms.append({"AlarmName": name, "AlarmARN": described[0]["AlarmArn"]})
        self._book.set_alarm_names(region, arn, names)
        answer["Alarms"] = alarms

    def delete_alarms(self, region: str, policy_arn: str) -> None:
        """Delete the alarms a policy created (its deletion, or a new version of it)."""
        names = self._book.pop_alarm_names(region, policy_arn)
        if names:
            self._client_for("cloudwatch", region).delete_alarms(AlarmNames=names)

    def described_alarms(self, region: str, policy_arn: str) -> list[dict[str, str]]:
        """``Alarms`` of a policy in ``DescribeScalingPolicies``."""
        names = self._book.alarm_names(region, policy_arn)
        if not names:
            return []
        found = self._client_for("cloudwatch", region).describe_alarms(AlarmNames=names)
        return [
            {"AlarmName": a["AlarmName"], "AlarmARN": a["AlarmArn"]} for a in found["MetricAlarms"]
        ]

    def _has_gpu(self, params: dict[str, Any]) -> bool:
        located = parse_resource(str(params["ResourceId"]))
        if located is None:
            return False
        key = series_key(
            INSTANCE_NAMESPACE,
            "GPUUtilization",
            [
                {"Name": "EndpointName", "Value": located[0]},
                {"Name": "VariantName", "Value": located[1]},
            ],
        )
        return self._store.knows(key)


__all__ = ["TrackedMetric", "TrackingAlarms", "tracked_metric"]
