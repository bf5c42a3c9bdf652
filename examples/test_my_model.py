"""Test your own model on a real Triton with mmelocal's pytest fixtures.

Run: ``pytest examples/test_my_model.py`` (``--mmelocal-launcher=docker`` to use a Triton
image instead of the pip tritonserver). The fixtures come from mmelocal's pytest plugin,
installed with the package: nothing to import or configure.
"""

from __future__ import annotations

import numpy as np
import pytest

from mmelocal.builder.build import BuildOptions, build_model


@pytest.fixture(scope="module")
def resnet(tmp_path_factory):
    """resnet18 (random weights) exported to ONNX, with the torch model's reference outputs."""
    return build_model(
        "torchvision:resnet18",
        repo=tmp_path_factory.mktemp("repo"),
        options=BuildOptions(format="onnx", overrides={"warmup_batch_sizes": (1,)}),
    )


def test_answers_like_torch(resnet, load_model, triton_client):
    name = load_model(resnet)  # served by Triton; unloaded again after the test
    with np.load(resnet.reference_path) as reference:
        inputs = {
            k.split(":", 1)[1]: reference[k] for k in reference.files if k.startswith("input:")
        }
        expected = {
            k.split(":", 1)[1]: reference[k] for k in reference.files if k.startswith("output:")
        }
    outputs = triton_client.infer(name, inputs)
    for output_name, want in expected.items():
        np.testing.assert_allclose(outputs[output_name], want, atol=1e-3, rtol=1e-3)


def test_takes_a_batch_of_four(resnet, load_model, tritonclient_http):
    import tritonclient.http as th

    name = load_model(resnet)
    batch = np.random.default_rng(0).standard_normal((4, 3, 224, 224)).astype(np.float32)
    input_name, output_name = resnet.config.input[0].name, resnet.config.output[0].name
    request = th.InferInput(input_name, list(batch.shape), "FP32")
    request.set_data_from_numpy(batch)
    result = tritonclient_http.infer(name, [request])  # the plain tritonclient API works too
    assert result.as_numpy(output_name).shape == (4, 1000)


@pytest.mark.mmelocal_gpu
def test_runs_on_the_gpu(resnet, load_model, triton_server):
    name = load_model(resnet)  # skipped with the reason on machines without an NVIDIA GPU
    config = triton_server.client.model_config(name)
    assert config["instance_group"][0]["kind"] in ("KIND_GPU", "KIND_AUTO")
