"""Docker launcher pieces that need no engine: arguments, GPU requests, errors."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from mmelocal.docker_host import remote_engine
from mmelocal.errors import MissingDependencyError, RemoteDockerEngineError, UserInputError
from mmelocal.runtime.docker import (
    CONTAINER_MODEL_REPOSITORY,
    DEFAULT_IMAGE,
    LABEL_SESSION,
    DockerEngineError,
    DockerLauncher,
    container_server_config,
    docker_client,
    gpu_device_requests,
    sagemaker_triton_image,
)
from mmelocal.runtime.server_config import ServerConfig


def test_default_image_is_ngc_triton_2_51() -> None:
    assert DEFAULT_IMAGE == "nvcr.io/nvidia/tritonserver:24.10-py3"
    assert DockerLauncher(ServerConfig(model_repository=Path("."))).image == DEFAULT_IMAGE


def test_sagemaker_image_uri() -> None:
    """The account follows the release (``mmelocal.facts.triton_images``): SageMaker never
    published a 24.10 image, and 24.09 lives in the Deep Learning Containers accounts, not
    in the older per-region accounts (785573368785 in us-east-1) that serve 23.10 and before."""
    assert sagemaker_triton_image("us-east-1") == (
        "763104351884.dkr.ecr.us-east-1.amazonaws.com/sagemaker-tritonserver:24.09-py3"
    )
    assert sagemaker_triton_image("us-east-1", "23.02") == (
        "785573368785.dkr.ecr.us-east-1.amazonaws.com/sagemaker-tritonserver:23.02-py3"
    )
    assert sagemaker_triton_image("cn-north-1", "24.09").endswith(
        ".amazonaws.com.cn/sagemaker-tritonserver:24.09-py3"
    )
    with pytest.raises(UserInputError, match="no SageMaker Triton image known for region"):
        sagemaker_triton_image("mars-1")
    with pytest.raises(UserInputError, match=r"'24\.10' .*not in the image table.*image="):
        sagemaker_triton_image("us-east-1", "24.10")


@pytest.mark.parametrize("gpus", [None, False, 0])
def test_no_gpu_request(gpus: bool | int | None) -> None:
    assert gpu_device_requests(gpus) == []


def test_gpu_device_requests() -> None:
    (all_gpus,) = gpu_device_requests(True)
    assert all_gpus["Count"] == -1 and all_gpus["Capabilities"] == [["gpu"]]
    (two,) = gpu_device_requests(2)
    assert two["Count"] == 2
    (ids,) = gpu_device_requests(["0", "3"])
    assert ids["DeviceIDs"] == ["0", "3"] and ids["Capabilities"] == [["gpu"]]
    with pytest.raises(UserInputError, match="gpus"):
        gpu_device_requests(-2)
    with pytest.raises(UserInputError, match="device ids"):
        gpu_device_requests([""])


def test_container_config_uses_mount_and_default_ports(tmp_path: Path) -> None:
    inside = container_server_config(
        ServerConfig(model_repository=tmp_path, http_port=9000, sagemaker=True)
    )
    args = inside.to_args()
    assert f"--model-repository={CONTAINER_MODEL_REPOSITORY}" in args
    assert "--model-control-mode=explicit" in args
    assert "--http-port=8000" in args
    # SageMaker's entrypoint turns gRPC and metrics off: no port of theirs is passed
    assert "--allow-grpc=false" in args and not any("grpc-port" in a for a in args)
    assert "--http-address=0.0.0.0" in args and "--sagemaker-port=8080" in args
    assert inside.to_env() == {"SAGEMAKER_MULTI_MODEL": "true"}


def test_run_kwargs(tmp_path: Path) -> None:
    config = ServerConfig(model_repository=tmp_path, http_port=18000, env={"A": "1"})
    launcher = DockerLauncher(
        config,
        image="my/triton:1",
        command_prefix=("/usr/bin/serve", "tritonserver"),
        entrypoint=["/bin/sh", "-c"],
        session="s1",
        run_options={"mem_limit": "2g"},
    )
    kwargs = launcher.run_kwargs(gpu_requests=gpu_device_requests(True))
    assert kwargs["command"][:2] == ["/usr/bin/serve", "tritonserver"]
    assert kwargs["entrypoint"] == ["/bin/sh", "-c"]
    assert kwargs["volumes"] == {
        str(tmp_path.resolve()): {"bind": CONTAINER_MODEL_REPOSITORY, "mode": "ro"}
    }
    assert kwargs["ports"] == {
        "8000/tcp": ("127.0.0.1", 18000),
        "8001/tcp": ("127.0.0.1", None),
        "8002/tcp": ("127.0.0.1", None),
    }
    assert kwargs["environment"] == {"A": "1"}
    assert kwargs["labels"][LABEL_SESSION] == "s1"
    assert kwargs["device_requests"][0]["Count"] == -1
    assert kwargs["mem_limit"] == "2g" and kwargs["init"] is True


def test_run_kwargs_needs_an_existing_repository(tmp_path: Path) -> None:
    launcher = DockerLauncher(ServerConfig(model_repository=tmp_path / "missing"))
    with pytest.raises(UserInputError, match="not a folder"):
        launcher.run_kwargs(gpu_requests=[])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"pull": "sometimes"}, "pull must be one of missing, always, never"),
        ({"start_timeout_s": 0}, "start_timeout_s"),
        ({"shm_size_bytes": 10}, "shm_size_bytes"),
        ({"image": " "}, "image must be"),
    ],
)
def test_bad_options(tmp_path: Path, kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(UserInputError, match=match):
        DockerLauncher(ServerConfig(model_repository=tmp_path), **kwargs)  # type: ignore[arg-type]


def test_unreachable_engine_says_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(DockerEngineError, match=r"start dockerd .* install Docker"):
        docker_client()


def test_missing_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "docker", None)
    with pytest.raises(MissingDependencyError, match=r"mmelocal\[docker\]"):
        docker_client()


def test_ensure_image_pull_policies() -> None:
    from docker.errors import APIError, ImageNotFound

    from mmelocal.runtime.docker_engine import DockerImageError, ensure_image

    pulled: list[str] = []

    class Images:
        def __init__(self, present: bool, pull_ok: bool) -> None:
            self.present, self.pull_ok = present, pull_ok

        def get(self, image: str) -> object:
            if not self.present:
                raise ImageNotFound("no such image")
            return object()

        def pull(self, image: str) -> None:
            if not self.pull_ok:
                raise APIError("no network")
            pulled.append(image)

    class Client:
        def __init__(self, present: bool, pull_ok: bool) -> None:
            self.images = Images(present, pull_ok)

    ensure_image(Client(True, False), "a:1")  # present: no pull
    ensure_image(Client(True, True), "a:1", pull="always")
    ensure_image(Client(False, True), "b:1")
    assert pulled == ["a:1", "b:1"]
    with pytest.raises(DockerImageError, match="pull='never'"):
        ensure_image(Client(False, True), "c:1", pull="never")
    with pytest.raises(DockerImageError, match=r"could not be pulled .*docker save"):
        ensure_image(Client(False, False), "d:1")
    with pytest.raises(DockerImageError, match=r"build_image\.sh"):
        ensure_image(Client(False, False), "mmelocal-test/triton:1")


def test_orphans_of_dead_runs_are_reaped_once_at_start() -> None:
    import socket
    import subprocess

    from mmelocal.runtime import docker_engine
    from mmelocal.runtime.docker_engine import LABEL_HOST, LABEL_OWNER, LABEL_PID

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid that no longer runs: the run that crashed
    here = socket.gethostname()
    removed: list[str] = []

    class Container:
        def __init__(self, name: str, host: str, pid: int) -> None:
            self.name = name
            self.labels = {LABEL_OWNER: "x", LABEL_HOST: here if host == "here" else host}
            self.labels[LABEL_PID] = str(pid)

        def remove(self, force: bool) -> None:
            removed.append(self.name)

    class Containers:
        def list(self, all: bool, filters: dict[str, str]) -> list[Container]:
            assert all and filters == {"label": LABEL_OWNER}
            return [
                Container("crashed", "here", dead.pid),
                Container("running", "here", os.getpid()),
                Container("elsewhere", "another-host", dead.pid),
            ]

    class Client:
        containers = Containers()

    client = Client()
    docker_engine._reaped.discard(str(id(client)))
    assert docker_engine.reap_orphans_once(client) == ["crashed"]
    assert docker_engine.reap_orphans_once(client) == []  # once per process and engine
    assert removed == ["crashed"]


@pytest.mark.parametrize(
    ("sagemaker_env", "grpc", "metrics"),
    [
        ({}, False, False),
        ({"SAGEMAKER_TRITON_ALLOW_GRPC": "true"}, True, False),
        ({"SAGEMAKER_TRITON_ALLOW_METRICS": "true"}, False, True),
    ],
    ids=["sagemaker-defaults", "grpc-on", "metrics-on"],
)
def test_mme_container_publishes_and_names_only_the_ports_triton_opens(
    tmp_path: Path, sagemaker_env: dict[str, str], grpc: bool, metrics: bool
) -> None:
    """SageMaker's entrypoint turns gRPC and metrics off unless the environment turns them
    on: those ports are neither published nor given a URL (as the local launcher does),
    so a client asked for gRPC says why instead of talking to a port nothing serves."""
    config = ServerConfig(model_repository=tmp_path, sagemaker=True, sagemaker_env=sagemaker_env)
    launcher = DockerLauncher(config)
    ports = launcher.run_kwargs(gpu_requests=[])["ports"]
    expected = {"8000/tcp", "8080/tcp"} | ({"8001/tcp"} if grpc else set())
    assert set(ports) == expected | ({"8002/tcp"} if metrics else set())

    class Container:  # what the engine reports once it published what was asked
        status = "running"

        def __init__(self) -> None:
            published = {key: [{"HostPort": str(20000 + i)}] for i, key in enumerate(ports)}
            self.attrs = {"NetworkSettings": {"Ports": published}}

        def reload(self) -> None:
            pass

    launcher._container = Container()
    endpoints = launcher._published_endpoints(0.0)
    assert (endpoints.grpc_url is not None, endpoints.metrics_url is not None) == (grpc, metrics)
    assert endpoints.sagemaker_url is not None


class _RecordingEngine:
    """A Docker client whose ``containers.run`` records what the launcher passed and is
    then refused (nothing runs). Its ``docker info`` lists the nvidia runtime when
    ``nvidia`` and the CDI devices ``cdi`` (``DiscoveredDevices``); without
    ``gpu_driver`` it refuses a ``--gpus`` request as an engine without the NVIDIA
    Container Toolkit's hook does (moby ``daemon/errors.go``), and with ``cdi_refusal`` it
    refuses a CDI request with that message. ``base_url`` is the SDK's address of the
    engine (``api.base_url``)."""

    def __init__(
        self,
        nvidia: bool = True,
        *,
        cdi: tuple[str, ...] = (),
        gpu_driver: bool = True,
        cdi_refusal: str | None = None,
        base_url: str = "http+docker://localhost",
    ) -> None:
        self.nvidia = nvidia
        self.cdi = cdi
        self.runs: list[dict[str, Any]] = []
        self.api = type("Api", (), {"base_url": base_url})()
        engine = self

        class Images:
            def get(self, image: str) -> object:
                return object()

        class Gone:
            def remove(self, force: bool) -> None:
                pass

        class Containers:
            def list(self, **_: object) -> list[object]:
                return []

            def run(self, image: str, **kwargs: Any) -> object:
                from docker.errors import APIError

                engine.runs.append(kwargs)
                gpus = [r for r in kwargs["device_requests"] if r["Driver"] != "cdi"]
                if gpus and not gpu_driver:
                    raise APIError(
                        "500 Server Error for http+docker://localhost/v1.47/containers/x/start:"
                        ' Internal Server Error ("could not select device driver "" with'
                        ' capabilities: [[gpu]]")'
                    )
                cdi = [r for r in kwargs["device_requests"] if r["Driver"] == "cdi"]
                if cdi and cdi_refusal is not None:
                    raise APIError(f'500 Server Error: Internal Server Error ("{cdi_refusal}")')
                raise APIError("recorded, not run")

            def get(self, name: str) -> Gone:
                return Gone()

        self.images = Images()
        self.containers = Containers()

    def info(self) -> dict[str, object]:
        return {
            "Runtimes": {"runc": {}, **({"nvidia": {}} if self.nvidia else {})},
            "DiscoveredDevices": [{"Source": "cdi", "ID": name} for name in self.cdi],
        }


def _uuid(index: int) -> str:
    """The UUID StandInNvml gives GPU ``index``."""
    from shared_helpers import StandInNvml

    return StandInNvml({}).nvmlDeviceGetUUID(index)


def _started_with(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    *,
    visible: str | None,
    env: dict[str, str] | None = None,
    nvidia: bool = True,
    gpus: bool | None = None,
    engine: _RecordingEngine | None = None,
    host_gpus: int = 2,
) -> dict[str, Any]:
    """What the launcher passed to ``containers.run`` on a machine with ``host_gpus`` T4s."""
    from shared_helpers import StandInNvml

    from mmelocal.errors import ServerStartError

    cards = StandInNvml(dict.fromkeys(range(host_gpus), 0), names=("Tesla T4",) * host_gpus)
    monkeypatch.setitem(sys.modules, "pynvml", cards)
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    engine = engine or _RecordingEngine(nvidia=nvidia)
    config = ServerConfig(model_repository=tmp_path, env=env or {})
    launcher = DockerLauncher(config, gpus=gpus, client=engine, log_path=tmp_path / "log")
    with pytest.raises(ServerStartError, match="recorded, not run"):
        launcher.start()
    (run,) = engine.runs
    return run


@pytest.mark.parametrize(
    ("visible", "env", "device_ids", "container_visible"),
    [
        ("1", None, [1], [1]),  # the host's selection, by UUID
        ("1,0", None, [1, 0], [1, 0]),  # in CUDA's order
        ("0", {"CUDA_VISIBLE_DEVICES": "1"}, [1], [1]),  # the config's env first, as local
        (_uuid(1)[:12], None, [1], [1]),  # a UUID prefix names one card
        ("1,-1,0", None, [1], [1]),  # CUDA stops at -1
    ],
    ids=["index", "two-in-order", "config-env-first", "uuid-prefix", "stops-at-minus-one"],
)
def test_the_container_gets_the_gpus_cuda_visible_devices_names_by_uuid(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    visible: str,
    env: dict[str, str] | None,
    device_ids: list[int],
    container_visible: list[int],
) -> None:
    """A local server sees the GPUs CUDA_VISIBLE_DEVICES names; a container inherits no
    environment and got every GPU (``Count: -1``). Now it gets those cards by UUID in the
    device request and in its own CUDA_VISIBLE_DEVICES (inside it they are numbered from 0,
    so the host's index would name another card)."""
    run = _started_with(monkeypatch, tmp_path, visible=visible, env=env)
    (request,) = run["device_requests"]
    assert request["DeviceIDs"] == [_uuid(i) for i in device_ids]
    assert request["Capabilities"] == [["gpu"]] and not request.get("Count")
    environment = run["environment"]
    assert environment["CUDA_VISIBLE_DEVICES"] == ",".join(_uuid(i) for i in container_visible)


def test_no_cuda_visible_devices_gives_every_gpu(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    run = _started_with(monkeypatch, tmp_path, visible=None)
    (request,) = run["device_requests"]
    assert request["Count"] == -1 and request["Capabilities"] == [["gpu"]]
    assert "CUDA_VISIBLE_DEVICES" not in run["environment"]


@pytest.mark.parametrize("visible", ["", "-1", "2"])
def test_a_selection_of_no_gpu_requests_none(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, visible: str
) -> None:
    """Empty, -1 or a card this machine has not: CUDA sees no GPU, nor does the container."""
    run = _started_with(monkeypatch, tmp_path, visible=visible)
    assert run["device_requests"] == []
    assert run["environment"]["CUDA_VISIBLE_DEVICES"] == ""


def test_with_gpus_given_the_selection_is_not_read(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (request,) = _started_with(monkeypatch, tmp_path, visible="1", gpus=True)["device_requests"]
    assert request["Count"] == -1


@pytest.mark.parametrize(
    ("visible", "expected"),
    [("1", {"DeviceIDs": [_uuid(1)]}), (None, {"Count": -1})],
    ids=["cuda-visible-devices", "every-gpu"],
)
def test_without_the_nvidia_runtime_the_container_still_gets_the_gpus(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, visible: str | None, expected: dict
) -> None:
    """``docker run --gpus`` is served by the engine's nvidia device driver, registered when
    the toolkit's hook is on dockerd's PATH (moby ``daemon/nvidia_linux.go``); the
    ``nvidia`` runtime entry is not used by it. Without that entry the container got no
    GPU while check and the emulator read the host's card."""
    run = _started_with(monkeypatch, tmp_path, visible=visible, nvidia=False)
    (request,) = run["device_requests"]
    assert {k: request[k] for k in expected} == expected
    assert request["Capabilities"] == [["gpu"]]


def test_an_engine_that_cannot_give_a_gpu_says_what_to_do(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A GPU here and no NVIDIA Container Toolkit on the engine: the engine's refusal comes
    with what to do (install the toolkit, or run on the CPU explicitly), not a container
    on the CPU beside the card whose memory is read."""
    from shared_helpers import StandInNvml

    from mmelocal.errors import ServerStartError

    monkeypatch.setitem(sys.modules, "pynvml", StandInNvml({0: 0}))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    engine = _RecordingEngine(nvidia=False, gpu_driver=False)
    launcher = DockerLauncher(ServerConfig(model_repository=tmp_path), client=engine)
    with pytest.raises(ServerStartError) as info:
        launcher.start()
    message = str(info.value)
    assert 'could not select device driver "" with capabilities: [[gpu]]' in message
    for hint in ("NVIDIA Container Toolkit", "nvidia-ctk runtime configure", "gpus=False"):
        assert hint in message, message
    assert "CUDA_VISIBLE_DEVICES= (empty)" in message


def test_a_cpu_machine_requests_no_gpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No GPU here and no sign of the toolkit on the engine: no request (an engine without
    a GPU driver would refuse one); an engine set up for GPUs gets every GPU as before,
    also when NVML cannot read this machine."""
    engine = _RecordingEngine(nvidia=False, gpu_driver=False)
    run = _started_with(monkeypatch, tmp_path, visible=None, engine=engine, host_gpus=0)
    assert run["device_requests"] == []
    (request,) = _started_with(monkeypatch, tmp_path, visible=None, host_gpus=0)["device_requests"]
    assert request["Count"] == -1


@pytest.mark.parametrize(
    ("cdi", "visible", "device_ids"),
    [
        (("nvidia.com/gpu=0", "nvidia.com/gpu=1", "nvidia.com/gpu=all"), "1", ["nvidia.com/gpu=1"]),
        (("nvidia.com/gpu=all",), None, ["nvidia.com/gpu=all"]),
        ((f"nvidia.com/gpu={_uuid(1)}", "nvidia.com/gpu=1"), "1", [f"nvidia.com/gpu={_uuid(1)}"]),
    ],
    ids=["by-index", "all", "by-uuid"],
)
def test_cdi_gpus_the_engine_lists_are_requested_by_their_cdi_names(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    cdi: tuple[str, ...],
    visible: str | None,
    device_ids: list[str],
) -> None:
    """An engine with CDI (on by default since Docker 28.2) lists the toolkit's CDI devices
    in ``docker info`` (``DiscoveredDevices``) and injects them for a ``cdi`` request
    (``docker run --device nvidia.com/gpu=all``) without the nvidia runtime or hook."""
    engine = _RecordingEngine(nvidia=False, gpu_driver=False, cdi=cdi)
    run = _started_with(monkeypatch, tmp_path, visible=visible, engine=engine)
    (request,) = run["device_requests"]
    assert (request["Driver"], request["DeviceIDs"]) == ("cdi", device_ids)
    assert not request.get("Count") and not request.get("Capabilities")


def test_a_cdi_device_the_engine_lists_and_cannot_resolve_says_how_to_write_its_spec(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``docker info``'s ``DiscoveredDevices`` and the injection read one CDI cache of the
    engine, which reads the spec folders again when they change (moby ``daemon/cdi.go``,
    the CDI library's ``pkg/cdi/cache.go``): a device listed and then "unresolvable" is a
    spec written again or removed in between. It is asked once, not again with ``--gpus``
    (that request needs the toolkit's hook, and with only its CDI hook goes through the
    same spec); the error says how to list and write the spec again."""
    from mmelocal.errors import ServerStartError

    refusal = "CDI device injection failed: unresolvable CDI devices nvidia.com/gpu=all"
    engine = _RecordingEngine(
        nvidia=False, gpu_driver=False, cdi=("nvidia.com/gpu=all",), cdi_refusal=refusal
    )
    monkeypatch.setitem(sys.modules, "pynvml", None)  # no NVML here: the engine's GPUs
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    launcher = DockerLauncher(ServerConfig(model_repository=tmp_path), client=engine)
    with pytest.raises(ServerStartError) as info:
        launcher.start()
    message = str(info.value)
    for words in (
        refusal,
        "nvidia-ctk cdi list",
        "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml",
        "no restart",
    ):
        assert words in message, message
    assert len(engine.runs) == 1


def test_a_selection_nvml_cannot_read_is_refused_with_what_to_do(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml fails
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    launcher = DockerLauncher(ServerConfig(model_repository=tmp_path), client=_RecordingEngine())
    with pytest.raises(UserInputError, match=r"CUDA_VISIBLE_DEVICES=1 .*mmelocal\[gpu\].*gpus="):
        launcher.start()


REMOTE = "tcp://gpu-box.invalid:2375"


@pytest.mark.parametrize(
    ("docker_host", "remote"),
    [
        (None, None),
        ("unix:///var/run/docker.sock", None),
        ("npipe:////./pipe/docker_engine", None),
        ("tcp://127.0.0.1:2375", None),
        ("tcp://localhost:2376", None),
        (REMOTE, REMOTE),
        ("ssh://me@gpu-box", "ssh://me@gpu-box"),
        ("gpu-box:2375", "gpu-box:2375"),
    ],
)
def test_an_engine_on_another_machine_is_told_from_docker_host(
    monkeypatch: pytest.MonkeyPatch, docker_host: str | None, remote: str | None
) -> None:
    if docker_host is None:
        monkeypatch.delenv("DOCKER_HOST", raising=False)
    else:
        monkeypatch.setenv("DOCKER_HOST", docker_host)
    assert remote_engine() == remote


def test_the_sdk_clients_address_tells_a_remote_engine() -> None:
    import docker

    def address(base_url: str) -> str | None:
        return remote_engine(docker.DockerClient(base_url=base_url, version="1.43"))

    assert address("unix:///var/run/docker.sock") is None  # the client connects on use only
    assert address("tcp://127.0.0.1:2375") is None
    assert address("tcp://gpu-box:2375") == "http://gpu-box:2375"


@pytest.mark.parametrize("where", ["ssh://me@gpu-box", REMOTE, "client"])
def test_the_launcher_refuses_an_engine_on_another_machine_before_using_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, where: str
) -> None:
    """The launcher mounts this machine's model folder into the container and reaches the
    ports it publishes on the engine's 127.0.0.1 through this machine's: neither works
    with another machine's engine (the mount would be of that machine's folder, the ports
    of nothing here). Refused first, saying why and what to do: no connection, no pull,
    no container."""
    import docker

    def no_connection(**_: object) -> None:
        raise AssertionError("the launcher connected to the engine")

    monkeypatch.setattr(docker, "from_env", no_connection)
    engine = None
    if where == "client":
        monkeypatch.delenv("DOCKER_HOST", raising=False)
        engine = _RecordingEngine(base_url="http://gpu-box:2375")
    else:
        monkeypatch.setenv("DOCKER_HOST", where)
    launcher = DockerLauncher(ServerConfig(model_repository=tmp_path), client=engine)
    with pytest.raises(RemoteDockerEngineError) as info:
        launcher.start()
    address = "http://gpu-box:2375" if where == "client" else where
    assert info.value.address == address
    message = str(info.value)
    named = "" if where == "client" else " (DOCKER_HOST)"
    for words in (
        f"at {address}{named} runs on another machine",
        "mounts this machine's model folder",
        "127.0.0.1",
        "run mmelocal on that machine",
        "unset DOCKER_HOST",
        "--launcher external --url",
    ):
        assert words in message, message
    assert engine is None or engine.runs == []


def test_check_and_the_emulator_get_the_launchers_refusal_of_a_remote_engine(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, add_one_repository: Path
) -> None:
    """Their memory readings (NVML's card, the server's process tree) are this machine's
    too: with DOCKER_HOST on another machine they would be another card's, or another
    process's. The launcher's one refusal stops them before any container starts."""
    import docker

    from mmelocal.emulator.emulator import Emulator
    from mmelocal.emulator.emulator_config import EmulatorConfig
    from mmelocal.runtime.check import CheckOptions, check_path

    def no_connection(**_: object) -> None:
        raise AssertionError("connected to the engine")

    monkeypatch.setattr(docker, "from_env", no_connection)
    monkeypatch.setenv("DOCKER_HOST", REMOTE)
    with pytest.raises(RemoteDockerEngineError, match=r"at tcp://gpu-box\.invalid:2375 \(DOCKER"):
        check_path(add_one_repository, CheckOptions(launcher="docker"))
    (tmp_path / "store").mkdir()
    config = EmulatorConfig(
        store=str(tmp_path / "store"), cache_dir=tmp_path / "cache", launcher="docker", gpus=()
    )
    emulator = Emulator(config)
    with pytest.raises(RemoteDockerEngineError, match=r"at tcp://gpu-box\.invalid:2375 \(DOCKER"):
        asyncio.run(emulator.start())
