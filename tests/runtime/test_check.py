"""``mmelocal check`` and ``mmelocal triton`` on the real pip tritonserver."""

from __future__ import annotations

import json
import sys

import pytest
from runtime_models import broken_repositories, write_mlp, write_python_model
from shared_helpers import StandInNvml

from mmelocal.cli.main import main
from mmelocal.errors import UserInputError
from mmelocal.runtime import check as check_module
from mmelocal.runtime.check import CheckOptions, check_path

pytestmark = pytest.mark.triton


def _run_json(capsys, *args: str) -> tuple[int, dict]:
    code = main(["check", *args, "--json", "-"])
    out = capsys.readouterr().out
    return code, json.loads(out)


def test_check_passes_on_a_good_repository(tmp_path, capsys):
    repo = tmp_path / "repo"
    write_mlp(repo, "mlp_ts", "torchscript")
    write_mlp(repo, "mlp_onnx", "onnx")
    write_python_model(repo, "py_ok")
    code, report = _run_json(capsys, str(repo))
    assert code == 0, report
    assert report["ok"] is True
    models = {m["name"]: m for m in report["models"]}
    assert set(models) == {"mlp_ts", "mlp_onnx", "py_ok"}
    for model in models.values():
        assert model["status"] == "passed", model
        assert model["load_time_s"] > 0 and model["unload_time_s"] >= 0
        assert model["memory_bytes"] > 0 and model["memory_kind"] == "host_pss"
        assert model["first_infer_ms"] > 0
    assert models["mlp_ts"]["reference"] == "matched"
    assert models["mlp_onnx"]["reference"] == "matched"
    assert models["mlp_onnx"]["warmup_samples"] >= 1
    assert any("onnx runner" in note for note in models["mlp_onnx"]["notes"])


def test_check_fails_with_a_clear_reason_on_broken_repositories(tmp_path, capsys):
    failures = {}
    for case, (repo, expected_text) in broken_repositories(tmp_path).items():
        # A bounded load/unload wait: a model that hangs must cost a minute, not five.
        code, report = _run_json(capsys, str(repo), "--load-timeout", "60")
        assert code == 1, (case, report)
        assert report["ok"] is False
        [model] = report["models"]
        assert model["status"] == "failed"
        failures[case] = " ".join(model["errors"])
        assert expected_text in failures[case], (case, failures[case])
    assert "load:" in failures["raise_at_load"]  # Triton's own load error
    assert "inference:" in failures["raise_at_infer"]
    assert "artifact.missing" in failures["missing_file"]


def test_check_human_output_and_tarball(tmp_path, capsys):
    from mmelocal.builder.tarball import create_model_tarball

    folder = write_python_model(tmp_path / "repo", "py_tar")
    tarball = create_model_tarball(folder, tmp_path / "model.tar.gz")
    assert main(["check", str(tarball)]) == 0
    out = capsys.readouterr().out
    assert "py_tar" in out and "passed" in out and "OK 1/1" in out


def test_check_on_an_external_server_uploads_the_files(tmp_path, triton_server):
    repo = tmp_path / "repo"
    write_mlp(repo, "mlp_upload", "onnx")
    # its backends told: an external server is taken to have every backend, and the pip
    # server (a kept `mmelocal triton start` one too) has Python's alone; Triton's refusal
    # said nothing about --backends
    untold = check_path(repo, CheckOptions(launcher="external", url=triton_server.http_url))
    assert not untold.ok
    (error,) = untold.models[0].errors
    assert "unable to find backend library for backend 'onnxruntime'" in error, error
    assert "give the backends it has with --backends, e.g. --backends python" in error, error
    options = CheckOptions(
        launcher="external", url=triton_server.http_url, backends=frozenset({"python"})
    )
    report = check_path(repo, options)
    assert report.ok, report.to_dict()
    assert report.models[0].reference == "matched"
    assert not (triton_server.repository / "mlp_upload").exists()


