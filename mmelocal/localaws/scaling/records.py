"""moto's records of scalable targets and scaling policies, answered and read as the
service pages them.

:func:`paged_records` answers DescribeScalableTargets and DescribeScalingPolicies for every
caller (a :attr:`~mmelocal.localaws.app.LocalAwsApp.corrections` entry, so mmelocal's own
reads are paged too); :func:`scalable_targets`, :func:`scaling_policies` and
:func:`scalable_target` read every page of them back.
"""

from __future__ import annotations

import re
from typing import Any

from mmelocal.facts.autoscaling import (
    SCALABLE_TARGETS_PAGE_SIZE,
    SCALING_POLICIES_PAGE_SIZE,
    SERVICE_NAMESPACE,
)
from mmelocal.localaws.app.wsgi import Forward
from mmelocal.localaws.listing import epoch_s
from mmelocal.localaws.paging import Listed, Order, every_item, one_page

#: a ``MaxResults`` that has moto answer every match at once (moto sets no upper bound):
#: its own DescribeScalableTargets pages cannot be followed past the second, whose
#: ``NextToken`` is the first's again (moto 5.2.5, ``applicationautoscaling/responses.py``:
#: ``next_token = str(len(scalable_targets_resp) - 1)``)
_MOTO_EVERY_MATCH = 2**31 - 1
#: operation -> the answer's key, the page size the service gives when none is asked, and
#: the members that set an item apart (after its ``CreationTime``: the page order)
_PAGED: dict[str, tuple[str, int, tuple[str, ...]]] = {
    "DescribeScalableTargets": (
        "ScalableTargets",
        SCALABLE_TARGETS_PAGE_SIZE,
        ("ServiceNamespace", "ResourceId", "ScalableDimension"),
    ),
    "DescribeScalingPolicies": ("ScalingPolicies", SCALING_POLICIES_PAGE_SIZE, ("PolicyARN",)),
}
#: the operations :func:`paged_records` answers
PAGED_OPERATIONS = tuple(_PAGED)


def parse_resource(resource_id: str) -> tuple[str, str] | None:
    """``(endpoint, variant)`` of ``endpoint/{name}/variant/{variant}``, else None."""
    parts = resource_id.split("/")
    if len(parts) == 4 and parts[0] == "endpoint" and parts[2] == "variant":
        return parts[1], parts[3]
    return None


#: a scaling policy's ARN (Application Auto Scaling's, and moto's): ``arn:aws:autoscaling:
#: REGION:ACCOUNT:scalingPolicy:ID:resource/sagemaker/RESOURCE_ID:policyName/NAME``
_POLICY_ARN = re.compile(rf":scalingPolicy:[^:]*:resource/{SERVICE_NAMESPACE}/([^:]+):policyName/")


def policy_resource(arn: str) -> str | None:
    """The ``ResourceId`` of a SageMaker scaling policy's ARN (an alarm action), else None
    (another namespace's policy, or another kind of action)."""
    found = _POLICY_ARN.search(arn)
    return found.group(1) if found else None


def matching_policies(
    policies: list[dict[str, Any]], query: dict[str, Any]
) -> list[dict[str, Any]]:
    """The policies a DescribeScalingPolicies query names: moto ignores ``PolicyNames`` and
    matches ``ResourceId`` as a substring; the service filters on both exactly."""
    names, resource = query.get("PolicyNames"), query.get("ResourceId")
    return [
        p
        for p in policies
        if (not names or p.get("PolicyName") in names)
        and (not resource or p.get("ResourceId") == resource)
    ]


def paged_records(
    region: str,
    operation: str,
    params: dict[str, Any],
    forward: Forward,
) -> tuple[int, Any] | None:
    """DescribeScalableTargets and DescribeScalingPolicies as the service pages them (a
    correction of moto's answers for every caller, mmelocal's own reads included): every
    match read from moto at once (policies filtered exactly: :func:`matching_policies`),
    then the page ``NextToken`` and ``MaxResults`` ask for, 50 targets or 10 policies when
    ``MaxResults`` is left out (:data:`~mmelocal.facts.autoscaling.SCALABLE_TARGETS_PAGE_SIZE`,
    :data:`~mmelocal.facts.autoscaling.SCALING_POLICIES_PAGE_SIZE`), oldest first (by
    ``CreationTime``, then the target's dimension or the policy's ARN: no source gives the
    service's order; moto keeps its records in the order they were made), the token a
    cursor in that order (:mod:`~mmelocal.localaws.paging`: a deletion between pages hides
    nothing); a token no page gave is ``InvalidNextTokenException``. None (moto answers)
    for another operation."""
    if operation not in _PAGED:
        return None
    key, size, identity = _PAGED[operation]
    query = {k: v for k, v in params.items() if k not in ("NextToken", "MaxResults")}
    status, answer = forward({**query, "MaxResults": _MOTO_EVERY_MATCH})
    if status != 200 or not isinstance(answer, dict):
        return status, answer
    found = answer.get(key) or []
    if operation == "DescribeScalingPolicies":
        found = matching_policies(found, params)
    page = one_page(
        [Listed(item) for item in found],
        params,
        key=key,
        order=Order(
            name="CreationTime",
            key=lambda item: (
                epoch_s(item.value.get("CreationTime", 0)),
                *(str(item.value.get(member, "")) for member in identity),
            ),
        ),
        size_param="MaxResults",
        default_size=size,
        invalid_token_code="InvalidNextTokenException",
    )
    return status, page


def scalable_targets(aas: Any) -> list[dict[str, Any]]:
    """Every SageMaker scalable target of the region ``aas`` (a client) is in."""
    return every_item(
        aas.describe_scalable_targets, "ScalableTargets", ServiceNamespace=SERVICE_NAMESPACE
    )


def scaling_policies(aas: Any, **query: Any) -> list[dict[str, Any]]:
    """Every SageMaker scaling policy ``query`` (``ResourceId``, ``PolicyNames``) names."""
    return every_item(
        aas.describe_scaling_policies,
        "ScalingPolicies",
        ServiceNamespace=SERVICE_NAMESPACE,
        **query,
    )


def scalable_target(aas: Any, resource: str) -> dict[str, Any] | None:
    """The scalable target of ``resource`` (a resource id), None when none is registered."""
    found = aas.describe_scalable_targets(
        ServiceNamespace=SERVICE_NAMESPACE, ResourceIds=[resource]
    ).get("ScalableTargets", [])
    return found[0] if found else None


__all__ = [
    "PAGED_OPERATIONS",
    "matching_policies",
    "paged_records",
    "parse_resource",
    "policy_resource",
    "scalable_target",
    "scalable_targets",
    "scaling_policies",
]
