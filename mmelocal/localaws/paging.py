"""One page of a ``Describe*`` answer, as the local AWS's own APIs hand them out.

The token is the index of the page's first item (an opaque string to the caller, as AWS's
are); a page is followed by ``NextToken`` only while items remain.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from mmelocal.errors import AwsServiceError


class Described(Protocol):
    """An item that knows its place in an answer (``AlarmHistoryItem``, ``Activity``)."""

    def described(self) -> dict[str, Any]:
        """The item as the API's answer shows it."""
        ...


def one_page(
    items: Sequence[Described],
    params: dict[str, Any],
    *,
    key: str,
    size_param: str,
    default_size: int,
    invalid_token_code: str,
) -> dict[str, Any]:
    """``{key: [...], "NextToken": ...}``: the page of ``items`` that ``params`` asks for
    (``NextToken`` where the last page ended, ``size_param`` items at most, else
    ``default_size``). A ``NextToken`` no page gave is refused with the service's
    ``invalid_token_code`` (HTTP 400)."""
    token = str(params.get("NextToken") or "0")
    if not token.isdigit():
        raise AwsServiceError("The next token specified is invalid.", code=invalid_token_code)
    first = int(token)
    size = int(params.get(size_param) or default_size)
    answer: dict[str, Any] = {key: [item.described() for item in items[first : first + size]]}
    if first + size < len(items):
        answer["NextToken"] = str(first + size)
    return answer


__all__ = ["Described", "one_page"]
