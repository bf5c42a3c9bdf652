"""The same tests on a local MME emulator, then on the endpoint you deployed.

Run: ``pytest examples/test_my_endpoint.py`` (a local emulator per test), then, once
``mmelocal deploy`` has put the store on a real endpoint::

    pytest examples/test_my_endpoint.py --mmelocal-endpoint my-mme --mmelocal-region us-east-1

With ``--mmelocal-endpoint`` the ``mme_endpoint`` fixture is that endpoint: ``client()``
reaches it, ``add_tarball`` uploads under its S3 prefix (deleted again after the test), and
what only the emulator has (``state()`` here) skips the test with the reason.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from mmelocal.testing.tiny_model import expected, request_json, write_tarball

TARGET = "example-tiny.tar.gz"


@pytest.fixture(scope="module")
def tarball(tmp_path_factory):
    """Stands in for your own ``model.tar.gz``: a tiny Python-backend model (x * 3 + 1)."""
    return write_tarball(tmp_path_factory.mktemp("dist") / "model.tar.gz", scale=3.0)


def test_answers_x_times_three_plus_one(mme_endpoint, tarball):
    mme_endpoint.add_tarball(TARGET, tarball)
    runtime = mme_endpoint.client()  # boto3's sagemaker-runtime, unchanged
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    answer = runtime.invoke_endpoint(
        EndpointName=mme_endpoint.endpoint_name,  # "local", or the deployed endpoint's name
        TargetModel=TARGET,
        ContentType="application/json",
        Body=json.dumps(request_json(x)),
    )
    output = json.loads(answer["Body"].read())["outputs"][0]
    got = np.asarray(output["data"], dtype=np.float32).reshape(output["shape"])
    np.testing.assert_allclose(got, expected(x, 3.0))


def test_second_call_is_warm(mme_endpoint, tarball):
    mme_endpoint.add_tarball(TARGET, tarball)
    body = request_json(np.ones((1, 4), dtype=np.float32))
    assert mme_endpoint.invoke(TARGET, body) == mme_endpoint.invoke(TARGET, body)
    # the emulator's own state page: skipped with --mmelocal-endpoint (SageMaker has none)
    assert mme_endpoint.state()["event_counts"]["load"] == 1
