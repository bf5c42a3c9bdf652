"""What the MME emulator adds on top of Triton, measured against Triton in the same run.

The same model and the same payload are sent at 1 and 16 concurrent keep-alive clients,
in interleaved rounds so every arm sees the same machine. Models:

* ``minilm``: the demo's model (all-MiniLM-L6-v2 as TorchScript, dynamic batching; the
  demo's request: 128 tokens in, the pooled embedding out). On this CPU it takes about
  25 ms and both cores, so at 16 clients the latency is mostly queueing.
* ``tiny``: the tiny Python-backend model, which Triton answers in about a third of a
  millisecond: the worst case for any hop.
* ``tiny-5ms``: the same model waiting 5 ms per execution without using the CPU, with
  dynamic batching: the shape of a GPU model such as BERT-base.

Arms:

* ``direct``: straight to Triton (``POST /models/KEY/invoke`` of its SageMaker front end,
  or ``/v2/models/T/infer``);
* ``emulator``: through ``mmelocal serve`` (``InvokeEndpoint``, or the emulator's v2
  route), a separate process;
* ``again``: direct Triton a second time, interleaved with the others (A/A): how far two
  measurements of the same thing differ in this run, the noise floor of every figure;
* ``paired`` (1 client): the client alternates request by request between direct and the
  emulator, so both see the same moments of the machine: the hop's added latency with
  slow drift cancelled (what a CPU-bound model needs: its round-to-round drift is larger
  than the goal);
* reference hops in front of the same Triton, same route (``tiny`` model): ``relay``, a
  bare byte relay (uvloop, one upstream connection per client connection, no HTTP
  parsing: the least any user-space hop can cost), ``parse``, the same relay parsing
  every request and answer with ``httptools`` and writing them again (the least any
  HTTP-aware Python hop can cost: the emulator must at least do this to read the target
  and know where an answer ends) and ``haproxy`` (HTTP mode, keep-alive) when it is
  installed, in both placements. They answer one question: what does *any* extra hop
  cost on this machine? Each block with them ends with every hop's CPU per request
  against the relay's (issue 25's goal: the emulator's at most 1.5x, shared placement).

Placements: ``shared`` (every process may use every core: what a laptop run looks like;
the emulator's CPU is taken from Triton and the clients) and ``split`` (the proxy pinned
to its own core, the clients and Triton to the others: a GPU host, where the emulator
does not compete with the model for cores; ``tiny`` only). ``direct`` is measured in both.

Triton runs without its own network namespace (``MMELOCAL_NETNS=0``): every arm reaches
the same tritonserver on loopback, as the emulator's keep-alive connections do with the
namespace on (they are handed over from inside it). Through the namespace's TCP bridge,
``direct`` and the reference hops would each pay a user-space copy the emulator does not
(``benchmarks/netns_bridge.py`` measures it).

CPU: every row gives the CPU per request of the arm's hop, of Triton's process tree and
of this client while the arm was timed ("CPU x": their sum against direct's). Where direct
keeps the cores busy (16 clients, shared placement), throughput follows CPU per request,
and the verdict says what ratio the arm's CPU allows at most: a hop's own CPU and what
Triton spends beyond its direct figure (Triton serving a slower stream of requests pays
more per request; the A/A row shows how much of that figure is noise).

Goal (issue 4): <= 1 ms added at p50, <= 3 ms at p99, throughput >= 0.9x direct.
Run: ``.venv/bin/python benchmarks/overhead.py [--seconds 2] [--rounds 4]
[--placements shared split] [--clients 1 16] [--models minilm tiny tiny-5ms]
[--env SAGEMAKER_TRITON_LOG_VERBOSE=0]`` (about
7 minutes; the first run builds MiniLM into the demo's folder, as ``make demo`` does).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import httptools
import numpy as np

from mmelocal.emulator.cache import target_key
from mmelocal.emulator.server import bind_socket, bound_port
from mmelocal.runtime.netns import NETNS_ENV
from mmelocal.runtime.readiness import (
    http_ok,
    start_logging_server,
    stop_child,
    wait_for_listener,
    wait_until_ready,
)
from mmelocal.stats import percentile
from mmelocal.testing.tiny_model import request_json, write_tarball


@dataclass(frozen=True)
class Model:
    """One model of the run: its store name and the request body sent to it."""

    label: str
    target: str
    body: bytes


def tiny_model(store: Path, model_ms: float) -> Model:
    """The tiny Python-backend model, computing ``model_ms`` per execution (batching if > 0)."""
    label = "tiny" if model_ms == 0 else f"tiny-{model_ms:g}ms"
    # a model with compute time batches concurrent requests, as GPU models do
    path = write_tarball(
        store / f"{label}.tar.gz", scale=2.0, compute_ms=model_ms, dynamic_batching=model_ms > 0
    )
    body = json.dumps(request_json(np.arange(4, dtype=np.float32).reshape(1, 4))).encode()
    return Model(label, path.name, body)


def minilm_model(store: Path) -> Model:
    """The demo's MiniLM (all-MiniLM-L6-v2, TorchScript, dynamic batching), with the demo's
    request: 128 tokens in, the pooled embedding out. Built once into the demo's folder."""
    from mmelocal.builder.package import package_copies
    from mmelocal.cli.demo import build_minilm, demo_request
    from mmelocal.runtime.local import cache_dir

    model_dir = build_minilm(cache_dir() / "demo")
    (path,) = package_copies(model_dir, store, copies=1, prefix="minilm-")
    return Model("minilm", path.name, demo_request(model_dir)[0])


