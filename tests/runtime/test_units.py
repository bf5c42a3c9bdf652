"""Runtime pieces that need no server: config argv/env, readiness, native derivation, samples."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from runtime_models import write_mlp, write_python_model
from shared_helpers import StandInNvml, wait_for

from mmelocal.builder.model_config import config_to_text, read_config
from mmelocal.errors import (
    ModelLoadError,
    ServerStartError,
    UnsupportedModelError,
    UserInputError,
)
from mmelocal.runtime.python_copies import (
    STUB_PYTHON,
    available_backends,
    gpu_available,
    prepare_model_for_server,
    prepare_repository,
    required_backend,
)
from mmelocal.runtime.readiness import wait_until_ready
from mmelocal.runtime.samples import check_outputs, compare_outputs, sample_inputs
from mmelocal.runtime.server_config import ServerConfig


def test_config_args_and_env(tmp_path):
    config = ServerConfig(
        model_repository=tmp_path,
        sagemaker=True,
        log_verbose=1,
        python_shm_default_bytes=32 * 1024 * 1024,
        extra_args=("--strict-model-config=false",),
        env={"FOO": "bar"},
    ).resolved()
    args = config.to_args()
    ports = {config.http_port, config.grpc_port, config.metrics_port, config.sagemaker_port}
    assert len(ports) == 4 and 0 not in ports
    assert f"--model-repository={tmp_path}" in args
    assert "--model-control-mode=explicit" in args
    assert "--allow-sagemaker=true" in args
    assert f"--sagemaker-port={config.sagemaker_port}" in args
    assert "--backend-config=python,shm-default-byte-size=33554432" in args
    assert "--log-verbose=1" in args and args[-1] == "--strict-model-config=false"
    # in MME mode the two knobs are the entrypoint's: they reach the environment too
    assert config.to_env() == {
        "SAGEMAKER_MULTI_MODEL": "true",
        "SAGEMAKER_TRITON_LOG_VERBOSE": "1",
        "SAGEMAKER_TRITON_SHM_DEFAULT_BYTE_SIZE": "33554432",
        "FOO": "bar",
    }
    plain = ServerConfig(model_repository=tmp_path).resolved()
    assert not any("sagemaker" in a for a in plain.to_args())
    assert plain.to_env() == {}
    assert "--backend-config=python,shm-default-byte-size=16777216" in plain.to_args()


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"http_port": 70000}, "http_port"),
        ({"model_control_mode": "sometimes"}, "explicit, poll, none"),
        ({"python_shm_default_bytes": 10}, "python_shm_default_bytes"),
        ({"extra_args": ("model-repository=/x",)}, "starting with '--'"),
        ({"log_verbose": -1}, "log_verbose"),
    ],
)
def test_config_rejects_bad_values(tmp_path, kwargs, words):
    with pytest.raises(UserInputError, match=words):
        ServerConfig(model_repository=tmp_path, **kwargs)


def test_to_args_needs_resolved_ports(tmp_path):
    with pytest.raises(UserInputError, match="resolved"):
        ServerConfig(model_repository=tmp_path).to_args()


def test_wait_until_ready_timeout_message(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("line one\nE1122 something broke badly\n")
    started = time.monotonic()
    with pytest.raises(ServerStartError) as info:
        wait_until_ready(lambda: False, timeout_s=0.3, url="http://127.0.0.1:9", log_path=log)
    assert time.monotonic() - started < 30  # the timeout is kept (generous for loaded CI)
    message = str(info.value)
    assert "http://127.0.0.1:9" in message and "0.3s" in message
    assert "something broke badly" in message
    assert info.value.url == "http://127.0.0.1:9" and info.value.log_path == log


def test_wait_until_ready_fails_fast_when_process_exits(tmp_path):
    process = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    started = time.monotonic()
    with pytest.raises(ServerStartError, match="code 3"):
        wait_until_ready(
            lambda: False, timeout_s=600, url="http://x:1", log_path=None, process=process
        )
    assert time.monotonic() - started < 120  # the exit, not the 600 s timeout


@pytest.mark.parametrize("code", [2, None], ids=["code-known", "code-unknown"])
def test_wait_until_ready_names_the_exit_code_read_after_is_alive_said_gone(code):
    """A server watched through ``is_alive`` (a container) has its exit code read once it
    is gone, so the message does not depend on which check saw the exit first."""
    with pytest.raises(ServerStartError) as info:
        wait_until_ready(
            lambda: False,
            timeout_s=600,
            url="u",
            log_path=None,
            is_alive=lambda: False,
            exit_code=lambda: code,
        )
    expected = "exited with code 2 during" if code is not None else "exited during"
    assert expected in str(info.value)


#: how tritonserver 2.51 ends when an option's value is bad (ParseException): its usage
#: text first, the option and the reason after it (an unknown option is named before)
_USAGE = (
    "Usage: tritonserver [options]\n  --help\n\tPrint usage\n\n"
    "Server:\n  --id <string>\n\tIdentifier for this server.\n\n"
)
_BAD_VALUE_END = 'Bad option: "--log-verbose".\nInvalid option value. Got loud\n\n\n'


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        (_USAGE + _BAD_VALUE_END, ['Bad option: "--log-verbose".', "Got loud"]),
        ("tritonserver: unrecognized option '--nope'\n" + _USAGE, ["unrecognized option '--nope'"]),
    ],
    ids=["bad-value-after-usage", "unknown-option-before-usage"],
)
def test_a_refused_option_is_named_in_the_start_error(tmp_path, output, expected):
    """tritonserver names a bad value after its usage text, an unknown option before it:
    the start error carries the line either way, not the usage."""
    log = tmp_path / "tritonserver.log"
    log.write_text(output)
    with pytest.raises(ServerStartError) as info:
        wait_until_ready(lambda: False, timeout_s=0, url="u", log_path=log)
    message = str(info.value)
    assert all(line in message for line in expected), message
    assert "Identifier for this server" not in message  # the usage text is left out


def test_wait_until_ready_returns_seconds():
    calls: Iterator[bool | Exception] = iter([False, RuntimeError("not yet"), True])

    def check() -> bool:
        value = next(calls)
        if isinstance(value, Exception):
            raise value
        return value

    assert wait_until_ready(check, timeout_s=5, url="u", log_path=None, interval_s=0.01) >= 0


def test_derived_copy_keeps_scheduling_and_never_touches_the_source(tmp_path):
    source = write_mlp(tmp_path / "src", "mlp", "torchscript", instance_count=2)
    original = (source / "config.pbtxt").read_text()
    prepared = prepare_model_for_server(
        source, tmp_path / "out", backends_available={"python"}, gpu=False
    )
    assert prepared.derived and prepared.backend == "python"
    assert (source / "config.pbtxt").read_text() == original
    assert not (source / "1" / "model.py").exists()
    served = read_config(prepared.served_dir / "config.pbtxt")
    src = read_config(source / "config.pbtxt")
    assert served.backend == "python" and not served.platform
    assert served.name == src.name and served.max_batch_size == src.max_batch_size
    assert list(served.input) == list(src.input) and list(served.output) == list(src.output)
    assert served.dynamic_batching == src.dynamic_batching
    assert served.instance_group[0].count == 2
    assert list(served.model_warmup) == list(src.model_warmup)
    assert served.parameters["mmelocal_artifact_format"].string_value == "torchscript"
    assert served.parameters["mmelocal_artifact"].string_value == "model.pt"
    assert (prepared.served_dir / "1" / "model.py").is_file()
    assert (prepared.served_dir / "1" / "model.pt").is_file()
    assert any("pytorch_libtorch" in note for note in prepared.notes)


def test_kind_gpu_becomes_cpu_only_without_gpu(tmp_path):
    source = write_mlp(tmp_path / "src", "mlp", "onnx")
    text = (
        (source / "config.pbtxt")
        .read_text()
        .replace(
            "instance_group {\n  count: 1\n}",
            "instance_group {\n  count: 1\n  kind: KIND_GPU\n  gpus: [0]\n}",
        )
    )
    assert "KIND_GPU" in text
    (source / "config.pbtxt").write_text(text)
    cpu = prepare_model_for_server(
        source, tmp_path / "cpu", backends_available={"python"}, gpu=False
    )
    assert "KIND_CPU" in (cpu.served_dir / "config.pbtxt").read_text()
    assert any("KIND_CPU" in note for note in cpu.notes)
    gpu = prepare_model_for_server(
        source, tmp_path / "gpu", backends_available={"python"}, gpu=True
    )
    assert "KIND_GPU" in (gpu.served_dir / "config.pbtxt").read_text()
    assert not any("KIND_CPU" in note for note in gpu.notes)


@pytest.mark.parametrize(
    ("visible", "seen"), [(None, True), ("1", True), ("", False), ("-1", False), ("2", False)]
)
def test_gpu_available_is_whether_a_server_started_here_sees_a_gpu(monkeypatch, visible, seen):
    """NVML sees both GPUs whatever CUDA_VISIBLE_DEVICES says; a server started from here
    sees those CUDA leaves it: none when the variable is empty, or starts with a GPU this
    machine has not (-1, 2), as CUDA reads it."""
    monkeypatch.setitem(sys.modules, "pynvml", StandInNvml({0: 0, 1: 0}, names=("T4",) * 2))
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert gpu_available() is seen


@pytest.mark.parametrize(
    ("visible", "hidden"),
    [(None, False), ("", True), ("-1", True), ("-1,0", True), ("0,-1", False), ("1", False)],
)
def test_a_cuda_visible_devices_that_hides_every_gpu_runs_the_server_on_the_cpu(
    monkeypatch, tmp_path, visible, hidden
):
    """CUDA enumerates the identifiers until the first invalid one (CUDA Programming Guide,
    "CUDA Environment Variables": ``0,2,-1,1`` shows devices 0 and 2): an empty value or a
    first index of ``-1`` leaves no GPU on any machine, which only the empty value said.
    Such a server runs on the CPU, and a container is given no GPU without NVML reading
    this machine's (it was refused: "NVML cannot read this machine's GPUs")."""
    from mmelocal.runtime.local import LocalLauncher
    from mmelocal.runtime.visible_gpus import container_gpus, hides_every_gpu

    env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    launcher = LocalLauncher(ServerConfig(model_repository=tmp_path, env=env))
    assert hides_every_gpu(visible) is hidden and launcher.runs_on_cpu is hidden
    if hidden:
        monkeypatch.setitem(sys.modules, "pynvml", None)  # no NVML: nothing to read
        chosen = container_gpus(env, environ={})
        assert chosen is not None and chosen.uuids == () and not chosen.indices
        assert dict(chosen.env) == {"CUDA_VISIBLE_DEVICES": ""}  # as with NVML's reading


