"""A real container from the locally built image (tests/runtime/docker_image) serves models."""

from __future__ import annotations

import contextlib
import re
import socket
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from shared_helpers import InBackground, wait_for

from mmelocal.errors import ServerStartError
from mmelocal.runtime.client import TritonClient
from mmelocal.runtime.docker import (
    CONTAINER_MODEL_REPOSITORY,
    LABEL_HOST,
    LABEL_OWNER,
    LABEL_PID,
    LABEL_SESSION,
    DockerImageError,
    DockerLauncher,
    cleanup_containers,
)
from mmelocal.runtime.launcher import TritonLauncher
from mmelocal.runtime.server_config import ServerConfig

pytestmark = [pytest.mark.mmelocal_docker, pytest.mark.triton]


def _launcher(image: str, repo: Path, session: str, **kwargs: Any) -> DockerLauncher:
    sagemaker = kwargs.pop("sagemaker", False)
    return DockerLauncher(
        ServerConfig(
            model_repository=repo,
            sagemaker=sagemaker,
            exit_timeout_s=3,
            # SageMaker turns gRPC off; these checks use it
            sagemaker_env={"SAGEMAKER_TRITON_ALLOW_GRPC": "true"} if sagemaker else {},
        ),
        image=image,
        pull="never",
        session=session,
        start_timeout_s=60,
        stop_timeout_s=5,
        **kwargs,
    )


@pytest.fixture(scope="module")
def running(
    triton_test_image: str, add_one_repository: Path, docker_session: str
) -> Iterator[DockerLauncher]:
    """One container (SageMaker front end on) shared by the read-only checks below."""
    with _launcher(triton_test_image, add_one_repository, docker_session, sagemaker=True) as srv:
        yield srv


def test_container_serves_python_model_over_http_and_grpc(running: DockerLauncher) -> None:
    assert isinstance(running, TritonLauncher)
    assert running.is_alive() and running.pid()
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    with TritonClient.for_launcher(running, load_timeout_s=60) as client:
        client.load("add_one")
        out = client.infer("add_one", {"INPUT0": x})["OUTPUT0"]
    np.testing.assert_array_equal(out, x + 1)
    with TritonClient.for_launcher(running, protocol="grpc") as grpc_client:
        out = grpc_client.infer("add_one", {"INPUT0": x[:1]})["OUTPUT0"]
    np.testing.assert_array_equal(out, x[:1] + 1)
    # the streamed log may lag behind the container (verbose, as SageMaker runs it): take
    # the container's whole output now
    log = running.save_logs()
    assert log is not None
    # with model namespacing on (SageMaker's default) Triton names it REPOSITORY::add_one
    assert re.search(r"successfully loaded '(\S+::)?add_one'", log.read_text())


def test_sagemaker_front_end_published(running: DockerLauncher) -> None:
    url = running.endpoints.sagemaker_url
    assert url is not None
    with urllib.request.urlopen(f"{url}/ping", timeout=5) as response:
        assert response.status == 200


def test_this_machines_engine_gives_the_hosts_pid_of_the_container(
    running: DockerLauncher, docker_engine: Any
) -> None:
    """A Linux dockerd here (its real ``docker info`` names this machine's kernel, not
    Docker Desktop) runs the container's processes on this machine: the launcher's pid is
    one of them as the engine lists them (``docker top``), and the engine's own memory
    figure for the container (``docker stats``, one-shot) reads too."""
    assert running.processes_elsewhere() is None
    pid = running.pid()
    top = docker_engine.containers.get(running.container_id).top()
    column = top["Titles"].index("PID")
    assert pid is not None and str(pid) in {row[column] for row in top["Processes"]}
    used = running.container_memory_bytes()
    assert used is not None and used > 0


def test_ports_published_on_loopback_only(running: DockerLauncher, docker_engine: Any) -> None:
    container = docker_engine.containers.get(running.container_id)
    published = container.attrs["NetworkSettings"]["Ports"]
    # metrics stays off, as SageMaker's entrypoint has it: its port is not published
    assert set(published) == {"8000/tcp", "8001/tcp", "8080/tcp"}
    for bindings in published.values():
        assert bindings and all(b["HostIp"] == "127.0.0.1" for b in bindings)
    # the config's ports are 0: the engine chose each host port as it bound it (no
    # pick-then-bind race), and the launcher read them back from the container
    assert running.config.http_port == 0
    endpoints = running.endpoints
    chosen = {
        "8000/tcp": endpoints.http_url,
        "8001/tcp": endpoints.grpc_url,
        "8080/tcp": endpoints.sagemaker_url,
    }
    assert endpoints.metrics_url is None
    for port, url in chosen.items():
        assert url is not None and url.removeprefix("http://") == (
            f"127.0.0.1:{published[port][0]['HostPort']}"
        )


