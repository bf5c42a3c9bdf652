"""SageMaker and Application Auto Scaling requests: built as data, validated offline, sent.

Each request is checked against botocore's own service model (``ParamValidator`` with the
operation's input shape) before anything is sent, so a malformed request fails at plan time
with botocore's report, not after the objects were uploaded. Names carry a digest of what
they describe, so an unchanged deploy reuses them and a changed one creates new ones.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from mmelocal.aws.session import aws_error, not_found
from mmelocal.deploy.plan import TAG_KEY, VARIANT_NAME, ApiStep, DeployOptions
from mmelocal.errors import DeployError
from mmelocal.facts.autoscaling import (
    MME_GPU_SCALE_IN_COOLDOWN_S,
    MME_GPU_SCALE_OUT_COOLDOWN_S,
    RESOURCE_ID_FORMAT,
    SCALABLE_DIMENSION,
    SERVICE_NAMESPACE,
)
from mmelocal.facts.cloudwatch import INSTANCE_NAMESPACE

POLICY_NAME = "mmelocal-gpu-utilization"
#: how much of the endpoint name a model or endpoint config name keeps (63 = 54 + '-' + 8)
NAME_BASE_LENGTH = 54
_SERVICE_CLIENT = {"sagemaker": "sagemaker", "application-autoscaling": "autoscaling"}


@functools.cache
def _input_shape(service: str, operation: str) -> Any:
    from mmelocal.facts.aws import service_model

    model = service_model(service)
    return model.operation_model(operation).input_shape


def validate_request(service: str, operation: str, params: Mapping[str, Any]) -> None:
    """Raise :class:`DeployError` with botocore's report when ``params`` break the model."""
    from botocore.validate import ParamValidator

    report = ParamValidator().validate(dict(params), _input_shape(service, operation))
    if report.has_errors():
        raise DeployError(
            f"{operation} request is not valid: {report.generate_report()}", operation=operation
        )


def digest_name(base: str, payload: Mapping[str, Any]) -> str:
    """``base-<8 hex>`` (at most 63 characters) naming exactly this ``payload``."""
    blob = json.dumps(payload, sort_keys=True, default=str).encode()
    return f"{base[:NAME_BASE_LENGTH]}-{hashlib.sha256(blob).hexdigest()[:8]}"


def tags(endpoint_name: str) -> list[dict[str, str]]:
    """The tags that mark a resource as mmelocal's, for this endpoint."""
    return [{"Key": TAG_KEY, "Value": endpoint_name}]


def model_params(options: DeployOptions, image: str) -> dict[str, Any]:
    """CreateModel: one MultiModel Triton container reading the whole prefix."""
    container: dict[str, Any] = {
        "Image": image,
        "Mode": "MultiModel",
        "ModelDataUrl": options.model_data_url,
    }
    if options.environment:
        container["Environment"] = dict(options.environment)
    params = {"ExecutionRoleArn": options.role_arn, "PrimaryContainer": container}
    name = digest_name(options.endpoint_name, params)
    return {"ModelName": name, **params, "Tags": tags(options.endpoint_name)}


def endpoint_config_params(
    options: DeployOptions, model_name: str, store_digest: str
) -> dict[str, Any]:
    """CreateEndpointConfig: one variant on the chosen instance type; the name changes with
    the store's content, so changed tarballs reach the instances through an update."""
    variant = {
        "VariantName": VARIANT_NAME,
        "ModelName": model_name,
        "InstanceType": options.instance_type,
        "InitialInstanceCount": options.instance_count,
    }
    name = digest_name(options.endpoint_name, {"variant": variant, "store": store_digest})
    return {
        "EndpointConfigName": name,
        "ProductionVariants": [variant],
        "Tags": tags(options.endpoint_name),
    }


def resource_id(endpoint_name: str) -> str:
    """Application Auto Scaling's id of the endpoint's variant."""
    return RESOURCE_ID_FORMAT.format(endpoint=endpoint_name, variant=VARIANT_NAME)


def scalable_target_params(options: DeployOptions) -> dict[str, Any]:
    """RegisterScalableTarget on the variant's DesiredInstanceCount."""
    return {
        "ServiceNamespace": SERVICE_NAMESPACE,
        "ResourceId": resource_id(options.endpoint_name),
        "ScalableDimension": SCALABLE_DIMENSION,
        "MinCapacity": options.instance_count,
        "MaxCapacity": options.scaling_max,
    }


