"""What running tritonserver in its own network namespace costs, against the same server
without one, measured in the same run (mmelocal.runtime.netns).

Same tiny Python-backend model (Triton answers in about half a millisecond: the worst
case for any hop), same payload, keep-alive clients, arms interleaved round by round so
each sees the same machine. Arms:

* ``direct``: tritonserver without a namespace, v2 ``infer`` on 127.0.0.1 (the reference);
* ``handover``: tritonserver in its namespace, connections handed over the bridge's Unix
  socket (what the emulator's keep-alive pools do): bytes go straight to Triton;
* ``bridge-tcp``: the same server through the bridge's TCP listener on 127.0.0.1 (what
  tritonclient, perf_analyzer and readiness checks pay: one user-space copy each way);
* ``emulator``: ``mmelocal serve`` with ``MMELOCAL_NETNS=0`` (InvokeEndpoint), and
  ``emulator-netns``: ``mmelocal serve`` as shipped (namespace on);
* ``direct-again``: ``direct`` measured a second time, interleaved (A/A): how far two
  measurements of the same thing differ in this run, the noise floor of every ratio.

Prints p50/p99 latency and requests/s per arm and concurrency, each against ``direct``,
and ``emulator-netns`` against ``emulator``: what the namespace adds to the emulator.
Run: ``.venv/bin/python benchmarks/netns_bridge.py [--seconds 2] [--rounds 3]
[--clients 1 8]`` (about 2 minutes).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path

import numpy as np

from mmelocal.emulator.server import new_event_loop
from mmelocal.runtime.local import LocalLauncher
from mmelocal.runtime.netns import connect_through, isolation_refused
from mmelocal.runtime.readiness import start_logging_server, stop_child
from mmelocal.runtime.server_config import ServerConfig
from mmelocal.testing.tiny_model import request_json, write_model, write_tarball

Opener = Callable[[], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]
BODY = json.dumps(request_json(np.ones((1, 4), dtype=np.float32))).encode()


def request(path: str, *headers: str) -> bytes:
    head = [f"POST {path} HTTP/1.1", "Host: x", "Content-Type: application/json", *headers]
    head.append(f"Content-Length: {len(BODY)}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + BODY


async def one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(data)
    head = await reader.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"unexpected answer: {head[:80]!r}")
    length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
    await reader.readexactly(length)


async def measure(
    opener: Opener, data: bytes, clients: int, seconds: float
) -> tuple[list[float], int]:
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        reader, writer = await opener()
        await one(reader, writer, data)  # connection made and warm before timing
        while (t0 := time.perf_counter()) < deadline:
            await one(reader, writer, data)
            latencies.append(time.perf_counter() - t0)
        writer.close()

    await asyncio.gather(*(worker() for _ in range(clients)))
    return latencies, len(latencies)


def tcp(port: int) -> Opener:
    return lambda: asyncio.open_connection("127.0.0.1", port)


def handed_over(control: str, port: int) -> Opener:
    async def open_() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        loop = asyncio.get_running_loop()
        sock = await loop.run_in_executor(None, connect_through, control, port)
        return await asyncio.open_connection(sock=sock)

    return open_


def start_emulator(store: Path, netns: bool) -> tuple[subprocess.Popen[bytes], int]:
    """``mmelocal serve`` on port 0 (the port it binds, read back from its log)."""
    process, url = start_logging_server(
        [sys.executable, "-m", "mmelocal", "serve", "--store", str(store)],
        store.parent / f"serve-netns-{int(netns)}.log",
        timeout_s=180,
        env={"MMELOCAL_NETNS": "1" if netns else "0"},
    )
    port = int(url.rsplit(":", 1)[1])
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=2) as answer:
                ready = answer.status == 200
        except OSError:
            ready = False
        if ready:  # the first call loads the model: keep it out of the timings
            load = urllib.request.Request(
                f"http://127.0.0.1:{port}/endpoints/local/invocations",
                data=BODY,
                headers={"X-Amzn-SageMaker-Target-Model": "tiny.tar.gz"},
            )
            with urllib.request.urlopen(load, timeout=120) as answer:
                if answer.status == 200:
                    return process, port
        time.sleep(0.2)
    process.kill()
    raise RuntimeError("mmelocal serve did not start within 180 s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8])
    args = parser.parse_args()
    refused = isolation_refused()
    if refused is not None:
        print(f"network namespaces are refused here ({refused}): nothing to measure")
        return 1
    work = Path(tempfile.mkdtemp(prefix="mmelocal-netns-bench-"))
    repo, store = work / "repo", work / "store"
    store.mkdir()
    write_model(repo)
    write_tarball(store / "tiny.tar.gz")
    config = ServerConfig(model_repository=repo, load_models=("tiny",), sagemaker=True)
    plain = LocalLauncher(config, isolate_network=False)
    isolated = LocalLauncher(config, isolate_network=True)
    emulators: list[subprocess.Popen[bytes]] = []
    try:
        plain.start()
        isolated.start()
        assert isolated.isolated and isolated.endpoints.bridge is not None
        infer = request("/v2/models/tiny/infer")
        invoke = request(
            "/endpoints/local/invocations", "X-Amzn-SageMaker-Target-Model: tiny.tar.gz"
        )
        emulator, emulator_port = start_emulator(store, netns=False)
        emulators.append(emulator)
        emulator_ns, emulator_ns_port = start_emulator(store, netns=True)
        emulators.append(emulator_ns)
        arms: dict[str, tuple[Opener, bytes]] = {
            "direct": (tcp(plain.config.http_port), infer),
            "handover": (handed_over(isolated.endpoints.bridge, isolated.config.http_port), infer),
            "bridge-tcp": (tcp(isolated.config.http_port), infer),
            "emulator": (tcp(emulator_port), invoke),
            "emulator-netns": (tcp(emulator_ns_port), invoke),
            "direct-again": (tcp(plain.config.http_port), infer),
        }
        loop = new_event_loop()
        table: dict[tuple[str, int], tuple[list[float], int]] = {}
        for clients in args.clients:
            for _round in range(args.rounds):
                for name, (opener, data) in arms.items():
                    lat, count = loop.run_until_complete(
                        measure(opener, data, clients, args.seconds)
                    )
                    old = table.get((name, clients), ([], 0))
                    table[(name, clients)] = (old[0] + lat, old[1] + count)
        loop.close()
    finally:
        stop_child(*emulators)
        plain.stop()
        isolated.stop()
    total_s = args.seconds * args.rounds
    print(f"tiny model, {args.rounds} interleaved rounds of {args.seconds:g} s per arm\n")
    print(
        f"{'arm':<16}{'clients':>8}{'p50 ms':>9}{'p99 ms':>9}{'req/s':>9}{'p50 x':>8}{'req/s x':>9}"
    )
    for clients in args.clients:
        ref_lat, ref_n = table[("direct", clients)]
        ref_p50 = statistics.median(ref_lat)
        for name in arms:
            lat, n = table[(name, clients)]
            p50 = statistics.median(lat)
            p99 = float(np.percentile(lat, 99))
            print(
                f"{name:<16}{clients:>8}{p50 * 1e3:>9.3f}{p99 * 1e3:>9.3f}{n / total_s:>9.0f}"
                f"{p50 / ref_p50:>8.2f}{n / ref_n:>9.2f}"
            )
        plain_lat, plain_n = table[("emulator", clients)]
        ns_lat, ns_n = table[("emulator-netns", clients)]
        added_ms = (statistics.median(ns_lat) - statistics.median(plain_lat)) * 1e3
        print(
            f"{'':<16}{clients:>8}  emulator-netns vs emulator: p50 {added_ms:+.3f} ms, "
            f"throughput x{ns_n / plain_n:.2f}\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