def test_native_backend_present_means_plain_copy(tmp_path):
    source = write_mlp(tmp_path / "src", "mlp", "onnx")
    prepared = prepare_model_for_server(
        source, tmp_path / "out", backends_available={"python", "onnxruntime"}, gpu=False
    )
    assert not prepared.derived and prepared.backend == "onnxruntime"
    assert read_config(prepared.served_dir / "config.pbtxt").platform == "onnxruntime_onnx"


def test_unknown_backend_is_a_clear_error(tmp_path):
    folder = write_python_model(tmp_path / "src", "tf")
    text = (
        (folder / "config.pbtxt")
        .read_text()
        .replace('backend: "python"', 'platform: "tensorflow_savedmodel"')
    )
    (folder / "config.pbtxt").write_text(text)
    # a model this host cannot run is a model error (ModelError 424 through the emulator)
    with pytest.raises(UnsupportedModelError, match=r"'tensorflow' backend.*Docker launcher"):
        prepare_model_for_server(folder, tmp_path / "out", backends_available={"python"}, gpu=False)


def test_tensorrt_plan_needs_a_gpu(tmp_path):
    folder = write_python_model(tmp_path / "src", "trt")
    config = folder / "config.pbtxt"
    config.write_text(config.read_text().replace('backend: "python"', 'platform: "tensorrt_plan"'))
    with pytest.raises(UnsupportedModelError, match=r"NVIDIA GPU.*--launcher docker"):
        prepare_model_for_server(folder, tmp_path / "out", backends_available={"python"}, gpu=False)
    prepared = prepare_model_for_server(
        folder, tmp_path / "out", backends_available={"python"}, gpu=True
    )
    assert prepared.derived and prepared.backend == "python"


