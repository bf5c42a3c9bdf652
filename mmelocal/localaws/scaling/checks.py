"""The service's refusals that moto lacks: a scalable target on an endpoint or variant
that does not exist, MinCapacity above MaxCapacity, a policy without a registered target,
a ``MetricAggregationType`` outside its enum, and an ``UpdateEndpoint`` that changes the
instance type of a variant registered for autoscaling (or removes it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mmelocal.errors import AwsServiceError
from mmelocal.facts.autoscaling import (
    METRIC_AGGREGATION_TYPES,
    SCALABLE_DIMENSION,
    SERVICE_NAMESPACE,
)
from mmelocal.localaws.scaling.records import parse_resource, scalable_target, scalable_targets

#: (service, region) -> one of mmelocal's own boto3 clients
ClientFor = Callable[[str, str], Any]
#: (region, endpoint) -> the endpoint's variant names (None: no such endpoint)
VariantsOf = Callable[[str, str], "list[str] | None"]


def check_request(
    operation: str,
    region: str,
    params: dict[str, Any],
    *,
    client_for: ClientFor,
    variants_of: VariantsOf,
) -> None:
    """Raise the service's error for a RegisterScalableTarget or PutScalingPolicy that moto
    would accept."""
    if params.get("ServiceNamespace") != SERVICE_NAMESPACE:
        return
    resource = str(params.get("ResourceId", ""))
    if operation == "RegisterScalableTarget":
        low, high = params.get("MinCapacity"), params.get("MaxCapacity")
        if low is not None and high is not None and int(low) > int(high):
            raise AwsServiceError(
                "Minimum capacity cannot be greater than maximum capacity",
                code="ValidationException",
            )
        located = parse_resource(resource)
        if located is None:
            raise AwsServiceError(
                f"Unsupported resource ID {resource}: a SageMaker variant is "
                "endpoint/{EndpointName}/variant/{VariantName}",
                code="ValidationException",
            )
        variants = variants_of(region, located[0])
        if variants is None or located[1] not in variants:
            raise AwsServiceError(
                f"The endpoint {located[0]} does not exist or has no variant "
                f"{located[1]} (ResourceId {resource})",
                code="ValidationException",
            )
    elif operation == "PutScalingPolicy" and (
        scalable_target(client_for("application-autoscaling", region), resource) is None
    ):
        raise AwsServiceError(
            f"No scalable target registered for service namespace: {SERVICE_NAMESPACE}, "
            f"resource ID: {resource}, scalable dimension: "
            f"{params.get('ScalableDimension', SCALABLE_DIMENSION)}",
            code="ObjectNotFoundException",
            status=400,
        )
    if operation == "PutScalingPolicy":
        check_step_config(params)


def check_step_config(params: dict[str, Any]) -> None:
    """The service's enum check on ``MetricAggregationType`` (moto takes any value)."""
    config = params.get("StepScalingPolicyConfiguration") or {}
    kind = config.get("MetricAggregationType")
    if kind is not None and kind not in METRIC_AGGREGATION_TYPES:
        raise AwsServiceError(
            f"1 validation error detected: Value '{kind}' at "
            "'stepScalingPolicyConfiguration.metricAggregationType' failed to satisfy "
            "constraint: Member must satisfy enum value set: "
            f"[{', '.join(METRIC_AGGREGATION_TYPES)}]",
            code="ValidationException",
        )


def check_update(
    client_for: ClientFor,
    region: str,
    endpoint: str,
    described: dict[str, Any],
    config: dict[str, Any],
) -> None:
    """The service's rule for ``UpdateEndpoint``: an update that changes the instance
    type of a variant registered for autoscaling, or removes it, fails."""
    scaled = {
        located[1]
        for t in scalable_targets(client_for("application-autoscaling", region))
        if (located := parse_resource(t["ResourceId"])) is not None and located[0] == endpoint
    }
    if not scaled:
        return
    sagemaker = client_for("sagemaker", region)
    current = sagemaker.describe_endpoint_config(EndpointConfigName=described["EndpointConfigName"])
    before = {v["VariantName"]: v.get("InstanceType") for v in current["ProductionVariants"]}
    after = {v["VariantName"]: v.get("InstanceType") for v in config["ProductionVariants"]}
    for variant in sorted(scaled):
        if variant not in after or after[variant] != before.get(variant):
            raise AwsServiceError(
                f"The variant {variant} of endpoint {endpoint} is registered with Application "
                "Auto Scaling; an update may not change its instance type or remove it. "
                "Deregister the scalable target first (DeregisterScalableTarget), update, "
                "then register it again.",
                code="ValidationException",
            )


__all__ = ["ClientFor", "VariantsOf", "check_request", "check_step_config", "check_update"]
