"""Step scaling's cooldown as Application Auto Scaling applies it (StepScalingPolicyConfiguration
API reference, Cooldown): "While the cooldown period is in effect, capacity added by the
initiating scale-out activity is calculated as part of the desired capacity for the next
scale-out activity. For example, when an alarm triggers a step scaling policy to increase
the capacity by 2 [...] If the alarm triggers again during the cooldown period but at a more
aggressive step adjustment of 3, the previous increase of 2 is considered part of the
current capacity. Therefore, only 1 is added", and "if another alarm triggers a scale-out
activity during the cooldown period after a scale-in, Application Auto Scaling scales out
the target immediately". The autoscaler runs on fake clients and a fake fleet."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from mmelocal.localaws.metric_store import MetricStore, series_key
from mmelocal.localaws.scaling import Autoscaler

RESOURCE = "endpoint/e/variant/AllTraffic"
T0_S = 1_800_000_000.0
DIMENSIONS = [{"Name": "EndpointName", "Value": "e"}]


def _policy(name: str, steps: list[dict[str, Any]], **config: Any) -> dict[str, Any]:
    return {
        "PolicyName": name,
        "PolicyARN": f"arn:policy/{name}",
        "ResourceId": RESOURCE,
        "ScalableDimension": "sagemaker:variant:DesiredInstanceCount",
        "PolicyType": "StepScaling",
        "StepScalingPolicyConfiguration": {
            "AdjustmentType": "ChangeInCapacity",
            "Cooldown": 300,
            "StepAdjustments": steps,
            **config,
        },
    }


def _alarm(name: str, comparison: str) -> dict[str, Any]:
    return {
        "AlarmName": f"alarm-{name}",
        "AlarmActions": [f"arn:policy/{name}"],
        "Namespace": "mmelocal/tests",
        "MetricName": "Load",
        "Dimensions": DIMENSIONS,
        "Statistic": "Average",
        "Period": 60,
        "EvaluationPeriods": 1,
        "Threshold": 50.0,
        "ComparisonOperator": comparison,
    }


class _World:
    """One scalable target (1..20) with the given policies and alarms, a fleet whose count
    follows every resize, the metric set by :meth:`period`."""

    def __init__(self, policies: list[dict[str, Any]], capacity: int) -> None:
        self.store = MetricStore(retention_s=1e9)
        self.in_alarm: set[str] = set()
        self.fleet = SimpleNamespace(instance_count=capacity, scale_to=self._scale_to)
        target = {"ResourceId": RESOURCE, "MinCapacity": 1, "MaxCapacity": 20}
        alarms = {
            "out": _alarm("out", "GreaterThanThreshold"),
            "in": _alarm("in", "LessThanThreshold"),
        }

        def firing(ActionPrefix: str, **_: Any) -> dict[str, Any]:
            return {
                "MetricAlarms": [
                    a for n, a in alarms.items()
                    if n in self.in_alarm and a["AlarmActions"][0] == ActionPrefix
                ]
            }  # fmt: skip

        clients = SimpleNamespace(
            describe_scalable_targets=lambda **_: {"ScalableTargets": [target]},
            describe_scaling_policies=lambda **_: {"ScalingPolicies": policies},
            describe_alarms=firing,
        )
        self.scaler = Autoscaler(
            client_for=lambda service, region: clients,
            store=self.store,
            fleet_of=lambda region, endpoint, variant: self.fleet,
            variants_of=lambda region, endpoint: ["AllTraffic"],
            show_counts=lambda *_: True,
            time_scale=lambda: 1.0,
            regions=lambda: ["us-east-1"],
        )

    def _scale_to(self, capacity: int, **_: Any) -> int:
        self.fleet.instance_count = capacity
        return capacity

    def period(self, minute: int, load: float, in_alarm: set[str]) -> int:
        """The period ending ``minute`` minutes after T0 at ``load``; the count after it."""
        end = T0_S + 60 * minute
        self.store.add(series_key("mmelocal/tests", "Load", DIMENSIONS), end - 60, [load])
        self.in_alarm = in_alarm
        self.scaler.tick(end)
        self.scaler.wait(timeout_s=30)
        return int(self.fleet.instance_count)


OUT_STEPS = [
    {"MetricIntervalLowerBound": 0.0, "MetricIntervalUpperBound": 20.0, "ScalingAdjustment": 2},
    {"MetricIntervalLowerBound": 20.0, "ScalingAdjustment": 3},
]
IN_STEPS = [{"MetricIntervalUpperBound": 0.0, "ScalingAdjustment": -1}]


def test_a_larger_step_in_the_cooldown_adds_what_the_first_did_not() -> None:
    world = _World([_policy("out", OUT_STEPS)], capacity=2)
    assert world.period(1, 60.0, {"out"}) == 4  # +2
    assert world.period(2, 60.0, {"out"}) == 4  # the same step again: in the cooldown
    assert world.period(3, 80.0, {"out"}) == 5  # +3 from 2, of which the +2 is done


def test_a_scale_out_is_not_held_back_by_a_scale_ins_cooldown() -> None:
    world = _World([_policy("in", IN_STEPS), _policy("out", OUT_STEPS)], capacity=4)
    assert world.period(1, 40.0, {"in"}) == 3
    assert world.period(2, 60.0, {"out"}) == 5
    # the scale-out stopped the scale-in's cooldown: "In this case, the cooldown period for
    # the scale-in activity stops and doesn't complete" (the User Guide)
    assert world.period(3, 40.0, {"in"}) == 4


def test_below_the_threshold_the_lower_bound_is_exclusive_and_the_upper_inclusive() -> None:
    """StepAdjustment (botocore's model): "To initiate the adjustment when the metric is
    greater than 40 and less than or equal to 50, specify a lower bound of -10 and an upper
    bound of 0" (threshold 50): at 40 that step is not the one, the step under -10 is."""
    steps = [
        {"MetricIntervalUpperBound": -10.0, "ScalingAdjustment": -2},
        {
            "MetricIntervalLowerBound": -10.0,
            "MetricIntervalUpperBound": 0.0,
            "ScalingAdjustment": -1,
        },
    ]
    world = _World([_policy("in", steps)], capacity=5)
    assert world.period(1, 40.0, {"in"}) == 3


def test_a_percent_step_moves_at_least_the_min_adjustment_magnitude() -> None:
    """StepScalingPolicyConfiguration's MinAdjustmentMagnitude (botocore's model): "suppose
    that you create a step scaling policy to scale out [...] by 25 percent and you specify a
    MinAdjustmentMagnitude of 2. If the service has 4 tasks [...] 25 percent of 4 is 1.
    However, because you specified a MinAdjustmentMagnitude of 2, Application Auto Scaling
    scales out the service by 2 tasks"."""
    steps = [{"MetricIntervalLowerBound": 0.0, "ScalingAdjustment": 25}]
    policy = _policy(
        "out", steps, AdjustmentType="PercentChangeInCapacity", MinAdjustmentMagnitude=2
    )
    world = _World([policy], capacity=4)
    assert world.period(1, 60.0, {"out"}) == 6


def test_percent_steps_round_as_the_user_guide_says() -> None:
    """Application Auto Scaling User Guide, step scaling policies (awsdocs/
    application-auto-scaling-user-guide): "add 30 percent of 11, 3.3, rounded down to 3",
    "remove 10 percent of 14, 1.4, rounded down to 1"; values between -1 and 1 go to -1 or
    1."""
    out = [{"MetricIntervalLowerBound": 0.0, "ScalingAdjustment": 30}]
    world = _World([_policy("out", out, AdjustmentType="PercentChangeInCapacity")], capacity=11)
    assert world.period(1, 60.0, {"out"}) == 14
    for capacity, adjustment, expected in ((14, -10, 13), (3, -10, 2), (3, 10, 4)):
        steps = [{"MetricIntervalUpperBound": 0.0, "ScalingAdjustment": adjustment}]
        if adjustment > 0:
            steps = [{"MetricIntervalLowerBound": 0.0, "ScalingAdjustment": adjustment}]
        name = "in" if adjustment < 0 else "out"
        policy = _policy(name, steps, AdjustmentType="PercentChangeInCapacity")
        world = _World([policy], capacity=capacity)
        load = 40.0 if adjustment < 0 else 60.0
        assert world.period(1, load, {name}) == expected, (capacity, adjustment)