def test_execution_env_checks(tmp_path):
    import io
    import tarfile

    folder = write_python_model(tmp_path / "src", "envmodel")
    config = folder / "config.pbtxt"
    config.write_text(
        config.read_text() + 'parameters { key: "EXECUTION_ENV_PATH" value { string_value: '
        '"$$TRITON_MODEL_DIRECTORY/env.tar.gz" } }\n'
    )
    out = tmp_path / "out"
    with pytest.raises(ModelLoadError, match=r"env\.tar\.gz.*not in the model folder"):
        prepare_model_for_server(folder, out, backends_available={"python"}, gpu=False)
    other = "3.8" if STUB_PYTHON != "3.8" else "3.9"
    with tarfile.open(folder / "env.tar.gz", "w:gz") as tar:
        tar.addfile(tarfile.TarInfo(f"lib/python{other}/site.py"), io.BytesIO(b""))
    with pytest.raises(ModelLoadError, match="holds no bin/activate"):
        prepare_model_for_server(folder, out, backends_available={"python"}, gpu=False)
    with tarfile.open(folder / "env.tar.gz", "w:gz") as tar:
        tar.addfile(tarfile.TarInfo(f"lib/python{other}/site.py"), io.BytesIO(b""))
        tar.addfile(tarfile.TarInfo("bin/activate"), io.BytesIO(b""))
    with pytest.raises(ModelLoadError, match=f"Python {other}.*stub runs Python {STUB_PYTHON}"):
        prepare_model_for_server(folder, out, backends_available={"python"}, gpu=False)
    with tarfile.open(folder / "env.tar.gz", "w:gz") as tar:
        tar.addfile(tarfile.TarInfo(f"lib/python{STUB_PYTHON}/site.py"), io.BytesIO(b""))
        tar.addfile(tarfile.TarInfo("./bin/activate"), io.BytesIO(b""))
    prepared = prepare_model_for_server(folder, out, backends_available={"python"}, gpu=False)
    assert (prepared.served_dir / "env.tar.gz").is_file()


