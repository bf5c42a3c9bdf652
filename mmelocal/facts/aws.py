"""How mmelocal's AWS clients retry and time out, and the one factory that makes them.

Every boto3 client mmelocal creates (deploy's, the remote benchmark's, the emulator's S3
store, the local AWS's own calls, the load generator's, the test helpers') comes from
:func:`aws_client` with one of the policies below, so a retry count or a timeout is
written once, and a quota error that botocore's retry mode takes for throttling
(:data:`QUOTA_ERROR_CODES`) fails at once. ``retries`` is botocore's
``retries={"max_attempts": N}``: the retries after the first attempt (0: none). Timeouts
are in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from mmelocal.facts.sagemaker import INVOKE_TIMEOUT_S

#: boto3 wants a region even for a local endpoint; this one is used where none is set
LOCAL_REGION: Final = "us-east-1"
#: the region of an S3 bucket that has no LocationConstraint: GetBucketLocation answers null
#: for its buckets ("Buckets in Region us-east-1 have a LocationConstraint of null", S3 API
#: reference) and CreateBucket there takes none
S3_UNCONSTRAINED_REGION: Final = "us-east-1"


def bucket_region(location_constraint: str | None) -> str:
    """The region of a bucket whose GetBucketLocation answered ``location_constraint``."""
    return location_constraint or S3_UNCONSTRAINED_REGION


@dataclass(frozen=True, kw_only=True)
class ClientPolicy:
    """Retries and timeouts of one kind of AWS client."""

    #: what the policy is for (shown in docs and errors)
    purpose: str
    #: retries after the first attempt (botocore's ``max_attempts``)
    retries: int
    #: botocore's retry mode: "standard" backs off and retries throttling and 5xx answers
    mode: str = "standard"
    connect_timeout_s: float = 60.0
    read_timeout_s: float = 60.0

    @property
    def retry_options(self) -> dict[str, Any]:
        """botocore's ``retries=`` value for this policy."""
        return {"max_attempts": self.retries, "mode": self.mode}

    def config(self, **overrides: Any) -> Any:
        """This policy as a ``botocore.config.Config``; ``overrides`` are Config's own
        keyword arguments (``s3=``, ``signature_version=``, ``retries=`` ...) and win."""
        from botocore.config import Config

        options: dict[str, Any] = {
            "retries": self.retry_options,
            "connect_timeout": self.connect_timeout_s,
            "read_timeout": self.read_timeout_s,
        }
        options.update(overrides)
        return Config(**options)


#: A deploy's control-plane calls (S3, SageMaker, Application Auto Scaling): throttling is
#: common when many resources are created at once, so retry as the AWS SDKs' standard mode
#: does, up to 5 times.
CONTROL_PLANE: Final = ClientPolicy(purpose="AWS control plane", retries=5)
#: InvokeEndpoint on a real endpoint: the model's 60 s plus 10 s of the platform's own time
#: before the read gives up; 3 retries (a 503 while an instance restarts is retryable).
RUNTIME: Final = ClientPolicy(
    purpose="SageMaker runtime", retries=3, read_timeout_s=INVOKE_TIMEOUT_S + 10.0
)
#: A server on this machine or nearby (the emulator's S3 store, the local AWS's own calls):
#: fail in seconds, not minutes, when it does not answer; 2 retries.
LOCAL: Final = ClientPolicy(purpose="local server", retries=2, connect_timeout_s=5.0)
#: A load generator's calls: no retries, a failure is counted (not hidden by a retry); the
#: load test passes its per-request timeout.
LOAD_TEST: Final = ClientPolicy(purpose="load test", retries=0)
#: Tests against the emulator (``mmelocal.testing``): one retry in botocore's default
#: ("legacy") mode, as a user's client without a Config retries, and a long read (a cold
#: load on a busy CI machine).
TESTING: Final = ClientPolicy(purpose="tests", retries=1, mode="legacy", read_timeout_s=120.0)

POLICIES: Final = (CONTROL_PLANE, RUNTIME, LOCAL, LOAD_TEST, TESTING)

#: requests a deploy or an undeploy sends at once to one service (the HeadObject of every
#: object under the prefix, the describes of the account's models and endpoints): the
#: threads that send them, and the connection pool of the client they share (botocore's
#: ``max_pool_connections``, 10 by default: a thread beyond it waits, and urllib3 discards
#: the connection it returns to a full pool), so one is as large as the other
CONCURRENT_REQUESTS: Final = 16

