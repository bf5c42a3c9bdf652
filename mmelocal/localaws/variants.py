"""An endpoint's production variants: each its own model, instance type and fleet of
instances, sharing the calls by weight.

:func:`plan_endpoint` plans every variant of a config (:func:`~.fleet.plan_variant`);
:func:`start_variants` starts their fleets side by side (all or none);
:class:`VariantFleets` is what serves the endpoint: it picks the variant of each call
(``TargetVariant``, else a draw by weight: :func:`mmelocal.rules.variants.choose_variant`),
describes the variants as ``DescribeEndpoint`` does, and changes weights and instance
counts for ``UpdateEndpointWeightsAndCapacities`` (:meth:`VariantFleets.apply`). The
autoscaler resizes a variant's fleet itself (:meth:`~.fleet.Fleet.scale_to`) once it
claimed the endpoint from the endpoint manager (one change at a time).
"""

from __future__ import annotations

import dataclasses
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmelocal.errors import EndpointFailedError
from mmelocal.facts.runtime_api import DEFAULT_VARIANT_WEIGHT
from mmelocal.localaws.fleet import Fleet, FleetPlan, plan_variant
from mmelocal.rules.variants import choose_variant

logger = logging.getLogger(__name__)

#: what a deployment asks of each variant (a ``PendingDeploymentSummary``'s, and what
#: :func:`with_desired` takes)
_DESIRED = ("DesiredInstanceCount", "DesiredWeight")

#: (plan, work folder) -> a started fleet (raises EndpointFailedError)
StartFleet = Callable[[FleetPlan, Path], Fleet]


@dataclass(frozen=True, kw_only=True)
class EndpointPlan:
    """What one endpoint config runs: one :class:`~.fleet.FleetPlan` per variant, in the
    config's order."""

    endpoint_name: str
    config_name: str
    variants: tuple[FleetPlan, ...]

    def variant(self, name: str) -> FleetPlan | None:
        """The plan of the variant ``name`` (None if the config has none of that name)."""
        return next((v for v in self.variants if v.variant_name == name), None)


def retain_properties(
    plan: EndpointPlan, running: VariantFleets, properties: frozenset[str]
) -> EndpointPlan:
    """``plan`` (a new config's) with the ``properties`` (``DesiredInstanceCount``,
    ``DesiredWeight``) of each variant of the same name ``running`` now, as
    ``UpdateEndpoint`` with ``RetainAllVariantProperties`` starts it."""
    variants = [
        dataclasses.replace(v, **_retained(v.variant_name, running, properties))
        for v in plan.variants
    ]
    return dataclasses.replace(plan, variants=tuple(variants))


def _retained(
    name: str, running: VariantFleets | None, properties: frozenset[str]
) -> dict[str, Any]:
    """What the variant ``name`` of a new config keeps of the running one of that name
    (:class:`~.fleet.FleetPlan` fields: ``instances``, ``weight``)."""
    current = running.get(name) if running is not None else None
    kept: dict[str, Any] = {}
    if current is not None and "DesiredInstanceCount" in properties:
        kept["instances"] = current.current_instance_count
    if current is not None and "DesiredWeight" in properties:
        kept["weight"] = current.current_weight
    return kept


