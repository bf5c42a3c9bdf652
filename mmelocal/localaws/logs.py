"""Endpoint logs in the local AWS's CloudWatch Logs, as the service keeps them.

Each endpoint logs to the group ``/aws/sagemaker/Endpoints/{EndpointName}``, one stream per
variant and instance (``{VariantName}/{instance id}``), holding what that instance's Triton
wrote (:mod:`mmelocal.facts.runtime_api`). :class:`LogShipper` tails every Triton log of
every running fleet and sends the new lines with ``PutLogEvents`` through the local AWS's
own API (moto's Logs), so ``GetLogEvents``, ``FilterLogEvents`` and ``DescribeLogStreams``
answer as in the cloud. It ships on a background thread every :data:`SHIP_INTERVAL_S`, and
at once for the instance behind a ``ModelError`` (:meth:`LogShipper.model_error_body`), so
the stream the error's ``LogStreamArn`` names already holds the lines that explain it.
Events carry the time they were shipped; a group outlives its endpoint, as in the cloud.
``--data`` keeps the groups (:func:`save_log_groups`, :func:`restore_log_groups`).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mmelocal.facts.cloudwatch import (
    LOG_EVENT_MAX_MESSAGE_BYTES,
    PUT_LOG_EVENTS_EVENT_OVERHEAD_BYTES,
    PUT_LOG_EVENTS_MAX_BYTES,
    PUT_LOG_EVENTS_MAX_EVENTS,
    PUT_LOG_EVENTS_MAX_SPAN_MS,
)
from mmelocal.facts.runtime_api import LOG_STREAM, log_group_name, log_stream_arn
from mmelocal.localaws.background import BackgroundThread

if TYPE_CHECKING:  # the app imports this module: its types only when checking
    from mmelocal.localaws.app.wsgi import Forward

logger = logging.getLogger(__name__)

#: how often new Triton lines reach CloudWatch Logs (the agent in the cloud ships within
#: seconds as well)
SHIP_INTERVAL_S = 1.0

#: (service, region) -> a boto3 client of the local AWS (mmelocal's own)
ClientFor = Callable[[str, str], Any]


@dataclass(eq=False)
class _Tail:
    """One instance's log file and how far it has been shipped."""

    region: str
    group: str
    stream: str
    path: Path | None
    offset: int = 0
    pending: bytes = b""
    done: bool = False


