"""Pages of ``Describe*`` answers: one page as the local AWS's own APIs hand them out
(:func:`one_page`), and every item of a paged answer read back (:func:`every_item`).

The token is the index of the page's first item (an opaque string to the caller, as AWS's
are); a page is followed by ``NextToken`` only while items remain.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from mmelocal.errors import AwsServiceError


class Described(Protocol):
    """An item that knows its place in an answer (``AlarmHistoryItem``, ``Activity``)."""

    def described(self) -> dict[str, Any]:
        """The item as the API's answer shows it."""
        ...


@dataclass(frozen=True)
class Listed:
    """An item already in the shape an answer shows it (a record read from moto)."""

    value: dict[str, Any]

    def described(self) -> dict[str, Any]:
        """The item as the API's answer shows it."""
        return self.value


def one_page(
    items: Sequence[Described],
    params: dict[str, Any],
    *,
    key: str,
    size_param: str,
    default_size: int,
    invalid_token_code: str,
    keep: Callable[[dict[str, Any]], bool] | None = None,
) -> dict[str, Any]:
    """``{key: [...], "NextToken": ...}``: the page of ``items`` that ``params`` asks for
    (``NextToken`` where the last page ended, ``size_param`` items at most, else
    ``default_size``). With ``keep``, the page holds only the items of that cut that
    ``keep`` holds for (a filter applied after the page is cut, as SageMaker's ``List*``
    apply theirs): it may come back short or empty while a ``NextToken`` says more
    remain. A ``NextToken`` no page gave is refused with the service's
    ``invalid_token_code`` (HTTP 400)."""
    token = str(params.get("NextToken") or "0")
    if not token.isdigit():
        raise AwsServiceError("The next token specified is invalid.", code=invalid_token_code)
    first = int(token)
    size = int(params.get(size_param) or default_size)
    cut = [item.described() for item in items[first : first + size]]
    answer: dict[str, Any] = {key: [item for item in cut if keep is None or keep(item)]}
    if first + size < len(items):
        answer["NextToken"] = str(first + size)
    return answer


def every_item(call: Callable[..., Any], key: str, **params: Any) -> list[Any]:
    """Every item under ``key`` of a paged answer: ``call`` (a client's ``describe_*``) with
    ``params``, then again with each ``NextToken`` until a page comes without one. A token
    that comes twice raises ``RuntimeError`` (as botocore's paginators refuse it) rather
    than reading the same page forever."""
    items: list[Any] = []
    seen: set[str] = set()
    token: str | None = None
    while True:
        page = call(**params, **({"NextToken": token} if token else {}))
        items.extend(page.get(key, []))
        token = page.get("NextToken")
        if not token:
            return items
        if token in seen:
            raise RuntimeError(f"{key}: the same NextToken came twice ({token!r})")
        seen.add(token)


__all__ = ["Described", "Listed", "every_item", "one_page"]
