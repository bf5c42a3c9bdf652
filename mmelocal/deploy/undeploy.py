"""Undo a deployment: delete what mmelocal created for an endpoint (the resources tagged
``mmelocal:endpoint = NAME``) and, when asked, the objects it uploaded for it, and nothing
else."""

from __future__ import annotations

import logging
from collections.abc import Callable

from mmelocal.aws.session import AwsClients
from mmelocal.deploy import resources as rs
from mmelocal.deploy.artifacts import (
    UNRECORDED_RULE,
    AccountReads,
    HeadProgress,
    MmelocalObject,
    UnreadableObject,
    count_text,
    readers_text,
)
from mmelocal.deploy.plan import POLL_S, WAIT_TIMEOUT_S, split_s3_uri
from mmelocal.deploy.upload import delete_objects, prefix_objects
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
    unrecorded: bool = False,
    s3_uri: str | None = None,
    poll_s: float = POLL_S,
    timeout_s: float = WAIT_TIMEOUT_S,
    on_status: Callable[[str], None] | None = None,
    on_deleted: Callable[[str], None] | None = None,
    on_head: HeadProgress | None = None,
) -> list[str]:
    """Delete the scaling policy and target, endpoint, endpoint configs and models tagged
    for ``name`` (and, when asked, the S3 objects mmelocal uploaded for it); what was
    deleted, then what was kept or left (``kept ...``, ``left ...``: where, how many, how
    many bytes, and the command that deletes them).

    ``delete_artifacts`` deletes the objects under the models' prefix that mmelocal uploaded
    for ``name``, and with ``unrecorded`` those that record no endpoint (uploaded by
    mmelocal 2026-11-24 or earlier; nothing proves whose they are, so they are kept and
    named unless the caller says they are ``name``'s), never those it uploaded for another
    endpoint. When another existing model reads one of them (an MME serves its whole
    prefix) nothing at all is deleted and a :class:`DeployError` says which model; with
    ``keep_shared`` those objects are kept instead (listed as kept). The prefix is read
    from the endpoint's models; ``s3_uri`` names one more (a deploy interrupted before it
    created its model leaves objects that no model names). Without ``delete_artifacts``
    the objects stay, and the answer says where (``left ...``).

    SageMaker refuses to delete an endpoint that is being created or updated (an
    interrupted deploy leaves it so): undeploy waits until it is InService or Failed, up to
    ``timeout_s``, polling as the deploy does (``on_status`` hears each status).
    ``on_deleted`` hears each deletion as it is done (what an interrupted undeploy did);
    ``on_head(done, total)`` the HeadObject calls (many at once) that read whose each
    object under a prefix is, as they are answered."""
    if s3_uri is not None and not delete_artifacts:
        raise DeployError("s3_uri names where to delete objects: pass delete_artifacts=True")
    sm, done = clients.sagemaker, []

    def deleted(item: str) -> None:
        done.append(item)
        if on_deleted is not None:
            on_deleted(item)

    found = rs.describe(sm, "DescribeEndpoint", EndpointName=name)
    if found is not None:
        try:
            rs.require_mine(sm, found["EndpointArn"], "endpoint", name, name)
        except DeployError:
            # an earlier undeploy's deletion can end between the two reads (the service
            # then refuses the tags of the deleted endpoint): it is gone, not foreign
            deleting = found.get("EndpointStatus") == "Deleting"
            if not deleting or rs.describe(sm, "DescribeEndpoint", EndpointName=name):
                raise
            found = None
    models, urls, known = rs.tagged(sm, "Model", name), [], {}
    for model in models:
        described = rs.describe(sm, "DescribeModel", ModelName=model) or {}
        urls.append(described.get("PrimaryContainer", {}).get("ModelDataUrl", ""))
        if described:
            known[model] = described
    account = AccountReads(sm, endpoint=name, known=known)
    if s3_uri is not None:
        urls.append(s3_uri)
    # read-only until here: a refusal changes nothing
    owners = (name, None) if unrecorded else (name,)
    artifacts = _artifacts(
        clients, account, urls, owners, keep_shared, delete=delete_artifacts, on_head=on_head
    )
    if found is not None:
        for item in _delete_scaling(clients, name):
            deleted(item)
        if found.get("EndpointStatus") in IN_PROGRESS_STATUSES:
            found = settled(sm, name, poll_s=poll_s, timeout_s=timeout_s, on_status=on_status)
        if found is not None and found.get("EndpointStatus") != "Deleting":
            rs.call(sm, "DeleteEndpoint", name, EndpointName=name)
            deleted(f"endpoint {name}")
    for config in rs.tagged(sm, "EndpointConfig", name):
        rs.call(sm, "DeleteEndpointConfig", config, EndpointConfigName=config)
        deleted(f"endpoint config {config}")
    # the objects before the models: the models are where a second try finds the prefix
    kept = []
    for url, keys, notes in artifacts:
        bucket, _ = split_s3_uri(url)
        if keys:
            delete_objects(clients.s3, bucket, keys)
            deleted(f"{len(keys)} objects under {url}")
        kept += notes
    for model in models:
        rs.call(sm, "DeleteModel", model, ModelName=model)
        deleted(f"model {model}")
    return done + kept


