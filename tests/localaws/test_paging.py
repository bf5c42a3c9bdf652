"""The local AWS's pages of ``Describe*`` answers (DescribeAlarmHistory,
DescribeScalingActivities, DescribeScalableTargets): a token where the last page ended, none
after the last; boto3's own paginator reads the alarm history and the scalable targets
through them (the scaling activities' pages are read in ``test_autoscaling.py``, where the
fast clock scales an endpoint; the scaling policies' in ``test_scaling_decisions.py``)."""

from __future__ import annotations

import contextlib
from typing import Any

import boto3
import pytest
from localaws_helpers import unique

from mmelocal.localaws import LocalAws
from mmelocal.localaws.paging import one_page

#: the answer's key and the invalid-token error of a made-up service
THINGS: dict[str, Any] = {"key": "Things", "invalid_token_code": "InvalidNextToken"}


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


def test_more_than_a_hundred_scalable_targets_page_fifty_at_a_time(
    local_aws_env: LocalAws,
) -> None:
    """DescribeScalableTargets answers 50 targets a page when MaxResults is left out
    (botocore's application-autoscaling model: "This value can be between 1 and 50. The
    default value is 50"), each page's NextToken leading to the next. 120 targets are read
    by a user's paginator as 50 + 50 + 20, each once. moto's own third page repeats its
    second's token (moto 5.2.5 ``applicationautoscaling/responses.py``), so botocore's
    paginator stopped with "The same next token was received twice" and the local AWS's
    own reads never saw a target past the hundredth. The targets are written straight to
    moto's records (mmelocal's own header skips the check that their endpoints exist, so
    no Triton runs), in a region no other test uses; the reads are a user's."""
    from botocore.exceptions import ClientError

    from mmelocal.localaws.app import INTERNAL_HEADER

    region = "ap-southeast-4"
    records = boto3.client("application-autoscaling", region_name=region)

    def mark(request: Any, **_: Any) -> None:
        request.headers[INTERNAL_HEADER] = "1"

    records.meta.events.register("before-sign.application-autoscaling", mark)
    ids = [f"endpoint/{unique('paged')}-{n}/variant/AllTraffic" for n in range(120)]
    common = {"ServiceNamespace": "sagemaker",
              "ScalableDimension": "sagemaker:variant:DesiredInstanceCount"}  # fmt: skip
    user = boto3.client("application-autoscaling", region_name=region)
    try:
        for resource in ids:
            records.register_scalable_target(
                **common, ResourceId=resource, MinCapacity=1, MaxCapacity=2
            )
        paginator = user.get_paginator("describe_scalable_targets")
        pages = list(paginator.paginate(ServiceNamespace="sagemaker"))
        with pytest.raises(ClientError) as info:
            user.describe_scalable_targets(ServiceNamespace="sagemaker", NextToken="bogus")
    finally:
        for resource in ids:
            with contextlib.suppress(ClientError):
                records.deregister_scalable_target(**common, ResourceId=resource)
    assert [len(page["ScalableTargets"]) for page in pages] == [50, 50, 20]
    seen = [t["ResourceId"] for page in pages for t in page["ScalableTargets"]]
    assert sorted(seen) == sorted(ids)
    assert info.value.response["Error"]["Code"] == "InvalidNextTokenException"


#: the page-size parameter of each Describe/List call the local AWS serves, and the most it
#: takes: the ``max`` of the member in botocore's models (sagemaker, cloudwatch), the range
#: the Application Auto Scaling API reference gives in prose ("This value can be between 1
#: and 50", "between 1 and 10"; its model has no ``max``), and the service's error code
_PAGE_SIZES: tuple[tuple[str, str, str, int, str], ...] = (
    ("sagemaker", "list_endpoints", "MaxResults", 100, "ValidationException"),
    ("sagemaker", "list_models", "MaxResults", 100, "ValidationException"),
    ("sagemaker", "list_endpoint_configs", "MaxResults", 100, "ValidationException"),
    ("cloudwatch", "describe_alarms", "MaxRecords", 100, "ValidationError"),
    ("cloudwatch", "describe_alarm_history", "MaxRecords", 100, "ValidationError"),
    ("application-autoscaling", "describe_scaling_activities", "MaxResults", 50,
     "ValidationException"),
    ("application-autoscaling", "describe_scalable_targets", "MaxResults", 50,
     "ValidationException"),
    ("application-autoscaling", "describe_scaling_policies", "MaxResults", 10,
     "ValidationException"),
)  # fmt: skip


@pytest.mark.parametrize(
    ("service", "method", "size", "most", "code"),
    _PAGE_SIZES,
    ids=[case[1] for case in _PAGE_SIZES],
)
def test_a_page_size_over_the_services_maximum_is_refused(
    local_aws_env: LocalAws, service: str, method: str, size: str, most: int, code: str
) -> None:
    """botocore checks a number's ``min`` on the client but not its ``max`` (``validate.py``
    ``range_check``), so a page size over the maximum reaches the service, which answers
    400 with its validation error naming the bound; the maximum itself is served."""
    from botocore.exceptions import ClientError

    client = boto3.client(service)  # type: ignore[call-overload]
    call = getattr(client, method)
    extra = {"ServiceNamespace": "sagemaker"} if service == "application-autoscaling" else {}
    call(**extra, **{size: most})
    with pytest.raises(ClientError) as info:
        call(**extra, **{size: most + 1})
    error = info.value.response
    assert (error["Error"]["Code"], error["ResponseMetadata"]["HTTPStatusCode"]) == (code, 400)
    assert f"{most}" in error["Error"]["Message"]
    assert str(most + 1) in error["Error"]["Message"]


def test_application_auto_scaling_refuses_a_page_size_of_zero(local_aws_env: LocalAws) -> None:
    """Its model gives MaxResults no ``min``, so botocore sends 0; the API reference's range
    starts at 1, and the service answers ValidationException (the local AWS served 0 as
    the default page)."""
    from botocore.exceptions import ClientError

    aas = boto3.client("application-autoscaling")
    with pytest.raises(ClientError) as info:
        aas.describe_scalable_targets(ServiceNamespace="sagemaker", MaxResults=0)
    assert info.value.response["Error"]["Code"] == "ValidationException"