def test_prepare_repository_and_backends(tmp_path):
    repo = tmp_path / "repo"
    write_mlp(repo, "a", "onnx")
    write_python_model(repo, "b")
    prepared = prepare_repository(repo, tmp_path / "out", backends_available={"python"}, gpu=False)
    assert [(p.name, p.derived) for p in prepared] == [("a", True), ("b", False)]
    backends = tmp_path / "backends"
    (backends / "python").mkdir(parents=True)
    assert available_backends(backends) == {"python", "ensemble"}
    assert required_backend(read_config(repo / "a" / "config.pbtxt")) == "onnxruntime"


def test_sample_inputs_and_output_checks(tmp_path):
    config = read_config(write_mlp(tmp_path, "mlp", "onnx") / "config.pbtxt")
    inputs = sample_inputs(config, batch_size=2)
    assert inputs["x"].shape == (2, 4) and inputs["x"].dtype == np.float32
    assert check_outputs(config, {"y": np.zeros((2, 3), np.float32)}, batch_size=2) == []
    problems = check_outputs(config, {"y": np.zeros((2, 5), np.float32)}, batch_size=2)
    assert problems and "shape" in problems[0]
    assert "missing" in check_outputs(config, {}, batch_size=2)[0]
    ok, worst = compare_outputs({"y": np.ones(3)}, {"y": np.ones(3) + 1e-6}, atol=1e-4, rtol=0)
    assert ok == [] and worst < 1e-5
    bad, _ = compare_outputs({"y": np.ones(3)}, {"y": np.zeros(3)}, atol=1e-4, rtol=0)
    assert "differs" in bad[0]


def test_runner_template_is_packaged():
    from mmelocal.runtime.python_copies import runner_template

    assert runner_template().name == "model.py"
    assert Path(runner_template()).read_text().count("class TritonPythonModel") == 1


def test_find_tritonserver_in_a_user_install(tmp_path, monkeypatch):
    from mmelocal.runtime.local import (
        TRITONSERVER_ENV,
        find_tritonserver,
        prepare_backend_directory,
        server_environment,
    )

    root = tmp_path / "tritonserver"
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "tritonserver").write_text("#!/bin/sh\n")
    (root / "bin" / "tritonserver").chmod(0o755)
    (root / "backends" / "onnxruntime").mkdir(parents=True)
    (root / "lib").mkdir()
    install = find_tritonserver(root)
    assert install.binary == root / "bin" / "tritonserver" and not install.from_wheel
    assert prepare_backend_directory(install) == root / "backends"
    assert available_backends(root / "backends") == {"onnxruntime", "ensemble"}
    env = server_environment(install, ServerConfig(model_repository=tmp_path))
    assert str(root / "lib") in env["LD_LIBRARY_PATH"].split(":")
    monkeypatch.setenv(TRITONSERVER_ENV, str(root / "bin" / "tritonserver"))
    assert find_tritonserver().binary == root / "bin" / "tritonserver"
    with pytest.raises(UserInputError, match="not found"):
        find_tritonserver(tmp_path / "nowhere")
    (tmp_path / "notes.txt").write_text("not a binary")
    with pytest.raises(UserInputError, match="is not executable"):
        find_tritonserver(tmp_path / "notes.txt")


def test_wheel_install_assembles_backend_folder_once(tmp_path):
    from mmelocal.runtime.local import find_tritonserver, prepare_backend_directory

    install = find_tritonserver()
    assert install.from_wheel and install.libs_dir is not None
    first = prepare_backend_directory(install, cache=tmp_path)
    assert first is not None
    assert (first / "python" / "triton_python_backend_stub").is_file()
    assert (first / "python" / "libtriton_python.so").is_file()
    assert prepare_backend_directory(install, cache=tmp_path) == first
    assert [p.name for p in (tmp_path / "triton-backends").iterdir()] == [first.name]


