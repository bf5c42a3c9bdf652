"""The Locust side of a load test, run in its own process.

Importing locust monkey-patches the whole process with gevent, so nothing else in mmelocal
imports it: :func:`mmelocal.bench.loadtest.run_loadtest` starts
``python -m mmelocal.bench._locust_worker CONFIG OUT`` and reads its progress (JSON lines on
stdout) and its result (JSON in OUT). Patching happens here, first, before any other
import of this module.
"""

from gevent import monkey

monkey.patch_all()

import json  # noqa: E402
import random  # noqa: E402
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
from mmelocal.bench.loadtest.stepstats import summarize_step  # noqa: E402
from mmelocal.facts.aws import LOAD_TEST, LOCAL_REGION, aws_client  # noqa: E402
from mmelocal.facts.sagemaker import TARGET_MODEL_HEADER  # noqa: E402

TARGET_HEADER = TARGET_MODEL_HEADER


class _Recorder:
    """Collects every request's latency under the stage that was in effect."""

    def __init__(self, n_stages: int) -> None:
        self.stage = 0
        self.latencies_ms: list[list[float]] = [[] for _ in range(n_stages)]
        self.failures: list[int] = [0] * n_stages
        self.users_seen: list[int] = [0] * n_stages
        self.started_at: list[float | None] = [None] * n_stages
        self.errors: Counter[str] = Counter()
        self.first_failure_users: int | None = None
        self.total = 0
        self.total_failures = 0
        self.last_at = 0.0

    def on_request(self, response_time: float, exception: Any, users: int) -> None:
        stage = self.stage
        self.latencies_ms[stage].append(float(response_time))
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
            self.recorder.started_at[index] = run_time
        self.recorder.stage = index
        stage = self.shape.stages[index]
        return stage.users, stage.spawn_rate


def _user_classes(config: dict[str, Any]) -> type[User]:
    targets: list[str] = list(config["targets"])
    payload = Path(config["payload_path"]).read_bytes()
    content_type = str(config["content_type"])
    accept = str(config.get("accept") or "*/*")
    mode = config["mode"]
    timeout_s = float(config["timeout_s"])
    wait_s = float(config.get("wait_s", 0.0))

    if mode == "boto3":
        import boto3
        from botocore import UNSIGNED

        endpoint_url = config.get("endpoint_url")
        session = boto3.session.Session(region_name=config.get("region") or None)
        if session.region_name is None and endpoint_url:
            # a local endpoint: boto3 still wants a region to sign with
            session = boto3.session.Session(region_name=LOCAL_REGION)
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


def _emit(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def run(config: dict[str, Any]) -> dict[str, Any]:
    """Run one load test described by ``config`` and return the result data."""
    if config.get("seed") is not None:
        random.seed(int(config["seed"]))
    shape = LoadShape.from_dict(config["shape"])
    recorder = _Recorder(len(shape.stages))
    user_class = _user_classes(config)
    shape_driver = _StagesShape(shape, recorder)
    env = Environment(user_classes=[user_class], shape_class=shape_driver, events=locust.events)
    runner = env.create_local_runner()

    def on_request(response_time: float, exception: Any = None, **_: Any) -> None:
        recorder.on_request(response_time, exception, runner.user_count)
        recorder.last_at = shape_driver.get_run_time()

    env.events.request.add_listener(on_request)

    process = psutil.Process()
    cpu_start = process.cpu_times()
    wall_start = time.perf_counter()
    runner.start_shape()
    deadline = wall_start + shape.duration_s + float(config.get("grace_s", 60.0))
    last_total, last_time = 0, wall_start
    while True:
        gevent.sleep(0.5)
        now = time.perf_counter()
        current = recorder.stage
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
    runner.quit()

    steps = []
    for index, stage in enumerate(shape.stages):
        started = recorder.started_at[index]
        if started is None:
            continue
        later = [t for t in recorder.started_at[index + 1 :] if t is not None]
        ended = later[0] if later else max(shape_driver.finished_at or wall_s, recorder.last_at)
        steps.append(
            summarize_step(
                name=stage.name,
                target_users=stage.users,
                users=recorder.users_seen[index] or stage.users,
                duration_s=max(ended - started, 1e-6),
                latencies_ms=recorder.latencies_ms[index],
                failures=recorder.failures[index],
            )
        )
    cpu_s = (cpu_end.user - cpu_start.user) + (cpu_end.system - cpu_start.system)
    total = env.stats.total
    return {
        "steps": steps,
        "wall_s": wall_s,
        "loadgen_cpu_percent": 100.0 * cpu_s / max(wall_s, 1e-6),
        "locust_total_requests": total.num_requests,
        "locust_total_failures": total.num_failures,
        "first_failure_users": recorder.first_failure_users,
        "errors": dict(recorder.errors.most_common(10)),
    }


def main(argv: list[str]) -> int:
    """``python -m mmelocal.bench._locust_worker CONFIG.json OUT.json``."""
    if len(argv) != 2:
        sys.stderr.write("usage: python -m mmelocal.bench._locust_worker CONFIG.json OUT.json\n")
        return 2
    config = json.loads(Path(argv[0]).read_text("utf-8"))
    result = run(config)
    Path(argv[1]).write_text(json.dumps(result), "utf-8")
    _emit({"event": "done"})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
