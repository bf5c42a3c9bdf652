"""Plan, apply and undo a deployment of a model store to a SageMaker multi-model endpoint.

:func:`make_plan` makes read-only calls only (bucket location, object listing, describes) and
returns a :class:`~mmelocal.deploy.plan.DeployPlan`; :func:`apply_plan` carries it out;
:func:`undeploy` deletes what mmelocal created for an endpoint (resources tagged
``mmelocal:endpoint = NAME``) and nothing else.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from mmelocal.aws.session import AwsClients, aws_error
from mmelocal.deploy import resources as rs
from mmelocal.deploy.artifacts import readers, readers_text, removed_objects
from mmelocal.deploy.images import triton_image_uri
from mmelocal.deploy.plan import (
    POLL_S,
    STORE_ACTIONS,
    WAIT_TIMEOUT_S,
    ApiStep,
    DeployOptions,
    DeployPlan,
    ObjectStep,
    split_s3_uri,
)
from mmelocal.deploy.upload import (
    apply_objects,
    check_bucket,
    delete_objects,
    mmelocal_objects,
    plan_objects,
)
from mmelocal.errors import DeployError
from mmelocal.facts.runtime_api import IN_PROGRESS_STATUSES

logger = logging.getLogger(__name__)

_BUSY = ("Creating", "Updating", "SystemUpdating", "RollingBack", "UpdateRollbackFailed")


def store_digest(objects: list[ObjectStep]) -> str:
    """SHA-256 over the keys and contents of the store (what the instances will serve)."""
    blob = json.dumps([(o.key, o.sha256) for o in objects if o.action in STORE_ACTIONS]).encode()
    return hashlib.sha256(blob).hexdigest()


def _mine(clients: AwsClients, arn: str, kind: str, name: str, endpoint: str) -> None:
    found = rs.owner(clients.sagemaker, arn)
    if found != endpoint:
        raise DeployError(
            f"{kind} {name} exists and was not created by mmelocal for endpoint {endpoint}: "
            "nothing was changed; choose another --endpoint-name (or delete it yourself)"
        )


def _model_steps(
    clients: AwsClients, options: DeployOptions, image: str, digest: str
) -> Iterator[ApiStep]:
    model = rs.model_params(options, image)
    name = model["ModelName"]
    found = rs.describe(clients.sagemaker, "DescribeModel", ModelName=name)
    if found is not None:
        _mine(clients, found["ModelArn"], "model", name, options.endpoint_name)
    yield rs.step("sagemaker", "CreateModel", name, "reuse" if found else "create", model)
    config = rs.endpoint_config_params(options, name, digest)
    config_name = config["EndpointConfigName"]
    found = rs.describe(clients.sagemaker, "DescribeEndpointConfig", EndpointConfigName=config_name)
    if found is not None:
        _mine(
            clients,
            found["EndpointConfigArn"],
            "endpoint config",
            config_name,
            options.endpoint_name,
        )
    yield rs.step(
        "sagemaker", "CreateEndpointConfig", config_name, "reuse" if found else "create", config
    )


def _endpoint_steps(
    clients: AwsClients, options: DeployOptions, config_name: str
) -> Iterator[ApiStep]:
    name = options.endpoint_name
    found = rs.describe(clients.sagemaker, "DescribeEndpoint", EndpointName=name)
    if found is None:
        create = {"EndpointName": name, "EndpointConfigName": config_name, "Tags": rs.tags(name)}
        yield rs.step("sagemaker", "CreateEndpoint", name, "create", create)
        return
    _mine(clients, found["EndpointArn"], "endpoint", name, name)
    status = found.get("EndpointStatus", "")
    if status == "Deleting":  # an undeploy: nothing to update, and no name to create yet
        raise DeployError(
            f"endpoint {name} is being deleted: wait until it is gone ('aws sagemaker wait "
            f"endpoint-deleted --endpoint-name {name}'), then deploy"
        )
    if status == "Failed":
        raise DeployError(
            f"endpoint {name} is Failed ({found.get('FailureReason', 'no reason given')}): "
            f"run 'mmelocal undeploy {name}', then deploy again"
        )
    if found.get("EndpointConfigName") == config_name:
        yield rs.step("sagemaker", "UpdateEndpoint", name, "reuse", {}, f"already on {config_name}")
        return
    if status in _BUSY:
        raise DeployError(f"endpoint {name} is {status}: wait until it is InService, then deploy")
    old = rs.call(
        clients.sagemaker,
        "DescribeEndpointConfig",
        name,
        EndpointConfigName=found["EndpointConfigName"],
    )
    old_type = old["ProductionVariants"][0].get("InstanceType")
    old_count = old["ProductionVariants"][0].get("InitialInstanceCount")
    params: dict[str, Any] = {"EndpointName": name, "EndpointConfigName": config_name}
    note = f"from {found['EndpointConfigName']}"
    if old_type == options.instance_type:
        # keeps the DesiredInstanceCount autoscaling reached; scaling stays on
        params["RetainAllVariantProperties"] = True
        if old_count == options.instance_count:
            note += ", keeping the instance count autoscaling set"
        else:  # a count the user changed is the new config's
            params["ExcludeRetainedVariantProperties"] = [
                {"VariantPropertyType": "DesiredInstanceCount"}
            ]
            note += f", instance count {old_count} -> {options.instance_count}"
    elif _scaling_target(clients, name):
        # SageMaker fails an update that changes a scaling target's instance type
        # ("Update endpoints that use auto scaling"); it is registered again afterwards
        yield _deregister_step(name, f"instance type {old_type} -> {options.instance_type}")
    yield rs.step("sagemaker", "UpdateEndpoint", name, "update", params, note)


def _deregister_step(name: str, why: str) -> ApiStep:
    """DeregisterScalableTarget of the endpoint's variant (its policies go with it)."""
    dereg = {
        "ServiceNamespace": "sagemaker",
        "ResourceId": rs.resource_id(name),
        "ScalableDimension": rs.SCALABLE_DIMENSION,
    }
    return rs.step(
        "application-autoscaling", "DeregisterScalableTarget", rs.resource_id(name),
        "delete", dereg, why,
    )  # fmt: skip


