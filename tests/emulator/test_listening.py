"""Nothing the emulator starts listens beyond the address the user chose.

tritonserver's SageMaker front end binds ``0.0.0.0`` whatever its config says; the local
launcher runs it in a network namespace of its own (mmelocal.runtime.netns) and bridges
its ports onto the chosen address. Where the kernel refuses namespaces the launcher warns
instead, naming the port. One emulator for the module; its process tree is walked with
psutil.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from emulator_helpers import output_of, payload, raw_request

from mmelocal.emulator.emulator import EmulatorConfig
from mmelocal.emulator.server import EmulatorServer
from mmelocal.runtime import netns
from mmelocal.runtime.local import LocalLauncher
from mmelocal.runtime.memory import process_tree_memory
from mmelocal.runtime.server_config import ServerConfig
from mmelocal.testing.tiny_model import expected, write_tarball

pytestmark = pytest.mark.triton

TARGET = "model-0.tar.gz"
CHOSEN = "127.0.0.1"


class Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture(scope="module")
def warnings() -> Iterator[Warnings]:
    handler = Warnings()
    logger = logging.getLogger("mmelocal.runtime.local")
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, warnings: Warnings
) -> Iterator[EmulatorServer]:
    root = tmp_path_factory.mktemp("listen")
    store = root / "store"
    store.mkdir()
    write_tarball(store / TARGET, scale=2.0)
    # every port Triton can open is open here: gRPC and metrics are off by the entrypoint's
    # defaults (as on SageMaker), so its own knobs turn them on for the bridge to carry
    config = EmulatorConfig(
        store=str(store),
        cache_dir=root / "cache",
        sagemaker_env={
            "SAGEMAKER_TRITON_ALLOW_GRPC": "true",
            "SAGEMAKER_TRITON_ALLOW_METRICS": "true",
        },
    )
    with EmulatorServer(config, host=CHOSEN) as running:
        x, body = payload(rows=1)
        status, _, data = invoke(running, body)
        assert status == 200, data
        assert (output_of(data) == expected(x, 2.0)).all()
        yield running


def invoke(server: EmulatorServer, body: bytes) -> tuple[int, dict[str, str], bytes]:
    return raw_request(
        server.url,
        "POST",
        "/endpoints/ep/invocations",
        [("Content-Type", "application/json"), ("X-Amzn-SageMaker-Target-Model", TARGET)],
        body,
    )


def net_namespace(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/ns/net")


def tree() -> list[psutil.Process]:
    me = psutil.Process()
    return [me, *me.children(recursive=True)]


def listening(proc: psutil.Process) -> list[tuple[str, int]]:
    return [
        (c.laddr.ip.removeprefix("::ffff:"), c.laddr.port)  # IPv4 in IPv6 form
        for c in proc.net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
    ]


def launcher_of(server: EmulatorServer) -> LocalLauncher:
    launcher = server.emulator.instances[0].launcher
    assert isinstance(launcher, LocalLauncher)
    return launcher


def test_every_listening_socket_is_on_the_chosen_address(
    server: EmulatorServer, warnings: Warnings
) -> None:
    launcher = launcher_of(server)
    sagemaker_port = launcher.config.sagemaker_port
    ours = net_namespace(os.getpid())
    seen: list[tuple[str, int]] = []
    elsewhere: list[int] = []
    for proc in tree():
        try:
            # psutil matches a process's sockets against this network's tables: sockets
            # a process holds in a network of its own are not in them (nor reachable)
            seen += listening(proc)
            if net_namespace(proc.pid) != ours:
                elsewhere.append(proc.pid)
        except (psutil.Error, OSError):
            continue  # exited meanwhile
    ports = {port for _, port in seen}
    assert server.port in ports
    if launcher.isolated:
        assert launcher.pid() in elsewhere
        assert sagemaker_port in ports  # the bridge's listener, on the chosen address
        assert {ip for ip, _ in seen} == {CHOSEN}, seen
    else:  # the kernel refused the namespace: the exposure was named at start
        assert any(f"SageMaker port {sagemaker_port}" in m for m in warnings.messages)
        assert {ip for ip, port in seen if port != sagemaker_port} == {CHOSEN}, seen


def test_the_sagemaker_port_is_not_reachable_from_the_network(server: EmulatorServer) -> None:
    launcher = launcher_of(server)
    if not launcher.isolated:
        pytest.skip(f"network namespaces refused here: {netns.isolation_refused()}")
    addresses = [
        a.address
        for entries in psutil.net_if_addrs().values()
        for a in entries
        if a.family == socket.AF_INET and not a.address.startswith("127.")
    ]
    if not addresses:
        pytest.skip("this machine has no address besides loopback")
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((addresses[0], launcher.config.sagemaker_port), timeout=10)


def test_memory_of_the_server_tree_is_read_through_the_namespace(server: EmulatorServer) -> None:
    launcher = launcher_of(server)
    pid = launcher.pid()
    assert pid is not None
    assert psutil.Process(pid).name() == "tritonserver"
    memory = process_tree_memory(pid)
    # the server and the model's stub, each with a PSS reading
    assert len(memory.processes) >= 2
    assert all(p.pss_bytes > 0 for p in memory.processes)
    state = raw_request(server.url, "GET", "/emulator/state")[2]
    assert b'"pid": %d' % pid in state


def test_stop_reaps_the_bridge_the_server_and_its_stubs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Its own emulator: stopping it must leave no process of its tree behind, and the
    log names tritonserver's pid (not the bridge's) as the one that stopped."""
    store = tmp_path / "store"
    store.mkdir()
    write_tarball(store / TARGET, scale=2.0)
    config = EmulatorConfig(store=str(store), cache_dir=tmp_path / "cache")
    before = {p.pid for p in tree()}
    caplog.set_level(logging.INFO, logger="mmelocal.runtime.local")
    with EmulatorServer(config, host=CHOSEN) as running:
        status, _, _ = invoke(running, payload(rows=1)[1])
        assert status == 200
        started = [p for p in tree() if p.pid not in before]
        names = {p.name() for p in started}
        assert "tritonserver" in names and "triton_python_backend_stub" in names
        # SageMaker's defaults open no gRPC or metrics port: none is published or bridged
        launcher = launcher_of(running)
        assert launcher.endpoints.grpc_url is None and launcher.endpoints.metrics_url is None
        opened = {port for proc in started for _, port in listening(proc)}
        assert launcher.config.grpc_port not in opened
        assert launcher.config.metrics_port not in opened
        assert launcher.config.sagemaker_port in opened
        server_pid = launcher.pid()
        assert server_pid is not None
        tritonserver = next(p for p in started if p.name() == "tritonserver")
        assert server_pid == tritonserver.pid
    stopped = [r.getMessage() for r in caplog.records if "stopped" in r.getMessage()]
    assert stopped and stopped[-1].startswith(f"tritonserver pid {server_pid} "), stopped
    for proc in started:
        with contextlib.suppress(psutil.NoSuchProcess):
            assert proc.status() == psutil.STATUS_ZOMBIE, proc