def test_external_launcher_fails_fast_when_nothing_listens(refused_port: int) -> None:
    import time

    from mmelocal.errors import ServerStartError
    from mmelocal.runtime.external import ExternalLauncher

    url = f"http://127.0.0.1:{refused_port}"
    launcher = ExternalLauncher(url, start_timeout_s=600, connect_grace_s=0.2)
    t0 = time.monotonic()
    with pytest.raises(ServerStartError, match="nothing listens at"), launcher:
        pass
    assert time.monotonic() - t0 < 300  # the grace, not the 600 s start timeout


def _unrunnable_install(tmp_path):
    """A tritonserver install (``bin/``, ``backends/``) whose binary cannot run."""
    root = tmp_path / "tritonserver"
    (root / "bin").mkdir(parents=True)
    binary = root / "bin" / "tritonserver"
    binary.write_bytes(b"\x00\x01 not a program")
    binary.chmod(0o755)
    (root / "backends").mkdir()
    return root, binary


def test_local_launcher_binary_that_cannot_run_is_a_start_error(tmp_path):
    from mmelocal.errors import ServerStartError
    from mmelocal.runtime.local import LocalLauncher

    root, binary = _unrunnable_install(tmp_path)
    launcher = LocalLauncher(
        ServerConfig(model_repository=tmp_path, backend_directory=root / "backends"),
        tritonserver=binary,
        log_path=tmp_path / "log",
    )
    with pytest.raises(ServerStartError, match="could not run"):
        launcher.start()
    assert not launcher.is_alive()


def test_bridge_sockets_close_when_the_start_fails_before_the_spawn(tmp_path, monkeypatch):
    from mmelocal.runtime import netns
    from mmelocal.runtime.local import LocalLauncher

    root, binary = _unrunnable_install(tmp_path)
    bound = []
    listen = netns.listen_socket

    def recorded(host, port):
        bound.append(listen(host, port))
        return bound[-1]

    def broken_argv(install, config):
        raise RuntimeError("argv failed")

    monkeypatch.setattr(netns, "isolation_refused", lambda: None)
    monkeypatch.setattr(netns, "listen_socket", recorded)
    config = ServerConfig(
        model_repository=tmp_path,
        backend_directory=root / "backends",
        sagemaker=True,
        host="127.0.0.1",
    )
    launcher = LocalLauncher(
        config, tritonserver=binary, log_path=tmp_path / "log", isolate_network=True
    )
    monkeypatch.setattr(launcher, "_argv", broken_argv)
    with pytest.raises(RuntimeError, match="argv failed"):
        launcher.start()
    assert len(bound) >= 2  # the HTTP and SageMaker ports at least
    assert all(sock.fileno() == -1 for sock in bound)  # closed, none leaked


@pytest.mark.parametrize("root_layout", [False, True], ids=["seed", "root"])
def test_check_keys_validation_errors_inside_a_tarball_by_folder(
    tmp_path: Path, root_layout: bool
) -> None:
    """check extracts a tarball once (validate extracts it into check's folder) and fails a
    model on the validate errors found in its folder, keyed by the folder itself."""
    import tarfile

    from mmelocal.builder.validate import validate_path
    from mmelocal.testing.tiny_model import write_model

    folder = write_model(tmp_path / "src", name="tiny")
    with (folder / "config.pbtxt").open("a") as fh:  # warmup data the tarball does not hold
        fh.write(
            'model_warmup [ { name: "w" batch_size: 1 inputs { key: "INPUT0" value { '
            'data_type: TYPE_FP32 dims: [ 4 ] input_data_file: "INPUT0" } } } ]\n'
        )
    tarball = tmp_path / "m.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        if root_layout:
            for item in folder.iterdir():
                tar.add(item, arcname=item.name)
        else:
            tar.add(folder, arcname="tiny")
    extracted = tmp_path / "work" / "extracted"
    report = validate_path(tarball, extract_to=extracted)
    assert not report.ok
    model_dir = extracted if root_layout else extracted / "tiny"
    assert (model_dir / "config.pbtxt").is_file()  # left where check goes on with it
    problems = [p for p in report.by_folder[model_dir.resolve()] if p.severity == "error"]
    assert problems and all("warmup" in p.message.lower() for p in problems), report.problems
    assert {p.code for p in problems} == {p.code for p in report.errors}
    assert list(report.by_folder) == [model_dir.resolve()]


