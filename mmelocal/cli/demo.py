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
from mmelocal.units import mib

MODEL = "minilm"
HOT_COPIES = 3
#: the long-tail client calls a cold copy this often (a load and an eviction each time)
TAIL_PERIOD_S = 10.0


@dataclass
class _Calls:
    """What the client threads saw (guarded by ``lock``)."""

    latencies_s: list[tuple[float, bool]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    mismatches: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def _ms(values: list[float], q: float) -> str:
    if not values:
        return "-"
    from mmelocal.stats import percentile

    return f"{percentile(values, q) * 1e3:,.1f}"


def build_minilm(workdir: Path, rebuild: bool = False) -> Path:
    """The demo's MiniLM model folder under ``workdir/repo`` (built once, then reused)."""
    model_dir = workdir / "repo" / MODEL
    if (model_dir / "config.pbtxt").is_file() and not rebuild:
        console.print(f"[green]✓[/] using the model built before in {model_dir}")
        return model_dir
    from mmelocal.builder.build import BuildOptions, build_model

    with console.status("building MiniLM") as status:
        result = build_model(
            MODEL,
            repo=workdir / "repo",
            progress=lambda stage, message: status.update(f"build: {stage}: {message}"),
            options=BuildOptions(name=MODEL, format="torchscript"),
        )
    seconds = sum(result.timings_s.values())
    console.print(f"[green]✓[/] built and verified {result.model_dir} in {seconds:.0f}s")
    return result.model_dir


def demo_request(model_dir: Path) -> tuple[bytes, Any]:
    """The demo's JSON request body (a recorded sample, pooled output only) and the
    output the build recorded for it."""
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
        f"{mib(inst['memory_used_bytes'])} / {mib(inst['memory_limit_bytes'])}",
    )
    return table


def _traffic(
    server: Any, targets: list[str], body: bytes, reference: Any, clients: int, seconds: float
) -> _Calls:
    import numpy as np

    from mmelocal.facts.aws import RUNTIME
    from mmelocal.testing.endpoint import MmeEndpoint

    mme = MmeEndpoint(url=server.url, store=Path("."), server=server)
    hot, tail = targets[:HOT_COPIES], targets[HOT_COPIES:]
    calls = _Calls()
    stop = time.monotonic() + seconds

    def worker(seed: int, copies: list[str], period_s: float) -> None:
        rng = random.Random(seed)
        client = mme.client(retries=RUNTIME.retry_options)
        pause = threading.Event()  # never set: waits out the rest of the period
        while time.monotonic() < stop:
            target = rng.choice(copies)
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
            pause.wait(max(0.0, period_s - latency))

    # the hot clients keep the hot copies busy; one client walks the long tail (a call every
    # TAIL_PERIOD_S), so each of its calls is cold and pushes the least recently used out
    plan = [(k, hot, 0.0) for k in range(clients)] + [(clients, tail, TAIL_PERIOD_S)]
    threads = [threading.Thread(target=worker, args=job, daemon=True) for job in plan]
    for thread in threads:
        thread.start()
    start = time.monotonic()

    with Live(console=console, refresh_per_second=4) as live:
        while any(t.is_alive() for t in threads):
            state = server.call(_state(server))
            live.update(_live_table(state, calls, time.monotonic() - start, seconds))
            time.sleep(0.5)
    if not console.is_terminal:  # Live's last frame ends without a newline in a log file
        console.line()
    return calls


def _latency_row(table: Table, label: str, values: list[float]) -> None:
    table.add_row(label, f"{len(values)}", _ms(values, 50), _ms(values, 99), _ms(values, 100))


