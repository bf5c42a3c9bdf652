"""The autoscaler: Application Auto Scaling's API overlay and its control loop.

It completes moto's answers (the service's checks, target tracking's alarms made and
deleted with their policies, a deregistered target's policies deleted,
``DescribeScalingActivities``), and every period (:meth:`Autoscaler.tick`) gathers what
each target's policies propose (:mod:`.target_tracking`, :mod:`.step_scaling`), picks one
(:mod:`.decisions`) and resizes the variant's fleet on a worker thread while
``DescribeEndpoint`` shows ``Updating`` and both instance counts. A user's
``SetAlarmState`` runs the policies it invokes at once (:meth:`Autoscaler.alarm_set`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from mmelocal.facts.autoscaling import SERVICE_NAMESPACE
from mmelocal.localaws.app.wsgi import Forward
from mmelocal.localaws.metric_store import MetricStore
from mmelocal.localaws.scaling.activities import Activity, describe_activities
from mmelocal.localaws.scaling.bookkeeping import PolicyBook
from mmelocal.localaws.scaling.checks import VariantsOf, check_request, check_update
from mmelocal.localaws.scaling.decisions import (
    Fired,
    Period,
    Proposal,
    chosen_proposal,
    held_back_scale_ins,
    suspended_move,
)
from mmelocal.localaws.scaling.records import (
    parse_resource,
    policy_resource,
    scalable_target,
    scalable_targets,
    scaling_policies,
)
from mmelocal.localaws.scaling.step_scaling import step_alarms, step_proposal
from mmelocal.localaws.scaling.target_tracking import target_tracking_proposal
from mmelocal.localaws.scaling.tracking_alarms import TrackingAlarms
from mmelocal.localaws.state import repoint_alarms
from mmelocal.rules.autoscaling import (
    ScalingLimits,
    ScalingState,
    TargetTrackingPolicy,
    target_tracking_step,
)

logger = logging.getLogger(__name__)

#: (region, endpoint, variant) -> the fleet serving it now (None: not in service)
FleetOf = Callable[[str, str, str], Any]
#: (region, endpoint, variant, current or None, desired or None, updating) -> None
ShowCounts = Callable[[str, str, str, "int | None", "int | None", bool], bool]
#: the policy types an alarm invokes
_POLICY_TYPES = ("StepScaling", "TargetTrackingScaling")


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
        self._busy: dict[tuple[str, str], threading.Thread] = {}
        #: what each policy's cooldowns and target tracking's alarms need remembered
        self.book = PolicyBook()
        self.tracking_alarms = TrackingAlarms(client_for, store, self.book)

    @property
    def alarms(self) -> dict[tuple[str, str], list[str]]:
        """(region, policy ARN) -> the names of the alarms its target tracking created."""
        return self.book.alarms

    # -- the API overlay ---------------------------------------------------------------
    def __call__(
        self,
        region: str,
        operation: str,
        params: dict[str, Any],
        forward: Forward,
    ) -> tuple[int, Any] | None:
        """Application Auto Scaling's answers where moto's fall short (an app overlay)."""
        alarms = self.tracking_alarms
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
                    alarms.delete_alarms(region, arn)
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
                    alarms.delete_alarms(region, old)
                if moved:
                    repoint_alarms(self._client_for("cloudwatch", region), moved)
                alarms.policy_put(region, params, answer)
            elif operation == "DescribeScalingPolicies":  # paged by :func:`.paged_records`
                for policy in answer.get("ScalingPolicies", []):
                    policy["Alarms"] = alarms.described_alarms(region, policy["PolicyARN"])
        return status, answer

    def _policy_arns(
        self, region: str, params: dict[str, Any], names: list[Any] | None = None
    ) -> list[str]:
        query: dict[str, Any] = {}
        if params.get("ResourceId"):
            query["ResourceId"] = params["ResourceId"]
        if names:
            query["PolicyNames"] = [str(n) for n in names]
        aas = self._client_for("application-autoscaling", region)
        return [p["PolicyARN"] for p in scaling_policies(aas, **query)]

    def _drop_policies(self, region: str, resource: str) -> None:
        """Deregistering a target deletes its policies (and their alarms), as the service
        does (moto keeps them)."""
        aas = self._client_for("application-autoscaling", region)
        # exactly this target's (:func:`.paged_records` filters as the service)
        for policy in scaling_policies(aas, ResourceId=resource):
            self.tracking_alarms.delete_alarms(region, policy["PolicyARN"])
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
        for target in scalable_targets(aas):
            located = parse_resource(target["ResourceId"])
            if located is None or located[0] != endpoint:
                continue
            self._drop_policies(region, target["ResourceId"])
            aas.deregister_scalable_target(
                ServiceNamespace=SERVICE_NAMESPACE,
                ResourceId=target["ResourceId"],
                ScalableDimension=target["ScalableDimension"],
            )
        self.book.forget_endpoint(region, endpoint)

    def check(self, operation: str, region: str, params: dict[str, Any]) -> None:
        """Raise the service's error for what moto would accept (:mod:`.checks`)."""
        check_request(
            operation, region, params, client_for=self._client_for, variants_of=self._variants_of
        )

    def check_update(
        self, region: str, endpoint: str, described: dict[str, Any], config: dict[str, Any]
    ) -> None:
        """The service's rule for ``UpdateEndpoint`` (:func:`.checks.check_update`)."""
        check_update(self._client_for, region, endpoint, described, config)

    def describe_activities(self, region: str, params: dict[str, Any]) -> dict[str, Any]:
        """The answer to ``DescribeScalingActivities`` (newest first)."""
        with self._lock:
            activities = list(self.activities)
        return describe_activities(activities, region, params)

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
        targets = {t["ResourceId"]: t for t in scalable_targets(aas)}
        if not targets:
            return
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
            period = Period(region, fleet, limits, now_s, scale, suspended)
            # the target's own policies, read apart (see :meth:`alarm_set`)
            own = scaling_policies(aas, ResourceId=resource)
            wanted: dict[str, Proposal | None] = {}
            for policy in own:
                if policy.get("PolicyType") == "TargetTrackingScaling":
                    wanted[policy["PolicyName"]] = self._propose(policy, period, None)
                elif policy.get("PolicyType") == "StepScaling":
                    cloudwatch = self._client_for("cloudwatch", region)
                    for alarm in step_alarms(cloudwatch, policy):
                        # each alarm invokes the policy; the largest capacity wins
                        key = f"{policy['PolicyName']}\n{alarm['AlarmName']}"
                        wanted[key] = self._propose(policy, period, (alarm, None))
            chosen = chosen_proposal(own, wanted, current, suspended)
            if chosen is not None:
                self._apply(region, resource, fleet, chosen, current)

    def _propose(
        self, policy: dict[str, Any], period: Period, fired: Fired | None
    ) -> Proposal | None:
        """What ``policy`` would do this period (invoked by ``fired``, when given)."""
        if policy.get("PolicyType") == "TargetTrackingScaling":
            return target_tracking_proposal(
                policy, period, store=self._store, book=self.book, fired=fired
            )
        if policy.get("PolicyType") == "StepScaling" and fired is not None:
            return step_proposal(policy, period, fired, store=self._store, book=self.book)
        return None

    def _apply(
        self, region: str, resource: str, fleet: Any, chosen: Proposal, current: int
    ) -> None:
        """Start the resize ``chosen`` asks for and record it (the policy's cooldown)."""
        if self._resize(region, resource, fleet, chosen.capacity, chosen.cause):
            chosen.started()
            if chosen.capacity > current:
                self.book.stop_scale_in_cooldowns(region, resource)

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
        # the policies of the targets the actions name, each target's read apart: a listing
        # of the region's policies is paged (10 a page), and where a token is a position
        # (the local AWS's was: paging.py), a deletion meanwhile (a deleted endpoint's
        # targets deregistered, 50 policies each) moves later policies onto pages already
        # read, and the invoked one goes unseen; one target's pages are also fewer to read
        aas = self._client_for("application-autoscaling", region)
        resources = sorted({r for a in actions if (r := policy_resource(str(a))) is not None})
        policies = [p for r in resources for p in scaling_policies(aas, ResourceId=r)]
        for policy in policies:
            if policy["PolicyARN"] in actions and policy.get("PolicyType") in _POLICY_TYPES:
                self._invoked_now(region, policy, (alarm, given), policies)

    def _invoked_now(
        self,
        region: str,
        policy: dict[str, Any],
        fired: Fired,
        policies: list[dict[str, Any]],
    ) -> None:
        """``policy`` invoked now by ``fired`` (a user's SetAlarmState): it acts unless its
        target's scaling is suspended that way, or it is a target tracking scale-in that
        another target tracking policy of the target (of ``policies``) is not ready for."""
        resource = str(policy["ResourceId"])
        located = parse_resource(resource)
        aas = self._client_for("application-autoscaling", region)
        target = scalable_target(aas, resource)
        if located is None or target is None or (region, resource) in self._busy:
            return
        fleet = self._fleet_of(region, *located)
        if fleet is None:
            return
        current = fleet.instance_count
        limits = ScalingLimits(int(target["MinCapacity"]), int(target["MaxCapacity"]))
        suspended = target.get("SuspendedState") or {}
        period = Period(region, fleet, limits, time.time(), self._time_scale(), suspended)
        proposal = self._propose(policy, period, fired)
        if proposal is None or suspended_move(suspended, current, proposal.capacity):
            return
        if policy["PolicyType"] == "TargetTrackingScaling" and proposal.capacity < current:
            own = [p for p in policies if p["ResourceId"] == resource]
            wanted = {
                p["PolicyName"]: proposal
                if p["PolicyName"] == policy["PolicyName"]
                else self._propose(p, period, None)
                for p in own
                if p.get("PolicyType") == "TargetTrackingScaling"
            }
            if held_back_scale_ins(own, wanted, current):
                return
        self._apply(region, resource, fleet, proposal, current)

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


__all__ = ["Autoscaler", "FleetOf", "ShowCounts"]
