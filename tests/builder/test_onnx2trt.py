"""ONNX -> TensorRT: profiles, trtexec command lines, builder choice; the build needs a GPU."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from typing import Any

import pytest

from mmelocal.builder import onnx2trt
from mmelocal.builder.tensors import Signature, TensorSpec
from mmelocal.errors import ExportError, UserInputError

NLP = Signature(
    inputs=(
        TensorSpec("input_ids", "TYPE_INT64", (-1, -1)),
        TensorSpec("attention_mask", "TYPE_INT64", (-1, -1)),
    ),
    outputs=(TensorSpec("last_hidden_state", "TYPE_FP32", (-1, -1, 384)),),
)
CV = Signature(
    inputs=(TensorSpec("input", "TYPE_FP32", (-1, 3, 224, 224)),),
    outputs=(TensorSpec("output", "TYPE_FP32", (-1, 1000)),),
)


def test_profile_for_text_model() -> None:
    profile = onnx2trt.optimization_profile(
        NLP, min_batch=1, opt_batch=4, max_batch=8, seq_lens=(1, 64, 128)
    )
    assert onnx2trt.profile_as_dict(profile) == {
        "input_ids": ((1, 1), (4, 64), (8, 128)),
        "attention_mask": ((1, 1), (4, 64), (8, 128)),
    }


def test_profile_for_image_model_defaults_opt_to_max() -> None:
    (entry,) = onnx2trt.optimization_profile(CV, max_batch=32)
    assert entry.min_shape == (1, 3, 224, 224)
    assert entry.opt_shape == entry.max_shape == (32, 3, 224, 224)


def test_profile_errors() -> None:
    with pytest.raises(UserInputError, match="seq_lens"):
        onnx2trt.optimization_profile(NLP, max_batch=8)
    with pytest.raises(UserInputError, match="min_batch <= opt_batch <= max_batch"):
        onnx2trt.optimization_profile(CV, min_batch=4, max_batch=2)
    with pytest.raises(UserInputError, match="1 <= min <= opt <= max"):
        onnx2trt.optimization_profile(NLP, max_batch=8, seq_lens=(64, 32, 128))


def test_trtexec_command_line() -> None:
    profile = onnx2trt.optimization_profile(NLP, opt_batch=4, max_batch=8, seq_lens=(1, 128, 128))
    cmd = onnx2trt.trtexec_args(
        "m.onnx", "m.plan", profile, fp16=True, int8=True, workspace_bytes=2 << 30
    )
    assert cmd == [
        "trtexec",
        "--onnx=m.onnx",
        "--saveEngine=m.plan",
        "--minShapes=input_ids:1x1,attention_mask:1x1",
        "--optShapes=input_ids:4x128,attention_mask:4x128",
        "--maxShapes=input_ids:8x128,attention_mask:8x128",
        "--memPoolSize=workspace:2048M",
        "--fp16",
        "--int8",
        "--skipInference",
    ]
    plain = onnx2trt.trtexec_args("a.onnx", "a.plan", onnx2trt.optimization_profile(CV))
    assert "--fp16" not in plain and "--int8" not in plain


def test_docker_run_spec_mounts_both_folders(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    profile = onnx2trt.optimization_profile(CV, max_batch=4)
    spec = onnx2trt.docker_run_spec(
        "nvcr.io/nvidia/tensorrt:24.08-py3",
        tmp_path / "in" / "model.onnx",
        tmp_path / "out" / "model.plan",
        profile,
        fp16=True,
        int8=False,
        workspace=1 << 30,
    )
    assert spec["volumes"][str(tmp_path / "in")] == {"bind": "/mmelocal/in", "mode": "ro"}
    assert spec["volumes"][str(tmp_path / "out")] == {"bind": "/mmelocal/out", "mode": "rw"}
    assert spec["command"][:3] == [
        "trtexec",
        "--onnx=/mmelocal/in/model.onnx",
        "--saveEngine=/mmelocal/out/model.plan",
    ]
    assert "--fp16" in spec["command"] and spec["remove"] is True


def test_choose_builder_order(monkeypatch) -> None:
    monkeypatch.setattr(onnx2trt, "tensorrt_installed", lambda: False)
    monkeypatch.setattr(onnx2trt, "find_trtexec", lambda name: None)
    with pytest.raises(ExportError, match="TensorRT is not available here"):
        onnx2trt.choose_builder()
    assert onnx2trt.choose_builder(docker_image="img") == ("docker", "img")
    monkeypatch.setattr(onnx2trt, "find_trtexec", lambda name: "/usr/bin/trtexec")
    assert onnx2trt.choose_builder(docker_image="img") == ("trtexec", "/usr/bin/trtexec")
    monkeypatch.setattr(onnx2trt, "tensorrt_installed", lambda: True)
    assert onnx2trt.choose_builder() == ("python", None)


def test_build_engine_runs_trtexec(monkeypatch, artifact_of, tmp_path: Path) -> None:
    """Everything up to the engine build, with trtexec replaced by a recorder."""
    seen: list[list[str]] = []

    def fake_run(cmd, timeout_s):
        seen.append(cmd)
        Path(cmd[2].split("=", 1)[1]).write_bytes(b"plan")

    monkeypatch.setattr(onnx2trt, "tensorrt_installed", lambda: False)
    monkeypatch.setattr(onnx2trt, "find_trtexec", lambda name: "/opt/trt/bin/trtexec")
    monkeypatch.setattr(onnx2trt, "_run_local", fake_run)
    onnx_path = artifact_of("tiny_bert", "onnx").path
    plan = onnx2trt.build_engine(
        onnx_path,
        tmp_path / "model.plan",
        fp16=True,
        max_batch=8,
        opt_batch=4,
        seq_lens=(1, 16, 16),
    )
    assert plan.read_bytes() == b"plan"
    assert seen[0][0] == "/opt/trt/bin/trtexec"
    assert "--maxShapes=input_ids:8x16,attention_mask:8x16" in seen[0]


def test_trtexec_failure_is_one_line(monkeypatch, tmp_path: Path) -> None:
    script = tmp_path / "trtexec"
    script.write_text("#!/bin/sh\necho '[E] no CUDA device' >&2\nexit 3\n")
    script.chmod(0o755)
    with pytest.raises(ExportError, match=r"trtexec failed \(exit 3\): \[E\] no CUDA device"):
        onnx2trt._run_local([str(script), "--onnx=x"], timeout_s=30)


def _has_gpu_tensorrt() -> bool:
    if importlib.util.find_spec("tensorrt") is None and shutil.which("trtexec") is None:
        return False
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:
        return False


@pytest.mark.mmelocal_gpu
@pytest.mark.skipif(not _has_gpu_tensorrt(), reason="needs an NVIDIA GPU and TensorRT/trtexec")
def test_real_engine_build(artifact_of, tmp_path: Path) -> None:
    plan = onnx2trt.build_engine(
        artifact_of("resnet", "onnx").path, tmp_path / "model.plan", fp16=True, max_batch=2
    )
    assert plan.stat().st_size > 1_000_000


def _docker_build(
    monkeypatch: pytest.MonkeyPatch,
    onnx_path: Path,
    out: Path,
    *,
    info: dict[str, Any] | None = None,
    refusal: str | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """Build through the Docker builder with an engine that records what ``containers.run``
    was given (and writes a plan where trtexec would). ``info`` is its ``docker info``
    (none: no sign of the NVIDIA Container Toolkit); with ``refusal`` it refuses the run
    with that message, as the engine answers (``APIError``)."""
    docker = pytest.importorskip("docker")
    calls: dict[str, Any] = {}

    class Images:
        def get(self, image: str) -> None:
            calls["image"] = image

    class Containers:
        def run(self, **kwargs: Any) -> bytes:
            calls.update(kwargs)
            if refusal is not None:
                raise docker.errors.APIError(refusal)
            out_dir = Path(next(k for k, v in kwargs["volumes"].items() if v["mode"] == "rw"))
            (out_dir / "model.plan").write_bytes(b"engine")
            return b""

    class Client:
        images = Images()
        containers = Containers()

        def info(self) -> dict[str, Any]:
            return info or {"Runtimes": {"runc": {}}}

    monkeypatch.setattr(onnx2trt, "tensorrt_installed", lambda: False)
    monkeypatch.setattr(onnx2trt, "find_trtexec", lambda name: None)
    monkeypatch.setattr(docker, "from_env", lambda: Client())
    plan = onnx2trt.build_engine(onnx_path, out, max_batch=2, docker_image="trt:test", **kwargs)
    assert plan.read_bytes() == b"engine"
    return calls


def test_docker_builder_runs_trtexec_with_the_gpus(
    monkeypatch, artifact_of, tmp_path: Path
) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    calls = _docker_build(monkeypatch, artifact_of("resnet", "onnx").path, tmp_path / "model.plan")
    assert calls["image"] == "trt:test"
    (request,) = calls["device_requests"]
    assert request["Capabilities"] == [["gpu"]] and request["Count"] == -1
    assert "--maxShapes=pixel_values:2x3x224x224" in calls["command"]
    assert "CUDA_VISIBLE_DEVICES" not in calls.get("environment", {})


GPU_1 = "GPU-00000001-0000-0000-0000-000000000001"


def test_docker_builder_gives_the_container_the_chosen_gpus_by_uuid(
    monkeypatch, artifact_of, tmp_path: Path
) -> None:
    """trtexec builds on the first GPU it sees: the container gets the chosen card alone
    (device request and CUDA_VISIBLE_DEVICES), not every GPU with trtexec on GPU 0."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    calls = _docker_build(
        monkeypatch,
        artifact_of("resnet", "onnx").path,
        tmp_path / "model.plan",
        docker_gpus=(GPU_1,),
    )
    (request,) = calls["device_requests"]
    assert request["DeviceIDs"] == [GPU_1] and request["Capabilities"] == [["gpu"]]
    assert not request.get("Count")
    assert calls["environment"] == {"CUDA_VISIBLE_DEVICES": GPU_1}


