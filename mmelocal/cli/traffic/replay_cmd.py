"""``mmelocal traffic replay``: replay a trace open loop against an endpoint."""

from __future__ import annotations

from pathlib import Path

import click

from mmelocal.cli._defaults import default_of, field_option
from mmelocal.cli._options import payload_option, region_option
from mmelocal.cli.traffic._shared import (
    _outputs,
    _print_result,
    _progress,
    _trace_argument,
    _write_outputs,
)
from mmelocal.traffic.replay import ReplayOptions
from mmelocal.traffic.replay import replay as run_replay


@click.command()
@_trace_argument
@click.option("--url", default=None, help="mmelocal serve's URL (or an .../invocations URL).")
@click.option("--endpoint-name", default=None, help="A SageMaker endpoint, called through boto3.")
@click.option("--endpoint-url", default=None, help="With --endpoint-name: the local AWS's URL.")
@region_option("With --endpoint-name: the AWS region.")
@payload_option("The request body sent with every request.", required=True)
@field_option(ReplayOptions, "content_type", help="Content-Type of the request body.")
@field_option(
    ReplayOptions,
    "speed",
    type=float,
    help="Send the trace K times faster (timestamp / K); measured times stay the endpoint's.",
)
@field_option(
    ReplayOptions,
    "max_in_flight",
    type=int,
    help="Safety cap: fail (never slow down) when this many requests are unanswered.",
)
@click.option(
    "--max-lag-ms",
    type=float,
    default=default_of(ReplayOptions, "max_lag_s") * 1e3,
    show_default=True,
    help="Fail when the sender is this late on a request's time.",
)
@field_option(
    ReplayOptions,
    "max_rate_rps",
    "--max-rate",
    type=float,
    help="Refuse a trace peaking above this many requests/s (after --speed).",
)
@click.option(
    "--store", default=None, help="Check every target exists here first (folder or s3://)."
)
@field_option(
    run_replay,
    "workers",
    type=int,
    help="Send over N Locust workers (the load tests'), the schedule sharded by model; "
    "0: this process sends (with --url).",
)
@_outputs(html=True)
def replay(
    trace_path: Path,
    url: str | None,
    endpoint_name: str | None,
    endpoint_url: str | None,
    region: str | None,
    payload: Path,
    content_type: str,
    speed: float,
    max_in_flight: int,
    max_lag_ms: float,
    max_rate_rps: float,
    store: str | None,
    workers: int,
    json_out: Path | None,
    html_out: Path | None,
) -> None:
    """Replay TRACE open loop against an endpoint and report what happened."""
    from mmelocal.traffic.trace import read_trace

    trace = read_trace(trace_path)
    options = ReplayOptions(
        speed=speed,
        max_in_flight=max_in_flight,
        max_lag_s=max_lag_ms / 1e3,
        max_rate_rps=max_rate_rps,
        content_type=content_type,
    )
    body = payload.read_bytes()
    with _progress("replay") as progress:
        result = run_replay(
            trace,
            body=body,
            url=url,
            endpoint_name=endpoint_name,
            endpoint_url=endpoint_url,
            region=region,
            store=store,
            options=options,
            progress=progress,
            workers=workers,
        )
    _print_result(result, f"replay of {trace_path.name}")
    _write_outputs(result, json_out, html_out, f"Replay of {trace_path.name}")