def _scaling_target(clients: AwsClients, name: str) -> bool:
    found = rs.describe(
        clients.autoscaling,
        "DescribeScalableTargets",
        ServiceNamespace="sagemaker",
        ResourceIds=[rs.resource_id(name)],
        ScalableDimension=rs.SCALABLE_DIMENSION,
    )
    return bool((found or {}).get("ScalableTargets"))


def _scaling_steps(
    clients: AwsClients, options: DeployOptions, deregistered: bool
) -> Iterator[ApiStep]:
    name = options.endpoint_name
    if options.scaling_max <= options.instance_count:
        # autoscaling off: a target an earlier deploy registered would go on scaling
        if not deregistered and _scaling_target(clients, name):
            yield _deregister_step(name, "autoscaling off (--max-instances = --instance-count)")
        return
    target = rs.scalable_target_params(options)
    note = f"{options.instance_count}..{options.scaling_max} instances"
    yield dataclasses.replace(
        rs.step(
            "application-autoscaling",
            "RegisterScalableTarget",
            rs.resource_id(name),
            "put",
            target,
            note,
        ),
        needs_in_service=True,
    )
    policy = rs.scaling_policy_params(options)
    note = f"GPUUtilization {options.target_gpu_utilization:g} %"
    yield dataclasses.replace(
        rs.step("application-autoscaling", "PutScalingPolicy", rs.POLICY_NAME, "put", policy, note),
        needs_in_service=True,
    )


def make_plan(options: DeployOptions, clients: AwsClients) -> DeployPlan:
    """Everything the deploy will do; read-only calls only, every request validated."""
    image = options.image or triton_image_uri(clients.region, options.triton_version)
    check_bucket(clients.s3, options.bucket, clients.region)
    objects = plan_objects(clients.s3, options.bucket, options.prefix, options.store)
    objects += removed_objects(
        clients,
        options.bucket,
        options.prefix,
        {o.key for o in objects},
        endpoint=options.endpoint_name,
        prune=options.prune,
    )
    steps: list[ApiStep] = list(_model_steps(clients, options, image, store_digest(objects)))
    steps += _endpoint_steps(clients, options, steps[-1].resource)
    deregistered = any(s.operation == "DeregisterScalableTarget" for s in steps)
    steps += _scaling_steps(clients, options, deregistered)
    return DeployPlan(
        endpoint_name=options.endpoint_name,
        region=clients.region,
        image=image,
        model_data_url=options.model_data_url,
        objects=tuple(objects),
        steps=tuple(steps),
    )


