"""``mme_endpoint`` on a deployed endpoint (``--mmelocal-endpoint``), seen from a user's
project: ``examples/test_my_endpoint.py`` runs unchanged on the emulator, then on an
endpoint ``mmelocal deploy`` made on mmelocal's local AWS (``AWS_ENDPOINT_URL`` only: real
S3 objects, a real Triton behind the endpoint).

Each run of the user's project is a pytest process of its own (the plugin from its entry
point, as a user runs it): not pytester's, whose clean-up drops from ``sys.modules`` what
the session's local AWS imported during the test (its numpy extensions then load twice)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import boto3
import numpy as np
import pytest
from shared_helpers import delete_endpoint, unique, write_reference_tarball

from mmelocal.aws.s3 import ENDPOINT_METADATA, SHA256_METADATA, file_digest
from mmelocal.errors import DeployError, UserInputError
from mmelocal.testing.tiny_model import expected, request_json

if TYPE_CHECKING:
    from mmelocal.localaws import LocalAws

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "test_my_endpoint.py"
ROLE = "arn:aws:iam::123456789012:role/SageMakerExecution"
#: SageMaker's Triton image (the local AWS runs the pip tritonserver for it)
IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/sagemaker-tritonserver:24.09-py3"
#: a GPU type moto's (lagging) instance list accepts (the local AWS runs it on CPU)
INSTANCE_TYPE = "ml.g4dn.xlarge"


def _pytest(project: Path, *args: str, timeout_s: float = 600) -> pytest.RunResult:
    """pytest on the user's ``project`` folder, in its own process."""
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--rootdir", str(project),
         "--basetemp", str(project.parent / "basetemp"), *args],
        cwd=project, capture_output=True, text=True, timeout=timeout_s, check=False,
    )  # fmt: skip
    return pytest.RunResult(
        done.returncode, done.stdout.splitlines(), done.stderr.splitlines(),
        time.monotonic() - start,
    )  # fmt: skip


def _project(folder: Path, test_file: str) -> Path:
    """A user's project: ``folder/project/test_mme.py`` holding ``test_file``."""
    project = folder / "project"
    project.mkdir()
    (project / "test_mme.py").write_text(test_file)
    return project


def _keys(bucket: str) -> set[str]:
    listing = boto3.client("s3").list_objects_v2(Bucket=bucket)
    return {item["Key"] for item in listing.get("Contents", [])}


def _deploy(store: Path, bucket: str, name: str) -> None:
    from mmelocal.aws.session import connect
    from mmelocal.deploy.deployer import apply_plan, make_plan
    from mmelocal.deploy.plan import DeployOptions

    options = DeployOptions(
        store=store, endpoint_name=name, s3_uri=f"s3://{bucket}/models/", role_arn=ROLE,
        instance_type=INSTANCE_TYPE, max_instances=1, poll_s=0.05,
    )  # fmt: skip
    clients = connect()
    assert apply_plan(make_plan(options, clients), clients, options=options) == "InService"


@pytest.mark.triton
@pytest.mark.slow
def test_the_same_test_file_runs_on_the_emulator_then_on_the_deployed_endpoint(
    local_aws_env: LocalAws, bucket: str, tmp_path: Path
) -> None:
    project = _project(tmp_path, EXAMPLE.read_text())
    _pytest(project, "-rs").assert_outcomes(passed=2)

    store = tmp_path / "store"
    deployed = write_reference_tarball(store / "model-0.tar.gz", scale=2.0)
    name = unique("ep")
    try:
        _deploy(store, bucket, name)
        remote = _pytest(project, "-rs", "--mmelocal-endpoint", name)
        remote.assert_outcomes(passed=1, skipped=1)
        remote.stdout.fnmatch_lines(["*mme_endpoint.state() is local-only*--mmelocal-endpoint*"])
        assert _keys(bucket) == {"models/model-0.tar.gz"}  # the test's upload went again

        _check_uploads_and_what_stays(name, bucket, deployed, tmp_path)
    finally:
        delete_endpoint(boto3.client("sagemaker"), name)


