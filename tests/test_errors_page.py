"""docs/errors.md and the error table (:mod:`mmelocal.facts.invoke_errors`) say the same.

The page's InvokeEndpoint table has one row per situation; each row's HTTP status and the
error code boto3 raises must be an entry of the table (or the 413 of an oversized body),
and each entry of the table must have a row.
"""

from __future__ import annotations

import re
from pathlib import Path

from mmelocal.facts.invoke_errors import (
    INTERNAL_FAILURE,
    PAYLOAD_TOO_LARGE_STATUS,
    SAGEMAKER_ERRORS,
)

PAGE = Path(__file__).parents[1] / "docs" / "errors.md"


def _section(text: str, heading: str) -> str:
    start = text.index(f"## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def page_rows() -> set[tuple[int, str]]:
    """(HTTP status, error code) of every row of the page's InvokeEndpoint table."""
    rows: set[tuple[int, str]] = set()
    for line in _section(PAGE.read_text(), "InvokeEndpoint").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[1].isdigit():
            continue
        raised = cells[2]
        code = re.match(r"`ClientError` with code `([^`]+)`", raised)
        name = code.group(1) if code else re.match(r"`([^`]+)`", raised)
        assert name is not None, f"no error code in the row {line!r}"
        rows.add((int(cells[1]), name if isinstance(name, str) else name.group(1)))
    return rows


def test_the_page_lists_every_entry_of_the_error_table_and_no_other() -> None:
    table = {(kind.status, kind.error_type) for _, kind in SAGEMAKER_ERRORS}
    table |= {(INTERNAL_FAILURE.status, INTERNAL_FAILURE.error_type)}
    table |= {(PAYLOAD_TOO_LARGE_STATUS, str(PAYLOAD_TOO_LARGE_STATUS))}
    assert page_rows() == table


def test_the_page_names_the_v2_statuses_that_differ() -> None:
    v2 = _section(PAGE.read_text(), "The KServe v2 routes")
    for _, kind in SAGEMAKER_ERRORS:
        if kind.v2 != kind.status:
            assert f"{kind.v2}" in v2 and kind.error_type in v2, kind
