"""The docs' code blocks stay true (the mechanism is described in docs/design.md).

- a Python block in docs/ or the README is a snippet include of an example file (which
  tests/test_examples.py runs) or says why it is not run (``<!-- not run: REASON -->``);
- a ``console`` block right after ``<!-- run -->`` is run (in an empty folder where
  ``examples/`` is the checkout's, with ``.venv/bin`` first on ``PATH``): each ``$`` line
  must exit 0 and print the lines shown under it;
- every snippet include names a file that exists.

The site itself is built by ``make docs`` (``mkdocs build --strict``), part of ``make test``.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
SNIPPET = re.compile(r'^--8<-- "([^"]+)"$', re.MULTILINE)


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language, its text and the comment before it."""

    page: Path
    line: int
    language: str
    text: str
    marker: str

    def __str__(self) -> str:
        return f"{self.page.name}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of ``page``, each with the HTML comment just before it, if any."""
    source = page.read_text()
    found = []
    for match in FENCE.finditer(source):
        before = source[: match.start()].rstrip().splitlines()
        last = before[-1].strip() if before else ""
        marker = last if last.startswith("<!--") else ""
        line = source.count("\n", 0, match.start()) + 1
        found.append(Block(page, line, match.group(1), match.group(2), marker))
    return found


ALL = [b for page in PAGES for b in blocks(page)]
RUN = [b for b in ALL if b.marker == "<!-- run -->"]


def test_the_pages_have_blocks_to_check() -> None:
    assert len(PAGES) > 10 and any(b.language == "python" for b in ALL) and RUN


@pytest.mark.parametrize("block", [b for b in ALL if b.language == "python"], ids=str)
def test_python_blocks_are_tested_examples_or_say_why_not(block: Block) -> None:
    where = f"{block.page.relative_to(ROOT)}:{block.line}"
    includes = SNIPPET.findall(block.text)
    if includes:
        assert block.text.strip() == f'--8<-- "{includes[0]}"', f"{where}: one include only"
        assert includes[0].startswith("examples/"), f"{where}: include an example file"
        assert (ROOT / includes[0]).is_file(), f"{where}: {includes[0]} does not exist"
    else:
        assert block.marker.startswith("<!-- not run: "), (
            f"{where}: a Python block is an example include or says why it is not run"
        )


def test_every_snippet_names_a_file() -> None:
    for page in PAGES:
        for name in SNIPPET.findall(page.read_text()):
            assert (ROOT / name).is_file(), f"{page.name} includes {name}, which is missing"


def _commands(block: Block) -> list[tuple[str, list[str]]]:
    """``($ command, [the output lines shown under it])`` in order."""
    steps: list[tuple[str, list[str]]] = []
    for line in block.text.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps and line.strip():
            steps[-1][1].append(line.strip())
    return steps


