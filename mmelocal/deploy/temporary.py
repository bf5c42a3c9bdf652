"""An endpoint that lives for one ``with`` block: deployed on enter, taken down on exit
(also after an error), for measurements that need a fresh GPU (``mmelocal benchmark``
passes :func:`temporary_endpoint` to :class:`~mmelocal.bench.endpoint.benchmark.BenchmarkPlan`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

from mmelocal.aws.session import AwsClients, connect
from mmelocal.deploy.deployer import apply_plan, make_plan
from mmelocal.deploy.plan import DeployOptions
from mmelocal.deploy.resources import describe
from mmelocal.deploy.undeploy import undeploy
from mmelocal.errors import DeployError


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
) -> Iterator[AwsClients]:
    """Deploy ``store`` as ``endpoint_name`` (one instance, objects under ``s3_uri``) and
    yield the clients; on exit undeploy it with the objects recorded for it (its store, and
    what the bench placed under its prefix), but those another model reads, and nothing
    else (what went is appended to ``deleted``), unless ``keep``.

    The endpoint is the run's own: one of that name that exists already (mmelocal's or
    not) is refused before anything changes, never updated and deleted."""
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
            say(f"deleting {endpoint_name}")
            gone = undeploy(
                clients,
                endpoint_name,
                delete_artifacts=True,
                keep_shared=True,
                unrecorded=False,  # only what was placed for this endpoint
                poll_s=poll_s,
                on_status=lambda s: say(f"{endpoint_name}: {s}"),
            )
            if deleted is not None:
                deleted.extend(gone)


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
