"""Pages of ``Describe*`` and ``List*`` answers: one page as the local AWS's own APIs hand
them out (:func:`one_page`), and every item of a paged answer read back (:func:`every_item`).

Each listing has a total order (:class:`Order`: a key unique to each item, such as a
creation time then a name), and its ``NextToken`` is a cursor in that order, not a
position: the key of the last item the page cut, as opaque to the caller as AWS's tokens
are (URL-safe base64 of JSON, naming the list and the order it belongs to). The next page
holds the items strictly after that key, whatever was deleted or added meanwhile, so a
cleanup that deletes each page's items as it reads them meets every item once (a position
token skipped as many items as had been deleted). An item added meanwhile shows up only
when the order puts it after the cursor (the services promise nothing for those): never
with the newest first (the SageMaker listings' default, the alarm history's, the scaling
activities'), on a later page with the oldest first (scalable targets, scaling policies).
A page is followed by ``NextToken`` only while items remain after its last one.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

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


#: what places an item in its listing: strings and numbers, compared in turn
SortKey = tuple[str | float, ...]

_T = TypeVar("_T", bound=Described)


@dataclass(frozen=True, kw_only=True)
class Order(Generic[_T]):
    """A listing's total order: ``key`` gives each item its place (unique to the item, so
    that ties have an order too), ascending unless ``descending``; ``name`` tells orders
    of the same list apart in a token (``CreationTime``, ``Name``)."""

    name: str
    key: Callable[[_T], SortKey]
    descending: bool = False

    def follows(self, key: SortKey, cursor: SortKey) -> bool:
        """Whether an item at ``key`` comes after ``cursor`` in this order."""
        return key < cursor if self.descending else key > cursor

    @property
    def label(self) -> str:
        """The order as a token names it."""
        return f"{self.name} {'descending' if self.descending else 'ascending'}"


def _token(key: str, order: Order[Any], cursor: SortKey) -> str:
    body = json.dumps({"list": key, "order": order.label, "after": list(cursor)})
    return base64.urlsafe_b64encode(body.encode()).decode().rstrip("=")


def _cursor(token: str, key: str, order: Order[Any], arity: int | None) -> SortKey | None:
    """The key a token of ``key``'s list in ``order`` ends after; None for anything else
    (``arity``: how many parts the list's keys have, None with no item to tell)."""
    try:
        body = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except ValueError:
        return None
    if not isinstance(body, dict) or (body.get("list"), body.get("order")) != (key, order.label):
        return None
    after = body.get("after")
    if not isinstance(after, list) or not all(
        isinstance(part, str | int | float) and not isinstance(part, bool) for part in after
    ):
        return None
    if arity is not None and len(after) != arity:
        return None
    return tuple(after)


def one_page(
    items: Iterable[_T],
    params: dict[str, Any],
    *,
    key: str,
    order: Order[_T],
    size_param: str,
    default_size: int,
    invalid_token_code: str,
    keep: Callable[[dict[str, Any]], bool] | None = None,
) -> dict[str, Any]:
    """``{key: [...], "NextToken": ...}``: the page of ``items`` (in any order: ``order``
    sorts them) that ``params`` asks for: the items after ``NextToken``'s cursor (see the
    module docstring), ``size_param`` of them at most, else ``default_size``. With
    ``keep``, the page holds only the items of that cut that ``keep`` holds for (a filter
    applied after the page is cut, as SageMaker's ``List*`` apply theirs): it may come back
    short or empty while a ``NextToken`` says more remain. A ``NextToken`` no page of this
    list in this order could have given is refused with the service's
    ``invalid_token_code`` (HTTP 400)."""
    ordered = sorted(
        ((order.key(item), item) for item in items),
        key=lambda placed: placed[0],
        reverse=order.descending,
    )
    first = 0
    token = params.get("NextToken")
    if token:
        invalid = AwsServiceError("The next token specified is invalid.", code=invalid_token_code)
        cursor = _cursor(str(token), key, order, len(ordered[0][0]) if ordered else None)
        if cursor is None:
            raise invalid
        try:
            first = next(
                (n for n, (at, _) in enumerate(ordered) if order.follows(at, cursor)), len(ordered)
            )
        except TypeError:  # a string where the order has a number, or the reverse
            raise invalid from None
    size = int(params.get(size_param) or default_size)
    cut = ordered[first : first + size]
    shown = [item.described() for _, item in cut]
    answer: dict[str, Any] = {key: [item for item in shown if keep is None or keep(item)]}
    if cut and first + size < len(ordered):
        answer["NextToken"] = _token(key, order, cut[-1][0])
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


__all__ = ["Described", "Listed", "Order", "SortKey", "every_item", "one_page"]
