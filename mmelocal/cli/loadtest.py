"""``mmelocal loadtest``: a Locust load test of an MME endpoint with the stepped shape."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from mmelocal.bench.loadtest.runner import MODES, LoadTestConfig, expand_targets
from mmelocal.bench.loadtest.shape import load_shape
from mmelocal.cli._bench import (
    content_type_option,
    loadtest_progress,
    output_options,
    parse_duration_s,
    prepare_outputs,
    steps_table,
    write_outputs,
)
from mmelocal.cli._defaults import field_option
from mmelocal.cli._loadgen import generators_from, loadgen_options
from mmelocal.cli._options import payload_option, region_option
from mmelocal.cli._output import console, err_console


@click.command()
@click.option(
    "--endpoint",
    required=True,
    help="http://HOST:PORT/endpoints/NAME (emulator), http://HOST:PORT (with --mode "
    "triton-v2), or a SageMaker endpoint name (boto3).",
)
@click.option(
    "--targets",
    default="model-{i}.tar.gz",
    show_default=True,
    help="TargetModel pattern; {i} is replaced by 0..COUNT-1 (plus --start).",
)
@click.option(
    "--count",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="How many copies to spread requests over (random per request).",
)
@field_option(expand_targets, "start", type=click.IntRange(min=0), help="First {i} value.")
@click.option(
    "--shape",
    default="stages",
    show_default=True,
    help="'stages' (warm-up 10 users, +2/s to 20, then steps of 20) or a YAML/JSON file.",
)
@field_option(
    load_shape, "max_users", type=click.IntRange(min=1), help="Last step of the stepped shape."
)
@click.option(
    "--duration",
    default=None,
    help="Fit the whole shape into this time (e.g. 90s, 5m); default: the shape's own.",
)
@payload_option("Request body file.")
@click.option(
    "--payload-from",
    type=click.Path(exists=True, path_type=Path),
    help="Build a KServe v2 JSON body from a built model folder or model.tar.gz.",
)
@content_type_option
@field_option(
    LoadTestConfig,
    "mode",
    type=click.Choice(MODES),
    help="How to call: invocations = POST /endpoints/NAME/invocations; triton-v2 = a "
    "Triton's /v2/models/TARGET/infer; boto3 = InvokeEndpoint; auto = from --endpoint.",
)
@region_option("AWS region for a real SageMaker endpoint.")
@field_option(
    LoadTestConfig, "timeout_s", "--timeout", type=float, help="Per-request timeout in seconds."
)
@click.option("--seed", type=int, default=None, help="Seed for the random target choice.")
@click.option(
    "--prewarm",
    is_flag=True,
    help="Call every target once before the test so cold loads are not measured (a "
    "target still loading, ModelNotReadyException, is asked again).",
)
@loadgen_options
@output_options
def loadtest(
    endpoint: str,
    targets: str,
    count: int,
    start: int,
    shape: str,
    max_users: int,
    duration: str | None,
    payload: Path | None,
    payload_from: Path | None,
    content_type: str,
    mode: str,
    region: str | None,
    timeout_s: float,
    seed: int | None,
    prewarm: bool,
    json_out: Path | None,
    report_dir: Path | None,
    **loadgen: Any,
) -> None:
    """Load-test an endpoint: each request targets a random one of COUNT copies."""
    from mmelocal.bench.loadtest.runner import run_loadtest, summary_lines
    from mmelocal.builder.payload import payload_from_model

    if (payload is None) == (payload_from is None):
        raise click.UsageError("give exactly one of --payload FILE or --payload-from MODEL")
    if payload is not None:
        body = payload.read_bytes()
    else:
        assert payload_from is not None
        body = payload_from_model(payload_from)
    load_shape_ = load_shape(shape, max_users=max_users)
    if duration is not None:
        load_shape_ = load_shape_.fitted(parse_duration_s(duration))
    config = LoadTestConfig(
        endpoint=endpoint,
        targets=expand_targets(targets, count, start=start),
        payload=body,
        shape=load_shape_,
        content_type=content_type,
        mode=mode,
        region=region,
        timeout_s=timeout_s,
        seed=seed,
        prewarm=prewarm,
        generators=generators_from(loadgen),
    )
    prepare_outputs(json_out, report_dir)
    console.print(
        f"load test of {endpoint}: {count} targets, {len(load_shape_.stages)} steps up to "
        f"{load_shape_.max_users} users, {load_shape_.duration_s:.0f} s"
    )
    with loadtest_progress() as progress:
        result = run_loadtest(config, progress=progress)
    console.print(steps_table(result))
    for line in summary_lines(result):
        console.print(line, markup=False)
    write_outputs([result], json_out, report_dir, title="Load test")
    if result.requests == 0:
        err_console.print("[bold red]no request completed[/]: nothing was measured")
        raise SystemExit(1)
    if result.failures == result.requests:
        err_console.print("[bold red]every request failed[/] (see the errors above)")
        raise SystemExit(1)