@pytest.mark.parametrize(
    ("visible", "docker_gpus", "match"),
    [
        ("1", None, r"CUDA_VISIBLE_DEVICES=1 chooses the GPU .* docker_gpus"),
        ("", (), r"docker_gpus names no GPU"),
    ],
)
def test_docker_builder_refuses_a_selection_it_cannot_honour(
    monkeypatch, artifact_of, tmp_path: Path, visible: str, docker_gpus: Any, match: str
) -> None:
    """CUDA_VISIBLE_DEVICES set and no GPUs given: the container would get every GPU and
    trtexec build on another card than the one chosen (a plan is tied to its GPU model)."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    given = {} if docker_gpus is None else {"docker_gpus": docker_gpus}
    with pytest.raises(UserInputError, match=match):
        _docker_build(
            monkeypatch, artifact_of("resnet", "onnx").path, tmp_path / "model.plan", **given
        )


def _cdi(*names: str) -> dict[str, Any]:
    """``docker info`` of an engine that discovered the CDI devices ``names`` (API 1.50)."""
    return {"DiscoveredDevices": [{"Source": "cdi", "ID": n} for n in names]}


@pytest.mark.parametrize(
    ("listed", "docker_gpus", "device_ids"),
    [
        (("nvidia.com/gpu=all", "nvidia.com/gpu=0"), None, ["nvidia.com/gpu=all"]),
        ((f"nvidia.com/gpu={GPU_1}", "nvidia.com/gpu=all"), (GPU_1,), [f"nvidia.com/gpu={GPU_1}"]),
    ],
    ids=["every-gpu", "by-uuid"],
)
def test_docker_builder_asks_for_the_gpus_as_the_launcher_does(
    monkeypatch, artifact_of, tmp_path: Path, listed: tuple[str, ...], docker_gpus: Any, device_ids
) -> None:
    """An engine that lists the toolkit's CDI devices (``DiscoveredDevices``) gets them by
    their CDI names, as the Docker launcher asks (``EngineGpus``): it injects them with
    neither the nvidia runtime nor the toolkit's hook, which a ``--gpus`` request needs."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    given = {} if docker_gpus is None else {"docker_gpus": docker_gpus}
    calls = _docker_build(
        monkeypatch,
        artifact_of("resnet", "onnx").path,
        tmp_path / "model.plan",
        info=_cdi(*listed),
        **given,
    )
    (request,) = calls["device_requests"]
    assert (request["Driver"], request["DeviceIDs"]) == ("cdi", device_ids)
    assert not request.get("Count") and not request.get("Capabilities")


