"""Helpers for the bench tests: a fake capacity instance, a fake load test, a render check."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import threading
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from mmelocal.bench.capacity.loop import CapacityResult, measure_instance
from mmelocal.bench.loadtest.runner import LoadTestResult
from mmelocal.bench.loadtest.shape import stepped_shape
from mmelocal.bench.loadtest.stepstats import StepStats
from mmelocal.errors import ModelLoadError

MIB = 1024 * 1024


class _Images(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.sources: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "img":
            self.sources.append(dict(attrs).get("src") or "")


def open_every_png(html_path: Path) -> list[tuple[int, int]]:
    """Parse the page, decode every <img> (data URI or file) with PIL; return their sizes."""
    from PIL import Image

    parser = _Images()
    parser.feed(html_path.read_text("utf-8"))
    sizes = []
    for src in parser.sources:
        if src.startswith("data:image/png;base64,"):
            data = base64.b64decode(src.split(",", 1)[1])
        else:
            data = (html_path.parent / src).read_bytes()
        with Image.open(io.BytesIO(data)) as image:
            image.load()
            assert image.format == "PNG"
            sizes.append(image.size)
    return sizes


@dataclass
class _Reading:
    used_bytes: int
    total_bytes: int
    server_pid: int | None = None
    per_process_bytes: dict[int, int] | None = None


class FakeInstance:
    """Each load adds ``footprint`` bytes, the first inference ``lazy`` more.

    With ``shared`` the first load also brings a shared runtime of that size, and readings
    carry per-process figures as the host probe's do: the server (pid 1) holds the baseline,
    each copy's stub (pid 100 + copy) its footprint and lazy memory. ``runtime_in_first``:
    as on a real host, the first stub's own figure (USS) also holds the runtime while no
    other process maps it, and drops to its footprint once a second stub shares it.
    """

    def __init__(
        self,
        *,
        total: int,
        baseline: int,
        footprint: int,
        lazy: int = 0,
        fail_at: int | None = None,
        shared: int | None = None,
        runtime_in_first: bool = False,
    ) -> None:
        self.total, self.used = total, baseline
        self.baseline, self.shared = baseline, shared
        self.runtime_in_first = runtime_in_first
        self.stubs: dict[int, int] = {}
        self.footprint, self.lazy, self.fail_at = footprint, lazy, fail_at
        self.loaded: list[str] = []
        self.invoked: set[str] = set()
        self.in_flight = 0

    async def acquire(self, target: str, *, wait_timeout_s: float | None = None) -> Any:
        if self.fail_at is not None and len(self.loaded) + 1 == self.fail_at:
            raise ModelLoadError("boom", model_name=target)
        self.loaded.append(target)
        first = len(self.loaded) == 1
        self.used += self.footprint + (self.shared or 0 if first else 0)
        self.stubs[100 + len(self.loaded)] = self.footprint
        if self.runtime_in_first and self.shared:
            if first:
                self.stubs[101] += self.shared  # nobody else maps the runtime yet
            elif len(self.loaded) == 2:
                self.stubs[101] -= self.shared  # now shared: out of the first stub's USS
        self.in_flight += 1

    def release(self, target: str) -> None:
        self.in_flight -= 1

    async def invoke(self, target: str, body: bytes, headers: list[tuple[str, str]]) -> Any:
        if target not in self.invoked:
            self.invoked.add(target)
            self.used += self.lazy
            self.stubs[100 + self.loaded.index(target) + 1] += self.lazy
        return 200, {}, b"{}"

    async def read_memory(self) -> _Reading:
        if self.shared is None:
            return _Reading(self.used, self.total)
        return _Reading(self.used, self.total, 1, {1: self.baseline, **self.stubs})


def _result(measurement: Any) -> CapacityResult:
    return CapacityResult(
        source="fake",
        label="",
        model_format="torchscript",
        probe="fake",
        threshold=0.9,
        total_bytes=measurement.total_bytes,
        baseline_bytes=measurement.baseline_bytes,
        loads=measurement.loads,
        next_copy=measurement.next_copy,
        stopped_reason=measurement.stopped_reason,
    )


def run_fake_capacity(instance: FakeInstance, **kwargs: Any) -> CapacityResult:
    targets = [f"model-{i}.tar.gz" for i in range(50)]
    coro = measure_instance(instance, targets, payload=b"{}", **kwargs)
    return _result(asyncio.run(coro))


def fake_loadtest(failing_from: int = 60) -> LoadTestResult:
    shape = stepped_shape(max_users=80)
    steps = []
    for stage in shape.stages:
        failures = 3 if stage.users >= failing_from else 0
        steps.append(
            StepStats(
                name=stage.name,
                target_users=stage.users,
                users=stage.users,
                duration_s=30.0,
                requests=stage.users * 100,
                successes=stage.users * 100 - failures,
                failures=failures,
                throughput_rps=stage.users * 100 / 30.0,
                avg_latency_ms=stage.users / 2,
                p50_latency_ms=stage.users / 2.5,
                p95_latency_ms=stage.users * 1.0,
                p99_latency_ms=stage.users * 1.5,
                max_latency_ms=stage.users * 2.0,
            )
        )
    total = sum(s.requests for s in steps)
    return LoadTestResult(
        endpoint="http://127.0.0.1:1/endpoints/x",
        mode="invocations",
        target_count=10,
        shape=shape,
        steps=tuple(steps),
        wall_s=150.0,
        loadgen_cpu_percent=40.0,
        locust_total_requests=total,
        locust_total_failures=sum(s.failures for s in steps),
        first_failure_users=60,
        errors={"HTTP 500": 6},
    )


@contextlib.contextmanager
def invocations_server(
    answer: Callable[[Any], Awaitable[Any]],
) -> Iterator[str]:
    """An aiohttp server on a loopback port the kernel picks (bound once: no pick-then-bind
    race), answering ``POST /endpoints/{name}/invocations`` with ``answer(request)`` on its
    own thread; yields the endpoint URL the load tests take."""
    from aiohttp import web

    loop = asyncio.new_event_loop()
    ready = threading.Event()
    ports: list[int] = []

    async def serve() -> web.AppRunner:
        app = web.Application()
        app.router.add_post("/endpoints/{name}/invocations", answer)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        ports.append(runner.addresses[0][1])
        return runner

    def run() -> None:
        asyncio.set_event_loop(loop)
        runner = loop.run_until_complete(serve())
        ready.set()
        loop.run_forever()
        loop.run_until_complete(runner.cleanup())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(10), "the local invocations server did not start"
    try:
        yield f"http://127.0.0.1:{ports[0]}/endpoints/x"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
