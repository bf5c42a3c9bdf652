"""Application Auto Scaling acted on: scalable targets and policies that move real fleets.

moto records targets and policies; this module adds what the service does with them:

* the checks moto skips (:meth:`Autoscaler.check`): a target on an endpoint or variant that
  does not exist, MinCapacity above MaxCapacity, a policy without a registered target;
* the alarms target tracking creates (``TargetTracking-<resource>-AlarmHigh/Low-<uuid>``,
  evaluated by the control loop like any alarm), deleted with their policy;
* every period (:meth:`Autoscaler.tick`): each target tracking policy through
  :func:`mmelocal.rules.autoscaling.target_tracking_step` on the published metric, and step
  scaling when its alarm is in ALARM; a target tracking scale-in waits until every target
  tracking policy with scale-in enabled is ready to scale in; of the policies that would
  act, the one giving the largest capacity wins, scale-out or scale-in (as the service
  decides); a change resizes
  the variant's fleet on a worker thread (new instances join routing once Triton is up;
  removed ones drain first) while ``DescribeEndpoint`` shows ``Updating`` and both
  instance counts;
* ``DescribeScalingActivities`` (moto answers a 500), worded as the service words it.

Cooldowns and periods run on the control loop's clock (``--time-scale``).
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from mmelocal.errors import AwsServiceError
from mmelocal.facts.autoscaling import (
    ALARM_CAUSE_FORMAT,
    ALARM_NAME_FORMAT,
    DEFAULT_SCALE_IN_COOLDOWN_S,
    DEFAULT_SCALE_OUT_COOLDOWN_S,
    DEFAULT_STEP_COOLDOWN_S,
    HIGH_ALARM,
    LOW_ALARM,
    METRIC_AGGREGATION_TYPES,
    METRIC_PERIOD_S,
    PREDEFINED_METRICS,
    SCALABLE_DIMENSION,
    SCALABLE_TARGETS_PAGE_SIZE,
    SCALING_POLICIES_PAGE_SIZE,
    SERVICE_NAMESPACE,
)
from mmelocal.facts.cloudwatch import (
    EVALUATION_RANGE_EXTRA_PERIODS,
    GPU_METRICS,
    INSTANCE_NAMESPACE,
    LOCAL_STAND_IN,
)
from mmelocal.localaws.cloudwatch_api import start_unchecked
from mmelocal.localaws.metric_store import MetricStore, series_key
from mmelocal.localaws.paging import Listed, every_item, one_page
from mmelocal.localaws.state import repoint_alarms
from mmelocal.rules.autoscaling import (
    ScalingLimits,
    ScalingState,
    TargetTrackingPolicy,
    aggregated_metric,
    evaluated_datapoints,
    step_adjustment,
    step_scaling_step,
    target_tracking_invoked,
    target_tracking_step,
)

logger = logging.getLogger(__name__)

#: (region, endpoint, variant) -> the fleet serving it now (None: not in service)
FleetOf = Callable[[str, str, str], Any]
#: (region, endpoint) -> the endpoint's variant names (None: no such endpoint)
VariantsOf = Callable[[str, str], "list[str] | None"]
#: (region, endpoint, variant, current or None, desired or None, updating) -> None
ShowCounts = Callable[[str, str, str, "int | None", "int | None", bool], bool]


def parse_resource(resource_id: str) -> tuple[str, str] | None:
    """``(endpoint, variant)`` of ``endpoint/{name}/variant/{variant}``, else None."""
    parts = resource_id.split("/")
    if len(parts) == 4 and parts[0] == "endpoint" and parts[2] == "variant":
        return parts[1], parts[3]
    return None


def _matching(policies: list[dict[str, Any]], query: dict[str, Any]) -> list[dict[str, Any]]:
    """The policies a DescribeScalingPolicies query names: moto ignores ``PolicyNames`` and
    matches ``ResourceId`` as a substring; the service filters on both exactly."""
    names, resource = query.get("PolicyNames"), query.get("ResourceId")
    return [
        p
        for p in policies
        if (not names or p.get("PolicyName") in names)
        and (not resource or p.get("ResourceId") == resource)
    ]


#: a ``MaxResults`` that has moto answer every match at once (moto sets no upper bound):
#: its own DescribeScalableTargets pages cannot be followed past the second, whose
#: ``NextToken`` is the first's again (moto 5.2.5, ``applicationautoscaling/responses.py``:
#: ``next_token = str(len(scalable_targets_resp) - 1)``)
_MOTO_EVERY_MATCH = 2**31 - 1
#: operation -> the answer's key and the page size the service gives when none is asked
_PAGED: dict[str, tuple[str, int]] = {
    "DescribeScalableTargets": ("ScalableTargets", SCALABLE_TARGETS_PAGE_SIZE),
    "DescribeScalingPolicies": ("ScalingPolicies", SCALING_POLICIES_PAGE_SIZE),
}
#: the operations :func:`paged_records` answers
PAGED_OPERATIONS = tuple(_PAGED)


def paged_records(
    region: str,
    operation: str,
    params: dict[str, Any],
    forward: Callable[[dict[str, Any]], tuple[int, Any]],
) -> tuple[int, Any] | None:
    """DescribeScalableTargets and DescribeScalingPolicies as the service pages them (a
    correction of moto's answers for every caller, mmelocal's own reads included): every
    match read from moto at once (policies filtered exactly: :func:`_matching`), then the
    page ``NextToken`` and ``MaxResults`` ask for, 50 targets or 10 policies when
    ``MaxResults`` is left out (:data:`~mmelocal.facts.autoscaling.SCALABLE_TARGETS_PAGE_SIZE`,
    :data:`~mmelocal.facts.autoscaling.SCALING_POLICIES_PAGE_SIZE`); a token no page gave is
    ``InvalidNextTokenException``. None (moto answers) for another operation."""
    if operation not in _PAGED:
        return None
    key, size = _PAGED[operation]
    query = {k: v for k, v in params.items() if k not in ("NextToken", "MaxResults")}
    status, answer = forward({**query, "MaxResults": _MOTO_EVERY_MATCH})
    if status != 200 or not isinstance(answer, dict):
        return status, answer
    found = answer.get(key) or []
    if operation == "DescribeScalingPolicies":
        found = _matching(found, params)
    page = one_page(
        [Listed(item) for item in found],
        params,
        key=key,
        size_param="MaxResults",
        default_size=size,
        invalid_token_code="InvalidNextTokenException",
    )
    return status, page


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


class _Period(NamedTuple):
    """What the policies of one scalable target are evaluated with, one period."""

    region: str
    fleet: Any
    limits: ScalingLimits
    now_s: float
    scale: float
    suspended: dict[str, Any]


class _Proposal(NamedTuple):
    """What one policy would do this period: the capacity, its cause, and what to record
    (the policy's cooldown) once the resize it asked for started."""

    capacity: int
    cause: str
    started: Callable[[], None]


def _held_back_scale_ins(
    policies: list[dict[str, Any]], proposals: dict[str, _Proposal | None], current: int
) -> set[str]:
    """The target tracking policies (names) whose scale-in waits: the service "will scale in
    only if all of the target tracking policies (with the scale-in portion enabled) are ready
    to scale in" (Application Auto Scaling User Guide, "How target tracking scaling for
    Application Auto Scaling works", Multiple scaling policies). A step scaling policy's
    scale-in is not held back (PutScalingPolicy API reference: it "will not be blocked")."""
    tracking = [p for p in policies if p.get("PolicyType") == "TargetTrackingScaling"]
    scaling_in = {
        p["PolicyName"]
        for p in tracking
        if (proposal := proposals.get(p["PolicyName"])) is not None and proposal.capacity < current
    }
    ready = all(
        p["PolicyName"] in scaling_in
        for p in tracking
        if not (p.get("TargetTrackingScalingPolicyConfiguration") or {}).get("DisableScaleIn")
    )
    return set() if ready else scaling_in


def _suspended(suspended: dict[str, Any], current: int, capacity: int) -> bool:
    """True when the target's SuspendedState holds back the move from ``current`` to
    ``capacity`` (scale-out or scale-in activities suspended)."""
    growing = capacity > current
    return bool(
        suspended.get("DynamicScalingOutSuspended" if growing else "DynamicScalingInSuspended")
    )


class Autoscaler:
    """Application Auto Scaling for SageMaker variants (see the module docstring)."""

    def __init__(
        self,
        *,
        client_for: Callable[[str, str], Any],
        store: MetricStore,
        fleet_of: FleetOf,
        variants_of: VariantsOf,
        show_counts: ShowCounts,
        time_scale: Callable[[], float],
        regions: Callable[[], list[str]],
        start_timeout_s: float = 300.0,
    ) -> None:
        self._client_for = client_for
        self._regions = regions
        self._store = store
        self._fleet_of = fleet_of
        self._variants_of = variants_of
        self._show_counts = show_counts
        self._time_scale = time_scale
        self._start_timeout_s = start_timeout_s
        self._lock = threading.Lock()
        self.activities: list[Activity] = []
        self._states: dict[tuple[str, str, str], ScalingState] = {}
        self._busy: dict[tuple[str, str], threading.Thread] = {}
        #: (region, policy ARN) -> the names of the alarms its target tracking created
        self.alarms: dict[tuple[str, str], list[str]] = {}
        #: (region, resource id, step scaling policy ARN) -> its last scale-out and
        #: scale-in (cooldowns)
        self._step_states: dict[tuple[str, str, str], ScalingState] = {}

    # -- the API overlay ---------------------------------------------------------------
    def __call__(
        self,
        region: str,
        operation: str,
        params: dict[str, Any],
        forward: Callable[[dict[str, Any]], tuple[int, Any]],
    ) -> tuple[int, Any] | None:
        """Application Auto Scaling's answers where moto's fall short (an app overlay)."""
        if operation == "DescribeScalingActivities":
            return 200, self.describe_activities(region, params)
        if operation in ("RegisterScalableTarget", "PutScalingPolicy"):
            self.check(operation, region, params)
        if params.get("ServiceNamespace") != SERVICE_NAMESPACE:
            return None
        if operation == "DeleteScalingPolicy":
            arns = self._policy_arns(region, params, names=[params.get("PolicyName")])
            status, answer = forward(params)
            if status == 200:
                for arn in arns:
                    self.delete_alarms(region, arn)
            return status, answer
        if operation == "DeregisterScalableTarget":
            status, answer = forward(params)
            if status == 200:
                self._drop_policies(region, str(params.get("ResourceId", "")))
            return status, answer
        if operation == "PutScalingPolicy":
            # moto gives a policy put again a new ARN (the service keeps it): the old one's
            # alarms go, the user's alarms acting on it act on the new one
            before = self._policy_arns(region, params, names=[params.get("PolicyName")])
        status, answer = forward(params)
        if status == 200 and isinstance(answer, dict):
            if operation == "PutScalingPolicy":
                new_arn = str(answer.get("PolicyARN", ""))
                moved = {old: new_arn for old in before if new_arn and old != new_arn}
                for old in moved:
                    self.delete_alarms(region, old)
                if moved:
                    repoint_alarms(self._client_for("cloudwatch", region), moved)
                self.policy_put(region, params, answer)
            elif operation == "DescribeScalingPolicies":  # paged by :func:`paged_records`
                for policy in answer.get("ScalingPolicies", []):
                    policy["Alarms"] = self.described_alarms(region, policy["PolicyARN"])
        return status, answer

    def _policy_arns(
        self, region: str, params: dict[str, Any], names: list[Any] | None = None
    ) -> list[str]:
        aas = self._client_for("application-autoscaling", region)
        query: dict[str, Any] = {"ServiceNamespace": SERVICE_NAMESPACE}
        if params.get("ResourceId"):
            query["ResourceId"] = params["ResourceId"]
        if names:
            query["PolicyNames"] = [str(n) for n in names]
        policies = every_item(aas.describe_scaling_policies, "ScalingPolicies", **query)
        return [p["PolicyARN"] for p in policies]

    def _drop_policies(self, region: str, resource: str) -> None:
        """Deregistering a target deletes its policies (and their alarms), as the service
        does (moto keeps them)."""
        aas = self._client_for("application-autoscaling", region)
        query = {"ServiceNamespace": SERVICE_NAMESPACE, "ResourceId": resource}
        # exactly this target's (:func:`paged_records` filters as the service)
        for policy in every_item(aas.describe_scaling_policies, "ScalingPolicies", **query):
            self.delete_alarms(region, policy["PolicyARN"])
            aas.delete_scaling_policy(
                PolicyName=policy["PolicyName"],
                ServiceNamespace=SERVICE_NAMESPACE,
                ResourceId=resource,
                ScalableDimension=policy["ScalableDimension"],
            )

    def forget_endpoint(self, region: str, endpoint: str) -> None:
        """SageMaker deregisters a deleted endpoint's scalable targets (and their
        policies' alarms go with them)."""
        aas = self._client_for("application-autoscaling", region)
        targets = every_item(
            aas.describe_scalable_targets, "ScalableTargets", ServiceNamespace=SERVICE_NAMESPACE
        )
        for target in targets:
            located = parse_resource(target["ResourceId"])
            if located is None or located[0] != endpoint:
                continue
            self._drop_policies(region, target["ResourceId"])
            aas.deregister_scalable_target(
                ServiceNamespace=SERVICE_NAMESPACE,
                ResourceId=target["ResourceId"],
                ScalableDimension=target["ScalableDimension"],
            )
        with self._lock:
            for states in (self._states, self._step_states):
                for key in [
                    k
                    for k in states
                    if k[0] == region and (parse_resource(k[1]) or ("",))[0] == endpoint
                ]:
                    del states[key]

    # -- the service's checks ----------------------------------------------------------
    def check(self, operation: str, region: str, params: dict[str, Any]) -> None:
        """Raise the service's error for what moto would accept."""
        if params.get("ServiceNamespace") != SERVICE_NAMESPACE:
            return
        resource = str(params.get("ResourceId", ""))
        if operation == "RegisterScalableTarget":
            low, high = params.get("MinCapacity"), params.get("MaxCapacity")
            if low is not None and high is not None and int(low) > int(high):
                raise AwsServiceError(
                    "Minimum capacity cannot be greater than maximum capacity",
                    code="ValidationException",
                )
            located = parse_resource(resource)
            if located is None:
                raise AwsServiceError(
                    f"Unsupported resource ID {resource}: a SageMaker variant is "
                    "endpoint/{EndpointName}/variant/{VariantName}",
                    code="ValidationException",
                )
            variants = self._variants_of(region, located[0])
            if variants is None or located[1] not in variants:
                raise AwsServiceError(
                    f"The endpoint {located[0]} does not exist or has no variant "
                    f"{located[1]} (ResourceId {resource})",
                    code="ValidationException",
                )
        elif operation == "PutScalingPolicy" and self._target(region, resource) is None:
            raise AwsServiceError(
                f"No scalable target registered for service namespace: {SERVICE_NAMESPACE}, "
                f"resource ID: {resource}, scalable dimension: "
                f"{params.get('ScalableDimension', SCALABLE_DIMENSION)}",
                code="ObjectNotFoundException",
                status=400,
            )
        if operation == "PutScalingPolicy":
            self._check_step_config(params)

    @staticmethod
    def _check_step_config(params: dict[str, Any]) -> None:
        """The service's enum check on ``MetricAggregationType`` (moto takes any value)."""
        config = params.get("StepScalingPolicyConfiguration") or {}
        kind = config.get("MetricAggregationType")
        if kind is not None and kind not in METRIC_AGGREGATION_TYPES:
            raise AwsServiceError(
                f"1 validation error detected: Value '{kind}' at "
                "'stepScalingPolicyConfiguration.metricAggregationType' failed to satisfy "
                "constraint: Member must satisfy enum value set: "
                f"[{', '.join(METRIC_AGGREGATION_TYPES)}]",
                code="ValidationException",
            )

    def check_update(
        self, region: str, endpoint: str, described: dict[str, Any], config: dict[str, Any]
    ) -> None:
        """The service's rule for ``UpdateEndpoint``: an update that changes the instance
        type of a variant registered for autoscaling, or removes it, fails."""
        aas = self._client_for("application-autoscaling", region)
        targets = every_item(
            aas.describe_scalable_targets, "ScalableTargets", ServiceNamespace=SERVICE_NAMESPACE
        )
        scaled = {
            located[1]
            for t in targets
            if (located := parse_resource(t["ResourceId"])) is not None and located[0] == endpoint
        }
        if not scaled:
            return
        sagemaker = self._client_for("sagemaker", region)
        current = sagemaker.describe_endpoint_config(
            EndpointConfigName=described["EndpointConfigName"]
        )
        before = {v["VariantName"]: v.get("InstanceType") for v in current["ProductionVariants"]}
        after = {v["VariantName"]: v.get("InstanceType") for v in config["ProductionVariants"]}
        for variant in sorted(scaled):
            if variant not in after or after[variant] != before.get(variant):
                raise AwsServiceError(
                    f"The variant {variant} of endpoint {endpoint} is registered with Application "
                    "Auto Scaling; an update may not change its instance type or remove it. "
                    "Deregister the scalable target first (DeregisterScalableTarget), update, "
                    "then register it again.",
                    code="ValidationException",
                )

    def _target(self, region: str, resource: str) -> dict[str, Any] | None:
        aas = self._client_for("application-autoscaling", region)
        found = aas.describe_scalable_targets(
            ServiceNamespace=SERVICE_NAMESPACE, ResourceIds=[resource]
        ).get("ScalableTargets", [])
        return found[0] if found else None

    # -- target tracking's alarms ------------------------------------------------------
    def policy_put(self, region: str, params: dict[str, Any], answer: dict[str, Any]) -> None:
        """After moto recorded a policy: create its alarms (target tracking) and say when a
        GPU metric can never fire here; adds ``Alarms`` to ``answer``."""
        config = params.get("TargetTrackingScalingPolicyConfiguration")
        arn = str(answer.get("PolicyARN", ""))
        if params.get("ServiceNamespace") != SERVICE_NAMESPACE or not config or not arn:
            return
        self.delete_alarms(region, arn)
        namespace, metric, dimensions, statistic = self._metric(params)
        if (
            namespace == INSTANCE_NAMESPACE
            and metric in GPU_METRICS
            and not self._has_gpu(region, params)
        ):
            logger.warning(
                "policy %s tracks %s, which is only published where a GPU is read: with no GPU "
                "here it never fires. %s (same namespace and dimensions) is the local stand-in.",
                params.get("PolicyName"),
                metric,
                LOCAL_STAND_IN[metric],
            )
        target = float(config["TargetValue"])
        resource = str(params["ResourceId"])
        cloudwatch = self._client_for("cloudwatch", region)
        names, alarms = [], []
        for alarm in (HIGH_ALARM, LOW_ALARM):
            if alarm is LOW_ALARM and config.get("DisableScaleIn"):
                continue
            name = ALARM_NAME_FORMAT.format(resource=resource, side=alarm.side, suffix=uuid.uuid4())
            cloudwatch.put_metric_alarm(
                AlarmName=name,
                AlarmDescription=f"DO NOT EDIT OR DELETE. For TargetTrackingScaling policy {arn}.",
                AlarmActions=[arn],
                Namespace=namespace,
                MetricName=metric,
                Dimensions=dimensions,
                Statistic=statistic,
                Period=METRIC_PERIOD_S,
                EvaluationPeriods=alarm.evaluation_periods,
                DatapointsToAlarm=alarm.datapoints_to_alarm,
                Threshold=target * alarm.threshold_factor,
                ComparisonOperator=alarm.comparison,
            )
            start_unchecked(cloudwatch, name)  # a new alarm, as any (moto starts it OK)
            names.append(name)
            described = cloudwatch.describe_alarms(AlarmNames=[name])["MetricAlarms"]
            alarms.append({"AlarmName": name, "AlarmARN": described[0]["AlarmArn"]})
        with self._lock:
            self.alarms[(region, arn)] = names
        answer["Alarms"] = alarms

    def delete_alarms(self, region: str, policy_arn: str) -> None:
        """Delete the alarms a policy created (its deletion, or a new version of it)."""
        with self._lock:
            names = self.alarms.pop((region, policy_arn), [])
        if names:
            self._client_for("cloudwatch", region).delete_alarms(AlarmNames=names)

    def described_alarms(self, region: str, policy_arn: str) -> list[dict[str, str]]:
        """``Alarms`` of a policy in ``DescribeScalingPolicies``."""
        with self._lock:
            names = list(self.alarms.get((region, policy_arn), []))
        if not names:
            return []
        found = self._client_for("cloudwatch", region).describe_alarms(AlarmNames=names)
        return [
            {"AlarmName": a["AlarmName"], "AlarmARN": a["AlarmArn"]} for a in found["MetricAlarms"]
        ]

    @staticmethod
    def _metric(params: dict[str, Any]) -> tuple[str, str, list[dict[str, str]], str]:
        config = params["TargetTrackingScalingPolicyConfiguration"]
        located = parse_resource(str(params["ResourceId"])) or ("", "")
        predefined = config.get("PredefinedMetricSpecification")
        if predefined:
            kind = predefined.get("PredefinedMetricType", "")
            if kind not in PREDEFINED_METRICS:
                raise AwsServiceError(
                    f"Unsupported predefined metric type {kind} for SageMaker; supported: "
                    f"{', '.join(PREDEFINED_METRICS)}",
                    code="ValidationException",
                )
            namespace, metric, statistic = PREDEFINED_METRICS[kind]
            dimensions = [
                {"Name": "EndpointName", "Value": located[0]},
                {"Name": "VariantName", "Value": located[1]},
            ]
            return namespace, metric, dimensions, statistic
        custom = config.get("CustomizedMetricSpecification") or {}
        return (
            str(custom.get("Namespace", "")),
            str(custom.get("MetricName", "")),
            list(custom.get("Dimensions") or []),
            str(custom.get("Statistic") or "Average"),
        )

    def _has_gpu(self, region: str, params: dict[str, Any]) -> bool:
        located = parse_resource(str(params["ResourceId"]))
        if located is None:
            return False
        key = series_key(
            INSTANCE_NAMESPACE,
            "GPUUtilization",
            [
                {"Name": "EndpointName", "Value": located[0]},
                {"Name": "VariantName", "Value": located[1]},
            ],
        )
        return self._store.knows(key)

    # -- acting ------------------------------------------------------------------------
    def tick(self, now_s: float) -> None:
        """Evaluate every SageMaker policy in every region the control plane saw."""
        for region in self._regions():
            try:
                self._tick_region(region, now_s)
            except Exception:
                logger.exception("autoscaling in %s failed this period", region)

    def _tick_region(self, region: str, now_s: float) -> None:
        aas = self._client_for("application-autoscaling", region)
        targets = {
            t["ResourceId"]: t
            for t in every_item(
                aas.describe_scalable_targets,
                "ScalableTargets",
                ServiceNamespace=SERVICE_NAMESPACE,
            )
        }
        if not targets:
            return
        policies = every_item(
            aas.describe_scaling_policies, "ScalingPolicies", ServiceNamespace=SERVICE_NAMESPACE
        )
        scale = self._time_scale()
        for resource, target in targets.items():
            located = parse_resource(resource)
            if located is None or (region, resource) in self._busy:
                continue
            fleet = self._fleet_of(region, *located)
            if fleet is None:
                continue
            limits = ScalingLimits(int(target["MinCapacity"]), int(target["MaxCapacity"]))
            suspended = target.get("SuspendedState") or {}
            current = fleet.instance_count
            if limits.clamp(current) != current:  # with or without a policy, as the service
                _, decision = target_tracking_step(
                    now_s, ScalingState(current), [], TargetTrackingPolicy(1.0), limits
                )
                self._resize(region, resource, fleet, decision.capacity, str(decision.cause))
                continue
            period = _Period(region, fleet, limits, now_s, scale, suspended)
            own = [p for p in policies if p["ResourceId"] == resource]
            wanted: dict[str, _Proposal | None] = {}
            for policy in own:
                if policy.get("PolicyType") == "TargetTrackingScaling":
                    wanted[policy["PolicyName"]] = self._target_tracking(policy, period)
                elif policy.get("PolicyType") == "StepScaling":
                    for alarm in self._step_alarms(region, policy):
                        # each alarm invokes the policy; the largest capacity wins below
                        key = f"{policy['PolicyName']}\n{alarm['AlarmName']}"
                        wanted[key] = self._step(policy, period, (alarm, None))
            held_back = _held_back_scale_ins(own, wanted, current)
            proposals = [
                proposal
                for name, proposal in wanted.items()
                if proposal is not None
                and name not in held_back
                and not _suspended(suspended, current, proposal.capacity)
            ]
            if proposals:
                # the service: "precedence to the policy that provides the largest capacity
                # for both scale out and scale in" (PutScalingPolicy API reference)
                chosen = max(proposals, key=lambda p: p.capacity)
                self._apply(region, resource, fleet, chosen, current)

    def _apply(
        self, region: str, resource: str, fleet: Any, chosen: _Proposal, current: int
    ) -> None:
        """Start the resize ``chosen`` asks for and record it (the policy's cooldown)."""
        if self._resize(region, resource, fleet, chosen.capacity, chosen.cause):
            chosen.started()
            if chosen.capacity > current:
                self._stop_scale_in_cooldowns(region, resource)

    def alarm_set(self, region: str, alarm: dict[str, Any], reason_data: dict[str, Any]) -> None:
        """A user's ``SetAlarmState`` changed ``alarm`` (DescribeAlarms' view, the new state
        in it): the scaling policies among the new state's actions run now, on the
        datapoints ``reason_data`` gives (its ``recentDatapoints``, as CloudWatch's own
        state changes carry them: "the Auto Scaling policy uses the information in this
        field to take the correct action", SetAlarmState API reference), else on the
        published metric: a step scaling policy, and a target tracking policy set off by
        one of the alarms it created ("Application Auto Scaling creates and manages the
        CloudWatch alarms that invoke the scaling policy": User Guide, "How target
        tracking scaling for Application Auto Scaling works"). Alarms whose actions are
        disabled run none."""
        if not alarm.get("ActionsEnabled", True):
            return
        field = {"ALARM": "AlarmActions", "OK": "OKActions"}.get(
            str(alarm["StateValue"]), "InsufficientDataActions"
        )
        actions = set(alarm.get(field) or [])
        if not actions or "MetricName" not in alarm:
            return
        recent = reason_data.get("recentDatapoints")
        given = (
            [float(v) for v in recent if isinstance(v, int | float)]
            if isinstance(recent, list)
            else None
        )
        aas = self._client_for("application-autoscaling", region)
        policies = every_item(
            aas.describe_scaling_policies, "ScalingPolicies", ServiceNamespace=SERVICE_NAMESPACE
        )
        for policy in policies:
            if policy["PolicyARN"] in actions and policy.get("PolicyType") in _INVOKED:
                self._invoked_now(region, policy, (alarm, given), policies)

    def _invoked_now(
        self,
        region: str,
        policy: dict[str, Any],
        fired: tuple[dict[str, Any], list[float] | None],
        policies: list[dict[str, Any]],
    ) -> None:
        """``policy`` invoked now by ``fired`` (a user's SetAlarmState): it acts unless its
        target's scaling is suspended that way, or it is a target tracking scale-in that
        another target tracking policy of the target (of ``policies``) is not ready for."""
        resource = str(policy["ResourceId"])
        located = parse_resource(resource)
        target = self._target(region, resource)
        if located is None or target is None or (region, resource) in self._busy:
            return
        fleet = self._fleet_of(region, *located)
        if fleet is None:
            return
        current = fleet.instance_count
        limits = ScalingLimits(int(target["MinCapacity"]), int(target["MaxCapacity"]))
        suspended = target.get("SuspendedState") or {}
        period = _Period(region, fleet, limits, time.time(), self._time_scale(), suspended)
        proposal = _INVOKED[str(policy["PolicyType"])](self, policy, period, fired)
        if proposal is None or _suspended(suspended, current, proposal.capacity):
            return
        if policy["PolicyType"] == "TargetTrackingScaling" and proposal.capacity < current:
            own = [p for p in policies if p["ResourceId"] == resource]
            wanted = {
                p["PolicyName"]: proposal
                if p["PolicyName"] == policy["PolicyName"]
                else self._target_tracking(p, period)
                for p in own
                if p.get("PolicyType") == "TargetTrackingScaling"
            }
            if _held_back_scale_ins(own, wanted, current):
                return
        self._apply(region, resource, fleet, proposal, current)

    def _stop_scale_in_cooldowns(self, region: str, resource: str) -> None:
        """A scale-out stops the scale-in cooldown of every policy of the target ("if
        another alarm triggers a scale-out activity during the cooldown period after a
        scale-in [...] the cooldown period for the scale-in activity stops and doesn't
        complete": the Application Auto Scaling User Guide)."""
        with self._lock:
            for states in (self._states, self._step_states):
                for key, state in states.items():
                    if key[:2] == (region, resource) and state.last_scale_in_s is not None:
                        states[key] = replace(state, last_scale_in_s=None)

    def _target_tracking(
        self,
        policy: dict[str, Any],
        period: _Period,
        fired: tuple[dict[str, Any], list[float] | None] | None = None,
    ) -> _Proposal | None:
        """What a target tracking policy would do: on the published metric (its alarms'
        conditions, evaluated here), or invoked by ``fired`` (one of its own alarms a user
        set to ALARM, and the datapoints its reason data gave: the newest is the metric)."""
        region, fleet, limits, now_s, scale, suspended = period
        config = policy["TargetTrackingScalingPolicyConfiguration"]
        namespace, metric, dimensions, statistic = self._metric(policy)
        values = self._store.periods(
            series_key(namespace, metric, dimensions),
            end_s=now_s,
            period_s=METRIC_PERIOD_S / scale,
            count=LOW_ALARM.evaluation_periods + EVALUATION_RANGE_EXTRA_PERIODS,
            statistic=statistic,
        )
        rules = TargetTrackingPolicy(
            float(config["TargetValue"]),
            scale_out_cooldown_s=float(config.get("ScaleOutCooldown", DEFAULT_SCALE_OUT_COOLDOWN_S))
            / scale,
            scale_in_cooldown_s=float(config.get("ScaleInCooldown", DEFAULT_SCALE_IN_COOLDOWN_S))
            / scale,
            disable_scale_in=bool(config.get("DisableScaleIn"))
            or bool(suspended.get("DynamicScalingInSuspended")),
        )
        state_key = (region, policy["ResourceId"], policy["PolicyName"])
        with self._lock:
            previous = self._states.get(state_key, ScalingState(fleet.instance_count))
            alarm_names = list(self.alarms.get((region, policy["PolicyARN"]), []))
        state = replace(previous, capacity=fleet.instance_count)
        high_side, low_side = f"-Alarm{HIGH_ALARM.side}-", f"-Alarm{LOW_ALARM.side}-"
        if fired is None:
            high = next((n for n in alarm_names if high_side in n), "AlarmHigh")
            low = next((n for n in alarm_names if low_side in n), "AlarmLow")
            new, decision = target_tracking_step(
                now_s, state, values, rules, limits,
                policy_name=policy["PolicyName"], high_alarm_name=high, low_alarm_name=low,
            )  # fmt: skip
        else:
            alarm, given = fired
            name = str(alarm["AlarmName"])
            value = given[-1] if given else next(
                (v for v in reversed(values) if v is not None and not math.isnan(v)), None
            )  # fmt: skip
            if name not in alarm_names or value is None:  # only its own alarms invoke it
                return None
            new, decision = target_tracking_invoked(
                now_s, state, value, rules, limits,
                scale_out=high_side in name, policy_name=policy["PolicyName"], alarm_name=name,
            )  # fmt: skip
        if decision.cause is None:
            return None

        def started() -> None:
            with self._lock:
                self._states[state_key] = new

        return _Proposal(decision.capacity, decision.cause, started)

    def _step_alarms(self, region: str, policy: dict[str, Any]) -> list[dict[str, Any]]:
        """The alarms in ALARM that invoke the step scaling policy this period, every one
        of them: "Application Auto Scaling will evaluate all alarm breaches as they occur.
        A cooldown period is used to protect against over-scaling due to multiple alarm
        breaches" (Application Auto Scaling User Guide, Step scaling policies). An alarm
        whose actions are disabled runs none (PutMetricAlarm's ActionsEnabled)."""
        cloudwatch = self._client_for("cloudwatch", region)
        return [
            alarm
            for alarm in every_item(
                cloudwatch.describe_alarms,
                "MetricAlarms",
                ActionPrefix=policy["PolicyARN"],
                StateValue="ALARM",
            )
            if alarm.get("ActionsEnabled", True)
            and policy["PolicyARN"] in (alarm.get("AlarmActions") or [])
        ]

    def _step(
        self,
        policy: dict[str, Any],
        period: _Period,
        fired: tuple[dict[str, Any], list[float] | None],
    ) -> _Proposal | None:
        """What a step scaling policy invoked by ``fired`` would do: an alarm in ALARM, and
        the datapoints a user's reason data gave (None: those the alarm evaluates)."""
        region, fleet, limits, now_s, scale, _ = period
        config = policy.get("StepScalingPolicyConfiguration") or {}
        alarm, given = fired
        cooldown_s = float(config.get("Cooldown", DEFAULT_STEP_COOLDOWN_S)) / scale
        key = series_key(alarm["Namespace"], alarm["MetricName"], alarm.get("Dimensions", []))
        periods = int(alarm["EvaluationPeriods"])
        if given is None:
            values = self._store.periods(
                key,
                end_s=now_s,
                period_s=float(alarm["Period"]) / scale,
                count=periods + EVALUATION_RANGE_EXTRA_PERIODS,
                statistic=alarm.get("ExtendedStatistic") or alarm.get("Statistic") or "Average",
            )
            given = evaluated_datapoints(values, periods)
        # the alarm's datapoints, aggregated as the policy says ("the value of the aggregated
        # CloudWatch metric": StepAdjustment, API reference)
        value = aggregated_metric(given[-periods:], config.get("MetricAggregationType"))
        if value is None:
            return None
        adjustment = step_adjustment(
            value - float(alarm["Threshold"]),
            config.get("StepAdjustments", []),
            breach_above=str(alarm["ComparisonOperator"]).startswith("GreaterThan"),
        )
        if adjustment is None:
            return None
        state_key = (region, policy["ResourceId"], policy["PolicyARN"])
        with self._lock:
            previous = self._step_states.get(state_key, ScalingState(fleet.instance_count))
        new, desired = step_scaling_step(
            now_s,
            replace(previous, capacity=fleet.instance_count),
            str(config.get("AdjustmentType", "ChangeInCapacity")),
            adjustment,
            limits,
            cooldown_s,
            config.get("MinAdjustmentMagnitude"),
        )
        if desired is None:
            return None
        cause = ALARM_CAUSE_FORMAT.format(alarm=alarm["AlarmName"], policy=policy["PolicyName"])

        def started() -> None:
            with self._lock:
                self._step_states[state_key] = new

        return _Proposal(desired, cause, started)

    def _resize(self, region: str, resource: str, fleet: Any, capacity: int, cause: str) -> bool:
        """Start resizing ``fleet`` on a worker; False when the endpoint is not InService
        (another change under way: nothing happens)."""
        endpoint, variant = parse_resource(resource) or ("", "")
        # claim the endpoint (one change at a time with UpdateEndpointWeightsAndCapacities)
        if not self._show_counts(region, endpoint, variant, fleet.instance_count, capacity, True):
            return False
        activity = Activity(
            region=region,
            resource_id=resource,
            description=f"Setting desired instance count to {capacity}.",
            cause=cause,
            start_s=time.time(),
        )
        with self._lock:
            self.activities.append(activity)
        logger.info("%s: %s (%s)", resource, activity.description, cause)

        def run() -> None:
            reached = None
            try:
                reached = fleet.scale_to(capacity, timeout_s=self._start_timeout_s)
            except Exception as exc:
                activity.status, activity.message = (
                    "Failed",
                    f"Failed to set desired instance count to {capacity}: {exc}",
                )
            else:
                if reached == capacity:
                    activity.status = "Successful"
                    activity.message = (
                        f"Successfully set desired instance count to {capacity}. Change "
                        "successfully fulfilled by sagemaker."
                    )
                else:
                    activity.status = "Failed"
                    activity.message = f"The endpoint {endpoint} stopped while it was scaling."
            finally:
                activity.end_s = time.time()
                self._show_counts(region, endpoint, variant, reached, None, False)
                with self._lock:
                    self._busy.pop((region, resource), None)

        worker = threading.Thread(target=run, name=f"localaws-scale-{endpoint}", daemon=True)
        with self._lock:
            self._busy[(region, resource)] = worker
        worker.start()
        return True

    def wait(self, timeout_s: float | None = None) -> None:
        """Wait for the resizes under way (tests, shutdown)."""
        with self._lock:
            workers = list(self._busy.values())
        for worker in workers:
            worker.join(timeout_s)

    # -- DescribeScalingActivities -----------------------------------------------------
    def describe_activities(self, region: str, params: dict[str, Any]) -> dict[str, Any]:
        """The answer to ``DescribeScalingActivities`` (newest first)."""
        namespace = params.get("ServiceNamespace")
        resource = params.get("ResourceId")
        dimension = params.get("ScalableDimension")
        with self._lock:
            found = [
                a for a in reversed(self.activities)
                if a.region == region
                and namespace == SERVICE_NAMESPACE
                and (resource is None or a.resource_id == resource)
                and (dimension is None or dimension == SCALABLE_DIMENSION)
            ]  # fmt: skip
        return one_page(
            found,
            params,
            key="ScalingActivities",
            size_param="MaxResults",
            default_size=50,
            invalid_token_code="InvalidNextTokenException",
        )


#: policy type -> how an alarm a user set invokes it (:meth:`Autoscaler.alarm_set`)
_INVOKED: dict[str, Callable[..., _Proposal | None]] = {
    "StepScaling": Autoscaler._step,
    "TargetTrackingScaling": Autoscaler._target_tracking,
}

__all__ = ["PAGED_OPERATIONS", "Activity", "Autoscaler", "paged_records", "parse_resource"]