def _artifacts(
    clients: AwsClients,
    account: AccountReads,
    urls: list[str],
    owners: tuple[str | None, ...],
    keep_shared: bool,
    *,
    delete: bool,
    on_head: HeadProgress | None = None,
) -> list[tuple[str, list[str], list[str]]]:
    """``(prefix URL, keys to delete, what is kept or left there and why)`` per prefix of
    ``name``'s models: the objects recorded for one of ``owners`` (None: no endpoint
    recorded) are deleted when ``delete``, else left; raises when another model reads a key
    and ``keep_shared`` is False (``account`` answers which, the account's models read
    once for all the prefixes)."""
    name = account.endpoint
    found: list[tuple[str, list[str], list[str]]] = []
    for bucket, prefix in sorted({split_s3_uri(u) for u in urls if u}):
        url = f"s3://{bucket}/{prefix}"
        objects, unreadable = prefix_objects(clients.s3, bucket, prefix, on_head=on_head)
        mine = [o for o in objects if o.endpoint in owners]
        notes: list[str] = []
        if not delete:
            if mine:
                notes.append(
                    f"left {count_text(len(mine), sum(o.size_bytes for o in mine))} under "
                    f"{url}, deployed for {name}: delete them with 'mmelocal undeploy {name} "
                    f"--delete-artifacts --s3-uri {url}'"
                )
            found.append((url, [], notes + _unrecorded(name, url, objects, owners)))
            continue
        notes += _unreadable(url, unreadable)
        keys = [o.key for o in mine]
        others = len(objects) - len(keys)
        if others:
            logger.info("%d objects under %s were not deployed for %s: kept", others, url, name)
        read = account.readers(bucket, keys)
        shared = sorted({k for ks in read.values() for k in ks})
        if shared and not keep_shared:
            raise DeployError(
                f"{len(shared)} of the {len(keys)} objects mmelocal deployed for {name} under "
                f"{url} are also read by {readers_text(read)} (an MME serves its whole "
                "prefix): nothing was deleted; run 'mmelocal undeploy "
                f"{name}' without --delete-artifacts (the objects stay), or undeploy what "
                "reads them first"
            )
        if shared:
            notes.append(f"kept {len(shared)} objects under {url}, read by {readers_text(read)}")
        notes += _unrecorded(name, url, objects, owners)
        found.append((url, [k for k in keys if k not in shared], notes))
    return found


def _unreadable(url: str, unreadable: list[UnreadableObject]) -> list[str]:
    """The note on the objects under ``url`` whose HeadObject S3 refused (kept: whose they
    are is unknown), grouped by S3's answer."""
    if not unreadable:
        return []
    answers = sorted({o.reason for o in unreadable})
    sample = ", ".join(o.key for o in unreadable[:3]) + (
        f", ... {len(unreadable) - 3} more" if len(unreadable) > 3 else ""
    )
    return [
        f"kept {count_text(len(unreadable), sum(o.size_bytes for o in unreadable))} under "
        f"{url} that could not be read ({sample}: HeadObject answered {'; '.join(answers)}): "
        "whose they are is unknown, so they are never deleted; read one with 'aws s3api "
        "head-object' to see whose it is"
    ]


def _unrecorded(
    name: str, url: str, objects: list[MmelocalObject], owners: tuple[str | None, ...]
) -> list[str]:
    """The note on the objects under ``url`` that record no endpoint, when they are not
    among ``owners`` (kept: nothing proves whose they are)."""
    if None in owners:
        return []
    unrecorded = [o for o in objects if o.endpoint is None]
    if not unrecorded:
        return []
    return [
        f"kept {count_text(len(unrecorded), sum(o.size_bytes for o in unrecorded))} under "
        f"{url} that record no endpoint (uploaded by mmelocal 2026-11-24 or earlier; "
        f"{UNRECORDED_RULE}): if they are {name}'s, 'mmelocal undeploy {name} "
        f"--delete-artifacts --unrecorded --s3-uri {url}' deletes them too"
    ]


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
