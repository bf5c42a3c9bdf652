"""``--json`` means one thing in every command: the FILE the command's JSON goes to (``-``:
stdout, which then holds the JSON alone). It was a flag ("print JSON") in build, validate,
check, triton start/status and smoke, a FILE elsewhere; the bare flag still works there,
deprecated, with a warning on stderr."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from shared_helpers import write_reference_tarball

from mmelocal.cli.main import cli, main


def _json_options() -> dict[str, click.Option]:
    """``mmelocal ...`` path -> its ``--json`` option, for every command that has one."""
    ctx = click.Context(cli)
    found: dict[str, click.Option] = {}

    def walk(command: click.Command, path: str) -> None:
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                if sub is not None:
                    walk(sub, f"{path} {name}")
            return
        for param in command.params:
            if isinstance(param, click.Option) and "--json" in param.opts:
                found[path] = param

    walk(cli, "mmelocal")
    return found


def test_every_json_option_takes_a_file_and_dash_is_stdout() -> None:
    options = _json_options()
    assert {"mmelocal validate", "mmelocal deploy", "mmelocal capacity project"} <= set(options)
    flags = sorted(path for path, option in options.items() if option.is_flag)
    assert flags == []
    for path, option in options.items():
        assert option.name == "json_out" and "FILE" in (option.help or ""), path
        assert isinstance(option.type, click.Path) and option.type.allow_dash, path


def test_json_dash_file_and_the_deprecated_flag(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    tarball = write_reference_tarball(tmp_path / "model-0.tar.gz", scale=2.0)

    assert main(["validate", str(tarball), "--json", "-"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["ok"] is True and "deprecated" not in err

    written = tmp_path / "out" / "validate.json"
    assert main(["validate", str(tarball), "--json", str(written)]) == 0
    out, _ = capsys.readouterr()
    assert json.loads(written.read_text())["ok"] is True
    assert "model-0.tar.gz" in "".join(out.split())  # the console wraps a long path

    # the flag, before the argument as a user may have written it: stdout as before
    assert main(["validate", "--json", str(tarball)]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["ok"] is True
    assert "--json with no FILE is deprecated: write '--json -'" in " ".join(err.split())

    # a FILE command: '-' puts the JSON alone on stdout, the table on stderr
    args = ["capacity", "project", "--per-model-mib", "100", "--baseline-mib", "10"]
    assert main([*args, "--json", "-"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["kind"] == "projection" and "ml.g5.xlarge" in err
    assert main(args) == 0 and "ml.g5.xlarge" in capsys.readouterr().out  # stdout again
