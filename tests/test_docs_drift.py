"""Docs that cannot drift from the code: the README's and the home page's table of layers,
and the page of environment variables."""

from __future__ import annotations

import re
from pathlib import Path

from mmelocal.runtime.entrypoint import ENVIRONMENT_KNOBS, KNOBS

ROOT = Path(__file__).parents[1]
#: ``MMELOCAL_*`` words in the code that are not environment variables
NOT_VARIABLES = {"MMELOCAL_FLAGS"}  # a Python name (the flags mmelocal adds to Triton's)


def _table(text: str, header: str) -> str:
    start = text.index(header)
    return text[start : text.index("\n\n", start)]


def test_readme_and_home_page_share_one_table_of_layers() -> None:
    readme = _table((ROOT / "README.md").read_text(), "| layer | commands |")
    home = _table((ROOT / "docs" / "index.md").read_text(), "| layer | commands |")
    assert readme.replace("](docs/", "](") == home


def code_variables() -> set[str]:
    """The ``MMELOCAL_*`` names mmelocal's code reads or mentions (HTTP headers aside)."""
    found: set[str] = set()
    for path in (ROOT / "mmelocal").rglob("*.py"):
        text = path.read_text()
        found |= set(re.findall(r"(?<![A-Z_])MMELOCAL_[A-Z0-9_]*[A-Z0-9]", text))
    return found - NOT_VARIABLES


def test_every_environment_variable_is_on_its_page() -> None:
    page = (ROOT / "docs" / "environment.md").read_text()
    listed = set(re.findall(r"`((?:MMELOCAL|SAGEMAKER)_[A-Z0-9_]+)`", page))
    variables = code_variables()
    assert "MMELOCAL_TRITONSERVER" in variables  # the search finds what it should
    assert variables - listed == set()
    knobs = {knob.key for knob in (*KNOBS, *ENVIRONMENT_KNOBS)}
    assert knobs - listed == set()