#: botocore service name -> error codes that botocore's standard retry mode takes for
#: throttling (``ThrottledRetryableChecker._THROTTLED_ERROR_CODES`` in
#: ``botocore/retries/standard.py``: LimitExceededException is Kinesis's throttling error)
#: but that this service answers for a full quota, which no retry fills: Application Auto
#: Scaling's "A per-account resource limit is exceeded" (RegisterScalableTarget,
#: PutScalingPolicy) and CloudWatch Logs' "You have reached the maximum number of
#: resources that can be created" (both from botocore's service models). aws-sdk-go
#: stopped retrying the code for the same reason (aws/aws-sdk-go#1276).
QUOTA_ERROR_CODES: Final[dict[str, frozenset[str]]] = {
    "application-autoscaling": frozenset({"LimitExceededException"}),
    "logs": frozenset({"LimitExceededException"}),
}


#: botocore's parsed data files (service models, endpoint rules, partitions), per
#: ``AWS_DATA_PATH`` value: every session :func:`new_session` makes reads them from here, so a
#: process parses each file once, not once per session (SageMaker's service model alone takes
#: 50 ms to 1 s to parse, and a parse holds the GIL the local AWS's threads serve with)
_PARSED_DATA: dict[str | None, dict[Any, Any]] = {}


def new_session(**session_options: Any) -> Any:
    """``boto3.session.Session(**session_options)``: credentials, region and profile are read
    now, as boto3 reads them for a new session; only botocore's data files (the service
    models) are shared with the other sessions made here, parsed once per process and per
    ``AWS_DATA_PATH`` (botocore's own loader does that within one session)."""
    import boto3

    return boto3.session.Session(botocore_session=_botocore_session(), **session_options)


def service_model(service: str) -> Any:
    """botocore's model of ``service`` (``"sagemaker"``, ...) from the shared parsed files:
    what a check of a request against the model reads (``botocore.session.get_session()``
    makes a new loader, which parses the file again)."""
    return _botocore_session().get_service_model(service)


def _botocore_session() -> Any:
    """A new botocore session whose data loader shares :data:`_PARSED_DATA`."""
    import botocore.session

    core = botocore.session.Session()
    # as botocore's own (Session._register_data_loader): made at first use, once the
    # profile is set, from that profile's data path
    core.lazy_register_component(
        "data_loader", lambda: _shared_loader(core.get_config_variable("data_path"))
    )
    return core


def _shared_loader(data_path: str | None) -> Any:
    """botocore's loader for ``data_path`` (``create_loader``, as a session makes it) whose
    parsed files are :data:`_PARSED_DATA`'s."""
    from botocore.loaders import create_loader

    loader = create_loader(data_path)
    # the store of botocore's ``instance_cache`` ("the instance *must* provide a
    # ``self._cache`` dictionary"); Loader's own ``cache`` argument is not used (1.44)
    loader._cache = _PARSED_DATA.setdefault(data_path, {})
    return loader


def aws_client(
    service: str,
    policy: ClientPolicy,
    *,
    session: Any = None,
    endpoint_url: str | None = None,
    **config: Any,
) -> Any:
    """A boto3 client for ``service`` with ``policy``'s retries and timeouts.

    ``session`` is a ``boto3.session.Session`` (default: :func:`new_session`, which reads
    the credentials and region now); ``endpoint_url`` points the client elsewhere than AWS
    (None: boto3's own settings, ``AWS_ENDPOINT_URL*`` included); ``config`` goes to
    :meth:`ClientPolicy.config`.
    """
    if session is None:
        session = new_session()
    options = policy.config(**config)
    client = session.client(service, endpoint_url=endpoint_url, config=options)
    event = client.meta.service_model.service_id.hyphenize()
    client.meta.events.register(f"after-call.{event}", _RecordPolicy(policy, options.retries))
    codes = QUOTA_ERROR_CODES.get(service)
    if codes:
        # the first answer that is not None decides (botocore's Endpoint._needs_retry):
        # False here means no retry, whatever the retry mode's own handler says
        client.meta.events.register_first(f"needs-retry.{event}", _NoRetry(codes))
    return client


#: the key :func:`aws_client`'s clients add to a failed call's answer (the ``response`` of
#: botocore's ``ClientError``): the retries the client was made with, ``{"purpose": ...,
#: "retries": N, "mode": ...}`` (:func:`retry_policy_of` reads it), so that an error
#: message states the policy of the client that failed, not another's
RETRY_POLICY_KEY: Final = "MmelocalRetryPolicy"


class _RecordPolicy:
    """An ``after-call`` handler that writes the client's retry policy into an error answer
    (botocore raises the ``ClientError`` from that very dict, after the event)."""

    def __init__(self, policy: ClientPolicy, retries: dict[str, Any] | None) -> None:
        retries = retries or {}
        total = retries.get("total_max_attempts")
        self.record = {
            "purpose": policy.purpose,
            "retries": int(total) - 1 if total else int(retries.get("max_attempts", 0)),
            "mode": str(retries.get("mode", policy.mode)),
        }

    def __call__(self, parsed: Any = None, **_: Any) -> None:
        if isinstance(parsed, dict) and "Error" in parsed:
            parsed[RETRY_POLICY_KEY] = dict(self.record)


