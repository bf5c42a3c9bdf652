"""What the MME emulator adds on top of Triton, measured against Triton in the same run.

The same model (a tiny Python-backend model, warm) and the same payload are sent
directly to Triton and through the emulator (a separate ``mmelocal serve`` process), at
1 and 16 concurrent clients, alternating direct and emulated rounds so both see the same
machine. Two paths are compared:

* MME: Triton's ``POST /models/KEY/invoke`` vs the emulator's ``InvokeEndpoint`` route;
* v2: Triton's ``/v2/models/T/infer`` vs the emulator's ``/v2/models/T/infer``.

Goal: <= 1 ms added at p50, <= 3 ms at p99, throughput >= 0.9x direct.
Run: ``.venv/bin/python benchmarks/overhead.py [--seconds 3] [--rounds 2]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import aiohttp
import numpy as np

from mmelocal.emulator.cache import target_key
from mmelocal.runtime.config import pick_free_port
from mmelocal.testing.tiny_model import request_json, write_tarball

TARGET = "model-0.tar.gz"


async def _run(url: str, body: bytes, headers: dict[str, str], clients: int, seconds: float):
    latencies: list[float] = []
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        deadline = time.perf_counter() + seconds

        async def worker() -> None:
            while time.perf_counter() < deadline:
                t0 = time.perf_counter()
                async with session.post(url, data=body, headers=headers) as resp:
                    await resp.read()
                    if resp.status != 200:
                        raise RuntimeError(f"{url} answered {resp.status}")
                latencies.append(time.perf_counter() - t0)

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        elapsed = time.perf_counter() - start
    return latencies, len(latencies) / elapsed


def measure(url, body, headers, clients, seconds):
    """Latencies (s) and throughput (req/s) of one round."""
    return asyncio.run(_run(url, body, headers, clients, seconds))


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


def wait_ping(url: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/ping", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"emulator at {url} did not answer /ping within {timeout_s}s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 16])
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="mmelocal-overhead-"))
    store = work / "store"
    store.mkdir()
    write_tarball(store / TARGET, scale=2.0)
    port = pick_free_port()
    emu = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mmelocal",
            "serve",
            "--store",
            str(store),
            "--port",
            str(port),
            "--memory-budget",
            "2GiB",
            "--cache-dir",
            str(work / "cache"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(work / "serve.log", "wb"),  # noqa: SIM115
        env={**os.environ},
    )
    try:
        wait_ping(emu)
        body = json.dumps(request_json(np.arange(4, dtype=np.float32).reshape(1, 4))).encode()
        json_headers = {"Content-Type": "application/json", "X-Amzn-SageMaker-Target-Model": TARGET}
        req = urllib.request.Request(
            f"{emu}/endpoints/bench/invocations", data=body, headers=json_headers
        )
        urllib.request.urlopen(req, timeout=120).read()  # cold load once
        with urllib.request.urlopen(f"{emu}/emulator/state") as r:
            inst = json.loads(r.read())["instances"][0]
        pairs = {
            "MME": (
                f"{inst['sagemaker_url']}/models/{target_key(TARGET)}/invoke",
                f"{emu}/endpoints/bench/invocations",
                json_headers,
            ),
            "v2": (
                f"{inst['http_url']}/v2/models/{TARGET}/infer",
                f"{emu}/v2/models/{TARGET}/infer",
                {"Content-Type": "application/json"},
            ),
        }
        print(
            f"{'path':<5}{'clients':>8}{'direct p50':>12}{'p99':>8}{'emu p50':>10}{'p99':>8}"
            f"{'+p50 ms':>9}{'+p99 ms':>9}{'direct rps':>11}{'emu rps':>9}{'ratio':>7}"
        )
        ok = True
        cpu_rows: list[str] = []
        for name, (direct_url, emu_url, headers) in pairs.items():
            for clients in args.clients:
                measure(direct_url, body, headers, clients, 0.5)  # warm both paths
                measure(emu_url, body, headers, clients, 0.5)
                d_lat: list[float] = []
                e_lat: list[float] = []
                d_rps: list[float] = []
                e_rps: list[float] = []
                emu_cpu_s = triton_cpu_s = 0.0
                for _ in range(args.rounds):
                    lat, rps = measure(direct_url, body, headers, clients, args.seconds)
                    d_lat += lat
                    d_rps.append(rps)
                    e0, t0 = cpu_s([proc.pid]), cpu_s(tree(inst["pid"]))
                    lat, rps = measure(emu_url, body, headers, clients, args.seconds)
                    emu_cpu_s += cpu_s([proc.pid]) - e0
                    triton_cpu_s += cpu_s(tree(inst["pid"])) - t0
                    e_lat += lat
                    e_rps.append(rps)
                cpu_rows.append(
                    f"{name:<5}{clients:>8}  emulator {emu_cpu_s / len(e_lat) * 1e6:6.0f} us"
                    f"  Triton {triton_cpu_s / len(e_lat) * 1e6:6.0f} us  (CPU per request)"
                )
                dp50, dp99 = np.percentile(d_lat, [50, 99]) * 1e3
                ep50, ep99 = np.percentile(e_lat, [50, 99]) * 1e3
                ratio = float(np.mean(e_rps) / np.mean(d_rps))
                ok &= (ep50 - dp50) <= 1.0 and (ep99 - dp99) <= 3.0 and ratio >= 0.9
                print(
                    f"{name:<5}{clients:>8}{dp50:>12.3f}{dp99:>8.3f}{ep50:>10.3f}{ep99:>8.3f}"
                    f"{ep50 - dp50:>9.3f}{ep99 - dp99:>9.3f}{np.mean(d_rps):>11.0f}"
                    f"{np.mean(e_rps):>9.0f}{ratio:>7.2f}"
                )
        print("\n".join(cpu_rows))
        print(
            "goal (<= 1 ms p50, <= 3 ms p99 added, >= 0.9x throughput):", "met" if ok else "NOT met"
        )
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