def pending_deployment(
    config_name: str,
    config_variants: Sequence[dict[str, Any]] | None,
    start_s: float,
    *,
    running: VariantFleets | None = None,
    retain: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """``DescribeEndpoint``'s ``PendingDeploymentSummary`` of a CreateEndpoint or
    UpdateEndpoint to ``config_name`` begun at ``start_s``: each of ``config_variants``
    (the config's ``ProductionVariants``; None: left out) as it was asked for, its
    instance count and weight the running variant's where ``retain`` names them
    (:func:`retain_properties`), ``Creating`` since ``start_s`` (ProductionVariantStatus:
    "Creating inference resources for the production variant"). What the new variants
    serve with is not known until they all do: no ``Current*``."""
    summary: dict[str, Any] = {"EndpointConfigName": config_name, "StartTime": start_s}
    if config_variants is None:
        return summary
    described = []
    for variant in config_variants:
        name = str(variant.get("VariantName", ""))
        kept = _retained(name, running, retain)
        count = kept.get("instances", variant.get("InitialInstanceCount"))
        weight = kept.get("weight", variant.get("InitialVariantWeight"))
        item: dict[str, Any] = {"VariantName": name}
        if count is not None:
            item["DesiredInstanceCount"] = int(count)
        item["DesiredWeight"] = DEFAULT_VARIANT_WEIGHT if weight is None else float(weight)
        if variant.get("InstanceType"):
            item["InstanceType"] = str(variant["InstanceType"])
        item["VariantStatus"] = [{"Status": "Creating", "StartTime": start_s}]
        described.append(item)
    summary["ProductionVariants"] = described
    return summary


def with_desired(plan: EndpointPlan, desired: Sequence[Mapping[str, Any]]) -> EndpointPlan:
    """``plan`` with each variant's instance count and weight those ``desired`` (a
    ``PendingDeploymentSummary``'s ``ProductionVariants``: ``DesiredInstanceCount``,
    ``DesiredWeight``) gives the variant of that name: what the deployment it summarises
    starts (retained properties included: :func:`pending_deployment`)."""
    asked = {str(v.get("VariantName", "")): v for v in desired}
    variants = []
    for variant in plan.variants:
        found = asked.get(variant.variant_name, {})
        kept: dict[str, Any] = {}
        if found.get("DesiredInstanceCount") is not None:
            kept["instances"] = int(found["DesiredInstanceCount"])
        if found.get("DesiredWeight") is not None:
            kept["weight"] = float(found["DesiredWeight"])
        variants.append(dataclasses.replace(variant, **kept))
    return dataclasses.replace(plan, variants=tuple(variants))


def saved_current(saved: Sequence[Mapping[str, Any]]) -> tuple[dict[str, Any], ...]:
    """What each variant of ``saved`` (DescribeEndpoint's ``ProductionVariants`` as the
    saved state keeps them) serves with, its ``CurrentInstanceCount`` and
    ``CurrentWeight``, named as :func:`with_desired` takes them (``DesiredInstanceCount``,
    ``DesiredWeight``): what a restored endpoint's variants start with."""
    started = []
    for variant in saved:
        item: dict[str, Any] = {"VariantName": str(variant.get("VariantName", ""))}
        if variant.get("CurrentInstanceCount") is not None:
            item["DesiredInstanceCount"] = int(variant["CurrentInstanceCount"])
        if variant.get("CurrentWeight") is not None:
            item["DesiredWeight"] = float(variant["CurrentWeight"])
        started.append(item)
    return tuple(started)


def summary_with(
    summary: Mapping[str, Any], desired: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """``summary`` (a ``PendingDeploymentSummary``) with each variant's
    ``DesiredInstanceCount`` and ``DesiredWeight`` those ``desired`` gives the variant of
    that name (as :func:`with_desired` changes a plan)."""
    asked = {str(v.get("VariantName", "")): v for v in desired}
    out = dict(summary)
    if "ProductionVariants" in summary:
        variants = []
        for variant in summary["ProductionVariants"]:
            found = asked.get(str(variant.get("VariantName", "")), {})
            variants.append({**variant, **{k: found[k] for k in _DESIRED if k in found}})
        out["ProductionVariants"] = variants
    return out


def resumed_deployment(summary: Mapping[str, Any], start_s: float) -> dict[str, Any]:
    """The ``PendingDeploymentSummary`` of a deployment a restart of the local AWS goes on
    with: ``summary`` as the saved state keeps it (``EndpointConfigName``, each variant's
    name, desired properties and instance type), begun at ``start_s``, each variant
    ``Creating`` since then (as :func:`pending_deployment` shows one)."""
    resumed: dict[str, Any] = {
        "EndpointConfigName": str(summary["EndpointConfigName"]),
        "StartTime": start_s,
    }
    if "ProductionVariants" in summary:
        resumed["ProductionVariants"] = [
            {**v, "VariantStatus": [{"Status": "Creating", "StartTime": start_s}]}
            for v in summary["ProductionVariants"]
        ]
    return resumed


def plan_endpoint(
    endpoint_name: str, config: dict[str, Any], models: Mapping[str, dict[str, Any]]
) -> EndpointPlan:
    """Every variant of ``config`` (a ``DescribeEndpointConfig`` answer); ``models`` maps
    each variant's ``ModelName`` to its ``DescribeModel`` answer. EndpointFailedError with
    the FailureReason when a variant cannot run."""
    variants = config.get("ProductionVariants") or []
    if not variants:
        raise EndpointFailedError("the endpoint configuration has no production variant")
    config_name = str(config["EndpointConfigName"])
    plans = []
    for variant in variants:
        model = models.get(str(variant.get("ModelName", "")))
        if model is None:
            raise EndpointFailedError(f'Could not find model "{variant.get("ModelName")}".')
        plans.append(plan_variant(endpoint_name, config_name, variant, model))
    return EndpointPlan(endpoint_name=endpoint_name, config_name=config_name, variants=tuple(plans))


class Variant:
    """One production variant in service: its fleet, weights and instance counts."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.name = fleet.plan.variant_name
        self.current_weight = fleet.plan.weight
        self.desired_weight = fleet.plan.weight
        self._desired_instance_count = fleet.plan.instances
        #: when the desired instance count last changed (the capacity update's start)
        self.capacity_asked_s = time.time()

    @property
    def desired_instance_count(self) -> int:
        """The instance count asked for (UpdateEndpointWeightsAndCapacities, autoscaling)."""
        return self._desired_instance_count

    @desired_instance_count.setter
    def desired_instance_count(self, count: int) -> None:
        if count != self._desired_instance_count:
            self.capacity_asked_s = time.time()
        self._desired_instance_count = count

    @property
    def current_instance_count(self) -> int:
        """Instances serving now (a scaling adds and drains them one at a time)."""
        return self.fleet.instance_count

    def described(self) -> dict[str, Any]:
        """``DescribeEndpoint``'s ``ProductionVariantSummary`` of this variant; while its
        instance count moves to the desired one, ``VariantStatus`` says ``Updating`` since
        it was asked (ProductionVariantStatus, botocore's sagemaker model: "Updating:
        Updating capacity for the production variant"; ``StartTime``: "The start time of
        the current status change")."""
        described: dict[str, Any] = {
            "VariantName": self.name,
            "CurrentWeight": self.current_weight,
            "DesiredWeight": self.desired_weight,
            "CurrentInstanceCount": self.current_instance_count,
            "DesiredInstanceCount": self.desired_instance_count,
        }
        if self.desired_instance_count != self.current_instance_count:
            described["VariantStatus"] = [
                {"Status": "Updating", "StartTime": self.capacity_asked_s}
            ]
        return described


class VariantFleets:
    """The variants serving one endpoint config (see the module docstring).

    ``rng`` draws the variant of each call (a seeded ``random.Random`` makes the draws
    repeatable); a variant's instance count changes in place (:meth:`resize`).
    """

    def __init__(
        self,
        plan: EndpointPlan,
        fleets: Sequence[Fleet],
        *,
        rng: random.Random | None = None,
    ) -> None:
        self.plan = plan
        self.variants = [Variant(fleet) for fleet in fleets]
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._stopped = False

    # -- routing -----------------------------------------------------------------------
    @property
    def config_name(self) -> str:
        """The endpoint config these variants serve."""
        return self.plan.config_name

    @property
    def first(self) -> Fleet:
        """The fleet of the config's first variant."""
        return self.variants[0].fleet

    def names(self) -> list[str]:
        """The variants' names, in the config's order."""
        return [v.name for v in self.variants]

    def get(self, name: str) -> Variant | None:
        """The variant ``name`` (None if there is none)."""
        return next((v for v in self.variants if v.name == name), None)

    def choose(self, target_variant: str | None = None) -> Variant | None:
        """The variant that serves a call: ``target_variant`` when given (None if the
        endpoint has no such variant), else one drawn by the current weights."""
        if target_variant is not None:
            return self.get(target_variant)
        variants = self.variants  # one read: a resize swaps the list, never edits it
        if len(variants) == 1:
            return variants[0]
        index = choose_variant([v.current_weight for v in variants], self._rng.random())
        return variants[index]

    def described(self) -> tuple[dict[str, Any], ...]:
        """``DescribeEndpoint``'s ``ProductionVariants``."""
        return tuple(v.described() for v in self.variants)

    # -- changes (UpdateEndpointWeightsAndCapacities) -----------------------------------
    def set_desired(
        self, name: str, *, weight: float | None = None, instance_count: int | None = None
    ) -> None:
        """Record what ``UpdateEndpointWeightsAndCapacities`` asks of the variant ``name``
        (``DescribeEndpoint`` shows it as Desired* until :meth:`apply` made it current)."""
        variant = self.get(name)
        if variant is None:
            raise KeyError(name)
        if weight is not None:
            variant.desired_weight = float(weight)
        if instance_count is not None:
            variant.desired_instance_count = int(instance_count)

    def apply(self, *, drain_timeout_s: float) -> None:
        """Make the desired weights and instance counts current: instance counts first
        (:meth:`resize`), then the weights, all at once."""
        for variant in list(self.variants):
            if variant.desired_instance_count != variant.current_instance_count:
                self.resize(
                    variant.name, variant.desired_instance_count, drain_timeout_s=drain_timeout_s
                )
        for variant in self.variants:
            variant.current_weight = variant.desired_weight

    def resize(
        self, name: str, count: int, *, drain_timeout_s: float, start_timeout_s: float = 300.0
    ) -> None:
        """Serve the variant ``name`` on ``count`` instances, one instance at a time
        (:meth:`~.fleet.Fleet.scale_to`): a new one takes calls once its Triton answers, a
        removed one stops after its calls in flight and loads finished (no call fails).
        Raises EndpointFailedError when the count is not reached (what runs goes on)."""
        variant = self.get(name)
        if variant is None:
            raise KeyError(name)
        if count < 1:
            raise EndpointFailedError(
                f"variant {name}: mmelocal serves instance-backed variants on at least one "
                f"instance, got {count}"
            )
        before = variant.current_instance_count
        if count == before:
            return
        reached = variant.fleet.scale_to(
            count, timeout_s=start_timeout_s, drain_timeout_s=drain_timeout_s
        )
        with self._lock:
            stopped = self._stopped
        logger.info(
            "endpoint %s variant %s: %d -> %d instance(s)",
            self.plan.endpoint_name,
            name,
            before,
            reached,
        )
        if reached != count and not stopped:
            raise EndpointFailedError(
                f"variant {name}: {reached} instance(s) serve, {count} were asked for"
            )

    # -- lifecycle ---------------------------------------------------------------------
    @property
    def inflight(self) -> int:
        """Calls being served now, on every variant."""
        return sum(v.fleet.inflight for v in self.variants)

    def drain(self, timeout_s: float) -> bool:
        """Wait until no call is in flight on any variant (``timeout_s`` each); True when
        idle."""
        return all([v.fleet.drain(timeout_s) for v in self.variants])

    def stop(self) -> None:
        """Stop every variant's fleet (idempotent); a resize under way stops its new fleet."""
        with self._lock:
            self._stopped = True
            variants = list(self.variants)
        for variant in variants:
            variant.fleet.stop()


def start_variants(
    plan: EndpointPlan,
    *,
    start_fleet: StartFleet,
    work_dir: Path,
    rng: random.Random | None = None,
) -> VariantFleets:
    """Start every variant's fleet side by side; all of them or none (a variant that fails
    stops the others and raises its EndpointFailedError, naming the variant when there are
    several)."""
    several = len(plan.variants) > 1

    def start(variant: FleetPlan) -> Fleet:
        folder = work_dir / variant.variant_name if several else work_dir
        return start_fleet(variant, folder)

    started: list[Fleet] = []
    failure: BaseException | None = None
    with ThreadPoolExecutor(max(1, len(plan.variants)), thread_name_prefix="variant") as pool:
        futures = [pool.submit(start, variant) for variant in plan.variants]
        for variant, future in zip(plan.variants, futures, strict=True):
            try:
                started.append(future.result())
            except BaseException as exc:  # every fleet is stopped, then the first is raised
                if failure is None:
                    failure = exc
                    if several and isinstance(exc, EndpointFailedError):
                        failure = EndpointFailedError(f"variant {variant.variant_name}: {exc}")
                        failure.__cause__ = exc
    if failure is not None:
        for fleet in started:
            fleet.stop()
        raise failure
    return VariantFleets(plan, started, rng=rng)


__all__ = [
    "EndpointPlan",
    "StartFleet",
    "Variant",
    "VariantFleets",
    "pending_deployment",
    "plan_endpoint",
    "resumed_deployment",
    "retain_properties",
    "saved_current",
    "start_variants",
    "summary_with",
    "with_desired",
]
