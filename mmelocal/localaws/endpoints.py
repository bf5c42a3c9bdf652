"""The endpoints' lifecycle: Creating -> InService (or Failed), Updating, Deleting.

moto keeps the control plane's records (names, ARNs, tags, configs); this module keeps
what moto cannot know: the status of the fleet behind each endpoint, its
``FailureReason``, the config it serves after an ``UpdateEndpoint`` (moto has no such
operation), and the running :class:`~.fleet.Fleet` itself. Every transition runs on a
worker thread, so the control-plane call answers at once as the service does.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mmelocal.errors import EndpointFailedError
from mmelocal.localaws.fleet import Fleet, FleetPlan

logger = logging.getLogger(__name__)

#: how long an update or a delete lets calls in flight finish (the service's model
#: timeout is 60 s)
DRAIN_TIMEOUT_S = 75.0

#: (region, endpoint name, config name) -> what the config serves, read from moto
Describe = Callable[[str, str, str], FleetPlan]
StartFleet = Callable[[FleetPlan, Path], Fleet]


@dataclass(kw_only=True)
class EndpointState:
    """What DescribeEndpoint shows beyond moto's record, and the fleet serving calls."""

    region: str
    name: str
    status: str = "Creating"
    config_name: str = ""
    failure_reason: str | None = None
    variants: tuple[dict[str, Any], ...] = ()
    fleet: Fleet | None = None
    generation: int = 0
    workers: list[threading.Thread] = field(default_factory=list)


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
        self._closed = False

    # -- queries -----------------------------------------------------------------------
    def get(self, region: str, name: str) -> EndpointState | None:
        """The endpoint's state, None when this process does not know it."""
        with self._lock:
            return self._endpoints.get((region, name))

    def serving(self, region: str, name: str) -> Fleet | None:
        """The fleet that answers calls to the endpoint now (None: not in service)."""
        state = self.get(region, name)
        if state is None or state.status in ("Creating", "Failed", "Deleting"):
            return None
        return state.fleet

    def states(self) -> list[EndpointState]:
        """Every known endpoint."""
        with self._lock:
            return list(self._endpoints.values())

    # -- transitions -------------------------------------------------------------------
    def create(self, region: str, name: str, config_name: str) -> None:
        """Start the fleet for a new endpoint (status Creating until Triton is ready)."""
        state = EndpointState(region=region, name=name, config_name=config_name)
        with self._lock:
            self._endpoints[(region, name)] = state
        self._spawn(state, self._run_create, state, state.generation)

    def update(self, region: str, name: str, config_name: str) -> None:
        """Move to another config: the old fleet serves until the new one is ready."""
        with self._lock:
            state = self._endpoints.get((region, name))
            if state is None:
                raise KeyError(name)
            state.status = "Updating"
            state.failure_reason = None
            state.generation += 1
            generation = state.generation
        self._spawn(state, self._run_update, state, config_name, generation)

    def delete(self, region: str, name: str) -> None:
        """Deleting: new calls are refused, calls in flight finish, then Triton stops and
        moto forgets the endpoint."""
        with self._lock:
            state = self._endpoints.get((region, name))
            if state is None:
                raise KeyError(name)
            state.status = "Deleting"
            state.generation += 1
            fleet, state.fleet = state.fleet, None
        self._spawn(state, self._run_delete, state, fleet)

    def close(self, timeout_s: float = 30.0) -> None:
        """Stop every fleet (the server is shutting down); fleets still starting are stopped
        by their worker, waited for up to ``timeout_s``."""
        with self._lock:
            self._closed = True
            states = list(self._endpoints.values())
            self._endpoints.clear()
            fleets = []
            for state in states:
                state.generation += 1
                fleets.append(state.fleet)
                state.fleet = None
        for fleet in fleets:
            if fleet is not None:
                fleet.stop()
        for state in states:
            for worker in list(state.workers):
                worker.join(timeout_s)

    def wait(self, timeout_s: float | None = None) -> None:
        """Wait for the transitions under way (tests, shutdown)."""
        for state in self.states():
            for worker in list(state.workers):
                worker.join(timeout_s)

    # -- workers -----------------------------------------------------------------------
    def _spawn(self, state: EndpointState, target: Callable[..., None], *args: Any) -> None:
        worker = threading.Thread(
            target=target, args=args, name=f"localaws-{state.name}", daemon=True
        )
        state.workers = [w for w in state.workers if w.is_alive()] + [worker]
        worker.start()

    def _new_fleet(self, state: EndpointState, config_name: str) -> Fleet:
        plan = self._describe(state.region, state.name, config_name)
        work = self._work_dir / state.region / state.name / f"{config_name}-{state.generation}"
        return self._start_fleet(plan, work)

    def _install(self, state: EndpointState, generation: int, fleet: Fleet) -> Fleet | None:
        """Make ``fleet`` the one serving, unless the endpoint moved on meanwhile (then it
        is stopped); the fleet it replaces."""
        with self._lock:
            current = state.generation == generation and not self._closed
            if current:
                old, state.fleet = state.fleet, fleet
                state.config_name, state.variants = fleet.plan.config_name, fleet.plan.variants
                state.status, state.failure_reason = "InService", None
        if not current:
            fleet.stop()  # deleted, updated again or shut down while it was starting
            return None
        logger.info("endpoint %s in service on %s at %s", state.name, state.config_name, fleet.url)
        return old

    def _fail(self, state: EndpointState, generation: int, reason: str) -> None:
        with self._lock:
            if state.generation == generation:
                # a failed update leaves the old fleet serving, as the service rolls back
                state.status = "InService" if state.fleet is not None else "Failed"
                state.failure_reason = reason
        logger.info("endpoint %s failed: %s", state.name, reason)

    def _run_create(self, state: EndpointState, generation: int) -> None:
        try:
            fleet = self._new_fleet(state, state.config_name)
        except EndpointFailedError as exc:
            self._fail(state, generation, str(exc))
            return
        self._install(state, generation, fleet)

    def _run_update(self, state: EndpointState, config_name: str, generation: int) -> None:
        try:
            fleet = self._new_fleet(state, config_name)
        except EndpointFailedError as exc:
            self._fail(state, generation, str(exc))
            return
        old = self._install(state, generation, fleet)
        if old is not None:
            old.drain(DRAIN_TIMEOUT_S)
            old.stop()

    def _run_delete(self, state: EndpointState, fleet: Fleet | None) -> None:
        if fleet is not None:
            fleet.drain(DRAIN_TIMEOUT_S)
            fleet.stop()
        with self._lock:
            if self._endpoints.get((state.region, state.name)) is state:
                del self._endpoints[(state.region, state.name)]
        self._forget(state.region, state.name)
        logger.info("endpoint %s deleted", state.name)


__all__ = ["DRAIN_TIMEOUT_S", "EndpointManager", "EndpointState"]
