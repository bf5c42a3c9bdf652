"""AWS credentials, region and clients, checked before the first call.

Endpoints come from boto3's own settings (``AWS_ENDPOINT_URL``,
``AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME``, profiles), so a corporate mirror or a local server
is reached without code changes. Every ``ClientError`` becomes a one-line
:class:`~mmelocal.errors.DeployError` through :func:`aws_error`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mmelocal.errors import DeployError
from mmelocal.facts.aws import (
    CONCURRENT_REQUESTS,
    CONTROL_PLANE,
    RUNTIME,
    THROTTLING_ERROR_CODES,
    aws_client,
    new_session,
    retry_policy_of,
)

#: error codes that mean "ask for more" (a quota, not a bug) -> where that quota is:
#: SageMaker's ResourceLimitExceeded (instances per type for endpoint usage, the usual one),
#: Application Auto Scaling's LimitExceededException (botocore's model: "A per-account
#: resource limit is exceeded"; its quotas page: scalable targets per resource type, 500,
#: adjustable; scaling policies per scalable target, 50, not adjustable)
_QUOTA_HINTS = {
    "ResourceLimitExceeded": (
        "request a higher quota in the Service Quotas console (SageMaker, "
        "'<instance type> for endpoint usage'), or pick another --instance-type"
    ),
    "LimitExceededException": (
        "an Application Auto Scaling quota is full ('Scalable targets per resource type': "
        "request more in the Service Quotas console, or deregister the scalable targets of "
        "endpoints you no longer use; 'Scaling policies per scalable target': 50)"
    ),
    "ServiceQuotaExceededException": "request a higher quota in the Service Quotas console",
}


@dataclass(frozen=True)
class AwsClients:
    """The clients a deploy uses, all in one region."""

    region: str
    s3: Any
    sagemaker: Any
    autoscaling: Any
    runtime: Any


def connect(region: str | None = None) -> AwsClients:
    """Clients for ``region`` (else the profile's or ``AWS_DEFAULT_REGION``); raises a
    :class:`DeployError` that says what to do when credentials or the region are missing."""
    from botocore.exceptions import BotoCoreError

    try:
        session = new_session(region_name=region)
        credentials = session.get_credentials()
    except BotoCoreError as exc:
        raise DeployError(f"cannot read the AWS configuration: {exc}") from exc
    if credentials is None:
        raise DeployError(
            "no AWS credentials found: run 'aws configure' (or 'aws sso login'), or set "
            "AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
        )
    if not session.region_name:
        raise DeployError("no AWS region: pass --region (e.g. us-east-1) or set AWS_DEFAULT_REGION")
    pool = CONCURRENT_REQUESTS  # S3 and SageMaker get as many calls at once (parallel.py)
    return AwsClients(
        region=session.region_name,
        s3=aws_client("s3", CONTROL_PLANE, session=session, max_pool_connections=pool),
        sagemaker=aws_client(
            "sagemaker", CONTROL_PLANE, session=session, max_pool_connections=pool
        ),
        autoscaling=aws_client("application-autoscaling", CONTROL_PLANE, session=session),
        runtime=aws_client("sagemaker-runtime", RUNTIME, session=session),
    )


def _response(exc: BaseException) -> dict[str, Any]:
    """The service's answer of a botocore ``ClientError``, also when boto3 wrapped it (its
    ``upload_file`` raises ``S3UploadFailedError`` from within ``except ClientError``)."""
    for error in (exc, exc.__cause__, exc.__context__):
        response = getattr(error, "response", None)
        if isinstance(response, dict) and response.get("Error"):
            return response
    return {}


def error_code(exc: BaseException) -> str:
    """The service's error code of a botocore ``ClientError`` ('' for anything else)."""
    return str(_response(exc).get("Error", {}).get("Code", ""))


#: the message SageMaker answers (ValidationException) to a CreateModel whose execution role
#: it cannot assume: "Could not assume role arn:aws:iam::...:role/NAME. Please ensure that
#: the role exists and allows principal 'sagemaker.amazonaws.com' to assume the role." (the
#: service's answer as quoted in awslabs/predictive-maintenance-using-machine-learning#3;
#: the same for the other Create* calls that take a role)
ROLE_NOT_ASSUMED = "Could not assume role"

