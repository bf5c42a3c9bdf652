"""The local AWS's state on disk: saved at a clean stop, restored at the next start.

Everything goes through the public API of the running server (boto3 on its own URL), so
it does not depend on how moto stores things: at :func:`save`, the S3 objects are copied
under ``DIR/state/s3/<bucket>/`` (an object whose ETag did not change is not copied
again) and the resources are described into ``DIR/state/state.json``; at :func:`restore`,
the buckets and objects are uploaded again and the resources re-created in order
(models, endpoint configs, endpoints, which start their Triton again, scalable targets,
scaling policies, which create their target tracking alarms again, CloudWatch metric
alarms) and the endpoints' log groups with their events; an endpoint created again keeps
the CreationTime and LastModifiedTime it had, and one saved Failed comes back Failed with
its FailureReason, starting nothing (:class:`KeepSaved`). One saved Creating (the stop
gave up its creation: :meth:`.endpoints.EndpointManager.close`) is Creating again and
starts its fleet again, as the service would have gone on creating it; one saved Updating
by an UpdateEndpoint keeps that update (DescribeEndpoint's ``PendingDeploymentSummary``):
it comes back on the config it served (Creating), then goes on with the update. One saved
serving (InService, Updating) keeps its variants' instance counts and weights
(DescribeEndpoint's ``ProductionVariants``: what UpdateEndpointWeightsAndCapacities or the
autoscaler set since its creation): its variants start on their ``CurrentInstanceCount``
and ``CurrentWeight``, not the config's initial ones, and one Updating by
UpdateEndpointWeightsAndCapacities or a resize goes on to its ``DesiredInstanceCount`` and
``DesiredWeight`` once they serve (Updating, then InService), as on the service, which has
no restart. A resource that already exists is kept as it is. Not kept: metric datapoints,
alarm states and history (alarms start again at INSUFFICIENT_DATA), scaling activities.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

from mmelocal.facts.aws import S3_UNCONSTRAINED_REGION, bucket_region
from mmelocal.facts.sagemaker import SERVING_ENDPOINT_STATUSES
from mmelocal.localaws.cloudwatch_api import keep_state
from mmelocal.localaws.logs import restore_log_groups, save_log_groups

logger = logging.getLogger(__name__)

#: service, region -> a boto3 client of the local AWS (the public answers, overlays included)
ClientFor = Callable[[str, str], Any]
STATE_FILE = "state.json"
_MODEL_FIELDS = ("ExecutionRoleArn", "PrimaryContainer", "Containers", "VpcConfig",
                 "InferenceExecutionConfig", "EnableNetworkIsolation")  # fmt: skip
_CONFIG_FIELDS = ("ProductionVariants", "DataCaptureConfig", "AsyncInferenceConfig", "KmsKeyId")
_TARGET_FIELDS = ("ServiceNamespace", "ResourceId", "ScalableDimension", "MinCapacity",
                  "MaxCapacity", "SuspendedState")  # fmt: skip
_POLICY_FIELDS = ("PolicyName", "ServiceNamespace", "ResourceId", "ScalableDimension",
                  "PolicyType", "TargetTrackingScalingPolicyConfiguration",
                  "StepScalingPolicyConfiguration")  # fmt: skip
_ALARM_FIELDS = ("AlarmName", "AlarmDescription", "ActionsEnabled", "OKActions", "AlarmActions",
                 "InsufficientDataActions", "MetricName", "Namespace", "Statistic",
                 "ExtendedStatistic", "Dimensions", "Period", "Unit", "EvaluationPeriods",
                 "DatapointsToAlarm", "Threshold", "ComparisonOperator", "TreatMissingData",
                 "EvaluateLowSampleCountPercentile", "Metrics", "ThresholdMetricId")  # fmt: skip
#: what ``HeadObject`` tells of an object that ``PutObject`` set (``upload_file``'s
#: ExtraArgs take the same names)
_OBJECT_FIELDS = ("ContentType", "ContentEncoding", "ContentDisposition", "ContentLanguage",
                  "CacheControl", "Metadata")  # fmt: skip
#: what an endpoint keeps of its DescribeEndpoint beside what CreateEndpoint takes
_ENDPOINT_TIMES = ("CreationTime", "LastModifiedTime")
#: what an endpoint Updating keeps of each variant its UpdateEndpoint deploys
#: (``PendingDeploymentSummary``'s ``ProductionVariants``; the count and weight retained
#: from the running variants included)
_PENDING_VARIANT_FIELDS = ("VariantName", "DesiredInstanceCount", "DesiredWeight", "InstanceType")
#: what an endpoint serving (InService, Updating) keeps of each running variant
#: (DescribeEndpoint's ``ProductionVariants``, ProductionVariantSummary in botocore's
#: sagemaker model): the count and weight it serves with, and those asked for by an
#: UpdateEndpointWeightsAndCapacities or a resize under way
_VARIANT_FIELDS = ("VariantName", "CurrentInstanceCount", "CurrentWeight",
                   "DesiredInstanceCount", "DesiredWeight")  # fmt: skip
#: the alarms target tracking creates (its policies create them again)
_MANAGED_ALARM_PREFIX = "TargetTracking-"


def _pick(found: dict[str, Any], fields: Iterable[str]) -> dict[str, Any]:
    """The non-empty ``fields`` of a Describe answer (what the Create call takes)."""
    return {k: found[k] for k in fields if found.get(k) not in (None, {}, [], "")}


def _pages(client: Any, operation: str, key: str, **params: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for page in client.get_paginator(operation).paginate(**params):
        items.extend(page.get(key, []))
    return items


def _tags(sagemaker: Any, arn: str) -> list[dict[str, str]]:
    tags: list[dict[str, str]] = sagemaker.list_tags(ResourceArn=arn).get("Tags", [])
    return tags


def _object_file(root: Path, bucket: str, key: str) -> Path:
    return root / "s3" / bucket / hashlib.sha256(key.encode()).hexdigest()


def _save_s3(s3: Any, root: Path, previous: dict[str, Any]) -> dict[str, Any]:
    buckets: dict[str, Any] = {}
    for bucket in s3.list_buckets().get("Buckets", []):
        name = bucket["Name"]
        region = bucket_region(s3.get_bucket_location(Bucket=name).get("LocationConstraint"))
        before = previous.get(name, {}).get("objects", {})
        attributes_before = previous.get(name, {}).get("attributes", {})
        objects: dict[str, str] = {}
        attributes: dict[str, dict[str, Any]] = {}
        for item in _pages(s3, "list_objects_v2", "Contents", Bucket=name):
            key, etag = item["Key"], item["ETag"]
            path = _object_file(root, name, key)
            unchanged = before.get(key) == etag and path.is_file()
            if not unchanged:
                path.parent.mkdir(parents=True, exist_ok=True)
                s3.download_file(name, key, str(path))
            if unchanged and key in attributes_before:
                attributes[key] = attributes_before[key]
            else:
                attributes[key] = _pick(s3.head_object(Bucket=name, Key=key), _OBJECT_FIELDS)
            objects[key] = etag
        buckets[name] = {"region": region, "objects": objects, "attributes": attributes}
        kept = {_object_file(root, name, k).name for k in objects}
        folder = root / "s3" / name
        if folder.is_dir():
            for stale in folder.iterdir():
                if stale.name not in kept:
                    stale.unlink()
    return buckets


def _update_under_way(found: dict[str, Any]) -> dict[str, Any] | None:
    """The UpdateEndpoint under way of an endpoint's DescribeEndpoint ``found``, as the state
    keeps it (its ``PendingDeploymentSummary``: the config it deploys, and each variant's
    desired properties); None when it is not Updating to a new config (an
    UpdateEndpointWeightsAndCapacities or a resize has no summary)."""
    pending = found.get("PendingDeploymentSummary")
    if found["EndpointStatus"] != "Updating" or not pending:
        return None
    update: dict[str, Any] = {"EndpointConfigName": pending["EndpointConfigName"]}
    if "ProductionVariants" in pending:
        update["ProductionVariants"] = [
            _pick(v, _PENDING_VARIANT_FIELDS) for v in pending["ProductionVariants"]
        ]
    return update


def _save_region(client_for: ClientFor, region: str) -> dict[str, Any]:
    sm = client_for("sagemaker", region)
    models = []  # oldest first: restored in that order, they keep their relative order
    for summary in _pages(sm, "list_models", "Models", SortOrder="Ascending"):
        found = sm.describe_model(ModelName=summary["ModelName"])
        params = {"ModelName": found["ModelName"], **_pick(found, _MODEL_FIELDS)}
        models.append({"params": params, "tags": _tags(sm, found["ModelArn"])})
    configs = []
    for summary in _pages(sm, "list_endpoint_configs", "EndpointConfigs", SortOrder="Ascending"):
        found = sm.describe_endpoint_config(EndpointConfigName=summary["EndpointConfigName"])
        params = {"EndpointConfigName": found["EndpointConfigName"]}
        params.update(_pick(found, _CONFIG_FIELDS))
        configs.append({"params": params, "tags": _tags(sm, found["EndpointConfigArn"])})
    endpoints = []
    for summary in _pages(sm, "list_endpoints", "Endpoints"):
        found = sm.describe_endpoint(EndpointName=summary["EndpointName"])
        if found["EndpointStatus"] == "Deleting":
            continue
        params = {k: found[k] for k in ("EndpointName", "EndpointConfigName")}
        times = {k: found[k].timestamp() for k in _ENDPOINT_TIMES}
        saved = {"params": params, "tags": _tags(sm, found["EndpointArn"]), "times": times}
        if found["EndpointStatus"] == "Failed":
            saved["failure_reason"] = found.get("FailureReason", "")
        update = _update_under_way(found)
        if update is not None:
            saved["update"] = update
        if found["EndpointStatus"] in SERVING_ENDPOINT_STATUSES and found.get("ProductionVariants"):
            saved["variants"] = [_pick(v, _VARIANT_FIELDS) for v in found["ProductionVariants"]]
        endpoints.append(saved)
    aas = client_for("application-autoscaling", region)
    targets = _pages(
        aas, "describe_scalable_targets", "ScalableTargets", ServiceNamespace="sagemaker"
    )
    policies = _pages(
        aas, "describe_scaling_policies", "ScalingPolicies", ServiceNamespace="sagemaker"
    )
    alarms = _pages(client_for("cloudwatch", region), "describe_alarms", "MetricAlarms")
    return {
        "models": models,
        "endpoint_configs": configs,
        "endpoints": endpoints,
        "scalable_targets": [_pick(t, _TARGET_FIELDS) for t in targets],
        "scaling_policies": [_pick(p, _POLICY_FIELDS) for p in policies],
        # a restored policy gets a new ARN: the alarms acting on the old one are repointed
        "policy_arns": [p["PolicyARN"] for p in policies],
        "alarms": [
            _pick(a, _ALARM_FIELDS)
            for a in alarms
            if not a["AlarmName"].startswith(_MANAGED_ALARM_PREFIX)
        ],
    }


def save(client_for: ClientFor, root: Path, regions: Iterable[str]) -> None:
    """Write the state under ``root`` (``DIR/state``)."""
    root.mkdir(parents=True, exist_ok=True)
    manifest = root / STATE_FILE
    previous = json.loads(manifest.read_text()) if manifest.is_file() else {}
    state = {
        "version": 1,
        "s3": _save_s3(client_for("s3", S3_UNCONSTRAINED_REGION), root, previous.get("s3", {})),
        "regions": {region: _save_region(client_for, region) for region in sorted(regions)},
        "logs": {r: save_log_groups(client_for("logs", r)) for r in sorted(regions)},
    }
    tmp = manifest.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1, default=str))
    tmp.replace(manifest)
    logger.info("local AWS state saved under %s", root)


def _create(call: Callable[..., Any], what: str, **params: Any) -> Any:
    from botocore.exceptions import ClientError

    try:
        return call(**params)
    except ClientError as exc:
        logger.warning("not restored: %s (%s)", what, exc)
        return None


_ACTION_FIELDS = ("AlarmActions", "OKActions", "InsufficientDataActions")


def repoint_actions(alarm: dict[str, Any], arns: dict[str, str]) -> dict[str, Any]:
    """``alarm``'s parameters with each policy ARN of ``arns`` in its actions replaced by
    the policy's new ARN."""
    out = dict(alarm)
    for name in _ACTION_FIELDS:
        if out.get(name):
            out[name] = [arns.get(action, action) for action in out[name]]
    return out


