"""``smoke``: call models of a deployed store and check their answers against the build.

The check is the emulator's and ``mmelocal check``'s: the request is the build's recorded
sample (:func:`~mmelocal.builder.payload.reference_inputs`, the load test's payload too) and
the answer must equal the build's reference outputs within tolerance
(:func:`~mmelocal.runtime.samples.compare_outputs`). The same :func:`run_smoke` runs
against SageMaker or the local emulator: only the ``sagemaker-runtime`` client's endpoint
differs.
"""

from __future__ import annotations

import logging
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mmelocal.aws.endpoint import describe_mme
from mmelocal.aws.session import AwsClients, aws_error
from mmelocal.builder.payload import (
    reference_arrays,
    v2_json_outputs,
    v2_json_payload,
)
from mmelocal.deploy.plan import split_s3_uri
from mmelocal.deploy.upload import listed_objects
from mmelocal.errors import DeployError, MmeLocalError, UserInputError
from mmelocal.runtime.samples import compare_outputs

logger = logging.getLogger(__name__)

#: how many of the deployed tarballs ``smoke`` checks, and its tolerances
DEFAULT_MODELS = 5
DEFAULT_ATOL = 1e-3
DEFAULT_RTOL = 1e-3


@dataclass(frozen=True)
class SmokeCase:
    """One TargetModel, its request body and the outputs it must answer."""

    target: str
    body: bytes
    expected: dict[str, np.ndarray]


@dataclass
class SmokeResult:
    """What one call gave: ``problems`` is empty when the answer matched."""

    target: str
    latency_ms: float | None = None
    max_abs_diff: float | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when the call succeeded and the answer equals the reference."""
        return not self.problems


@dataclass
class SmokeReport:
    """Every call of a smoke test; ``ok`` only when there was one and all matched."""

    endpoint_name: str
    results: list[SmokeResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when at least one model was called and every answer matched."""
        return bool(self.results) and all(r.ok for r in self.results)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "endpoint_name": self.endpoint_name,
            "ok": self.ok,
            "results": [{**vars(r), "ok": r.ok} for r in self.results],
        }


def smoke_case(target: str, tarball: Path | str) -> SmokeCase:
    """The request and expected answer of ``target`` from its ``model.tar.gz``."""
    inputs, outputs = reference_arrays(tarball)
    return SmokeCase(target=target, body=v2_json_payload(inputs), expected=outputs)


def run_smoke(
    runtime: Any,
    endpoint_name: str,
    cases: list[SmokeCase],
    *,
    atol: float = DEFAULT_ATOL,
    rtol: float = DEFAULT_RTOL,
) -> SmokeReport:
    """Invoke each case through boto3's ``sagemaker-runtime`` client and compare."""
    report = SmokeReport(endpoint_name=endpoint_name)
    for case in cases:
        result = SmokeResult(target=case.target)
        report.results.append(result)
        start = time.perf_counter()
        try:
            answer = runtime.invoke_endpoint(
                EndpointName=endpoint_name,
                TargetModel=case.target,
                ContentType="application/json",
                Accept="application/json",
                Body=case.body,
            )
            body = answer["Body"].read()
        except Exception as exc:
            result.problems.append(f"InvokeEndpoint failed: {exc}")
            continue
        result.latency_ms = (time.perf_counter() - start) * 1e3
        try:
            actual = v2_json_outputs(body)
        except MmeLocalError as exc:
            result.problems.append(str(exc))
            continue
        problems, worst = compare_outputs(case.expected, actual, atol=atol, rtol=rtol)
        result.problems += problems
        result.max_abs_diff = worst
    return report


def smoke_endpoint(
    clients: AwsClients,
    endpoint_name: str,
    *,
    models: int = DEFAULT_MODELS,
    atol: float = DEFAULT_ATOL,
    rtol: float = DEFAULT_RTOL,
) -> SmokeReport:
    """Smoke-test the first ``models`` tarballs of a deployed endpoint's S3 prefix that carry
    mmelocal's reference data (each is downloaded to read it; the others, such as the
    endpoint bench's probe, are passed over)."""
    if models < 1:
        raise DeployError(f"models must be >= 1, got {models}")
    bucket, prefix = split_s3_uri(describe_mme(clients, endpoint_name).model_data_url)
    keys = [k for k in listed_objects(clients.s3, bucket, prefix) if k.endswith(".tar.gz")]
    if not keys:
        raise DeployError(f"no *.tar.gz under s3://{bucket}/{prefix}: deploy the store first")
    cases: list[SmokeCase] = []
    skipped: list[str] = []
    with tempfile.TemporaryDirectory(prefix="mmelocal-smoke-") as work:
        for index, key in enumerate(sorted(keys)):
            if len(cases) == models:
                break
            local = Path(work) / f"{index}.tar.gz"
            try:
                clients.s3.download_file(bucket, key, str(local))
            except Exception as exc:
                raise aws_error(exc, "GetObject", f"s3://{bucket}/{key}") from exc
            try:
                cases.append(smoke_case(key[len(prefix) :], local))
            except UserInputError as exc:  # not built by mmelocal (the bench's probe, ...)
                logger.info("smoke passes over s3://%s/%s: %s", bucket, key, exc)
                skipped.append(key[len(prefix) :])
            local.unlink()
    if not cases:
        raise DeployError(
            f"no tarball under s3://{bucket}/{prefix} carries mmelocal's reference data "
            f"({', '.join(skipped[:3])} ...): build the models with mmelocal build"
        )
    return run_smoke(clients.runtime, endpoint_name, cases, atol=atol, rtol=rtol)


__all__ = [
    "SmokeCase",
    "SmokeReport",
    "SmokeResult",
    "run_smoke",
    "smoke_case",
    "smoke_endpoint",
]
