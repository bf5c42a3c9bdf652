"""``mmelocal serve``: run the SageMaker multi-model endpoint emulator in front of Triton."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from mmelocal.cli._defaults import default_of, launcher_option
from mmelocal.cli._output import console, env_option, size_option
from mmelocal.emulator.emulator_config import EmulatorConfig
from mmelocal.emulator.http_server import HttpTimeouts
from mmelocal.units import GiB


def _http_timeout_option(flag: str, field: str, help: str) -> Callable[[Any], Any]:
    """An option for ``field`` of :class:`HttpTimeouts` (seconds; its default)."""
    return click.option(
        flag,
        type=click.FloatRange(min=0.01),
        default=default_of(HttpTimeouts, field),
        show_default=True,
        help=help,
    )


@click.command()
@click.option(
    "--store",
    required=True,
    help="Model store: a folder of *.tar.gz, or s3://bucket/prefix (TargetModel = key).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True)
@click.option(
    "--memory-threshold",
    type=click.FloatRange(0.0, 1.0, min_open=True),
    default=default_of(EmulatorConfig, "memory_threshold"),
    show_default=True,
    help="Evict before a load when memory in use would cross this fraction.",
)
@click.option(
    "--memory-budget",
    callback=size_option,
    help="Host memory per Triton instance (no GPU), e.g. 4GiB; default half the RAM.",
)
@click.option(
    "--disk-budget",
    type=str,
    callback=size_option,
    default=f"{default_of(EmulatorConfig, 'disk_budget_bytes') / GiB:g}GiB",
    show_default=True,
    help="Disk for extracted artifacts (least recently used unloaded ones are deleted).",
)
@click.option(
    "--cache-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Artifact cache folder (kept between runs); default a temporary folder.",
)
@click.option(
    "--instances",
    type=click.IntRange(min=1),
    help="Triton instances; default one per GPU, one without a GPU.",
)
@launcher_option(default_of(EmulatorConfig, "launcher"))
@click.option("--image", help="Container image for --launcher docker.")
@click.option(
    "--triton-url",
    "triton_urls",
    multiple=True,
    help="--launcher external: SAGEMAKER_URL[,V2_HTTP_URL] of a running Triton on this "
    "machine (repeat per instance).",
)
@click.option("--tritonserver", type=click.Path(path_type=Path), help="tritonserver binary.")
@click.option(
    "--endpoint-name",
    help="Only answer this endpoint name (others get ValidationError); default any name.",
)
@click.option(
    "--load-wait",
    type=click.FloatRange(min=0.1),
    default=default_of(EmulatorConfig, "load_wait_timeout_s"),
    show_default=True,
    help="Seconds a call waits for a cold load before ModelNotReadyException.",
)
@click.option("--s3-endpoint-url", help="S3-compatible endpoint for an s3:// store (default AWS).")
@click.option(
    "--max-payload",
    type=str,
    callback=size_option,
    default=default_of(EmulatorConfig, "max_payload_bytes"),
    show_default=f"{default_of(EmulatorConfig, 'max_payload_bytes'):,} bytes = 6MiB",
    help="Largest InvokeEndpoint body; larger ones get 413 as from the service.",
)
@_http_timeout_option(
    "--header-timeout",
    "header_s",
    "Seconds a client may take to send a request's headers (then 408, closed).",
)
@_http_timeout_option(
    "--body-timeout",
    "body_s",
    "Longest pause, in seconds, while a client sends a body (then 408, closed).",
)
@_http_timeout_option(
    "--idle-timeout",
    "idle_s",
    "Seconds a keep-alive connection may sit idle before it is closed.",
)
@click.option(
    "--env",
    "env",
    multiple=True,
    callback=env_option,
    help="KEY=VALUE of the model's Environment, as for deploy --env (repeatable): "
    "SAGEMAKER_TRITON_* keys give tritonserver the flags SageMaker's entrypoint would.",
)
def serve(
    store: str,
    host: str,
    port: int,
    memory_threshold: float,
    memory_budget: int | None,
    disk_budget: int,
    cache_dir: Path | None,
    instances: int | None,
    launcher: str,
    image: str | None,
    triton_urls: tuple[str, ...],
    tritonserver: Path | None,
    endpoint_name: str | None,
    load_wait: float,
    s3_endpoint_url: str | None,
    max_payload: int,
    header_timeout: float,
    body_timeout: float,
    idle_timeout: float,
    env: dict[str, str],
) -> None:
    """Run the MME emulator: boto3 InvokeEndpoint and KServe v2 on one port."""
    from mmelocal.emulator.emulator import Emulator
    from mmelocal.emulator.server import run, serve_forever

    config = EmulatorConfig(
        store=store,
        cache_dir=cache_dir,
        memory_threshold=memory_threshold,
        memory_budget_bytes=memory_budget,
        disk_budget_bytes=disk_budget,
        instances=instances,
        launcher=launcher,
        image=image,
        tritonserver=tritonserver,
        external_urls=triton_urls,
        endpoint_name=endpoint_name,
        load_wait_timeout_s=load_wait,
        s3_endpoint_url=s3_endpoint_url,
        max_payload_bytes=max_payload,
        sagemaker_env=env,
    )
    emulator = Emulator(config)
    root = logging.getLogger("mmelocal")
    if root.level > logging.INFO or root.level == logging.NOTSET:
        root.setLevel(logging.INFO)  # loads, unloads and evictions are the point: show them
    shown = host if host not in ("0.0.0.0", "") else "127.0.0.1"
    console.print(
        f"[bold]MME emulator[/] starting: store [cyan]{emulator.store.description}[/], "
        f"endpoint [green]http://{shown}:{port}[/] (Ctrl-C or SIGTERM stops it)\n"
        f"  boto3: boto3.client('sagemaker-runtime', endpoint_url='http://{shown}:{port}')"
        f".invoke_endpoint(EndpointName='{endpoint_name or 'local'}', "
        "TargetModel='model.tar.gz', ...)\n"
        f"  metrics: http://{shown}:{port}/metrics   state: http://{shown}:{port}/emulator/state",
        highlight=False,
    )
    with contextlib.suppress(KeyboardInterrupt):
        timeouts = HttpTimeouts(header_s=header_timeout, body_s=body_timeout, idle_s=idle_timeout)
        run(serve_forever(emulator, host=host, port=port, timeouts=timeouts, freeze_gc=True))
    console.print("emulator stopped")
