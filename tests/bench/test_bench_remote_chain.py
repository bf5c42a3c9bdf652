"""``mmelocal benchmark``: deploy -> capacity -> load test -> sweep -> report -> undeploy.

moto is the control plane and S3; the emulator serves the endpoint's prefix as its runtime
(``AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME``). The probe reads host memory there.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from remote_helpers import INSTANCE_TYPE, REGION, ROLE, aws_env, write_reference_tarball

from mmelocal.cli.main import main

pytestmark = pytest.mark.triton


@dataclass
class Chain:
    base: str
    bucket: str
    tarball: Path


@pytest.fixture(scope="module")
def chain(moto_s3: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chain]:
    import boto3

    from mmelocal.emulator.platform import EmulatorConfig
    from mmelocal.emulator.server import EmulatorServer

    root = tmp_path_factory.mktemp("chain")
    base, bucket = f"bm-{uuid.uuid4().hex[:8]}", f"mme-{uuid.uuid4().hex[:12]}"
    with pytest.MonkeyPatch.context() as env:
        aws_env(env, moto_s3, root)
        boto3.client("s3", region_name=REGION).create_bucket(Bucket=bucket)
        # the runtime of the endpoint the chain creates for the tiny (Python-backend) model
        config = EmulatorConfig(
            store=f"s3://{bucket}/bench/python/",
            s3_endpoint_url=moto_s3,
            cache_dir=root / "cache",
            memory_budget_bytes=8 * 1024**3,
            endpoint_name=f"{base}-python",
            instances=1,
        )
        with EmulatorServer(config) as server:
            env.setenv("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME", server.url)
            yield Chain(
                base=base,
                bucket=bucket,
                tarball=write_reference_tarball(root / "tiny.tar.gz", scale=2.0),
            )


def _args(chain: Chain, out: Path) -> list[str]:
    return ["benchmark", str(chain.tarball), "--endpoint-name", chain.base,
            "--s3-uri", f"s3://{chain.bucket}/bench/", "--role", ROLE,
            "--instance-type", INSTANCE_TYPE, "--memory-budget", "8GiB", "--max-copies", "2",
            "--max-users", "2", "--duration", "3s", "--users", "2", "--step-duration", "2s",
            "--dynamic-batching", "on", "--instances", "1",
            "--report", str(out / "report"), "--json", str(out / "results.json")]  # fmt: skip


def _endpoints(base: str) -> list[str]:
    import boto3

    found = boto3.client("sagemaker").list_endpoints(NameContains=base)["Endpoints"]
    return [e["EndpointName"] for e in found]


def test_the_chain_asks_first_and_creates_nothing_when_refused(
    chain: Chain,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import io

    import boto3

    monkeypatch.setattr("sys.stdin", io.StringIO("n\n"))
    code = main(_args(chain, tmp_path))
    captured = capsys.readouterr()
    assert code == 1
    assert f"{chain.base}-python: create the endpoint" in captured.out
    assert "ml.g4dn.xlarge" in captured.out and "/h =" in captured.out
    assert "nothing was created" in captured.err
    assert _endpoints(chain.base) == []
    listed = boto3.client("s3").list_objects_v2(Bucket=chain.bucket)
    assert listed.get("KeyCount", 0) == 0


def test_the_chain_deploys_measures_reports_and_undeploys(
    chain: Chain, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import boto3

    code = main([*_args(chain, tmp_path), "--yes"])
    printed = capsys.readouterr().out
    assert code == 0, printed
    results = json.loads((tmp_path / "results.json").read_text())
    assert [r["kind"] for r in results] == ["benchmark", "sweep"]
    bench = results[0]
    assert bench["framework"] == "python" and bench["instance_type"] == INSTANCE_TYPE
    assert bench["endpoint"] == f"{chain.base}-python" and bench["max_models_loaded"] == 2
    assert bench["capacity"]["instance_type"] == INSTANCE_TYPE
    steps = bench["loadtest"]["steps"]
    assert bench["loadtest"]["target_count"] == 2 and sum(s["requests"] for s in steps) > 0
    assert bench["throughput_rps"] == max(s["throughput_rps"] for s in steps if not s["failures"])
    assert [row["name"] for row in results[1]["rows"]] == ["model-db"]
    assert results[1]["rows"][0]["status"] == "ok"
    page = (tmp_path / "report" / "index.html").read_text()
    assert "Comparison per model and framework" in page
    comparison = (tmp_path / "report" / "benchmark-comparison.csv").read_text().splitlines()
    assert comparison[0].startswith("instance_type,model,framework,max_models_loaded")
    assert comparison[1].startswith(f"{INSTANCE_TYPE},tiny,python,2,")
    # everything billable is gone, and the objects mmelocal put in S3 with it
    assert _endpoints(chain.base) == []
    assert f"deleted endpoint {chain.base}-python" in printed
    listed = boto3.client("s3").list_objects_v2(Bucket=chain.bucket)
    assert listed.get("KeyCount", 0) == 0