def scaling_policy_params(options: DeployOptions) -> dict[str, Any]:
    """PutScalingPolicy: target tracking on the endpoint's average GPU utilization, the
    customized metric SageMaker's MME-on-GPU documentation gives."""
    metric = {
        "MetricName": "GPUUtilization",  # an INSTANCE_METRICS name
        "Namespace": INSTANCE_NAMESPACE,
        "Dimensions": [
            {"Name": "EndpointName", "Value": options.endpoint_name},
            {"Name": "VariantName", "Value": VARIANT_NAME},
        ],
        "Statistic": "Average",
        "Unit": "Percent",
    }
    return {
        "PolicyName": POLICY_NAME,
        "ServiceNamespace": SERVICE_NAMESPACE,
        "ResourceId": resource_id(options.endpoint_name),
        "ScalableDimension": SCALABLE_DIMENSION,
        "PolicyType": "TargetTrackingScaling",
        "TargetTrackingScalingPolicyConfiguration": {
            "TargetValue": float(options.target_gpu_utilization),
            "CustomizedMetricSpecification": metric,
            "ScaleInCooldown": MME_GPU_SCALE_IN_COOLDOWN_S,
            "ScaleOutCooldown": MME_GPU_SCALE_OUT_COOLDOWN_S,
        },
    }


def describe(client: Any, operation: str, **params: Any) -> dict[str, Any] | None:
    """A describe call's answer, or None when the resource does not exist."""
    method = getattr(client, operation_method(operation))
    try:
        answer: dict[str, Any] = method(**params)
    except Exception as exc:
        if not_found(exc):
            return None
        raise aws_error(exc, operation, json.dumps(params)) from exc
    return answer


def owner(sagemaker: Any, arn: str) -> str | None:
    """The endpoint name in the resource's mmelocal tag (None: not mmelocal's)."""
    try:
        answer = sagemaker.list_tags(ResourceArn=arn)
    except Exception as exc:
        raise aws_error(exc, "ListTags", arn) from exc
    for tag in answer.get("Tags", []):
        if tag.get("Key") == TAG_KEY:
            return str(tag.get("Value"))
    return None


def tagged(sagemaker: Any, kind: str, endpoint: str) -> list[str]:
    """The names of the ``kind`` resources (``Model`` or ``EndpointConfig``) tagged for
    ``endpoint``: what mmelocal created for it."""
    method = "list_models" if kind == "Model" else "list_endpoint_configs"
    found = []
    try:  # the names keep the endpoint name's first characters only (digest_name)
        for page in sagemaker.get_paginator(method).paginate(
            NameContains=endpoint[:NAME_BASE_LENGTH]
        ):
            for item in page.get(f"{kind}s", []):
                if owner(sagemaker, item[f"{kind}Arn"]) == endpoint:
                    found.append(str(item[f"{kind}Name"]))
    except DeployError:
        raise
    except Exception as exc:
        raise aws_error(exc, method, endpoint) from exc
    return found


def require_mine(sagemaker: Any, arn: str, kind: str, name: str, endpoint: str) -> None:
    """Raise unless the resource ``arn`` is tagged for ``endpoint`` (mmelocal made it)."""
    found = owner(sagemaker, arn)
    if found != endpoint:
        raise DeployError(
            f"{kind} {name} exists and was not created by mmelocal for endpoint {endpoint}: "
            "nothing was changed; choose another --endpoint-name (or delete it yourself)"
        )


def call(client: Any, operation: str, what: str, **params: Any) -> dict[str, Any]:
    """Validate and send one request; a failure is a one-line :class:`DeployError`."""
    validate_request(client.meta.service_model.service_name, operation, params)
    try:
        answer: dict[str, Any] = getattr(client, operation_method(operation))(**params)
    except Exception as exc:
        raise aws_error(exc, operation, what) from exc
    return answer


def send(clients: Any, step: ApiStep) -> dict[str, Any]:
    """Send one create/update/put/delete step (validated again: plans can be edited)."""
    client = getattr(clients, _SERVICE_CLIENT[step.service])
    return call(client, step.operation, step.resource, **step.params)


def step(
    service: str,
    operation: str,
    resource: str,
    action: str,
    params: Mapping[str, Any],
    note: str = "",
) -> ApiStep:
    """An :class:`ApiStep` whose parameters already passed botocore's validation."""
    if action not in ("reuse", "wait"):
        validate_request(service, operation, params)
    return ApiStep(
        service=service,
        operation=operation,
        resource=resource,
        action=action,
        params=dict(params),
        note=note,
    )


def operation_method(operation: str) -> str:
    """boto3's method name for an API operation (``CreateModel`` -> ``create_model``)."""
    from botocore import xform_name

    return str(xform_name(operation))


__all__ = [
    "NAME_BASE_LENGTH",
    "POLICY_NAME",
    "SCALABLE_DIMENSION",
    "call",
    "describe",
    "digest_name",
    "endpoint_config_params",
    "model_params",
    "operation_method",
    "owner",
    "require_mine",
    "resource_id",
    "scalable_target_params",
    "scaling_policy_params",
    "send",
    "step",
    "tagged",
    "tags",
    "validate_request",
]
