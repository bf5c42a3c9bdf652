"""The local AWS's pages of ``Describe*`` answers (DescribeAlarmHistory,
DescribeScalingActivities, DescribeScalableTargets, DescribeScalingPolicies, and ListModels
at unit level): a token that is a cursor after the last item a page cut, so that items
deleted or added between pages neither hide nor repeat others, none after the last page;
boto3's own paginator reads the alarm history and the scalable targets
through them (the scaling activities' pages are read in ``test_autoscaling.py``, where the
fast clock scales an endpoint; the scaling policies' in ``test_scaling_decisions.py``)."""

from __future__ import annotations

import contextlib
from typing import Any

import boto3
import pytest
from localaws_helpers import unique

from mmelocal.localaws import LocalAws
from mmelocal.localaws.paging import Order, one_page


class _Item:
    def __init__(self, n: int) -> None:
        self.n = n

    def described(self) -> dict[str, Any]:
        return {"N": self.n}


#: the answer's key, order and invalid-token error of a made-up service
THINGS: dict[str, Any] = {
    "key": "Things",
    "order": Order[_Item](name="N", key=lambda item: (item.n,)),
    "invalid_token_code": "InvalidNextToken",
}


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
    rest = one_page(
        items, {"NextToken": page["NextToken"]}, size_param="MaxRecords", default_size=2, **THINGS
    )
    assert [thing["N"] for thing in rest["Things"]] == [2] and "NextToken" not in rest
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


def _policy(n: int) -> dict[str, Any]:
    """The n-th scaling policy as moto records it (created n seconds after the first)."""
    name = f"policy-{n:02d}"
    return {
        "PolicyName": name,
        "PolicyARN": f"arn:aws:autoscaling:us-east-1:123456789012:scalingPolicy:id-{n}:"
        f"resource/sagemaker/endpoint/e/variant/AllTraffic:policyName/{name}",
        "ResourceId": "endpoint/e/variant/AllTraffic",
        "ServiceNamespace": "sagemaker",
        "CreationTime": 1_800_000_000.0 + n,
    }


def test_a_cleanup_loop_over_scaling_policies_deletes_them_all() -> None:
    """A user's cleanup (each page's policies deleted before the next page is asked for)
    over 25 policies, pages of 10 (the service's default): every policy is listed once
    and deleted. A token that was a position skipped the ten that moved onto the page
    already read (15 deleted of 25)."""
    from mmelocal.localaws.scaling.records import paged_records

    held = [_policy(n) for n in range(25)]
    query = {"ServiceNamespace": "sagemaker"}
    deleted: list[str] = []
    token: str | None = None
    while True:
        params = {**query, **({"NextToken": token} if token else {})}
        page = paged_records(
            "us-east-1",
            "DescribeScalingPolicies",
            params,
            lambda _: (200, {"ScalingPolicies": [dict(p) for p in held]}),
        )
        assert page is not None and page[0] == 200
        for policy in page[1]["ScalingPolicies"]:
            held.remove(next(p for p in held if p["PolicyARN"] == policy["PolicyARN"]))
            deleted.append(policy["PolicyName"])
        token = page[1].get("NextToken")
        if not token:
            break
    assert held == []
    assert sorted(deleted) == [f"policy-{n:02d}" for n in range(25)]


def test_a_cleanup_loop_over_list_models_deletes_them_all() -> None:
    """ListModels (newest first, pages of 10) over 25 summaries, each page's models
    deleted before the next page: all 25 are listed once (a position token listed 15)."""
    from mmelocal.localaws.listing import list_page

    held = [
        {"ModelName": f"m-{n:02d}", "ModelArn": f"arn:m-{n}", "CreationTime": 1_800_000_000 + n}
        for n in range(25)
    ]
    listed: list[str] = []
    params: dict[str, Any] = {}
    while True:
        page = list_page("ListModels", list(held), params)
        names = [m["ModelName"] for m in page["Models"]]
        listed += names
        held = [m for m in held if m["ModelName"] not in names]
        if "NextToken" not in page:
            break
        params = {"NextToken": page["NextToken"]}
    assert listed == [f"m-{n:02d}" for n in reversed(range(25))]
    assert held == []