def mme_headers(name: str) -> dict[str, str]:
    return {"Content-Type": "application/json", "X-Amzn-SageMaker-Target-Model": name}


GOAL_P50_MS, GOAL_P99_MS, GOAL_RATIO = 1.0, 3.0, 0.9
#: issue 25: the emulator's CPU per request at most this multiple of the bare relay's
GOAL_HOP_CPU = 1.5


async def _run(
    urls: list[str], body: bytes, headers: dict[str, str], clients: int, seconds: float
) -> tuple[list[list[float]], float]:
    """Each client sends to ``urls`` in turn (one url: a plain round); latencies per url."""
    latencies: list[list[float]] = [[] for _ in urls]
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        deadline = time.perf_counter() + seconds

        async def worker(first: int) -> None:
            turn = first
            while time.perf_counter() < deadline:
                url = urls[turn % len(urls)]
                t0 = time.perf_counter()
                async with session.post(url, data=body, headers=headers) as resp:
                    await resp.read()
                    if resp.status != 200:
                        raise RuntimeError(f"{url} answered {resp.status}")
                latencies[turn % len(urls)].append(time.perf_counter() - t0)
                turn += 1

        start = time.perf_counter()
        await asyncio.gather(*(worker(i) for i in range(clients)))
        elapsed = time.perf_counter() - start
    return latencies, sum(map(len, latencies)) / elapsed


def measure(url, body, headers, clients, seconds):
    """Latencies (s) and throughput (req/s) of one round."""
    latencies, rps = asyncio.run(_run([url], body, headers, clients, seconds))
    return latencies[0], rps


def measure_paired(url_a, url_b, body, headers, clients, seconds, rounds):
    """Latencies (s) of ``url_a`` and ``url_b`` with every client alternating between them,
    so both see the same moments of the machine (slow drift cancels out)."""
    a: list[float] = []
    b: list[float] = []
    measure(url_a, body, headers, clients, 0.2)
    for _ in range(rounds):
        gc.collect()
        gc.disable()
        try:
            (la, lb), _ = asyncio.run(_run([url_a, url_b], body, headers, clients, seconds))
        finally:
            gc.enable()
        a += la
        b += lb
    return np.array(a), np.array(b)


