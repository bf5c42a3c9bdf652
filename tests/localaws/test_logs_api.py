"""CloudWatch Logs' answers through the local AWS, as botocore's logs model describes them."""

from __future__ import annotations

import time
from typing import Any

import boto3
from localaws_helpers import unique

from mmelocal.localaws import LocalAws
from mmelocal.localaws.logs import restore_log_groups, save_log_groups


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