def repoint_alarms(cloudwatch: Any, arns: dict[str, str]) -> None:
    """Point the user's alarms acting on a policy at its new ARN (moto gives a policy put
    again a new ARN where the service keeps it: without this a step scaling alarm would
    never fire its policy again); each keeps its state, as an alarm the user updates does."""
    for old in arns:
        for alarm in cloudwatch.describe_alarms(ActionPrefix=old).get("MetricAlarms", []):
            if not alarm["AlarmName"].startswith(_MANAGED_ALARM_PREFIX):
                cloudwatch.put_metric_alarm(**repoint_actions(_pick(alarm, _ALARM_FIELDS), arns))
                keep_state(cloudwatch, alarm)


class KeepSaved(Protocol):
    """Told an endpoint's saved times, the FailureReason of one saved Failed, the update
    of one saved Updating (:func:`_update_under_way`) and the variants of one saved serving
    (their current and desired counts and weights), before it is created again (None for
    both times once CreateEndpoint was called):
    :meth:`.endpoints.EndpointManager.keep_saved`."""

    def __call__(
        self,
        region: str,
        name: str,
        *,
        created_s: float | None,
        modified_s: float | None,
        failure_reason: str | None = None,
        update: dict[str, Any] | None = None,
        variants: Sequence[dict[str, Any]] | None = None,
    ) -> None: ...


