"""``mme_endpoint`` on a deployed multi-model endpoint (``pytest --mmelocal-endpoint NAME``).

:class:`RemoteMmeEndpoint` has the interface of :class:`~mmelocal.testing.endpoint.MmeEndpoint`
pointed at the real endpoint, so a test file written against the emulator runs unchanged:
``client()`` is boto3's ``sagemaker-runtime`` for the endpoint's region, ``endpoint_name``
its name, and ``add_tarball`` uploads under the S3 prefix it serves (the ``ModelDataUrl``
of its model, found through DescribeEndpoint, DescribeEndpointConfig and DescribeModel) as
``mmelocal deploy`` uploads a store, recording the checksum and the endpoint on the object.
:meth:`RemoteMmeEndpoint.close` (the fixture's teardown) deletes what the test uploaded; an
object that was under that key before the test is never replaced nor deleted. Under
pytest-xdist a worker's upload may be another worker's "object that was there before", so
the workers leave their uploads to the controller, which deletes them once every worker has
finished (:mod:`~mmelocal.testing.worker_uploads`).

What only the emulator has (``url``, ``store``, ``server``, ``state()``, ``metrics()``)
skips the test in the fixture (its ``skip`` is ``pytest.skip``), with a reason that names
it: SageMaker has nothing to check them against. Outside pytest it is a
:class:`~mmelocal.errors.UserInputError` with the same words (this module imports no test
framework).
The clients come from mmelocal's one factory (:func:`~mmelocal.facts.aws.aws_client`), so
``AWS_ENDPOINT_URL`` and profiles work as for ``mmelocal deploy``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from mmelocal.aws.session import AwsClients
from mmelocal.errors import UserInputError
from mmelocal.testing.endpoint import invoke_body

if TYPE_CHECKING:
    from mmelocal.testing.worker_uploads import UploadLedger

logger = logging.getLogger(__name__)

#: what the emulator has and a deployed endpoint has not: attribute -> what it is
LOCAL_ONLY = {
    "url": "the emulator's URL",
    "store": "the emulator's store folder",
    "server": "the emulator's server",
    "state()": "the emulator's /emulator/state page",
    "metrics()": "the emulator's /metrics page",
}


@dataclass(frozen=True)
class DeployedEndpoint:
    """A deployed MME as a test session finds it: its name, the clients of its region
    and the S3 prefix it serves."""

    name: str
    clients: AwsClients
    bucket: str
    prefix: str


def find_endpoint(name: str, region: str | None = None) -> DeployedEndpoint:
    """``name`` in ``region`` (None: the profile's or ``AWS_DEFAULT_REGION``), described;
    a :class:`~mmelocal.errors.DeployError` when there are no credentials or region, no such
    endpoint, or one that is not multi-model."""
    from mmelocal.aws.endpoint import describe_mme
    from mmelocal.aws.s3 import split_s3_uri
    from mmelocal.aws.session import connect

    clients = connect(region)
    bucket, prefix = split_s3_uri(describe_mme(clients, name).model_data_url)
    return DeployedEndpoint(name=name, clients=clients, bucket=bucket, prefix=prefix)


class RemoteMmeEndpoint:
    """A deployed endpoint seen by a test through the ``mme_endpoint`` interface."""

    def __init__(
        self,
        deployed: DeployedEndpoint,
        *,
        skip: Callable[[str], NoReturn] | None = None,
        ledger: UploadLedger | None = None,
    ) -> None:
        """``skip(reason)`` is called where a local-only member is used (the fixture passes
        ``pytest.skip``); None: a UserInputError with that reason. ``ledger``: where an
        xdist worker records its uploads, which :meth:`close` then leaves for the
        controller to delete once every worker has finished (another worker may be using
        them); None: :meth:`close` deletes them."""
        self.deployed = deployed
        self._skip = skip
        self._ledger = ledger
        self._uploaded: dict[str, str] = {}  # key -> SHA-256 of what this test uploaded
        self._clients: list[Any] = []

    @property
    def endpoint_name(self) -> str:
        """The deployed endpoint's name (pass it as ``EndpointName``)."""
        return self.deployed.name

    @property
    def region(self) -> str:
        """The endpoint's region."""
        return self.deployed.clients.region

    def client(self, **config: Any) -> Any:
        """boto3's ``sagemaker-runtime`` client for the endpoint's region (your credentials;
        boto3's endpoint settings, ``AWS_ENDPOINT_URL`` included). Keyword arguments go to
        ``botocore.config.Config``, as with the emulator."""

        from mmelocal.facts.aws import TESTING, aws_client, new_session

        session = new_session(region_name=self.region)
        client = aws_client("sagemaker-runtime", TESTING, session=session, **config)
        self._clients.append(client)
        return client

    def add_tarball(self, target: str, tarball: Path | str) -> str:
        """Upload ``tarball`` as TargetModel ``target`` under the endpoint's prefix, with
        the checksum and endpoint ``mmelocal deploy`` records; its ``s3://`` URI.

        An object already there with the same bytes (a deployed model) is used as it is
        and kept after the test; one with other bytes is refused: replacing it would change
        what the endpoint serves under that name, and an instance that loaded it keeps
        answering with the old model until it unloads it.
        """
        from mmelocal.aws.objects import ObjectStep, apply_objects, head_holds, head_object
        from mmelocal.aws.s3 import file_digest
        from mmelocal.errors import DeployError

        path, key = Path(tarball), self.deployed.prefix + target
        digest, size = file_digest(path), path.stat().st_size
        uri = f"s3://{self.deployed.bucket}/{key}"
        if key not in self._uploaded:
            existing = head_object(self._s3, self.deployed.bucket, key)
            if existing is not None:
                if head_holds(existing, size, digest):
                    return uri
                raise DeployError(
                    f"{uri} holds other bytes than {path}: endpoint {self.endpoint_name} "
                    f"serves them as {target}, and the test would replace them; give the "
                    "test's tarball a TargetModel name of its own, or deploy the store again"
                )
        step = ObjectStep(
            key=key, path=str(path), size_bytes=size, sha256=digest.sha256, action="upload"
        )
        if self._ledger is not None:  # before the upload: one that fails half-way counts
            self._ledger.record(self.deployed.bucket, key, digest.sha256)
        apply_objects(self._s3, self.deployed.bucket, [step], endpoint_name=self.endpoint_name)
        self._uploaded[key] = digest.sha256
        return uri

    def invoke(
        self, target: str, body: bytes | dict[str, Any], content_type: str = "application/json"
    ) -> bytes:
        """InvokeEndpoint through boto3; the raw answer body."""
        client = self._clients[0] if self._clients else self.client()
        return invoke_body(client, self.endpoint_name, target, body, content_type)

    def close(self) -> None:
        """Delete the objects this test uploaded that still hold what it uploaded (with a
        ``ledger``: none, the controller deletes them at the end of the session)."""
        uploaded = {key: {sha256} for key, sha256 in self._uploaded.items()}
        self._uploaded.clear()
        if self._ledger is None:
            delete_uploaded(self._s3, self.deployed.bucket, uploaded)

    @property
    def _s3(self) -> Any:
        return self.deployed.clients.s3

    def _local_only(self, name: str) -> NoReturn:
        reason = local_only_reason(name)
        if self._skip is not None:
            self._skip(reason)
        raise UserInputError(reason)

    @property
    def url(self) -> str:
        """Local-only: skips the test."""
        self._local_only("url")

    @property
    def store(self) -> Path:
        """Local-only: skips the test."""
        self._local_only("store")

    @property
    def server(self) -> Any:
        """Local-only: skips the test."""
        self._local_only("server")

    def state(self) -> dict[str, Any]:
        """Local-only: skips the test."""
        self._local_only("state()")

    def metrics(self) -> dict[str, float]:
        """Local-only: skips the test."""
        self._local_only("metrics()")


def delete_uploaded(s3: Any, bucket: str, uploaded: Mapping[str, Collection[str]]) -> None:
    """Delete each key of ``uploaded`` that still holds one of the SHA-256 it maps to (what
    a test uploaded there); a key replaced since, or one S3 would not let it read, is
    kept."""
    from mmelocal.aws.s3 import delete_objects
    from mmelocal.deploy.artifacts import MmelocalObject, UnreadableObject, mmelocal_object

    keys = []
    for key, sha256s in sorted(uploaded.items()):
        found = mmelocal_object(s3, bucket, key, 0)
        if isinstance(found, MmelocalObject) and found.sha256 in sha256s:
            keys.append(key)
        elif isinstance(found, UnreadableObject):
            logger.info("keeping s3://%s/%s: not read (HeadObject %s)", bucket, key, found.code)
        else:
            logger.info("keeping s3://%s/%s: replaced since the test uploaded it", bucket, key)
    delete_objects(s3, bucket, keys)


def local_only_reason(name: str) -> str:
    """Why ``mme_endpoint.NAME`` cannot be used on a deployed endpoint."""
    return (
        f"mme_endpoint.{name} is local-only ({LOCAL_ONLY[name]}): a deployed endpoint "
        "(--mmelocal-endpoint) has none, so this test runs on the emulator only"
    )


__all__ = [
    "LOCAL_ONLY",
    "DeployedEndpoint",
    "RemoteMmeEndpoint",
    "delete_uploaded",
    "find_endpoint",
    "local_only_reason",
]