def test_start_stop_context_stops_a_failed_start_and_returns_itself():
    from mmelocal.runtime.lifecycle import StartStopContext

    class Server(StartStopContext):
        def __init__(self, fail: bool) -> None:
            self.fail = fail
            self.calls: list[str] = []

        def start(self) -> None:
            self.calls.append("start")
            if self.fail:
                raise ServerStartError("no")

        def stop(self) -> None:
            self.calls.append("stop")

    with Server(fail=False) as server:
        assert isinstance(server, Server) and server.calls == ["start"]
    assert server.calls == ["start", "stop"]
    failing = Server(fail=True)
    with pytest.raises(ServerStartError), failing:
        pass
    assert failing.calls == ["start", "stop"]


def test_a_grpc_client_on_a_server_without_grpc_says_why() -> None:
    from types import SimpleNamespace

    from mmelocal.runtime.client import TritonClient
    from mmelocal.runtime.launcher import Endpoints

    launcher = SimpleNamespace(
        endpoints=Endpoints(http_url="http://127.0.0.1:1", grpc_url=None, metrics_url=None),
        is_alive=lambda: True,
        log_path=None,
    )
    with pytest.raises(UserInputError, match="SAGEMAKER_TRITON_ALLOW_GRPC"):
        TritonClient.for_launcher(launcher, protocol="grpc")  # type: ignore[arg-type]


def test_the_wheels_stub_refuses_numpy_2_naming_the_fix() -> None:
    from mmelocal.runtime.install import check_stub_numpy

    check_stub_numpy("1.26.4")  # the ABI the stub was built for
    with pytest.raises(UserInputError) as err:
        check_stub_numpy("2.0.2")
    message = str(err.value)
    assert "numpy 2.0.2" in message and "numpy<2" in message and "--launcher docker" in message


def test_the_stub_python_is_checked_where_it_is_named(tmp_path, monkeypatch) -> None:
    from mmelocal.runtime.install import STUB_PYTHON_ENV, check_stub_numpy, stub_python

    monkeypatch.setenv(STUB_PYTHON_ENV, str(tmp_path / "nowhere" / "python"))
    with pytest.raises(UserInputError, match=STUB_PYTHON_ENV):
        stub_python()
    monkeypatch.setenv(STUB_PYTHON_ENV, sys.executable)
    assert stub_python() == Path(sys.executable)
    check_stub_numpy()  # this environment's numpy is 1.x (nvidia-pytriton requires it)


def test_a_child_servers_port_is_read_back_from_its_log(tmp_path):
    """Started on port 0, a server of ours logs the URL it bound; a log handler may wrap
    the line between words. A child that exits first fails at once with its log."""
    from mmelocal.errors import ServerStartError
    from mmelocal.runtime.readiness import wait_for_logged_url

    log = tmp_path / "serve.log"
    says = (
        "import sys, time; print('INFO  starting', flush=True); "
        "print('INFO  MME emulator listening on\\n      http://127.0.0.1:40123', flush=True); "
        "time.sleep(30)"
    )
    with open(log, "wb") as err:
        child = subprocess.Popen([sys.executable, "-c", says], stdout=err)
    try:
        assert wait_for_logged_url(log, process=child, timeout_s=60) == "http://127.0.0.1:40123"
    finally:
        child.kill()
        child.wait()
    with open(log, "wb") as err:
        quits = subprocess.Popen([sys.executable, "-c", "print('port in use')"], stdout=err)
    with pytest.raises(ServerStartError, match=r"(?s)^The server exited with code 0.*port in use"):
        wait_for_logged_url(log, process=quits, timeout_s=600)


def _append(path: Path | str, data: bytes) -> None:
    with open(path, "ab") as log:
        log.write(data)


def test_a_log_watch_finds_a_match_written_in_pieces(tmp_path):
    """Split inside the match, inside a two-byte character, and wrapped across lines that
    arrive in separate reads; a URL whose line is unfinished is not taken cut short."""
    import re

    from mmelocal.runtime.readiness import LISTENING, LogWatch

    log = tmp_path / "serve.log"
    watch = LogWatch(log, LISTENING)
    assert watch.next_match() is None  # no log yet
    _append(log, b"INFO  starting\nINFO  MME emulator listen")
    assert watch.next_match() is None
    _append(log, b"ing on http://127.0.0.1:401")
    assert watch.next_match() is None  # the port may go on: only whole lines count
    _append(log, b"23\n")
    match = watch.next_match()
    assert match is not None and match[1] == "http://127.0.0.1:40123"

    wrapped = LogWatch(tmp_path / "wrapped.log", LISTENING)
    _append(wrapped.path, b"x" * 100 + b"\n" * 10_000)  # more than the overlap before it
    _append(wrapped.path, b"INFO  MME emulator listening\n")
    assert wrapped.next_match() is None
    _append(wrapped.path, b"      on\n")
    assert wrapped.next_match() is None
    _append(wrapped.path, b"      http://127.0.0.1:40124   server.py:110\n")
    match = wrapped.next_match()
    assert match is not None and match[1] == "http://127.0.0.1:40124"
    assert len(match.string) < 10_000  # the overlap is kept, not the whole log

    cafe = LogWatch(tmp_path / "cafe.log", re.compile(r"caf(.) (\S+)"))
    _append(cafe.path, b"a caf\xc3")  # the first byte of an \xe9 (two in UTF-8)
    assert cafe.next_match() is None
    _append(cafe.path, b"\xa9 one\n\xff caf\xc3\xa9 two\n")  # then a byte not UTF-8
    one, two = cafe.next_match(), cafe.next_match()
    assert one is not None and (one[1], one[2]) == ("\xe9", "one")
    assert two is not None and (two[1], two[2]) == ("\xe9", "two")
    assert two.string.endswith("\ufffd caf\xe9 two\n")


