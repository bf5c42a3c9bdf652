"""CloudWatch Logs' answers through the local AWS, as botocore's logs model describes them,
and the endpoint log lines the local AWS puts there."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import boto3
from localaws_helpers import unique

from mmelocal.localaws import LocalAws
from mmelocal.localaws.logs import LogShipper, restore_log_groups, save_log_groups


def test_get_log_events_leaves_out_events_at_end_time(local_aws_env: LocalAws) -> None:
    """GetLogEvents' ``endTime`` is exclusive ("Events with a timestamp equal to or later
    than this time are not included", botocore's logs model); FilterLogEvents' is not."""
    logs = boto3.client("logs")
    group, stream = f"/aws/sagemaker/Endpoints/{unique('ends')}", "AllTraffic/i-0"
    logs.create_log_group(logGroupName=group)
    logs.create_log_stream(logGroupName=group, logStreamName=stream)
    start = int(time.time() * 1000) - 60_000
    events = [{"timestamp": start + i * 1000, "message": f"line {i}"} for i in range(3)]
    logs.put_log_events(logGroupName=group, logStreamName=stream, logEvents=events)
    window = {"startTime": start, "endTime": start + 2000}
    got = logs.get_log_events(
        logGroupName=group, logStreamName=stream, startFromHead=True, **window
    )
    assert [e["message"] for e in got["events"]] == ["line 0", "line 1"]
    filtered = logs.filter_log_events(logGroupName=group, **window)
    assert [e["message"] for e in filtered["events"]] == ["line 0", "line 1", "line 2"]


def test_restored_log_events_go_back_in_batches_put_log_events_accepts(
    local_aws_env: LocalAws,
) -> None:
    """PutLogEvents (botocore's logs model): "The maximum batch size is 1,048,576 bytes.
    This size is calculated as the sum of all event messages in UTF-8, plus 26 bytes for
    each log event", "The maximum number of log events in a batch is 10,000", and "the time
    span in a single batch cannot exceed 24 hours". A saved stream of 3,000 events of 1 KiB
    spread over three days is restored by calls that each keep all three, and every event
    is back in order."""
    logs = boto3.client("logs")
    calls: list[list[dict[str, Any]]] = []

    def record(params: dict[str, Any], **_: Any) -> None:
        calls.append(list(params["logEvents"]))

    logs.meta.events.register("provide-client-params.logs.PutLogEvents", record)
    group = f"/aws/sagemaker/Endpoints/{unique('restored')}"
    first = int(time.time() * 1000) - 3 * 86_400_000
    step = 3 * 86_400_000 // 3000
    events = [
        {"timestamp": first + i * step, "message": f"{i:06d} " + "x" * 1017} for i in range(3000)
    ]
    restore_log_groups(logs, [{"name": group, "streams": [{"name": "AllTraffic/i-0",
                                                          "events": events}]}])  # fmt: skip
    for batch in calls:
        assert len(batch) <= 10_000
        assert sum(len(e["message"].encode()) + 26 for e in batch) <= 1_048_576
        assert batch[-1]["timestamp"] - batch[0]["timestamp"] <= 24 * 3_600_000
    back = save_log_groups(logs)
    (saved,) = [g for g in back if g["name"] == group]
    assert saved["streams"][0]["events"] == events


class _OneInstance:
    """What the log shipper reads of a fleet: the endpoint and variant names and where its
    one instance's Triton log is (a file the test writes in Triton's place)."""

    def __init__(self, endpoint: str, log: Path) -> None:
        self.plan = SimpleNamespace(endpoint_name=endpoint, variant_name="AllTraffic")
        self.stopped = False
        self.on_stopped: list[Any] = []
        self._log = log

    def log_streams(self) -> list[tuple[str, Path]]:
        return [("i-0", self._log)]


def test_a_long_log_line_is_cut_at_the_events_limit_in_utf8_bytes(
    local_aws_env: LocalAws, tmp_path: Path
) -> None:
    """PutLogEvents (botocore's logs model): "Each log event can be no larger than 1 MB",
    and "The maximum batch size is 1,048,576 bytes. This size is calculated as the sum of
    all event messages in UTF-8, plus 26 bytes for each log event": one event carries at
    most 1,048,550 bytes of UTF-8. A 400,000-byte line arrives whole (it was cut at 262,118
    characters: 256 KiB less 26, counted in characters); a line of 400,000 three-byte
    characters (1,200,000 bytes) is cut to the last whole character within 1,048,550
    bytes (349,516 of them), so the event stays within the limit (before, cut at 262,118
    characters, it was 786,354 bytes long)."""
    logs = boto3.client("logs")
    endpoint = unique("long-lines")
    log = tmp_path / "triton.log"
    ascii_line, wide_line = "a" * 400_000, "\u20ac" * 400_000
    log.write_text(f"{ascii_line}\n{wide_line}\n", encoding="utf-8")

    def client_for(service: str, region: str) -> Any:
        return boto3.client(service, region_name=region)

    shipper = LogShipper(client_for, account_id="123456789012")
    fleet = _OneInstance(endpoint, log)
    shipper.watch("us-east-1", fleet)
    shipper.ship(fleet)
    group = f"/aws/sagemaker/Endpoints/{endpoint}"
    got = logs.get_log_events(
        logGroupName=group, logStreamName="AllTraffic/i-0", startFromHead=True
    )["events"]
    logs.delete_log_group(logGroupName=group)
    assert [len(e["message"]) for e in got] == [400_000, 349_516]
    assert got[0]["message"] == ascii_line
    assert got[1]["message"] == "\u20ac" * 349_516
    assert len(got[1]["message"].encode()) + 26 <= 1_048_576