def test_without_a_namespace_the_open_port_is_named_at_start(
    tmp_path: Path, warnings: Warnings
) -> None:
    """isolate_network=False (or MMELOCAL_NETNS=0, or a kernel that refuses): today's
    behaviour, and a warning naming the port and a firewall rule."""
    launcher = LocalLauncher(
        ServerConfig(model_repository=tmp_path, sagemaker=True), isolate_network=False
    )
    del warnings.messages[:]
    with launcher:
        assert not launcher.isolated
        port = launcher.config.sagemaker_port
        pid = launcher.pid()
        assert pid is not None
        assert ("0.0.0.0", port) in listening(psutil.Process(pid))
    [message] = [m for m in warnings.messages if "SageMaker port" in m]
    assert f"SageMaker port {port} listens on 0.0.0.0" in message
    assert f"--dport {port}" in message


def test_clients_reach_every_port_through_the_bridge(server: EmulatorServer) -> None:
    """tritonclient over HTTP and gRPC (whose server speaks first), and the metrics text,
    on the chosen address: what users of the Triton behind an emulator connect to."""
    import urllib.request

    import tritonclient.grpc
    import tritonclient.http

    endpoints = launcher_of(server).endpoints
    assert tritonclient.http.InferenceServerClient(endpoints.http_host_port).is_server_ready()
    assert endpoints.grpc_url is not None and endpoints.metrics_url is not None
    grpc = tritonclient.grpc.InferenceServerClient(endpoints.grpc_url)
    assert grpc.is_server_ready()
    assert grpc.is_model_ready(TARGET)
    with urllib.request.urlopen(f"{endpoints.metrics_url}/metrics", timeout=30) as answer:
        assert b"nv_inference_request_success" in answer.read()