class LogShipper:
    """Tails the Triton logs of every watched fleet into CloudWatch Logs (see the module
    docstring). ``client_for(service, region)`` gives boto3 clients of the local AWS."""

    def __init__(self, client_for: ClientFor, *, account_id: str) -> None:
        self._client_for = client_for
        self.account_id = account_id
        self._lock = threading.Lock()
        self._ship_lock = threading.Lock()
        self._tails: dict[int, list[_Tail]] = {}  # id(fleet) -> its instances' tails
        self._fleets: dict[int, Any] = {}
        self._regions: dict[int, str] = {}
        self._loop = BackgroundThread(self._run, "mmelocal-logs")

    # -- what is watched ---------------------------------------------------------------
    def watch(self, region: str, fleet: Any) -> None:
        """Ship the logs of ``fleet`` (a started :class:`~.fleet.Fleet`): its group and
        one stream per instance are created now; an instance added later (a scale-out)
        gets its stream at the next round. Nothing once :meth:`stop` was called (a fleet
        whose start ends as the local AWS stops: the server may be gone already)."""
        if self._loop.stopping.is_set():
            return
        logs = self._client_for("logs", region)
        _ensure(logs.create_log_group, logGroupName=log_group_name(fleet.plan.endpoint_name))
        with self._lock:
            self._tails[id(fleet)] = []
            self._fleets[id(fleet)] = fleet
            self._regions[id(fleet)] = region
        fleet.on_stopped.append(lambda: self.ship(fleet))  # its last lines, then forget it
        self._sync(fleet)

    def _sync(self, fleet: Any) -> None:
        """Add a tail (and its stream) for each instance of ``fleet`` not seen yet."""
        with self._lock:
            tails = self._tails.get(id(fleet))
            region = self._regions.get(id(fleet), "")
        if tails is None or fleet.stopped:
            return
        known = {t.stream for t in tails}
        group = log_group_name(fleet.plan.endpoint_name)
        for iid, path in fleet.log_streams():
            stream = LOG_STREAM.format(variant=fleet.plan.variant_name, instance_id=iid)
            if stream in known:
                continue
            _ensure(
                self._client_for("logs", region).create_log_stream,
                logGroupName=group,
                logStreamName=stream,
            )
            tail = _Tail(region=region, group=group, stream=stream, path=path)
            with self._lock:
                tails.append(tail)

    def stream_arn(self, region: str, fleet: Any, log_path: Path | None) -> str | None:
        """The ARN of the stream holding ``log_path`` (an instance's Triton log) of
        ``fleet``; None when it is not watched."""
        with self._lock:
            tails = list(self._tails.get(id(fleet), []))
        for tail in tails:
            if log_path is None or tail.path == log_path:
                return log_stream_arn(
                    region, self.account_id, fleet.plan.endpoint_name, tail.stream
                )
        return None

    # -- shipping ----------------------------------------------------------------------
    def start(self) -> None:
        """Ship on a background thread every :data:`SHIP_INTERVAL_S` until :meth:`stop`."""
        self._loop.start()

    def stop(self) -> None:
        """Stop the thread, ship what is left, and watch nothing more (idempotent): the
        local AWS calls this while it still answers, before its fleets stop, so a fleet
        stopping afterwards has nothing to ship to a server that is gone."""
        self._loop.stop()
        self.ship()
        with self._lock:
            self._tails.clear()
            self._fleets.clear()
            self._regions.clear()

    def _run(self) -> None:
        while not self._loop.stopping.wait(SHIP_INTERVAL_S):
            try:
                self.ship()
            except Exception:  # a failed round is retried by the next one
                logger.exception("could not ship endpoint logs")

    def ship(self, fleet: Any = None) -> None:
        """Send the lines written since the last call (of ``fleet`` only, when given); a
        fleet that stopped is shipped one last time and then forgotten."""
        with self._lock:
            keys = [id(fleet)] if fleet is not None else list(self._tails)
            fleets = [self._fleets[k] for k in keys if k in self._fleets]
        for watched in fleets:
            self._sync(watched)  # instances added since the last round
        with self._lock:
            chosen = {k: list(self._tails.get(k, [])) for k in keys}
            stopped = {k for k in chosen if getattr(self._fleets.get(k), "stopped", False)}
        with self._ship_lock:  # one reader per file: offsets stay consistent
            for tails in chosen.values():
                for tail in tails:
                    self._ship_tail(tail)
        if stopped:
            with self._lock:
                for key in stopped:
                    self._tails.pop(key, None)
                    self._fleets.pop(key, None)
                    self._regions.pop(key, None)

    def _ship_tail(self, tail: _Tail) -> None:
        if tail.path is None or not tail.path.is_file():
            return
        size = tail.path.stat().st_size
        if size < tail.offset:  # the file was started again
            tail.offset, tail.pending = 0, b""
        if size == tail.offset:
            return
        with open(tail.path, "rb") as handle:
            handle.seek(tail.offset)
            data = handle.read(size - tail.offset)
        tail.offset += len(data)
        data = tail.pending + data
        complete, _, tail.pending = data.rpartition(b"\n")
        if not complete:
            return
        now = int(time.time() * 1000)
        lines = [_event_message(line) for line in complete.split(b"\n") if line.strip()]
        logs = self._client_for("logs", tail.region)
        for batch in put_batches([{"timestamp": now, "message": line} for line in lines]):
            _put(logs, tail, batch)

    # -- ModelError ----------------------------------------------------------------------
    def model_error_body(self, region: str, fleet: Any, body: bytes) -> bytes:
        """A ``ModelError`` answer's body with ``LogStreamArn`` naming the stream of the
        instance that failed (its lines shipped first); the body unchanged otherwise."""
        try:
            error = json.loads(body)
        except ValueError:
            return body
        if not isinstance(error, dict) or "LogStreamArn" not in error:
            return body
        local = str(error.get("LogStreamArn") or "")
        path = Path(local[len("local:") :]) if local.startswith("local:/") else None
        arn = self.stream_arn(region, fleet, path)
        if arn is None:
            return body
        try:
            self.ship(fleet)
        except Exception:  # the error is answered even when its lines could not be shipped
            logger.exception("could not ship the logs of endpoint %s", fleet.plan.endpoint_name)
        error["LogStreamArn"] = arn
        return json.dumps(error).encode()


def _event_message(line: bytes) -> str:
    """One log line as an event's message: UTF-8 (bytes that are not: replaced), cut at
    the last whole character within :data:`~mmelocal.facts.cloudwatch.
    LOG_EVENT_MAX_MESSAGE_BYTES` bytes, the most one event can carry."""
    text = line.decode("utf-8", errors="replace")
    data = text.encode()
    if len(data) <= LOG_EVENT_MAX_MESSAGE_BYTES:
        return text
    return data[:LOG_EVENT_MAX_MESSAGE_BYTES].decode("utf-8", errors="ignore")


#: the X-Amz-Target prefix of CloudWatch Logs' JSON protocol (botocore's ``logs`` model)
LOGS_TARGET = "Logs_20140328"