def apply_plan(
    plan: DeployPlan,
    clients: AwsClients,
    *,
    options: DeployOptions,
    on_bytes: Callable[[int], None] | None = None,
    on_object: Callable[[ObjectStep], None] | None = None,
    on_status: Callable[[str], None] | None = None,
) -> str:
    """Carry out ``plan``: the objects (:func:`~mmelocal.deploy.upload.apply_objects`), then
    the API steps (:func:`apply_steps`); returns the endpoint's last status."""
    bucket, _ = split_s3_uri(plan.model_data_url)
    apply_objects(
        clients.s3,
        bucket,
        plan.objects,
        endpoint_name=plan.endpoint_name,
        on_bytes=on_bytes,
        on_object=on_object,
    )
    return apply_steps(plan, clients, options=options, on_status=on_status)


def apply_steps(
    plan: DeployPlan,
    clients: AwsClients,
    *,
    options: DeployOptions,
    on_status: Callable[[str], None] | None = None,
) -> str:
    """Send the plan's API requests in order, and wait for InService (the deployer's part,
    not a plan step): before the first request that needs it (autoscaling), and at the end
    of a plan that creates, updates or keeps the endpoint.
    With ``options.wait`` False nothing waits and the requests that need InService are
    skipped (deploy again once it is). Returns 'InService', or 'not waited'."""

    configs = [s.resource for s in plan.steps if s.operation == "CreateEndpointConfig"]

    def wait() -> str:
        return wait_in_service(
            clients.sagemaker,
            plan.endpoint_name,
            poll_s=options.poll_s,
            timeout_s=options.timeout_s,
            on_status=on_status,
            config_name=configs[0] if configs else None,
        )

    status: str | None = None
    for step in plan.steps:
        if step.needs_in_service and status is None:
            if not options.wait:
                logger.info("not waiting for InService: %s skipped", step.operation)
                continue
            status = wait()
        if step.action != "reuse":
            logger.info("%s %s (%s)", step.operation, step.resource, step.action)
            rs.send(clients, step)
    endpoint_steps = {"CreateEndpoint", "UpdateEndpoint"}
    if status is None and options.wait and any(s.operation in endpoint_steps for s in plan.steps):
        status = wait()
    return status or "not waited"


def wait_in_service(
    sagemaker: Any,
    name: str,
    *,
    poll_s: float,
    timeout_s: float,
    on_status: Callable[[str], None] | None = None,
    config_name: str | None = None,
) -> str:
    """Poll DescribeEndpoint until InService; Failed raises with SageMaker's FailureReason,
    and so does InService on another config than ``config_name`` (an update that failed
    is rolled back: the endpoint serves its old config again)."""
    deadline = time.monotonic() + timeout_s
    polls = _polls(sagemaker, name, poll_s=poll_s, on_status=on_status)
    while True:
        found = next(polls)
        if found is None:
            raise DeployError(f"endpoint {name} was deleted while waiting for it to be InService")
        status = str(found.get("EndpointStatus", ""))
        serving = found.get("EndpointConfigName")
        moved = config_name is None or serving == config_name
        if status == "InService" and not moved and found.get("FailureReason"):
            raise DeployError(
                f"the update of endpoint {name} to {config_name} rolled back: "
                f"{found['FailureReason']}; it still serves {serving} (see its CloudWatch "
                "logs, fix, and deploy again)"
            )
        if status == "InService" and moved:
            return status
        if status == "Failed":
            raise DeployError(
                f"endpoint {name} failed: {found.get('FailureReason', 'no reason given')} "
                f"(see its CloudWatch logs; 'mmelocal undeploy {name}' cleans up)"
            )
        if time.monotonic() > deadline:
            raise DeployError(
                f"endpoint {name} still {status} after {timeout_s:.0f} s: it goes on in the "
                "background; run deploy again to wait, or undeploy to clean up"
            )