def test_a_fixed_host_port_in_use_says_so_and_leaves_no_container(
    triton_test_image: str,
    add_one_repository: Path,
    docker_session: str,
    docker_engine: Any,
    held_port: int,
) -> None:
    launcher = DockerLauncher(
        ServerConfig(model_repository=add_one_repository, http_port=held_port),
        image=triton_test_image,
        pull="never",
        session=docker_session,
    )
    with pytest.raises(ServerStartError, match="0 to let the engine pick a free one"):
        launcher.start()
    assert not docker_engine.containers.list(all=True, filters={"name": launcher.name})


def test_repository_mounted_read_only(
    running: DockerLauncher, docker_engine: Any, add_one_repository: Path
) -> None:
    container = docker_engine.containers.get(running.container_id)
    (mount,) = [m for m in container.attrs["Mounts"] if m["Destination"] == "/models"]
    assert mount["RW"] is False
    assert Path(mount["Source"]) == add_one_repository.resolve()
    code, output = container.exec_run(["touch", f"{CONTAINER_MODEL_REPOSITORY}/add_one/x"])
    assert code != 0 and b"Read-only file system" in output
    assert not (add_one_repository / "add_one" / "x").exists()


def test_labels_name_owner_session_host_pid(running: DockerLauncher, docker_engine: Any) -> None:
    labels = docker_engine.containers.get(running.container_id).labels
    assert labels[LABEL_SESSION] == running.session
    assert labels[LABEL_HOST] == socket.gethostname()
    assert labels[LABEL_PID].isdigit() and labels[LABEL_OWNER]


def test_cleanup_removes_leftovers_of_dead_processes(
    triton_test_image: str, docker_engine: Any, docker_session: str
) -> None:
    leftover = docker_engine.containers.create(
        triton_test_image,
        command=["sleep", "300"],
        labels={
            LABEL_OWNER: "test",
            LABEL_SESSION: docker_session,
            LABEL_HOST: socket.gethostname(),
            LABEL_PID: "999999999",  # no such process: its owner is gone
        },
    )
    mine = docker_engine.containers.create(
        triton_test_image,
        command=["sleep", "300"],
        labels={LABEL_OWNER: "test", LABEL_SESSION: docker_session, LABEL_PID: "1"},
    )
    try:
        removed = cleanup_containers(orphans_only=True, client=docker_engine)
        assert leftover.name in removed and mine.name not in removed
        assert mine.name in cleanup_containers(session=docker_session, client=docker_engine)
        assert not docker_engine.containers.list(all=True, filters={"name": mine.name})
    finally:
        for c in (leftover, mine):
            with contextlib.suppress(Exception):
                c.remove(force=True)


def test_stop_is_idempotent_and_removes_container(
    triton_test_image: str, add_one_repository: Path, docker_session: str, docker_engine: Any
) -> None:
    launcher = _launcher(triton_test_image, add_one_repository, docker_session)
    launcher.stop()  # before start: no-op
    launcher.start()
    name = launcher.name
    assert launcher.is_alive()
    assert launcher.start_total_s is not None and launcher.ready_after_s is not None
    assert launcher.start_total_s >= launcher.ready_after_s > 0
    launcher.stop()
    launcher.stop()
    assert not launcher.is_alive() and launcher.pid() is None
    assert not docker_engine.containers.list(all=True, filters={"name": name})
    assert launcher.log_path is not None and "Started HTTPService" in launcher.log_path.read_text()


def test_killed_container_seen_by_is_alive_and_restartable(
    triton_test_image: str, add_one_repository: Path, docker_session: str, docker_engine: Any
) -> None:
    with _launcher(triton_test_image, add_one_repository, docker_session) as launcher:
        docker_engine.containers.get(launcher.container_id).kill()
        assert not launcher.is_alive()
        launcher.start()  # a dead container is replaced, under the same name
        assert launcher.is_alive()
    assert launcher.container_id is None


def test_start_failure_shows_log_tail_and_cleans_up(
    triton_test_image: str, add_one_repository: Path, docker_session: str, docker_engine: Any
) -> None:
    launcher = DockerLauncher(
        ServerConfig(model_repository=add_one_repository, extra_args=("--no-such-flag=1",)),
        image=triton_test_image,
        pull="never",
        session=docker_session,
        start_timeout_s=30,
    )
    with pytest.raises(ServerStartError) as info, launcher:
        pass
    assert launcher.log_path is not None and "no-such-flag" in launcher.log_path.read_text()
    # the code is read whether the wait or the port read-back saw the exit first
    assert "exited with code 1 during start-up" in str(info.value)
    assert str(launcher.log_path) in str(info.value)
    assert not docker_engine.containers.list(all=True, filters={"name": launcher.name})