def restore(client_for: ClientFor, root: Path, *, keep_saved: KeepSaved | None = None) -> list[str]:
    """Re-create what :func:`save` wrote under ``root``; the regions it held. Each endpoint
    is announced to ``keep_saved`` (:meth:`.endpoints.EndpointManager.keep_saved`) before
    it is created again, so that it shows the times it had rather than the restore's, one
    saved Failed is Failed again rather than started, one saved Updating goes on with
    its update, and its variants serve the counts and weights they had."""
    manifest = root / STATE_FILE
    if not manifest.is_file():
        return []
    state = json.loads(manifest.read_text())
    s3 = client_for("s3", S3_UNCONSTRAINED_REGION)  # a bucket created here needs no constraint
    for name, bucket in state.get("s3", {}).items():
        create = {"Bucket": name}
        if bucket["region"] != S3_UNCONSTRAINED_REGION:
            create["CreateBucketConfiguration"] = {"LocationConstraint": bucket["region"]}
        _create(s3.create_bucket, f"bucket {name}", **create)
        attributes = bucket.get("attributes", {})
        for key in bucket["objects"]:
            s3.upload_file(
                str(_object_file(root, name, key)), name, key, ExtraArgs=attributes.get(key)
            )
    for region, held in state.get("regions", {}).items():
        sm = client_for("sagemaker", region)
        for kind, call in (
            ("models", sm.create_model),
            ("endpoint_configs", sm.create_endpoint_config),
            ("endpoints", sm.create_endpoint),
        ):
            for item in held.get(kind, []):
                params = dict(item["params"])
                if item.get("tags"):
                    params["Tags"] = item["tags"]
                kept = item.get("times") if kind == "endpoints" else None
                if kept and keep_saved is not None:
                    keep_saved(
                        region,
                        params["EndpointName"],
                        created_s=kept["CreationTime"],
                        modified_s=kept["LastModifiedTime"],
                        failure_reason=item.get("failure_reason"),
                        update=item.get("update"),
                        variants=item.get("variants"),
                    )
                _create(call, f"{kind} {next(iter(item['params'].values()))}", **params)
                if kept and keep_saved is not None:  # taken, or not created: forgotten
                    keep_saved(region, params["EndpointName"], created_s=None, modified_s=None)
        aas = client_for("application-autoscaling", region)
        for target in held.get("scalable_targets", []):
            _create(
                aas.register_scalable_target,
                f"scalable target {target.get('ResourceId')}",
                **target,
            )
        arns: dict[str, str] = {}
        policies = held.get("scaling_policies", [])
        for policy, old_arn in zip(
            policies, held.get("policy_arns", [None] * len(policies)), strict=False
        ):
            put = _create(
                aas.put_scaling_policy, f"scaling policy {policy.get('PolicyName')}", **policy
            )
            if put is not None and old_arn:
                arns[old_arn] = put["PolicyARN"]
        cloudwatch = client_for("cloudwatch", region)
        for alarm in held.get("alarms", []):
            _create(
                cloudwatch.put_metric_alarm,
                f"alarm {alarm.get('AlarmName')}",
                **repoint_actions(alarm, arns),
            )
    for region, groups in state.get("logs", {}).items():
        restore_log_groups(client_for("logs", region), groups)
    logger.info("local AWS state restored from %s", root)
    return list(state.get("regions", {}))


__all__ = ["STATE_FILE", "KeepSaved", "repoint_actions", "repoint_alarms", "restore", "save"]