def _check_uploads_and_what_stays(name: str, bucket: str, deployed: Path, work: Path) -> None:
    """add_tarball records deploy's metadata, refuses to replace other bytes, and close()
    deletes only what it uploaded."""
    from mmelocal.testing.remote_endpoint import RemoteMmeEndpoint, find_endpoint

    s3 = boto3.client("s3")
    mine = write_reference_tarball(work / "mine.tar.gz", scale=5.0)
    s3.upload_file(str(mine), bucket, "models/users-own.tar.gz")  # not mmelocal's
    endpoint = RemoteMmeEndpoint(find_endpoint(name))
    assert (
        endpoint.add_tarball("model-0.tar.gz", deployed) == f"s3://{bucket}/models/model-0.tar.gz"
    )
    endpoint.add_tarball("users-own.tar.gz", mine)  # the same bytes: used as they are
    with pytest.raises(DeployError, match=r"holds other bytes than .*mine\.tar\.gz"):
        endpoint.add_tarball("model-0.tar.gz", mine)
    endpoint.add_tarball("team/new.tar.gz", mine)
    head = s3.head_object(Bucket=bucket, Key="models/team/new.tar.gz")
    assert head["Metadata"] == {SHA256_METADATA: file_digest(mine).sha256, ENDPOINT_METADATA: name}
    x = np.ones((1, 4), dtype=np.float32)
    answer = json.loads(endpoint.invoke("team/new.tar.gz", request_json(x)))["outputs"][0]
    np.testing.assert_allclose(np.reshape(answer["data"], answer["shape"]), expected(x, 5.0))
    with pytest.raises(UserInputError, match=r"mme_endpoint\.store is local-only"):
        endpoint.store  # noqa: B018 (outside pytest's fixture: an error, not a skip)
    endpoint.close()
    assert _keys(bucket) == {"models/model-0.tar.gz", "models/users-own.tar.gz"}


#: two tests on two xdist workers adding one TargetModel with the same bytes. They meet
#: through named pipes (opening one blocks until the other side opens it): the second adds
#: the tarball once the first has uploaded it, and invokes it once the first's fixtures are
#: torn down (``then_tell_the_other`` is set up before ``mme_endpoint``, so it is torn
#: down after it)
SHARED_TARBALL_TESTS = """
import json
import os
from pathlib import Path

import numpy as np
import pytest

from mmelocal.testing.tiny_model import expected, request_json

TARGET = "shared/tiny.tar.gz"
TARBALL = Path(os.environ["SHARED_TARBALL"])
MEET = Path(os.environ["MEET_DIR"])


def tell(what):
    with open(MEET / what, "w") as pipe:
        pipe.write(what)


def hear(what):
    with open(MEET / what) as pipe:
        assert pipe.read() == what


@pytest.fixture
def then_tell_the_other():
    yield
    tell("torn-down")


def test_first(then_tell_the_other, mme_endpoint):
    mme_endpoint.add_tarball(TARGET, TARBALL)
    tell("uploaded")


def test_second(mme_endpoint):
    hear("uploaded")
    mme_endpoint.add_tarball(TARGET, TARBALL)  # there already, with the same bytes
    hear("torn-down")
    x = np.ones((1, 4), dtype=np.float32)
    answer = json.loads(mme_endpoint.invoke(TARGET, request_json(x)))["outputs"][0]
    np.testing.assert_allclose(np.reshape(answer["data"], answer["shape"]), expected(x, 5.0))
"""


