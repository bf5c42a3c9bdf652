"""SageMaker Python SDK notebooks run unmodified against the local AWS: a 2.x script and a
3.x script (tests/localaws/sdk/), each in its own virtual environment with the SDK from the
package index (``make sdk-venvs``), given only the environment ``mmelocal local-aws``
prints. Both build their STS client with a hard-coded ``https://sts.<region>.amazonaws.com``
(``default_bucket()``), which only the HTTPS proxy and its CA bring to the local AWS."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import boto3
import numpy as np
import pytest
from localaws_helpers import tritonservers, wait_gone

from mmelocal.localaws import LocalAws
from mmelocal.testing.tiny_model import expected, request_json, write_tarball

pytestmark = pytest.mark.triton
SCRIPTS = Path(__file__).parent / "sdk"
#: where ``make sdk-venvs`` builds the SDKs' environments (the Makefile passes its own)
VENVS = Path(
    os.environ.get("MMELOCAL_SDK_VENVS", Path.home() / ".cache" / "mmelocal" / "sdk-venvs")
)
MAJORS = ("sdk2", "sdk3")
X = np.arange(8, dtype=np.float32).reshape(2, 4)
RESULT = re.compile(r"(uploaded|outputs|deleted) (.+)$", re.MULTILINE)


def test_sdk_2_and_3_scripts_run_unmodified(local_aws_env: LocalAws, tmp_path: Path) -> None:
    ready = [m for m in MAJORS if (VENVS / m / ".installed").is_file()]
    if not ready:
        pytest.skip(
            f"no SageMaker SDK environment under {VENVS}: `make sdk-venvs` builds them "
            "(pip must reach the package index)"
        )
    tarball = write_tarball(tmp_path / "model.tar.gz", scale=2.0)
    request = tmp_path / "request.json"
    request.write_text(json.dumps(request_json(X)))
    before = {p.pid for p in tritonservers()}
    # the scripts see what a user's shell has after `mmelocal local-aws` (local_aws_env set
    # it): AWS_ENDPOINT_URL, HTTPS_PROXY, AWS_CA_BUNDLE, a region and keys; both at once
    env = {**os.environ, "SAGEMAKER_SUPPRESS_V2_WARNING": "1"}
    assert env["HTTPS_PROXY"] == local_aws_env.url
    runs = {
        major: subprocess.Popen(
            [
                str(VENVS / major / "bin" / "python"),
                str(SCRIPTS / f"{major}_mme.py"),
                str(tarball),
                str(request),
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for major in ready
    }
    for major, run in runs.items():
        out, err = run.communicate(timeout=300)
        assert run.returncode == 0, f"{major}:\n{out}\n{err[-4000:]}"
        # the scripts' own lines (2.x's wait prints progress marks with no newline before them)
        lines = dict(RESULT.findall(out))
        answer = np.array(json.loads(lines["outputs"]), dtype=np.float32).reshape(X.shape)
        np.testing.assert_array_equal(answer, expected(X, 2.0))
        # default_bucket() made the SDK's bucket (named after the account STS answered)
        # and upload_data put the tarball in it
        uploaded = lines["uploaded"].removeprefix("s3://").split("/", 1)
        assert uploaded[0] == f"sagemaker-us-east-1-{local_aws_env.account_id}"
        assert boto3.client("s3").head_object(Bucket=uploaded[0], Key=uploaded[1])
        wait_gone(boto3.client("sagemaker"), lines["deleted"])  # the SDK's delete, done
    if len(ready) < len(MAJORS):
        missing = sorted(set(MAJORS) - set(ready))
        pytest.skip(f"ran {ready}; no environment for {missing} under {VENVS} (make sdk-venvs)")
    assert not {p.pid for p in tritonservers()} - before  # the deletes stopped their Triton
