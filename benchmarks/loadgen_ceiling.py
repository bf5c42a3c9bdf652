"""Is the load generator the bottleneck? Its ceiling against a trivial server, in the same run.

``mmelocal loadtest`` (Locust in a child process, FastHttpUser) is pointed, with the same
user steps and payload, at:

1. a trivial local server (aiohttp in its own process, answers ``{}`` at once) - what the
   load generator can reach at most on this machine;
2. the MME emulator (real tritonserver, 10 copies of a tiny Python-backend model, warm).

Rounds alternate (trivial, emulator, trivial, emulator, ...) so both see the same machine.
If the emulator's rate is well below the trivial server's, the generator had headroom and
the emulator's numbers measure the emulator. Run:
``.venv/bin/python benchmarks/loadgen_ceiling.py [--users 16,64] [--step-seconds 6] [--rounds 2]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

from mmelocal.bench.loadtest.runner import (
    LoadTestConfig,
    LoadTestResult,
    expand_targets,
    run_loadtest,
)
from mmelocal.bench.sweep.runner import users_shape
from mmelocal.emulator.server import bind_socket, bound_port

COPIES = 10

#: serves the listening socket whose fd is its argument (bound by the parent on port 0)
TRIVIAL_SERVER = """
import socket
import sys
from aiohttp import web

async def invocations(request):
    await request.read()
    return web.Response(body=b"{}", content_type="application/json")

app = web.Application()
app.router.add_post("/endpoints/{name}/invocations", invocations)
sock = socket.socket(fileno=int(sys.argv[1]))
web.run_app(app, sock=sock, print=None, access_log=None)
"""


def _wait_http(url: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            urllib.request.urlopen(url, timeout=1).read()
            return
        except urllib.error.HTTPError:
            return  # it answers
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _run(endpoint: str, payload: bytes, users: tuple[int, ...], step_s: float) -> LoadTestResult:
    config = LoadTestConfig(
        endpoint=endpoint,
        targets=expand_targets("model-{i}.tar.gz", COPIES),
        payload=payload,
        shape=users_shape(users, step_s=step_s),
        seed=1,
    )
    return run_loadtest(config)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", default="16,64")
    parser.add_argument("--step-seconds", type=float, default=6.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    users = tuple(int(u) for u in args.users.split(","))

    from mmelocal.builder.package import package_copies
    from mmelocal.emulator.emulator import EmulatorConfig
    from mmelocal.emulator.server import EmulatorServer
    from mmelocal.testing.tiny_model import request_json, write_tarball

    payload = json.dumps(request_json(np.ones((1, 4), dtype=np.float32))).encode()
    with tempfile.TemporaryDirectory(prefix="loadgen-ceiling-") as tmp:
        root = Path(tmp)
        package_copies(write_tarball(root / "tiny.tar.gz"), root / "store", copies=COPIES)
        with bind_socket("127.0.0.1", 0) as sock:  # handed over: no port to race for
            port = bound_port(sock)
            trivial = subprocess.Popen(
                [sys.executable, "-c", TRIVIAL_SERVER, str(sock.fileno())], pass_fds=[sock.fileno()]
            )
        try:
            _wait_http(f"http://127.0.0.1:{port}/")
            config = EmulatorConfig(
                store=str(root / "store"), cache_dir=root / "cache", memory_budget_bytes=2 << 30
            )
            with EmulatorServer(config) as emulator:
                emu_endpoint = f"{emulator.url}/endpoints/local"
                warm = LoadTestConfig(
                    endpoint=emu_endpoint,
                    targets=expand_targets("model-{i}.tar.gz", COPIES),
                    payload=payload,
                    shape=users_shape((1,)),
                )
                from mmelocal.bench.loadtest.runner import prewarm

                prewarm(warm)
                results: dict[str, list[LoadTestResult]] = {"trivial": [], "emulator": []}
                for _ in range(args.rounds):
                    results["trivial"].append(
                        _run(
                            f"http://127.0.0.1:{port}/endpoints/local",
                            payload,
                            users,
                            args.step_seconds,
                        )
                    )
                    results["emulator"].append(
                        _run(emu_endpoint, payload, users, args.step_seconds)
                    )
        finally:
            trivial.terminate()
            trivial.wait(timeout=10)
    _print(results, users)
    return 0


def _print(results: dict[str, list[LoadTestResult]], users: tuple[int, ...]) -> None:
    print(
        f"load generator: Locust FastHttpUser in one child process; {COPIES} targets; "
        f"users per step {users}"
    )
    print(
        f"{'server':<10} {'users':>6} {'req/s (median)':>15} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'failed':>7} {'loadgen CPU %':>14}"
    )
    peaks: dict[str, float] = {}
    for server, runs in results.items():
        for index, count in enumerate(users):
            steps = [run.steps[index] for run in runs]
            rps = statistics.median(s.throughput_rps for s in steps)
            p50 = statistics.median(s.p50_latency_ms or 0.0 for s in steps)
            p99 = statistics.median(s.p99_latency_ms or 0.0 for s in steps)
            failed = sum(s.failures for s in steps)
            cpu = statistics.median(run.loadgen_cpu_percent for run in runs)
            peaks[server] = max(peaks.get(server, 0.0), rps)
            print(
                f"{server:<10} {count:>6} {rps:>15,.0f} {p50:>8.2f} {p99:>8.2f} "
                f"{failed:>7} {cpu:>20.0f}"
            )
    ratio = peaks["emulator"] / peaks["trivial"] if peaks["trivial"] else float("nan")
    print(
        f"peak rate: trivial server {peaks['trivial']:,.0f} req/s, emulator "
        f"{peaks['emulator']:,.0f} req/s -> emulator/ceiling = {ratio:.2f}"
    )
    verdict = (
        "the generator had headroom: the emulator's rate is its own"
        if ratio < 0.8
        else "the emulator's rate is close to the generator's ceiling: numbers may be "
        "generator-bound (use more cores or several workers)"
    )
    print(verdict)


if __name__ == "__main__":
    sys.exit(main())