_ACCESS_DENIED = ("AccessDenied", "AccessDeniedException", "UnrecognizedClientException")

#: an object under SSE-KMS: S3 answers the KMS error with a ``KMS.`` prefix
#: (``KMS.DisabledException``, ``KMS.NotFoundException``, ``KMS.KMSInvalidStateException``
#: ...), or AccessDenied naming the ``kms:`` action the caller may not do. Writing needs
#: kms:GenerateDataKey and kms:Decrypt (a multipart upload), reading kms:Decrypt (AWS
#: knowledge center, "s3-large-file-encryption-kms-key"); the key policy must grant the
#: role CreateModel names (SageMaker API reference, TransformOutput.KmsKeyId)
_KMS_HINT = (
    "the bucket or object is encrypted with an AWS KMS key (SSE-KMS): the key must be "
    "enabled (not disabled or pending deletion), your credentials need kms:GenerateDataKey "
    "and kms:Decrypt on it to upload (kms:Decrypt to read), and its key policy must let the "
    "SageMaker execution role (--role) use it too; 'aws s3api get-bucket-encryption "
    "--bucket BUCKET' names the key"
)

_ROLE_HINT = (
    "SageMaker could not assume the execution role: give --role the full ARN of a role "
    "that exists (with its path, e.g. role/service-role/NAME), whose trust policy allows "
    "the principal sagemaker.amazonaws.com to call sts:AssumeRole, and that you may pass "
    "(iam:PassRole)"
)


def _throttled_hint(response: dict[str, Any]) -> str:
    """Throttling that outlived the retries: how many the call had, the retry policy of
    the client that failed (:func:`~mmelocal.facts.aws.retry_policy_of`), what to do."""
    retried = response.get("ResponseMetadata", {}).get("RetryAttempts")
    after = f"after {retried} retries" if retried is not None else "after its retries"
    policy = retry_policy_of(response)
    if policy is None:
        how = "a client mmelocal did not make, with its own retry settings"
    elif policy["retries"] == 0:
        how = f"mmelocal's {policy['purpose']} clients do not retry"
    else:
        how = (
            f"mmelocal's {policy['purpose']} clients retry throttling {policy['retries']} "
            f"times in botocore's {policy['mode']!r} retry mode, backing off between tries"
        )
    return (
        f"AWS still throttled the call {after} ({how}): wait a minute and run the same "
        "command again (a deploy resumes where it stopped), or run fewer commands or "
        "scripts against the account at once"
    )


def _hint(code: str, message: str, response: dict[str, Any]) -> str:
    """What to do next about the error ``code`` with ``message`` ('' when unknown)."""
    if code in _QUOTA_HINTS:
        return _QUOTA_HINTS[code]
    if code.startswith("KMS.") or (code in _ACCESS_DENIED and "kms:" in message.lower()):
        return _KMS_HINT
    if code in _ACCESS_DENIED:
        return "check that your credentials allow this call (IAM policy)"
    if code in ("ExpiredToken", "ExpiredTokenException"):
        return "refresh your credentials (aws sso login, or new session keys)"
    if code in THROTTLING_ERROR_CODES:
        return _throttled_hint(response)
    if code == "ValidationException" and ROLE_NOT_ASSUMED in message:
        return _ROLE_HINT
    return ""


def aws_error(exc: Exception, operation: str, what: str) -> DeployError:
    """A one-line :class:`DeployError` for a failed call, with the next step when known."""
    response = _response(exc)
    code = error_code(exc)
    message = str(response.get("Error", {}).get("Message", "")) or str(exc)
    hint = _hint(code, message, response)
    return DeployError(
        f"{operation} failed for {what}: {code or type(exc).__name__}: {message}"
        + (f": {hint}" if hint else ""),
        operation=operation,
        code=code or None,
    )


def not_found(exc: BaseException) -> bool:
    """True for the "does not exist" answers of describe calls (SageMaker, S3)."""
    code = error_code(exc)
    message = str(_response(exc).get("Error", {}).get("Message", ""))
    if code in ("404", "NoSuchKey", "NotFound", "NoSuchBucket", "ResourceNotFound"):
        return True
    return code == "ValidationException" and (
        "Could not find" in message or "does not exist" in message
    )


__all__ = ["AwsClients", "aws_error", "connect", "error_code", "not_found"]
