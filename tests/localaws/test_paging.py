"""The local AWS's pages of ``Describe*`` answers (DescribeAlarmHistory,
DescribeScalingActivities): a token where the last page ended, none after the last; boto3's
own paginator reads the alarm history through them (the scaling activities' pages are read
in ``test_autoscaling.py``, where the fast clock scales an endpoint)."""

from __future__ import annotations

from typing import Any

import boto3
from localaws_helpers import unique

from mmelocal.localaws import LocalAws
from mmelocal.localaws.paging import one_page

#: the answer's key and the invalid-token error of a made-up service
THINGS = {"key": "Things", "invalid_token_code": "InvalidNextToken"}


class _Item:
    def __init__(self, n: int) -> None:
        self.n = n

    def described(self) -> dict[str, Any]:
        return {"N": self.n}


def test_pages_follow_each_other_to_the_last() -> None:
    items = [_Item(n) for n in range(5)]
    seen: list[int] = []
    params: dict[str, Any] = {"MaxResults": 2}
    pages = 0
    while True:
        page = one_page(items, params, size_param="MaxResults", default_size=50, **THINGS)
        pages += 1
        seen += [thing["N"] for thing in page["Things"]]
        if "NextToken" not in page:
            break
        params = {"MaxResults": 2, "NextToken": page["NextToken"]}
    assert seen == [0, 1, 2, 3, 4]
    assert pages == 3


def test_the_default_size_holds_when_none_is_asked() -> None:
    items = [_Item(n) for n in range(3)]
    page = one_page(items, {}, size_param="MaxRecords", default_size=2, **THINGS)
    assert [thing["N"] for thing in page["Things"]] == [0, 1]
    assert page["NextToken"] == "2"
    whole = one_page(items, {}, size_param="MaxRecords", default_size=3, **THINGS)
    assert "NextToken" not in whole


def test_alarm_history_pages_through_boto3s_paginator(local_aws_env: LocalAws) -> None:
    """Seven items of one alarm's history (created, then updated six times) in pages of
    three: 3 + 3 + 1, each item once, newest first, as one page of them all."""
    cloudwatch = boto3.client("cloudwatch")
    alarm = unique("paged")
    try:
        for threshold in range(7):  # the first put creates the alarm, each next one updates it
            cloudwatch.put_metric_alarm(
                AlarmName=alarm, Namespace="mmelocal/tests", MetricName="Paged",
                Statistic="Sum", Period=60, EvaluationPeriods=1, Threshold=float(threshold),
                ComparisonOperator="GreaterThanThreshold",
            )  # fmt: skip
        paginator = cloudwatch.get_paginator("describe_alarm_history")
        pages = list(paginator.paginate(AlarmName=alarm, PaginationConfig={"PageSize": 3}))
        whole = cloudwatch.describe_alarm_history(AlarmName=alarm)
    finally:
        cloudwatch.delete_alarms(AlarmNames=[alarm])
    assert [len(page["AlarmHistoryItems"]) for page in pages] == [3, 3, 1]
    assert "NextToken" not in pages[-1] and "NextToken" not in whole
    items = [item for page in pages for item in page["AlarmHistoryItems"]]
    assert items == whole["AlarmHistoryItems"]
    assert [item["HistorySummary"] for item in items] == [f'Alarm "{alarm}" updated'] * 6 + [
        f'Alarm "{alarm}" created'
    ]
    stamps = [item["Timestamp"] for item in items]
    assert stamps == sorted(set(stamps), reverse=True)  # newest first, none twice


def test_a_token_the_service_never_gave_is_refused_as_the_service_refuses_it(
    local_aws_env: LocalAws,
) -> None:
    """botocore's models: DescribeAlarmHistory answers InvalidNextToken (HTTP 400),
    DescribeScalingActivities InvalidNextTokenException; never an HTML 500."""
    from botocore.exceptions import ClientError

    calls: tuple[tuple[Any, dict[str, Any], str], ...] = (
        (boto3.client("cloudwatch").describe_alarm_history, {}, "InvalidNextToken"),
        (
            boto3.client("application-autoscaling").describe_scaling_activities,
            {"ServiceNamespace": "sagemaker"},
            "InvalidNextTokenException",
        ),
    )
    for call, params, code in calls:
        for token in ("bogus", "-1"):
            try:
                call(NextToken=token, **params)
            except ClientError as exc:
                error = exc.response
                assert (error["Error"]["Code"], error["ResponseMetadata"]["HTTPStatusCode"]) == (
                    code,
                    400,
                ), error
            else:
                raise AssertionError(f"{call.__name__} took NextToken={token!r}")