def test_a_log_watch_reads_each_byte_once_and_returns_each_match_once(tmp_path):
    """Reads start at ``offset`` (an earlier start's lines are not seen), the offset moves
    to the end of what was read, and matches come one per call, in the log's order."""
    from mmelocal.runtime.readiness import LISTENING, LogWatch

    log = tmp_path / "serve.log"
    log.write_bytes(b"old listening on http://127.0.0.1:1\n")
    watch = LogWatch(log, LISTENING, offset=log.stat().st_size)
    assert watch.next_match() is None
    _append(log, b"listening on http://127.0.0.1:2\nlistening on http://127.0.0.1:3\n")
    first, second = watch.next_match(), watch.next_match()
    assert first is not None and first[1] == "http://127.0.0.1:2"
    assert second is not None and second[1] == "http://127.0.0.1:3"
    assert watch.offset == log.stat().st_size
    assert watch.next_match() is None  # not found again
    _append(log, b"noise\n")
    assert watch.next_match() is None
    _append(log, b"listening\n on http://127.0.0.1:4\n")
    fourth = watch.next_match()
    assert fourth is not None and fourth[1] == "http://127.0.0.1:4"
    assert watch.next_match() is None and watch.offset == log.stat().st_size


def test_a_tritonserver_port_in_use_is_read_from_its_start_on(tmp_path):
    """The launcher's watch: a port of this start named by config field, a port it does
    not open by address alone, an earlier start's line ignored."""
    from mmelocal.runtime.local import _PortWatch

    log = tmp_path / "tritonserver.log"
    line = "E0101 00:00:00.000 1 main.cc:245] failed to start {} service: Unavailable - "
    line += "Socket '127.0.0.1:{}' already in use\n"
    log.write_text(line.format("HTTP", 41001))  # the start before
    config = ServerConfig(
        model_repository=tmp_path, http_port=41001, grpc_port=41002, metrics_port=41003
    )
    watch = _PortWatch(log, log.stat().st_size, config)
    assert watch.none_taken() and watch.taken() is None
    text = line.format("Metrics", 41003)
    _append(log, text[:60].encode())
    assert watch.none_taken()
    _append(log, text[60:].encode())
    assert watch.taken() == ("metrics_port", "127.0.0.1:41003")
    assert not watch.none_taken()

    other = _PortWatch(log, log.stat().st_size, config)
    _append(log, line.format("GRPC", 8001).encode())
    assert other.taken() == (None, "127.0.0.1:8001")


def test_a_child_server_starts_on_port_0_and_is_stopped_if_its_wait_fails(tmp_path):
    """``--port 0`` appended, stderr to the log (stdout nowhere), ``env`` and COLUMNS=200
    in its environment; a wait that fails stops the child before the error goes on."""
    import psutil

    from mmelocal.errors import ServerStartError
    from mmelocal.runtime import readiness

    log = tmp_path / "serve.log"
    says = (
        "import os, sys, time; print('to stdout', flush=True); "
        "print(sys.argv[1:], os.environ['COLUMNS'], os.environ['EXTRA'], file=sys.stderr); "
        "print('INFO  listening on http://127.0.0.1:40123', file=sys.stderr, flush=True); "
        "time.sleep(600)"
    )
    child, url = readiness.start_logging_server(
        [sys.executable, "-c", says], log, timeout_s=60, env={"EXTRA": "yes"}
    )
    try:
        assert url == "http://127.0.0.1:40123" and child.poll() is None
    finally:
        readiness.stop_child(child)
    assert "['--port', '0'] 200 yes" in log.read_text()
    assert "to stdout" not in log.read_text()

    # a child that never logs its URL: the real wait times out, and the child is stopped
    silent = f"import time; time.sleep(600)  # {tmp_path}"
    with pytest.raises(ServerStartError, match="was not ready"):
        readiness.start_logging_server([sys.executable, "-c", silent], log, timeout_s=1)
    ours = [p.cmdline() for p in psutil.Process().children(recursive=True)]
    assert not any(str(tmp_path) in " ".join(cmdline) for cmdline in ours)