def _report(state: dict[str, Any], calls: _Calls, limit: int, footprint: int, base: int) -> None:
    cold = [lat for lat, hit in calls.latencies_s if not hit]
    warm = [lat for lat, hit in calls.latencies_s if hit]
    every = cold + warm
    counts = state["event_counts"]
    table = Table(
        title="mmelocal demo: what the multi-model endpoint did",
        caption="= reference: answers equal to the build's reference outputs",
    )
    table.add_column("boto3 calls", justify="right")
    table.add_column("failed", justify="right")
    table.add_column("= reference", justify="right")
    table.add_column("cache hits", justify="right")
    table.add_column("loads", justify="right")
    table.add_column("LRU evictions", justify="right")
    table.add_row(
        f"{len(every)}",
        f"{len(calls.errors)}",
        f"{len(every) - calls.mismatches}",
        f"{len(warm)} ({100.0 * len(warm) / max(1, len(every)):.0f} %)",
        f"{counts['load']}",
        f"{counts['evict']}",
    )
    console.print(table)
    latency = Table(title="latency seen by the boto3 clients")
    latency.add_column("calls")
    for column in ("count", "p50 (ms)", "p99 (ms)", "max (ms)"):
        latency.add_column(column, justify="right")
    _latency_row(latency, "warm: model already loaded", warm)
    _latency_row(latency, "cold: loaded on the call", cold)
    _latency_row(latency, "all", every)
    console.print(latency)
    console.print(
        f"memory: one copy {mib(footprint)} (measured), Triton alone {mib(base)}, "
        f"limit {mib(limit)}. Warm p99 includes calls that waited while Triton's SageMaker "
        "front end unloaded a model (it holds invokes during a DELETE, on SageMaker too).",
        highlight=False,
    )
    evictions = [e for e in state["events"] if e["kind"] == "evict"][-5:]
    if evictions:
        log = Table(title="last evictions (what SageMaker does not show you)")
        for column in ("model", "freed (MiB)", "unload (ms)", "reason"):
            log.add_column(column, justify="left" if column in ("model", "reason") else "right")
        for e in evictions:
            freed = mib(e["bytes"], suffix=False)
            log.add_row(e["target"], freed, f"{e['duration_ms']:,.0f}", e["reason"])
        console.print(log)
    for error in calls.errors[:5]:
        console.print(f"[red]error:[/] {error}")


@click.command()
@click.option(
    "--copies",
    type=click.IntRange(min=HOT_COPIES + 1),
    default=20,
    show_default=True,
    help=f"Copies in the store ({HOT_COPIES} hot ones, the rest the long tail).",
)
@click.option(
    "--seconds", type=click.FloatRange(min=5), default=45, show_default=True, help="Traffic."
)
@click.option(
    "--clients",
    type=click.IntRange(min=1),
    default=2,
    show_default=True,
    help="boto3 clients calling the hot copies (one more walks the long tail).",
)
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

    Three hot copies stay loaded under steady calls; one more client walks the long tail
    of the other copies, so the emulator loads each of them cold and evicts the least
    recently used, as a multi-model endpoint does under the same traffic.
    """
    from mmelocal.bench.capacity.footprint import marginal_bytes
    from mmelocal.builder.package import package_copies
    from mmelocal.emulator.emulator import EmulatorConfig
    from mmelocal.emulator.server import EmulatorServer
    from mmelocal.runtime.local import cache_dir

    work = workdir or cache_dir() / "demo"
    work.mkdir(parents=True, exist_ok=True)
    console.rule("[bold]mmelocal demo")
    model_dir = build_minilm(work, rebuild)
    store = work / "store"
    paths = package_copies(model_dir, store, copies=copies)
    console.print(f"[green]✓[/] packaged {len(paths)} copies in {store} (hard links)")
    body, reference = demo_request(model_dir)
    targets = [p.name for p in paths]
    config = EmulatorConfig(
        store=str(store), cache_dir=work / "cache", endpoint_name="demo", instances=1
    )
    with console.status("starting the emulator and the local tritonserver"):
        server = EmulatorServer(config).start()
    try:
        console.print(f"[green]✓[/] emulator at {server.url} (boto3 endpoint_url)")
        with console.status(f"cold calls to {', '.join(targets[:2])} to measure a copy"):
            # a copy's own part is read on the second: the first copy's stub is the only
            # process mapping torch, so its own memory holds the runtime too
            probe = server.emulator.instances[0].probe
            before = probe.read()
            mme_call(server, targets[0], body)
            first = probe.read()
            mme_call(server, targets[1], body)
            after = probe.read()
        footprint = marginal_bytes(first, after) or after.used_bytes - first.used_bytes
        runtime = max(0, first.used_bytes - before.used_bytes - footprint)
        base = before.used_bytes
        limit = int(base + runtime + fit * footprint)
        server.emulator.instances[0].gauge.limit_override_bytes = limit
        console.print(
            f"[green]✓[/] copy: {mib(footprint)}, torch runtime once: {mib(runtime)}, "
            f"beside Triton's {mib(base)}: memory limit set to {mib(limit)} "
            f"(about {fit:g} copies)"
        )
        with console.status(f"warming the {HOT_COPIES} hot copies"):
            for target in targets[2:HOT_COPIES]:
                mme_call(server, target, body)
        console.print(
            f"[green]✓[/] hot copies {', '.join(targets[:HOT_COPIES])} loaded; now for "
            f"{seconds:g}s {clients} boto3 client(s) call them at random while one more "
            f"calls one of the other {len(targets) - HOT_COPIES} every {TAIL_PERIOD_S:g}s "
            "(each call cold)"
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
    from mmelocal.testing.endpoint import MmeEndpoint

    mme = MmeEndpoint(url=server.url, store=Path("."), server=server, endpoint_name="demo")
    return mme.invoke(target, body)
