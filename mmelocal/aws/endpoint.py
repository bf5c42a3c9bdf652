"""A deployed multi-model endpoint as mmelocal finds it: DescribeEndpoint ->
DescribeEndpointConfig -> DescribeModel, down to the S3 prefix it serves.

The one place that reads a deployed endpoint for ``mmelocal smoke``, the pytest plugin's
``--mmelocal-endpoint`` and the endpoint bench (``capacity``/``sweep``/``benchmark
--endpoint``). The served container is the model's ``PrimaryContainer``, else the first of
its ``Containers`` (as the local AWS's fleet reads a model, ``localaws/fleet.py``); it must
be in mode ``MultiModel`` (a ``ContainerDefinition`` without ``Mode`` hosts a single model).

The refusals come in the order of what the user can do about them: an endpoint that does
not exist in the region, then one that is not multi-model (waiting cannot mend it), then
one whose status takes no requests (:data:`~mmelocal.facts.runtime_api.NO_REQUESTS_STATUSES`,
with its ``FailureReason``). A Deleting endpoint whose config is gone already answers with
its status, not with the missing config.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mmelocal.aws.session import AwsClients, aws_error, not_found
from mmelocal.errors import DeployError
from mmelocal.facts.runtime_api import NO_REQUESTS_STATUSES


@dataclass(frozen=True, kw_only=True)
class EndpointInfo:
    """What mmelocal needs to know of a deployed multi-model endpoint: its status, its
    first variant's instance type and count, its model and the S3 prefix it serves."""

    name: str
    status: str
    instance_type: str
    instance_count: int
    model_name: str
    model_data_url: str


def served_container(model: dict[str, Any]) -> dict[str, Any]:
    """The container of a DescribeModel answer that serves the endpoint: the
    ``PrimaryContainer``, else the first of ``Containers`` ({} when there is none)."""
    primary: dict[str, Any] = model.get("PrimaryContainer") or {}
    return primary or next(iter(model.get("Containers") or []), {})


def describe_mme(clients: AwsClients, name: str) -> EndpointInfo:
    """The multi-model endpoint ``name`` in ``clients.region``; a one-line
    :class:`~mmelocal.errors.DeployError` when it does not exist there, is not
    multi-model, or takes no requests now (in that order)."""
    sm = clients.sagemaker
    try:
        endpoint = sm.describe_endpoint(EndpointName=name)
    except Exception as exc:
        if not_found(exc):
            raise DeployError(
                f"endpoint {name} does not exist in {clients.region}: deploy it first, "
                "or name its region"
            ) from None
        raise aws_error(exc, "DescribeEndpoint", name) from exc
    status = str(endpoint.get("EndpointStatus", ""))
    idle: DeployError | None = None  # an endpoint that takes no requests now
    if status in NO_REQUESTS_STATUSES:
        reason = endpoint.get("FailureReason")
        idle = DeployError(
            f"endpoint {name} is {status}: it takes no requests"
            + (f" ({reason})" if reason else "")
            + "; test it once it is InService (mmelocal deploy creates or repairs it)"
        )
    try:
        config_name = endpoint["EndpointConfigName"]
        config = _call(sm, "DescribeEndpointConfig", name, EndpointConfigName=config_name)
        variant = config["ProductionVariants"][0]
        model = _call(sm, "DescribeModel", name, ModelName=variant["ModelName"])
    except Exception:
        if idle is not None:  # a Deleting endpoint's config may be gone already
            raise idle from None
        raise
    container = served_container(model)
    # what waiting cannot mend first: a single-model endpoint is refused whatever its status
    if container.get("Mode") != "MultiModel":
        raise DeployError(
            f"endpoint {name} is not a multi-model endpoint (its model {variant['ModelName']} "
            f"is in mode {container.get('Mode') or 'SingleModel'}): name one that serves an "
            "S3 prefix (Mode MultiModel)"
        )
    if idle is not None:
        raise idle
    current: dict[str, Any] = next(iter(endpoint.get("ProductionVariants") or []), {})
    return EndpointInfo(
        name=name,
        status=status,
        instance_type=str(variant.get("InstanceType", "")),
        instance_count=int(
            current.get("CurrentInstanceCount") or variant.get("InitialInstanceCount") or 1
        ),
        model_name=str(variant["ModelName"]),
        model_data_url=str(container.get("ModelDataUrl", "")),
    )


def _call(client: Any, operation: str, name: str, **params: Any) -> Any:
    """One describe call; a failure is a one-line DeployError naming the endpoint."""
    from botocore import xform_name

    try:
        return getattr(client, xform_name(operation))(**params)
    except Exception as exc:
        raise aws_error(exc, operation, name) from exc


__all__ = ["EndpointInfo", "describe_mme", "served_container"]
