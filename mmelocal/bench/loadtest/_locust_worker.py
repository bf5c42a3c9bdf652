"""The Locust side of a load test, run in its own process.

Importing locust monkey-patches the whole process with gevent, so nothing else in mmelocal
imports it: :func:`mmelocal.bench.loadtest.run_loadtest` starts ``python -m
mmelocal.bench.loadtest._locust_worker CONFIG OUT`` and reads its progress (JSON lines on
stdout) and its result (JSON in OUT). Patching happens here, first, before any other
import of this module.
"""

from gevent import monkey

monkey.patch_all()

import json  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import socket  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import gevent  # noqa: E402
import locust  # noqa: E402
import psutil  # noqa: E402
from locust import FastHttpUser, LoadTestShape, User, constant, task  # noqa: E402
from locust.env import Environment  # noqa: E402

from mmelocal.bench.loadtest.shape import LoadShape  # noqa: E402
from mmelocal.bench.loadtest.stepstats import StageClock, stage_steps  # noqa: E402
from mmelocal.facts.aws import LOAD_TEST, LOCAL_REGION, aws_client, new_session  # noqa: E402
from mmelocal.facts.sagemaker import TARGET_MODEL_HEADER  # noqa: E402

TARGET_HEADER = TARGET_MODEL_HEADER


class _Recorder:
    """Collects every request's latency under the stage in effect when it was sent, and
    apart those sent in the stage's hold (from ``hold_at``, once its ramp is over)."""

    def __init__(self, n_stages: int) -> None:
        self.stage = 0
        self.latencies_ms: list[list[float]] = [[] for _ in range(n_stages)]
        self.held_ms: list[list[float]] = [[] for _ in range(n_stages)]
        self.hold_at: list[float | None] = [None] * n_stages
        self.failures: list[int] = [0] * n_stages
        self.users_seen: list[int] = [0] * n_stages
        self.started_at: list[float | None] = [None] * n_stages
        self.errors: Counter[str] = Counter()
        self.first_failure_users: int | None = None
        self.total = 0
        self.total_failures = 0
        self.last_at = 0.0
        self.clock = StageClock()

    def begin(self, index: int, run_time: float, ramp_s: float) -> None:
        """Stage ``index`` starts at ``run_time``; its hold ``ramp_s`` later."""
        self.started_at[index] = run_time
        self.hold_at[index] = run_time + ramp_s
        self.clock.mark(run_time, index, ramp_s <= 0)
        if ramp_s > 0:
            self.clock.mark(run_time + ramp_s, index, True)

    def on_request(self, response_time: float, exception: Any, users: int, run_time: float) -> None:
        # completed at run_time: sent response_time earlier, in the stage that sent it
        stage, held = self.clock.at(run_time - float(response_time) / 1000.0)
        self.latencies_ms[stage].append(float(response_time))
        if held:
            self.held_ms[stage].append(float(response_time))
        self.total += 1
        if exception is not None:
            self.failures[stage] += 1
            self.total_failures += 1
            self.errors[str(exception)[:200]] += 1
            if self.first_failure_users is None:
                self.first_failure_users = users


class _StagesShape(LoadTestShape):
    def __init__(self, shape: LoadShape, recorder: _Recorder) -> None:
        super().__init__()
        self.shape = shape
        self.recorder = recorder
        self.finished_at: float | None = None

    def tick(self) -> tuple[int, float] | None:
        run_time = self.get_run_time()
        index = self.shape.stage_at(run_time)
        if index is None:
            if self.finished_at is None:
                self.finished_at = run_time
            return None
        if self.recorder.started_at[index] is None:
            self.recorder.begin(index, run_time, self.shape.ramp_s(index))
        self.recorder.stage = index
        stage = self.shape.stages[index]
        return stage.users, stage.spawn_rate


