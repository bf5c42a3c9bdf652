"""Where a cold call's time goes, and the emulator's own share of it.

One cold InvokeEndpoint on the packaged MiniLM (TorchScript, ~90 MB; built once into
mmelocal's cache folder, as ``mmelocal demo`` does) is split into: download (store to
cache), extraction (safe_extract), the Python-backend derivation, Triton's load, the
first inference, and the rest, which is the emulator's own share (routing, memory probe
readings, eviction planning, HTTP). Extraction is compared with ``tar -xzf`` of the same
file in the same run (best of 3 each).

Goal: own share <= 20 ms; extraction <= 1.2x tar.
Run: ``.venv/bin/python benchmarks/cold_start.py [--model tiny]``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mmelocal.builder.package import package_copies
from mmelocal.builder.tarball import safe_extract
from mmelocal.emulator.emulator import EmulatorConfig
from mmelocal.emulator.metrics import parse_prometheus
from mmelocal.emulator.server import EmulatorServer


def minilm_tarball(work: Path) -> tuple[Path, bytes]:
    """MiniLM built once (reused from the demo's folder) and one packaged copy."""
    from mmelocal.cli.demo import build_minilm, demo_request
    from mmelocal.runtime.local import cache_dir

    model_dir = build_minilm(cache_dir() / "demo")
    body, _ = demo_request(model_dir)
    return package_copies(model_dir, work / "store", copies=1)[0], body


def tiny_tarball(work: Path) -> tuple[Path, bytes]:
    """The tiny numpy model (no torch): shows the fixed costs alone."""
    import numpy as np

    from mmelocal.testing.tiny_model import request_json, write_tarball

    (work / "store").mkdir(parents=True, exist_ok=True)
    path = write_tarball(work / "store" / "model-0.tar.gz")
    body = json.dumps(request_json(np.ones((1, 4), dtype=np.float32))).encode()
    return path, body


def post(url: str, target: str, body: bytes) -> tuple[int, float, bytes]:
    host, port = url.split("://")[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=600)
    headers = {"Content-Type": "application/json", "X-Amzn-SageMaker-Target-Model": target}
    t0 = time.perf_counter()
    conn.request("POST", "/endpoints/bench/invocations", body=body, headers=headers)
    response = conn.getresponse()
    data = response.read()
    elapsed = time.perf_counter() - t0
    conn.close()
    return response.status, elapsed, data


def metric_sum(url: str, name: str) -> float:
    host, port = url.split("://")[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    conn.request("GET", "/metrics")
    parsed = parse_prometheus(conn.getresponse().read().decode())
    conn.close()
    return sum(v for k, v in parsed.items() if k.startswith(f"{name}_sum"))


def best_of(n: int, fn) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["minilm", "tiny"], default="minilm")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mmelocal-cold-"))
    try:
        tarball, body = (minilm_tarball if args.model == "minilm" else tiny_tarball)(work)
        target = tarball.name
        config = EmulatorConfig(store=str(tarball.parent), cache_dir=work / "cache")
        with EmulatorServer(config) as server:
            status, total_s, answer = post(server.url, target, body)
            if status != 200:
                raise SystemExit(f"cold call failed: {status} {answer[:300]!r}")
            first_inference_s = metric_sum(server.url, "ModelLatency") / 1e6
            state = server.call(_state(server))
            warm = [post(server.url, target, body)[1] for _ in range(10)]
        download = next(e for e in state["events"] if e["kind"] == "download")["detail"]
        load_s = next(e for e in state["events"] if e["kind"] == "load")["duration_ms"] / 1e3
        parts = {
            "download (store -> cache)": download["download_s"],
            "extraction (safe_extract)": download["extract_s"],
            "Triton load (POST /models)": load_s,
            "first inference (Triton)": first_inference_s,
        }
        derivation_s = download["prepare_s"]
        own_s = total_s - sum(parts.values())  # includes the Python-backend derivation

        def ours() -> None:
            dest = work / "x-ours"
            shutil.rmtree(dest, ignore_errors=True)
            safe_extract(tarball, dest)

        def tar() -> None:
            dest = work / "x-tar"
            shutil.rmtree(dest, ignore_errors=True)
            dest.mkdir()
            subprocess.run(["tar", "-xzf", str(tarball), "-C", str(dest)], check=True)

        ours_s, tar_s = best_of(3, ours), best_of(3, tar)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(
        f"cold call to {target} ({tarball.stat().st_size / 2**20:.1f} MiB compressed)"
        if tarball.exists()
        else f"cold call to {target}"
    )
    for name, seconds in parts.items():
        print(f"  {name:<30}{seconds * 1e3:>10.1f} ms")
    print(f"  {'emulator own share':<30}{own_s * 1e3:>10.1f} ms   (goal <= 20 ms)")
    print(f"    {'of which backend derivation':<28}{derivation_s * 1e3:>10.1f} ms")
    print(f"  {'total (client measured)':<30}{total_s * 1e3:>10.1f} ms")
    print(f"  warm call p50 {sorted(warm)[len(warm) // 2] * 1e3:.1f} ms")
    ratio = ours_s / tar_s
    print(
        f"extraction: safe_extract {ours_s * 1e3:.0f} ms vs tar -xzf {tar_s * 1e3:.0f} ms "
        f"= {ratio:.2f}x (goal <= 1.2x)"
    )
    met = own_s <= 0.020 and ratio <= 1.2
    print("goal:", "met" if met else "NOT met")
    return 0


async def _state(server: EmulatorServer) -> dict:  # type: ignore[type-arg]
    return server.emulator.state()


if __name__ == "__main__":
    sys.exit(main())