def _polls(
    sagemaker: Any, name: str, *, poll_s: float, on_status: Callable[[str], None] | None
) -> Iterator[dict[str, Any] | None]:
    """DescribeEndpoint's answer for ``name`` (None once it is gone), again and again: the
    pause between two starts at 1 s and doubles up to ``poll_s`` (a local endpoint changes
    in seconds, a real one in minutes). ``on_status`` hears each status."""
    pause = threading.Event()
    interval_s = min(1.0, poll_s)
    while True:
        found = rs.describe(sagemaker, "DescribeEndpoint", EndpointName=name)
        if on_status is not None:
            on_status(str(found.get("EndpointStatus", "")) if found is not None else "deleted")
        yield found
        pause.wait(interval_s)
        interval_s = min(poll_s, interval_s * 2)


def _settled(
    sagemaker: Any,
    name: str,
    *,
    poll_s: float,
    timeout_s: float,
    on_status: Callable[[str], None] | None,
) -> dict[str, Any] | None:
    """DescribeEndpoint's answer once ``name`` is no longer changing (None: it is gone)."""
    deadline = time.monotonic() + timeout_s
    polls = _polls(sagemaker, name, poll_s=poll_s, on_status=on_status)
    while True:
        found = next(polls)
        status = None if found is None else found.get("EndpointStatus")
        if status not in IN_PROGRESS_STATUSES:
            return found
        if time.monotonic() > deadline:
            raise DeployError(
                f"endpoint {name} still {status} after {timeout_s:.0f} s, and SageMaker does "
                "not delete an endpoint in progress: run undeploy again once it is InService "
                "or Failed"
            )


def undeploy(
    clients: AwsClients,
    name: str,
    *,
    delete_artifacts: bool = False,
    keep_shared: bool = False,
    poll_s: float = POLL_S,
    timeout_s: float = WAIT_TIMEOUT_S,
    on_status: Callable[[str], None] | None = None,
) -> list[str]:
    """Delete the scaling policy and target, endpoint, endpoint configs and models tagged
    for ``name`` (and, when asked, the S3 objects mmelocal uploaded for it); what was
    deleted.

    ``delete_artifacts`` deletes the objects under the models' prefix that mmelocal uploaded
    for ``name`` (or for no endpoint: mmelocal 2026-11-24 or earlier), never those
    it uploaded for another endpoint. When another existing model reads one of them (an
    MME serves its whole prefix) nothing at all is deleted and a :class:`DeployError` says
    which model; with ``keep_shared`` those objects are kept instead (listed as kept).

    SageMaker refuses to delete an endpoint that is being created or updated (an
    interrupted deploy leaves it so): undeploy waits until it is InService or Failed, up to
    ``timeout_s``, polling as the deploy does (``on_status`` hears each status)."""
    sm, done = clients.sagemaker, []
    found = rs.describe(sm, "DescribeEndpoint", EndpointName=name)
    if found is not None:
        _mine(clients, found["EndpointArn"], "endpoint", name, name)
    models, urls = _tagged(clients, "list_models", "Models", name), []
    for model in models:
        described = rs.describe(sm, "DescribeModel", ModelName=model) or {}
        urls.append(described.get("PrimaryContainer", {}).get("ModelDataUrl", ""))
    # read-only until here: a refusal changes nothing
    artifacts = _artifacts(clients, name, urls, keep_shared) if delete_artifacts else []
    if found is not None:
        done += _delete_scaling(clients, name)
        if found.get("EndpointStatus") in IN_PROGRESS_STATUSES:
            found = _settled(sm, name, poll_s=poll_s, timeout_s=timeout_s, on_status=on_status)
        if found is not None and found.get("EndpointStatus") != "Deleting":
            rs.call(sm, "DeleteEndpoint", name, EndpointName=name)
            done.append(f"endpoint {name}")
    for config in _tagged(clients, "list_endpoint_configs", "EndpointConfigs", name):
        rs.call(sm, "DeleteEndpointConfig", config, EndpointConfigName=config)
        done.append(f"endpoint config {config}")
    # the objects before the models: the models are where a second try finds the prefix
    for url, keys, kept in artifacts:
        bucket, _ = split_s3_uri(url)
        if keys:
            delete_objects(clients.s3, bucket, keys)
            done.append(f"{len(keys)} objects under {url}")
        if kept:
            done.append(f"kept {kept}")
    for model in models:
        rs.call(sm, "DeleteModel", model, ModelName=model)
        done.append(f"model {model}")
    return done


