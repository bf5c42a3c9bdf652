"""Every command's ``--help``: each option says what it is for.

An option with no help text showed only its type and default in ``--help`` and in the CLI
reference page (``docs/cli.md``, generated from the commands), while the same option of
another command explained itself (``--threshold`` of ``capacity measure`` did,
``capacity estimate``'s and ``capacity project``'s did not).
"""

from __future__ import annotations

from collections.abc import Iterator

import click

from mmelocal.cli.main import cli


def _commands() -> Iterator[tuple[str, click.Command]]:
    context = click.Context(cli)
    pending: list[tuple[str, click.Command]] = [("mmelocal", cli)]
    while pending:
        path, command = pending.pop()
        if isinstance(command, click.Group):
            for name in command.list_commands(context):
                sub = command.get_command(context, name)
                assert sub is not None, name
                pending.append((f"{path} {name}", sub))
        else:
            yield path, command


def test_every_option_has_a_help_text() -> None:
    missing = [
        f"{path} {param.opts[0]}"
        for path, command in _commands()
        for param in command.params
        if isinstance(param, click.Option) and not param.hidden and not (param.help or "").strip()
    ]
    assert not missing, missing
