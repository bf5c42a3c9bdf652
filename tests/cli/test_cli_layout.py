"""The CLI's layout: one module per command, named like it, each of a size a reader takes in
(the house guide's ~400 lines), and the help each command prints."""

from __future__ import annotations

import importlib
from pathlib import Path

import click
import pytest

import mmelocal.cli
from mmelocal.cli.main import _COMMANDS, cli

CLI = Path(mmelocal.cli.__file__).parent
MAX_LINES = 400


@pytest.mark.parametrize("name", sorted(_COMMANDS))
def test_each_command_lives_in_the_module_named_after_it(name: str) -> None:
    """``undeploy`` and ``smoke`` lived in ``cli/deploy.py`` (453 lines with deploy)."""
    module = f"mmelocal.cli.{name.replace('-', '_')}"
    command = getattr(importlib.import_module(module), name.replace("-", "_"))
    assert isinstance(command, click.Command)
    assert command.callback is not None and command.callback.__module__ == module
    assert cli.get_command(click.Context(cli), name) is command


def test_no_cli_module_is_longer_than_the_house_guide_allows() -> None:
    sizes = {p.name: len(p.read_text().splitlines()) for p in CLI.rglob("*.py")}
    assert {n: s for n, s in sizes.items() if s > MAX_LINES} == {}


def test_undeploy_and_smoke_keep_their_help(capsys: pytest.CaptureFixture[str]) -> None:
    """What the help said when both commands lived in cli/deploy.py."""
    from mmelocal.cli.main import main

    assert main(["undeploy", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert text.startswith("Usage: mmelocal undeploy [OPTIONS] NAME Delete what 'mmelocal "
                           "deploy' created for endpoint NAME (and nothing else); say where "
                           "the S3 objects it leaves are.")  # fmt: skip
    for option in ("--region", "--delete-artifacts", "--s3-uri", "--unrecorded"):
        assert option in text
    assert main(["smoke", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert text.startswith("Usage: mmelocal smoke [OPTIONS] NAME Invoke MODELS tarballs of "
                           "endpoint NAME; answers must equal the build's reference.")  # fmt: skip
    for option in ("--region", "--models", "--atol", "--rtol", "--json"):
        assert option in text