def retry_policy_of(response: Any) -> dict[str, Any] | None:
    """The retry policy :func:`aws_client` recorded on a failed call's ``response`` (None:
    the client was made elsewhere, with its own settings)."""
    found = response.get(RETRY_POLICY_KEY) if isinstance(response, dict) else None
    return dict(found) if isinstance(found, dict) else None


class _NoRetry:
    """A ``needs-retry`` handler that answers False (do not retry) for ``codes``."""

    def __init__(self, codes: frozenset[str]) -> None:
        self.codes = codes

    def __call__(self, response: Any = None, **_: Any) -> bool | None:
        if response is None:  # no answer (a connection error): the retry mode decides
            return None
        code = response[1].get("Error", {}).get("Code")
        return False if code in self.codes else None


#: the error codes botocore's retry modes take for throttling, and retry with backoff
#: (``ThrottledRetryableChecker._THROTTLED_ERROR_CODES`` in ``botocore/retries/standard.py``,
#: botocore 1.44): one of them reaching the caller came after every retry of the policy
THROTTLING_ERROR_CODES: Final = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottledException",
        "TooManyRequestsException",
        "ProvisionedThroughputExceededException",
        "TransactionInProgressException",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
        "LimitExceededException",
        "RequestThrottled",
        "SlowDown",
        "PriorRequestNotComplete",
        "EC2ThrottledException",
    }
)

#: S3 error codes a retry may clear, besides every 5xx status: botocore's standard retry
#: mode's transient and throttling codes (``botocore/retries/standard.py``:
#: ``TransientRetryableChecker``, ``ThrottledRetryableChecker``; S3 throttles with
#: ``SlowDown`` 503 and times out a slow upload with ``RequestTimeout`` 400)
S3_TRANSIENT_CODES: Final = frozenset(
    {
        "RequestTimeout",
        "RequestTimeoutException",
        "PriorRequestNotComplete",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
        "RequestThrottled",
        "SlowDown",
    }
)


#: HeadObject's refusals of one object that another object under the same prefix need not
#: share -> what they mean. A HEAD has no body, so S3 answers only "a generic code, such as
#: 400 Bad Request, 403 Forbidden, 404 Not Found, 405 Method Not Allowed, 412 Precondition
#: Failed, or 304 Not Modified" and botocore makes the status the error code (HeadObject API
#: reference); an object written with a customer-provided key (SSE-C) needs the
#: ``x-amz-server-side-encryption-customer-*`` headers for its metadata too (same page and
#: the S3 user guide, "Specifying server-side encryption with customer-provided keys"); HEAD
#: needs ``s3:GetObject`` on the object (same page, "Permissions"). 405 and 412/304 answer a
#: versionId or a condition, which mmelocal never sends.
HEAD_OBJECT_REFUSALS: Final = {
    "400": (
        "Bad Request, what an object written with a customer-provided key (SSE-C) answers "
        "without its key"
    ),
    "403": "Forbidden, as when no IAM or bucket policy gives your credentials s3:GetObject on it",
    "AccessDenied": "as when no IAM or bucket policy gives your credentials s3:GetObject on it",
}


def s3_error_class(exc: Any) -> str:
    """``"missing"``, ``"transient"`` or ``"refused"`` for a botocore ClientError from S3.

    S3 answers 404 (``NoSuchKey``; a HEAD, which has no body, has the status as its code)
    only for an object that is not there; 5xx and throttling are transient; any other
    refusal (403 ``AccessDenied``, ``InvalidObjectState`` ...) is the caller's to fix. A
    missing key is 403 too when the credentials lack ``s3:ListBucket`` (HeadObject and
    GetObject API references, "Permissions"), so a refusal's message names both.
    """
    response = getattr(exc, "response", {}) or {}
    status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
    code = str(response.get("Error", {}).get("Code", ""))
    if status == 404 or code in ("NoSuchKey", "NotFound", "404"):
        return "missing"
    if status >= 500 or status == 429 or code in S3_TRANSIENT_CODES:
        return "transient"
    return "refused"


__all__ = [
    "CONCURRENT_REQUESTS",
    "CONTROL_PLANE",
    "HEAD_OBJECT_REFUSALS",
    "LOAD_TEST",
    "LOCAL",
    "LOCAL_REGION",
    "POLICIES",
    "QUOTA_ERROR_CODES",
    "RETRY_POLICY_KEY",
    "RUNTIME",
    "S3_TRANSIENT_CODES",
    "S3_UNCONSTRAINED_REGION",
    "TESTING",
    "THROTTLING_ERROR_CODES",
    "ClientPolicy",
    "aws_client",
    "bucket_region",
    "new_session",
    "retry_policy_of",
    "s3_error_class",
    "service_model",
]
