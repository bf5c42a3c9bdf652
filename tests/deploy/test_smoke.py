"""``smoke``: the same answer checks against the local emulator and a deployed endpoint.

The deployed side is mmelocal's local AWS (``AWS_ENDPOINT_URL`` only): ``deploy`` creates
a real endpoint there, ``smoke`` checks its answers against the tarballs' references and
``undeploy`` removes it, Triton included.
"""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest
from deploy_helpers import INSTANCE_TYPE, ROLE
from shared_helpers import tritonservers, wait_gone

from mmelocal.aws.session import connect
from mmelocal.cli.main import main
from mmelocal.deploy.deployer import apply_plan, make_plan
from mmelocal.deploy.plan import DeployOptions
from mmelocal.deploy.smoke import SmokeCase, run_smoke, smoke_case
from mmelocal.testing.emulator_fixtures import MmeEndpoint

pytestmark = pytest.mark.triton


def test_smoke_checks_answers_on_the_emulator_and_on_a_deployment(
    mme_endpoint: MmeEndpoint,
    store: Path,
    bucket: str,
    endpoint_name: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    tarballs = sorted((p.relative_to(store).as_posix(), p) for p in store.rglob("*.tar.gz"))
    for target, path in tarballs:
        mme_endpoint.add_tarball(target, path)
    cases = [smoke_case(target, path) for target, path in tarballs]
    runtime = mme_endpoint.client()
    report = run_smoke(runtime, "local", cases)
    assert report.ok, report.to_dict()
    assert [r.target for r in report.results] == [t for t, _ in tarballs]
    assert all(r.max_abs_diff == 0.0 for r in report.results)

    # model-2's reference (scale 3) is not what model-0 (scale 2) answers
    wrong = SmokeCase(target="model-0.tar.gz", body=cases[2].body, expected=cases[2].expected)
    missing = SmokeCase(target="nope.tar.gz", body=cases[0].body, expected=cases[0].expected)
    bad = run_smoke(runtime, "local", [wrong, missing])
    assert not bad.ok
    assert "differs from the reference" in bad.results[0].problems[0]
    assert "ValidationError" in bad.results[1].problems[0]

    options = DeployOptions(
        store=store, endpoint_name=endpoint_name, s3_uri=f"s3://{bucket}/models/",
        role_arn=ROLE, instance_type=INSTANCE_TYPE, poll_s=0.05,
    )  # fmt: skip
    clients = connect()
    before = {p.pid for p in tritonservers()}
    assert apply_plan(make_plan(options, clients), clients, options=options) == "InService"
    code = main(["smoke", endpoint_name, "--models", "3", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["ok"], out
    assert [r["target"] for r in out["results"]] == [
        "model-0.tar.gz",
        "model-1.tar.gz",
        "model-2.tar.gz",
    ]
    assert all(r["max_abs_diff"] == 0.0 for r in out["results"]), out
    deployed = {p.pid for p in tritonservers()} - before
    assert deployed  # the endpoint's own Triton answered

    assert main(["undeploy", endpoint_name, "--delete-artifacts"]) == 0
    wait_gone(boto3.client("sagemaker"), endpoint_name)
    assert not deployed & {p.pid for p in tritonservers()}
    assert boto3.client("s3").list_objects_v2(Bucket=bucket).get("KeyCount") == 0
