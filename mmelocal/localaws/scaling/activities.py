"""Scaling activities as ``DescribeScalingActivities`` lists them (moto answers a 500),
worded as the service words them."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from mmelocal.facts.autoscaling import (
    SCALABLE_DIMENSION,
    SCALING_ACTIVITIES_PAGE_SIZE,
    SERVICE_NAMESPACE,
)
from mmelocal.localaws.paging import Order, one_page


@dataclass
class Activity:
    """One scaling activity as ``DescribeScalingActivities`` lists it."""

    region: str
    resource_id: str
    description: str
    cause: str
    start_s: float
    activity_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    end_s: float | None = None
    status: str = "InProgress"
    message: str | None = None

    def described(self) -> dict[str, Any]:
        """The activity as the API answers it."""
        out: dict[str, Any] = {
            "ActivityId": self.activity_id,
            "ServiceNamespace": SERVICE_NAMESPACE,
            "ResourceId": self.resource_id,
            "ScalableDimension": SCALABLE_DIMENSION,
            "Description": self.description,
            "Cause": self.cause,
            "StartTime": self.start_s,
            "StatusCode": self.status,
        }
        if self.end_s is not None:
            out["EndTime"] = self.end_s
        if self.message:
            out["StatusMessage"] = self.message
        return out


#: the order DescribeScalingActivities lists in: newest first, the id breaking ties (its
#: model says only "A list of scaling activity objects"; EC2 Auto Scaling's operation of
#: the same name documents "Activities are sorted by start time")
_NEWEST_FIRST: Order[Activity] = Order(
    name="StartTime", key=lambda a: (a.start_s, a.activity_id), descending=True
)


def describe_activities(
    activities: Sequence[Activity], region: str, params: dict[str, Any]
) -> dict[str, Any]:
    """The answer to ``DescribeScalingActivities`` over ``activities``: those of ``region``
    the parameters name, newest first, one page (its token a cursor in that order:
    :mod:`~mmelocal.localaws.paging`)."""
    namespace = params.get("ServiceNamespace")
    resource = params.get("ResourceId")
    dimension = params.get("ScalableDimension")
    found = [
        a for a in activities
        if a.region == region
        and namespace == SERVICE_NAMESPACE
        and (resource is None or a.resource_id == resource)
        and (dimension is None or dimension == SCALABLE_DIMENSION)
    ]  # fmt: skip
    return one_page(
        found,
        params,
        key="ScalingActivities",
        order=_NEWEST_FIRST,
        size_param="MaxResults",
        default_size=SCALING_ACTIVITIES_PAGE_SIZE,
        invalid_token_code="InvalidNextTokenException",
    )


__all__ = ["Activity", "describe_activities"]
