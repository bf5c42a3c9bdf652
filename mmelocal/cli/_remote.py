"""The ``--endpoint`` forms of ``capacity`` and ``sweep``: the published benchmark procedure
on a deployed multi-model endpoint (see docs/remote-benchmark.md)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from mmelocal.cli._bench import copy_line, projection_table, write_outputs
from mmelocal.cli._output import console, err_console

endpoint_option = click.option(
    "--endpoint",
    "endpoint_name",
    default=None,
    help="Measure on this deployed SageMaker multi-model endpoint instead of locally.",
)
s3_uri_option = click.option(
    "--s3-uri",
    default=None,
    help="With --endpoint: the endpoint's s3://bucket/prefix/ (default: its ModelDataUrl).",
)
region_option = click.option("--region", default=None, help="With --endpoint: the AWS region.")


def refuse_without_endpoint(endpoint_name: str | None, given: dict[str, Any]) -> None:
    """Stop with a usage error when an option only ``--endpoint`` reads (``given``: flag ->
    value; None or False when absent) comes without it, instead of measuring locally
    without it."""
    if endpoint_name is not None:
        return
    for flag, value in given.items():
        if value not in (None, False):
            raise click.UsageError(
                f"{flag} is only read with --endpoint (a deployed endpoint); add --endpoint "
                f"NAME or drop {flag}"
            )


def remote_tarball(source: str, workdir: Path, model_format: str) -> Path:
    """``source`` as one ``model.tar.gz``: as it is, packaged from a folder, or built."""
    from mmelocal.bench.sources import resolve_model
    from mmelocal.builder.package import package_model

    model = resolve_model(source, workdir=workdir, model_format=model_format)
    if model.path.is_file():
        return model.path
    return package_model(model.path, workdir / "packaged", filename=f"{model.name}.tar.gz")


def capacity_on_endpoint(
    source: str,
    *,
    endpoint_name: str,
    s3_uri: str | None,
    region: str | None,
    model_format: str,
    limits: Any,
    keep_copies: bool,
    gpus_file: Path | None,
    payload: bytes | None,
    content_type: str,
    json_out: Path | None,
    report_dir: Path | None,
) -> Any:
    """``mmelocal capacity SOURCE --endpoint NAME``: measure, print, write; returns the run
    (``limits``: the copy loop's ``RemoteCapacityOptions``)."""
    import tempfile

    from mmelocal.bench.capacity.projection import load_gpus
    from mmelocal.bench.endpoint.capacity import measure_endpoint_capacity
    from mmelocal.bench.endpoint.remote import connect_endpoint
    from mmelocal.builder.payload import payload_from_model

    endpoint = connect_endpoint(endpoint_name, region=region, s3_uri=s3_uri)
    info = endpoint.info
    console.print(
        f"[bold]capacity of {source}[/] on endpoint {info.name} ({info.instance_type}), "
        f"copies in {endpoint.s3_url}",
        highlight=False,
    )
    with tempfile.TemporaryDirectory(prefix="mmelocal-remote-") as tmp:
        tarball = remote_tarball(source, Path(tmp), model_format)
        body = payload if payload is not None else payload_from_model(tarball)
        run = measure_endpoint_capacity(
            endpoint,
            tarball,
            payload=body,
            options=limits,
            content_type=content_type,
            progress=_show_copy,
            gpus=load_gpus(gpus_file),
        )
    result = run.result
    for line in result.summary_lines():
        console.print(line, markup=False)
    if result.projection is not None:
        console.print(projection_table(result.projection))
    if keep_copies:
        folder = run.loaded[0].rsplit("/", 1)[0] if run.loaded else ""
        console.print(
            f"copies kept in {endpoint.s3_url}{folder}/; load-test them with: mmelocal "
            f"loadtest --endpoint {info.name} --targets '{_pattern(run.loaded)}' "
            f"--count {len(run.loaded)}",
            highlight=False,
            soft_wrap=True,
        )
    else:
        endpoint.delete(list(run.created))
    write_outputs([result], json_out, report_dir, title=f"Capacity on {info.instance_type}")
    return run


def sweep_on_endpoint(
    source: str,
    endpoint_name: str,
    s3_uri: str | None,
    region: str | None,
    options: Any,
    status: Any,
) -> Any:
    """``mmelocal sweep SOURCE --endpoint NAME``: the variants as TargetModels of NAME."""
    from mmelocal.bench.endpoint.remote import connect_endpoint
    from mmelocal.bench.endpoint.sweep import run_endpoint_sweep

    endpoint = connect_endpoint(endpoint_name, region=region, s3_uri=s3_uri)
    return run_endpoint_sweep(endpoint, source, options=options, progress=status.update)


def _pattern(targets: Sequence[str]) -> str:
    first = targets[0] if targets else "model-v0.tar.gz"
    return first.replace("-v0.tar.gz", "-v{i}.tar.gz")


def _show_copy(record: Any) -> None:
    err_console.print(copy_line(record, timing="first invocation"), highlight=False)


__all__ = [
    "capacity_on_endpoint",
    "endpoint_option",
    "refuse_without_endpoint",
    "region_option",
    "remote_tarball",
    "s3_uri_option",
    "sweep_on_endpoint",
]
