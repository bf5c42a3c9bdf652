"""``mmelocal benchmark``: deploy -> capacity -> load test -> sweep -> report -> undeploy on
real SageMaker endpoints, after showing what it will cost and asking."""

from __future__ import annotations

import functools
import os
import tempfile
from pathlib import Path
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from mmelocal.bench.endpoint.benchmark import BenchmarkPlan
from mmelocal.bench.endpoint.capacity import RemoteCapacityOptions
from mmelocal.bench.loadtest.shape import stepped_shape
from mmelocal.cli._bench import (
    content_type_option,
    copy_loop_options,
    loop_limits,
    ms,
    parse_duration_s,
    prepare_outputs,
    prices_option,
    sweep_grid_options,
    write_outputs,
)
from mmelocal.cli._defaults import default_of, field_option
from mmelocal.cli._loadgen import generators_from, loadgen_options
from mmelocal.cli._options import (
    OUT_DIR,
    json_option,
    payload_option,
    region_option,
    typed_flags,
)
from mmelocal.cli._output import console, err_console
from mmelocal.deploy.plan import DEFAULT_INSTANCE_TYPE


@click.command()
@click.argument("sources", nargs=-1, required=True)
@click.option(
    "--endpoint",
    "existing",
    default=None,
    help="Measure on this deployed endpoint (one SOURCE); nothing is created or deleted.",
)
@click.option("--endpoint-name", default="", help="Base name: <name>-pt, <name>-trt ...")
@click.option("--s3-uri", default="", help="s3://bucket/prefix/ (one sub-prefix per framework).")
@click.option("--role", "role_arn", default="", help="SageMaker execution role ARN.")
@click.option(
    "--instance-type",
    default=DEFAULT_INSTANCE_TYPE,
    show_default=True,
    help="Of the endpoints to deploy (with --endpoint: that endpoint's).",
)
@region_option()
@click.option("--image", default=None, help="Container image URI (default: SageMaker's Triton).")
@click.option(
    "--model-name", default=None, help="Name in the comparison (default: the stems' common start)."
)
@click.option(
    "--format",
    "model_format",
    default="torchscript",
    show_default=True,
    help="Format to build a SOURCE that is not a tarball or model folder in.",
)
@payload_option("Request body for every SOURCE (default: each model's recorded sample inputs).")
@content_type_option
@copy_loop_options(
    memory_budget_help="Only for an endpoint without a GPU (its probe reads host memory)."
)
@field_option(
    stepped_shape,
    "max_users",
    type=click.IntRange(min=1),
    help="Last step of the load test's stepped shape.",
)
@click.option("--duration", default=None, help="Fit the load test into this time (e.g. 5m).")
@click.option(
    "--sweep/--no-sweep",
    "with_sweep",
    default=True,
    show_default=True,
    help="Sweep the configurations on the last SOURCE's endpoint.",
)
@sweep_grid_options
@prices_option
@loadgen_options
@click.option("--yes", is_flag=True, help="Do not ask before creating billable resources.")
@click.option("--keep-endpoints", is_flag=True, help="Leave the endpoints running at the end.")
@click.option(
    "--poll",
    default=f"{default_of(BenchmarkPlan, 'poll_s'):g}s",
    show_default=True,
    help="How often to ask whether it is InService.",
)
@click.option("--report", "report_dir", type=OUT_DIR, help="Report here.")
@json_option()
def benchmark(sources: tuple[str, ...], **kw: Any) -> None:
    """Run the published MME GPU benchmark on real endpoints: for each SOURCE (one per
    framework, e.g. resnet50-pt.tar.gz resnet50-trt.tar.gz) deploy an endpoint, count the
    copies that fit, load-test them, sweep the configurations on the last one, undeploy.
    With --endpoint NAME: the same on that deployed endpoint, for one SOURCE.

    \b
    mmelocal benchmark resnet50-pt.tar.gz resnet50-trt.tar.gz --endpoint-name rn50 \\
        --s3-uri s3://my-bucket/bench/ --role arn:aws:iam::123456789012:role/SageMaker \\
        --instance-type ml.g4dn.xlarge --report out/
    """
    from mmelocal.bench.endpoint.benchmark import prepare, run_benchmark
    from mmelocal.bench.endpoint.capacity import model_stem
    from mmelocal.bench.prices import load_prices
    from mmelocal.cli._remote import remote_tarball
    from mmelocal.cli.sweep import sweep_options
    from mmelocal.deploy.temporary import temporary_endpoint

    prepare_outputs(kw["json_out"], kw["report_dir"])
    if kw["existing"] is not None:
        from mmelocal.bench.endpoint.remote import connect_endpoint

        kw["instance_type"] = connect_endpoint(
            kw["existing"], region=kw["region"]
        ).info.instance_type
    with tempfile.TemporaryDirectory(prefix="mmelocal-benchmark-") as tmp:
        tarballs = tuple(
            remote_tarball(source, Path(tmp) / str(i), kw["model_format"])
            for i, source in enumerate(sources)
        )
        shape = stepped_shape(max_users=kw["max_users"])
        if kw["duration"]:
            shape = shape.fitted(parse_duration_s(kw["duration"]))
        plan = BenchmarkPlan(
            tarballs=tarballs,
            model=kw["model_name"] or common_name([model_stem(t) for t in tarballs]),
            endpoint_name=kw["endpoint_name"],
            s3_uri=kw["s3_uri"],
            role_arn=kw["role_arn"],
            instance_type=kw["instance_type"],
            region=kw["region"],
            image=kw["image"],
            shape=shape,
            capacity=loop_limits(RemoteCapacityOptions, kw),
            sweep=sweep_options(kw) if kw["with_sweep"] else None,
            keep_endpoints=kw["keep_endpoints"],
            payload=kw["payload"].read_bytes() if kw["payload"] is not None else None,
            content_type=kw["content_type"],
            poll_s=parse_duration_s(kw["poll"]),
            existing=kw["existing"],
            # a refusal of its options names the flags typed here
            deployer=functools.partial(
                temporary_endpoint, option_names=typed_flags(click.get_current_context())
            ),
            generators=generators_from(kw),
        )
        runs = prepare(plan)
        frameworks = [framework for _, framework, _ in runs]
        prices = load_prices(kw["prices_file"])
        console.print(_cost_table(plan, frameworks, prices))
        asked = plan.existing is None and not kw["yes"]
        if asked and not click.confirm("Create these billable resources?", default=False):
            err_console.print("nothing was created")
            raise SystemExit(1)
        with err_console.status("benchmark starting") as status:
            outcome = run_benchmark(plan, progress=status.update, runs=runs)
    console.print(_comparison_table(outcome.benchmarks))
    for sweep in outcome.sweeps:
        console.print(f"[bold]Sweep of {sweep.source}:[/] {sweep.recommendation}", highlight=False)
    for item in outcome.deleted:  # what undeploy kept says so itself
        kept = item.startswith(("kept ", "left "))
        console.print(item if kept else f"deleted {item}", highlight=False, soft_wrap=True)
    if outcome.results:
        write_outputs(
            outcome.results, kw["json_out"], kw["report_dir"], title=f"Benchmark of {plan.model}"
        )
    for problem in outcome.problems:
        err_console.print(f"[bold red]failed[/] {escape(problem)}", highlight=False)
    if outcome.problems:
        raise SystemExit(1)


