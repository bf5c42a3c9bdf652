"""boto3 and tritonclient against the emulator on a real Triton (50 copies, small budget)."""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from emulator_helpers import MemorySampler, output_of, payload, raw_request, wait_for

from mmelocal.emulator.cache import ArtifactCache, target_key
from mmelocal.emulator.emulator import EmulatorConfig
from mmelocal.emulator.server import EmulatorServer
from mmelocal.emulator.store import LocalStore
from mmelocal.testing.endpoint import MmeEndpoint
from mmelocal.testing.tiny_model import expected, write_tarball

pytestmark = pytest.mark.triton

COPIES = 50
MiB = 1024 * 1024
# the tiny model's stub is ~40 MB RSS, less in PSS, and less still beside other Tritons that
# share its libraries: under 300 MiB about 6 copies fitted in a quiet run, 12 in a CI run
# beside xdist's (21 MiB each), so under this budget about 4 to 10 fit at 90 %, not all
BUDGET = 240 * MiB
#: copies the many-copies test calls: half again the 10 that fit beside other Tritons, so that
#: it evicts there too (as 18 was of those 12 under 300 MiB)
CHOSEN = 15
#: the disk budget, in artifacts: fewer than the models memory holds at once
DISK_ARTIFACTS = 2


def scale_of(target: str) -> float:
    return float(target.split("-")[1].split(".")[0]) + 1.0


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MmeEndpoint]:
    root = tmp_path_factory.mktemp("mme50")
    store = root / "store"
    store.mkdir()
    for i in range(COPIES):
        write_tarball(store / f"model-{i}.tar.gz", scale=float(i + 1))
    probe = ArtifactCache(root / "probe", LocalStore(store), disk_budget_bytes=10**9)
    artifact_bytes = probe.ensure("model-0.tar.gz").artifact.size_bytes
    config = EmulatorConfig(
        store=str(store),
        cache_dir=root / "cache",
        memory_budget_bytes=BUDGET,
        disk_budget_bytes=DISK_ARTIFACTS * artifact_bytes,
        endpoint_name="ep",
    )
    with EmulatorServer(config) as server:
        yield MmeEndpoint(url=server.url, store=store, server=server, endpoint_name="ep")


def triton_pid(endpoint: MmeEndpoint) -> int | None:
    pid: int | None = endpoint.state()["instances"][0]["pid"]
    return pid


def test_boto3_many_copies_over_budget(endpoint: MmeEndpoint) -> None:
    rng = random.Random(7)
    chosen = rng.sample(range(COPIES), CHOSEN)
    plan: list[int] = []
    for n, copy in enumerate(chosen):
        plan += [copy, copy] + ([chosen[n - 1]] if n else [])
    clients = [endpoint.client() for _ in range(4)]
    answers: list[tuple[str, np.ndarray, np.ndarray]] = []
    lock = threading.Lock()

    def call(k: int) -> None:
        target = f"model-{plan[k]}.tar.gz"
        x, body = payload(rows=2, start=float(k))
        response = clients[k % len(clients)].invoke_endpoint(
            EndpointName="ep", TargetModel=target, ContentType="application/json", Body=body
        )
        assert response["ResponseMetadata"]["HTTPStatusCode"] == 200
        assert response["ContentType"] == "application/json"
        assert response["InvokedProductionVariant"] == "AllTraffic"
        got = output_of(response["Body"].read())
        with lock:
            answers.append((target, x, got))

    with MemorySampler(lambda: triton_pid(endpoint)) as sampler, ThreadPoolExecutor(4) as pool:
        list(pool.map(call, range(len(plan))))
    assert len(answers) == len(plan)  # 0 failures
    for target, x, got in answers:
        np.testing.assert_array_equal(got, expected(x, scale_of(target)))
    state = endpoint.state()
    counts = state["event_counts"]
    assert counts["evict"] > 0, counts
    assert counts["load"] >= len(chosen)
    assert sampler.samples > 10
    assert sampler.max_bytes <= BUDGET, f"loaded set reached {sampler.max_bytes} > {BUDGET}"
    loaded = state["instances"][0]["loaded"]
    assert 0 < len(loaded) < len(chosen)
    # the same requests sent straight to Triton give the same numbers
    http_url = state["instances"][0]["http_url"]
    for entry in loaded:
        target = entry["target"]
        x, body = payload(rows=3, start=1.5)
        status, _, direct = raw_request(
            http_url,
            "POST",
            f"/v2/models/{target}/infer",
            [("Content-Type", "application/json")],
            body,
        )
        assert status == 200
        via = endpoint.invoke(target, body)
        np.testing.assert_array_equal(output_of(via), output_of(direct))
    metrics = endpoint.metrics()
    invocations = next(v for k, v in metrics.items() if k.startswith("Invocations{"))
    assert invocations >= len(plan)
    hit_count = next(v for k, v in metrics.items() if k.startswith("ModelCacheHit_count"))
    hit_sum = next(v for k, v in metrics.items() if k.startswith("ModelCacheHit_sum"))
    assert 0 < hit_sum < hit_count
    assert any(k.startswith("LoadedModelCount") for k in metrics)
    assert any(k.startswith("DiskUtilization") for k in metrics)
    assert_disk_within_budget(endpoint)