def _artifacts(
    clients: AwsClients, name: str, urls: list[str], keep_shared: bool
) -> list[tuple[str, list[str], str]]:
    """``(prefix URL, keys to delete, what is kept and why)`` per prefix of ``name``'s
    models; raises when another model reads a key and ``keep_shared`` is False."""
    found = []
    for url in sorted({u for u in urls if u}):
        bucket, prefix = split_s3_uri(url)
        objects = mmelocal_objects(clients.s3, bucket, prefix)
        keys = [o.key for o in objects if o.endpoint in (None, name)]
        others = len(objects) - len(keys)
        if others:
            logger.info("%d objects under %s were deployed for another endpoint: kept", others, url)
        read = readers(clients, bucket, keys, endpoint=name)
        shared = sorted({k for ks in read.values() for k in ks})
        if shared and not keep_shared:
            raise DeployError(
                f"{len(shared)} of the {len(keys)} objects mmelocal deployed for {name} under "
                f"{url} are also read by {readers_text(read)} (an MME serves its whole "
                "prefix): nothing was deleted; run 'mmelocal undeploy "
                f"{name}' without --delete-artifacts (the objects stay), or undeploy what "
                "reads them first"
            )
        kept = f"{len(shared)} objects under {url}, read by {readers_text(read)}" if shared else ""
        found.append((url, [k for k in keys if k not in shared], kept))
    return found


def _delete_scaling(clients: AwsClients, name: str) -> list[str]:
    aas, rid, done = clients.autoscaling, rs.resource_id(name), []
    policies = rs.describe(
        aas, "DescribeScalingPolicies", ServiceNamespace="sagemaker", ResourceId=rid
    )
    for policy in (policies or {}).get("ScalingPolicies", []):
        if policy["PolicyName"] == rs.POLICY_NAME:
            rs.call(
                aas,
                "DeleteScalingPolicy",
                rid,
                PolicyName=rs.POLICY_NAME,
                ServiceNamespace="sagemaker",
                ResourceId=rid,
                ScalableDimension=rs.SCALABLE_DIMENSION,
            )
            done.append(f"scaling policy {rs.POLICY_NAME}")
    targets = rs.describe(
        aas, "DescribeScalableTargets", ServiceNamespace="sagemaker", ResourceIds=[rid]
    )
    if (targets or {}).get("ScalableTargets"):
        rs.call(
            aas,
            "DeregisterScalableTarget",
            rid,
            ServiceNamespace="sagemaker",
            ResourceId=rid,
            ScalableDimension=rs.SCALABLE_DIMENSION,
        )
        done.append(f"scalable target {rid}")
    return done


def _tagged(clients: AwsClients, method: str, key: str, name: str) -> list[str]:
    found = []
    arn_key, name_key = key[:-1] + "Arn", key[:-1] + "Name"
    paginator = clients.sagemaker.get_paginator(method)
    try:  # the names keep the endpoint name's first characters only (digest_name)
        for page in paginator.paginate(NameContains=name[: rs.NAME_BASE_LENGTH]):
            for item in page.get(key, []):
                if rs.owner(clients.sagemaker, item[arn_key]) == name:
                    found.append(str(item[name_key]))
    except DeployError:
        raise
    except Exception as exc:
        raise aws_error(exc, method, name) from exc
    return found


__all__ = ["apply_plan", "apply_steps", "make_plan", "store_digest", "undeploy", "wait_in_service"]
