"""An endpoint that lives for one ``with`` block: deployed on enter, taken down on exit
(also after an error), for measurements that need a fresh GPU (``mmelocal benchmark``
passes :func:`temporary_endpoint` to :class:`~mmelocal.bench.endpoint.benchmark.BenchmarkPlan`).
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from mmelocal.aws.session import AwsClients, connect
from mmelocal.deploy.deployer import apply_plan, make_plan
from mmelocal.deploy.plan import DeployOptions
from mmelocal.deploy.resources import describe
from mmelocal.deploy.undeploy import undeploy
from mmelocal.errors import DeployError

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def temporary_endpoint(
    *,
    store: Path,
    endpoint_name: str,
    s3_uri: str,
    role_arn: str,
    instance_type: str,
    region: str | None = None,
    image: str | None = None,
    poll_s: float = 30.0,
    keep: bool = False,
    say: Callable[[str], None] = lambda message: None,
    deleted: list[str] | None = None,
    option_names: Mapping[str, str] | None = None,
) -> Iterator[AwsClients]:
    """Deploy ``store`` as ``endpoint_name`` (one instance, objects under ``s3_uri``) and
    yield the clients; on exit undeploy it with the objects recorded for it (its store, and
    what the bench placed under its prefix), but those another model reads, and nothing
    else (what went is appended to ``deleted``), unless ``keep``.

    The endpoint is the run's own: one of that name that exists already (mmelocal's or
    not) is refused before anything changes, never updated and deleted. ``option_names``:
    :attr:`~mmelocal.deploy.plan.DeployOptions.option_names` (how the user named them)."""
    options = DeployOptions(
        store=store,
        endpoint_name=endpoint_name,
        s3_uri=s3_uri,
        role_arn=role_arn,
        instance_type=instance_type,
        instance_count=1,
        max_instances=1,
        image=image,
        poll_s=poll_s,
        option_names=option_names or {},
    )
    clients = connect(region)
    _refuse_existing(clients, endpoint_name)
    plan = make_plan(options, clients)  # read-only: a refusal leaves nothing to undo
    say(f"deploying {endpoint_name} ({instance_type})")
    try:
        apply_plan(
            plan,
            clients,
            options=options,
            on_status=lambda s: say(f"{endpoint_name}: {s}"),
        )
        yield clients
    finally:
        if not keep:
            _clean_up(clients, options, say, deleted)


def _clean_up(
    clients: AwsClients,
    options: DeployOptions,
    say: Callable[[str], None],
    deleted: list[str] | None,
) -> None:
    """Undeploy the temporary endpoint. Interrupted by a Ctrl-C (the user's second, when the
    first started this clean-up) or failed, it logs what may still run and bill and the
    command that removes it, then lets the exception go on: it never leaves silently."""
    name = options.endpoint_name
    if isinstance(sys.exc_info()[1], KeyboardInterrupt):
        logger.warning(
            "interrupted: deleting the temporary endpoint %s before exiting (it bills while it "
            "runs; Ctrl-C again leaves it running)",
            name,
        )
    say(f"deleting {name}")
    gone: list[str] = []
    try:
        undeploy(
            clients,
            name,
            delete_artifacts=True,
            keep_shared=True,
            unrecorded=False,  # only what was placed for this endpoint
            poll_s=options.poll_s,
            on_status=lambda s: say(f"{name}: {s}"),
            on_deleted=gone.append,
        )
    except BaseException as exc:
        logger.error("%s", _left_running(clients.region, options, gone, exc))
        raise
    finally:
        if deleted is not None:
            deleted.extend(gone)


def _left_running(region: str, options: DeployOptions, gone: list[str], exc: BaseException) -> str:
    """What an interrupted or failed clean-up left, and the exact command that removes it
    (an endpoint not known deleted may run: the deploy may have been stopped mid-request)."""
    name = options.endpoint_name
    why = "was interrupted" if isinstance(exc, KeyboardInterrupt) else f"failed ({exc})"
    if f"endpoint {name}" in gone:
        left = f"endpoint {name} is being deleted (no longer billing); what was made for it is not"
    else:
        left = f"endpoint {name} may still be running and billing ({options.instance_type})"
    done = f" (deleted already: {', '.join(gone)})" if gone else ""
    command = (
        f"mmelocal undeploy {name} --delete-artifacts --s3-uri {options.model_data_url} "
        f"--region {region}"
    )
    return (
        f"the clean-up of the temporary endpoint {name} {why}: {left}{done}. Remove it with: "
        f"{command}"
    )


def _refuse_existing(clients: AwsClients, name: str) -> None:
    found = describe(clients.sagemaker, "DescribeEndpoint", EndpointName=name)
    if found is None or found.get("EndpointStatus") == "Deleting":  # make_plan says to wait
        return
    raise DeployError(
        f"endpoint {name} exists ({found.get('EndpointStatus')}): the benchmark measures on "
        "an endpoint of its own, created for the run and deleted after it; choose another "
        f"--endpoint-name, or measure on {name} with --endpoint {name} (then it is kept)"
    )


__all__ = ["temporary_endpoint"]