def paired_added(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """Added p50 and p99 (ms) of ``b`` over ``a``."""
    return (
        (percentile(b, 50) - percentile(a, 50)) * 1e3,
        (percentile(b, 99) - percentile(a, 99)) * 1e3,
    )


# -- the bare relay (run in its own process: ``overhead.py --relay UP_PORT FD``) ---------
class _Up(asyncio.Protocol):
    """The relay's upstream connection: Triton's bytes go straight to the client."""

    def __init__(self, down: _Down) -> None:
        self.down = down

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.down.transport.write(data)

    def connection_lost(self, exc) -> None:
        self.down.transport.close()


class _Down(asyncio.Protocol):
    """A client connection of the relay, with its own upstream connection to Triton."""

    up_protocol: type[_Up] = _Up

    def __init__(self, up_port: int) -> None:
        self.up_port = up_port

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.up: _Up | None = None
        self.pending: list[bytes] = []
        self.connecting = asyncio.ensure_future(self.connect())

    async def connect(self) -> None:
        loop = asyncio.get_running_loop()
        make = self.up_protocol
        _, self.up = await loop.create_connection(lambda: make(self), "127.0.0.1", self.up_port)
        for data in self.pending:
            self.up.transport.write(data)

    def data_received(self, data: bytes) -> None:
        if self.up is None:
            self.pending.append(data)
        else:
            self.up.transport.write(data)

    def connection_lost(self, exc) -> None:
        if self.up is not None:
            self.up.transport.close()


class _Reparsing:
    """What the parsing hop's two sides share: every byte through ``httptools``, each
    header kept as a line and the body as its parts, for one ``write`` once complete."""

    parser: Any
    headers: list[bytes]
    body: list[bytes]

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append(b"%s: %s\r\n" % (name, value))

    def on_body(self, body: bytes) -> None:
        self.body.append(body)


class _ParsingUp(_Reparsing, _Up):
    """:class:`_Up`, parsing each answer (``httptools``) and writing it again at once."""

    def __init__(self, down: _Down) -> None:
        super().__init__(down)
        self.parser = httptools.HttpResponseParser(self)
        self.headers = []
        self.body = []

    def on_message_complete(self) -> None:
        status = self.parser.get_status_code()
        head = b"HTTP/1.1 %d X\r\n%s\r\n" % (status, b"".join(self.headers))
        self.down.transport.write(head + b"".join(self.body))
        self.headers.clear()
        self.body.clear()


class _ParsingDown(_Reparsing, _Down):
    """:class:`_Down`, parsing each request (``httptools``) and writing it again at once."""

    up_protocol = _ParsingUp

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.headers = []
        self.body = []

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_message_complete(self) -> None:
        method = self.parser.get_method()
        data = b"%s %s HTTP/1.1\r\n%s\r\n" % (method, self.url, b"".join(self.headers))
        data += b"".join(self.body)
        self.url = b""
        self.headers.clear()
        self.body.clear()
        if self.up is None:
            self.pending.append(data)
        else:
            self.up.transport.write(data)


def run_relay(up_port: int, fd: int, *, parse: bool = False) -> None:
    """Relay between each client connection (on the listening socket ``fd``) and its own
    upstream connection: bytes as they come, or (``parse``) every request and answer
    parsed with ``httptools``, as the emulator does, and written again in one ``write``:
    the least an HTTP-aware hop can do."""
    import uvloop

    down = _ParsingDown if parse else _Down

    async def main() -> None:
        sock = socket.socket(fileno=fd)
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: down(up_port), sock=sock)
        await server.serve_forever()

    uvloop.run(main())


def haproxy_config(up_port: int, fd: int) -> str:
    """HTTP mode, keep-alive both sides, one thread, no logs; it serves the listening
    socket ``fd`` it inherits."""
    return f"""global
  nbthread 1
defaults
  mode http
  timeout connect 5s
  timeout client 60s
  timeout server 60s
  option http-keep-alive
frontend front
  bind fd@{fd}
  default_backend triton
backend triton
  http-reuse always
  server t 127.0.0.1:{up_port}
"""