def user_class(config: dict[str, Any], payload: bytes) -> type[User]:
    """The Locust user class for ``config`` (named ``InvokeUser`` or ``Boto3User``: a master
    and its workers find it by that name)."""
    targets: list[str] = list(config["targets"])
    content_type = str(config["content_type"])
    accept = str(config.get("accept") or "*/*")
    mode = config["mode"]
    timeout_s = float(config["timeout_s"])
    wait_s = float(config.get("wait_s", 0.0))

    if mode == "boto3":
        from botocore import UNSIGNED

        endpoint_url = config.get("endpoint_url")
        session = new_session(region_name=config.get("region") or None)
        if session.region_name is None and endpoint_url:
            # a local endpoint: boto3 still wants a region to sign with
            session = new_session(region_name=LOCAL_REGION)
        signed = session.get_credentials() is not None or not endpoint_url
        boto_config: dict[str, Any] = {
            "connect_timeout": timeout_s,
            "read_timeout": timeout_s,
            "max_pool_connections": 4,
            **({} if signed else {"signature_version": UNSIGNED}),
        }
        endpoint_name = config["endpoint_name"]

        class Boto3User(User):
            """Calls ``InvokeEndpoint`` through boto3 (real SageMaker or any endpoint_url)."""

            wait_time = constant(wait_s)

            def on_start(self) -> None:
                self.client = aws_client(
                    "sagemaker-runtime",
                    LOAD_TEST,
                    session=session,
                    endpoint_url=endpoint_url,
                    **boto_config,
                )

            @task
            def invoke(self) -> None:
                start = time.perf_counter()
                exception: Exception | None = None
                length = 0
                try:
                    response = self.client.invoke_endpoint(
                        EndpointName=endpoint_name,
                        TargetModel=random.choice(targets),
                        Body=payload,
                        ContentType=content_type,
                        Accept=accept,
                    )
                    length = len(response["Body"].read())
                except Exception as exc:
                    exception = exc
                self.environment.events.request.fire(
                    request_type="POST",
                    name="invoke_endpoint",
                    response_time=(time.perf_counter() - start) * 1000.0,
                    response_length=length,
                    exception=exception,
                    context={},
                )

        return Boto3User

    if mode == "invocations":
        path_template = f"/endpoints/{config['endpoint_name']}/invocations"
    elif mode == "triton-v2":
        path_template = "/v2/models/{target}/infer"
    else:  # pragma: no cover - validated by the parent
        raise SystemExit(f"unknown mode {mode!r}")

    class InvokeUser(FastHttpUser):
        """POSTs the payload to a random target, back to back."""

        host = config["host"]
        wait_time = constant(wait_s)
        network_timeout = timeout_s
        connection_timeout = timeout_s

        @task
        def invoke(self) -> None:
            target = random.choice(targets)
            headers = {"Content-Type": content_type, "Accept": accept, TARGET_HEADER: target}
            self.client.post(
                path_template.format(target=target),
                data=payload,  # type: ignore[arg-type]  # bytes are sent as they are
                headers=headers,
                name="invoke",
            )

    return InvokeUser


class StageCpu:
    """This process's CPU time per stage, as a share of one core (saturation shows here)."""

    def __init__(self, n_stages: int) -> None:
        self.process = psutil.Process()
        self.cpu_s = [0.0] * n_stages
        self.wall_s = [0.0] * n_stages
        self.stage: int | None = None
        self._cpu = 0.0
        self._wall = 0.0

    def _now(self) -> tuple[float, float]:
        times = self.process.cpu_times()
        return times.user + times.system, time.perf_counter()

    def enter(self, stage: int | None) -> None:
        """Charge the time since the last call to the stage in effect, then switch."""
        cpu, wall = self._now()
        if self.stage is not None:
            self.cpu_s[self.stage] += cpu - self._cpu
            self.wall_s[self.stage] += wall - self._wall
        self.stage, self._cpu, self._wall = stage, cpu, wall

    def percents(self) -> list[float | None]:
        """Per stage: CPU seconds / wall seconds x 100 (None for a stage never entered)."""
        return [
            100.0 * cpu / wall if wall > 0 else None
            for cpu, wall in zip(self.cpu_s, self.wall_s, strict=True)
        ]


