"""Undo a deployment: delete what mmelocal created for an endpoint (the resources tagged
``mmelocal:endpoint = NAME``) and, when asked, the objects it uploaded for it, and nothing
else."""

from __future__ import annotations

import logging
from collections.abc import Callable

from mmelocal.aws.session import AwsClients
from mmelocal.deploy import resources as rs
from mmelocal.deploy.artifacts import readers, readers_text
from mmelocal.deploy.plan import POLL_S, WAIT_TIMEOUT_S, split_s3_uri
from mmelocal.deploy.upload import delete_objects, mmelocal_objects
from mmelocal.deploy.waits import settled
from mmelocal.errors import DeployError
from mmelocal.facts.runtime_api import IN_PROGRESS_STATUSES

logger = logging.getLogger(__name__)


def undeploy(
    clients: AwsClients,
    name: str,
    *,
    delete_artifacts: bool = False,
    keep_shared: bool = False,
    unrecorded: bool = True,
    s3_uri: str | None = None,
    poll_s: float = POLL_S,
    timeout_s: float = WAIT_TIMEOUT_S,
    on_status: Callable[[str], None] | None = None,
) -> list[str]:
    """Delete the scaling policy and target, endpoint, endpoint configs and models tagged
    for ``name`` (and, when asked, the S3 objects mmelocal uploaded for it); what was
    deleted.

    ``delete_artifacts`` deletes the objects under the models' prefix that mmelocal uploaded
    for ``name``, and with ``unrecorded`` those that record no endpoint (uploaded by
    mmelocal 2026-11-24 or earlier), never those it uploaded for another endpoint. When
    another existing model reads one of them (an MME serves its whole prefix) nothing at
    all is deleted and a :class:`DeployError` says which model; with ``keep_shared`` those
    objects are kept instead (listed as kept). The prefix is read from the endpoint's
    models; ``s3_uri`` names one more (a deploy interrupted before it created its model
    leaves objects that no model names).

    SageMaker refuses to delete an endpoint that is being created or updated (an
    interrupted deploy leaves it so): undeploy waits until it is InService or Failed, up to
    ``timeout_s``, polling as the deploy does (``on_status`` hears each status)."""
    if s3_uri is not None and not delete_artifacts:
        raise DeployError("s3_uri names where to delete objects: pass delete_artifacts=True")
    sm, done = clients.sagemaker, []
    found = rs.describe(sm, "DescribeEndpoint", EndpointName=name)
    if found is not None:
        rs.require_mine(sm, found["EndpointArn"], "endpoint", name, name)
    models, urls = rs.tagged(sm, "Model", name), []
    for model in models:
        described = rs.describe(sm, "DescribeModel", ModelName=model) or {}
        urls.append(described.get("PrimaryContainer", {}).get("ModelDataUrl", ""))
    if s3_uri is not None:
        urls.append(s3_uri)
    # read-only until here: a refusal changes nothing
    owners = (name, None) if unrecorded else (name,)
    artifacts = _artifacts(clients, name, urls, owners, keep_shared) if delete_artifacts else []
    if found is not None:
        done += _delete_scaling(clients, name)
        if found.get("EndpointStatus") in IN_PROGRESS_STATUSES:
            found = settled(sm, name, poll_s=poll_s, timeout_s=timeout_s, on_status=on_status)
        if found is not None and found.get("EndpointStatus") != "Deleting":
            rs.call(sm, "DeleteEndpoint", name, EndpointName=name)
            done.append(f"endpoint {name}")
    for config in rs.tagged(sm, "EndpointConfig", name):
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
    clients: AwsClients,
    name: str,
    urls: list[str],
    owners: tuple[str | None, ...],
    keep_shared: bool,
) -> list[tuple[str, list[str], str]]:
    """``(prefix URL, keys to delete, what is kept and why)`` per prefix of ``name``'s
    models: the objects recorded for one of ``owners`` (None: no endpoint recorded); raises
    when another model reads a key and ``keep_shared`` is False."""
    found = []
    for bucket, prefix in sorted({split_s3_uri(u) for u in urls if u}):
        url = f"s3://{bucket}/{prefix}"
        objects = mmelocal_objects(clients.s3, bucket, prefix)
        keys = [o.key for o in objects if o.endpoint in owners]
        others = len(objects) - len(keys)
        if others:
            logger.info("%d objects under %s were not deployed for %s: kept", others, url, name)
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


__all__ = ["undeploy"]
