"""``ListEndpoints`` as the service answers it, over summaries that show what
``DescribeEndpoint`` shows (the status the local AWS's fleets are in, not moto's record).

botocore's sagemaker model, ``ListEndpointsInput``: ``StatusEquals`` "returns only
endpoints with the specified status"; ``CreationTimeBefore`` "created before",
``CreationTimeAfter`` "a creation time greater than or equal to",
``LastModifiedTimeBefore`` "modified before", ``LastModifiedTimeAfter`` "modified after"
the given time, on the times ``DescribeEndpoint`` shows; ``SortBy`` ``Name`` |
``CreationTime`` | ``Status`` ("The default is CreationTime"); ``SortOrder`` ("The default
is Descending"); ``MaxResults`` "defaults to 10"
(:data:`~mmelocal.facts.sagemaker.ENDPOINTS_PAGE_SIZE`).
Filters come first, then the order, then the page (:func:`~.paging.one_page`), so a page
holds ``MaxResults`` matches while more remain and the last match ends the pages.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from mmelocal.facts.sagemaker import ENDPOINTS_PAGE_SIZE
from mmelocal.localaws.paging import Listed, one_page

#: the code of the refusal of a ``NextToken`` no page gave (SageMaker's client error: the
#: API reference's common errors; the exact answer for a bad token is not published)
INVALID_TOKEN_CODE = "ValidationException"


def epoch_s(value: Any) -> float:
    """A timestamp of a JSON answer or request (epoch seconds, as botocore's JSON protocols
    write them, or ISO 8601) in epoch seconds."""
    if isinstance(value, int | float):
        return float(value)
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


#: SortBy -> the key of one summary
_SORT_KEYS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "Name": lambda s: str(s.get("EndpointName", "")),
    "CreationTime": lambda s: epoch_s(s["CreationTime"]),
    "Status": lambda s: str(s.get("EndpointStatus", "")),
}


#: ListEndpointsInput's time filters -> (the summary's time, how it must compare to theirs)
_TIME_FILTERS: dict[str, tuple[str, Callable[[float, float], bool]]] = {
    "CreationTimeBefore": ("CreationTime", operator.lt),
    "CreationTimeAfter": ("CreationTime", operator.ge),
    "LastModifiedTimeBefore": ("LastModifiedTime", operator.lt),
    "LastModifiedTimeAfter": ("LastModifiedTime", operator.gt),
}


def _matches(summary: dict[str, Any], params: dict[str, Any]) -> bool:
    wanted = params.get("StatusEquals")
    if wanted is not None and summary.get("EndpointStatus") != wanted:
        return False
    return all(
        holds(epoch_s(summary[field]), epoch_s(params[name]))
        for name, (field, holds) in _TIME_FILTERS.items()
        if params.get(name) is not None
    )


def list_endpoints(summaries: Iterable[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    """The page of ``summaries`` (every endpoint whose name ``NameContains`` matched) that
    ``params`` (the request's) asks for (see the module docstring)."""
    found = [s for s in summaries if _matches(s, params)]
    key = _SORT_KEYS.get(str(params.get("SortBy") or "CreationTime"), _SORT_KEYS["CreationTime"])
    found.sort(key=key, reverse=params.get("SortOrder", "Descending") == "Descending")
    return one_page(
        [Listed(s) for s in found],
        params,
        key="Endpoints",
        size_param="MaxResults",
        default_size=ENDPOINTS_PAGE_SIZE,
        invalid_token_code=INVALID_TOKEN_CODE,
    )


__all__ = ["INVALID_TOKEN_CODE", "epoch_s", "list_endpoints"]