def test_docker_builder_says_what_to_do_when_the_engine_gives_no_gpu(
    monkeypatch, artifact_of, tmp_path: Path
) -> None:
    """An engine without the NVIDIA Container Toolkit refuses a ``--gpus`` request (moby
    ``daemon/errors.go``): the error says how to set the engine up, as the launcher's."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    refusal = 'could not select device driver "" with capabilities: [[gpu]]'
    with pytest.raises(ExportError) as info:
        _docker_build(
            monkeypatch,
            artifact_of("resnet", "onnx").path,
            tmp_path / "model.plan",
            refusal=refusal,
        )
    message = str(info.value)
    for words in (refusal, "NVIDIA Container Toolkit", "nvidia-ctk runtime configure"):
        assert words in message, message
    assert "gpus=False" not in message  # a plan is built on a GPU: no CPU way out


@pytest.mark.parametrize("docker_host", ["ssh://me@gpu-box", "tcp://gpu-box.invalid:2375"])
def test_docker_builder_refuses_an_engine_on_another_machine(
    monkeypatch, artifact_of, tmp_path: Path, docker_host: str
) -> None:
    """The build mounts this machine's ONNX and output folders into the container: on
    another machine's engine those are that machine's folders. Refused before connecting."""
    from mmelocal.errors import RemoteDockerEngineError

    docker = pytest.importorskip("docker")

    def no_connection(**_: object) -> None:
        raise AssertionError("the build connected to the engine")

    monkeypatch.setattr(onnx2trt, "tensorrt_installed", lambda: False)
    monkeypatch.setattr(onnx2trt, "find_trtexec", lambda name: None)
    monkeypatch.setattr(docker, "from_env", no_connection)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("DOCKER_HOST", docker_host)
    with pytest.raises(RemoteDockerEngineError, match=r"mounts this machine's ONNX") as info:
        onnx2trt.build_engine(
            artifact_of("resnet", "onnx").path,
            tmp_path / "model.plan",
            max_batch=2,
            docker_image="trt:test",
        )
    assert info.value.address == docker_host


def test_mmelocal_build_reads_the_selection_as_the_docker_launcher(monkeypatch) -> None:
    """``mmelocal build --trt-image``: the GPUs CUDA_VISIBLE_DEVICES names, by UUID (two
    T4s here, NVML stood in); none given when it is unset or no container runs."""
    import sys

    from shared_helpers import StandInNvml

    from mmelocal.cli.build import trt_docker_gpus

    monkeypatch.setitem(sys.modules, "pynvml", StandInNvml({0: 0, 1: 0}, names=("Tesla T4",) * 2))
    monkeypatch.setattr(onnx2trt, "tensorrt_installed", lambda: False)
    monkeypatch.setattr(onnx2trt, "find_trtexec", lambda name: None)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert trt_docker_gpus("tensorrt", "trt:test") == (GPU_1,)
    assert trt_docker_gpus("onnx", "trt:test") is None
    monkeypatch.setattr(onnx2trt, "find_trtexec", lambda name: "/usr/bin/trtexec")
    assert trt_docker_gpus("tensorrt", "trt:test") is None  # trtexec here inherits it
    monkeypatch.setattr(onnx2trt, "find_trtexec", lambda name: None)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert trt_docker_gpus("tensorrt", "trt:test") is None


def test_docker_image_missing(monkeypatch, artifact_of, tmp_path: Path) -> None:
    docker = pytest.importorskip("docker")

    class Images:
        def get(self, image: str) -> None:
            raise docker.errors.ImageNotFound("nope")

    class Client:
        images = Images()

    monkeypatch.setattr(onnx2trt, "tensorrt_installed", lambda: False)
    monkeypatch.setattr(onnx2trt, "find_trtexec", lambda name: None)
    monkeypatch.setattr(docker, "from_env", lambda: Client())
    with pytest.raises(ExportError, match="docker pull trt:missing"):
        onnx2trt.build_engine(
            artifact_of("resnet", "onnx").path,
            tmp_path / "model.plan",
            max_batch=2,
            docker_image="trt:missing",
        )
