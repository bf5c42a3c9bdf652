"""CloudWatch Logs' answers through the local AWS, as botocore's logs model describes them."""

from __future__ import annotations

import time

import boto3
from localaws_helpers import unique

from mmelocal.localaws import LocalAws


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
