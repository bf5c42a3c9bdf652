"""Replay pieces without a server: the per-sender rate check, the hit split, where it
measured."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from mmelocal.errors import UserInputError
from mmelocal.traffic.replay import (
    ReplayOptions,
    _infer_hits,
    _measured_where,
    _Record,
    check_rate,
    shard_schedule,
)
from mmelocal.traffic.trace import Trace


def test_rate_check_counts_the_busiest_shard_not_the_total() -> None:
    # 1,500 requests in one second: 1,400 to one model, 100 spread over 20 others. Two
    # senders could send 2,000/s together, but one model's requests all go to one sender.
    models = tuple(f"m{i}" for i in range(21))
    ids = np.concatenate([np.zeros(1400), np.arange(100) % 20 + 1]).astype(np.int32)
    trace = Trace(times_s=np.linspace(0.0, 0.99, 1500), model_ids=ids, models=models)
    options = ReplayOptions(max_rate_rps=1000)
    heaviest = max(len(s) for s in shard_schedule(trace, 2))
    assert heaviest >= 1400 and trace.peak_rate_rps() < 2 * 1000
    with pytest.raises(UserInputError, match=f"peaks at {heaviest:,} requests/s on sender"):
        check_rate(trace, options, 2)
    check_rate(trace, ReplayOptions(max_rate_rps=heaviest), 2)  # each shard within the cap


def test_a_zero_hit_ratio_is_a_figure_not_unknown() -> None:
    rec = _Record(
        latency_s=np.array([0.1, 0.2, 0.3, 0.4]),
        hit=np.zeros(4, dtype=np.bool_),
        ok=np.array([True, True, True, False]),
        sampled=np.array([True, True, True, False]),
    )
    assert not _infer_hits(rec, 0.0).any()  # every answered request cold
    assert _infer_hits(rec, 1.0).tolist() == [True, True, True, False]
    assert _infer_hits(rec, 2 / 3).tolist() == [True, True, False, False]  # slowest is cold


def test_where_a_replay_measured() -> None:
    serve = {"emulator": True, "probe_kinds": ["host"]}
    assert _measured_where("http://127.0.0.1:8080", None, None, serve) == (
        "cpu",
        "mmelocal serve on this machine (CPU)",
    )
    gpu = {"emulator": True, "probe_kinds": ["gpu"]}
    assert _measured_where("http://gpu-box:8080", None, None, gpu) == (
        "gpu",
        "mmelocal serve at gpu-box:8080 (GPU)",
    )
    assert _measured_where("http://x:1", None, None, {"emulator": False})[0] == "unknown"
    assert _measured_where(None, "prod", None, {}) == ("endpoint", "endpoint prod")


def test_load_cycles_of_a_timed_out_caller_and_of_a_replica() -> None:
    """A load whose only caller got ModelNotReadyException (an error, not an answered miss)
    still began at that call; a load no caller asked for (a hot model's replica) lasted its
    own load time. Neither is a 0 s cycle for the simulation to draw."""
    from mmelocal.traffic.replay import load_cycles

    # m0 called at 0 s (timed out), m1 at 10 s, m0 again at 80 s (a hit)
    trace = Trace(
        times_s=np.asarray([0.0, 10.0, 80.0]),
        model_ids=np.asarray([0, 1, 0], dtype=np.int32),
        models=("m0", "m1"),
    )
    rec = _Record(
        latency_s=np.asarray([60.0, 65.0, 0.01]),
        hit=np.asarray([False, False, True]),
        ok=np.asarray([False, True, True]),
        sampled=np.asarray([True, True, True]),
    )
    t0 = 1_000.0
    events = [
        (t0 + 70.0, "m0", 0, 69.5),  # instance 0: m0 from 0 s to 70 s
        (t0 + 75.0, "m1", 0, 4.8),  # then m1, asked at 10 s, from 70 s to 75 s
        (t0 + 90.0, "m0", 1, 2.0),  # a replica of m0 on instance 1: nobody waited for it
    ]
    cycles = load_cycles(trace, rec, events, t0, 1.0)
    assert cycles.tolist() == pytest.approx([70.0, 5.0, 2.0])


def test_a_failed_loads_caller_is_not_credited_to_the_next_load() -> None:
    """A load that failed (past the load limit: the emulator records an ``error`` event,
    no ``load``) took its callers with it: the next load of that model began at the next
    call, not at the failed caller's. Without the failure, b's second load (asked at 20 s,
    ended at 21.5 s) was timed from its first call at 0.5 s: 21 s."""
    from mmelocal.traffic.replay import load_cycles

    trace = Trace(
        times_s=np.asarray([0.0, 0.5, 20.0]),
        model_ids=np.asarray([0, 1, 1], dtype=np.int32),
        models=("a", "b"),
    )
    rec = _Record(
        latency_s=np.asarray([4.5, 7.5, 1.5]),
        hit=np.asarray([False, False, False]),
        ok=np.asarray([True, False, True]),
        sampled=np.asarray([True, True, True]),
    )
    t0 = 1_000.0
    events = [
        (t0 + 4.5, "a", 0, 4.4),  # a from 0 s to 4.5 s
        (t0 + 21.5, "b", 0, 1.4),  # b again, asked at 20 s
    ]
    failed = [(t0 + 8.0, "b", 0)]  # b's first load, asked at 0.5 s, failed at 8 s
    cycles = load_cycles(trace, rec, events, t0, 1.0, failed=failed)
    assert cycles.tolist() == pytest.approx([4.5, 1.5])


def test_a_sped_up_replays_load_cycles_are_the_endpoints_seconds() -> None:
    """At --speed 2 the trace's 10 s is the replay's 5 s; a load asked for then that ends
    3 s later held its instance 3 s (as the latencies are the endpoint's seconds), not the
    6 s of trace time it spans. A load nobody waited for is its own time, unscaled."""
    from mmelocal.traffic.replay import load_cycles

    trace = Trace(
        times_s=np.asarray([10.0, 20.0]),
        model_ids=np.asarray([0, 1], dtype=np.int32),
        models=("m0", "m1"),
    )
    rec = _Record(
        latency_s=np.asarray([3.0, 4.0]),
        hit=np.asarray([False, False]),
        ok=np.asarray([True, True]),
        sampled=np.asarray([True, True]),
    )
    t0 = 1_000.0
    events = [
        (t0 + 8.0, "m0", 0, 2.5),  # asked at trace 10 s = replay 5 s, done at replay 8 s
        (t0 + 14.0, "m1", 0, 3.5),  # asked at trace 20 s = replay 10 s
        (t0 + 20.0, "m0", 1, 2.0),  # a replica
    ]
    cycles = load_cycles(trace, rec, events, t0, 2.0)
    assert cycles.tolist() == pytest.approx([3.0, 4.0, 2.0])
    assert cycles.tolist() == pytest.approx([*rec.latency_s.tolist(), 2.0])


def _poll_stand_in(answer: Callable[[int], tuple[int, Any]], polls_wanted: int) -> dict[str, Any]:
    """Run the replay's state poll against a stand-in state page until it was read
    ``polls_wanted`` times; ``answer(i)`` gives the i-th poll's status and JSON body."""
    pytest.importorskip("aiohttp")
    import asyncio

    import aiohttp
    from aiohttp import web

    from mmelocal.traffic.replay import STATE_PATH, _poll_state

    polls: list[int] = []
    enough = asyncio.Event()

    async def state(request: web.Request) -> web.Response:
        status, body = answer(len(polls))
        polls.append(1)
        if len(polls) >= polls_wanted:
            enough.set()
        if status != 200:
            return web.Response(status=status, text="busy")
        return web.json_response(body)

    async def run() -> dict[str, Any]:
        app = web.Application()
        app.router.add_get(STATE_PATH, state)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        out: dict[str, Any] = {}
        stop = asyncio.Event()
        try:
            async with aiohttp.ClientSession() as session:
                poll = asyncio.ensure_future(
                    _poll_state(session, f"http://127.0.0.1:{port}", 0.001, stop, out)
                )
                await asyncio.wait_for(enough.wait(), timeout=30)
                stop.set()
                await poll
        finally:
            await runner.cleanup()
        return out

    return asyncio.run(run())


def test_the_replay_records_the_most_one_instance_held() -> None:
    def entry(state: str) -> dict[str, str]:
        return {"state": state}

    states = [
        [[entry("ready")] * 3 + [entry("loading")], [entry("ready")] * 2],  # 5 in all, 3 max
        [[entry("ready")], [entry("ready")] * 2],
    ]

    def answer(i: int) -> tuple[int, Any]:
        instances = states[min(i, len(states) - 1)]
        return 200, {
            "instances": [{"loaded": x} for x in instances],
            "events": [],
            "event_counts": {},
        }

    out = _poll_stand_in(answer, len(states))
    assert max(count for _, count in out["samples"]) == 5
    assert out["max_loaded_per_instance"] == 3 and out["instance_count"] == 2


def test_a_state_page_that_fails_is_reported_not_skipped() -> None:
    """The replay's record of loads and the loaded set comes from polling the emulator's
    state page: a poll answered 503 (or failing) left a gap the report never mentioned."""

    def answer(i: int) -> tuple[int, Any]:
        return (503, None) if i == 0 else (200, {"instances": [], "events": [], "event_counts": {}})

    out = _poll_stand_in(answer, 2)
    assert out.get("state_failures") == 1 and "503" in str(out.get("state_error"))
    from mmelocal.traffic.replay import _state_note

    note = _state_note(out)
    assert note is not None and "1 of" in note and "503" in note
    assert _state_note({"samples": [(0.0, 1)]}) is None


def test_every_error_of_a_boto3_replay_is_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    """boto3 calls run on a thread pool; each failed call's count must survive the others
    (an unlocked read-modify-write of one dict from many threads loses some). The error
    table's reads are slowed so that a race, if the counting has one, shows every time."""
    import http.server
    import json
    import threading
    import time

    from mmelocal.traffic import replay as replay_module
    from mmelocal.traffic.replay import _replay_boto3

    class SlowReads(dict[str, int]):
        def get(self, key: str, default: int | None = None) -> int | None:  # type: ignore[override]
            value = super().get(key, default)
            time.sleep(0.001)  # the window between the read and the write, widened
            return value

    empty = _Record.empty

    def record_with_slow_errors(n: int) -> _Record:
        rec = empty(n)
        rec.errors = SlowReads()
        return rec

    monkeypatch.setattr(replay_module._Record, "empty", staticmethod(record_with_slow_errors))

    class Refuse(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            body = json.dumps({"__type": "ValidationError", "message": "no"}).encode()
            self.send_response(400)
            self.send_header("Content-Type", "application/x-amz-json-1.1")
            self.send_header("x-amzn-ErrorType", "ValidationError")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")

    class Server(http.server.ThreadingHTTPServer):
        # every call may connect at once: the default backlog of 5 refused a few of
        # them (ConnectionClosedError, about one run in five)
        request_queue_size = 512

    server = Server(("127.0.0.1", 0), Refuse)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    n = 200
    trace = Trace(times_s=np.zeros(n), model_ids=np.zeros(n, dtype=np.int32), models=("m",))
    try:
        rec, _ = _replay_boto3(
            trace,
            "e",
            b"{}",
            ReplayOptions(max_in_flight=n, max_lag_s=600.0),
            None,
            f"http://127.0.0.1:{server.server_address[1]}",
            "us-east-1",
        )
    finally:
        server.shutdown()
        server.server_close()
    assert not rec.ok.any()
    assert rec.errors == {"ValidationError": n}


def test_the_senders_timeout_outlasts_the_platforms_slowest_answer() -> None:
    """A call may wait for a cold load up to MODEL_NOT_READY_AFTER_S and then for the model
    up to INVOKE_TIMEOUT_S, and the platform answers then (its ModelError or
    ModelNotReadyException): a sender that gives up at exactly that sum records its own
    TimeoutError instead of the platform's answer."""
    from mmelocal.facts.sagemaker import INVOKE_TIMEOUT_S, MODEL_NOT_READY_AFTER_S

    assert ReplayOptions().timeout_s > MODEL_NOT_READY_AFTER_S + INVOKE_TIMEOUT_S


def test_progress_counts_answers_while_the_last_ones_are_awaited() -> None:
    # every request is sent at once and none is answered until the last one has left: the
    # progress then says 0 answered of 4, 4 sent (before: "3 of 4", the requests sent, and
    # it stayed there while the answers were awaited, up to 135 s)
    import asyncio

    from mmelocal.traffic.replay.schedule import _open_loop

    trace = Trace(times_s=np.zeros(4), model_ids=np.zeros(4, dtype=np.int32), models=("m",))
    calls: list[tuple[int, int, int | None]] = []
    seen_when_all_sent: list[tuple[int, int, int | None]] = []

    def progress(answered: int, total: int, sent: int | None = None) -> None:
        calls.append((answered, total, sent))

    async def run() -> None:
        gate = asyncio.Event()
        started = 0

        async def send(i: int) -> None:
            nonlocal started
            started += 1
            if started == len(trace):
                seen_when_all_sent.append(calls[-1])
                gate.set()
            await gate.wait()

        loop = asyncio.get_running_loop()
        await _open_loop(trace, np.arange(4), send, ReplayOptions(), progress, loop.time())

    asyncio.run(run())
    assert seen_when_all_sent == [(0, 4, 4)]
    assert calls[-1] == (4, 4, 4)
    answered = [c[0] for c in calls]
    assert answered == sorted(answered)  # never goes back


def test_the_cli_bar_counts_answers_and_shows_the_requests_sent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import io

    from rich.console import Console

    from mmelocal.cli.traffic import _shared

    screen = io.StringIO()
    monkeypatch.setattr(
        _shared, "err_console", Console(file=screen, force_terminal=True, width=120)
    )
    with _shared._progress("replay") as update:
        update(3, 10, 7)
    import re

    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.getvalue())
    assert re.search(r"3/10 answered, 7 sent", shown), shown


def test_a_boto3_replays_hit_ratio_and_cold_starts_are_cloudwatchs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Through boto3 the hit ratio is CloudWatch's ``ModelCacheHit``, whose samples are
    every call that reached its model, failed ones too (the SageMaker Developer Guide, MME
    metrics); the cold starts are its samples of 0. Three calls got
    ModelNotReadyException (three misses) and two were answered from a loaded model:
    CloudWatch has 2 hits in 5 samples. The replay counted cold starts among the answered
    calls only, as many as the ratio implied of them (1), and its ratio from those (0.5).
    CloudWatch and SageMaker's control plane are moto's server; the runtime is a stand-in
    HTTP server that answers as the service does."""
    import datetime as dt
    import http.server
    import json
    import socket
    import threading

    import boto3
    from moto.server import ThreadedMotoServer

    from mmelocal.facts.cloudwatch import INVOCATION_NAMESPACE, MODEL_CACHE_HIT
    from mmelocal.traffic.replay import replay

    answered = {"count": 0}

    class Runtime(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            answered["count"] += 1
            if answered["count"] > 3:  # the model is loaded: answered
                status, body, kind = 200, b"{}", None
            else:
                status, kind = 429, "ModelNotReadyException"
                body = json.dumps({"__type": kind, "message": "still loading"}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            if kind:
                self.send_header("x-amzn-ErrorType", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        moto_port = probe.getsockname()[1]
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=moto_port)
    moto.start()
    runtime = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Runtime)
    thread = threading.Thread(target=runtime.serve_forever, daemon=True)
    thread.start()
    moto_url = f"http://127.0.0.1:{moto_port}"
    for name, value in (
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_ENDPOINT_URL_SAGEMAKER", moto_url),
        ("AWS_ENDPOINT_URL_CLOUDWATCH", moto_url),
        ("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME", f"http://127.0.0.1:{runtime.server_address[1]}"),
    ):
        monkeypatch.setenv(name, value)
    try:
        sm = boto3.client("sagemaker", region_name="us-east-1")
        sm.create_model(
            ModelName="m",
            ExecutionRoleArn="arn:aws:iam::123456789012:role/r",
            PrimaryContainer={"Image": "i", "Mode": "MultiModel"},
        )
        sm.create_endpoint_config(
            EndpointConfigName="c",
            ProductionVariants=[
                {
                    "VariantName": "AllTraffic",
                    "ModelName": "m",
                    "InstanceType": "ml.g4dn.xlarge",
                    "InitialInstanceCount": 1,
                }
            ],
        )
        sm.create_endpoint(EndpointName="ep", EndpointConfigName="c")
        boto3.client("cloudwatch", region_name="us-east-1").put_metric_data(
            Namespace=INVOCATION_NAMESPACE,
            MetricData=[
                {
                    "MetricName": MODEL_CACHE_HIT,
                    "Dimensions": [
                        {"Name": "EndpointName", "Value": "ep"},
                        {"Name": "VariantName", "Value": "AllTraffic"},
                    ],
                    "Timestamp": dt.datetime.now(tz=dt.UTC),
                    "StatisticValues": {"SampleCount": 5, "Sum": 2, "Minimum": 0, "Maximum": 1},
                }
            ],
        )
        trace = Trace(
            times_s=np.arange(5) * 0.01, model_ids=np.zeros(5, dtype=np.int32), models=("m",)
        )
        result = replay(trace, body=b"{}", endpoint_name="ep", region="us-east-1").data
    finally:
        runtime.shutdown()
        runtime.server_close()
        moto.stop()
    assert result["answered"] == 2 and result["errors_by_class"] == {"ModelNotReadyException": 3}
    assert (result["hit_ratio"], result["cold_starts"]) == (pytest.approx(0.4), 3)


@pytest.mark.parametrize(
    ("status", "headers", "body"),
    [
        # the emulator's ModelError and ModelNotReadyException: header and __type
        (
            424,
            {"x-amzn-ErrorType": "ModelError:http://internal.amazon.com/"},
            b'{"__type": "ModelError"}',
        ),
        (429, {"X-Amzn-ErrorType": "ModelNotReadyException"}, b"{}"),
        # no header: the body's code, else its __type (after the namespace's '#')
        (507, {}, b'{"__type": "com.amazon.coral#InsufficientMemory", "message": "no"}'),
        (400, {}, b'{"Code": "ValidationError", "__type": "Other"}'),
        # nothing says: the status, as boto3's ClientError code
        (502, {}, b"<html>bad gateway</html>"),
        (413, {}, b""),
    ],
)
def test_an_http_replay_names_errors_as_boto3_does(
    status: int, headers: dict[str, str], body: bytes
) -> None:
    """A replay over HTTP names an error by the code botocore's rest-json parser gives
    sagemaker-runtime's answer (what a boto3 replay records, and the simulation's names):
    ``ModelError``, never ``ModelError (424)``."""
    import botocore.parsers
    import botocore.session
    from botocore.awsrequest import HeadersDict

    from mmelocal.traffic.replay.over_http import _error_class

    model = botocore.session.get_session().get_service_model("sagemaker-runtime")
    shape = model.operation_model("InvokeEndpoint").output_shape
    parsed = botocore.parsers.create_parser("rest-json").parse(
        {"status_code": status, "headers": HeadersDict(headers), "body": body}, shape
    )
    assert _error_class(status, headers, body) == parsed["Error"]["Code"]
