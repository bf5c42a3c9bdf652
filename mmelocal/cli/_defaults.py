"""Option defaults read from the library's dataclasses, so that a default lives in one place
(the dataclass a command fills) and ``--help`` shows what the library would do anyway; and
the options several commands share (``--launcher``, ``--format``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import click

from mmelocal.builder.backends import EXPORT_FORMATS
from mmelocal.runtime.launchers import LAUNCHERS

LAUNCHER_HELP = (
    "local = the pip tritonserver; docker = a Triton image; external = a running server."
)


def defaults_of(cls: type) -> dict[str, Any]:
    """Field name -> plain default of dataclass ``cls`` (fields without one are left out)."""
    return {
        item.name: item.default
        for item in dataclasses.fields(cls)
        if item.default is not dataclasses.MISSING
    }


def default_of(cls: type, name: str) -> Any:
    """The default of field ``name`` of dataclass ``cls`` (a KeyError names a field with no
    plain default: a programming error, found by any ``--help``)."""
    return defaults_of(cls)[name]


def launcher_option(default: str) -> Callable[[Any], Any]:
    """``--launcher`` (``default`` read from the command's dataclass)."""
    return click.option(
        "--launcher",
        type=click.Choice(LAUNCHERS),
        default=default,
        show_default=True,
        help=LAUNCHER_HELP,
    )


def format_option(param: str, help: str) -> Callable[[Any], Any]:
    """``--format``: one of the export formats, TorchScript first (the default)."""
    return click.option(
        "--format",
        param,
        type=click.Choice(EXPORT_FORMATS),
        default=EXPORT_FORMATS[0],
        show_default=True,
        help=help,
    )


__all__ = ["default_of", "defaults_of", "format_option", "launcher_option"]
