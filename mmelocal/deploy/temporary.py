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
from mmelocal.deploy.undeploy import undeploy


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
    yield the clients; on exit undeploy it with the objects mmelocal uploaded for it but
    those another model reads (what went is appended to ``deleted``), unless ``keep``."""
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
    say(f"deploying {endpoint_name} ({instance_type})")
    try:
        apply_plan(
            make_plan(options, clients),
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
                poll_s=poll_s,
                on_status=lambda s: say(f"{endpoint_name}: {s}"),
            )
            if deleted is not None:
                deleted.extend(gone)


__all__ = ["temporary_endpoint"]
