"""Option defaults read from the library's dataclasses and functions, so that a default lives
in one place (the dataclass a command fills, the function it calls) and ``--help`` shows what
the library would do anyway; and the options several commands share (``--launcher``,
``--format``)."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

import click

from mmelocal.builder.backends import CLI_FLAGS, EXPORT_FORMATS
from mmelocal.cli._options import stacked
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


def default_of(owner: Any, name: str) -> Any:
    """The default of field ``name`` of dataclass ``owner``, or of parameter ``name`` of the
    function or class ``owner`` (a KeyError names one with no plain default: a programming
    error, found by any ``--help``)."""
    if isinstance(owner, type) and dataclasses.is_dataclass(owner):
        return defaults_of(owner)[name]
    default = inspect.signature(owner).parameters[name].default
    if default is inspect.Parameter.empty:
        raise KeyError(name)
    return default


def field_option(owner: Any, name: str, *decls: str, **attrs: Any) -> Callable[[Any], Any]:
    """An option for ``name`` of ``owner`` (see :func:`default_of`): its default is the
    library's, shown in ``--help``; the command receives it as ``name``. Its flag is
    ``--name-with-dashes`` unless ``decls`` give the flags (and, if they differ, the name)."""
    flags = decls or (f"--{name.replace('_', '-')}",)
    if all(decl.startswith("-") for decl in flags):
        flags = (*flags, name)
    attrs.setdefault("show_default", True)
    return click.option(*flags, default=default_of(owner, name), **attrs)


def _shown(value: Any) -> str:
    """A preset value as ``--help`` writes it: on/off, ``4,8``, ``100``."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def preset_option(name: str, *decls: str, help: str, **attrs: Any) -> Callable[[Any], Any]:
    """An option that overrides ConfigOptions field ``name`` of the model family's preset
    (default None: the preset's value). Its help ends with what the presets give, read from
    them: ``[preset: 1]`` when all agree, else ``[preset: bert 8; resnet 32; ...]``."""
    from mmelocal.builder.presets import preset_values

    values = {family: _shown(value) for family, value in preset_values(name).items()}
    if len(set(values.values())) == 1:
        shown = next(iter(values.values()))
    else:
        shown = "; ".join(f"{family} {value}" for family, value in values.items())
    flags = decls or (f"--{name.replace('_', '-')}",)
    return click.option(*flags, default=None, help=f"{help} [preset: {shown}]", **attrs)


def launcher_option(owner: Any) -> Callable[[Any], Any]:
    """``--launcher``, with ``owner``'s default (as :func:`field_option` reads it)."""
    return field_option(owner, "launcher", type=click.Choice(LAUNCHERS), help=LAUNCHER_HELP)


def refuse_other_launchers_options(launcher: str, given: dict[str, tuple[str, Any]]) -> None:
    """Stop with a usage error when an option only one launcher reads was given with another
    (``given``: flag -> (its key in :data:`~mmelocal.runtime.launchers.READER_OF`, its value;
    None or empty when absent)), instead of running without it."""
    from mmelocal.runtime.launchers import misplaced_option

    message = misplaced_option(launcher, given, launcher_flag=CLI_FLAGS.launcher)
    if message is not None:
        raise click.UsageError(message)


def tolerance_options(owner: Any) -> Callable[[Any], Any]:
    """``--atol`` and ``--rtol``: how close an answer must be to the reference (``owner``'s
    defaults, as :func:`field_option` reads them)."""
    return stacked(
        field_option(owner, "atol", type=float, help="Absolute tolerance."),
        field_option(owner, "rtol", type=float, help="Relative tolerance."),
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


__all__ = [
    "default_of",
    "defaults_of",
    "field_option",
    "format_option",
    "launcher_option",
    "preset_option",
    "refuse_other_launchers_options",
    "tolerance_options",
]
