"""Options and parameter types that several commands share, each declared once.

The options a family of commands shares stay with that family (``_bench``: the bench
commands' outputs and loops; ``_loadgen``: Locust's distributed mode; ``_remote``: the
``--endpoint`` forms); what any command may take is here.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from mmelocal.cli._output import size_option

F = TypeVar("F", bound=Callable[..., Any])

#: an existing file the command reads
IN_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)
#: a file the command writes
OUT_FILE = click.Path(dir_okay=False, path_type=Path)
#: a folder the command writes into
OUT_DIR = click.Path(file_okay=False, path_type=Path)

#: a TCP port (0: a free one, where the option says so)
PORT = click.IntRange(0, 65535)

#: ``--region``'s help where the command talks to AWS with the user's profile
PROFILE_REGION_HELP = "AWS region (default: your profile's)."


def typed_flags(ctx: click.Context) -> dict[str, str]:
    """Parameter name -> the flag a user types for it (``--no-prune`` for a switch that is
    off): for a library refusal to name the option, not the field it sets
    (``DeployOptions.option_names``)."""
    names = {}
    for param in ctx.command.params:
        if isinstance(param, click.Option) and param.name:
            off = param.secondary_opts and ctx.params.get(param.name) is False
            names[param.name] = param.secondary_opts[0] if off else param.opts[0]
    return names


def stacked(*options: Callable[[F], F]) -> Callable[[F], F]:
    """One decorator applying ``options`` in the order written (the order ``--help`` lists)."""

    def apply(command: F) -> F:
        for option in reversed(options):
            command = option(command)
        return command

    return apply


def grouped(into: str, build: Callable[..., Any], *options: Callable[[F], F]) -> Callable[[F], F]:
    """``options`` (in the order written), whose values the command receives together as one
    argument ``into``: ``build`` called with them (its parameters are the options' names)."""
    names = list(inspect.signature(build).parameters)

    def apply(command: F) -> F:
        @functools.wraps(command)
        def with_group(**kwargs: Any) -> Any:
            kwargs[into] = build(**{name: kwargs.pop(name) for name in names})
            return command(**kwargs)

        return stacked(*options)(with_group)  # type: ignore[arg-type]

    return apply


#: the option that picks one result of a ``--capacity`` file of several (deploy, traffic)
CAPACITY_RESULT = "--capacity-result"


def capacity_result_option() -> Callable[[F], F]:
    """``--capacity-result FORMAT|SOURCE|N`` (``capacity_pick``): which result of a
    ``--capacity`` file of several the command reads, as every command with ``--capacity``
    takes it (:func:`~mmelocal.bench.capacity.sizing.sizing_result` reads the pick); the
    command refuses it without ``--capacity``."""
    return click.option(
        CAPACITY_RESULT,
        "capacity_pick",
        default=None,
        metavar="FORMAT|SOURCE|N",
        help="With --capacity: which result of a file of several to read (its format, "
        "source or number; e.g. one result per format of capacity --format a,b).",
    )


#: ``--json``'s one meaning in every command: the FILE its JSON document is written to
JSON_HELP = "Write the result as JSON to FILE ('-': stdout)."
#: a JSON output file; ``-`` is stdout
JSON_FILE = click.Path(dir_okay=False, allow_dash=True, path_type=Path)


def _stdout_for_json(ctx: click.Context, param: click.Parameter, value: Path | None) -> Any:
    """With ``--json -`` stdout holds the JSON alone: the command's tables and messages
    (the CLI's ``console``) go to stderr until the command ends."""
    if value is not None and str(value) == "-":
        from mmelocal.cli._output import console

        console.file = sys.stderr
        ctx.call_on_close(lambda: setattr(console, "file", None))  # None: stdout again
    return value


def json_option(help: str = JSON_HELP) -> Callable[[F], F]:
    """``--json FILE`` (``json_out``; ``-``: stdout, and the tables go to stderr), as every
    command takes it. A command whose ``--json`` was a flag (print JSON on stdout) until
    2026-11 is made with :class:`BareJsonCommand`, which still takes the bare flag, with a
    warning."""
    return click.option(
        "--json",
        "json_out",
        type=JSON_FILE,
        metavar="FILE",
        callback=_stdout_for_json,
        help=help,
    )


#: what a bare ``--json`` (no FILE) says, in the commands where it was a flag
BARE_JSON_WARNING = (
    "--json with no FILE is deprecated: write '--json -' (JSON on stdout, as the bare flag "
    "did) or '--json FILE'"
)


class BareJsonCommand(click.Command):
    """A command whose ``--json`` was a flag ("print JSON on stdout"): a bare ``--json`` (last,
    or before a token that is neither ``-`` nor a ``*.json`` file name: the next option, or
    the command's argument, as in ``validate --json model.tar.gz``) is read as ``--json -``,
    with :data:`BARE_JSON_WARNING` on stderr; ``--json=FILE`` names any file."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """``args`` with each bare ``--json`` made ``--json=-``, then click's parsing."""
        args = list(args)
        for at, arg in enumerate(args):
            if arg == "--":
                break
            following = args[at + 1] if at + 1 < len(args) else None
            if arg == "--json" and (
                following is None or (following != "-" and not following.endswith(".json"))
            ):
                args[at] = "--json=-"
                click.echo(f"Warning: {BARE_JSON_WARNING}", err=True)
        return super().parse_args(ctx, args)


def region_option(help: str = PROFILE_REGION_HELP) -> Callable[[F], F]:
    """``--region``: the AWS region (default None: boto3's own choice)."""
    return click.option("--region", default=None, help=help)


def payload_option(help: str, *, required: bool = False) -> Callable[[F], F]:
    """``--payload FILE``: a request body read from a file."""
    return click.option("--payload", type=IN_FILE, required=required, help=help)


def memory_budget_option(
    help: str = (
        "Host memory per Triton instance (no GPU), e.g. 4GiB; default half the RAM, "
        "divided among the instances."
    ),
    *,
    name: str = "memory_budget",
) -> Callable[[F], F]:
    """``--memory-budget SIZE`` in bytes (``4GiB``, ``512MB``; None when not given), handed
    to the command as ``name``."""
    return click.option("--memory-budget", name, default=None, callback=size_option, help=help)


def tritonserver_option(help: str = "tritonserver binary.") -> Callable[[F], F]:
    """``--tritonserver PATH``: the binary (or install folder) to run."""
    return click.option("--tritonserver", type=click.Path(path_type=Path), help=help)


def listen_options(port: int) -> Callable[[F], F]:
    """``--host`` and ``--port`` of a server the command runs (``port``: its default)."""
    return stacked(
        click.option(
            "--host", default="127.0.0.1", show_default=True, help="Address to listen on."
        ),
        click.option(
            "--port", type=PORT, default=port, show_default=True, help="Port (0: a free one)."
        ),
    )


__all__ = [
    "BARE_JSON_WARNING",
    "IN_FILE",
    "JSON_FILE",
    "JSON_HELP",
    "OUT_DIR",
    "OUT_FILE",
    "PORT",
    "PROFILE_REGION_HELP",
    "BareJsonCommand",
    "grouped",
    "json_option",
    "listen_options",
    "memory_budget_option",
    "payload_option",
    "region_option",
    "stacked",
    "tritonserver_option",
]