def common_name(stems: list[str]) -> str:
    """``resnet50-pt`` and ``resnet50-trt`` -> ``resnet50`` (one stem: itself)."""
    # character by character on purpose: these are names, not paths
    return os.path.commonprefix(stems).rstrip("-_.") or stems[0]  # noqa: RUF071


def _cost_table(plan: Any, frameworks: list[str], prices: Any) -> Table:
    steps = plan.steps_s(frameworks)
    price = prices.price_for(plan.instance_type)
    hours = sum(seconds for _, seconds in steps) / 3600.0
    cost = (
        f"{hours:.2f} h x {price:g} {prices.currency}/h = {hours * price:,.2f} {prices.currency}"
        if price is not None
        else f"{hours:.2f} h; no price for {plan.instance_type} in {prices.origin} (--prices)"
    )
    title = (
        f"On endpoint {plan.existing} (running already: nothing is created)"
        if plan.existing is not None
        else f"Billable: one {plan.instance_type} endpoint at a time, {len(frameworks)} in all "
        f"({', '.join(plan.endpoint_for(f) for f in frameworks)})"
    )
    table = Table(
        title=title,
        caption=f"expected {cost}; an estimate (endpoint creation ~10 min, ~15 s per copy), "
        f"prices from {prices.origin}",
        title_justify="left",
    )
    table.add_column("step")
    table.add_column("expected", justify="right")
    for name, seconds in steps:
        table.add_row(name, f"{seconds / 60:,.1f} min")
    return table


def _comparison_table(benchmarks: Any) -> Table:
    from mmelocal.bench.endpoint.result import comparison_rows

    results = list(benchmarks)
    cpu = any(b.on_cpu for b in results)
    table = Table(
        title="Comparison (steps without a failed request)"
        + (": CPU figures (host memory, CPU latency), not GPU figures" if cpu else ""),
        title_justify="left",
    )
    columns = ("instance type", "model", "framework", "models loaded", "latency ms")
    for column in (*columns, "req/s", "max users", "figures from"):
        table.add_column(
            column, justify="left" if column in (*columns[:3], "figures from") else "right"
        )
    for row in comparison_rows(results):
        pct = row["framework"].endswith("(%)")
        on_cpu = "CPU" in row["figures_from"]

        def cell(value: Any, *, pct: bool = pct, unit: str = "") -> str:
            if value is None:
                return "-"
            return (
                f"{value:+.1f} %"
                if pct
                else (f"{value:,}" if isinstance(value, int) else ms(value)) + unit
            )

        speed = " (CPU)" if on_cpu else ""
        table.add_row(
            row["instance_type"], row["model"], row["framework"],
            cell(row["max_models_loaded"]), cell(row["latency_ms"], unit=speed),
            cell(row["throughput_rps"], unit=speed), cell(row["max_users"]),
            escape(row["figures_from"]),
        )  # fmt: skip
    return table


__all__ = ["benchmark", "common_name"]
