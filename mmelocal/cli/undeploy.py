"""``mmelocal undeploy``: delete what ``mmelocal deploy`` created for an endpoint."""

from __future__ import annotations

import click

from mmelocal.cli._options import region_option
from mmelocal.cli._output import console, err_console


@click.command()
@click.argument("name")
@region_option()
@click.option(
    "--delete-artifacts",
    is_flag=True,
    help="Also delete the S3 objects mmelocal uploaded for this endpoint (refused, before "
    "anything is deleted, while another model reads one of them).",
)
@click.option(
    "--s3-uri",
    default=None,
    help="With --delete-artifacts: a prefix to delete NAME's objects under besides the one "
    "its models name (a deploy interrupted before its model existed leaves them there).",
)
@click.option(
    "--unrecorded",
    is_flag=True,
    help="With --delete-artifacts: also delete the objects that record no endpoint (uploaded "
    "by mmelocal 2026-11-24 or earlier): you say they are NAME's. Kept, and named, without it.",
)
def undeploy(
    name: str, region: str | None, delete_artifacts: bool, s3_uri: str | None, unrecorded: bool
) -> None:
    """Delete what 'mmelocal deploy' created for endpoint NAME (and nothing else); say
    where the S3 objects it leaves are."""
    from rich.table import Table

    from mmelocal.aws.session import connect
    from mmelocal.deploy.deployer import undeploy as run_undeploy

    for flag, value in (("--s3-uri", s3_uri), ("--unrecorded", unrecorded)):
        if value and not delete_artifacts:
            raise click.UsageError(
                f"{flag} is only read with --delete-artifacts (which objects to delete): add "
                f"--delete-artifacts or drop {flag}"
            )
    clients = connect(region)
    with err_console.status(f"undeploying {name}") as spinner:

        def on_status(status: str) -> None:  # an endpoint in progress is waited out
            spinner.update(f"undeploying {name}: endpoint {status}, waiting for it to settle")

        def on_head(done: int, total: int) -> None:
            spinner.update(f"undeploying {name}: reading the objects' metadata, {done}/{total}")

        answer = run_undeploy(
            clients,
            name,
            delete_artifacts=delete_artifacts,
            unrecorded=unrecorded,
            s3_uri=s3_uri,
            on_status=on_status,
            on_head=on_head,
        )
    notes = [item for item in answer if item.startswith(("kept ", "left "))]
    deleted = [item for item in answer if item not in notes]
    if not deleted:
        hint = ""
        if delete_artifacts and s3_uri is None and not notes:  # no model names a prefix
            hint = (
                " (no model of it is left to name a prefix: to delete objects deployed for "
                "it, add --s3-uri s3://bucket/prefix/)"
            )
        console.print(f"nothing of mmelocal's to delete for {name}{hint}", highlight=False)
    else:
        table = Table(title=f"undeploy {name}: deleted", title_justify="left")
        table.add_column("resource")
        for item in deleted:
            table.add_row(item)
        console.print(table)
    for note in notes:
        console.print(note, highlight=False, soft_wrap=True)