@pytest.mark.parametrize("block", RUN, ids=str)
def test_console_blocks_marked_to_run(block: Block, tmp_path: Path) -> None:
    assert block.language == "console", "a block marked to run is a console block"
    env = {**os.environ, "COLUMNS": "120", "NO_COLOR": "1"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    (tmp_path / "examples").symlink_to(ROOT / "examples")  # as in a checkout
    for command, shown in _commands(block):
        done = subprocess.run(
            ["bash", "-c", command],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, f"$ {command}\n{done.stderr[-2000:]}"
        output = " ".join((done.stdout + done.stderr).split())
        for line in shown:
            assert " ".join(line.split()) in output, f"$ {command}: {line!r} not printed"
    assert all(shlex.split(c) for c, _ in _commands(block))


def test_the_readme_links_to_files_that_exist() -> None:
    """mkdocs --strict checks the site's links; the README is read on the forge, not built."""
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", (ROOT / "README.md").read_text())
    local = [link for link in links if "://" not in link]
    assert local and all((ROOT / link).exists() for link in local), local


#: tests of other projects a page cites as a source (the SageMaker Python SDK's)
OTHER_PROJECTS_TESTS = {"test_spark_ml_predict_invocation_with_target_variant"}


def _defined_tests() -> set[str]:
    names: set[str] = set()
    for path in (ROOT / "tests").rglob("test_*.py"):
        names |= set(re.findall(r"^\s*(?:async )?def (test_\w+)", path.read_text(), re.MULTILINE))
    return names


def test_the_tests_and_files_a_page_names_exist() -> None:
    """A page that says "tested by X" names a test that exists, and files that exist."""
    defined = _defined_tests()
    missing = []
    for page in PAGES:
        text = page.read_text()
        for name in re.findall(r"`(?:[\w/.]+\.py::)?(test_\w+?)(?:\[[^`]*\])?`", text):
            if name in OTHER_PROJECTS_TESTS or (ROOT / "tests" / f"{name}.py").exists():
                continue
            if name not in defined:
                missing.append(f"{page.name}: {name}")
        for path in re.findall(
            r"`((?:tests|benchmarks|examples|mmelocal)/[\w/.-]+\.(?:py|sh|yaml))", text
        ):
            if not (ROOT / path).exists():
                missing.append(f"{page.name}: {path}")
    assert defined and missing == []


#: where a command line's words end (a pipe, a redirection, a comment, the next command)
_LINE_END = re.compile(r"\s(?:\||&&|;|#|>|&$|&\s)")


def _command_lines(page: Path) -> list[str]:
    """Every ``mmelocal ...`` command in the page's shell and text blocks (continuation
    lines joined) and code spans, cut where the command ends."""
    found = []
    for block in blocks(page):
        if block.language not in ("bash", "console", "text", "", "sh"):
            continue
        text = block.text.replace("\\\n", " ")
        text = re.sub(r"\n\s+(?=\[?--)", " ", text)  # a synopsis's indented options
        for line in text.splitlines():
            for match in re.finditer(r"(?:^|[\s/$(])mmelocal ([^\n]*)", line):
                words = _LINE_END.split(f" {match.group(1)} ", maxsplit=1)[0]
                found.append(words.strip())
    for span in re.findall(r"`(?:\.venv/bin/)?mmelocal ([^`]+)`", page.read_text()):
        found.append(_LINE_END.split(f" {span} ", maxsplit=1)[0].strip())
    return found


def _options_of(words: list[str]) -> tuple[str, set[str]] | None:
    """The command the words name and its options (None when the words name none)."""
    import click

    from mmelocal.cli.main import cli

    context = click.Context(cli)
    command: click.Command = cli
    path: list[str] = []
    for word in words:
        if not isinstance(command, click.Group) or word.startswith("-"):
            break
        sub = command.get_command(context, word)
        if sub is None:
            break
        command, path = sub, [*path, word]
    if not path:
        return None
    if isinstance(command, click.Group):  # `capacity SOURCE` is `capacity measure SOURCE`
        command = command.get_command(context, "measure") or command
    options = {"--help", "-h", "-v", "-vv", "--verbose"}
    for param in command.params:
        options |= {*param.opts, *param.secondary_opts}
    return " ".join(path), options


#: options a page names on purpose although they do not exist
NOT_OPTIONS = {"local-aws.md: mmelocal serve --aws"}  # why local-aws is its own command


def test_every_option_a_page_gives_a_command_exists() -> None:
    """Each ``--option`` shown after ``mmelocal COMMAND`` is one of that command's."""
    wrong = []
    for page in PAGES:
        for line in _command_lines(page):
            text = line.replace("[", " ").replace("]", " ").replace("|", " ")
            try:
                words = shlex.split(text)
            except ValueError:  # a quote the shown line leaves open
                words = text.split()
            named = _options_of(words)
            if named is None:
                continue
            path, options = named
            for word in words:
                option = word.split("=", 1)[0]
                if option.startswith("--") and option not in options:
                    wrong.append(f"{page.name}: mmelocal {path} {option}")
    assert set(wrong) - NOT_OPTIONS == set()


def _default_of(command_path: str, option: str) -> object:
    import click

    from mmelocal.cli.main import cli

    context = click.Context(cli)
    command: click.Command | None = cli
    for word in command_path.split():
        assert isinstance(command, click.Group)
        command = command.get_command(context, word)
    assert command is not None
    return next(p.default for p in command.params if option in p.opts)


def test_the_defaults_a_synopsis_shows_are_the_commands() -> None:
    """``[--option VALUE]`` in a command's synopsis shows the option's default."""
    from mmelocal.units import parse_size_bytes

    checked = 0
    for page in PAGES:
        for line in _command_lines(page):
            named = _options_of(line.split())
            if named is None:
                continue
            for option, shown in re.findall(r"\[(--[a-z-]+) ([0-9][\w.]*)\]", line):
                default = _default_of(named[0], option)
                if default is None:
                    continue  # an example value of an option with no default
                if isinstance(default, (int, float)) and not isinstance(default, bool):
                    value: object = float(shown) if shown[-1].isdigit() else parse_size_bytes(shown)
                else:
                    value, default = shown, str(default)
                assert value == default, f"{page.name}: mmelocal {named[0]} {option} {shown}"
                checked += 1
    assert checked >= 8


def test_the_readme_lists_every_page_of_the_site() -> None:
    """The README's documentation list is the site's table of contents on the forge."""
    readme = (ROOT / "README.md").read_text()
    linked = set(re.findall(r"\]\(docs/([\w-]+\.md)", readme))
    pages = {page.name for page in (ROOT / "docs").glob("*.md")}
    assert pages - linked - {"index.md", "changelog.md"} == set()


#: phrases that narrate a change: the pages say what the code does, CHANGELOG.md what changed
HISTORY = re.compile(
    r"\b(?:as before|this release|(?:is|are) now|previously|formerly|until now)\b|\(new\)",
    re.IGNORECASE,
)


def test_no_page_narrates_history() -> None:
    found = [
        f"{page.name}: {match.group(0)}"
        for page in PAGES
        for match in HISTORY.finditer(page.read_text())
    ]
    assert found == []
