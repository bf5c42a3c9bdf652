"""``mmelocal demo``: the whole product in one command, on the packaged MiniLM.

Build MiniLM into a Triton model (TorchScript, verified), package copies as MME tarballs,
start the emulator on the local tritonserver, measure one copy's footprint, set a memory
limit that fits only a few copies, then call random copies through boto3's real
``sagemaker-runtime`` client and show what SageMaker would have done: cache hits, loads,
evictions and cold vs warm latency.
"""

from __future__ import annotations

import json
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
from rich.live import Live
from rich.table import Table

from mmelocal.cli._output import console

MODEL = "minilm"
HOT_COPIES = 3
HOT_WEIGHT = 20.0


@dataclass
class _Calls:
    """What the client threads saw (guarded by ``lock``)."""

    latencies_s: list[tuple[float, bool]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    mismatches: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def _mib(value: float | None) -> str:
    return "-" if value is None else f"{value / 2**20:,.0f} MiB"


def _ms(values: list[float], q: float) -> str:
    if not values:
        return "-"
    import numpy as np

    return f"{float(np.percentile(values, q)) * 1e3:,.1f} ms"


def _build(workdir: Path, rebuild: bool) -> Path:
    model_dir = workdir / "repo" / MODEL
    if (model_dir / "config.pbtxt").is_file() and not rebuild:
        console.print(f"[green]✓[/] using the model built before in {model_dir}")
        return model_dir
    from mmelocal.builder.build import build_model

    with console.status("building MiniLM") as status:
        result = build_model(
            MODEL,
            repo=workdir / "repo",
            name=MODEL,
            format="torchscript",
            progress=lambda stage, message: status.update(f"build: {stage}: {message}"),
        )
    seconds = sum(result.timings_s.values())
    console.print(f"[green]✓[/] built and verified {result.model_dir} in {seconds:.0f}s")
    return result.model_dir


def _payload(model_dir: Path) -> tuple[bytes, Any]:
    import numpy as np

    ref = np.load(model_dir / "mmelocal_reference.npz")
    inputs = [
        {
            "name": name,
            "shape": [1, int(ref[f"input:{name}"].shape[1])],
            "datatype": "INT64",
            "data": ref[f"input:{name}"][0].tolist(),
        }
        for name in ("input_ids", "attention_mask")
    ]
    body = {"inputs": inputs, "outputs": [{"name": "pooler_output__1"}]}
    return json.dumps(body).encode(), ref["output:pooler_output__1"][0]


def _live_table(state: dict[str, Any], calls: _Calls, elapsed_s: float, seconds: float) -> Table:
    inst = state["instances"][0]
    counts = state["event_counts"]
    with calls.lock:
        done = len(calls.latencies_s)
        hits = sum(1 for _, hit in calls.latencies_s if hit)
        errors = len(calls.errors)
    title = f"traffic {elapsed_s:,.0f}s of {seconds:,.0f}s"
    if elapsed_s > seconds:
        title = f"traffic over after {seconds:,.0f}s: finishing the calls in flight"
    table = Table(title=title, show_header=False)
    table.add_row("calls (errors)", f"{done} ({errors})")
    table.add_row("cache hits", f"{hits}")
    table.add_row("loads / evictions", f"{counts['load']} / {counts['evict']}")
    table.add_row("loaded now", ", ".join(m["target"] for m in inst["loaded"]) or "-")
    table.add_row(
        "memory used / limit",
        f"{_mib(inst['memory_used_bytes'])} / {_mib(inst['memory_limit_bytes'])}",
    )
    return table


def _traffic(
    server: Any, targets: list[str], body: bytes, reference: Any, clients: int, seconds: float
) -> _Calls:
    import numpy as np

    from mmelocal.testing.emulator_fixtures import MmeEndpoint

    mme = MmeEndpoint(url=server.url, store=Path("."), server=server)
    # a few hot copies get most of the traffic, the long tail causes the loads and evictions
    weights = [HOT_WEIGHT if i < HOT_COPIES else 1.0 for i in range(len(targets))]
    calls = _Calls()
    stop = time.monotonic() + seconds

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        client = mme.client(retries={"max_attempts": 3})
        while time.monotonic() < stop:
            target = rng.choices(targets, weights)[0]
            t0 = time.perf_counter()
            try:
                response = client.invoke_endpoint(
                    EndpointName="demo",
                    TargetModel=target,
                    ContentType="application/json",
                    Body=body,
                )
                answer = json.loads(response["Body"].read())
            except Exception as exc:
                with calls.lock:
                    calls.errors.append(f"{target}: {exc}")
                continue
            latency = time.perf_counter() - t0
            headers = response["ResponseMetadata"]["HTTPHeaders"]
            hit = headers.get("x-mmelocal-model-cache") == "hit"
            got = np.asarray(answer["outputs"][0]["data"], dtype=np.float32)
            with calls.lock:
                calls.latencies_s.append((latency, hit))
                if not np.allclose(got, reference, atol=1e-4, rtol=1e-3):
                    calls.mismatches += 1

    threads = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(clients)]
    for thread in threads:
        thread.start()
    start = time.monotonic()

    with Live(console=console, refresh_per_second=4) as live:
        while any(t.is_alive() for t in threads):
            state = server.call(_state(server))
            live.update(_live_table(state, calls, time.monotonic() - start, seconds))
            time.sleep(0.5)
    return calls