def assert_disk_within_budget(endpoint: MmeEndpoint) -> None:
    """The platform deletes unused artifacts when the volume is full: the disk holds more
    than its budget only while loaded models need it, and then only theirs."""
    assert endpoint.server is not None
    cache = endpoint.server.emulator.cache

    def settled() -> tuple[set[str], set[str]] | None:
        # an eviction's unload (or a trim) may still be finishing after the last answer:
        # its artifact goes once Triton has let the model go, so compare once both agree
        cache.close()  # deletions handed to the background thread are done
        loaded = {m["target"] for m in endpoint.state()["instances"][0]["loaded"]}
        on_disk = {
            json.loads(meta.read_text())["target"] for meta in cache.root.glob("*/meta.json")
        }
        return (loaded, on_disk) if on_disk == loaded else None

    loaded, on_disk = wait_for(settled, what="the artifacts on disk to be the loaded models'")
    assert set(cache.targets()) == on_disk
    assert len(loaded) > DISK_ARTIFACTS  # the case that matters: loaded alone fill the disk
    # DiskUtilization counts what the disk holds: each inode's blocks once (as extracted:
    # the bytecode Python writes beside model.py at load is not counted)
    blocks: dict[tuple[int, int], int] = {}
    skip = {".downloads", "__pycache__"}
    for path in cache.root.rglob("*"):
        st = path.lstat()
        if path.is_file() and path.name != "meta.json" and not skip & set(path.parts):
            blocks[(st.st_dev, st.st_ino)] = st.st_blocks * 512
    assert cache.used_bytes == sum(blocks.values())
    metrics = endpoint.metrics()
    disk = next(v for k, v in metrics.items() if k.startswith("DiskUtilization"))
    assert disk == pytest.approx(100.0 * cache.used_bytes / cache.disk_budget_bytes)


def test_32_simultaneous_first_calls_cause_one_load(endpoint: MmeEndpoint) -> None:
    target = "model-49.tar.gz"
    clients = [endpoint.client() for _ in range(32)]
    barrier = threading.Barrier(32)
    x, body = payload(rows=1)

    def call(k: int) -> np.ndarray:
        barrier.wait()
        response = clients[k].invoke_endpoint(
            EndpointName="ep", TargetModel=target, ContentType="application/json", Body=body
        )
        return output_of(response["Body"].read())

    with ThreadPoolExecutor(32) as pool:
        results = list(pool.map(call, range(32)))
    for got in results:
        np.testing.assert_array_equal(got, expected(x, scale_of(target)))
    events = [e for e in endpoint.state()["events"] if e["target"] == target]
    assert [e["kind"] for e in events].count("load") == 1
    assert [e["kind"] for e in events].count("download") == 1


def test_tritonclient_loads_on_demand(endpoint: MmeEndpoint) -> None:
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(endpoint.url.split("://")[1])
    assert client.is_server_live() and client.is_server_ready()
    target = "model-47.tar.gz"
    assert not client.is_model_ready(target)  # Triton's answer for a cold model: no load
    meta = client.get_model_metadata(target)  # what clients read first loads it
    assert meta["name"] == target
    assert client.is_model_ready(target)
    assert client.get_model_config(target)["max_batch_size"] == 8
    for binary in (True, False):
        cold = "model-46.tar.gz" if binary else "model-45.tar.gz"
        x = np.full((2, 4), 3.0, dtype=np.float32)
        tensor = httpclient.InferInput("INPUT0", [2, 4], "FP32")
        tensor.set_data_from_numpy(x, binary_data=binary)
        out = httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)
        result = client.infer(cold, [tensor], outputs=[out])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), expected(x, scale_of(cold)))
    from tritonclient.utils import InferenceServerException

    with pytest.raises(InferenceServerException, match="not found"):
        client.infer("missing.tar.gz", [tensor])


def test_ping_metrics_and_state(endpoint: MmeEndpoint) -> None:
    status, _, body = raw_request(endpoint.url, "GET", "/ping")
    assert status == 200
    ping = json.loads(body)
    assert ping["status"] == "Healthy" and "host-pss" in ping["instances"][0]["probe"]
    status, headers, body = raw_request(endpoint.url, "GET", "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain")
    assert b"# TYPE ModelLoadingTime summary" in body


