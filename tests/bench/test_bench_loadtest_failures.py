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


@pytest.fixture(scope="module")
def slow_server() -> Iterator[str]:
    """Answers every invocation after SERVICE_S."""
    import asyncio

    from aiohttp import web

    async def invocations(request: web.Request) -> web.Response:
        await request.read()
        await asyncio.sleep(SERVICE_S)
        return web.Response(body=b"{}", content_type="application/json")

    with invocations_server(invocations) as url:
        yield url


SERVICE_S = 0.05


@pytest.mark.parametrize("workers", [1, 2])
def test_a_step_rate_is_taken_at_its_users_not_over_its_ramp(
    slow_server: str, workers: int
) -> None:
    """10 users reached at 2 users/s (5 s of ramp), then held 3 s. Users send back to back,
    so at 10 users the rate is 10 / mean latency (Little's law); over the whole stage, ramp
    included, it is about 70 % of that."""
    from mmelocal.bench.loadtest.workers import LoadGenerators

    shape = shape_from_stages([{"users": 10, "spawn_rate": 2, "duration_s": 8}])
    config = LoadTestConfig(
        endpoint=slow_server,
        targets=expand_targets("model-{i}.tar.gz", 3),
        payload=b"{}",
        shape=shape,
        generators=LoadGenerators(workers=workers),
    )
    (step,) = run_loadtest(config).steps
    assert step.users == 10 and step.failures == 0
    assert step.avg_latency_ms is not None and step.avg_latency_ms >= SERVICE_S * 1000
    at_ten_users = 10 / (step.avg_latency_ms / 1000.0)
    assert step.throughput_rps == pytest.approx(at_ten_users, rel=0.15)
    assert step.duration_s < 8.0 * 0.6  # the hold, not the stage
    assert step.requests > step.throughput_rps * step.duration_s  # the ramp's are counted


#: an x-amzn-ErrorType as restJson1 services may send it: the shape's namespace before
#: ``#``, a URI after ``:``; botocore reads the code between them
#: (``RestJSONParser._inject_error_code``: ``code.split(':', 1)[0].rsplit('#', 1)[-1]``)
NAMESPACED_NOT_READY = "com.amazonaws.sagemaker#ModelNotReadyException:http://internal.amazon.com/"


@pytest.mark.parametrize("mode", ["boto3", "invocations"])
def test_prewarm_reads_model_not_ready_as_botocore_reads_it(mode: str) -> None:
    """The HTTP pre-warm restated botocore's reading of the error type (the header cut at
    ':' only, or the body's ``__type``): a namespaced ``x-amzn-ErrorType`` that boto3 reads
    as ModelNotReadyException failed the HTTP pre-warm ("answered HTTP 429") while the
    boto3 one waited. Both now read the code with facts.invoke_errors.error_code."""
    from aiohttp import web

    from mmelocal.bench.loadtest.runner import prewarm

    answers: list[int] = []

    async def invocations(request: web.Request) -> web.Response:
        await request.read()
        status = 429 if not answers else 200
        answers.append(status)
        if status == 429:
            return web.Response(
                status=429,
                headers={"x-amzn-ErrorType": NAMESPACED_NOT_READY},
                body=b'{"message": "Model is still loading"}',
                content_type="application/json",
            )
        return web.Response(body=b"{}", content_type="application/json")

    with invocations_server(invocations) as url:
        config = LoadTestConfig(
            endpoint=url,
            mode=mode,
            targets=("m.tar.gz",),
            payload=b"{}",
            shape=shape_from_stages([{"users": 1, "duration_s": 1}]),
        )
        prewarm(config)
    assert answers == [429, 200]
