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
from mmelocal.facts.aws import CONCURRENT_REQUESTS, CONTROL_PLANE, RUNTIME, aws_client

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
    import boto3
    from botocore.exceptions import BotoCoreError

    try:
        session = boto3.Session(region_name=region)
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


def error_code(exc: BaseException) -> str:
    """The service's error code of a botocore ``ClientError`` ('' for anything else)."""
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


def aws_error(exc: Exception, operation: str, what: str) -> DeployError:
    """A one-line :class:`DeployError` for a failed call, with the next step when known."""
    code = error_code(exc)
    message = str(getattr(exc, "response", {}).get("Error", {}).get("Message", "")) or str(exc)
    hint = ""
    if code in _QUOTA_HINTS:
        hint = f": {_QUOTA_HINTS[code]}"
    elif code in ("AccessDenied", "AccessDeniedException", "UnrecognizedClientException"):
        hint = ": check that your credentials allow this call (IAM policy)"
    elif code in ("ExpiredToken", "ExpiredTokenException"):
        hint = ": refresh your credentials (aws sso login, or new session keys)"
    return DeployError(
        f"{operation} failed for {what}: {code or type(exc).__name__}: {message}{hint}",
        operation=operation,
        code=code or None,
    )


def not_found(exc: BaseException) -> bool:
    """True for the "does not exist" answers of describe calls (SageMaker, S3)."""
    code = error_code(exc)
    message = str(getattr(exc, "response", {}).get("Error", {}).get("Message", ""))
    if code in ("404", "NoSuchKey", "NotFound", "NoSuchBucket", "ResourceNotFound"):
        return True
    return code == "ValidationException" and (
        "Could not find" in message or "does not exist" in message
    )


__all__ = ["AwsClients", "aws_error", "connect", "error_code", "not_found"]