def test_triton_start_status_stop(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MMELOCAL_STATE_DIR", str(tmp_path / "state"))
    repo = tmp_path / "repo"
    write_python_model(repo, "kept_py")
    assert (
        main(
            [
                "triton",
                "start",
                "--repo",
                str(repo),
                "--name",
                "t1",
                "--load",
                "kept_py",
                "--json",
                "-",
            ]
        )
        == 0
    )
    started = json.loads(capsys.readouterr().out)
    try:
        assert main(["triton", "status", "--name", "t1", "--json", "-"]) == 0
        status = json.loads(capsys.readouterr().out)
        assert status["running"] is True and status["pid"] == started["pid"]
        assert {"name": "kept_py", "version": "1", "state": "READY"} in status["models"]
        assert main(["triton", "start", "--repo", str(repo), "--name", "t1"]) == 2  # already runs
        capsys.readouterr()
    finally:
        assert main(["triton", "stop", "--name", "t1"]) == 0
    assert main(["triton", "status", "--name", "t1"]) == 1
    import psutil

    assert (
        not psutil.pid_exists(started["pid"]) or psutil.Process(started["pid"]).status() == "zombie"
    )


def test_check_all_loaded_measures_models_together(tmp_path):
    repo = tmp_path / "repo"
    write_python_model(repo, "py_a")
    write_python_model(repo, "py_b")
    report = check_path(repo, CheckOptions(all_loaded=True))
    assert report.ok, report.to_dict()
    assert report.baseline_memory_bytes and report.all_loaded_memory_bytes
    each = sum(m.memory_bytes or 0 for m in report.models)
    assert report.all_loaded_memory_bytes >= 0.5 * each  # both stubs alive at the same time
    assert all(m.unload_time_s is not None for m in report.models)


def test_check_a_root_layout_tarball(tmp_path, capsys):
    """config.pbtxt + 1/model.pt at the archive root, no name, KIND_GPU: the MME layout
    rules make the root the model folder; it is checked under the name SageMaker gives it."""
    import tarfile

    folder = write_mlp(tmp_path / "src", "mlp", "torchscript")
    config = folder / "config.pbtxt"
    text = config.read_text().replace('name: "mlp"\n', "")
    config.write_text(text.replace("instance_group {", "instance_group {\n  kind: KIND_GPU"))
    tar_path = tmp_path / "root.tar.gz"
    with tarfile.open(tar_path, "w:gz") as tar:
        for child in sorted(folder.iterdir()):
            tar.add(child, arcname=child.name)
    code, report = _run_json(capsys, str(tar_path))
    assert code == 0, report
    [model] = report["models"]
    assert model["name"] == "model" and model["status"] == "passed", model
    assert model["reference"] == "matched"
    assert any("KIND_CPU" in note for note in model["notes"])


def test_a_crash_is_explained_by_its_own_log_lines_not_an_earlier_crash(tmp_path):
    """The server's log runs on across the restart after a crash: a second crash that
    leaves no signal line (a SIGKILL, as the OOM killer sends) is not given the first's."""
    repo = tmp_path / "repo"
    # the load never completes: the server dies during it
    kill = "import os, signal, time; os.kill(os.getppid(), signal.{}); time.sleep(60)"
    write_python_model(repo, "a_segfaults", init=kill.format("SIGSEGV"))
    write_python_model(repo, "b_is_killed", init=kill.format("SIGKILL"))
    report = check_path(repo, CheckOptions(load_timeout_s=60))
    errors = {m.name: " ".join(m.errors) for m in report.models}
    assert "Triton crashed while checking this model" in errors["a_segfaults"], errors
    assert "Signal (11)" in errors["a_segfaults"], errors
    assert "Triton crashed while checking this model" in errors["b_is_killed"], errors
    assert "Signal (11)" not in errors["b_is_killed"], errors


#: the used memory of each GPU of the stand-in NVML
GPU_USED = {0: 5 * 2**30, 1: 7 * 2**30}


def _TwoGpus() -> StandInNvml:
    """Two devices, each with its own used memory (GPU_USED)."""
    return StandInNvml(GPU_USED, names=("NVIDIA A10G",) * 2)


def _launcher_env(monkeypatch) -> dict[str, str]:
    """The environment the check gives its server (filled when the launcher is made)."""
    seen: dict[str, str] = {}
    real = check_module.make_launcher

    def launcher_seen(kind, config, **kw):
        seen.update(config.env)
        return real(kind, config, **kw)

    monkeypatch.setattr(check_module, "make_launcher", launcher_seen)
    return seen


@pytest.mark.parametrize("gpu_index", [0, 1])
def test_check_reads_the_memory_of_the_gpu_its_triton_runs_on(tmp_path, monkeypatch, gpu_index):
    """On a host with several GPUs the check runs Triton on one (as a SageMaker instance
    has one) and reads that device's memory, not the sum over the host's GPUs. Triton is
    given the card's UUID: the card NVML numbered, whatever order CUDA numbers them in."""
    nvml = _TwoGpus()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "FASTEST_FIRST")
    seen = _launcher_env(monkeypatch)
    repo = tmp_path / "repo"
    write_python_model(repo, "py_gpu")
    report = check_path(repo, CheckOptions(gpu_index=gpu_index))
    assert report.ok, report.to_dict()
    assert report.memory_kind == "gpu"
    assert report.baseline_memory_bytes == GPU_USED[gpu_index]
    assert seen["CUDA_VISIBLE_DEVICES"] == nvml.nvmlDeviceGetUUID(gpu_index)


