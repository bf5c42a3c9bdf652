"""Several scaling policies on one scalable target: when more than one would act in a period,
the one that gives the largest capacity wins (PutScalingPolicy API reference, botocore's
application-autoscaling model: "Application Auto Scaling gives precedence to the policy
that provides the largest capacity for both scale out and scale in"), whatever order the
policies are listed in. The autoscaler runs here on fake clients and a fake fleet."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from mmelocal.localaws.metric_store import MetricStore, series_key
from mmelocal.localaws.scaling import Autoscaler

RESOURCE = "endpoint/e/variant/AllTraffic"
NOW_S = 1_800_000_000.0


def _tracking(name: str, metric: str, target: float) -> dict[str, Any]:
    return {
        "PolicyName": name,
        "PolicyARN": f"arn:policy/{name}",
        "ResourceId": RESOURCE,
        "ScalableDimension": "sagemaker:variant:DesiredInstanceCount",
        "PolicyType": "TargetTrackingScaling",
        "TargetTrackingScalingPolicyConfiguration": {
            "TargetValue": target,
            "CustomizedMetricSpecification": {
                "Namespace": "mmelocal/tests",
                "MetricName": metric,
                "Statistic": "Average",
                "Dimensions": [{"Name": "EndpointName", "Value": "e"}],
            },
        },
    }


def _scaled_to(policies: list[dict[str, Any]], values: dict[str, float], current: int) -> int:
    """The capacity one period's evaluation resizes the fleet to (``current`` if none)."""
    store = MetricStore(retention_s=1e9)
    for metric, value in values.items():
        key = series_key("mmelocal/tests", metric, [{"Name": "EndpointName", "Value": "e"}])
        for age in range(15, 0, -1):  # 15 one-minute periods ending now, all at ``value``
            store.add(key, NOW_S - 60 * age, [value])
    target = {"ResourceId": RESOURCE, "MinCapacity": 1, "MaxCapacity": 10}
    aas = SimpleNamespace(
        describe_scalable_targets=lambda **_: {"ScalableTargets": [target]},
        describe_scaling_policies=lambda **_: {"ScalingPolicies": policies},
    )
    resized: list[int] = []

    def scale_to(capacity: int, **_: Any) -> int:
        resized.append(capacity)
        return capacity

    fleet = SimpleNamespace(instance_count=current, scale_to=scale_to)
    scaler = Autoscaler(
        client_for=lambda service, region: aas,
        store=store,
        fleet_of=lambda region, endpoint, variant: fleet,
        variants_of=lambda region, endpoint: ["AllTraffic"],
        show_counts=lambda *_: True,
        time_scale=lambda: 1.0,
        regions=lambda: ["us-east-1"],
    )
    scaler.tick(NOW_S)
    scaler.wait(timeout_s=30)
    return resized[-1] if resized else current


@pytest.mark.parametrize("order", [1, -1])
def test_the_largest_scale_out_wins(order: int) -> None:
    """Two target tracking policies over their targets at 1 instance: one asks for 3
    (300 / 100), the other for 5 (50 / 10); the fleet goes to 5."""
    policies = [_tracking("three", "A", 100.0), _tracking("five", "B", 10.0)][::order]
    assert _scaled_to(policies, {"A": 300.0, "B": 50.0}, current=1) == 5


@pytest.mark.parametrize("order", [1, -1])
def test_a_scale_out_wins_over_a_scale_in(order: int) -> None:
    """At 4 instances one policy is far under its target (it would go to 1), the other over
    it (it would go to 8): the largest capacity, 8, wins."""
    policies = [_tracking("in", "A", 100.0), _tracking("out", "B", 10.0)][::order]
    assert _scaled_to(policies, {"A": 10.0, "B": 20.0}, current=4) == 8


@pytest.mark.parametrize("order", [1, -1])
def test_the_smallest_scale_in_wins(order: int) -> None:
    """At 8 instances both policies are far under their targets: one would go to 2, the
    other to 4; the larger capacity, 4, wins."""
    policies = [_tracking("two", "A", 100.0), _tracking("four", "B", 100.0)][::order]
    assert _scaled_to(policies, {"A": 25.0, "B": 50.0}, current=8) == 4