# -- the warm path's Python, in-process (``overhead.py --path-cost``) --------------------
class _FakeTransport:
    """Keeps what is written; reads nothing (the path's own work, no system calls)."""

    def __init__(self) -> None:
        self.out: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.out.append(data)

    def close(self) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def path_cost(calls: int = 20_000) -> None:
    """One warm InvokeEndpoint through the emulator's HTTP server, invocation path and
    upstream client, with fake sockets on both sides and Triton's answer fed back at
    once: the Python the emulator runs per warm call (time on this core, bytecodes and
    Python-level calls counted with ``sys.settrace``)."""

    async def run() -> None:
        from mmelocal.emulator import http_server
        from mmelocal.emulator.emulator import Emulator, EmulatorConfig
        from mmelocal.emulator.model_state import READY, ModelEntry
        from mmelocal.emulator.upstream import UpstreamConnection, UpstreamPool

        work = Path(tempfile.mkdtemp(prefix="mmelocal-path-cost-"))
        try:
            (work / "store").mkdir()
            emulator = Emulator(EmulatorConfig(store=str(work / "store"), cache_dir=work))
            target, inst = "tiny.tar.gz", emulator.instances[0]
            ready = asyncio.get_running_loop().create_future()
            ready.set_result(None)
            inst.state.up = True
            inst.state.models[target] = ModelEntry(
                target=target, key=target_key(target), state=READY, last_used_s=0.0, future=ready
            )
            emulator.check_target(target)
            inst.control.pool = UpstreamPool("http://127.0.0.1:9")
            up, down = _FakeTransport(), _FakeTransport()
            conn = UpstreamConnection()
            conn.connection_made(up)  # type: ignore[arg-type]
            inst.control.pool.give_back(conn)
            client = http_server._Protocol(http_server.FastFrontServer(emulator))
            client.connection_made(down)  # type: ignore[arg-type]
            body = json.dumps(request_json(np.arange(4, dtype=np.float32).reshape(1, 4))).encode()
            request = (
                b"POST /endpoints/bench/invocations HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n"
                b"Content-Type: application/json\r\nX-Amzn-SageMaker-Target-Model: %s\r\n"
                b"Accept: */*\r\nAccept-Encoding: gzip, deflate\r\nContent-Length: %d\r\n\r\n%s"
            ) % (target.encode(), len(body), body)
            out = b'{"model_name":"k","outputs":[{"name":"OUTPUT0","data":[0.0,2.0,4.0,6.0]}]}'
            answer = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            answer += b"Content-Length: %d\r\n\r\n%s" % (len(out), out)

            def one() -> None:
                client.data_received(request)
                conn.data_received(answer)

            for _ in range(200):
                one()
            if len(down.out) != 200 or not down.out[-1].startswith(b"HTTP/1.1 200 OK"):
                raise RuntimeError(f"the warm path did not answer: {down.out[-1:]!r}")
            best = []
            for _ in range(5):
                up.out.clear()
                down.out.clear()
                start = time.process_time()
                for _ in range(calls):
                    one()
                best.append((time.process_time() - start) / calls * 1e6)
            counts = {"opcode": 0, "call": 0}

            def trace(frame: Any, event: str, arg: Any) -> Any:
                counts[event] = counts.get(event, 0) + 1
                frame.f_trace_opcodes = True
                return trace

            sys.settrace(trace)
            for _ in range(100):
                one()
            sys.settrace(None)
            print(
                f"warm InvokeEndpoint, in-process: {min(best):.2f} us per call (best of 5 x "
                f"{calls}), {counts['opcode'] / 100:.0f} bytecodes in "
                f"{counts['call'] / 100 - 1:.0f} Python-level calls"
            )
            client.connection_lost(None)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    asyncio.run(run())


# -- processes and cores ------------------------------------------------------------------
def tree(pid: int) -> list[int]:
    """``pid`` and its descendants."""
    import psutil

    root = psutil.Process(pid)
    return [pid, *(p.pid for p in root.children(recursive=True))]


def cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds used so far by ``pids``."""
    import psutil

    total = 0.0
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


def pin(pids: list[int], cpus: set[int]) -> None:
    """Every thread of ``pids`` onto ``cpus``."""
    import psutil

    for pid in pids:
        try:
            threads = [t.id for t in psutil.Process(pid).threads()]
        except psutil.Error:
            continue
        for tid in threads:
            with contextlib.suppress(OSError):  # a thread that just exited
                os.sched_setaffinity(tid, cpus)


# -- measurement ----------------------------------------------------------------------------
@dataclass
class Arm:
    """One way to reach the model, and what its rounds measured."""

    name: str
    url: str
    pids: list[int] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    rps: list[float] = field(default_factory=list)
    #: CPU seconds of the arm's own hop process (``pids``), of Triton's process tree and
    #: of this client, over the arm's timed rounds
    cpu_s: float = 0.0
    triton_cpu_s: float = 0.0
    client_cpu_s: float = 0.0
    #: wall time of the timed rounds
    wall_s: float = 0.0

    def p(self, q: float) -> float:
        return percentile(self.latencies, q) * 1e3

    @property
    def mean_rps(self) -> float:
        return float(np.mean(self.rps))

    def us_per_request(self, cpu_s: float) -> float:
        return cpu_s / len(self.latencies) * 1e6

    @property
    def total_cpu_s(self) -> float:
        """CPU seconds of everything on the path: hop, Triton and client."""
        return self.cpu_s + self.triton_cpu_s + self.client_cpu_s

    @property
    def total_us(self) -> float:
        """CPU per request of everything on the path."""
        return self.us_per_request(self.total_cpu_s)

    @property
    def busy_cores(self) -> float:
        """How many cores the path kept busy on average."""
        return self.total_cpu_s / self.wall_s


def run_rounds(arms: list[Arm], triton: list[int], body, headers, clients, seconds, rounds):
    """Warm every arm, then ``rounds`` rounds of every arm, each round in another order
    (rotated: no arm always follows the same one), with the client's GC off while timing.
    Counts the CPU of each arm's hop, of Triton (``triton``: its process tree) and of the
    client while the arm is timed."""
    me = [os.getpid()]
    for arm in arms:  # warm every path and connection
        measure(arm.url, body, headers, clients, 0.5)
    for r in range(rounds):
        for arm in arms[r % len(arms) :] + arms[: r % len(arms)]:
            gc.collect()
            gc.disable()
            try:
                before = cpu_s(arm.pids), cpu_s(triton), cpu_s(me)
                lat, rps = measure(arm.url, body, headers, clients, seconds)
                arm.cpu_s += cpu_s(arm.pids) - before[0]
                arm.triton_cpu_s += cpu_s(triton) - before[1]
                arm.client_cpu_s += cpu_s(me) - before[2]
            finally:
                gc.enable()
            arm.latencies += lat
            arm.rps.append(rps)
            arm.wall_s += len(lat) / rps


class Setup:
    """The emulator (with its Triton) and the reference hops, as child processes."""

    def __init__(self, work: Path, store: Path, env: list[str] | None = None) -> None:
        self.procs: list[subprocess.Popen] = []
        self.work = work
        self.emu = ""  # known once it listens (start)
        self.serve_command = [sys.executable, "-m", "mmelocal", "serve", "--store", str(store)]
        self.serve_command += ["--memory-budget", "8GiB", "--cache-dir", str(work / "cache")]
        self.serve_command += [f"--env={item}" for item in env or []]
        self.proxies: dict[str, int] = {}
        self.ports: dict[str, int] = {}

    def _spawn(self, command: list[str], **kwargs) -> subprocess.Popen:
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, **kwargs)
        self.procs.append(proc)
        return proc

    def start(self, models: list[Model]) -> None:
        """Start the emulator, load the models once (cold), then start the reference hops in
        front of Triton."""
        # Triton outside a network namespace: direct and the reference hops reach it on
        # loopback, as the emulator's handed-over connections do; through the namespace's
        # bridge they would pay a user-space copy the emulator does not
        self.serve, self.emu = start_logging_server(
            self.serve_command, self.work / "serve.log", timeout_s=180, env={NETNS_ENV: "0"}
        )
        self.procs.append(self.serve)
        self.proxies["emulator"] = self.serve.pid
        wait_until_ready(
            lambda: http_ok(f"{self.emu}/ping"),
            timeout_s=180,
            url=self.emu,
            log_path=self.work / "serve.log",
            process=self.serve,
        )
        url = f"{self.emu}/endpoints/bench/invocations"
        for model in models:
            headers = mme_headers(model.target)
            request = urllib.request.Request(url, data=model.body, headers=headers)
            urllib.request.urlopen(request, timeout=120).read()
        with urllib.request.urlopen(f"{self.emu}/emulator/state") as r:
            inst = json.loads(r.read())["instances"][0]
        self.triton_port = int(inst["sagemaker_url"].rsplit(":", 1)[1])  # SageMaker front end
        self.triton_v2_port = int(inst["http_url"].rsplit(":", 1)[1])
        self.triton_pids = tree(inst["pid"])
        for hop, flag in (("relay", "--relay"), ("parse", "--parsing-relay")):
            self._hop(hop, lambda args, flag=flag: [sys.executable, __file__, flag, *args])
        if shutil.which("haproxy"):
            cfg = self.work / "haproxy.cfg"

            def haproxy(args: list[str]) -> list[str]:
                cfg.write_text(haproxy_config(self.triton_port, int(args[1])))
                return ["haproxy", "-f", str(cfg)]

            self._hop("haproxy", haproxy, stderr=subprocess.DEVNULL)
        else:
            print("haproxy not installed: its reference row is skipped (apt-get install haproxy)")
        for port in self.ports.values():
            wait_for_listener(f"http://127.0.0.1:{port}", grace_s=30)

    def _hop(self, name: str, command: Any, **popen: Any) -> None:
        """Start the hop ``name`` on a socket bound here (port 0) and handed over, so there
        is no port to race for; ``command([triton_port, fd])`` is its command line."""
        with bind_socket("127.0.0.1", 0) as sock:
            self.ports[name] = bound_port(sock)
            args = [str(self.triton_port), str(sock.fileno())]
            self.proxies[name] = self._spawn(command(args), pass_fds=[sock.fileno()], **popen).pid

    def place(self, placement: str, cpus: set[int]) -> None:
        """``split``: the proxies on the last core, clients and Triton on the others;
        ``shared``: everyone everywhere."""
        proxies = list(self.proxies.values())
        if placement == "split":
            proxy_cpu = {max(cpus)}
            pin([os.getpid(), *self.triton_pids], cpus - proxy_cpu)
            pin(proxies, proxy_cpu)
        else:
            pin([os.getpid(), *self.triton_pids, *proxies], cpus)

    def stop(self) -> None:
        stop_child(*self.procs[::-1])


def arms_for(
    setup: Setup, model: Model, route: str, hops: bool
) -> tuple[list[Arm], dict[str, str]]:
    """The arms of one table block (with the reference hops if ``hops``) and the request
    headers of the route."""
    name = model.target
    if route == "MME":
        path = f"/models/{target_key(name)}/invoke"
        emu_url = f"{setup.emu}/endpoints/bench/invocations"
        headers = mme_headers(name)
    else:
        path = f"/v2/models/{name}/infer"
        emu_url = f"{setup.emu}/v2/models/{name}/infer"
        headers = {"Content-Type": "application/json"}
    port = setup.triton_port if route == "MME" else setup.triton_v2_port
    arms = [Arm("direct", f"http://127.0.0.1:{port}{path}")]
    arms.append(Arm("emulator", emu_url, pids=[setup.serve.pid]))
    if route == "MME" and hops:
        for hop, port in setup.ports.items():
            arms.append(Arm(hop, f"http://127.0.0.1:{port}{path}", pids=[setup.proxies[hop]]))
    arms.append(Arm("again", arms[0].url))  # A/A: the run's noise floor
    return arms, headers


def versus(arm: Arm, direct: Arm) -> tuple[float, float, float]:
    """Added p50 and p99 (ms) and the throughput ratio of ``arm`` against ``direct``."""
    return arm.p(50) - direct.p(50), arm.p(99) - direct.p(99), arm.mean_rps / direct.mean_rps


def misses(arm: Arm, direct: Arm) -> list[str]:
    """The goal items ``arm`` misses against ``direct``."""
    out = []
    added50, added99, ratio = versus(arm, direct)
    if added50 > GOAL_P50_MS:
        out.append(f"+p50 {added50:.2f} ms")
    if added99 > GOAL_P99_MS:
        out.append(f"+p99 {added99:.2f} ms")
    if ratio < GOAL_RATIO:
        out.append(f"throughput {ratio:.2f}x")
    return out


def row(block: str, route: str, clients: int, arm: Arm, direct: Arm) -> str:
    added50, added99, ratio = versus(arm, direct)
    hop = f"{arm.us_per_request(arm.cpu_s):.0f}" if arm.pids else "-"
    return (
        f"{block:<16}{route:<6}{clients:>7}  {arm.name:<9}{arm.p(50):>8.3f}{arm.p(99):>8.3f}"
        f"{added50:>8.3f}{added99:>8.3f}{arm.mean_rps:>8.0f}{ratio:>7.2f}{hop:>6}"
        f"{arm.us_per_request(arm.triton_cpu_s):>7.0f}{arm.us_per_request(arm.client_cpu_s):>7.0f}"
        f"{arm.total_us / direct.total_us:>7.2f}"
    )


def against_relay(hops: list[Arm]) -> str:
    """Each hop's CPU per request against the bare relay's (measured in the same rounds)."""
    relay = next(arm for arm in hops if arm.name == "relay")
    base = relay.us_per_request(relay.cpu_s)
    parts = []
    for arm in hops:
        us = arm.us_per_request(arm.cpu_s)
        parts.append(f"{arm.name} {us:.0f} us {us / base:.2f}x")
    return ", ".join(parts)


CORES_BUSY = 0.7  # direct keeps at least this share of the cores busy: they are the limit


def cpu_bound(arm: Arm, direct: Arm, cores: int) -> str:
    """The arm's CPU per request against direct's and, when direct keeps the cores busy,
    the throughput ratio that CPU allows (if the arm kept them as busy)."""
    extra_triton = arm.us_per_request(arm.triton_cpu_s) - direct.us_per_request(direct.triton_cpu_s)
    text = (
        f"CPU/req {arm.us_per_request(arm.cpu_s):.0f} us hop {extra_triton:+.0f} us Triton: "
        f"{arm.total_us / direct.total_us:.2f}x direct's; direct keeps "
        f"{direct.busy_cores:.1f} of {cores} cores busy"
    )
    if direct.busy_cores < CORES_BUSY * cores:
        return text + " (the cores are not the limit)"
    return text + f", so this CPU allows at most {direct.total_us / arm.total_us:.2f}x"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="per round")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 16])
    parser.add_argument(
        "--placements", nargs="+", default=["shared", "split"], choices=["shared", "split"]
    )
    parser.add_argument(
        "--models",
        nargs="+",
        default=["minilm", "tiny", "tiny-5ms"],
        help="minilm (the demo's model), tiny (0.5 ms), tiny-Nms (waits N ms per execution "
        "without CPU, as for a GPU kernel, with dynamic batching)",
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        help="KEY=VALUE for mmelocal serve --env (repeatable), e.g. "
        "SAGEMAKER_TRITON_LOG_VERBOSE=0 to measure what SageMaker's verbose default costs",
    )
    parser.add_argument("--relay", type=int, nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--parsing-relay", type=int, nargs=2, help=argparse.SUPPRESS)
    parser.add_argument(
        "--path-cost",
        action="store_true",
        help="only the Python of one warm call, in-process on fake sockets (seconds)",
    )
    args = parser.parse_args()
    if args.relay:
        run_relay(*args.relay)
        return 0
    if args.parsing_relay:
        run_relay(*args.parsing_relay, parse=True)
        return 0
    if args.path_cost:
        path_cost()
        return 0
    cpus = os.sched_getaffinity(0)
    placements = list(args.placements)
    if "split" in placements and len(cpus) < 2:
        print("split placement skipped: one core only")
        placements.remove("split")

    labels = list(dict.fromkeys(args.models))
    bad = [label for label in labels if not MODEL_LABEL.fullmatch(label)]
    if bad:
        parser.error(f"unknown model(s) {', '.join(bad)}: use minilm, tiny or tiny-<N>ms")
    work = Path(tempfile.mkdtemp(prefix="mmelocal-overhead-"))
    store = work / "store"
    store.mkdir()
    try:
        models = [model_for(label, store) for label in labels]
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    setup = Setup(work, store, args.env)
    # the tiny model in every placement, with the reference hops; the others shared
    blocks = [(m, p) for m in models for p in placements if m.label == "tiny" or p == "shared"]
    try:
        setup.start(models)
        print(
            f"{'model place':<16}{'route':<6}{'clients':>7}  {'arm':<9}{'p50 ms':>8}"
            f"{'p99 ms':>8}{'+p50':>8}{'+p99':>8}{'req/s':>8}{'ratio':>7}"
            f"{'hop':>6}{'Triton':>7}{'client':>7}{'CPU x':>7}"
        )
        verdicts: dict[str, list[str]] = {}
        references: dict[str, list[str]] = {}
        hop_ratios: dict[str, list[str]] = {}
        for model, placement in blocks:
            block = f"{model.label} {placement}"
            setup.place(placement, cpus)
            hops = model.label == "tiny"
            for route in ("MME", "v2"):
                for clients in args.clients:
                    arms, headers = arms_for(setup, model, route, hops)
                    run_rounds(
                        arms,
                        setup.triton_pids,
                        model.body,
                        headers,
                        clients,
                        args.seconds,
                        args.rounds,
                    )
                    direct = arms[0]
                    for arm in arms:
                        print(row(block, route, clients, arm, direct), flush=True)
                    missed = misses(arms[1], direct)
                    aa50, aa99, aa_ratio = versus(arms[-1], direct)
                    paired = ""
                    if clients == 1:  # with more clients, alternation meets batching
                        pair50, pair99 = paired_added(
                            *measure_paired(
                                direct.url,
                                arms[1].url,
                                model.body,
                                headers,
                                clients,
                                args.seconds,
                                args.rounds,
                            )
                        )
                        print(
                            f"{block:<16}{route:<6}{clients:>7}  {'paired':<9}{'':>16}"
                            f"{pair50:>8.3f}{pair99:>8.3f}   (emulator and direct, alternating)",
                            flush=True,
                        )
                        paired = f"; paired {pair50:+.2f} / {pair99:+.2f} ms"
                    verdicts.setdefault(block, []).append(
                        f"{route} x{clients} "
                        + ("met" if not missed else "missed (" + ", ".join(missed) + ")")
                        + f" [A/A {aa50:+.2f} / {aa99:+.2f} ms, {aa_ratio:.2f}x{paired}]"
                        + (
                            f"\n      {cpu_bound(arms[1], direct, len(cpus))}"
                            if clients > 1 and placement == "shared"  # split: a core each
                            else ""
                        )
                    )
                    references.setdefault(block, []).extend(
                        f"{arm.name} x{clients} {arm.mean_rps / direct.mean_rps:.2f}x"
                        + (
                            f" ({cpu_bound(arm, direct, len(cpus))})"
                            if clients > 1 and placement == "shared"
                            else ""
                        )
                        for arm in arms[2:-1]
                    )
                    if hops and route == "MME":
                        hop_ratios.setdefault(block, []).append(
                            f"x{clients}: {against_relay(arms[1:-1])}"
                        )
            setup.place("shared", cpus)
        print(
            f"\ngoal: <= {GOAL_P50_MS:g} ms added at p50, <= {GOAL_P99_MS:g} ms added at p99, "
            f">= {GOAL_RATIO}x direct throughput"
        )
        print(
            "  [A/A: direct Triton measured twice, interleaved: +p50 / +p99, throughput "
            "ratio; differences of that size are the run's noise. paired (1 client): the "
            "emulator's +p50 / +p99 with the client alternating between it and direct, "
            "request by request, so slow drift of the machine cancels out. CPU/req: the "
            "hop's own CPU per request and what Triton spends beyond its direct figure; "
            "columns hop, Triton, client: us of CPU per request, CPU x: their sum against "
            "direct's]"
        )
        for block, lines in verdicts.items():
            print(f"  emulator, {block}:")
            for line in lines:
                print(f"    {line}")
        for block, lines in references.items():
            if lines:
                print(f"  reference hops ({block}, MME), throughput vs direct:")
                for line in lines:
                    print(f"    {line}")
        for block, lines in hop_ratios.items():
            goal = f"; goal for the emulator <= {GOAL_HOP_CPU}x" if "shared" in block else ""
            print(f"  hop CPU per request against the bare relay's ({block}, MME{goal}):")
            for line in lines:
                print(f"    {line}")
    finally:
        setup.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


MODEL_LABEL = re.compile(r"minilm|tiny|tiny-\d+(\.\d+)?ms")


def model_for(label: str, store: Path) -> Model:
    """The model named ``label`` (see ``MODEL_LABEL``), written into ``store``."""
    if label == "minilm":
        return minilm_model(store)
    if label == "tiny":
        return tiny_model(store, 0.0)
    return tiny_model(store, float(label[len("tiny-") : -len("ms")]))


if __name__ == "__main__":
    sys.exit(main())
