"""ListEndpoints as the service answers it (botocore's sagemaker model, ``ListEndpointsInput``):
filtered on the status and times DescribeEndpoint shows, sorted (CreationTime, Descending
by default), and each page (10 endpoints by default) cut before the filters
(``mmelocal.localaws.listing``). The endpoints here
cost no Triton: a non-Triton image fails at once, and the stand-in tritonserver holds the
others Creating until the test's gate opens."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3
import pytest
from localaws_helpers import model_and_config, unique, wait_status
from shared_helpers import gated_tritonserver, listed, local_aws_running

from mmelocal.testing.tiny_model import write_tarball

#: an image the local AWS does not run: the endpoint fails as soon as it is planned
XGBOOST = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-xgboost:1.7-1"


def _configs(tmp_path: Path) -> tuple[str, str]:
    """(a config whose endpoints fail at once, one whose endpoints wait for the gate)."""
    s3 = boto3.client("s3")
    bucket = unique("listed")
    s3.create_bucket(Bucket=bucket)
    s3.upload_file(str(write_tarball(tmp_path / "m.tar.gz", scale=2.0)), bucket, "m/model.tar.gz")
    url = f"s3://{bucket}/m/"
    return model_and_config(url, image=XGBOOST), model_and_config(url)


def _pages(sm: Any, page_size: int, **query: Any) -> list[list[dict[str, Any]]]:
    paginator = sm.get_paginator("list_endpoints")
    pages = paginator.paginate(**query, PaginationConfig={"PageSize": page_size})
    return [page["Endpoints"] for page in pages]


def test_status_filter_sort_and_pages_follow_the_endpoints_status(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two endpoints Failed and two Creating, created alternately: a StatusEquals page
    holds the matches among the endpoints it cut, so pages of one come back empty between
    the matches, with a NextToken until the last endpoint (the local AWS filtered before
    it cut: pages held matches only and ended with the last match); a NameContains that
    matches no endpoint of the cut answers an empty page and a NextToken (boto3 #2973);
    SortBy=Status sorts on that status; the default order is the newest first and the
    default page 10 endpoints ("The default is Descending", "This value defaults to 10":
    ListEndpointsInput's SortOrder and MaxResults)."""
    gate = tmp_path / "gate"
    with local_aws_running(gated_tritonserver(gate), tmp_path, monkeypatch):
        sm = boto3.client("sagemaker")
        failing, held = _configs(tmp_path)
        prefix = unique("listed")
        order = [(f"{prefix}-f1", failing), (f"{prefix}-c1", held),
                 (f"{prefix}-f2", failing), (f"{prefix}-c2", held)]  # fmt: skip
        try:
            for name, config in order:
                sm.create_endpoint(EndpointName=name, EndpointConfigName=config)
            for name in (f"{prefix}-f1", f"{prefix}-f2"):
                assert wait_status(sm, name, leaving="Creating")["EndpointStatus"] == "Failed"

            creating = _pages(sm, 1, NameContains=prefix, StatusEquals="Creating")
            assert [[s["EndpointName"] for s in page] for page in creating] == [
                [f"{prefix}-c2"],
                [],
                [f"{prefix}-c1"],
                [],
            ]
            none = sm.list_endpoints(NameContains=prefix, StatusEquals="InService", MaxResults=1)
            assert none["Endpoints"] == [] and "NextToken" in none
            assert listed(sm, "list_endpoints", NameContains=prefix, StatusEquals="InService") == []

            by_status = sm.list_endpoints(
                NameContains=prefix, SortBy="Status", SortOrder="Ascending"
            )["Endpoints"]
            statuses = [s["EndpointStatus"] for s in by_status]
            assert statuses == ["Creating", "Creating", "Failed", "Failed"]
            newest_first = sm.list_endpoints(NameContains=prefix)["Endpoints"]
            assert [s["EndpointName"] for s in newest_first] == [n for n, _ in reversed(order)]

            more = [f"{prefix}-m{i}" for i in range(7)]
            for name in more:
                sm.create_endpoint(EndpointName=name, EndpointConfigName=failing)
            first = sm.list_endpoints(NameContains=prefix)
            assert len(first["Endpoints"]) == 10 and "NextToken" in first
            rest = sm.list_endpoints(NameContains=prefix, NextToken=first["NextToken"])
            assert [s["EndpointName"] for s in rest["Endpoints"]] == [f"{prefix}-f1"]
            assert "NextToken" not in rest

            sm.create_endpoint(EndpointName=unique("other"), EndpointConfigName=failing)
            cut = sm.list_endpoints(NameContains=prefix, MaxResults=1)
            assert cut["Endpoints"] == [] and "NextToken" in cut
            every = listed(sm, "list_endpoints", NameContains=prefix)
            assert len(every) == len(order) + len(more)
        finally:
            gate.touch()


def test_time_filters_use_the_times_describe_endpoint_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An endpoint that failed after it was created was last modified when it failed
    (DescribeEndpoint's LastModifiedTime): LastModifiedTimeAfter a moment between the two
    finds it and LastModifiedTimeBefore that moment does not (moto's record, which the
    filters read, keeps the creation time as the last modification); CreationTimeAfter
    is "greater than or equal to" (ListEndpointsInput), CreationTimeBefore strictly
    before."""
    gate = tmp_path / "gate"
    with local_aws_running(gated_tritonserver(gate), tmp_path, monkeypatch):
        sm = boto3.client("sagemaker")
        failing, _ = _configs(tmp_path)
        prefix = unique("timed")
        name = f"{prefix}-f"
        sm.create_endpoint(EndpointName=name, EndpointConfigName=failing)
        described = wait_status(sm, name, leaving="Creating")
        created, modified = described["CreationTime"], described["LastModifiedTime"]
        assert created < modified
        between = created + (modified - created) / 2

        def names(**query: Any) -> list[str]:
            found = listed(sm, "list_endpoints", NameContains=prefix, **query)
            return [s["EndpointName"] for s in found]

        assert names(LastModifiedTimeAfter=between) == [name]
        assert names(LastModifiedTimeBefore=between) == []
        assert names(LastModifiedTimeBefore=modified + (modified - created)) == [name]
        assert names(CreationTimeAfter=created) == [name]
        assert names(CreationTimeBefore=created) == []
        assert names(CreationTimeBefore=between) == [name]
        gate.touch()