def test_stop_child_kills_what_ignores_sigterm(tmp_path: Path) -> None:
    """SIGTERM to each, then SIGKILL to a child still running after the grace; a stopped
    child is left as it is."""
    import signal

    from mmelocal.runtime.readiness import stop_child

    ready = tmp_path / "ready"
    stubborn = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import pathlib, signal, sys, time\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "pathlib.Path(sys.argv[1]).touch()\n"
            "time.sleep(600)\n",
            str(ready),
        ]
    )
    polite = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    wait_for(lambda: ready.exists() or stubborn.poll() is not None, timeout_s=60)
    stop_child(stubborn, polite, timeout_s=0.5)
    assert (stubborn.returncode, polite.returncode) == (-signal.SIGKILL, -signal.SIGTERM)
    stop_child(stubborn, polite)  # again: nothing left to stop, no error
    assert (stubborn.returncode, polite.returncode) == (-signal.SIGKILL, -signal.SIGTERM)


#: the source's instance_group -> the derived copy's on a host with no GPU: Triton's core
#: (src/model_config_utils.cc, r24.10) makes no group one KIND_AUTO group named after the
#: model (NormalizeInstanceGroup), resolves KIND_AUTO to KIND_CPU when there is no GPU,
#: and then gives an unset count SetDefaultInstanceCount's 2 for onnxruntime's KIND_CPU
CPU_HOST_GROUPS = {
    "instance_group {\n  kind: KIND_AUTO\n}": ("onnx", "instance_group {\n  count: 2\n}"),
    "": ("onnx", 'instance_group {\n  name: "mlp"\n  count: 2\n}'),
    "instance_group {\n  kind: KIND_AUTO\n}\n": ("torchscript", "instance_group {\n}"),
    "instance_group {\n  count: 3\n}": ("onnx", "instance_group {\n  count: 3\n}"),
}


@pytest.mark.parametrize("group", list(CPU_HOST_GROUPS), ids=repr)
def test_a_derived_copy_counts_kind_auto_as_kind_cpu_on_a_cpu_host(tmp_path, group):
    """KIND_AUTO (or no instance_group) got the Python backend's 1 instance where Triton's
    onnxruntime backend gives 2 on a host without a GPU: KIND_AUTO is KIND_CPU there."""
    fmt, expected = CPU_HOST_GROUPS[group]
    source = write_mlp(tmp_path / "src", "mlp", fmt)
    config = source / "config.pbtxt"
    text = config.read_text().replace("instance_group {\n  count: 1\n}\n", group)
    assert text != config.read_text()
    config.write_text(text)
    prepared = prepare_model_for_server(
        source, tmp_path / "out", backends_available={"python"}, gpu=False
    )
    served = config_to_text(read_config(prepared.served_dir / "config.pbtxt"))
    assert expected in served, served
    with_gpu = prepare_model_for_server(
        source, tmp_path / "gpu", backends_available={"python"}, gpu=True
    )  # KIND_AUTO is KIND_GPU there: 1 per GPU, the Python backend's default too
    assert "count: 2" not in config_to_text(read_config(with_gpu.served_dir / "config.pbtxt"))


@pytest.mark.parametrize(("fmt", "count"), [("onnx", 2), ("torchscript", 0)])
def test_a_derived_copy_keeps_tritons_default_instance_count(tmp_path, fmt, count):
    """A ``KIND_CPU`` group with no count gets Triton's default for the model's own backend:
    2 for onnxruntime (and tensorflow), 1 for the others (core ``SetDefaultInstanceCount``,
    r24.10). The Python backend's default is 1, so the derived copy states the 2."""
    source = write_mlp(tmp_path / "src", "mlp", fmt)
    config = source / "config.pbtxt"
    text = config.read_text().replace(
        "instance_group {\n  count: 1\n}", "instance_group {\n  kind: KIND_CPU\n}"
    )
    assert "KIND_CPU" in text
    config.write_text(text)
    prepared = prepare_model_for_server(
        source, tmp_path / "out", backends_available={"python"}, gpu=False
    )
    assert prepared.derived
    assert read_config(prepared.served_dir / "config.pbtxt").instance_group[0].count == count
