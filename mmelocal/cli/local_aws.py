"""``mmelocal local-aws``: S3, SageMaker, autoscaling and STS on one port, real endpoints."""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from typing import Any

import click

from mmelocal.cli._defaults import field_option
from mmelocal.cli._options import (
    OUT_DIR,
    listen_options,
    memory_budget_option,
    tritonserver_option,
)
from mmelocal.cli._output import console
from mmelocal.localaws import LocalAws


@click.command("local-aws")
@listen_options(port=4566)
@click.option(
    "--data",
    "data_dir",
    type=OUT_DIR,
    help="Folder for the state (saved at a clean stop, restored at the next start: S3 "
    "objects, models, configs, endpoints, scaling) and the endpoints' caches and Triton "
    "logs. Default: a temporary folder, nothing kept.",
)
@memory_budget_option(name="memory_budget_bytes")
@field_option(
    LocalAws,
    "launcher",
    type=click.Choice(["local", "docker"]),
    help="How each endpoint starts Triton: the pip tritonserver, or the container image.",
)
@tritonserver_option()
@field_option(
    LocalAws,
    "time_scale",
    type=click.FloatRange(min=0, min_open=True),
    help="Run the platform's clock N times faster: CloudWatch periods of 60/N real "
    "seconds, alarms and autoscaling cooldowns on that clock (timestamps stay real).",
)
def local_aws(time_scale: float, **options: Any) -> None:
    """A local AWS for SageMaker MME scripts: set AWS_ENDPOINT_URL and run them unchanged."""
    root = logging.getLogger("mmelocal")
    if root.level > logging.INFO or root.level == logging.NOTSET:
        root.setLevel(logging.INFO)  # endpoints starting, loads and evictions: show them
    stop = threading.Event()
    # every option is named after the LocalAws parameter it sets
    aws = LocalAws(time_scale=time_scale, **options)
    with aws:
        # absolute paths (a script run from another folder finds them) on whole lines (a
        # wrapped export pasted in a shell sets a variable it does not export)
        console.print(
            f"[bold]local AWS[/] (S3, SageMaker, sagemaker-runtime, application-autoscaling, "
            f"STS, CloudWatch, logs) on [green]{aws.url}[/]; data {aws.data_dir.resolve()}"
            + (
                f"\n  fast clock: x{time_scale:g} (one CloudWatch minute = {60 / time_scale:g} s)"
                if time_scale != 1.0
                else ""
            ),
            highlight=False,
        )
        console.print(
            f"  export AWS_ENDPOINT_URL={aws.url}\n"
            f"  export HTTPS_PROXY={aws.url} AWS_CA_BUNDLE={aws.ca_bundle.resolve()}",
            highlight=False,
            soft_wrap=True,
        )
        console.print(
            "  (HTTPS_PROXY and AWS_CA_BUNDLE: for libraries that hard-code AWS's addresses, "
            "as the SageMaker Python SDK does for STS)\n"
            "  (any AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY and region will do; "
            "Ctrl-C or SIGTERM stops it)",
            highlight=False,
        )

        def on_term(*_: Any) -> None:
            stop.set()

        with contextlib.suppress(ValueError):  # not the main thread (tests)
            signal.signal(signal.SIGTERM, on_term)
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait()
    console.print("local AWS stopped")
