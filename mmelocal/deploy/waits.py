"""Waiting on an endpoint, for deploy and undeploy alike: DescribeEndpoint polled with a
pause that grows (:func:`polls`), until InService on the config a deploy sent
(:func:`wait_in_service`) or until the endpoint is no longer changing (:func:`settled`:
SageMaker deletes no endpoint in progress)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from mmelocal.deploy import resources as rs
from mmelocal.errors import DeployError
from mmelocal.facts.runtime_api import (
    IN_PROGRESS_STATUSES,
    ROLLING_DEPLOYMENTS_URL,
    UPDATE_ROLLBACK_FAILED,
)


def wait_in_service(
    sagemaker: Any,
    name: str,
    *,
    poll_s: float,
    timeout_s: float,
    on_status: Callable[[str], None] | None = None,
    config_name: str | None = None,
) -> str:
    """Poll DescribeEndpoint until InService; Failed raises with SageMaker's FailureReason,
    and so does InService on another config than ``config_name`` (an update that failed
    is rolled back: the endpoint serves its old config again)."""
    deadline = time.monotonic() + timeout_s
    answers = polls(sagemaker, name, poll_s=poll_s, on_status=on_status)
    while True:
        found = next(answers)
        if found is None:
            raise DeployError(f"endpoint {name} was deleted while waiting for it to be InService")
        status = str(found.get("EndpointStatus", ""))
        serving = found.get("EndpointConfigName")
        moved = config_name is None or serving == config_name
        if status == "InService" and not moved and found.get("FailureReason"):
            raise DeployError(
                f"the update of endpoint {name} to {config_name} rolled back: "
                f"{found['FailureReason']}; it still serves {serving} (see its CloudWatch "
                "logs, fix, and deploy again)"
            )
        if status == "InService" and moved:
            return status
        if status == UPDATE_ROLLBACK_FAILED:
            raise rollback_failed(name, found)
        if status == "Failed":
            raise DeployError(
                f"endpoint {name} failed: {found.get('FailureReason', 'no reason given')} "
                f"(see its CloudWatch logs; 'mmelocal undeploy {name}' cleans up)"
            )
        if time.monotonic() > deadline:
            raise DeployError(
                f"endpoint {name} still {status} after {timeout_s:.0f} s: it goes on in the "
                "background; run deploy again to wait, or undeploy to clean up"
            )


def rollback_failed(name: str, found: dict[str, Any]) -> DeployError:
    """The error for an endpoint in ``UpdateRollbackFailed``: it stays so (serving a mix of
    two configs) until its owner restores it, so nothing waits for it."""
    return DeployError(
        f"endpoint {name} is {UPDATE_ROLLBACK_FAILED}: both a rolling deployment and its "
        f"rollback failed ({found.get('FailureReason', 'no reason given')}), it serves a mix "
        "of its old and new endpoint configs and stays so until you act: restore it as "
        f"{ROLLING_DEPLOYMENTS_URL} says, then deploy again"
    )


def polls(
    sagemaker: Any, name: str, *, poll_s: float, on_status: Callable[[str], None] | None
) -> Iterator[dict[str, Any] | None]:
    """DescribeEndpoint's answer for ``name`` (None once it is gone), again and again: the
    pause between two starts at 1 s and doubles up to ``poll_s`` (a local endpoint changes
    in seconds, a real one in minutes). ``on_status`` hears each status."""
    pause = threading.Event()
    interval_s = min(1.0, poll_s)
    while True:
        found = rs.describe(sagemaker, "DescribeEndpoint", EndpointName=name)
        if on_status is not None:
            on_status(str(found.get("EndpointStatus", "")) if found is not None else "deleted")
        yield found
        pause.wait(interval_s)
        interval_s = min(poll_s, interval_s * 2)


def settled(
    sagemaker: Any,
    name: str,
    *,
    poll_s: float,
    timeout_s: float,
    on_status: Callable[[str], None] | None,
) -> dict[str, Any] | None:
    """DescribeEndpoint's answer once ``name`` is no longer changing (None: it is gone)."""
    deadline = time.monotonic() + timeout_s
    answers = polls(sagemaker, name, poll_s=poll_s, on_status=on_status)
    while True:
        found = next(answers)
        status = None if found is None else found.get("EndpointStatus")
        if status not in IN_PROGRESS_STATUSES:
            return found
        if time.monotonic() > deadline:
            raise DeployError(
                f"endpoint {name} still {status} after {timeout_s:.0f} s, and SageMaker does "
                "not delete an endpoint in progress: run undeploy again once it is InService "
                "or Failed"
            )


__all__ = ["polls", "rollback_failed", "settled", "wait_in_service"]