def logs_overlay(
    region: str,
    operation: str,
    params: dict[str, Any],
    forward: Forward,
) -> tuple[int, Any] | None:
    """What completes moto's CloudWatch Logs answers (an overlay of
    :class:`~.app.LocalAwsApp`): ``GetLogEvents``' ``endTime`` is exclusive ("Events with a
    timestamp equal to or later than this time are not included", botocore's model) and
    moto includes it; timestamps are whole milliseconds, so the window ends 1 ms earlier.
    ``FilterLogEvents``' ``endTime`` is inclusive, as moto has it."""
    end = params.get("endTime")
    if operation == "GetLogEvents" and isinstance(end, int):
        return forward({**params, "endTime": end - 1})
    return None


def save_log_groups(logs: Any) -> list[dict[str, Any]]:
    """Every endpoint's log group with its streams and events (for ``--data``'s state)."""
    groups = []
    paginator = logs.get_paginator("describe_log_groups")
    for page in paginator.paginate(logGroupNamePrefix=log_group_name("")):
        for group in page.get("logGroups", []):
            name = group["logGroupName"]
            streams = []
            for spage in logs.get_paginator("describe_log_streams").paginate(logGroupName=name):
                for stream in spage.get("logStreams", []):
                    streams.append(
                        {"name": stream["logStreamName"], "events": _all_events(logs, name, stream)}
                    )
            groups.append({"name": name, "streams": streams})
    return groups


def _all_events(logs: Any, group: str, stream: dict[str, Any]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        params: dict[str, Any] = {
            "logGroupName": group,
            "logStreamName": stream["logStreamName"],
            "startFromHead": True,
        }
        if token is not None:
            params["nextToken"] = token
        page = logs.get_log_events(**params)
        events.extend(
            {"timestamp": e["timestamp"], "message": e["message"]} for e in page["events"]
        )
        if not page["events"] or page.get("nextForwardToken") in (None, token):
            return events
        token = page["nextForwardToken"]


def put_batches(events: Sequence[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    """``events`` (``timestamp``, ``message``; in chronological order) cut into the
    batches one ``PutLogEvents`` call accepts: at most 10,000 events and 1,048,576 bytes
    (each message's UTF-8 bytes plus 26), spanning at most 24 hours
    (:data:`~mmelocal.facts.cloudwatch.PUT_LOG_EVENTS_MAX_BYTES` and its neighbours)."""
    batch: list[dict[str, Any]] = []
    size_bytes = 0
    for event in events:
        cost = len(str(event["message"]).encode()) + PUT_LOG_EVENTS_EVENT_OVERHEAD_BYTES
        if batch and (
            len(batch) >= PUT_LOG_EVENTS_MAX_EVENTS
            or size_bytes + cost > PUT_LOG_EVENTS_MAX_BYTES
            or event["timestamp"] - batch[0]["timestamp"] > PUT_LOG_EVENTS_MAX_SPAN_MS
        ):
            yield batch
            batch, size_bytes = [], 0
        batch.append(event)
        size_bytes += cost
    if batch:
        yield batch


def restore_log_groups(logs: Any, groups: list[dict[str, Any]]) -> None:
    """Make again what :func:`save_log_groups` saved, in batches ``PutLogEvents`` accepts
    (:func:`put_batches`; events CloudWatch Logs no longer accepts, older than its 14
    days, are left out by it)."""
    for group in groups:
        _ensure(logs.create_log_group, logGroupName=group["name"])
        for stream in group["streams"]:
            tail = _Tail(region="", group=group["name"], stream=stream["name"], path=None)
            _ensure(logs.create_log_stream, logGroupName=tail.group, logStreamName=tail.stream)
            events = sorted(stream["events"], key=lambda e: e["timestamp"])
            for batch in put_batches(events):
                _put(logs, tail, batch)


def _ensure(call: Callable[..., Any], **params: Any) -> None:
    """``call(**params)``, an already existing resource being fine."""
    from botocore.exceptions import ClientError

    try:
        call(**params)
    except ClientError as exc:
        if exc.response["Error"].get("Code") != "ResourceAlreadyExistsException":
            raise


def _put(logs: Any, tail: _Tail, events: list[dict[str, Any]]) -> None:
    from botocore.exceptions import ClientError

    try:
        logs.put_log_events(logGroupName=tail.group, logStreamName=tail.stream, logEvents=events)
    except ClientError as exc:
        if exc.response["Error"].get("Code") != "ResourceNotFoundException":
            raise
        # the group or stream was deleted by the user: made again, as the agent does
        _ensure(logs.create_log_group, logGroupName=tail.group)
        _ensure(logs.create_log_stream, logGroupName=tail.group, logStreamName=tail.stream)
        logs.put_log_events(logGroupName=tail.group, logStreamName=tail.stream, logEvents=events)


__all__ = [
    "LOGS_TARGET",
    "SHIP_INTERVAL_S",
    "LogShipper",
    "logs_overlay",
    "put_batches",
    "restore_log_groups",
    "save_log_groups",
]