def _report(state: dict[str, Any], calls: _Calls, limit: int, footprint: int, base: int) -> None:
    cold = [lat for lat, hit in calls.latencies_s if not hit]
    warm = [lat for lat, hit in calls.latencies_s if hit]
    every = cold + warm
    counts = state["event_counts"]
    table = Table(title="mmelocal demo: SageMaker MME emulated on this machine")
    table.add_column("what")
    table.add_column("value", justify="right")
    table.add_row("calls through boto3", f"{len(every)}")
    table.add_row("failed calls", f"{len(calls.errors)}")
    table.add_row("answers matching the build's reference", f"{len(every) - calls.mismatches}")
    table.add_row("cache hits", f"{len(warm)} ({100.0 * len(warm) / max(1, len(every)):.0f} %)")
    table.add_row("model loads", f"{counts['load']}")
    table.add_row("evictions (LRU)", f"{counts['evict']}")
    table.add_row("latency p50 / p99", f"{_ms(every, 50)} / {_ms(every, 99)}")
    table.add_row("warm latency p50 / p99", f"{_ms(warm, 50)} / {_ms(warm, 99)}")
    table.add_row("cold latency p50 / p99", f"{_ms(cold, 50)} / {_ms(cold, 99)}")
    table.add_row("per-model footprint (measured)", _mib(footprint))
    table.add_row("Triton baseline", _mib(base))
    table.add_row("memory limit (baseline + fit x footprint)", _mib(limit))
    console.print(table)
    evictions = [e for e in state["events"] if e["kind"] == "evict"][-5:]
    if evictions:
        log = Table(title="last evictions (what SageMaker does not show you)")
        for column in ("model", "freed", "unload", "reason"):
            log.add_column(column)
        for e in evictions:
            log.add_row(e["target"], _mib(e["bytes"]), f"{e['duration_ms']:,.0f} ms", e["reason"])
        console.print(log)
    for error in calls.errors[:5]:
        console.print(f"[red]error:[/] {error}")


@click.command()
@click.option("--copies", type=click.IntRange(min=2), default=20, show_default=True)
@click.option(
    "--seconds", type=click.FloatRange(min=5), default=45, show_default=True, help="Traffic."
)
@click.option("--clients", type=click.IntRange(min=1), default=3, show_default=True)
@click.option(
    "--fit",
    type=click.FloatRange(min=1.0),
    default=4.5,
    show_default=True,
    help="How many copies the memory limit holds (the hot three and a slot for the tail).",
)
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where the build, the store and the cache go (default: mmelocal's cache folder).",
)
@click.option("--rebuild", is_flag=True, help="Build MiniLM again even if built before.")
def demo(
    copies: int, seconds: float, clients: int, fit: float, workdir: Path | None, rebuild: bool
) -> None:
    """Build MiniLM, package copies, serve them as an MME and call them through boto3.

    Three hot copies get most calls; the others are the long tail that makes the emulator
    load, evict and reload, as a multi-model endpoint does under the same traffic.
    """
    from mmelocal.builder.package import package_copies
    from mmelocal.emulator.platform import EmulatorConfig
    from mmelocal.emulator.server import EmulatorServer
    from mmelocal.runtime.local import cache_dir

    work = workdir or cache_dir() / "demo"
    work.mkdir(parents=True, exist_ok=True)
    console.rule("[bold]mmelocal demo")
    model_dir = _build(work, rebuild)
    store = work / "store"
    paths = package_copies(model_dir, store, copies=copies)
    console.print(f"[green]✓[/] packaged {len(paths)} copies in {store} (hard links)")
    body, reference = _payload(model_dir)
    targets = [p.name for p in paths]
    config = EmulatorConfig(
        store=str(store), cache_dir=work / "cache", endpoint_name="demo", instances=1
    )
    with console.status("starting the emulator and the local tritonserver"):
        server = EmulatorServer(config).start()
    try:
        console.print(f"[green]✓[/] emulator at {server.url} (boto3 endpoint_url)")
        with console.status(f"cold call to {targets[0]} to measure one copy's footprint"):
            mme_call(server, targets[0], body)
            state = server.call(_state(server))
        inst = state["instances"][0]
        footprint = int(state["footprints_bytes"][targets[0]])
        base = int(inst["memory_used_bytes"]) - footprint
        limit = int(base + fit * footprint)
        server.emulator.instances[0].limit_override_bytes = limit
        console.print(
            f"[green]✓[/] one copy takes {_mib(footprint)} beside Triton's {_mib(base)}: "
            f"memory limit set to {_mib(limit)} (about {fit:g} copies)"
        )
        with console.status(f"warming the {HOT_COPIES} hot copies"):
            for target in targets[1:HOT_COPIES]:
                mme_call(server, target, body)
        console.print(
            f"[green]✓[/] hot copies {', '.join(targets[:HOT_COPIES])} loaded; now "
            f"{clients} boto3 clients call random copies for {seconds:g}s "
            f"({HOT_WEIGHT:g}x more often the hot ones)"
        )
        calls = _traffic(server, targets, body, reference, clients, seconds)
        _report(server.call(_state(server)), calls, limit, footprint, base)
    finally:
        with console.status("stopping"):
            server.stop()
    if calls.errors or calls.mismatches:
        raise SystemExit(1)


async def _state(server: Any) -> dict[str, Any]:
    return server.emulator.state()  # type: ignore[no-any-return]


def mme_call(server: Any, target: str, body: bytes) -> bytes:
    """One InvokeEndpoint through boto3 (the first, cold call)."""
    from mmelocal.testing.emulator_fixtures import MmeEndpoint

    mme = MmeEndpoint(url=server.url, store=Path("."), server=server, endpoint_name="demo")
    return mme.invoke(target, body)