def test_an_activity_started_between_pages_repeats_none() -> None:
    """DescribeScalingActivities lists newest first; an activity started after the first
    page was read goes before it, so the next page starts after the last activity read
    (a position token showed that one again)."""
    from mmelocal.localaws.scaling.activities import Activity, describe_activities

    def activity(n: int) -> Activity:
        return Activity(
            region="us-east-1", resource_id="endpoint/e/variant/AllTraffic",
            description=f"activity {n}", cause="test", start_s=1_800_000_000.0 + n,
        )  # fmt: skip

    held = [activity(n) for n in range(5)]
    query = {"ServiceNamespace": "sagemaker", "MaxResults": 2}
    first = describe_activities(held, "us-east-1", query)
    held.append(activity(5))
    second = describe_activities(held, "us-east-1", {**query, "NextToken": first["NextToken"]})
    third = describe_activities(held, "us-east-1", {**query, "NextToken": second["NextToken"]})
    read = [a["Description"] for page in (first, second, third) for a in page["ScalingActivities"]]
    assert read == [f"activity {n}" for n in (4, 3, 2, 1, 0)]
    assert "NextToken" not in third


def test_alarm_history_recorded_between_pages_repeats_none() -> None:
    """DescribeAlarmHistory, newest first in pages of 2: a change recorded after the first
    page goes before it; the later pages hold the older items, each once (a position token
    showed the first page's last item again)."""
    from mmelocal.localaws.cloudwatch import ControlLoop
    from mmelocal.localaws.cloudwatch_api import CloudWatchOverlay

    loop = ControlLoop(client_for=lambda *_: None, running=list, regions=list)
    overlay = CloudWatchOverlay(loop, internal=lambda _: None)
    for n in range(5):
        loop.record("us-east-1", "a", "StateUpdate", f"change {n}", {})

    def page(**params: Any) -> dict[str, Any]:
        answer = overlay("us-east-1", "DescribeAlarmHistory", {"MaxRecords": 2, **params}, None)  # type: ignore[arg-type]
        assert answer is not None
        return dict(answer[1])

    first = page()
    loop.record("us-east-1", "a", "StateUpdate", "change 5", {})
    second = page(NextToken=first["NextToken"])
    third = page(NextToken=second["NextToken"])
    read = [i["HistorySummary"] for p in (first, second, third) for i in p["AlarmHistoryItems"]]
    assert read == [f"change {n}" for n in (4, 3, 2, 1, 0)]
    assert "NextToken" not in third


def test_a_token_no_page_of_this_list_in_this_order_gave_is_refused() -> None:
    """A token is refused when it is no token at all, a position (the old form), another
    list's, this list's in the other direction, a key of another length, or a string where
    the order has a number; this list's own token is served."""
    import base64
    import json

    from mmelocal.errors import AwsServiceError

    items = [_Item(n) for n in range(3)]
    size: dict[str, Any] = {"size_param": "MaxResults", "default_size": 1}
    given = one_page(items, {}, **size, **THINGS)["NextToken"]

    def token(body: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(body).encode()).decode()

    mine = {"list": "Things", "order": "N ascending"}
    for bad in (
        "bogus",
        "-1",
        "1",
        token({**mine, "list": "Others", "after": [0]}),
        token({**mine, "order": "N descending", "after": [0]}),
        token({**mine, "after": [0, 1]}),
        token({**mine, "after": ["0"]}),
        token({**mine, "after": [True]}),
        token({**mine, "after": 0}),
    ):
        with pytest.raises(AwsServiceError) as info:
            one_page(items, {"NextToken": bad}, **size, **THINGS)
        assert info.value.code == "InvalidNextToken", bad
    page = one_page(items, {"NextToken": given}, **size, **THINGS)
    assert [thing["N"] for thing in page["Things"]] == [1]
    assert one_page(items, {"NextToken": token({**mine, "after": [0]})}, **size, **THINGS) == page
