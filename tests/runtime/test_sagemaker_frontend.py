"""The same models load through Triton's SageMaker MME front end (POST /models ...)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from runtime_models import write_mlp

from mmelocal.errors import ModelLoadError
from mmelocal.runtime.python_copies import prepare_model_for_server
from mmelocal.testing.sagemaker_client import SageMakerClient

pytestmark = pytest.mark.triton


@pytest.fixture
def sagemaker(triton_server):
    client = SageMakerClient(
        triton_server.launcher.endpoints.sagemaker_url, is_alive=triton_server.launcher.is_alive
    )
    yield client
    client.close()


def test_load_invoke_unload_through_sagemaker(tmp_path, triton_server, sagemaker, triton_client):
    source = write_mlp(tmp_path / "src", "mlp_sm", "onnx")
    url_dir = tmp_path / "model-hash-1"
    prepared = prepare_model_for_server(
        source, url_dir, backends_available=triton_server.backends, gpu=triton_server.gpu
    )
    assert prepared.derived
    target = "model-1.tar.gz"
    assert sagemaker.ping()
    sagemaker.load("hash1", url_dir, target_model=target, timeout_s=120)
    assert triton_client.model_ready(target)  # Triton knows it by the target header
    assert sagemaker.describe("hash1").json()["modelUrl"] == str(url_dir)

    with np.load(source / "mmelocal_reference.npz") as ref:
        x, y = ref["input:x"], ref["output:y"]
    tensor = {"name": "x", "shape": list(x.shape), "datatype": "FP32", "data": x.ravel().tolist()}
    body = json.dumps({"inputs": [tensor]}).encode()
    answer = sagemaker.invoke("hash1", body, target_model=target)
    assert answer.status == 200, answer.text
    out = answer.json()["outputs"][0]
    np.testing.assert_allclose(np.array(out["data"]).reshape(out["shape"]), y, atol=1e-4)

    with pytest.raises(ModelLoadError) as info:
        sagemaker.load("hash1", url_dir, target_model=target)
    assert info.value.status_code == 409

    assert sagemaker.unload("hash1", target_model=target, timeout_s=120).status == 200
    assert sagemaker.unload("hash1", target_model=target, timeout_s=30).status == 404
    assert sagemaker.invoke("hash1", body, target_model=target).status == 404
    assert not triton_client.model_ready(target)


def test_sagemaker_load_error_is_400_with_tritons_message(tmp_path, triton_server, sagemaker):
    source = write_mlp(tmp_path / "src", "mlp_broken", "onnx", reference=False)
    url_dir = tmp_path / "model-hash-2"
    prepare_model_for_server(source, url_dir, backends_available={"python"}, gpu=False)
    shutil.rmtree(url_dir / "mlp_broken" / "1")
    with pytest.raises(ModelLoadError) as info:
        sagemaker.load("hash2", url_dir, timeout_s=60)
    assert info.value.status_code == 400
    assert "mlp_broken" in info.value.triton_message or "version" in info.value.triton_message


def test_an_external_server_named_by_its_sagemaker_url_alone_is_up(tmp_path, triton_server):
    """``--triton-url SAGEMAKER_URL`` without a KServe URL: the SageMaker front end answers
    ``/ping`` and 400 to everything else, ``/v2/health/live`` included."""
    from mmelocal.runtime.launchers import make_launcher
    from mmelocal.runtime.server_config import ServerConfig

    url = triton_server.launcher.endpoints.sagemaker_url
    launcher = make_launcher(
        "external",
        ServerConfig(model_repository=tmp_path),
        sagemaker_url=url,
        start_timeout_s=5,
    )
    with launcher:
        assert launcher.is_alive()