def test_start_failure_quotes_this_containers_output_not_an_earlier_runs(
    triton_test_image: str, add_one_repository: Path, docker_session: str, tmp_path: Path
) -> None:
    """The log is appended to (an emulator's instance folder kept across runs): the error
    quotes what this container wrote, not an earlier run's complaint."""
    log = tmp_path / "docker.log"
    log.write_text(
        "E1126 10:00:00.000 1 server.cc:1] an earlier run failed here\n"
        "tritonserver: unrecognized option '--earlier-flag'\n"
        "Usage: tritonserver [options]\n  --help\n\tPrint usage\n\n"
    )
    launcher = DockerLauncher(
        ServerConfig(model_repository=add_one_repository, extra_args=("--no-such-flag=1",)),
        image=triton_test_image,
        pull="never",
        session=docker_session,
        start_timeout_s=30,
        log_path=log,
    )
    with pytest.raises(ServerStartError, match="exited with code 1") as info:
        launcher.start()
    assert "earlier" not in str(info.value)


def test_a_container_starts_with_the_platforms_safe_port_range_in_its_environment(
    triton_test_image: str, add_one_repository: Path, docker_session: str
) -> None:
    """SAGEMAKER_SAFE_PORT_RANGE is SageMaker's own: passed on as a flag, tritonserver in
    the container refused its HTTP port 8000 (same 0.0.0.0 as the front end) and exited."""
    config = ServerConfig(
        model_repository=add_one_repository,
        sagemaker=True,
        exit_timeout_s=3,
        sagemaker_env={"SAGEMAKER_SAFE_PORT_RANGE": "23000-23999"},
    )
    launcher = DockerLauncher(
        config, image=triton_test_image, pull="never", session=docker_session, start_timeout_s=60
    )
    with launcher:
        assert launcher.is_alive()