@pytest.mark.triton
@pytest.mark.slow
def test_xdist_workers_sharing_a_tarball_keep_it_until_the_session_ends(
    local_aws_env: LocalAws, bucket: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Under ``-n 2`` the first worker uploaded the tarball, the second found it there (the
    same bytes: used as it is, kept) and the first's teardown deleted it while the second
    still used it: its call answered that the model is not there. What the workers upload
    now stays until every worker has finished; the controller deletes it then."""
    import os

    store = tmp_path / "store"
    write_reference_tarball(store / "model-0.tar.gz", scale=2.0)
    meet = tmp_path / "meet"
    meet.mkdir()
    for name in ("uploaded", "torn-down"):
        os.mkfifo(meet / name)
    monkeypatch.setenv("MEET_DIR", str(meet))
    shared = write_reference_tarball(tmp_path / "shared.tar.gz", scale=5.0)
    monkeypatch.setenv("SHARED_TARBALL", str(shared))
    project = _project(tmp_path, SHARED_TARBALL_TESTS)
    name = unique("ep")
    try:
        _deploy(store, bucket, name)
        run = _pytest(project, "-n", "2", "--mmelocal-endpoint", name, timeout_s=300)
        assert run.ret == 0, run.stdout.str()
        run.assert_outcomes(passed=2)
        assert _keys(bucket) == {"models/model-0.tar.gz"}  # deleted once both were done
    finally:
        delete_endpoint(boto3.client("sagemaker"), name)


@pytest.mark.triton  # the single-model endpoint's
def test_a_wrong_endpoint_is_one_line_per_test(
    local_aws_env: LocalAws, bucket: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    project = _project(
        tmp_path,
        "def test_one(mme_endpoint):\n    pass\n\n\ndef test_two(mme_endpoint):\n    pass\n",
    )
    monkeypatch.setenv("MMELOCAL_TEST_ENDPOINT", "no-such-mme")  # the option's default
    missing = _pytest(project)
    missing.assert_outcomes(errors=2)
    _one_line_each(
        missing.stdout.str(),
        "--mmelocal-endpoint no-such-mme: endpoint no-such-mme does not exist in us-east-1: "
        "deploy it first, or name its region",
    )
    monkeypatch.delenv("MMELOCAL_TEST_ENDPOINT")

    sm, name = boto3.client("sagemaker"), unique("single")
    tarball = write_reference_tarball(tmp_path / "model.tar.gz", scale=2.0)
    boto3.client("s3").upload_file(str(tarball), bucket, "one/model.tar.gz")
    container = {"Image": IMAGE, "ModelDataUrl": f"s3://{bucket}/one/model.tar.gz"}
    sm.create_model(ModelName=name, ExecutionRoleArn=ROLE, PrimaryContainer=container)
    variant = {"VariantName": "AllTraffic", "ModelName": name, "InstanceType": INSTANCE_TYPE}
    sm.create_endpoint_config(
        EndpointConfigName=name, ProductionVariants=[variant | {"InitialInstanceCount": 1}]
    )
    sm.create_endpoint(EndpointName=name, EndpointConfigName=name)
    try:
        single = _pytest(project, "--mmelocal-endpoint", name)
    finally:
        delete_endpoint(sm, name)
    single.assert_outcomes(errors=2)
    _one_line_each(
        single.stdout.str(),
        f"--mmelocal-endpoint {name}: endpoint {name} is not a multi-model endpoint (its "
        f"model {name} is in mode SingleModel): name one that serves an S3 prefix (Mode "
        "MultiModel)",
    )

    refused = _pytest(project, "--mmelocal-region", "eu-west-1")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(["*--mmelocal-region is only read with --mmelocal-endpoint*"])


def _one_line_each(out: str, line: str) -> None:
    """Each test's setup error is ``line`` alone: no traceback, no chained exceptions."""
    for test in ("test_one", "test_two"):
        section = out.split(f"ERROR at setup of {test} ", 1)[1].split("\n", 1)[1]
        body = re.split(r"\n(?:_{3,}|={3,}) ", section, maxsplit=1)[0]
        assert body.strip() == line, out
