"""The emulator's SageMaker error table, read back through botocore's own parser.

Each entry of ``SAGEMAKER_ERRORS`` is raised as its exception, answered by the
InvokeEndpoint and v2 routes' functions, and parsed as boto3 parses a SageMaker answer:
the status, the error code and ModelError's extra fields are what docs/errors.md says.
"""

from __future__ import annotations

import json
from pathlib import Path

import botocore.session
import pytest
from botocore.parsers import RestJSONParser

from mmelocal.emulator.answers import (
    INTERNAL_FAILURE,
    SAGEMAKER_ERRORS,
    error_kind,
    invocation_error,
    v2_exception,
)
from mmelocal.errors import (
    InstanceUnavailableError,
    InvalidTargetError,
    ModelLoadError,
    ModelNotFoundError,
    ModelNotReadyError,
    OutOfMemoryError,
    StoreAccessError,
    StoreUnavailableError,
    UnsupportedModelError,
    ValidationError,
)

EXAMPLES = [
    (ModelNotReadyError("still loading", target_model="m"), 429, "ModelNotReadyException", 503),
    (InstanceUnavailableError("restarting"), 503, "ServiceUnavailable", 503),
    # the v2 routes answer a failed load as Triton's v2 HTTP server does: 400
    (OutOfMemoryError("too big"), 507, "InsufficientMemory", 400),
    (
        ModelLoadError("no", model_name="m", triton_message="bad", status_code=400),
        424,
        "ModelError",
        400,
    ),
    (UnsupportedModelError("needs a GPU", model_name="m"), 424, "ModelError", 400),
    (StoreUnavailableError("S3 is throttling"), 503, "ServiceUnavailable", 503),
    (StoreAccessError("S3 refused", target_model="m"), 400, "ValidationError", 400),
    (InvalidTargetError("bad name", target_model="../x"), 400, "ValidationError", 400),
    (ModelNotFoundError("absent", target_model="m"), 400, "ValidationError", 400),
    (ValidationError("several folders"), 400, "ValidationError", 400),
    (RuntimeError("surprise"), 500, "InternalFailure", 500),
]


def _parse(status: int, headers: list[tuple[str, str]], body: bytes) -> dict:
    model = botocore.session.get_session().get_service_model("sagemaker-runtime")
    operation = model.operation_model("InvokeEndpoint")
    response = {"status_code": status, "headers": dict(headers), "body": body}
    return RestJSONParser().parse(response, operation.output_shape)


def test_every_entry_has_an_example() -> None:
    kinds = {id(error_kind(exc)) for exc, *_ in EXAMPLES}
    assert kinds == {id(kind) for _, kind in SAGEMAKER_ERRORS} | {id(INTERNAL_FAILURE)}


@pytest.mark.parametrize(("exc", "status", "code", "v2"), EXAMPLES, ids=lambda v: str(v)[:20])
def test_boto3_reads_what_the_table_says(
    exc: BaseException, status: int, code: str, v2: int, caplog: pytest.LogCaptureFixture
) -> None:
    answer = invocation_error(exc, "m")
    assert answer.status == status
    parsed = _parse(*answer)
    assert parsed["Error"]["Code"] == code
    assert parsed["Error"]["Message"] == str(exc)
    body = json.loads(answer.body)
    if code == "ModelError":
        assert body["OriginalStatusCode"] == 400
        assert body["OriginalMessage"] in ("bad", str(exc))
        assert body["LogStreamArn"].startswith("local:")
    else:
        assert "OriginalStatusCode" not in body and "LogStreamArn" not in body
    assert v2_exception(exc).status == v2


def test_a_model_error_names_the_log_it_carries(tmp_path: Path) -> None:
    log = tmp_path / "tritonserver.log"
    exc = ModelLoadError("no", model_name="m", status_code=400, log_path=log)
    body = json.loads(invocation_error(exc, "m").body)
    assert body["LogStreamArn"] == f"local:{log}"


def test_a_model_error_from_a_scaled_fleet_names_its_instances_log(tmp_path: Path) -> None:
    """After a scale-in and a scale-out the answering instance's index (here 2) is no
    position in the instance list (two long), and a draining one is in no list: Triton's
    4xx still answers 424 ModelError naming that instance's log, never a 500."""
    from types import SimpleNamespace

    from mmelocal.emulator.answers import invocation_answer
    from mmelocal.emulator.emulator import InvokeResult

    log = tmp_path / "triton-2.log"
    result = InvokeResult(
        status=400,
        body=b"bad input",
        headers={},
        cache_hit=True,
        model_latency_s=0.0,
        wait_s=0.0,
        instance=2,
        log_path=log,
    )
    for instances in ([object(), object()], []):
        emulator = SimpleNamespace(instances=instances, config=SimpleNamespace(variant_name="v"))
        answer = invocation_answer(emulator, "m", result)  # type: ignore[arg-type]
        body = json.loads(answer.body)
        assert answer.status == 424
        assert body["__type"] == "ModelError" and body["OriginalStatusCode"] == 400
        assert body["LogStreamArn"] == f"local:{log}"
