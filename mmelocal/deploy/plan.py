"""What a deploy will do, as plain data: the options, the objects and the API requests.

A :class:`DeployPlan` is computed before anything changes (read-only calls only), printed
as a table, written as JSON with ``--json``, and then applied step by step. Every step is
idempotent, so a deploy that was interrupted is resumed by running it again.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mmelocal.aws.objects import ObjectStep
from mmelocal.aws.s3 import SHA256_METADATA, split_s3_uri
from mmelocal.deploy.images import DEFAULT_TRITON_VERSION
from mmelocal.errors import DeployError, UserInputError
from mmelocal.facts.runtime_api import DEFAULT_VARIANT_NAME
from mmelocal.facts.sagemaker import (
    ENDPOINT_NAME_PATTERN,
    ENVIRONMENT_KEY_PATTERN,
    MAX_ENDPOINT_NAME_LENGTH,
    MAX_ENVIRONMENT_ENTRIES,
    MAX_ENVIRONMENT_TOTAL_BYTES,
    MAX_ENVIRONMENT_VALUE_BYTES,
    environment_bytes,
)
from mmelocal.runtime.entrypoint import check_sagemaker_env

logger = logging.getLogger(__name__)

#: the tag that marks what mmelocal created; its value is the endpoint name
TAG_KEY = "mmelocal:endpoint"
VARIANT_NAME = DEFAULT_VARIANT_NAME

# SageMaker's own patterns (botocore's service model) for names and role ARNs
_NAME = re.compile(ENDPOINT_NAME_PATTERN)
_ROLE_ARN = re.compile(r"^arn:aws[a-z\-]*:iam::\d{12}:role/?[a-zA-Z_0-9+=,.@\-_/]+$")
_ENV_KEY = re.compile(ENVIRONMENT_KEY_PATTERN)


#: the instance type when the user gives none and no capacity result (one A10G, 24 GB)
DEFAULT_INSTANCE_TYPE = "ml.g5.2xlarge"
#: the longest pause between two DescribeEndpoint polls (the first pause is 1 s, then doubles)
POLL_S = 30.0
#: how long deploy waits for InService, and undeploy for an endpoint in progress to settle
WAIT_TIMEOUT_S = 3600.0


@dataclass(frozen=True, kw_only=True)
class DeployOptions:
    """What ``mmelocal deploy`` was asked for (validated before any AWS call).

    ``max_instances`` defaults to twice ``instance_count``; autoscaling is registered only
    when it is above ``instance_count``. ``image`` overrides the Triton image table.
    ``prune``: delete the objects earlier deploys for this endpoint uploaded under the
    prefix that are no longer in the store (an MME serves all the prefix holds).
    ``prune_unrecorded``: also those that record no endpoint (uploaded by mmelocal
    2026-11-24 or earlier): the user says they are this endpoint's (a store tarball may
    replace one too). ``replace_foreign``: a store tarball may replace the object at its
    key that mmelocal did not upload for this endpoint (the user's own, another tool's,
    another endpoint's); without it the plan refuses and names them.

    ``option_names``: how the user named the fields where they are (the CLI's flags,
    ``{"max_instances": "--max-instances"}``, :func:`~mmelocal.cli.deploy` gives them), so
    that a refusal names what the user typed; a field not in it is named as the field.
    """

    store: Path
    endpoint_name: str
    s3_uri: str
    role_arn: str
    instance_type: str = DEFAULT_INSTANCE_TYPE
    instance_count: int = 1
    max_instances: int | None = None
    target_gpu_utilization: float = 60.0
    image: str | None = None
    triton_version: str = DEFAULT_TRITON_VERSION
    environment: Mapping[str, str] = field(default_factory=dict)
    wait: bool = True
    prune: bool = True
    prune_unrecorded: bool = False
    replace_foreign: bool = False
    poll_s: float = POLL_S
    timeout_s: float = WAIT_TIMEOUT_S
    option_names: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    def _named(self, name: str, value: object = None) -> str:
        """Field ``name`` as the user gave it: the flag of :attr:`option_names`, else the
        field (``name=value`` when ``value`` is given)."""
        if name in self.option_names:
            return self.option_names[name]
        return name if value is None else f"{name}={value!r}"

    def __post_init__(self) -> None:
        object.__setattr__(self, "store", Path(self.store))
        object.__setattr__(self, "environment", dict(self.environment))
        if not self.store.is_dir():
            raise DeployError(f"store {self.store} is not a folder of *.tar.gz")
        name = self.endpoint_name
        if len(name) > MAX_ENDPOINT_NAME_LENGTH or not _NAME.fullmatch(name):
            raise DeployError(
                f"endpoint name must be 1-{MAX_ENDPOINT_NAME_LENGTH} letters, digits or '-' "
                f"(neither first nor last), got {name!r}"
            )
        split_s3_uri(self.s3_uri)
        if not _ROLE_ARN.match(self.role_arn):
            raise DeployError(
                f"{self._named('role_arn')} must be an IAM role ARN such as "
                f"arn:aws:iam::123456789012:role/SageMakerExecution, got {self.role_arn!r}"
            )
        count = self._named("instance_count")
        if self.instance_count < 1:
            raise DeployError(f"{count} must be >= 1, got {self.instance_count}")
        if self.max_instances is not None and self.max_instances < self.instance_count:
            raise DeployError(
                f"{self._named('max_instances')} must be >= {count} ({self.instance_count}), "
                f"got {self.max_instances}"
            )
        if not 0 < self.target_gpu_utilization <= 100:
            raise DeployError(
                f"{self._named('target_gpu_utilization')} (the target GPU utilization) must "
                f"be in (0, 100], got {self.target_gpu_utilization}"
            )
        environment = self._named("environment")
        for key in self.environment:
            if not _ENV_KEY.match(key):
                raise DeployError(f"environment variable name {key!r} is not valid ({environment})")
        _check_environment_size(self.environment, environment)
        try:  # the same check as serve --env: what SageMaker's entrypoint makes of them
            warnings = check_sagemaker_env(self.environment)
        except UserInputError as exc:
            raise DeployError(str(exc)) from None
        for warning in warnings:
            logger.warning("%s", warning)
        if self.prune_unrecorded and not self.prune:
            raise DeployError(
                f"{self._named('prune_unrecorded')} prunes: drop {self._named('prune', False)}"
            )
        if self.poll_s <= 0 or self.timeout_s <= 0:
            raise DeployError("poll_s and timeout_s must be > 0")

    @property
    def bucket(self) -> str:
        """The S3 bucket of ``s3_uri``."""
        return split_s3_uri(self.s3_uri)[0]

    @property
    def prefix(self) -> str:
        """The key prefix of ``s3_uri`` ('' or ending with '/')."""
        return split_s3_uri(self.s3_uri)[1]

    @property
    def model_data_url(self) -> str:
        """The MME's ``ModelDataUrl``: the prefix with its trailing slash."""
        return f"s3://{self.bucket}/{self.prefix}"

    @property
    def scaling_max(self) -> int:
        """The autoscaling upper bound (``max_instances`` or twice ``instance_count``)."""
        return self.max_instances if self.max_instances is not None else 2 * self.instance_count


def _check_environment_size(environment: Mapping[str, str], named: str) -> None:
    if len(environment) > MAX_ENVIRONMENT_ENTRIES:
        raise DeployError(
            f"SageMaker takes at most {MAX_ENVIRONMENT_ENTRIES} variables in a model's "
            f"Environment, got {len(environment)} ({named})"
        )
    for key, value in environment.items():
        if len(value.encode()) > MAX_ENVIRONMENT_VALUE_BYTES:
            raise DeployError(
                f"environment variable {key} is {len(value.encode())} bytes: SageMaker takes "
                f"at most {MAX_ENVIRONMENT_VALUE_BYTES} bytes a value ({named})"
            )
    total = environment_bytes(environment)
    if total > MAX_ENVIRONMENT_TOTAL_BYTES:
        raise DeployError(
            f"the environment is {total} bytes of keys and values: SageMaker takes at most "
            f"{MAX_ENVIRONMENT_TOTAL_BYTES // 1024} KB ({MAX_ENVIRONMENT_TOTAL_BYTES} bytes) in "
            f"all ({named})"
        )


#: the object actions of a store's tarballs (the others, ``delete`` and ``keep``, are for
#: objects under the prefix that are not in the store)
STORE_ACTIONS = ("upload", "copy", "skip")


@dataclass(frozen=True, kw_only=True)
class ApiStep:
    """One API request: ``action`` is create, update, put, delete or reuse.

    ``needs_in_service``: SageMaker accepts the request only once the endpoint is
    InService (the autoscaling ones); the deployer waits before it, or skips it when told
    not to wait.
    """

    service: str
    operation: str
    resource: str
    action: str
    params: Mapping[str, Any] = field(default_factory=dict)
    note: str = ""
    needs_in_service: bool = False


@dataclass(frozen=True, kw_only=True)
class DeployPlan:
    """Everything a deploy will do, in order: objects first, then the API steps."""

    endpoint_name: str
    region: str
    image: str
    model_data_url: str
    objects: tuple[ObjectStep, ...]
    steps: tuple[ApiStep, ...]

    def objects_by_action(self, action: str) -> list[ObjectStep]:
        """The object steps with this action."""
        return [o for o in self.objects if o.action == action]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (what ``--json`` writes)."""
        return {
            "endpoint_name": self.endpoint_name,
            "region": self.region,
            "image": self.image,
            "model_data_url": self.model_data_url,
            "objects": [asdict(o) for o in self.objects],
            "steps": [{**asdict(s), "params": dict(s.params)} for s in self.steps],
        }


__all__ = [
    "DEFAULT_INSTANCE_TYPE",
    "POLL_S",
    "SHA256_METADATA",
    "STORE_ACTIONS",
    "TAG_KEY",
    "VARIANT_NAME",
    "WAIT_TIMEOUT_S",
    "ApiStep",
    "DeployOptions",
    "DeployPlan",
    "ObjectStep",
    "split_s3_uri",
]
