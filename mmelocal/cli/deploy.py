"""``mmelocal deploy``: the store on a real SageMaker MME (``undeploy`` and ``smoke`` have
their own modules)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from mmelocal.cli._defaults import field_option
from mmelocal.cli._options import (
    CAPACITY_RESULT,
    IN_FILE,
    capacity_result_option,
    json_option,
    region_option,
    typed_flags,
)
from mmelocal.cli._output import console, env_option, err_console
from mmelocal.deploy.plan import DEFAULT_INSTANCE_TYPE, DeployOptions
from mmelocal.units import mib


@click.command()
@click.argument("store", type=click.Path(path_type=Path))
@click.option("--endpoint-name", required=True, help="SageMaker endpoint name.")
@click.option("--s3-uri", required=True, help="s3://bucket/prefix/ the tarballs go under.")
@click.option("--role", "role_arn", required=True, help="SageMaker execution role ARN.")
@click.option(
    "--instance-type",
    default=None,
    help=f"Instance type (default: the cheapest that holds --hot-models according to "
    f"--capacity, else {DEFAULT_INSTANCE_TYPE}); not with --capacity.",
)
@field_option(
    DeployOptions,
    "instance_count",
    type=click.IntRange(min=1),
    help="Instances the endpoint starts with (autoscaling's lower bound).",
)
@click.option(
    "--max-instances",
    type=click.IntRange(min=1),
    default=None,
    help="Autoscaling upper bound (default: twice --instance-count).",
)
@field_option(
    DeployOptions,
    "target_gpu_utilization",
    type=click.FloatRange(min=0, max=100, min_open=True),
    help="Target of the GPUUtilization tracking policy, in percent.",
)
@click.option("--image", default=None, help="Container image URI (overrides the Triton table).")
@field_option(
    DeployOptions,
    "triton_version",
    help="Release of SageMaker's Triton image (its tag, e.g. 24.09); not with --image.",
)
@click.option(
    "--env",
    "environment",
    multiple=True,
    callback=env_option,
    help="KEY=VALUE for the container (repeatable); SAGEMAKER_TRITON_* keys are checked as "
    "SageMaker's Triton entrypoint reads them.",
)
@region_option()
@click.option(
    "--capacity",
    type=IN_FILE,
    help="A GPU capacity, estimate or projection result (mmelocal capacity [estimate] --json) "
    "to size the instance.",
)
@click.option(
    "--hot-models",
    type=click.IntRange(min=1),
    default=None,
    help="With --capacity: models that must stay loaded at once on one instance (default: "
    "the whole store).",
)
@capacity_result_option()
@click.option("--dry-run", is_flag=True, help="Print the plan and stop: nothing changes.")
@json_option(
    "Write what the deploy did as JSON to FILE ('-': stdout, the tables go to stderr): "
    "the endpoint's final status, the objects moved, each request's result, the time taken, "
    "the error (also on failure), and the plan.",
)
@click.option("--no-wait", is_flag=True, help="Do not wait for InService (no autoscaling then).")
@click.option(
    "--prune/--no-prune",
    default=True,
    help="Delete the objects this endpoint's earlier deploys uploaded that STORE no longer "
    "has (default; the endpoint serves all its prefix holds). Objects another model reads, "
    "or that mmelocal did not upload for this endpoint, are kept and listed.",
)
@click.option(
    "--prune-unrecorded",
    is_flag=True,
    help="Also prune the objects under the prefix that record no endpoint (uploaded by "
    "mmelocal 2026-11-24 or earlier): you say they are this endpoint's. Those another "
    "model reads are kept still.",
)
@click.option(
    "--replace-foreign",
    is_flag=True,
    help="Let STORE's tarballs replace the objects at their keys that mmelocal did not "
    "upload for this endpoint (your own, another tool's, another endpoint's): you say they "
    "may go. Without it such a deploy is refused, naming them.",
)
def deploy(
    store: Path,
    instance_type: str | None,
    region: str | None,
    capacity: Path | None,
    hot_models: int | None,
    capacity_pick: str | None,
    dry_run: bool,
    json_out: Path | None,
    no_wait: bool,
    **fields: Any,
) -> None:
    """Upload STORE's tarballs and create or update a SageMaker multi-model endpoint.

    The plan (objects to upload, copy or skip; every API request) is printed first and
    validated against botocore's service models; --dry-run stops there. Running deploy
    again resumes an interrupted one; 'mmelocal undeploy NAME' removes what it created.
    A tarball removed from STORE is deleted from S3 (see --prune).
    """
    from mmelocal.deploy.outcome import DeployOutcome

    out = err_console if json_out is not None and str(json_out) == "-" else console
    outcome = DeployOutcome(endpoint_name=fields["endpoint_name"], dry_run=dry_run)
    held: dict[str, Any] = {}
    try:
        sizing = (capacity, hot_models, capacity_pick)
        _deploy(outcome, held, out, store, instance_type, region, sizing, no_wait,
                fields)  # fmt: skip
    except click.UsageError:  # the command line is wrong: nothing ran, nothing to report
        raise
    except BaseException as exc:
        outcome.finish(error=exc)
        _write_outcome(outcome, held, json_out, out)
        raise
    outcome.finish()
    _write_outcome(outcome, held, json_out, out)


def _deploy(
    outcome: Any,
    held: dict[str, Any],
    out: Any,
    store: Path,
    instance_type: str | None,
    region: str | None,
    sizing: tuple[Path | None, int | None, str | None],
    no_wait: bool,
    fields: dict[str, Any],
) -> None:
    """The deploy itself; ``outcome`` records what it did, ``held`` keeps its clients."""
    from mmelocal.aws.session import connect
    from mmelocal.deploy.artifacts import replaced_notice
    from mmelocal.deploy.deployer import left_over, make_plan, unrecorded_notice
    from mmelocal.errors import DeployError

    if fields["prune_unrecorded"] and not fields["prune"]:  # a usage error, read before all
        raise click.UsageError(
            "--prune-unrecorded prunes: drop --no-prune (or drop --prune-unrecorded to keep "
            "every object)"
        )
    chosen = _instance_type(instance_type, *sizing, store, out)
    ctx = click.get_current_context()
    # the other options are named after the DeployOptions fields they set; a refusal
    # names the flags the user typed
    options = DeployOptions(
        store=store,
        instance_type=chosen,
        wait=not no_wait,
        option_names=typed_flags(ctx),
        **fields,
    )
    _refuse_unread(ctx, options)
    clients = held["clients"] = connect(region)
    with err_console.status("planning: reading the bucket and the endpoint") as spinner:

        def on_head(done: int, total: int) -> None:
            spinner.update(f"planning: reading the objects' metadata, {done}/{total}")

        plan = outcome.plan = make_plan(options, clients, on_head=on_head)
    _print_plan(plan, options, out)
    replaced = replaced_notice(plan)
    if replaced is not None:
        out.print(replaced, highlight=False, soft_wrap=True)
    unrecorded = unrecorded_notice(plan)
    if outcome.dry_run:
        out.print("dry run: nothing was changed", highlight=False)
        if unrecorded is not None:
            out.print(unrecorded, highlight=False, soft_wrap=True)
        return
    try:
        status = outcome.waited = _apply(plan, clients, options, outcome)
    except KeyboardInterrupt:
        held["interrupted"] = True
        raise DeployError(
            f"interrupted: run the same deploy again to resume, or 'mmelocal undeploy "
            f"{options.endpoint_name} --delete-artifacts --s3-uri {options.model_data_url}' "
            "to remove what was made"
        ) from None
    out.print(f"[bold green]deployed[/] {options.endpoint_name}: {status}", highlight=False)
    out.print(outcome.summary(), highlight=False, soft_wrap=True)
    if unrecorded is not None:
        out.print(unrecorded, highlight=False, soft_wrap=True)
    outcome.left = left_over(plan) if status == "not waited" else None
    if outcome.left is not None:
        out.print(outcome.left, highlight=False, soft_wrap=True)


def _write_outcome(outcome: Any, held: dict[str, Any], json_out: Path | None, out: Any) -> None:
    """Write ``--json``: the endpoint as it is now (one DescribeEndpoint, unless the user
    interrupted the deploy or no client was made), then the outcome."""
    if json_out is None:
        return
    from mmelocal.cli._output import print_json
    from mmelocal.deploy.outcome import endpoint_state
    from mmelocal.errors import DeployError

    if "clients" in held and not held.get("interrupted"):
        try:
            outcome.endpoint = endpoint_state(held["clients"].sagemaker, outcome.endpoint_name)
        except DeployError as exc:  # the deploy's own error says more; this one is noted
            outcome.endpoint = {"error": str(exc)}
    if str(json_out) == "-":
        print_json(outcome.to_dict())
        return
    json_out.write_text(json.dumps(outcome.to_dict(), indent=2, default=str) + "\n")
    out.print(f"outcome written to {json_out}", highlight=False)


def _instance_type(
    given: str | None,
    capacity: Path | None,
    hot_models: int | None,
    pick: str | None,
    store: Path,
    out: Any,
) -> str:
    """``--instance-type``, else the type ``--capacity`` (its result ``--capacity-result``)
    sizes for ``--hot-models``, else the default; an option that would be ignored is
    refused, as a usage error."""
    for flag, value in (("--hot-models", hot_models), (CAPACITY_RESULT, pick)):
        if value is not None and capacity is None:
            raise click.UsageError(
                f"{flag} is only read with --capacity (a capacity result sizes the instance "
                f"type for the hot models): add --capacity FILE or drop {flag}"
            )
    if given is not None and capacity is not None:
        raise click.UsageError(
            f"--capacity picks the instance type, --instance-type {given} names one: give "
            "--instance-type or --capacity, not both"
        )
    if given is not None:
        return given
    if capacity is None:
        return DEFAULT_INSTANCE_TYPE
    from mmelocal.bench.capacity.sizing import cheapest_instance
    from mmelocal.deploy.upload import store_files

    hot = hot_models if hot_models is not None else len(store_files(store))
    choice = cheapest_instance(capacity, hot_models=hot, pick=pick, choose=CAPACITY_RESULT)
    out.print(choice.reason, highlight=False, soft_wrap=True)
    return choice.instance_type


def _refuse_unread(ctx: click.Context, options: DeployOptions) -> None:
    """A usage error for an option given on the command line that this deploy would not
    read (its default is never refused)."""

    def given(name: str) -> bool:
        return ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE

    if given("target_gpu_utilization") and options.scaling_max <= options.instance_count:
        raise click.UsageError(
            "--target-gpu-utilization is only read with autoscaling (the scaling policy): "
            f"give --max-instances above --instance-count ({options.instance_count}) or drop "
            "--target-gpu-utilization"
        )
    if given("triton_version") and options.image is not None:
        raise click.UsageError(
            "--image replaces the image --triton-version picks from the table: give --image "
            "or --triton-version, not both"
        )


def _apply(plan: Any, clients: Any, options: Any, outcome: Any) -> str:
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    from mmelocal.deploy.deployer import apply_steps
    from mmelocal.deploy.plan import split_s3_uri
    from mmelocal.deploy.upload import apply_objects, total_bytes

    moving = [o for o in plan.objects if o.action in ("upload", "copy", "delete")]
    if moving:
        done: list[Any] = []
        columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn())
        with Progress(*columns, TransferSpeedColumn(), console=err_console) as progress:
            label = f"S3: 0/{len(moving)} objects"
            task = progress.add_task(label, total=total_bytes(moving, "upload") or None)

            def on_object(step: Any) -> None:
                done.append(step)
                outcome.object_done(step)
                label = f"S3: {len(done)}/{len(moving)} objects (copies are server-side)"
                progress.update(task, description=label)

            apply_objects(
                clients.s3,
                split_s3_uri(plan.model_data_url)[0],
                plan.objects,
                endpoint_name=plan.endpoint_name,
                on_bytes=lambda n: progress.advance(task, n),
                on_object=on_object,
            )
    with err_console.status(f"endpoint {plan.endpoint_name}") as status:
        return str(
            apply_steps(
                plan,
                clients,
                options=options,
                on_status=lambda s: status.update(f"endpoint {plan.endpoint_name}: {s}"),
                on_step=outcome.step_done,
            )
        )


#: plan object action -> the S3 request it sends ("-": none)
_OBJECT_REQUESTS = {
    "upload": "PutObject",
    "copy": "CopyObject",
    "skip": "-",
    "delete": "DeleteObjects",
    "keep": "-",
}


def _print_plan(plan: Any, options: Any, out: Any) -> None:
    from rich.table import Table

    from mmelocal.deploy.upload import total_bytes

    title = f"deploy plan: {plan.endpoint_name} in {plan.region}, image {plan.image}"
    table = Table(title=title, title_justify="left")
    for column in ("#", "service", "request", "action", "resource", "details"):
        table.add_column(column, overflow="fold")
    row = 1
    for action, request in _OBJECT_REQUESTS.items():
        steps = plan.objects_by_action(action)
        if steps:
            detail = f"{len(steps)} object(s), {mib(total_bytes(steps, action), digits=1)}"
            if action == "copy":
                detail += " (server-side copies of identical bytes)"
            if action in ("delete", "keep"):  # not in the store: name them
                detail += ": " + "; ".join(f"{o.key} ({o.note})" for o in steps[:5])
                detail += f"; ... {len(steps) - 5} more" if len(steps) > 5 else ""
            table.add_row(str(row), "s3", request, action, plan.model_data_url, detail)
            row += 1
    for step in plan.steps:
        table.add_row(
            str(row), step.service, step.operation, step.action, step.resource, _details(step)
        )
        row += 1
    out.print(table)
    if options.wait:
        out.print(
            "then waits for the endpoint to be InService (FailureReason on failure)",
            highlight=False,
        )


def _details(step: Any) -> str:
    params = step.params
    if step.operation == "CreateModel" and params:
        container = params["PrimaryContainer"]
        env = ", ".join(f"{k}={v}" for k, v in container.get("Environment", {}).items())
        return f"{container['Mode']}, {container['ModelDataUrl']}" + (f", {env}" if env else "")
    if step.operation == "CreateEndpointConfig" and params:
        variant = params["ProductionVariants"][0]
        return (
            f"{variant['VariantName']}: {variant['InitialInstanceCount']} x "
            f"{variant['InstanceType']}, model {variant['ModelName']}"
        )
    if step.operation == "CreateEndpoint" and params:
        return f"config {params['EndpointConfigName']}"
    if step.operation == "UpdateEndpoint" and params:
        return f"to config {params['EndpointConfigName']} {step.note}"
    if step.needs_in_service:
        return f"{step.note} (once InService; skipped with --no-wait)"
    return str(step.note)
