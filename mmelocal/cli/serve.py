"""``mmelocal serve``: run the SageMaker multi-model endpoint emulator in front of Triton."""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import click

from mmelocal.cli._defaults import (
    default_of,
    field_option,
    launcher_option,
    refuse_other_launchers_options,
)
from mmelocal.cli._options import (
    OUT_DIR,
    listen_options,
    memory_budget_option,
    tritonserver_option,
)
from mmelocal.cli._output import console, env_option, size_option
from mmelocal.emulator.emulator_config import EmulatorConfig
from mmelocal.emulator.http_server import HttpTimeouts
from mmelocal.units import GiB, MiB

#: the HTTP timeouts' type: seconds
_SECONDS = click.FloatRange(min=0.01)
#: the largest InvokeEndpoint body (the library's default, shown in bytes and MiB)
_MAX_PAYLOAD = default_of(EmulatorConfig, "max_payload_bytes")


@click.command()
@click.option(
    "--store",
    required=True,
    help="Model store: a folder of *.tar.gz, or s3://bucket/prefix (TargetModel = key).",
)
@listen_options(port=8080)
@field_option(
    EmulatorConfig,
    "memory_threshold",
    type=click.FloatRange(0.0, 1.0, min_open=True),
    help="Evict before a load when memory in use would cross this fraction.",
)
@memory_budget_option(name="memory_budget_bytes")
@click.option(
    "--disk-budget",
    "disk_budget_bytes",
    type=str,
    callback=size_option,
    default=f"{default_of(EmulatorConfig, 'disk_budget_bytes') / GiB:g}GiB",
    show_default=True,
    help="Disk for extracted artifacts, per instance (least recently used unloaded ones are "
    "deleted).",
)
@click.option(
    "--cache-dir",
    type=OUT_DIR,
    help="Artifact cache folder (kept between runs); default a temporary folder.",
)
@click.option(
    "--instances",
    type=click.IntRange(min=1),
    help="Triton instances; default one per GPU, one without a GPU.",
)
@launcher_option(EmulatorConfig)
@click.option("--image", help="Container image for --launcher docker.")
@click.option(
    "--triton-url",
    "external_urls",
    multiple=True,
    help="--launcher external: SAGEMAKER_URL[,V2_HTTP_URL] of a running Triton on this "
    "machine (repeat per instance).",
)
@tritonserver_option()
@click.option(
    "--endpoint-name",
    help="Only answer this endpoint name (others get ValidationError); default any name.",
)
@field_option(
    EmulatorConfig,
    "load_wait_timeout_s",
    "--load-wait",
    type=click.FloatRange(min=0.1),
    help="Seconds a call waits for a cold load before ModelNotReadyException.",
)
@click.option("--s3-endpoint-url", help="S3-compatible endpoint for an s3:// store (default AWS).")
@field_option(
    EmulatorConfig,
    "max_payload_bytes",
    "--max-payload",
    type=str,
    callback=size_option,
    show_default=f"{_MAX_PAYLOAD:,} bytes = {_MAX_PAYLOAD / MiB:g}MiB",
    help="Largest InvokeEndpoint body; larger ones get 413 as from the service.",
)
@field_option(
    HttpTimeouts,
    "header_s",
    "--header-timeout",
    type=_SECONDS,
    help="Seconds a client may take to send a request's headers (then 408, closed).",
)
@field_option(
    HttpTimeouts,
    "body_s",
    "--body-timeout",
    type=_SECONDS,
    help="Longest pause, in seconds, while a client sends a body (then 408, closed).",
)
@field_option(
    HttpTimeouts,
    "idle_s",
    "--idle-timeout",
    type=_SECONDS,
    help="Seconds a keep-alive connection may sit idle before it is closed.",
)
@click.option(
    "--env",
    "sagemaker_env",
    multiple=True,
    callback=env_option,
    help="KEY=VALUE of the model's Environment, as for deploy --env (repeatable): "
    "SAGEMAKER_TRITON_* keys give tritonserver the flags SageMaker's entrypoint would.",
)
def serve(
    host: str, port: int, header_s: float, body_s: float, idle_s: float, **config: Any
) -> None:
    """Run the MME emulator: boto3 InvokeEndpoint and KServe v2 on one port."""
    from mmelocal.emulator.emulator import Emulator
    from mmelocal.emulator.server import bind_socket, bound_port, run, serve_forever

    refuse_other_launchers_options(
        config["launcher"],
        {
            "--triton-url": ("url", config["external_urls"]),
            "--image": ("image", config["image"]),
            "--tritonserver": ("tritonserver", config["tritonserver"]),
        },
    )
    # every option but --host, --port and the HTTP timeouts is named after the
    # EmulatorConfig field it sets
    emulator = Emulator(EmulatorConfig(**config))
    emulator.store.check()  # an S3 store without credentials or endpoint: one line, no banner
    root = logging.getLogger("mmelocal")
    if root.level > logging.INFO or root.level == logging.NOTSET:
        root.setLevel(logging.INFO)  # loads, unloads and evictions are the point: show them
    sock = bind_socket(host, port)  # before the banner: --port 0 shows the port it got
    port = bound_port(sock)
    shown = host if host not in ("0.0.0.0", "") else "127.0.0.1"
    endpoint_name = config["endpoint_name"] or "local"
    console.print(
        f"[bold]MME emulator[/] starting: store [cyan]{emulator.store.description}[/], "
        f"endpoint [green]http://{shown}:{port}[/] (Ctrl-C or SIGTERM stops it)\n"
        + _invoke_hint(emulator.store, f"http://{shown}:{port}", endpoint_name)
        # boto3 signs every call: with no credentials or region it raises before sending
        + "\n  (any AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY and region will do: boto3 "
        "needs some to sign, the emulator checks none)"
        + f"\n  metrics: http://{shown}:{port}/metrics   state: "
        f"http://{shown}:{port}/emulator/state",
        highlight=False,
    )
    with contextlib.suppress(KeyboardInterrupt):
        timeouts = HttpTimeouts(header_s=header_s, body_s=body_s, idle_s=idle_s)
        run(
            serve_forever(
                emulator, host=host, port=port, timeouts=timeouts, freeze_gc=True, sock=sock
            )
        )
    console.print("emulator stopped")


def _invoke_hint(store: Any, url: str, endpoint_name: str) -> str:
    """The banner's boto3 line, with a TargetModel the store holds; for an empty store,
    how to put one there (the markup of the banner is escaped here)."""
    from rich.markup import escape

    from mmelocal.emulator.store import S3Store, sample_targets

    targets = sample_targets(store)
    if targets == []:
        where = escape(store.description)
        if isinstance(store, S3Store):
            add = f"upload a model.tar.gz under {where} (TargetModel is its key there)"
        else:
            add = (
                f"write one with `mmelocal package MODEL_DIR --out {where}` (TargetModel is "
                "the file name, model.tar.gz)"
            )
        return f"  the store holds no model archive yet: {add}; one added later is served"
    target = targets[0] if targets else "KEY-UNDER-THE-STORE.tar.gz"
    return escape(
        f"  boto3: boto3.client('sagemaker-runtime', endpoint_url='{url}')"
        f".invoke_endpoint(EndpointName='{endpoint_name}', TargetModel='{target}', ...)"
    )
