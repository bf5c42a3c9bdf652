"""ListModels and ListEndpointConfigs as the service answers them (botocore's sagemaker
model, ``ListModelsInput`` and ``ListEndpointConfigsInput``): ``NameContains`` and the
creation-time filters applied, newest first by default ("The default is CreationTime",
"The default is Descending"), ``SortBy=Name``, and each page cut before the filters
(``mmelocal.localaws.listing``). Control plane only: no endpoint, no Triton."""

from __future__ import annotations

import contextlib
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from localaws_helpers import ROLE, TRITON_IMAGE, unique
from shared_helpers import listed

from mmelocal.facts.sagemaker import MODELS_PAGE_SIZE
from mmelocal.localaws import LocalAws


def _names(answer: dict[str, Any], key: str, field: str) -> list[str]:
    return [str(item[field]) for item in answer[key]]


_LISTINGS = pytest.mark.parametrize(
    ("method", "key", "field"),
    [
        ("list_models", "Models", "ModelName"),
        ("list_endpoint_configs", "EndpointConfigs", "EndpointConfigName"),
    ],
)


def _create(sm: Any, method: str, name: str) -> None:
    """A model ``name``, and for ``list_endpoint_configs`` an endpoint config ``name``."""
    sm.create_model(ModelName=name, ExecutionRoleArn=ROLE, PrimaryContainer={"Image": TRITON_IMAGE})
    if method == "list_endpoint_configs":
        variant = {"VariantName": "AllTraffic", "ModelName": name,
                   "InstanceType": "ml.g5.xlarge", "InitialInstanceCount": 1}  # fmt: skip
        sm.create_endpoint_config(EndpointConfigName=name, ProductionVariants=[variant])


@_LISTINGS
def test_filters_order_and_pages(
    local_aws_env: LocalAws, method: str, key: str, field: str
) -> None:
    """moto answered ListModels with every model whatever the request said (NameContains
    ignored, one page) and ListEndpointConfigs oldest first."""
    sm = boto3.client("sagemaker")
    prefix = unique("listing")
    made = [f"{prefix}-{letter}" for letter in "cab"]
    for name in [unique("other"), *made]:
        _create(sm, method, name)
    call = getattr(sm, method)

    newest_first = call(NameContains=prefix)
    assert _names(newest_first, key, field) == made[::-1]
    assert set(newest_first[key][0]) == {field, field.removesuffix("Name") + "Arn", "CreationTime"}
    by_name = listed(sm, method, NameContains=prefix, SortBy="Name", SortOrder="Ascending")
    assert [item[field] for item in by_name] == sorted(made)

    first = call(NameContains=prefix, MaxResults=2)
    assert _names(first, key, field) == made[:0:-1] and "NextToken" in first
    rest = call(NameContains=prefix, MaxResults=2, NextToken=first["NextToken"])
    assert _names(rest, key, field) == made[:1]

    second = newest_first[key][1]["CreationTime"]  # "greater than or equal to"; "before"
    assert _names(call(NameContains=prefix, CreationTimeAfter=second), key, field) == made[:0:-1]
    assert _names(call(NameContains=prefix, CreationTimeBefore=second), key, field) == made[:1]

    with pytest.raises(ClientError) as info:
        call(SortBy="Size")
    assert info.value.response["Error"]["Code"] == "ValidationException"
    assert "enum value set" in info.value.response["Error"]["Message"]


def test_a_page_without_max_results_holds_the_default(local_aws_env: LocalAws) -> None:
    """No MaxResults: MODELS_PAGE_SIZE models and a NextToken while more remain (moto
    answered every model on one page)."""
    sm = boto3.client("sagemaker")
    prefix = unique("paged")
    for index in range(MODELS_PAGE_SIZE + 1):
        sm.create_model(
            ModelName=f"{prefix}-{index}",
            ExecutionRoleArn=ROLE,
            PrimaryContainer={"Image": TRITON_IMAGE},
        )
    first = sm.list_models(NameContains=prefix)
    assert len(first["Models"]) == MODELS_PAGE_SIZE and "NextToken" in first
    pages = sm.get_paginator("list_models").paginate(NameContains=prefix)
    assert sum(len(page["Models"]) for page in pages) == MODELS_PAGE_SIZE + 1


@_LISTINGS
def test_a_page_is_cut_before_name_contains(
    local_aws_env: LocalAws, method: str, key: str, field: str
) -> None:
    """SageMaker cuts a page to MaxResults (or its default) before NameContains: a match
    older than a page of others is on no first page, which comes back empty with a
    NextToken that leads to it (boto3 #2521, #4020: "if I don't put MaxResults at all, I
    get empty list of models"; the local AWS filtered first and answered it at once)."""
    sm = boto3.client("sagemaker")
    match = unique("cut")
    for name in [match, *(unique("newer") for _ in range(MODELS_PAGE_SIZE))]:
        _create(sm, method, name)
    call = getattr(sm, method)

    first = call(NameContains=match)
    assert first[key] == [] and "NextToken" in first
    cut = call(NameContains=match, MaxResults=MODELS_PAGE_SIZE)
    assert cut[key] == [] and "NextToken" in cut
    wider = call(NameContains=match, MaxResults=MODELS_PAGE_SIZE + 1)
    assert _names(wider, key, field) == [match]
    following = call(NameContains=match, NextToken=first["NextToken"])
    assert _names(following, key, field) == [match]
    assert [item[field] for item in listed(sm, method, NameContains=match)] == [match]


@_LISTINGS
def test_a_cleanup_loop_deletes_every_item(
    local_aws_env: LocalAws, method: str, key: str, field: str
) -> None:
    """The cleanup users run (boto3's paginator, each item deleted as its page is read)
    over 25 models or endpoint configs deletes all 25: the service's token is a cursor, and
    a deletion does not make the listing skip what comes after it. A token that was a
    position (the next page 10 items further into a list that had lost 10) left 10."""
    sm = boto3.client("sagemaker")
    prefix = unique("cleanup")
    made = [f"{prefix}-{n:02d}" for n in range(25)]
    for name in made:
        _create(sm, method, name)
    delete = sm.delete_model if method == "list_models" else sm.delete_endpoint_config
    deleted: list[str] = []
    try:
        for page in sm.get_paginator(method).paginate(NameContains=prefix):
            for item in page[key]:
                delete(**{field: item[field]})
                deleted.append(item[field])
        assert sorted(deleted) == made
        assert listed(sm, method, NameContains=prefix) == []
    finally:
        for name in made:
            with contextlib.suppress(ClientError):
                sm.delete_endpoint_config(EndpointConfigName=name)
            with contextlib.suppress(ClientError):
                sm.delete_model(ModelName=name)
