"""Docs that cannot drift from the code: the README's and the home page's table of layers,
and the page of environment variables."""

from __future__ import annotations

import re
from pathlib import Path

from mmelocal.runtime.entrypoint import ENVIRONMENT_KNOBS, KNOBS, entrypoint_args

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


#: where mmelocal's own test suite reads a variable: ``os.environ.get("X"``,
#: ``os.environ["X"``, ``${X`` / ``$X`` in a script, ``X=`` in the Makefile
_SUITE_READ = re.compile(
    r"""(?:environ(?:\.get\(|\[)["']|\$\{?)(MMELOCAL_[A-Z0-9_]*[A-Z0-9])|^\s*(MMELOCAL_[A-Z0-9_]*[A-Z0-9])=""",
    re.MULTILINE,
)


def suite_variables() -> set[str]:
    """The ``MMELOCAL_*`` variables mmelocal's tests, scripts and Makefile read."""
    found: set[str] = set()
    paths = [ROOT / "Makefile", *(ROOT / "tests").rglob("*.py"), *(ROOT / "tests").rglob("*.sh")]
    for path in paths:
        for match in _SUITE_READ.finditer(path.read_text()):
            found.add(match.group(1) or match.group(2))
    return found


def _page_names(prefix: str) -> set[str]:
    page = (ROOT / "docs" / "environment.md").read_text()
    return set(re.findall(rf"`({prefix}[A-Z0-9_]*[A-Z0-9])`", page))


def test_every_environment_variable_is_on_its_page() -> None:
    listed = _page_names("MMELOCAL_")
    variables = code_variables()
    assert "MMELOCAL_TRITONSERVER" in variables  # the search finds what it should
    assert variables - listed == set()
    suite = suite_variables()
    assert "MMELOCAL_SDK_VENVS" in suite  # the search finds what it should
    assert suite - listed == set()


def test_the_page_names_no_variable_that_nothing_reads() -> None:
    assert _page_names("MMELOCAL_") - code_variables() - suite_variables() == set()


def test_the_page_names_the_sagemaker_triton_variables_the_entrypoint_reads() -> None:
    knobs = {knob.key for knob in (*KNOBS, *ENVIRONMENT_KNOBS)}
    triton = {key for key in knobs if key.startswith("SAGEMAKER_TRITON_")}
    assert _page_names("SAGEMAKER_TRITON_") == triton
    assert _page_names("SAGEMAKER_") <= knobs


def _launch_page() -> str:
    return (ROOT / "docs" / "launch.md").read_text()


def test_the_launch_page_shows_the_entrypoints_default_command() -> None:
    page = _launch_page()
    start = page.index("```\ntritonserver ")
    block = page[start + 4 : page.index("```", start + 4)]
    assert block.replace("\\\n", " ").split() == ["tritonserver", *entrypoint_args({})]


def test_the_launch_pages_table_gives_each_variables_flag_and_default() -> None:
    """One row per variable the entrypoint reads: its flag and the default it passes."""
    rows: dict[str, list[str]] = {}
    for line in _table(_launch_page(), "| variable | flag | default |").splitlines()[2:]:
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        names = re.findall(r"`(_?[A-Z][A-Z0-9_]*)`", cells[0])
        first = names[0]
        for name in names:  # `_LOG_WARNING` abbreviates the first name's prefix
            full = first[: first.index("_LOG_")] + name if name.startswith("_") else name
            rows[full] = cells
    for knob in (*KNOBS, *ENVIRONMENT_KNOBS):
        assert knob.key in rows, f"{knob.key} has no row"
        flag, default = rows[knob.key][1], rows[knob.key][2]
        if knob.flag and knob.flag != "{}" and knob.what != "platform":
            assert knob.flag.split("{")[0].strip() in flag, (knob.key, flag)
            shown = re.match(r"`([^`]*)`", default)
            assert (shown.group(1) if shown else None) == knob.default, (knob.key, default)
