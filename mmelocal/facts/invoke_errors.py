"""InvokeEndpoint's errors: which failure reaches the caller with which HTTP status, error
type and extra fields, as one table (adding an error code is one entry).

The statuses and types are botocore's (its sagemaker-runtime model gives each error shape
its ``httpStatusCode``); ``source`` says where each comes from, and ``docs/errors.md``
lists them (a test keeps the page and this table equal). The emulator's answers
(:mod:`mmelocal.emulator.answers`) read it on the invocation path
(:mod:`mmelocal.emulator.invocation`: InvokeEndpoint and KServe v2 infer) and the other
KServe v2 routes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from mmelocal.errors import (
    InstanceUnavailableError,
    ModelLoadError,
    ModelNotFoundError,
    ModelNotReadyError,
    OutOfMemoryError,
    StoreAccessError,
    StoreUnavailableError,
    UserInputError,
    ValidationError,
)

#: the error type InvokeEndpoint answers (429) while a multi-model endpoint downloads or
#: loads the target past MODEL_NOT_READY_AFTER_S: botocore's sagemaker-runtime model has
#: the shape ("Either a serverless endpoint variant's resources are still being provisioned,
#: or a multi-model endpoint is still downloading or loading the target model. Wait and try
#: your request again."); the MME guide: the load goes on
MODEL_NOT_READY = "ModelNotReadyException"


@dataclass(frozen=True, kw_only=True)
class SageMakerError:
    """How one kind of failure reaches the caller.

    ``status`` and ``error_type`` are InvokeEndpoint's (botocore's sagemaker-runtime model
    gives each error shape its ``httpStatusCode``); ``v2_status`` is the status on the
    KServe v2 routes when it is not ``status``: those answer as Triton's own HTTP server
    does (``HttpCodeFromError`` in ``src/http_server.cc``), which knows no SageMaker status
    (no 424 ModelError, no 507, no 429); ``model_error`` adds ModelError's
    ``OriginalStatusCode``, ``OriginalMessage`` and ``LogStreamArn``; ``source`` is where
    the platform's status comes from (docs/errors.md lists them).
    """

    status: int
    error_type: str
    v2_status: int = 0
    model_error: bool = False
    source: str = ""

    @property
    def v2(self) -> int:
        """The status on the v2 routes."""
        return self.v2_status or self.status


#: a failed load's status on the KServe v2 routes: Triton's v2 HTTP server answers the
#: load of a model that fails, out of memory included, 400 (``HandleRepositoryControl``
#: answers the load's error through ``HttpCodeFromError``, ``src/http_server.cc`` 2.51;
#: the wheel's tritonserver 2.51 answers ``POST /v2/repository/models/M/load`` 400 for a
#: model.py raising RuntimeError and for one raising "CUDA out of memory")
V2_LOAD_ERROR_STATUS = 400

#: Triton's v2 answers (400) for a model it has not loaded, which the emulator gives
#: without loading one: ``GET .../ready`` (``HandleModelReady``, ``src/http_server.cc``
#: 2.51) and ``GET .../stats`` (``TRITONSERVER_ServerModelStatistics``); both measured
#: with the wheel's tritonserver 2.51
V2_NOT_READY = "Model version not ready"
V2_NOT_AVAILABLE = "requested model '{model}' is not available"
#: Triton's v2 answer (400) to ``.../trace/setting`` of a model it has not loaded
#: (``HandleTrace``, ``src/http_server.cc`` 2.51, measured with the wheel's tritonserver)
V2_TRACE_UNKNOWN = "Request for unknown model : {model}"
#: Triton's v2 answers to a method a route does not take (405) and a path no route takes
#: (404), such as a version on ``trace/setting`` (``HTTPAPIServer::Handle``, 2.51)
V2_METHOD_NOT_ALLOWED = "Method Not Allowed"
V2_NOT_FOUND = "Not Found"
#: Triton's v2 answer (501: ``TRITONSERVER_ERROR_UNSUPPORTED``) to a load or unload in a
#: named repository, ``/v2/repository/NAME/models/M/load`` (``HandleRepositoryControl``)
V2_REPOSITORY_NAME = "'repository_name' specification is not supported"

#: Triton's v2 answers (500: TritonJson's errors are ``TRITONSERVER_ERROR_INTERNAL``) to a
#: repository request's body it cannot read (``HandleRepositoryIndex``,
#: ``HandleRepositoryControl``, ``EVBufferToJson``, ``src/http_server.cc`` 2.51; measured
#: with the wheel's tritonserver 2.51): a body that is no JSON (the parser's words follow),
#: an index's ``ready`` that is no boolean, a load's ``parameters`` that is no object or
#: holds a value that is no string, and a load parameter other than ``config`` and
#: ``file:PATH``
V2_JSON_ERROR_STATUS = 500
V2_BAD_JSON = "failed to parse the request JSON buffer: {detail}"
V2_NOT_BOOLEAN = "attempt to access JSON non-boolean as boolean"
V2_NOT_OBJECT = "attempt to get members for non-object"
V2_NOT_STRING = "attempt to access JSON non-string as string"
V2_BAD_PARAMETER = "unexpected error on creating Triton parameter"
#: the emulator's refusal (Triton's 501, ``TRITONSERVER_ERROR_UNSUPPORTED``, as for a named
#: repository) of a load overriding the model's config or files: SageMaker's Triton serves
#: no repository API (``--allow-http=false``, ``docker/sagemaker/serve``), the platform
#: loads a model from its tarball alone (``POST /models`` names the extracted folder)
V2_LOAD_OVERRIDE_STATUS = 501
V2_LOAD_OVERRIDE = (
    "load parameters {names} are not supported: a multi-model endpoint loads a model from "
    "its tarball in the store alone (SageMaker's Triton serves no repository API to "
    "override a config or files). Put a model.tar.gz with the config and files you want "
    "in the store and invoke it by its TargetModel"
)

#: Exception class -> the caller's error, first match wins (subclasses before bases).
SAGEMAKER_ERRORS: tuple[tuple[tuple[type[BaseException], ...], SageMakerError], ...] = (
    (
        (ModelNotReadyError,),
        SageMakerError(
            status=429,
            error_type=MODEL_NOT_READY,
            v2_status=503,
            source="botocore ModelNotReadyException (429); the MME guide: a load past 60 s",
        ),
    ),
    (
        (InstanceUnavailableError,),
        SageMakerError(
            status=503, error_type="ServiceUnavailable", source="botocore ServiceUnavailable"
        ),
    ),
    (
        (StoreUnavailableError,),
        SageMakerError(
            status=503,
            error_type="ServiceUnavailable",
            source='botocore ServiceUnavailable (503, "Try your call again"): the emulator\'s '
            "for a store that throttles, fails or cannot be reached (SageMaker's answer when "
            "its own download fails so is not documented)",
        ),
    ),
    (
        (StoreAccessError,),
        SageMakerError(
            status=400,
            error_type="ValidationError",
            source="botocore ValidationError: SageMaker's download failure names the object "
            "and the role's permission together (\"Please ensure that there is an object "
            "located at the URL and that the role passed to CreateModel has permissions to "
            'download the object"), and S3 answers a missing key 403 without s3:ListBucket',
        ),
    ),
    (
        (OutOfMemoryError,),
        SageMakerError(
            status=507,
            error_type="InsufficientMemory",
            v2_status=V2_LOAD_ERROR_STATUS,
            source="the emulator's (the container's 507 makes SageMaker evict; the caller's "
            "answer when nothing is left to evict is not documented)",
        ),
    ),
    (
        (ModelLoadError,),
        SageMakerError(
            status=424,
            error_type="ModelError",
            v2_status=V2_LOAD_ERROR_STATUS,
            model_error=True,
            source="botocore ModelError (424): the container answered 4xx/5xx (Triton's "
            "SageMaker front end answers a failed load 400)",
        ),
    ),
    (
        (UserInputError, ModelNotFoundError, ValidationError),
        SageMakerError(status=400, error_type="ValidationError", source="botocore ValidationError"),
    ),
)
INTERNAL_FAILURE = SageMakerError(
    status=500, error_type="InternalFailure", source="botocore InternalFailure"
)
#: a ModelError's OriginalStatusCode when the emulator refused the load itself: Triton's
#: SageMaker front end answers any load error but out-of-memory with 400
LOAD_ERROR_STATUS = 400


#: InvokeEndpoint's answer to a body over :data:`~mmelocal.facts.sagemaker.MAX_PAYLOAD_BYTES`
#: (no ``__type``: boto3 raises ClientError with Code "413")
PAYLOAD_TOO_LARGE_STATUS = 413


def error_code(status: int, headers: Mapping[str, str], body: bytes) -> str:
    """The error code boto3 gives an InvokeEndpoint answer of ``status`` (an error): as
    botocore's rest-json parser reads it (``RestJSONParser._inject_error_code`` over
    ``BaseJSONParser._do_error_parse``, botocore 1.44): the ``x-amzn-ErrorType`` header
    (any case), else the JSON body's ``code`` or ``Code``, else its ``__type``, else the
    status as text (``"413"``); cut at the first ``:`` and after the last ``#``. A replay
    over HTTP names errors by it, as a replay through boto3 and the simulation do."""
    code: object = next((v for k, v in headers.items() if k.lower() == "x-amzn-errortype"), None)
    if code is None:
        try:
            parsed = json.loads(body) if body else {}
        except ValueError:  # botocore keeps a body that is not JSON as the message
            parsed = {}
        if not isinstance(parsed, dict):
            parsed = {}
        code = parsed.get("code", parsed.get("Code", parsed.get("__type", str(status))))
    return str(code).split(":", 1)[0].rsplit("#", 1)[-1]


def error_kind(exc: BaseException) -> SageMakerError:
    """The entry of :data:`SAGEMAKER_ERRORS` for ``exc`` (InternalFailure when none)."""
    for classes, kind in SAGEMAKER_ERRORS:
        if isinstance(exc, classes):
            return kind
    return INTERNAL_FAILURE


__all__ = [
    "INTERNAL_FAILURE",
    "LOAD_ERROR_STATUS",
    "MODEL_NOT_READY",
    "PAYLOAD_TOO_LARGE_STATUS",
    "SAGEMAKER_ERRORS",
    "V2_BAD_JSON",
    "V2_BAD_PARAMETER",
    "V2_JSON_ERROR_STATUS",
    "V2_LOAD_ERROR_STATUS",
    "V2_LOAD_OVERRIDE",
    "V2_LOAD_OVERRIDE_STATUS",
    "V2_METHOD_NOT_ALLOWED",
    "V2_NOT_AVAILABLE",
    "V2_NOT_BOOLEAN",
    "V2_NOT_FOUND",
    "V2_NOT_OBJECT",
    "V2_NOT_READY",
    "V2_NOT_STRING",
    "V2_TRACE_UNKNOWN",
    "SageMakerError",
    "error_code",
    "error_kind",
]
