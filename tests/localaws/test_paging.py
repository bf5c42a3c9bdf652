"""The local AWS's pages of ``Describe*`` answers (DescribeAlarmHistory,
DescribeScalingActivities): a token where the last page ended, none after the last."""

from __future__ import annotations

from typing import Any

from mmelocal.localaws.paging import one_page


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
        page = one_page(items, params, key="Things", size_param="MaxResults", default_size=50)
        pages += 1
        seen += [thing["N"] for thing in page["Things"]]
        if "NextToken" not in page:
            break
        params = {"MaxResults": 2, "NextToken": page["NextToken"]}
    assert seen == [0, 1, 2, 3, 4]
    assert pages == 3


def test_the_default_size_holds_when_none_is_asked() -> None:
    items = [_Item(n) for n in range(3)]
    page = one_page(items, {}, key="Things", size_param="MaxRecords", default_size=2)
    assert [thing["N"] for thing in page["Things"]] == [0, 1]
    assert page["NextToken"] == "2"
    whole = one_page(items, {}, key="Things", size_param="MaxRecords", default_size=3)
    assert "NextToken" not in whole