def _emit(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def run(config: dict[str, Any]) -> dict[str, Any]:
    """Run one load test described by ``config`` and return the result data."""
    if config.get("seed") is not None:
        random.seed(int(config["seed"]))
    shape = LoadShape.from_dict(config["shape"])
    recorder = _Recorder(len(shape.stages))
    users = user_class(config, Path(config["payload_path"]).read_bytes())
    shape_driver = _StagesShape(shape, recorder)
    env = Environment(user_classes=[users], shape_class=shape_driver, events=locust.events)
    runner = env.create_local_runner()

    def on_request(response_time: float, exception: Any = None, **_: Any) -> None:
        run_time = shape_driver.get_run_time()
        recorder.on_request(response_time, exception, runner.user_count, run_time)
        recorder.last_at = run_time

    env.events.request.add_listener(on_request)

    process = psutil.Process()
    cpu_start = process.cpu_times()
    wall_start = time.perf_counter()
    stage_cpu = StageCpu(len(shape.stages))
    stage_cpu.enter(0)
    runner.start_shape()
    deadline = wall_start + shape.duration_s + float(config.get("grace_s", 60.0))
    last_total, last_time = 0, wall_start
    while True:
        gevent.sleep(0.5)
        now = time.perf_counter()
        current = recorder.stage
        if shape_driver.finished_at is None and current != stage_cpu.stage:
            stage_cpu.enter(current)
        if shape_driver.finished_at is None:
            # the last count seen in a stage is the one it settled at (ramps up or down)
            recorder.users_seen[current] = runner.user_count
        _emit(
            {
                "event": "progress",
                "elapsed_s": round(now - wall_start, 2),
                "duration_s": shape.duration_s,
                "stage": current,
                "stage_name": shape.stages[current].name,
                "users": runner.user_count,
                "requests": recorder.total,
                "failures": recorder.total_failures,
                "rps": round((recorder.total - last_total) / max(now - last_time, 1e-6), 1),
            }
        )
        last_total, last_time = recorder.total, now
        if shape_driver.finished_at is not None and runner.user_count == 0:
            break
        if now > deadline:
            runner.stop()
            break
    wall_s = time.perf_counter() - wall_start
    cpu_end = process.cpu_times()
    stage_cpu.enter(None)
    runner.quit()

    steps = stage_steps(
        shape,
        started_at=recorder.started_at,
        end_s=max(shape_driver.finished_at or wall_s, recorder.last_at),
        users_seen=recorder.users_seen,
        latencies_ms=recorder.latencies_ms,
        failures=recorder.failures,
        hold_at=recorder.hold_at,
        held_ms=recorder.held_ms,
    )
    cpu_s = (cpu_end.user - cpu_start.user) + (cpu_end.system - cpu_start.system)
    cpu_percent = 100.0 * cpu_s / max(wall_s, 1e-6)
    total = env.stats.total
    return {
        "steps": steps,
        "wall_s": wall_s,
        "loadgen_cpu_percent": cpu_percent,
        "workers": 1,
        "worker_details": [
            {
                "name": "local",
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "status": "ok",
                "requests": recorder.total,
                "failures": recorder.total_failures,
                "cpu_percent": cpu_percent,
                "stage_cpu_percent": stage_cpu.percents(),
                "missed_stages": [],
            }
        ],
        "locust_total_requests": total.num_requests,
        "locust_total_failures": total.num_failures,
        "first_failure_users": recorder.first_failure_users,
        "errors": dict(recorder.errors.most_common(10)),
    }


def main(argv: list[str]) -> int:
    """``python -m mmelocal.bench.loadtest._locust_worker CONFIG.json OUT.json``."""
    if len(argv) != 2:
        sys.stderr.write(
            "usage: python -m mmelocal.bench.loadtest._locust_worker CONFIG.json OUT.json\n"
        )
        return 2
    config = json.loads(Path(argv[0]).read_text("utf-8"))
    result = run(config)
    Path(argv[1]).write_text(json.dumps(result), "utf-8")
    _emit({"event": "done"})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
