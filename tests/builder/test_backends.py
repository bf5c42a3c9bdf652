"""The backend table (builder/backends.py) and what each layer derives from it."""

from __future__ import annotations

from pathlib import Path

import pytest
from tritonclient.grpc import model_config_pb2

from mmelocal.builder import backends
from mmelocal.builder.artifact import FORMATS as ARTIFACT_FORMATS
from mmelocal.builder.model_config import PLATFORMS as CONFIG_PLATFORMS
from mmelocal.builder.repository import artifact_filename
from mmelocal.runtime import check, python_copies
from mmelocal.testing import triton


def config(**fields: str) -> model_config_pb2.ModelConfig:
    return model_config_pb2.ModelConfig(name="m", **fields)


@pytest.mark.parametrize(
    ("fields", "gpu", "why"),
    [
        ({"platform": "pytorch_libtorch"}, False, None),
        ({"platform": "onnxruntime_onnx"}, False, None),
        ({"backend": "python"}, False, None),
        ({"platform": "ensemble"}, False, None),
        ({"platform": "tensorrt_plan"}, True, None),
        ({"platform": "tensorrt_plan"}, False, "runs only on an NVIDIA GPU"),
        ({"platform": "tensorflow_savedmodel"}, True, "needs the 'tensorflow' backend"),
        ({"backend": "openvino"}, False, "needs the 'openvino' backend"),
    ],
)
def test_host_limit_follows_the_table(fields: dict[str, str], gpu: bool, why: str | None) -> None:
    found = backends.host_limit(config(**fields), gpu=gpu)
    assert found is None if why is None else why in str(found)


def test_every_consumer_derives_from_the_one_table() -> None:
    assert ARTIFACT_FORMATS is backends.FORMATS
    assert CONFIG_PLATFORMS is backends.PLATFORMS
    assert python_copies.NATIVE_FORMATS is backends.NATIVE_FORMATS
    assert check.CONTAINER_BACKENDS is backends.CONTAINER_BACKENDS
    assert triton.PYTHON_ONLY is backends.PIP_SERVER_BACKENDS
    assert set(backends.FORMATS) == {"torchscript", "onnx", "tensorrt"}
    for platform, filename in backends.PLATFORM_FILES.items():
        assert artifact_filename(config(platform=platform)) == filename
    assert artifact_filename(config(backend="python")) == "model.py"


def test_the_runner_serves_every_export_format() -> None:
    for fmt, (platform, filename) in backends.FORMATS.items():
        backend, runner_format, runner_file = backends.NATIVE_FORMATS[platform]
        assert (runner_format, runner_file) == (fmt, filename)
        assert backends.backend_of(config(platform=platform)) == backend


def test_the_fixtures_launcher_settings_are_emulator_config_fields() -> None:
    """The mme_endpoint hints name ``mme_endpoint_config`` entries: EmulatorConfig's own."""
    from dataclasses import fields

    from mmelocal.emulator.emulator_config import EmulatorConfig

    names = {f.name for f in fields(EmulatorConfig)}
    assert {backends.FIXTURE_FLAGS.launcher, backends.FIXTURE_FLAGS.image} <= names
    hint = backends.FIXTURE_FLAGS.docker_hint
    assert '"launcher": "docker"' in hint and "mme_endpoint_config" in hint, hint


#: ``/opt/tritonserver/backends`` of ``nvcr.io/nvidia/tritonserver:24.10-py3``, the image
#: SageMaker's Triton is built from: the backends of ``build.py --enable-all``
#: (``enable_all()``, triton-inference-server/server r24.10), which builds that image
IMAGE_BACKENDS = {
    "ensemble",
    "identity",
    "square",
    "repeat",
    "tensorflow",
    "onnxruntime",
    "python",
    "dali",
    "pytorch",
    "openvino",
    "fil",
    "tensorrt",
}


def test_a_triton_image_is_taken_to_have_the_images_backends() -> None:
    """CONTAINER_BACKENDS was what mmelocal serves (python, pytorch, onnxruntime, tensorrt):
    with the Docker launcher a TensorFlow or OpenVINO model was still refused ("use the
    Docker launcher"), though the image has their backends."""
    assert backends.CONTAINER_BACKENDS == IMAGE_BACKENDS
    for name in sorted(IMAGE_BACKENDS - {"ensemble"}):
        found = backends.host_limit(
            config(backend=name), gpu=True, backends=backends.CONTAINER_BACKENDS
        )
        assert found is None, found


def test_a_test_server_with_the_images_backends_serves_a_tensorflow_model_as_it_is(
    tmp_path: Path,
) -> None:
    """What ``triton_server`` does with ``--mmelocal-launcher docker`` (its backends are
    CONTAINER_BACKENDS): the model is copied for the image's tensorflow backend."""
    from mmelocal.testing.triton import TestTritonServer

    tf_model = tmp_path / "models" / "tf"
    (tf_model / "1" / "model.savedmodel").mkdir(parents=True)
    (tf_model / "config.pbtxt").write_text('name: "tf"\nplatform: "tensorflow_savedmodel"\n')
    server = TestTritonServer(backends=backends.CONTAINER_BACKENDS, workdir=tmp_path / "server")
    try:
        prepared = server.add_model(tf_model)
    finally:
        server.stop()
    assert (prepared.backend, prepared.derived) == ("tensorflow", False)


@pytest.mark.parametrize(
    ("fields", "needs_gpu"),
    [
        ({"platform": "tensorrt_plan"}, True),
        ({"platform": "tensorflow_savedmodel"}, False),
        ({"backend": "openvino"}, False),
        ({"backend": "fil"}, False),
        ({"backend": "dali"}, False),
    ],
)
def test_the_docker_hint_asks_for_a_gpu_only_where_the_backend_needs_one(
    fields: dict[str, str], needs_gpu: bool
) -> None:
    """The Triton image runs TensorFlow, OpenVINO, FIL and DALI models on a CPU (Triton's
    quickstart, "Run on CPU-Only System"): only a TensorRT plan needs the GPU."""
    why = str(backends.host_limit(config(**fields), gpu=False))
    assert "--launcher docker" in why, why
    assert ("machine with an NVIDIA GPU" in why) is needs_gpu, why