def test_model_not_ready_when_the_load_is_slower_than_the_wait(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    write_tarball(store / "slow.tar.gz", scale=5.0)
    config = EmulatorConfig(
        store=str(store), cache_dir=tmp_path / "cache", load_wait_timeout_s=0.05
    )
    with EmulatorServer(config) as server:
        mme = MmeEndpoint(url=server.url, store=store, server=server)
        x, body = payload(rows=1)
        with pytest.raises(mme.client().exceptions.ModelNotReadyException) as info:
            mme.invoke("slow.tar.gz", body)
        error: dict[str, Any] = info.value.response["Error"]
        assert error["Code"] == "ModelNotReadyException"
        assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 429
        assert "still loading" in error["Message"]
        wait_for(lambda: any(e["kind"] == "load" for e in mme.state()["events"]))
        np.testing.assert_array_equal(output_of(mme.invoke("slow.tar.gz", body)), expected(x, 5.0))


def test_binary_payload_passes_through_and_env_endpoint(
    endpoint: MmeEndpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    import boto3
    import tritonclient.http as httpclient

    monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME", endpoint.url)
    runtime = boto3.client(
        "sagemaker-runtime",
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
    )
    target = "model-44.tar.gz"
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    tensor = httpclient.InferInput("INPUT0", [3, 4], "FP32")
    tensor.set_data_from_numpy(x, binary_data=True)
    out = httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)
    body, json_size = httpclient.InferenceServerClient.generate_request_body([tensor], [out])
    prefix = "application/vnd.sagemaker-triton.binary+json;json-header-size="
    response = runtime.invoke_endpoint(
        EndpointName="ep",
        TargetModel=target,
        ContentType=f"{prefix}{json_size}",
        Body=body,
        CustomAttributes="trace=abc",
    )
    content_type = response["ContentType"]
    assert content_type.startswith(prefix)
    result = httpclient.InferenceServerClient.parse_response_body(
        response["Body"].read(), header_length=int(content_type[len(prefix) :])
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), expected(x, scale_of(target)))


def test_a_model_triton_lost_is_loaded_again(endpoint: MmeEndpoint) -> None:
    """A model unloaded behind the emulator's back (Triton answers the invoke 404) is
    loaded again in place and the call is served."""
    target = "model-47.tar.gz"
    x, body = payload(rows=1)
    mme = endpoint.client()
    call = {"EndpointName": "ep", "TargetModel": target, "ContentType": "application/json"}
    mme.invoke_endpoint(Body=body, **call)
    sagemaker_url = endpoint.state()["instances"][0]["sagemaker_url"]
    status, _, _ = raw_request(
        sagemaker_url,
        "DELETE",
        f"/models/{target_key(target)}",
        [("X-Amzn-SageMaker-Target-Model", target)],
    )
    assert status == 200
    response = mme.invoke_endpoint(Body=body, **call)
    np.testing.assert_array_equal(output_of(response["Body"].read()), expected(x, scale_of(target)))
    kinds = [e["kind"] for e in endpoint.state()["events"] if e["target"] == target]
    assert kinds.count("load") == 2
    loaded = endpoint.state()["instances"][0]["loaded"]
    assert [m["in_flight"] for m in loaded if m["target"] == target] == [0]


def test_the_runtime_calls_the_emulator_does_not_serve_are_the_services_validation_error(
    endpoint: MmeEndpoint,
) -> None:
    """InvokeEndpointAsync and InvokeEndpointWithResponseStream (botocore's
    sagemaker-runtime model: ``/endpoints/{name}/async-invocations`` and
    ``.../invocations-response-stream``) reach the emulator: refused with the service's
    error shape, a ``ValidationError`` boto3 raises by name, as the local AWS refuses
    them (they were Triton's ``{"error": "Method Not Allowed"}``, 405, which boto3 raised
    as an error coded "405")."""
    from botocore.exceptions import ClientError

    client = endpoint.client(retries={"max_attempts": 1})
    calls = {
        "InvokeEndpointAsync": lambda: client.invoke_endpoint_async(
            EndpointName="ep", InputLocation="s3://bucket/input.json"
        ),
        "InvokeEndpointWithResponseStream": lambda: client.invoke_endpoint_with_response_stream(
            EndpointName="ep", Body=b"{}"
        ),
    }
    for operation, call in calls.items():
        with pytest.raises(ClientError) as refused:
            call()
        error = refused.value.response["Error"]
        assert error["Code"] == "ValidationError", (operation, refused.value.response)
        assert operation in error["Message"] and "InvokeEndpoint" in error["Message"]
        assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
