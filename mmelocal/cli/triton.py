"""``mmelocal triton start|stop|status``: a Triton server that keeps running between commands."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from mmelocal.cli._defaults import default_of, field_option
from mmelocal.cli._options import (
    OUT_DIR,
    PORT,
    BareJsonCommand,
    json_option,
    tritonserver_option,
)
from mmelocal.runtime.detached import start_detached, stop_detached
from mmelocal.runtime.entrypoint import knob_default
from mmelocal.runtime.server_config import PLAIN_LOG_VERBOSE, ServerConfig

#: ``--name``: which kept server (start, stop and status)
_name_option = field_option(start_detached, "name", help="Name of the kept server.")


def _port_option(field: str, help: str = "0 = a free port.") -> Callable[[Any], Any]:
    """``--<field>``: one of the server's ports (ServerConfig's default: 0, a free one)."""
    return field_option(ServerConfig, field, type=PORT, show_default=False, help=help)


@click.group()
def triton() -> None:
    """Start, stop or inspect a detached Triton server (the pip tritonserver)."""


@triton.command(cls=BareJsonCommand)
@click.option(
    "--repo",
    "repository",
    type=OUT_DIR,
    default=Path("model_repository"),
    show_default=True,
    help="Model repository (created if missing; explicit model control).",
)
@_name_option
@_port_option("http_port")
@_port_option("grpc_port")
@_port_option("metrics_port")
@click.option(
    "--sagemaker/--no-sagemaker",
    default=default_of(ServerConfig, "sagemaker"),
    help="Turn on the SageMaker front end.",
)
@_port_option("sagemaker_port", help="0 = free.")
@click.option(
    "--load",
    "load_models",
    multiple=True,
    help="Model to load at start (repeatable); the pip tritonserver loads Python-backend "
    "models only (check and serve run TorchScript and ONNX through their copies).",
)
@click.option(
    "--log-verbose",
    type=click.IntRange(min=0),
    default=None,
    help=f"Triton log level [default: {PLAIN_LOG_VERBOSE}; with --sagemaker "
    f"SAGEMAKER_TRITON_LOG_VERBOSE's default: {knob_default('SAGEMAKER_TRITON_LOG_VERBOSE')}].",
)
@tritonserver_option()
@json_option("Write the server's record as JSON to FILE ('-': stdout).")
def start(
    repository: Path, name: str, tritonserver: Path | None, json_out: Path | None, **server: Any
) -> None:
    """Start tritonserver in the background and record it (see `mmelocal triton status`)."""
    from mmelocal.cli._output import console, emit_json, fail

    try:
        repository.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail(f"cannot create the model repository {repository}: {exc.strerror}; pass --repo FOLDER")
    # the ports, --sagemaker, --load and --log-verbose are named after ServerConfig's fields
    config = ServerConfig(model_repository=repository.resolve(), **server)
    kept = start_detached(config, name=name, tritonserver=tritonserver)
    if not emit_json(kept.to_dict(), json_out):
        console.print(f"[bold green]started[/] Triton {name!r} pid {kept.pid}", highlight=False)
        _print_urls(console, kept)


@triton.command()
@_name_option
@field_option(
    stop_detached,
    "timeout_s",
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds to wait after SIGTERM before SIGKILL.",
)
def stop(name: str, timeout_s: float) -> None:
    """Stop the kept server (SIGTERM, then SIGKILL after the timeout)."""
    from mmelocal.cli._output import console

    kept = stop_detached(name, timeout_s=timeout_s)
    if kept is None:
        console.print(f"no kept Triton called {name!r}")
        raise SystemExit(1)
    console.print(f"stopped Triton {name!r} (pid {kept.pid})", highlight=False)


@triton.command(cls=BareJsonCommand)
@_name_option
@json_option("Write the status as JSON to FILE ('-': stdout).")
def status(name: str, json_out: Path | None) -> None:
    """Show whether the kept server runs, its URLs and its loaded models. Exit 1 if down."""
    from mmelocal.cli._output import console, emit_json
    from mmelocal.errors import MmeLocalError
    from mmelocal.runtime.client import TritonClient
    from mmelocal.runtime.detached import read_detached

    kept = read_detached(name)
    if kept is None:
        if not emit_json({"name": name, "running": False}, json_out):
            console.print(f"no kept Triton called {name!r}")
        raise SystemExit(1)
    alive = kept.is_alive()
    models: list[dict[str, object]] = []
    if alive:
        client = TritonClient(kept.http_url, timeout_s=10, is_alive=kept.is_alive)
        try:
            models = client.index()
        except MmeLocalError:
            models = []
        finally:
            client.close()
    if not emit_json({**kept.to_dict(), "running": alive, "models": models}, json_out):
        state = "[bold green]running[/]" if alive else "[bold red]not running[/]"
        console.print(f"Triton {name!r} pid {kept.pid}: {state}", highlight=False)
        _print_urls(console, kept)
        for m in models:
            console.print(f"  {m.get('name')}: {m.get('state', 'not loaded')}", highlight=False)
    if not alive:
        raise SystemExit(1)


def _print_urls(console: Any, kept: Any) -> None:
    for label in ("http_url", "grpc_url", "metrics_url", "sagemaker_url", "log_path"):
        value = getattr(kept, label)
        if value:
            console.print(f"  {label}: {value}", highlight=False)
