"""Plan and apply a deployment of a model store to a SageMaker multi-model endpoint.

:func:`make_plan` makes read-only calls only (bucket location, object listing, describes) and
returns a :class:`~mmelocal.deploy.plan.DeployPlan`; :func:`apply_plan` carries it out and
waits for InService (:mod:`~mmelocal.deploy.waits`). :func:`undeploy` (its home is
:mod:`~mmelocal.deploy.undeploy`; importable here too) deletes what mmelocal created for an
endpoint and nothing else.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

from mmelocal.aws.parallel import map_bounded
from mmelocal.aws.session import AwsClients, aws_error
from mmelocal.deploy import resources as rs
from mmelocal.deploy.artifacts import HeadProgress, removed_objects, unrecorded_notice
from mmelocal.deploy.images import triton_image_uri
from mmelocal.deploy.plan import (
    STORE_ACTIONS,
    ApiStep,
    DeployOptions,
    DeployPlan,
    ObjectStep,
    split_s3_uri,
)
from mmelocal.deploy.undeploy import undeploy
from mmelocal.deploy.upload import apply_objects, check_bucket, plan_objects
from mmelocal.deploy.waits import rollback_failed, wait_in_service
from mmelocal.errors import DeployError
from mmelocal.facts.runtime_api import IN_PROGRESS_STATUSES, UPDATE_ROLLBACK_FAILED

logger = logging.getLogger(__name__)


def store_digest(objects: list[ObjectStep]) -> str:
    """SHA-256 over the keys and contents of the store (what the instances will serve)."""
    blob = json.dumps([(o.key, o.sha256) for o in objects if o.action in STORE_ACTIONS]).encode()
    return hashlib.sha256(blob).hexdigest()


def _model_steps(
    clients: AwsClients, options: DeployOptions, image: str, digest: str
) -> Iterator[ApiStep]:
    model = rs.model_params(options, image)
    name = model["ModelName"]
    found = rs.describe(clients.sagemaker, "DescribeModel", ModelName=name)
    if found is not None:
        rs.require_mine(clients.sagemaker, found["ModelArn"], "model", name, options.endpoint_name)
    yield rs.step("sagemaker", "CreateModel", name, "reuse" if found else "create", model)
    config = rs.endpoint_config_params(options, name, digest)
    config_name = config["EndpointConfigName"]
    found = rs.describe(clients.sagemaker, "DescribeEndpointConfig", EndpointConfigName=config_name)
    if found is not None:
        rs.require_mine(
            clients.sagemaker,
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
    rs.require_mine(clients.sagemaker, found["EndpointArn"], "endpoint", name, name)
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
    if status == UPDATE_ROLLBACK_FAILED:  # whatever config it names, it serves a mix
        raise rollback_failed(name, found)
    if found.get("EndpointConfigName") == config_name:
        yield rs.step("sagemaker", "UpdateEndpoint", name, "reuse", {}, f"already on {config_name}")
        return
    if status in IN_PROGRESS_STATUSES:
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


#: the deletes of what a deploy superseded -> the parameter naming the resource
_SUPERSEDED = {"DeleteEndpointConfig": "EndpointConfigName", "DeleteModel": "ModelName"}


def _superseded_steps(
    clients: AwsClients, options: DeployOptions, model: str, config: str
) -> Iterator[ApiStep]:
    """Delete the endpoint configs and models mmelocal made for this endpoint that the plan
    no longer uses (each changed deploy names new ones; an account holds a limited number),
    unless another endpoint uses them. Sent once the endpoint is InService on ``config``
    (SageMaker: "You must not delete an EndpointConfig in use by an endpoint that is live
    or while the UpdateEndpoint or CreateEndpoint operations are being performed"), after
    :func:`in_use` is asked again; configs first, then the models they name."""
    sm, name = clients.sagemaker, options.endpoint_name
    configs = [c for c in rs.tagged(sm, "EndpointConfig", name) if c != config]
    models = [m for m in rs.tagged(sm, "Model", name) if m != model]
    if not configs and not models:
        return
    used_configs, used_models = in_use(sm, but=name, models=bool(models))
    why = f"superseded by {config}; deleted once InService on it"
    for operation, names, used in (
        ("DeleteEndpointConfig", configs, used_configs),
        ("DeleteModel", models, used_models),
    ):
        for resource in names:
            if resource in used:
                logger.info("%s of %s kept: another endpoint uses it", resource, name)
                continue
            params = {_SUPERSEDED[operation]: resource}
            step = rs.step("sagemaker", operation, resource, "delete", params, why)
            yield dataclasses.replace(step, needs_in_service=True)


def in_use(
    sagemaker: Any, *, but: str | None = None, models: bool = True
) -> tuple[set[str], set[str]]:
    """The endpoint configs the account's endpoints (all but ``but``) serve or are being
    updated to, and, with ``models``, the models those configs name (else an empty set).

    A DescribeEndpoint per endpoint (ListEndpoints answers no config, and an endpoint of
    any name may serve any config), many at once; a DescribeEndpointConfig per config in
    use only when ``models`` is asked (a deploy that changed the store alone supersedes
    a config, not its model)."""
    try:
        pages = list(sagemaker.get_paginator("list_endpoints").paginate())
    except Exception as exc:
        raise aws_error(exc, "ListEndpoints", "the account's endpoints") from exc
    names = [
        str(e["EndpointName"])
        for page in pages
        for e in page.get("Endpoints", [])
        if e["EndpointName"] != but
    ]

    def endpoint_configs(name: str) -> list[str]:
        found = rs.describe(sagemaker, "DescribeEndpoint", EndpointName=name) or {}
        pending = found.get("PendingDeploymentSummary") or {}
        return [
            str(c)
            for c in (found.get("EndpointConfigName"), pending.get("EndpointConfigName"))
            if c
        ]

    configs = {c for found in map_bounded(endpoint_configs, names) for c in found}
    if not models:
        return configs, set()

    def config_models(config: str) -> list[str]:
        found = rs.describe(sagemaker, "DescribeEndpointConfig", EndpointConfigName=config)
        return [str(v["ModelName"]) for v in (found or {}).get("ProductionVariants", [])]

    named = map_bounded(config_models, sorted(configs))
    return configs, {m for found in named for m in found}


def left_over(plan: DeployPlan) -> str | None:
    """What a deploy that did not wait for InService left of what it superseded, and how to
    delete it (None: nothing)."""
    kinds = {"DeleteEndpointConfig": "endpoint config", "DeleteModel": "model"}
    left = [f"{kinds[s.operation]} {s.resource}" for s in plan.steps
            if s.operation in kinds and s.action == "delete"]  # fmt: skip
    if not left:
        return None
    return (
        f"left (superseded, deleted only once {plan.endpoint_name} is InService): "
        f"{', '.join(left)}; run the same deploy again once it is InService to delete them "
        f"('mmelocal undeploy {plan.endpoint_name}' deletes them with the endpoint)"
    )


def make_plan(
    options: DeployOptions, clients: AwsClients, *, on_head: HeadProgress | None = None
) -> DeployPlan:
    """Everything the deploy will do; read-only calls only, every request validated.
    ``on_head(done, total)`` hears the HeadObject calls (many at once) as they are
    answered: those of the store's objects, then those of the objects not in it."""
    image = options.image or triton_image_uri(clients.region, options.triton_version)
    check_bucket(clients.s3, options.bucket, clients.region)
    objects = plan_objects(
        clients.s3,
        options.bucket,
        options.prefix,
        options.store,
        endpoint=options.endpoint_name,
        unrecorded_mine=options.prune_unrecorded,
        replace_foreign=options.replace_foreign,
        on_head=on_head,
    )
    objects += removed_objects(
        clients,
        options.bucket,
        options.prefix,
        {o.key for o in objects},
        endpoint=options.endpoint_name,
        prune=options.prune,
        prune_unrecorded=options.prune_unrecorded,
        on_head=on_head,
    )
    steps: list[ApiStep] = list(_model_steps(clients, options, image, store_digest(objects)))
    model, config = steps[0].resource, steps[1].resource
    steps += _endpoint_steps(clients, options, config)
    deregistered = any(s.operation == "DeregisterScalableTarget" for s in steps)
    steps += _scaling_steps(clients, options, deregistered)
    steps += _superseded_steps(clients, options, model, config)
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
    on_step: Callable[[ApiStep, str], None] | None = None,
) -> str:
    """Carry out ``plan``: the objects (:func:`~mmelocal.deploy.upload.apply_objects`), then
    the API steps (:func:`apply_steps`); returns the endpoint's last status. ``on_object``
    and ``on_step`` hear what was done as it is (a
    :class:`~mmelocal.deploy.outcome.DeployOutcome` records them)."""
    bucket, _ = split_s3_uri(plan.model_data_url)
    apply_objects(
        clients.s3,
        bucket,
        plan.objects,
        endpoint_name=plan.endpoint_name,
        on_bytes=on_bytes,
        on_object=on_object,
    )
    return apply_steps(plan, clients, options=options, on_status=on_status, on_step=on_step)