def test_check_without_gpu_runs_on_the_gpu_cuda_visible_devices_names(tmp_path, monkeypatch):
    """No --gpu: the server runs on the GPU CUDA_VISIBLE_DEVICES leaves it (GPU 1 here, as
    CUDA reads ``1``), pinned by UUID, and that card's memory is read, not GPU 0's."""
    nvml = _TwoGpus()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    seen = _launcher_env(monkeypatch)
    repo = tmp_path / "repo"
    write_python_model(repo, "py_gpu")
    report = check_path(repo)
    assert report.ok, report.to_dict()
    assert (report.memory_kind, report.baseline_memory_bytes) == ("gpu", GPU_USED[1])
    assert seen["CUDA_VISIBLE_DEVICES"] == nvml.nvmlDeviceGetUUID(1)


def test_check_with_cuda_visible_devices_empty_runs_on_the_cpu(tmp_path, monkeypatch):
    """``CUDA_VISIBLE_DEVICES=`` (empty): CUDA, so Triton, sees no GPU though NVML sees two;
    the check reads the server's host memory and tells a server of its own (a container
    does not inherit this environment) to see none either."""
    monkeypatch.setitem(sys.modules, "pynvml", _TwoGpus())
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    seen = _launcher_env(monkeypatch)
    repo = tmp_path / "repo"
    write_python_model(repo, "py_cpu")
    report = check_path(repo)
    assert report.ok, report.to_dict()
    assert report.memory_kind == "host_pss"
    assert [m.memory_kind for m in report.models] == ["host_pss"]
    assert seen["CUDA_VISIBLE_DEVICES"] == ""


def test_check_gpu_without_nvml_is_refused(tmp_path, monkeypatch, capsys):
    """--gpu 0 where NVML finds no GPU: refused (exit 2, before any server starts), as the
    emulator and the sweep refuse GPUs chosen there; without --gpu the check runs on the CPU."""
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml fails
    repo = tmp_path / "repo"
    write_python_model(repo, "py")
    assert main(["check", str(repo), "--gpu", "0", "--json", "-"]) == 2
    assert "GPUs 0 were chosen, but NVML finds no NVIDIA GPU here" in capsys.readouterr().err


def test_check_refuses_a_gpu_this_machine_does_not_have(tmp_path, monkeypatch):
    """--gpu 2 on a two-GPU host: refused, saying which numbers there are (not a check
    whose memory silently falls back to host memory)."""
    monkeypatch.setitem(sys.modules, "pynvml", _TwoGpus())
    repo = tmp_path / "repo"
    write_python_model(repo, "py_gpu")
    with pytest.raises(UserInputError, match=r"GPUs 2 were chosen; this machine's are 0\.\.1"):
        check_path(repo, CheckOptions(gpu_index=2))
