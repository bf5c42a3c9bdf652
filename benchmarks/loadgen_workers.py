"""How far one Locust worker goes, and what a second one adds, against a trivial server.

``mmelocal loadtest`` with ``--workers 1`` (today's single process) and ``--workers 2``
(Locust's distributed mode: a master and two worker processes), in raw HTTP mode
(FastHttpUser) and in boto3 mode (``InvokeEndpoint`` signed with SigV4, as a real endpoint
needs), all against the same trivial server (aiohttp in its own process, answers ``{}`` at
once). Arms are interleaved round by round so each sees the same machine; the script prints
requests/s, each worker's CPU (share of one core) and the server's, the 2-worker/1-worker
ratio, and from the 1-worker rates how many workers the published stage shape (200 users)
needs at the published throughputs. Run:
``.venv/bin/python benchmarks/loadgen_workers.py [--users 32] [--seconds 8] [--rounds 2]
[--workers 1,2,4] [--server-processes N]`` (more server processes share the port with
SO_REUSEPORT, so a many-core machine measures the workers, not the server).
"""

from __future__ import annotations

import argparse
import math
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request

import psutil

from mmelocal.bench.loadtest.runner import (
    LoadTestConfig,
    LoadTestResult,
    expand_targets,
    run_loadtest,
)
from mmelocal.bench.loadtest.shape import shape_from_stages
from mmelocal.bench.loadtest.workers import TARGET_CPU_PERCENT, LoadGenerators, usable_cpus

TRIVIAL_SERVER = """
import sys
from aiohttp import web

async def invocations(request):
    await request.read()
    return web.Response(body=b"{}", content_type="application/json")

app = web.Application()
app.router.add_post("/endpoints/{name}/invocations", invocations)
web.run_app(
    app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None, reuse_port=True
)
"""

#: the published figure the issue quotes: one instance, BERT compiled with TensorRT
#: (AWS ML blog "Achieve high performance at scale ... multi-model endpoints with GPU")
PUBLISHED_RPS_PER_INSTANCE = 250.0
PUBLISHED_USERS = 200
INSTANCES = (1, 2, 4, 8)


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


def _run(
    port: int,
    mode: str,
    workers: int,
    users: int,
    seconds: float,
    servers: list[psutil.Process],
) -> tuple[LoadTestResult, float]:
    endpoint = f"http://127.0.0.1:{port}/endpoints/x" if mode == "raw" else "x"
    config = LoadTestConfig(
        endpoint=endpoint,
        targets=expand_targets("model-{i}.tar.gz", 10),
        payload=b"{}",
        shape=shape_from_stages([{"users": users, "spawn_rate": users, "duration_s": seconds}]),
        seed=1,
        generators=LoadGenerators(workers=workers),
    )
    before = [s.cpu_times() for s in servers]
    t0 = time.perf_counter()
    result = run_loadtest(config)
    wall = time.perf_counter() - t0
    after = [s.cpu_times() for s in servers]
    cpu_s = sum(
        (a.user - b.user) + (a.system - b.system) for a, b in zip(after, before, strict=True)
    )
    return result, 100.0 * cpu_s / wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workers", default="1,2", help="worker counts to compare")
    parser.add_argument(
        "--server-processes", type=int, default=1, help="trivial server processes (SO_REUSEPORT)"
    )
    args = parser.parse_args()
    counts = tuple(int(n) for n in args.workers.split(","))

    # the port, bound here with SO_REUSEPORT (not listening: no connection comes to it) and
    # held while the trivial servers run: they join it, and no other process can take it
    # between its choice and their bind
    reserved = socket.socket()
    reserved.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    reserved.bind(("127.0.0.1", 0))
    port = reserved.getsockname()[1]
    # boto3 signs with these (SigV4) and sends to the trivial server
    os.environ.update(
        {
            "AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME": f"http://127.0.0.1:{port}",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
        }
    )
    arms = [(mode, workers) for mode in ("raw", "boto3") for workers in counts]
    runs: dict[tuple[str, int], list[tuple[LoadTestResult, float]]] = {arm: [] for arm in arms}
    trivial = [
        subprocess.Popen([sys.executable, "-c", TRIVIAL_SERVER, str(port)])
        for _ in range(args.server_processes)
    ]
    try:
        _wait_http(f"http://127.0.0.1:{port}/")
        servers = [psutil.Process(p.pid) for p in trivial]
        for round_ in range(args.rounds):
            order = arms if round_ % 2 == 0 else arms[::-1]
            for mode, workers in order:
                runs[(mode, workers)].append(
                    _run(port, mode, workers, args.users, args.seconds, servers)
                )
    finally:
        for process in trivial:
            process.terminate()
            process.wait(timeout=10)
        reserved.close()
    _print(runs, args)
    return 0


def _print(
    runs: dict[tuple[str, int], list[tuple[LoadTestResult, float]]], args: argparse.Namespace
) -> None:
    print(
        f"machine: {usable_cpus()} usable CPU(s); trivial server ({args.server_processes} "
        "process(es)) on the same machine; "
        f"{args.users} users, one {args.seconds:g} s stage, {args.rounds} round(s), "
        f"medians over rounds; load average after: {os.getloadavg()[0]:.1f} (other work "
        "shares the cores); server CPU over the whole call, process starts included"
    )
    print(
        f"{'mode':<6} {'workers':>7} {'req/s':>9} {'worker CPU % (each)':>22} "
        f"{'server CPU %':>13} {'failed':>7}"
    )
    rates: dict[tuple[str, int], float] = {}
    per_core: dict[str, float] = {}
    for (mode, workers), results in runs.items():
        rps = statistics.median(r.steps[0].throughput_rps for r, _ in results)
        rates[(mode, workers)] = rps
        each = [
            statistics.median((r.worker_details[i].cpu_percent or 0.0) for r, _ in results)
            for i in range(workers)
        ]
        server = statistics.median(s for _, s in results)
        failed = sum(r.failures for r, _ in results)
        cpus = " / ".join(f"{c:.0f}" for c in each)
        if workers == 1 and each[0] > 0:
            per_core[mode] = rps / (each[0] / 100.0)
        print(f"{mode:<6} {workers:>7} {rps:>9,.0f} {cpus:>22} {server:>13.0f} {failed:>7}")
    counts = sorted({workers for _, workers in runs})
    for mode in ("raw", "boto3"):
        one = rates[(mode, counts[0])]
        ratios = ", ".join(f"{n} workers {rates[(mode, n)] / one:.2f}x" for n in counts[1:])
        print(
            f"{mode}: against {counts[0]} worker(s): {ratios}; one worker: "
            f"{per_core.get(mode, 0.0):,.0f} requests per CPU-second"
        )
    print(
        f"\nworkers the published shape ({PUBLISHED_USERS} users) needs, each kept under "
        f"{TARGET_CPU_PERCENT:.0f}% of a core (at one worker's requests per CPU-second):"
    )
    print(f"{'instances':>9} {'req/s':>7} {'raw HTTP':>9} {'boto3':>7}")
    for instances in INSTANCES:
        target = PUBLISHED_RPS_PER_INSTANCE * instances
        need = {
            mode: math.ceil(target / (per_core[mode] * TARGET_CPU_PERCENT / 100.0))
            for mode in ("raw", "boto3")
        }
        print(f"{instances:>9} {target:>7,.0f} {need['raw']:>9} {need['boto3']:>7}")


if __name__ == "__main__":
    sys.exit(main())