def apply_steps(
    plan: DeployPlan,
    clients: AwsClients,
    *,
    options: DeployOptions,
    on_status: Callable[[str], None] | None = None,
    on_step: Callable[[ApiStep, str], None] | None = None,
) -> str:
    """Send the plan's API requests in order, and wait for InService (the deployer's part,
    not a plan step): before the first request that needs it (autoscaling), and at the end
    of a plan that creates, updates or keeps the endpoint.
    With ``options.wait`` False nothing waits and the requests that need InService are
    skipped (deploy again once it is). Returns 'InService', or 'not waited'.
    ``on_step`` hears each step's fate: ``sent``, ``reused``, ``kept: WHY`` or
    ``skipped: WHY``."""
    heard = on_step or (lambda step, result: None)

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
    used: tuple[set[str], set[str]] | None = None
    for step in plan.steps:
        if step.needs_in_service and status is None:
            if not options.wait:
                logger.info("not waiting for InService: %s skipped", step.operation)
                heard(step, "skipped: it needs InService, and --no-wait waits for nothing")
                continue
            status = wait()
        if step.action == "reuse":
            heard(step, "reused")
            continue
        if step.operation in _SUPERSEDED:  # asked again now that the endpoint moved
            deletes_models = any(s.operation == "DeleteModel" for s in plan.steps)
            used = used or in_use(clients.sagemaker, models=deletes_models)
            used_configs, used_models = used
            if step.resource in (used_models if step.operation == "DeleteModel" else used_configs):
                logger.info("%s kept: an endpoint uses it", step.resource)
                heard(step, "kept: an endpoint uses it")
                continue
            if not _exists_and_mine(clients, step, plan.endpoint_name):
                heard(step, "skipped: gone already")
                continue
        logger.info("%s %s (%s)", step.operation, step.resource, step.action)
        rs.send(clients, step)
        heard(step, "sent")
    endpoint_steps = {"CreateEndpoint", "UpdateEndpoint"}
    if status is None and options.wait and any(s.operation in endpoint_steps for s in plan.steps):
        status = wait()
    return status or "not waited"


def _exists_and_mine(clients: AwsClients, step: ApiStep, endpoint: str) -> bool:
    """False when the resource is gone already; raises unless mmelocal made it for
    ``endpoint`` (the tag is read again: a plan is data, and can be edited)."""
    kind = "Model" if step.operation == "DeleteModel" else "EndpointConfig"
    found = rs.describe(clients.sagemaker, f"Describe{kind}", **step.params)
    if found is None:
        return False
    what = "model" if kind == "Model" else "endpoint config"
    rs.require_mine(clients.sagemaker, found[f"{kind}Arn"], what, step.resource, endpoint)
    return True


__all__ = [
    "apply_plan",
    "apply_steps",
    "in_use",
    "left_over",
    "make_plan",
    "store_digest",
    "undeploy",
    "unrecorded_notice",
    "wait_in_service",
]