def test_a_container_gone_before_its_ports_are_read_says_why(
    triton_test_image: str,
    add_one_repository: Path,
    docker_session: str,
    docker_engine: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A container that exits at once can be gone before the launcher reads its published
    ports (seen under load): the error is Triton's exit and its log, not 'no host port'."""
    read_ports = DockerLauncher._published_endpoints

    def after_the_exit(self: DockerLauncher, started_at: float) -> Any:
        self._container.wait(timeout=60)
        return read_ports(self, started_at)

    monkeypatch.setattr(DockerLauncher, "_published_endpoints", after_the_exit)
    launcher = DockerLauncher(
        ServerConfig(model_repository=add_one_repository, extra_args=("--no-such-flag=1",)),
        image=triton_test_image,
        pull="never",
        session=docker_session,
    )
    with pytest.raises(ServerStartError, match=r"(?s)exited with code 1 during start-up.*no-such"):
        launcher.start()
    assert not docker_engine.containers.list(all=True, filters={"name": launcher.name})


def test_unknown_image_says_how_to_get_it(add_one_repository: Path, docker_engine: Any) -> None:
    config = ServerConfig(model_repository=add_one_repository)
    launcher = DockerLauncher(config, image="mmelocal-test/no-such-image:0", pull="never")
    with pytest.raises(DockerImageError, match=r"build_image\.sh"):
        launcher.start()
    other = DockerLauncher(config, image="localhost:1/no-such/image:0", pull="missing")
    with pytest.raises(DockerImageError, match=r"could not be pulled.*docker pull") as info:
        other.start()
    assert info.value.image == "localhost:1/no-such/image:0"


@contextlib.contextmanager
def _gpu_launcher(launcher: DockerLauncher) -> Iterator[DockerLauncher]:
    """``launcher`` started, or the test skipped when the engine refuses GPUs: it has no
    NVIDIA device driver (no NVIDIA Container Toolkit hook on dockerd's PATH)."""
    from mmelocal.runtime.docker_engine import NO_DEVICE_DRIVER

    try:
        launcher.start()
    except ServerStartError as exc:
        if NO_DEVICE_DRIVER not in str(exc):
            raise
        pytest.skip(
            f"the Docker engine gives containers no GPU (no NVIDIA Container Toolkit): {exc}"
        )
    with launcher:
        yield launcher


@pytest.mark.mmelocal_gpu
def test_gpu_container_gets_a_gpu(
    triton_test_image: str, add_one_repository: Path, docker_session: str, docker_engine: Any
) -> None:
    with _gpu_launcher(
        _launcher(triton_test_image, add_one_repository, docker_session, gpus=True)
    ) as launcher:
        container = docker_engine.containers.get(launcher.container_id)
        requests = container.attrs["HostConfig"]["DeviceRequests"]
        assert requests and requests[0]["Capabilities"] == [["gpu"]]
        code, output = container.exec_run(["sh", "-c", "ls /dev/nvidia0"])
        assert code == 0, output


@pytest.mark.mmelocal_gpu
def test_gpu_container_gets_the_gpu_cuda_visible_devices_names(
    triton_test_image: str,
    add_one_repository: Path,
    docker_session: str,
    docker_engine: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The card CUDA_VISIBLE_DEVICES names (here the last one NVML sees, by UUID) is the
    container's only GPU: in its device request, its CUDA_VISIBLE_DEVICES and its /dev."""
    from mmelocal.runtime.memory import Nvml

    nvml = Nvml()
    try:
        uuid = nvml.uuid(nvml.device_count() - 1)
    finally:
        nvml.close()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", uuid)
    with _gpu_launcher(
        _launcher(triton_test_image, add_one_repository, docker_session)
    ) as launcher:
        container = docker_engine.containers.get(launcher.container_id)
        (request,) = container.attrs["HostConfig"]["DeviceRequests"]
        assert request["DeviceIDs"] == [uuid] and request["Capabilities"] == [["gpu"]]
        assert f"CUDA_VISIBLE_DEVICES={uuid}" in container.attrs["Config"]["Env"]
        code, output = container.exec_run(["sh", "-c", "ls /dev/nvidia[0-9]*"])
        assert code == 0 and len(output.split()) == 1, output


def test_plugin_test_server_runs_in_docker(
    triton_test_image: str, add_one_repository: Path, docker_engine: Any
) -> None:
    from mmelocal.testing.triton import PYTHON_ONLY, TestTritonServer

    with TestTritonServer(
        launcher="docker", docker_image=triton_test_image, backends=PYTHON_ONLY
    ) as server:
        assert isinstance(server.launcher, DockerLauncher)
        name = server.load_model(add_one_repository / "add_one", timeout_s=60)
        out = server.client.infer(name, {"INPUT0": np.ones((1, 4), np.float32)})["OUTPUT0"]
        np.testing.assert_array_equal(out, np.full((1, 4), 2, np.float32))
        container_id = server.launcher.container_id
    assert not docker_engine.containers.list(all=True, filters={"id": container_id})


def test_save_logs_keeps_what_earlier_runs_appended(
    triton_test_image: str, add_one_repository: Path, docker_session: str, tmp_path: Path
) -> None:
    """A kept log (an emulator's instance folder across runs) is appended to: saving the
    container's whole output replaces this container's part only, once, not the file."""
    log = tmp_path / "docker.log"
    earlier = "I1126 10:00:00.000 1 server.cc:1] an earlier run's line\n"
    log.write_text(earlier)
    launcher = _launcher(triton_test_image, add_one_repository, docker_session, log_path=log)
    with launcher:
        saved = launcher.save_logs()
        assert saved == log
        text = log.read_text()
        assert text.startswith(earlier)
        assert text.count("Started HTTPService") == 1
    text = log.read_text()
    assert text.startswith(earlier) and text.count("Started HTTPService") == 1


@pytest.mark.parametrize("when", ["while the container is created", "while waiting for it"])
def test_a_stop_during_the_start_ends_it_and_leaves_no_container(
    triton_test_image: str,
    add_one_repository: Path,
    docker_session: str,
    docker_engine: Any,
    monkeypatch: pytest.MonkeyPatch,
    when: str,
) -> None:
    """A stop from another thread (a shutdown) while the start is under way ends it
    promptly, with no container left and an error that says it was stopped, whether the
    container did not exist yet (``containers.run`` had not returned: the stop found nothing
    to stop) or was running but not ready (its tritonserver never answers here). Failed
    before: created, the container was waited for until the start timeout (60 s); running,
    the start said it "exited during start-up"."""
    from docker.models.containers import ContainerCollection

    creating, release = threading.Event(), threading.Event()
    real_run = ContainerCollection.run

    def gated_run(self: Any, *args: Any, **kwargs: Any) -> Any:
        creating.set()
        assert release.wait(timeout=30)
        return real_run(self, *args, **kwargs)

    if when == "while the container is created":
        monkeypatch.setattr(ContainerCollection, "run", gated_run)
    else:
        release.set()
    launcher = _launcher(
        triton_test_image,
        add_one_repository,
        docker_session,
        command_prefix=("sh", "-c", "exec sleep 600", "sh"),  # never ready
    )

    def running() -> bool:
        return bool(docker_engine.containers.list(filters={"name": launcher.name}))

    starting = InBackground(launcher.start)
    try:
        if when == "while the container is created":
            assert creating.wait(timeout=30)
        else:
            wait_for(running, timeout_s=30, what="the container")
        launcher.stop()
        release.set()
        assert starting.join(timeout_s=20)  # the start timeout is 60 s
    finally:
        release.set()
        if not starting.join(timeout_s=0):
            launcher.stop()  # the wait ends with the container
            starting.join(timeout_s=60)
    assert [type(f) for f in starting.failures] == [ServerStartError]
    assert "stopped while it was starting" in str(starting.failures[0])
    assert not docker_engine.containers.list(all=True, filters={"name": launcher.name})
