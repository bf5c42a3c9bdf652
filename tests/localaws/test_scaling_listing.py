"""The autoscaler reads each target's policies apart, so that a deletion elsewhere in the
region cannot hide one.

DescribeScalingPolicies pages the region's policies 10 at a time. Deleting an endpoint
deregisters its scalable targets and deletes their policies, up to 50 per target, one call
each, while the autoscaler may be listing. Listing the whole region with a NextToken that
was a position (as the local AWS's was) then moved later policies onto pages already read,
and a user's SetAlarmState invoked nothing: seen once in CI (``test_scaling_decisions.py``,
a target tracking alarm set to ALARM, right after the test that deletes an endpoint of 100
policies). The local AWS's token is a cursor now (``mmelocal.localaws.paging``); the
region's client here still pages by position, the harshest a service could, and deletes 25
policies of another target after the first page it serves, once; the fleet is a stand-in
that follows every resize.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from mmelocal.localaws.metric_store import MetricStore, series_key
from mmelocal.localaws.scaling import Autoscaler
from mmelocal.localaws.scaling.records import matching_policies, policy_resource

RESOURCE = "endpoint/e/variant/AllTraffic"
CROWDED = "endpoint/crowded/variant/A"
NOW_S = 1_800_000_000.0
ARN = "arn:aws:autoscaling:us-east-1:123456789012:scalingPolicy:{id}:resource/sagemaker/{resource}:policyName/{name}"  # noqa: E501


def _step(name: str, resource: str) -> dict[str, Any]:
    """A step scaling policy setting the capacity to 1 below the alarm's threshold."""
    return {
        "PolicyName": name,
        "PolicyARN": ARN.format(id=f"id-{name}", resource=resource, name=name),
        "ResourceId": resource,
        "ScalableDimension": "sagemaker:variant:DesiredInstanceCount",
        "PolicyType": "StepScaling",
        "StepScalingPolicyConfiguration": {
            "AdjustmentType": "ExactCapacity",
            "Cooldown": 0,
            "StepAdjustments": [{"MetricIntervalUpperBound": 0.0, "ScalingAdjustment": 1}],
        },
    }


class _Region:
    """Application Auto Scaling of one region: 30 policies of another target, then the
    invoked one; pages of 10, the token a position; 25 of the others deleted once,
    right after the first page is served (a deregistration running beside the listing)."""

    def __init__(self) -> None:
        self.policies = [_step(f"filler-{n}", CROWDED) for n in range(30)]
        self.policies.append(_step("the-last", RESOURCE))
        self.deleted = False
        self.target = {"ResourceId": RESOURCE, "MinCapacity": 1, "MaxCapacity": 2}

    def describe_scaling_policies(self, **params: Any) -> dict[str, Any]:
        found = matching_policies(self.policies, params)
        first, size = int(params.get("NextToken") or 0), int(params.get("MaxResults") or 10)
        page: dict[str, Any] = {"ScalingPolicies": found[first : first + size]}
        if first + size < len(found):
            page["NextToken"] = str(first + size)
        if not self.deleted:
            self.deleted = True
            fillers = [p for p in self.policies if p["ResourceId"] == CROWDED][:25]
            self.policies = [p for p in self.policies if p not in fillers]
        return page

    def describe_alarms(self, ActionPrefix: str = "", **_: Any) -> dict[str, Any]:
        """CloudWatch: the alarm in ALARM whose action is the invoked policy."""
        alarms = [_alarm(a) for a in [self.policies[-1]["PolicyARN"]] if a == ActionPrefix]
        return {"MetricAlarms": alarms}

    def describe_scalable_targets(self, **params: Any) -> dict[str, Any]:
        wanted = params.get("ResourceIds")
        return {"ScalableTargets": [self.target] if not wanted or RESOURCE in wanted else []}


def _alarm(action: str) -> dict[str, Any]:
    """An alarm in ALARM under its threshold, invoking the policy ``action``."""
    return {
        "AlarmName": "low",
        "StateValue": "ALARM",
        "ActionsEnabled": True,
        "AlarmActions": [action],
        "Namespace": "mmelocal/tests",
        "MetricName": "Load",
        "Dimensions": [{"Name": "EndpointName", "Value": "e"}],
        "Statistic": "Average",
        "Period": 60,
        "EvaluationPeriods": 1,
        "Threshold": 50.0,
        "ComparisonOperator": "LessThanThreshold",
    }


def _scaler(region: _Region, store: MetricStore | None = None) -> tuple[Autoscaler, Any]:
    fleet = SimpleNamespace(instance_count=2)

    def scale_to(capacity: int, **_: Any) -> int:
        fleet.instance_count = capacity
        return capacity

    fleet.scale_to = scale_to
    scaler = Autoscaler(
        client_for=lambda service, name: region,
        store=store or MetricStore(retention_s=1e9),
        fleet_of=lambda name, endpoint, variant: fleet,
        variants_of=lambda name, endpoint: ["AllTraffic"],
        show_counts=lambda *_: True,
        time_scale=lambda: 1.0,
        regions=lambda: ["us-east-1"],
    )
    return scaler, fleet


def test_a_policy_arn_names_its_target() -> None:
    assert policy_resource(_step("p", RESOURCE)["PolicyARN"]) == RESOURCE
    assert policy_resource("arn:aws:sns:us-east-1:123456789012:topic") is None
    other = ARN.format(id="x", resource="table/t", name="p").replace("/sagemaker/", "/dynamodb/")
    assert policy_resource(other) is None


def test_set_alarm_state_finds_its_policy_while_another_targets_are_deleted() -> None:
    region = _Region()
    scaler, fleet = _scaler(region)
    alarm = _alarm(region.policies[-1]["PolicyARN"])
    scaler.alarm_set("us-east-1", alarm, {"recentDatapoints": [10.0]})
    scaler.wait(timeout_s=30)
    assert region.deleted  # the deletion ran beside the reads
    assert fleet.instance_count == 1
    assert [a.cause for a in scaler.activities] == [
        "monitor alarm low in state ALARM triggered policy the-last"
    ]


def test_a_period_finds_a_targets_policy_while_another_targets_are_deleted() -> None:
    region, store = _Region(), MetricStore(retention_s=1e9)
    scaler, fleet = _scaler(region, store)
    load = series_key("mmelocal/tests", "Load", [{"Name": "EndpointName", "Value": "e"}])
    store.add(load, NOW_S - 60, [10.0])  # under the alarm's threshold in the period
    scaler.tick(NOW_S)
    scaler.wait(timeout_s=30)
    assert region.deleted
    assert fleet.instance_count == 1
    assert [a.cause for a in scaler.activities] == [
        "monitor alarm low in state ALARM triggered policy the-last"
    ]
