"""Shared CLI plumbing: logging set-up, one-line errors, the rich console."""

from __future__ import annotations

import errno
import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.logging import RichHandler
from rich.markup import escape

from mmelocal.errors import MmeLocalError

console = Console()
err_console = Console(stderr=True)


def configure_logging(verbose: int) -> None:
    """Install the only log handler mmelocal ever installs (the CLI's)."""
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    handler = RichHandler(console=err_console, show_path=False, rich_tracebacks=False)
    root = logging.getLogger("mmelocal")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False


def fail(message: str, code: int = 2) -> None:
    """Print one red line on stderr and exit with ``code``."""
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    sys.exit(code)


def size_option(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    """Click callback: a size option (``4GiB``, ``512MB``; see :mod:`mmelocal.units`) in bytes."""
    if value is None:
        return None
    from mmelocal.errors import UserInputError
    from mmelocal.units import parse_size_bytes

    try:
        return parse_size_bytes(value)
    except UserInputError as exc:
        raise click.BadParameter(str(exc)) from None


def env_option(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> dict[str, str]:
    """Click callback: repeated ``--env KEY=VALUE`` as a dict (``serve`` and ``deploy``)."""
    env = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="--env")
        env[key] = value
    return env


def print_json(data: Any) -> None:
    """Write machine-readable output on stdout (no colours, no wrapping)."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    sys.stdout.flush()


def emit_json(data: Any, json_out: Path | None) -> bool:
    """Write ``data`` where ``--json`` says (:func:`~mmelocal.cli._options.json_option`):
    True when it went to stdout (``-``: print nothing else there), False when it went to a
    file (said on stderr) or nowhere (``json_out`` None)."""
    if json_out is None:
        return False
    if str(json_out) == "-":
        print_json(data)
        return True
    from mmelocal.bench.results import write_text

    write_text(json_out, json.dumps(data, indent=2, default=str) + "\n")
    err_console.print(f"JSON written to {json_out}", highlight=False)
    return False


def finish(report: Any, json_out: Path | None, show: Callable[[Any], None]) -> None:
    """Write ``report`` as JSON where ``--json`` says (:func:`emit_json`), and, unless that
    was stdout, show it with ``show``; then exit 1 unless ``report.ok`` (the checking
    commands: validate, check, smoke)."""
    if not emit_json(report.to_dict(), json_out):
        show(report)
    if not report.ok:
        raise SystemExit(1)


#: what to do about an operating-system error, by errno (the rest: check the path)
_OS_ERROR_HINTS = {
    errno.ENOSPC: "free disk space or write somewhere else",
    errno.EDQUOT: "free space within your disk quota or write somewhere else",
    errno.EACCES: "choose a path you may write, or change its permissions",
    errno.EPERM: "choose a path you may write, or change its permissions",
    errno.EROFS: "that file system is read-only: write somewhere else",
    errno.EEXIST: "a file is in the way: move it or choose another path",
    errno.ENOTDIR: "a file is in the way: move it or choose another path",
    errno.EISDIR: "that is a folder: give a file name",
    errno.ENOENT: "check the path",
    errno.EADDRINUSE: "the port is taken: choose another --port or stop what uses it",
    errno.EMFILE: "too many open files: raise the limit (ulimit -n) or run fewer at once",
}


def os_error_line(exc: OSError) -> str:
    """One line for an operating-system error: what failed, on which path, what to do."""
    what = exc.strerror or str(exc) or type(exc).__name__
    paths = [str(p) for p in (exc.filename, exc.filename2) if p is not None]
    where = f": {' -> '.join(paths)}" if paths else ""
    hint = _OS_ERROR_HINTS.get(exc.errno or 0, "check the path and the machine, then retry")
    return f"{what}{where} ({hint}; -vv shows the traceback)"


def run_cli(group: click.Group, argv: list[str] | None) -> int:
    """Run the click group; library errors become one line and exit code 2, an operating
    system error none of them named (disk full, no permission) one line and exit code 1,
    never a traceback (``-vv`` prints an operating-system error's traceback first)."""
    try:
        group.main(args=argv, prog_name="mmelocal", standalone_mode=False)
    except click.exceptions.Abort:
        err_console.print("aborted")
        return 130
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except MmeLocalError as exc:
        # escaped: a message quoting a path like /endpoints/NAME[/invocations] is not markup
        err_console.print(
            f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True
        )
        return 2
    except OSError as exc:
        if logging.getLogger("mmelocal").isEnabledFor(logging.DEBUG):
            err_console.print_exception()
        err_console.print(
            f"[bold red]error:[/] {escape(os_error_line(exc))}", highlight=False, soft_wrap=True
        )
        return 1
    except KeyboardInterrupt:
        err_console.print("interrupted")
        return 130
    except SystemExit as exc:
        return int(exc.code) if isinstance(exc.code, int) else 1
    return 0
