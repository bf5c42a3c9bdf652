"""What a deploy did, as it goes: the objects moved, the requests sent or passed over, the
endpoint's final status, the time taken and the error that stopped it (``deploy --json``).

A :class:`DeployOutcome` is filled while the plan is applied (``on_object`` and ``on_step``
of :func:`~mmelocal.deploy.deployer.apply_plan`), so a deploy that fails or is interrupted
still tells what it had done.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from mmelocal.deploy.artifacts import UNRECORDED_NOTE
from mmelocal.deploy.plan import ApiStep, DeployPlan, ObjectStep

#: an object step's action -> the outcome's name for it once done
_DONE = {"upload": "uploaded", "copy": "copied", "delete": "deleted"}
#: the result of a plan step ``apply_steps`` never reached (it stopped before)
NOT_REACHED = "not reached"


@dataclass(kw_only=True)
class DeployOutcome:
    """A deploy's record, filled as it goes (not frozen: it grows while the plan applies).

    ``results``: request index in ``plan.steps`` -> ``sent``, ``reused``, ``kept: WHY`` or
    ``skipped: WHY``; ``endpoint``: DescribeEndpoint's status, config and failure reason
    once the deploy ended (None: no such endpoint, or not asked)."""

    endpoint_name: str
    dry_run: bool = False
    plan: DeployPlan | None = None
    objects_done: list[ObjectStep] = field(default_factory=list)
    results: dict[int, str] = field(default_factory=dict)
    waited: str | None = None
    endpoint: dict[str, Any] | None = None
    left: str | None = None
    error: BaseException | None = None
    started_s: float = field(default_factory=time.monotonic)
    elapsed_s: float | None = None

    def object_done(self, step: ObjectStep) -> None:
        """``step``'s object is in place (or deleted)."""
        self.objects_done.append(step)

    def step_done(self, step: ApiStep, result: str) -> None:
        """What became of ``step`` of the plan (``sent``, ``reused``, ``kept: ...``)."""
        if self.plan is not None:
            index = next(i for i, s in enumerate(self.plan.steps) if s is step)
            self.results[index] = result

    def finish(self, *, error: BaseException | None = None) -> None:
        """The deploy ended (with ``error`` when it failed): the clock stops."""
        self.error = error
        self.elapsed_s = time.monotonic() - self.started_s

    @property
    def ok(self) -> bool:
        """True when the deploy ended without an error."""
        return self.elapsed_s is not None and self.error is None

    def summary(self) -> str:
        """One line: the objects moved, the requests sent, the seconds so far."""
        from mmelocal.units import mib

        moved = []
        for action, name in _DONE.items():
            done = [o for o in self.objects_done if o.action == action]
            if done:
                size = mib(sum(o.size_bytes for o in done), digits=1)
                moved.append(f"{len(done)} {name} ({size})")
        unchanged = len(self.plan.objects_by_action("skip")) if self.plan is not None else 0
        if unchanged:
            moved.append(f"{unchanged} unchanged")
        results = list(self.results.values())
        sent = [r for r in ("sent", "reused") if r in results]
        requests = ", ".join(f"{results.count(r)} {r}" for r in sent) or "none sent"
        seconds = time.monotonic() - self.started_s
        return f"S3: {', '.join(moved) or 'nothing'}; requests: {requests}; {seconds:,.1f} s"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (what ``deploy --json`` writes)."""
        plan = self.plan
        objects: dict[str, Any] = {
            name: _objects([o for o in self.objects_done if o.action == action])
            for action, name in _DONE.items()
        }
        if plan is not None:
            objects["skipped"] = _objects(plan.objects_by_action("skip"), with_keys=False)
            unrecorded = [o for o in plan.objects_by_action("keep") if o.note == UNRECORDED_NOTE]
            objects["unrecorded"] = _objects(unrecorded)
            objects["kept"] = {
                **_objects(plan.objects_by_action("keep"), with_keys=False),
                "objects": [{"key": o.key, "note": o.note} for o in plan.objects_by_action("keep")],
            }
        requests = [
            {
                "service": s.service,
                "operation": s.operation,
                "resource": s.resource,
                "action": s.action,
                "result": self.results.get(i, "planned" if self.dry_run else NOT_REACHED),
            }
            for i, s in enumerate(plan.steps if plan is not None else ())
        ]
        return {
            "ok": self.ok,
            "dry_run": self.dry_run,
            "endpoint_name": self.endpoint_name,
            "region": plan.region if plan is not None else None,
            "model_data_url": plan.model_data_url if plan is not None else None,
            "endpoint": self.endpoint,
            "waited": self.waited,
            "elapsed_s": None if self.elapsed_s is None else round(self.elapsed_s, 3),
            "objects": objects,
            "requests": requests,
            "left": self.left,
            "error": _error(self.error),
            "plan": plan.to_dict() if plan is not None else None,
        }


def _objects(steps: list[ObjectStep], *, with_keys: bool = True) -> dict[str, Any]:
    found: dict[str, Any] = {"count": len(steps), "bytes": sum(s.size_bytes for s in steps)}
    if with_keys:
        found["keys"] = sorted(s.key for s in steps)
    return found


def _error(error: BaseException | None) -> dict[str, Any] | None:
    if error is None:
        return None
    return {
        "type": type(error).__name__,
        "message": str(error) or type(error).__name__,
        "operation": getattr(error, "operation", None),
        "code": getattr(error, "code", None),
    }


def endpoint_state(sagemaker: Any, name: str) -> dict[str, Any] | None:
    """The endpoint's status, config and failure reason now (None: there is none)."""
    from mmelocal.deploy.resources import describe

    found = describe(sagemaker, "DescribeEndpoint", EndpointName=name)
    if found is None:
        return None
    return {
        "status": found.get("EndpointStatus"),
        "config": found.get("EndpointConfigName"),
        "failure_reason": found.get("FailureReason"),
    }


__all__ = ["NOT_REACHED", "DeployOutcome", "endpoint_state"]
