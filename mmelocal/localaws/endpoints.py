"""The endpoints' lifecycle: Creating -> InService (or Failed), Updating, Deleting (from
InService or Failed only, as the service allows).

moto keeps the control plane's records (names, ARNs, tags, configs); this module keeps
what moto cannot know: the status of the fleets behind each endpoint, its
``FailureReason``, the config it serves after an ``UpdateEndpoint`` (moto has no such
operation), and the running variants themselves (:class:`~.variants.VariantFleets`, one
:class:`~.fleet.Fleet` per production variant), whose weights and instance counts
``UpdateEndpointWeightsAndCapacities`` changes. Every transition runs on a worker thread,
so the control-plane call answers at once as the service does; a worker is started under
the manager's lock, and none after :meth:`EndpointManager.close`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mmelocal.errors import EndpointFailedError
from mmelocal.facts.runtime_api import IN_PROGRESS_STATUSES
from mmelocal.facts.sagemaker import DRAIN_TIMEOUT_S, FAILURE_REASON_MAX_CHARS
from mmelocal.localaws.fleet import Fleet, FleetLaunches
from mmelocal.localaws.variants import (
    EndpointPlan,
    StartFleet,
    VariantFleets,
    pending_deployment,
    resumed_deployment,
    retain_properties,
    saved_current,
    start_variants,
    summary_with,
    with_desired,
)

logger = logging.getLogger(__name__)

#: (region, endpoint name, config name) -> what the config serves, read from moto
Describe = Callable[[str, str, str], EndpointPlan]
#: how long :meth:`EndpointManager.close` waits, in all, for the fleets and transitions
#: to end
CLOSE_TIMEOUT_S = 30.0


@dataclass(kw_only=True)
class EndpointState:
    """What DescribeEndpoint shows beyond moto's record, and the variants serving calls.

    ``last_modified_s`` is when ``status`` last changed (DescribeEndpoint's and
    ListEndpoints' ``LastModifiedTime``, "when the endpoint was last modified": botocore's
    sagemaker model; moto's record keeps the creation time). An endpoint the saved state
    re-creates (:mod:`.state`) keeps the times it had: ``created_s`` (their
    ``CreationTime``; None: moto's record) and ``last_modified_s``, which its re-creation
    does not move (``restoring``, until that creation ends); one saved Failed is Failed
    again at once, with its ``failure_reason``, and starts nothing. ``pending`` is
    DescribeEndpoint's ``PendingDeploymentSummary`` while a CreateEndpoint or UpdateEndpoint
    deploys (:func:`~.variants.pending_deployment`), None otherwise. ``resume`` is the
    saved ``PendingDeploymentSummary`` of an UpdateEndpoint under way when the state was
    saved: once the restored endpoint serves its saved config again, it goes on with that
    update (:meth:`EndpointManager.keep_saved`). ``saved_variants`` are the running
    variants the state saved (DescribeEndpoint's ``ProductionVariants``): the restored
    endpoint's variants start with their ``CurrentInstanceCount`` and ``CurrentWeight``
    and, where a resize was under way, go on to their ``Desired*``."""

    region: str
    name: str
    status: str = "Creating"
    config_name: str = ""
    failure_reason: str | None = None
    fleets: VariantFleets | None = None
    generation: int = 0
    workers: list[threading.Thread] = field(default_factory=list)
    last_modified_s: float = field(default_factory=time.time)
    created_s: float | None = None
    restoring: bool = False
    pending: dict[str, Any] | None = None
    resume: dict[str, Any] | None = None
    saved_variants: tuple[dict[str, Any], ...] = ()

    def __setattr__(self, name: str, value: Any) -> None:
        if (
            name == "status"
            and "status" in self.__dict__
            and self.__dict__["status"] != value
            and not self.__dict__.get("restoring")
        ):
            super().__setattr__("last_modified_s", time.time())
        super().__setattr__(name, value)


class EndpointManager:
    """Endpoints by region and name (see the module docstring)."""

    def __init__(
        self,
        *,
        describe: Describe,
        start_fleet: StartFleet,
        forget: Callable[[str, str], None],
        work_dir: Path,
    ) -> None:
        self._describe = describe
        self._start_fleet = start_fleet
        self._forget = forget
        self._work_dir = work_dir
        self._lock = threading.Lock()
        self._endpoints: dict[tuple[str, str], EndpointState] = {}
        #: the generation each autoscaler resize under way began at
        self._resizing: dict[tuple[str, str], int] = {}
        #: (region, name) -> what the state being restored saved of an endpoint it is about
        #: to create again (:meth:`keep_saved`)
        self._restored: dict[tuple[str, str], _Saved] = {}
        self._closed = False
        #: the fleets starting now: ``start_fleet`` starts each through it, so that
        #: :meth:`close` can end their start
        self.launches = FleetLaunches()

    # -- queries -----------------------------------------------------------------------
    def get(self, region: str, name: str) -> EndpointState | None:
        """The endpoint's state, None when this process does not know it."""
        with self._lock:
            return self._endpoints.get((region, name))

    def variants(self, region: str, name: str) -> VariantFleets | None:
        """The variants that answer calls to the endpoint now (None: not in service)."""
        state = self.get(region, name)
        if state is None or state.status in ("Creating", "Failed", "Deleting"):
            return None
        return state.fleets

    def serving(self, region: str, name: str) -> Fleet | None:
        """The fleet of the endpoint's first variant (None: not in service); every variant:
        :meth:`variants`."""
        fleets = self.variants(region, name)
        return fleets.first if fleets is not None else None

    def states(self) -> list[EndpointState]:
        """Every known endpoint."""
        with self._lock:
            return list(self._endpoints.values())

    # -- transitions -------------------------------------------------------------------
    def keep_saved(
        self,
        region: str,
        name: str,
        *,
        created_s: float | None,
        modified_s: float | None,
        failure_reason: str | None = None,
        update: dict[str, Any] | None = None,
        variants: Sequence[dict[str, Any]] | None = None,
    ) -> None:
        """The saved state is about to create the endpoint ``name`` again: it keeps the
        times it had (``created_s``, ``modified_s``; None for both: forget them, the
        restore is over) and, with a ``failure_reason`` (it was saved Failed), stays Failed
        with that reason: "DeleteEndpoint is the only operation that can be performed on a
        failed endpoint" (EndpointStatus, botocore's sagemaker model), so nothing the
        restart changed (a tritonserver that starts now, the S3 objects) makes it serve.
        With an ``update`` (it was saved Updating: the ``PendingDeploymentSummary`` of its
        UpdateEndpoint) it goes on with that update once its saved config serves again, as
        the service, which has no restart, would have gone on: Updating (the saved config
        serving meanwhile), then InService on the new config, or on the saved one with the
        FailureReason where the new one cannot start (the service rolls back). With
        ``variants`` (it was saved serving: DescribeEndpoint's ``ProductionVariants``, each
        variant's current and desired instance count and weight) its variants start with
        the current ones, not the config's initial ones (an endpoint on the service keeps
        what UpdateEndpointWeightsAndCapacities or the autoscaler set), and a resize under
        way (desired ones that differ) goes on once they serve: Updating, then InService."""
        with self._lock:
            if created_s is None or modified_s is None:
                self._restored.pop((region, name), None)
            else:
                self._restored[(region, name)] = _Saved(
                    created_s=created_s,
                    modified_s=modified_s,
                    failure_reason=failure_reason,
                    update=update,
                    variants=tuple(dict(v) for v in variants or ()),
                )

    def create(
        self,
        region: str,
        name: str,
        config_name: str,
        *,
        variants: Sequence[dict[str, Any]] | None = None,
    ) -> EndpointState | None:
        """A new endpoint, Creating from now on; its fleet starts at :meth:`start`, once
        moto has recorded the endpoint (:meth:`discard` when it refused it), so that no
        answer shows moto's record alone (InService). ``variants``, the config's
        ``ProductionVariants``, are the pending deployment's. None (nothing changes) when
        an endpoint of that name is here already, other than one moto has forgotten whose
        deletion is ending (two CreateEndpoint calls at once: moto has recorded neither
        when the caller checked)."""
        now = time.time()
        state = EndpointState(
            region=region,
            name=name,
            config_name=config_name,
            last_modified_s=now,
            pending=pending_deployment(config_name, variants, now),
        )
        with self._lock:
            existing = self._endpoints.get((region, name))
            if existing is not None and existing.status != "Deleting":
                return None
            kept = self._restored.pop((region, name), None)
            if kept is not None:  # re-created by the restore: neither created nor changed now
                state.created_s, state.last_modified_s = kept.created_s, kept.modified_s
                state.restoring = True
                if kept.failure_reason is not None:
                    state.status, state.failure_reason = "Failed", kept.failure_reason
                    state.restoring, state.pending = False, None
                else:
                    state.resume, state.saved_variants = kept.update, kept.variants
                    if kept.variants and state.pending is not None:  # what starts
                        state.pending = summary_with(state.pending, saved_current(kept.variants))
            self._endpoints[(region, name)] = state
        return state

    def start(self, state: EndpointState) -> None:
        """Start the fleet of an endpoint :meth:`create` returned (status Creating until
        Triton is ready, or Failed); none for one the restore re-created Failed, nor after
        :meth:`close`."""
        with self._lock:
            if state.status != "Failed" and not self._closed:
                self._spawn(state, self._run_create, state, state.generation)

    def discard(self, state: EndpointState) -> None:
        """Forget an endpoint :meth:`create` returned and moto did not record."""
        with self._lock:
            if self._endpoints.get((state.region, state.name)) is state:
                del self._endpoints[(state.region, state.name)]

    def update(
        self,
        region: str,
        name: str,
        config_name: str,
        *,
        retain: frozenset[str] = frozenset(),
        variants: Sequence[dict[str, Any]] | None = None,
    ) -> None:
        """Move to another config: the old fleet serves until the new one is ready. The
        ``retain`` properties (``DesiredInstanceCount``, ``DesiredWeight``) of each variant
        the new config names too are the ones it has now, not the config's
        (``RetainAllVariantProperties``); ``variants``, the new config's
        ``ProductionVariants``, are the pending deployment's."""
        with self._lock:
            state = self._endpoints.get((region, name))
            if state is None:
                raise KeyError(name)
            state.status = "Updating"
            state.failure_reason = None
            state.generation += 1
            generation = state.generation
            state.pending = pending_deployment(
                config_name, variants, state.last_modified_s, running=state.fleets, retain=retain
            )
            running = state.fleets if retain else None
            self._spawn(state, self._run_update, state, config_name, generation, running, retain)

    def delete(self, region: str, name: str) -> bool:
        """Deleting: new calls are refused, calls in flight finish, then Triton stops and
        moto forgets the endpoint. False (nothing changes) while the endpoint is Creating
        or Updating: the service refuses to delete an endpoint in progress."""
        with self._lock:
            state = self._endpoints.get((region, name))
            if state is None:
                raise KeyError(name)
            if state.status in IN_PROGRESS_STATUSES:
                return False
            state.status = "Deleting"
            state.generation += 1
            fleets, state.fleets = state.fleets, None
            self._spawn(state, self._run_delete, state, fleets)
        return True

    def update_weights_and_capacities(
        self, region: str, name: str, desired: list[dict[str, Any]]
    ) -> bool:
        """``UpdateEndpointWeightsAndCapacities`` (checked by the caller): Updating, each
        variant's desired weight and instance count shown at once, made current by a
        worker; then InService. A count it cannot start leaves the old one serving, with
        the reason as FailureReason. False (nothing changes) when the endpoint is no longer
        InService (the autoscaler's resize began meanwhile: one change at a time)."""
        with self._lock:
            state = self._endpoints.get((region, name))
            if state is None or state.fleets is None:
                raise KeyError(name)
            if state.status != "InService":
                return False
            for item in desired:
                state.fleets.set_desired(
                    str(item["VariantName"]),
                    weight=item.get("DesiredWeight"),
                    instance_count=item.get("DesiredInstanceCount"),
                )
            state.status = "Updating"
            state.failure_reason = None
            state.generation += 1
            self._spawn(state, self._run_weights, state, state.fleets, state.generation)
        return True

    def begin_resize(self, region: str, name: str, variant: str) -> Any | None:
        """Claim an endpoint InService for the autoscaler's resize of ``variant``: Updating,
        under the lock the API's changes take (one change at a time); the variant's fleet,
        None when the endpoint is not InService or has no such variant (nothing changes)."""
        with self._lock:
            state = self._endpoints.get((region, name))
            if state is None or state.status != "InService" or state.fleets is None:
                return None
            found = state.fleets.get(variant)
            if found is None:
                return None
            state.status = "Updating"
            self._resizing[(region, name)] = state.generation
            return found.fleet

    def end_resize(self, region: str, name: str) -> None:
        """The autoscaler's resize ended: InService again, unless the endpoint moved on
        meanwhile (deleted, updated)."""
        with self._lock:
            generation = self._resizing.pop((region, name), None)
            state = self._endpoints.get((region, name))
            if (
                state is not None
                and state.generation == generation
                and state.status == "Updating"
                and state.fleets is not None
            ):
                state.status = "InService"

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """Stop every fleet (the server is shutting down), waiting ``timeout_s`` at most in
        all. A creation or update under way is given up, not waited for: the fleets still
        starting are stopped at once (:meth:`~.fleet.FleetLaunches.cancel`), which ends
        their start, and no other starts; the saved state (:mod:`.state`), written before,
        has the endpoint as it was, and a restart creates it again."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            self._closed = True
            states = list(self._endpoints.values())
            self._endpoints.clear()
            fleets: list[VariantFleets | Fleet] = []
            for state in states:
                state.generation += 1
                if state.fleets is not None:
                    fleets.append(state.fleets)
                state.fleets = None
        fleets += self.launches.cancel()
        stopping = [
            threading.Thread(target=fleet.stop, name="localaws-stop", daemon=True)
            for fleet in fleets
        ]
        for thread in stopping:  # side by side: each may wait for its Triton to exit
            thread.start()
        workers = [worker for state in states for worker in state.workers]
        for thread in [*stopping, *workers]:
            thread.join(max(0.0, deadline - time.monotonic()))
        left = sum(thread.is_alive() for thread in [*stopping, *workers])
        if left:
            logger.warning(
                "%d endpoint fleet stop(s) or transition(s) still under way after %.0fs; "
                "not waiting for them",
                left,
                timeout_s,
            )

    def wait(self, timeout_s: float | None = None) -> None:
        """Wait for the transitions under way (tests, shutdown)."""
        for state in self.states():
            for worker in list(state.workers):
                worker.join(timeout_s)

    # -- workers -----------------------------------------------------------------------
    def _spawn(self, state: EndpointState, target: Callable[..., None], *args: Any) -> None:
        """Run ``target`` on a worker of ``state``. Called under the lock, where
        :meth:`close` sets ``_closed``: a worker is started before close() took the lock
        (it joins it, and the worker finds its generation gone) or not at all."""
        worker = threading.Thread(
            target=target, args=args, name=f"localaws-{state.name}", daemon=True
        )
        state.workers = [w for w in state.workers if w.is_alive()] + [worker]
        worker.start()

    def _new_fleets(
        self,
        state: EndpointState,
        config_name: str,
        running: VariantFleets | None = None,
        retain: frozenset[str] = frozenset(),
        desired: Sequence[dict[str, Any]] = (),
    ) -> VariantFleets:
        plan = self._describe(state.region, state.name, config_name)
        if running is not None:
            plan = retain_properties(plan, running, retain)
        if desired:
            plan = with_desired(plan, desired)
        work = self._work_dir / state.region / state.name / f"{config_name}-{state.generation}"
        return start_variants(plan, start_fleet=self._start_fleet, work_dir=work)

    def _install(
        self, state: EndpointState, generation: int, fleets: VariantFleets
    ) -> VariantFleets | None:
        """Make ``fleets`` the ones serving, unless the endpoint moved on meanwhile (then
        they are stopped); the ones they replace. A restored endpoint with an update to
        resume (``resume``) goes on with it, and one whose saved variants were being
        resized (``saved_variants``) goes on with the resize, rather than being InService;
        the worker that goes on is started under the lock, so a :meth:`close` either
        finds it or comes first (nothing then starts)."""
        goes_on = ""
        with self._lock:
            current = state.generation == generation and not self._closed
            if current:
                old, state.fleets = state.fleets, fleets
                state.config_name = fleets.config_name
                state.failure_reason = None
                update, state.resume = state.resume, None
                saved, state.saved_variants = state.saved_variants, ()
                if update is not None:
                    goes_on = "its update goes on"
                    next_generation = self._resume_update(state, update)
                    self._spawn(
                        state,
                        self._run_update,
                        state,
                        str(update["EndpointConfigName"]),
                        next_generation,
                        None,
                        frozenset(),
                        tuple(update.get("ProductionVariants") or ()),
                    )
                elif _resume_resize(state, fleets, saved):
                    goes_on = "its resize goes on"
                    self._spawn(state, self._run_weights, state, fleets, state.generation)
                else:
                    state.status = "InService"
                    state.restoring, state.pending = False, None
        if not current:
            fleets.stop()  # deleted, updated again or shut down while it was starting
            return None
        logger.info(
            "endpoint %s %s on %s: %s",
            state.name,
            f"serving ({goes_on})" if goes_on else "in service",
            fleets.config_name,
            ", ".join(f"{v.name} at {v.fleet.url}" for v in fleets.variants),
        )
        return old

    @staticmethod
    def _resume_update(state: EndpointState, update: dict[str, Any]) -> int:
        """Under the lock: the restored ``state``, serving its saved config again, Updating
        to the config of its saved ``update``; the update's generation. Its
        LastModifiedTime stays the saved one: when that update began."""
        state.status = "Updating"  # still restoring: the saved LastModifiedTime stays
        state.restoring = False
        state.generation += 1
        state.pending = resumed_deployment(update, state.last_modified_s)
        return state.generation

    def _fail(self, state: EndpointState, generation: int, exc: BaseException) -> None:
        """The transition of ``generation`` failed with ``exc``: its reason is the
        endpoint's FailureReason, unless the endpoint moved on meanwhile (deleted, updated
        again, shut down: then the failure, often that very move, is no one's)."""
        reason = _reason(exc)
        with self._lock:
            current = state.generation == generation
            if current:
                # a failed update leaves the old fleet serving, as the service rolls back
                state.status = "InService" if state.fleets is not None else "Failed"
                state.failure_reason = reason
                state.restoring, state.pending, state.resume = False, None, None
                state.saved_variants = ()
        if not current:
            logger.debug("endpoint %s: a transition it moved on from failed: %s", state.name, exc)
            return
        if not isinstance(exc, EndpointFailedError):
            logger.error("endpoint transition failed", exc_info=exc)
        logger.info("endpoint %s failed: %s", state.name, reason)

    def _run_create(self, state: EndpointState, generation: int) -> None:
        try:
            started = saved_current(state.saved_variants)
            fleets = self._new_fleets(state, state.config_name, desired=started)
        except Exception as exc:  # the endpoint fails with the reason, never stays Creating
            self._fail(state, generation, exc)
            return
        self._install(state, generation, fleets)

    def _run_update(
        self,
        state: EndpointState,
        config_name: str,
        generation: int,
        running: VariantFleets | None,
        retain: frozenset[str],
        desired: Sequence[dict[str, Any]] = (),
    ) -> None:
        try:
            fleets = self._new_fleets(state, config_name, running, retain, desired)
        except Exception as exc:  # the endpoint fails with the reason, never stays Creating
            self._fail(state, generation, exc)
            return
        old = self._install(state, generation, fleets)
        if old is not None:
            old.drain(DRAIN_TIMEOUT_S)
            old.stop()

    def _run_weights(self, state: EndpointState, fleets: VariantFleets, generation: int) -> None:
        try:
            fleets.apply(drain_timeout_s=DRAIN_TIMEOUT_S)
        except Exception as exc:  # the old count goes on serving
            for variant in fleets.variants:  # what could not start stays as it was
                variant.desired_instance_count = variant.current_instance_count
            self._fail(state, generation, exc)
            return
        with self._lock:
            if state.generation == generation and state.fleets is fleets:
                state.status, state.failure_reason = "InService", None

    def _run_delete(self, state: EndpointState, fleets: VariantFleets | None) -> None:
        if fleets is not None:
            fleets.drain(DRAIN_TIMEOUT_S)
            fleets.stop()
        # moto first: until it forgets the endpoint, Describe and List show it Deleting
        # (after, moto's own record would show its InService)
        self._forget(state.region, state.name)
        with self._lock:
            if self._endpoints.get((state.region, state.name)) is state:
                del self._endpoints[(state.region, state.name)]
        logger.info("endpoint %s deleted", state.name)


@dataclass(frozen=True, kw_only=True)
class _Saved:
    """What the saved state kept of an endpoint it creates again (:meth:`keep_saved`)."""

    created_s: float
    modified_s: float
    failure_reason: str | None = None
    update: dict[str, Any] | None = None
    variants: tuple[dict[str, Any], ...] = ()


def _resume_resize(
    state: EndpointState, fleets: VariantFleets, saved: Sequence[dict[str, Any]]
) -> bool:
    """Under the lock: where a variant of ``saved`` (the restored ``state``'s, now served by
    ``fleets`` at their current counts and weights) was being resized (a desired instance
    count or weight other than what serves), ``fleets`` are asked for the desired ones and
    ``state`` is Updating on a new generation, its LastModifiedTime and each variant's
    Updating ``StartTime`` the saved LastModifiedTime (when that change began); False
    (nothing changes) where none was."""
    moves = []
    for item in saved:
        variant = fleets.get(str(item.get("VariantName", "")))
        count, weight = item.get("DesiredInstanceCount"), item.get("DesiredWeight")
        if variant is not None and (
            (count is not None and int(count) != variant.current_instance_count)
            or (weight is not None and float(weight) != variant.current_weight)
        ):
            moves.append((variant, count, weight))
    if not moves:
        return False
    for variant, count, weight in moves:
        fleets.set_desired(variant.name, weight=weight, instance_count=count)
        variant.capacity_asked_s = state.last_modified_s
    state.status = "Updating"  # still restoring: the saved LastModifiedTime stays
    state.restoring, state.pending = False, None
    state.generation += 1
    return True


def _reason(exc: BaseException) -> str:
    """The FailureReason for an exception: its message."""
    return (str(exc).strip() or type(exc).__name__)[:FAILURE_REASON_MAX_CHARS]


__all__ = ["EndpointManager", "EndpointState"]
