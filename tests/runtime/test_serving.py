"""A real Triton (the pip tritonserver) serves native models through mmelocal's Python runner."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import psutil
import pytest
from runtime_models import write_mlp, write_python_model

from mmelocal.builder.repository import REFERENCE_FILE
from mmelocal.errors import InferenceError, ModelLoadError

pytestmark = pytest.mark.triton


@pytest.mark.parametrize(
    "name", ["tinybert_torchscript", "tinybert_onnx", "resnet18_torchscript", "resnet18_onnx"]
)
def test_acceptance_models_match_torch(name, acceptance_models, load_model, triton_client):
    model_dir = acceptance_models[name]
    served = load_model(model_dir)
    with np.load(model_dir / REFERENCE_FILE) as ref:
        inputs = {k[6:]: ref[k] for k in ref.files if k.startswith("input:")}
        expected = {k[7:]: ref[k] for k in ref.files if k.startswith("output:")}
    outputs = triton_client.infer(served, inputs)
    assert expected
    for out_name, want in expected.items():
        np.testing.assert_allclose(outputs[out_name], want, atol=1e-3, rtol=1e-3)


def test_user_folder_untouched(acceptance_models, triton_server):
    model_dir = acceptance_models["resnet18_onnx"]
    before = {p: p.stat().st_mtime_ns for p in model_dir.rglob("*")}
    text = (model_dir / "config.pbtxt").read_text()
    prepared = triton_server.add_model(model_dir)
    assert prepared.derived and prepared.served_dir != model_dir
    assert 'platform: "onnxruntime_onnx"' in text
    assert (model_dir / "config.pbtxt").read_text() == text
    assert {p: p.stat().st_mtime_ns for p in model_dir.rglob("*")} == before
    assert not (model_dir / "1" / "model.py").exists()


def test_dynamic_batching_is_real(tmp_path, load_model, triton_client):
    # the batcher waits up to 2 s for the next request: the 8 threads open their connections
    # after the barrier, which on a busy 2-core CI machine can spread them over > 200 ms
    folder = write_mlp(tmp_path, "mlp_batching", "torchscript", max_queue_delay_us=2_000_000)
    name = load_model(folder)
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)
    x = np.ones((1, 4), np.float32)

    def send() -> None:
        try:
            barrier.wait()
            triton_client.infer(name, {"INPUT__0": x})
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=send) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    stats = triton_client.statistics(name)["model_stats"][0]
    warmup = 1  # the config's warmup request
    inferences = int(stats["inference_count"]) - warmup
    executions = int(stats["execution_count"]) - warmup
    assert inferences == 8
    assert executions < inferences, stats
    assert any(int(b["batch_size"]) > 1 for b in stats["batch_stats"])


def test_instance_group_count_two_gives_two_stubs(tmp_path, load_model, triton_server):
    folder = write_mlp(tmp_path, "mlp_two_instances", "onnx", instance_count=2)
    name = load_model(folder)
    served = str(triton_server.repository / name)
    server = psutil.Process(triton_server.launcher.pid())
    stubs = [
        p
        for p in server.children(recursive=True)
        if "triton_python_backend_stub" in " ".join(p.cmdline()) and served in " ".join(p.cmdline())
    ]
    assert len(stubs) == 2
    config = triton_server.client.model_config(name)
    assert config["instance_group"][0]["count"] == 2


def test_explicit_load_unload_index(tmp_path, triton_server, triton_client):
    folder = write_python_model(tmp_path, "explicit_py")
    prepared = triton_server.add_model(folder)
    entries = {m["name"]: m for m in triton_client.index()}
    assert "state" not in entries[prepared.name]  # in the repository, never loaded
    assert not triton_client.model_ready(prepared.name)
    triton_client.load(prepared.name)
    assert triton_client.model_ready(prepared.name)
    out = triton_client.infer(prepared.name, {"INPUT0": np.zeros((2, 4), np.float32)})
    np.testing.assert_array_equal(out["OUTPUT0"], np.ones((2, 4), np.float32))
    assert prepared.name in [m["name"] for m in triton_client.index(ready_only=True)]
    triton_client.unload(prepared.name)
    entry = {m["name"]: m for m in triton_client.index()}[prepared.name]
    assert entry["state"] == "UNAVAILABLE" and entry["reason"] == "unloaded"
    with pytest.raises(InferenceError):
        triton_client.infer(prepared.name, {"INPUT0": np.zeros((1, 4), np.float32)})


def test_load_error_carries_triton_message(tmp_path, triton_server, triton_client):
    folder = write_python_model(tmp_path, "boom_load", init='raise RuntimeError("no weights here")')
    triton_server.add_model(folder)
    try:
        with pytest.raises(ModelLoadError) as info:
            triton_client.load("boom_load")
    finally:
        # the session server answers not-ready (and SageMaker's /ping fails) while it holds
        # a model that failed to load: a working model under that name, loaded and unloaded,
        # clears it, so later tests on the server do not inherit the failure
        triton_server.add_model(write_python_model(tmp_path / "fixed", "boom_load"))
        triton_client.load("boom_load")
        triton_client.unload("boom_load")
    assert "no weights here" in info.value.triton_message
    assert info.value.model_name == "boom_load"


def test_load_of_unknown_model_fails_fast(triton_client):
    with pytest.raises(ModelLoadError):
        triton_client.load("no_such_model_here", timeout_s=30)


def test_metrics_text(triton_client):
    assert "nv_inference_request_failure" in triton_client.metrics()


def test_grpc_protocol(tmp_path, load_model, triton_server):
    from mmelocal.runtime.client import TritonClient

    name = load_model(write_python_model(tmp_path, "grpc_py"))
    client = TritonClient.for_launcher(triton_server.launcher, protocol="grpc")
    out = client.infer(name, {"INPUT0": np.full((1, 4), 2.0, np.float32)})
    np.testing.assert_array_equal(out["OUTPUT0"], np.full((1, 4), 3.0, np.float32))
    assert client.model_config(name)["name"] == name


def test_served_dir_is_in_server_repository(tmp_path, triton_server):
    prepared = triton_server.add_model(write_python_model(tmp_path, "where_py"))
    assert prepared.served_dir == Path(triton_server.repository) / "where_py"
    assert not prepared.derived


def test_a_negative_instance_count_loads_with_tritons_default(tmp_path, load_model, triton_client):
    """Triton takes ``count: -1`` and runs the group with its default count (1 for the
    Python backend): mmelocal reads the config and serves it, as Triton does."""
    config = (
        'name: "neg_count"\nbackend: "python"\nmax_batch_size: 8\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        "instance_group [ { count: -1 kind: KIND_CPU } ]\n"
    )
    name = load_model(write_python_model(tmp_path, "neg_count", config=config))
    assert triton_client.model_config(name)["instance_group"][0]["count"] == 1
    out = triton_client.infer(name, {"INPUT0": np.zeros((1, 4), np.float32)})
    np.testing.assert_allclose(out["OUTPUT0"], np.ones((1, 4), np.float32))
