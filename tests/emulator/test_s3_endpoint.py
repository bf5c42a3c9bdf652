"""The emulator on an S3 store (the session's local AWS: moto's S3 on loopback)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest
from botocore.exceptions import ClientError
from emulator_helpers import output_of, payload

from mmelocal.emulator.emulator import EmulatorConfig
from mmelocal.emulator.server import EmulatorServer
from mmelocal.testing.endpoint import MmeEndpoint
from mmelocal.testing.tiny_model import expected, write_tarball

if TYPE_CHECKING:
    from mmelocal.localaws import LocalAws

pytestmark = pytest.mark.triton


def test_s3_store_with_nested_keys(local_aws_env: LocalAws, bucket: str, tmp_path: Path) -> None:
    import boto3

    s3 = boto3.client("s3", endpoint_url=local_aws_env.url, region_name="us-east-1")
    for key, scale in (("models/model-a.tar.gz", 2.0), ("models/team/model-b.tar.gz", 4.0)):
        tarball = write_tarball(tmp_path / Path(key).name, scale=scale)
        s3.upload_file(str(tarball), bucket, key)
    config = EmulatorConfig(
        store=f"s3://{bucket}/models",
        s3_endpoint_url=local_aws_env.url,
        cache_dir=tmp_path / "cache",
    )
    with EmulatorServer(config) as server:
        mme = MmeEndpoint(url=server.url, store=tmp_path, server=server)
        x, body = payload(rows=2)
        np.testing.assert_array_equal(
            output_of(mme.invoke("model-a.tar.gz", body)), expected(x, 2.0)
        )
        np.testing.assert_array_equal(
            output_of(mme.invoke("team/model-b.tar.gz", body)), expected(x, 4.0)
        )
        with pytest.raises(ClientError) as info:
            mme.invoke("team/missing.tar.gz", body)
        assert info.value.response["Error"]["Code"] == "ValidationError"
        assert (
            f"s3://{bucket}/models/team/missing.tar.gz" in info.value.response["Error"]["Message"]
        )
        downloads = [e for e in mme.state()["events"] if e["kind"] == "download"]
        assert len(downloads) == 2


def test_s3_refusals_reach_the_caller_as_what_they_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store that refuses (403) is the caller's ValidationError saying which permission
    to check; one that throttles or fails (503, 5xx) is ServiceUnavailable, which boto3
    retries; only a missing object is "not found"."""
    from s3_refusals import refusing_s3, url_of

    for name, value in (("AWS_ACCESS_KEY_ID", "x"), ("AWS_SECRET_ACCESS_KEY", "x")):
        monkeypatch.setenv(name, value)
    statuses = {"models/denied.tar.gz": 403, "models/slow.tar.gz": 503, "models/gone.tar.gz": 404}
    with refusing_s3(statuses) as s3:
        config = EmulatorConfig(
            store="s3://bucket/models", s3_endpoint_url=url_of(s3), cache_dir=tmp_path / "cache"
        )
        with EmulatorServer(config) as server:
            client = MmeEndpoint(url=server.url, store=tmp_path, server=server).client()
            _, body = payload(rows=1)

            def error_of(target: str) -> tuple[int, str, str]:
                with pytest.raises(ClientError) as info:
                    client.invoke_endpoint(
                        EndpointName="ep",
                        TargetModel=target,
                        ContentType="application/json",
                        Body=body,
                    )
                response = info.value.response
                status = response["ResponseMetadata"]["HTTPStatusCode"]
                return status, response["Error"]["Code"], response["Error"]["Message"]

            status, code, message = error_of("denied.tar.gz")
            assert (status, code) == (400, "ValidationError")
            assert "s3:GetObject" in message and "not found" not in message, message
            status, code, message = error_of("slow.tar.gz")
            assert (status, code) == (503, "ServiceUnavailable"), message
            assert "503" in message and "retry" in message
            status, code, message = error_of("gone.tar.gz")
            assert (status, code) == (400, "ValidationError") and "not found" in message
