"""The load test's failure accounting against a local server that starts failing mid-test."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from bench_helpers import invocations_server

from mmelocal.bench.loadtest.runner import LoadTestConfig, expand_targets, run_loadtest
from mmelocal.bench.loadtest.shape import shape_from_stages

FAIL_AFTER_S = 3.0  # stage 1 is [0, 2) s, stage 2 [2, 4) s: failures start inside stage 2


@pytest.fixture
def failing_server() -> Iterator[str]:
    """Answers 200 for FAIL_AFTER_S seconds after its first request, then 503."""
    from aiohttp import web

    first: list[float] = []

    async def invocations(request: web.Request) -> web.Response:
        await request.read()
        if not first:
            first.append(time.monotonic())
        if time.monotonic() - first[0] > FAIL_AFTER_S:
            return web.Response(status=503, text="overloaded")
        return web.Response(body=b"{}", content_type="application/json")

    with invocations_server(invocations) as url:
        yield url


def test_failures_are_counted_per_step_and_set_the_ceiling(failing_server: str) -> None:
    shape = shape_from_stages(
        [
            {"users": 2, "spawn_rate": 10, "duration_s": 2},
            {"users": 4, "spawn_rate": 10, "duration_s": 2},
            {"users": 8, "spawn_rate": 10, "duration_s": 2},
        ]
    )
    config = LoadTestConfig(
        endpoint=failing_server,
        targets=expand_targets("model-{i}.tar.gz", 3),
        payload=b"{}",
        shape=shape,
        wait_s=0.002,
    )
    result = run_loadtest(config)
    first, second, third = result.steps
    assert first.failures == 0 and first.successes > 0
    assert second.failures > 0 and third.failures == third.requests > 0
    for step in result.steps:
        assert step.requests == step.successes + step.failures
    assert result.max_users_without_failure == first.users == 2
    assert result.first_failure_users == 4
    assert result.failures == result.locust_total_failures
    assert any("503" in error for error in result.errors)
