"""SageMaker's ``ListModels``, ``ListEndpointConfigs`` and ``ListEndpoints`` as the service
answers them, over every summary moto holds (endpoints shown as ``DescribeEndpoint`` shows
them: the status the local AWS's fleets are in, not moto's record).

botocore's sagemaker model (``ListModelsInput``, ``ListEndpointConfigsInput``,
``ListEndpointsInput``): ``NameContains`` "returns only [those] whose name contains the
specified string"; ``StatusEquals`` (endpoints) "returns only endpoints with the specified
status"; ``CreationTimeBefore`` "created before", ``CreationTimeAfter`` "a creation time
greater than or equal to", ``LastModifiedTimeBefore`` "modified before",
``LastModifiedTimeAfter`` "modified after" the given time; ``SortBy`` ``Name`` |
``CreationTime`` (| ``Status`` for endpoints), "The default is CreationTime"; ``SortOrder``
"The default is Descending"; ``MaxResults`` 1 to 100, which for ``ListEndpoints`` "defaults
to 10" (:data:`~mmelocal.facts.sagemaker.ENDPOINTS_PAGE_SIZE`; the other two publish no
default: :data:`~mmelocal.facts.sagemaker.MODELS_PAGE_SIZE`). A summary holds the members
of the answer's summary shape only (moto's ``ListModels`` answers whole models).

The order comes first, then the page (:func:`~.paging.one_page`), then the filters: a page
holds the matches among the ``MaxResults`` items it cut, so it may come back short or empty
with a ``NextToken``, and the token goes while items remain past the cut, matching or not;
a user must follow it (or use boto3's paginator) to see every match. What is sourced:

* ``NameContains`` after the cut, for ``ListModels`` (boto3 issues #1966, #2521, #4020,
  #4158: ``MaxResults`` 1 or 2, or none, gives no model while ``MaxResults=20`` gives
  them; "the restriction seems to be the first MaxResults model results as sorted by
  descending chronological order") and ``ListEndpoints`` (boto3 #2973: ``NameContains``
  with ``MaxResults=1`` gives an empty list where ``MaxResults=3`` finds the endpoint).
  AWS's answer on those threads: "it is possible that it can return less number of items
  and sometimes even an empty list. But it should contain a NextToken value if there are
  still some items left" (boto3 #2521); the service team "is aware of the behavior and has
  a backlog item to document it" (aws/aws-sdk#701). An empty page with a ``NextToken``:
  boto3 #3347 and #2838 (``ListTrainingJobs``).
* ``StatusEquals`` after the cut: documented for ``ListTrainingJobs`` ("the MaxResults
  number of training jobs are first retrieved ignoring the StatusEquals parameter and
  then they are filtered", in creation order newest first: the operation's documentation
  in botocore's model and the API reference).

Our choice, where no source says either way: ``ListEndpointConfigs`` (the same request
shape as ``ListModels``, no report found), ``StatusEquals`` of ``ListEndpoints`` and the
``CreationTime*`` / ``LastModifiedTime*`` filters follow the same rule, so that a script
that reads one filtered page fails here as it may in the cloud; the cut follows the
requested ``SortBy`` / ``SortOrder`` (the reports use the default order), items that tie
on it in the order of their names, and a ``NextToken`` is refused (``ValidationException``)
when the next request asks for another order; the page size of ``ListModels`` and
``ListEndpointConfigs`` without ``MaxResults``; the token is a cursor, the last cut item's
place in that order (:mod:`~.paging`), so that deleting the items of each page read (a
cleanup script's loop) does not hide the items after them, and an item created after the
first page is not listed in the default order (newest first). ``NameContains`` matches
case-sensitively: no source says how the service compares. moto filters none of
``ListModels``, sorts ``ListEndpointConfigs`` ascending by default and pages neither as the
service does.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from mmelocal.facts.sagemaker import ENDPOINTS_PAGE_SIZE, MODELS_PAGE_SIZE
from mmelocal.localaws.paging import Listed, Order, one_page

#: the code of the refusal of a ``NextToken`` no page gave (SageMaker's client error: the
#: API reference's common errors; the exact answer for a bad token is not published)
INVALID_TOKEN_CODE = "ValidationException"


@dataclass(frozen=True)
class Listing:
    """What one ``List*`` operation answers: its list's key, the member naming an item, and
    its page size when ``MaxResults`` is left out."""

    key: str
    name: str
    default_size: int


#: operation -> its listing
LISTINGS: dict[str, Listing] = {
    "ListModels": Listing("Models", "ModelName", MODELS_PAGE_SIZE),
    "ListEndpointConfigs": Listing("EndpointConfigs", "EndpointConfigName", MODELS_PAGE_SIZE),
    "ListEndpoints": Listing("Endpoints", "EndpointName", ENDPOINTS_PAGE_SIZE),
}


def epoch_s(value: Any) -> float:
    """A timestamp of a JSON answer or request (epoch seconds, as botocore's JSON protocols
    write them, or ISO 8601) in epoch seconds."""
    if isinstance(value, int | float):
        return float(value)
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


#: ListEndpointsInput's time filters -> (the summary's time, how it must compare to theirs)
_TIME_FILTERS: dict[str, tuple[str, Callable[[float, float], bool]]] = {
    "CreationTimeBefore": ("CreationTime", operator.lt),
    "CreationTimeAfter": ("CreationTime", operator.ge),
    "LastModifiedTimeBefore": ("LastModifiedTime", operator.lt),
    "LastModifiedTimeAfter": ("LastModifiedTime", operator.gt),
}


@functools.lru_cache(maxsize=4)
def _summary_members(operation: str) -> frozenset[str]:
    """The members of ``operation``'s summary shape (botocore's sagemaker model)."""
    from mmelocal.facts.aws import service_model

    model = service_model("sagemaker")
    output = model.operation_model(operation).output_shape
    return frozenset(output.members[LISTINGS[operation].key].member.members)


def _matches(summary: dict[str, Any], params: dict[str, Any], listing: Listing) -> bool:
    part = params.get("NameContains")
    if part and str(part) not in str(summary.get(listing.name, "")):
        return False
    wanted = params.get("StatusEquals")
    if wanted is not None and summary.get("EndpointStatus") != wanted:
        return False
    return all(
        holds(epoch_s(summary[field]), epoch_s(params[name]))
        for name, (field, holds) in _TIME_FILTERS.items()
        if params.get(name) is not None
    )


def _order(listing: Listing, params: dict[str, Any]) -> Order[Listed]:
    """The order ``params`` ask for (``SortBy``, ``SortOrder``), the name breaking ties."""

    def name(item: Listed) -> str:
        return str(item.value.get(listing.name, ""))

    by = str(params.get("SortBy") or "CreationTime")
    first: Callable[[Listed], str | float] = {
        "Name": name,
        "Status": lambda item: str(item.value.get("EndpointStatus", "")),
    }.get(by, lambda item: epoch_s(item.value["CreationTime"]))
    return Order(
        name=by if by in ("Name", "Status") else "CreationTime",
        key=lambda item: (first(item), name(item)),
        descending=params.get("SortOrder", "Descending") == "Descending",
    )


def list_page(
    operation: str, summaries: Iterable[dict[str, Any]], params: dict[str, Any]
) -> dict[str, Any]:
    """The page of ``summaries`` (every item moto holds) that ``params`` (the request's)
    asks of ``operation`` (a key of :data:`LISTINGS`): sorted, cut, then filtered (see the
    module docstring)."""
    listing = LISTINGS[operation]
    members = _summary_members(operation)
    page = one_page(
        [Listed(s) for s in summaries],
        params,
        key=listing.key,
        order=_order(listing, params),
        size_param="MaxResults",
        default_size=listing.default_size,
        invalid_token_code=INVALID_TOKEN_CODE,
        keep=lambda s: _matches(s, params, listing),
    )
    page[listing.key] = [{k: v for k, v in s.items() if k in members} for s in page[listing.key]]
    return page


__all__ = ["INVALID_TOKEN_CODE", "LISTINGS", "Listing", "epoch_s", "list_page"]
