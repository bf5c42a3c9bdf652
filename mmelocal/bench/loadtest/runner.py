"""Locust load tests of an MME endpoint (the emulator, a Triton, or a real SageMaker endpoint).

Each simulated user sends requests back to back, each to a random target among the copies;
the :mod:`~mmelocal.bench.loadtest.shape` decides how many users run when. Locust monkey-patches
the process it is imported in, so :func:`run_loadtest` runs it in a child process
(:mod:`mmelocal.bench.loadtest._locust_worker`) and reads its progress and result; importing this
module never imports locust.

Endpoints:

- ``http://host:port/endpoints/NAME[/invocations]`` -> ``POST /endpoints/NAME/invocations``
  with ``X-Amzn-SageMaker-Target-Model`` (FastHttpUser; or boto3 with ``mode="boto3"``);
- ``http://host:port`` with ``mode="triton-v2"`` -> ``POST /v2/models/TARGET/infer``
  (a plain Triton, used by the sweep);
- a bare name (no scheme) -> a real SageMaker endpoint through boto3's
  ``sagemaker-runtime`` client (region and credentials from the usual AWS settings;
  ``AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME`` points it elsewhere, e.g. at the emulator).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from mmelocal.bench.loadtest.result import (
    LoadProgress,
    LoadTestResult,
    summary_lines,
    worker_lost_line,
)
from mmelocal.bench.loadtest.shape import LoadShape
from mmelocal.bench.loadtest.workers import (
    DEFAULT_MASTER_PORT,
    LoadGenerators,
    endpoint_is_local,
)
from mmelocal.errors import BenchError, ModelNotReadyError, UserInputError
from mmelocal.facts.aws import LOCAL_REGION, RUNTIME, aws_client, new_session
from mmelocal.facts.invoke_errors import MODEL_NOT_READY, error_code
from mmelocal.facts.sagemaker import (
    DIRECT_LOAD_TIMEOUT_S,
    INVOKE_TIMEOUT_S,
    LOAD_LIMIT_S,
    TARGET_MODEL_HEADER,
)

logger = logging.getLogger(__name__)

MODES = ("auto", "invocations", "triton-v2", "boto3")
DEFAULT_ENDPOINT_NAME = "mmelocal"
WORKER_MODULE = "mmelocal.bench.loadtest._locust_worker"
DIST_MODULE = "mmelocal.bench.loadtest._locust_dist"
TARGET_HEADER = TARGET_MODEL_HEADER


@dataclass(frozen=True, kw_only=True)
class LoadTestConfig:
    """What to load-test and how (see the module docstring for ``endpoint`` forms)."""

    endpoint: str
    targets: tuple[str, ...]
    payload: bytes
    shape: LoadShape
    content_type: str = "application/json"
    accept: str = "*/*"
    mode: str = "auto"
    endpoint_name: str | None = None
    region: str | None = None
    timeout_s: float = INVOKE_TIMEOUT_S
    wait_s: float = 0.0
    seed: int | None = None
    prewarm: bool = False
    generators: LoadGenerators = field(default_factory=LoadGenerators)

    def __post_init__(self) -> None:
        object.__setattr__(self, "targets", tuple(self.targets))
        if not self.targets:
            raise UserInputError("targets must name at least one model")
        if self.mode not in MODES:
            raise UserInputError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if not self.endpoint:
            raise UserInputError("endpoint must be a URL or a SageMaker endpoint name")
        if self.timeout_s <= 0:
            raise UserInputError(f"timeout_s must be > 0, got {self.timeout_s}")
        if self.wait_s < 0:
            raise UserInputError(f"wait_s must be >= 0, got {self.wait_s}")
        if not self.payload:
            raise UserInputError("payload must not be empty")
        self.worker_config()  # validates the endpoint / mode combination

    def worker_config(self) -> dict[str, Any]:
        """The JSON the Locust worker reads (without the payload path)."""
        base: dict[str, Any] = {
            "targets": list(self.targets),
            "content_type": self.content_type,
            "accept": self.accept,
            "shape": self.shape.to_dict(),
            "timeout_s": self.timeout_s,
            "wait_s": self.wait_s,
            "seed": self.seed,
            "region": self.region,
        }
        if "://" not in self.endpoint:
            if self.mode not in ("auto", "boto3"):
                raise UserInputError(
                    f"endpoint {self.endpoint!r} has no http(s):// scheme, so it is taken as a "
                    f"SageMaker endpoint name (mode boto3); mode {self.mode!r} needs a URL"
                )
            # boto3's own override variables, read now so signing and region can follow them
            url = os.environ.get("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME") or os.environ.get(
                "AWS_ENDPOINT_URL"
            )
            return {**base, "mode": "boto3", "endpoint_url": url, "endpoint_name": self.endpoint}
        parts = urlsplit(self.endpoint)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise UserInputError(
                f"endpoint URL must be http(s)://host:port[...], got {self.endpoint!r}"
            )
        host = f"{parts.scheme}://{parts.netloc}"
        segments = [s for s in parts.path.split("/") if s]
        name = self.endpoint_name
        if segments[:1] == ["endpoints"] and len(segments) >= 2:
            name = segments[1]
        elif segments:
            raise UserInputError(
                f"endpoint URL path must be empty, /endpoints/NAME or /endpoints/NAME/invocations, "
                f"got {parts.path!r}"
            )
        mode = "invocations" if self.mode == "auto" else self.mode
        return {
            **base,
            "mode": mode,
            "host": host,
            "endpoint_url": host,
            "endpoint_name": name or DEFAULT_ENDPOINT_NAME,
        }


def expand_targets(pattern: str, count: int, *, start: int = 0) -> tuple[str, ...]:
    """``'model-{i}.tar.gz'`` with ``count=3`` -> model-0.tar.gz, model-1.tar.gz, model-2.tar.gz."""
    if count < 1:
        raise UserInputError(f"count must be >= 1, got {count}")
    if "{i}" not in pattern:
        raise UserInputError(f"targets pattern must contain '{{i}}', got {pattern!r}")
    return tuple(pattern.replace("{i}", str(i)) for i in range(start, start + count))


def run_loadtest(
    config: LoadTestConfig,
    *,
    progress: Callable[[LoadProgress], None] | None = None,
    label: str = "",
) -> LoadTestResult:
    """Run the load test in Locust child processes and return its per-step numbers: one
    process, or a master and ``config.generators`` workers (Locust's distributed mode).

    The children are always ended before this returns (also on errors and Ctrl-C).
    """
    worker = config.worker_config()
    generators = config.generators
    local = generators.local_workers(
        endpoint_is_local=endpoint_is_local(worker), max_users=config.shape.max_users
    )
    distributed = local + generators.remote_workers > 1 or generators.remote_workers > 0
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    with tempfile.TemporaryDirectory(prefix="mmelocal-loadtest-") as tmp:
        tmpdir = Path(tmp)
        payload_path = tmpdir / "payload.bin"
        payload_path.write_bytes(config.payload)
        config_path = tmpdir / "config.json"
        config_path.write_text(json.dumps({**worker, "payload_path": str(payload_path)}), "utf-8")
        out_path = tmpdir / "result.json"
        err_path = tmpdir / "worker.log"
        logger.info(
            "load test of %s (%s, %d targets, %d stages, %.0f s planned, %d+%d workers)",
            config.endpoint,
            worker["mode"],
            len(config.targets),
            len(config.shape.stages),
            config.shape.duration_s,
            local,
            generators.remote_workers,
        )
        check_reachable(worker)
        if config.prewarm:
            prewarm(config)
        if not distributed:
            command = [str(config_path), str(out_path)]
            data = _run_worker(WORKER_MODULE, command, out_path, err_path, config.shape, progress)
        else:
            data = _run_distributed(
                generators, local, config_path, out_path, tmpdir, config.shape, progress
            )
    result = LoadTestResult.from_dict(
        {
            **data,
            "label": label,
            "endpoint": config.endpoint,
            "mode": worker["mode"],
            "target_count": len(config.targets),
            "started_at": started_at,
            "workers": data.get("workers", 1),
            "shape": config.shape.to_dict(),
        }
    )
    logger.info(
        "load test done: %d requests, %d failures, peak %.1f req/s, load generator CPU %.0f%%",
        result.requests,
        result.failures,
        result.peak_throughput_rps,
        result.loadgen_cpu_percent,
    )
    for lost in result.lost_workers:
        logger.warning("%s", worker_lost_line(lost))
    for saturated in result.saturated:
        logger.warning("%s", saturated.message())
    return result


def check_reachable(worker: dict[str, Any], *, timeout_s: float = 5.0) -> None:
    """Open one TCP connection to an http(s) endpoint, so a wrong URL or a stopped server
    fails in seconds with the reason instead of a whole load test of failed requests; for
    a SageMaker endpoint name, check that boto3 finds a region and credentials."""
    if worker["mode"] == "boto3":
        _check_boto3_settings(worker)
        return
    import socket

    parts = urlsplit(worker["host"])
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "", port), timeout=timeout_s):
            pass
    except OSError as exc:
        reason = (
            f"no answer within {timeout_s:g} s"
            if isinstance(exc, TimeoutError)
            else exc.strerror or str(exc)
        )
        raise BenchError(
            f"cannot reach {worker['host']} ({reason}): is the server running and the "
            "endpoint URL right?"
        ) from exc


def _check_boto3_settings(worker: dict[str, Any]) -> None:
    if worker.get("endpoint_url"):
        return  # a local endpoint: the worker signs with us-east-1 or not at all

    session = new_session(region_name=worker.get("region") or None)
    name = worker["endpoint_name"]
    if session.region_name is None:
        raise BenchError(
            f"no AWS region for SageMaker endpoint {name!r}: pass --region or set AWS_REGION; "
            "for a local endpoint give its http:// URL"
        )
    if session.get_credentials() is None:
        raise BenchError(
            f"no AWS credentials for SageMaker endpoint {name!r}: configure them (aws "
            "configure, AWS_PROFILE, ...); for a local endpoint give its http:// URL"
        )


#: the first and the longest pause between two pre-warm tries of a model still loading
_RETRY_FIRST_S, _RETRY_MAX_S = 0.25, 5.0


def prewarm(config: LoadTestConfig) -> float:
    """Send one request to every target, one after the other, so cold loads happen before
    the measured test; raises BenchError naming the first target that fails. A target
    that answers ModelNotReadyException is asked again (pauses growing from 0.25 s to 5 s)
    until it answers, for up to the platform's load limit. Returns the seconds it took."""
    worker = config.worker_config()
    t0 = time.perf_counter()
    send = (
        _boto3_sender(config, worker) if worker["mode"] == "boto3" else _http_sender(config, worker)
    )
    for target in config.targets:
        _until_ready(functools.partial(send, target), target)
    seconds = time.perf_counter() - t0
    logger.info("pre-warmed %d targets in %.1f s", len(config.targets), seconds)
    return seconds


def _until_ready(send: Callable[[], None], target: str) -> None:
    """``send()`` again while it raises :class:`~mmelocal.errors.ModelNotReadyError`, for
    up to LOAD_LIMIT_S from the first such answer."""
    deadline: float | None = None
    pause_s = _RETRY_FIRST_S
    wait = threading.Event()
    while True:
        try:
            send()
            return
        except ModelNotReadyError as exc:
            now = time.monotonic()
            deadline = now + LOAD_LIMIT_S if deadline is None else deadline
            if now >= deadline:
                raise BenchError(
                    f"pre-warm request to {target}: still loading after {LOAD_LIMIT_S:g} s "
                    f"({MODEL_NOT_READY}: {exc}); the platform gives a load no longer: "
                    "check the model's load time and the endpoint's logs"
                ) from exc
            logger.info("pre-warm: %s is still loading; asking again in %.2f s", target, pause_s)
            wait.wait(min(pause_s, deadline - now))
            pause_s = min(pause_s * 2, _RETRY_MAX_S)


def _boto3_sender(config: LoadTestConfig, worker: dict[str, Any]) -> Callable[[str], None]:
    """One InvokeEndpoint per call through boto3; :class:`~mmelocal.errors.ModelNotReadyError`
    on ModelNotReadyException."""

    from mmelocal.aws.session import error_code as client_error_code

    session = new_session(region_name=config.region)
    if session.region_name is None and worker["endpoint_url"]:
        session = new_session(region_name=LOCAL_REGION)
    unsigned: dict[str, Any] = {}
    if session.get_credentials() is None and worker["endpoint_url"]:
        from botocore import UNSIGNED

        unsigned["signature_version"] = UNSIGNED
    client = aws_client(
        "sagemaker-runtime",
        RUNTIME,
        session=session,
        endpoint_url=worker["endpoint_url"],
        **unsigned,
    )

    def send(target: str) -> None:
        try:
            client.invoke_endpoint(
                EndpointName=worker["endpoint_name"],
                TargetModel=target,
                Body=config.payload,
                ContentType=config.content_type,
            )["Body"].read()
        except Exception as exc:
            if client_error_code(exc) == MODEL_NOT_READY:
                raise ModelNotReadyError(str(exc), target_model=target) from exc
            raise BenchError(f"pre-warm request to {target} failed: {exc}") from exc

    return send


def _http_sender(config: LoadTestConfig, worker: dict[str, Any]) -> Callable[[str], None]:
    """One POST per call (invocations or KServe v2); :class:`~mmelocal.errors.ModelNotReadyError`
    on ModelNotReadyException, the error code read as boto3 reads it
    (:func:`~mmelocal.facts.invoke_errors.error_code`)."""
    import urllib.error
    import urllib.request

    def send(target: str) -> None:
        path = (
            f"/v2/models/{target}/infer"
            if worker["mode"] == "triton-v2"
            else f"/endpoints/{worker['endpoint_name']}/invocations"
        )
        request = urllib.request.Request(
            worker["host"] + path,
            data=config.payload,
            method="POST",
            headers={"Content-Type": config.content_type, TARGET_HEADER: target},
        )
        try:
            with urllib.request.urlopen(
                request, timeout=max(config.timeout_s, DIRECT_LOAD_TIMEOUT_S)
            ) as resp:
                resp.read()
        except urllib.error.HTTPError as exc:
            body = exc.read()
            detail = body[:300].decode("utf-8", "replace")
            if error_code(exc.code, dict(exc.headers.items()), body) == MODEL_NOT_READY:
                raise ModelNotReadyError(detail, target_model=target) from exc
            raise BenchError(
                f"pre-warm request to {target} answered HTTP {exc.code}: {detail}"
            ) from exc
        except OSError as exc:
            raise BenchError(f"pre-warm request to {target} failed: {exc}") from exc

    return send


def _run_distributed(
    generators: LoadGenerators,
    local: int,
    config_path: Path,
    out_path: Path,
    tmpdir: Path,
    shape: LoadShape,
    progress: Callable[[LoadProgress], None] | None,
) -> dict[str, Any]:
    from mmelocal.runtime.server_config import pick_free_port

    port = generators.master_port
    if port is None:
        port = DEFAULT_MASTER_PORT if generators.remote_workers else pick_free_port()
    expect = local + generators.remote_workers
    master = [
        "master",
        str(config_path),
        str(out_path),
        "--bind-host",
        generators.master_host,
        "--bind-port",
        str(port),
        "--expect",
        str(expect),
        "--connect-timeout",
        str(generators.connect_timeout_s),
    ]
    workers = [
        (
            ["worker", "--master-host", generators.connect_host, "--master-port", str(port)],
            tmpdir / f"worker-{n}.log",
        )
        for n in range(1, local + 1)
    ]
    if generators.remote_workers and endpoint_is_local(
        {"host": f"http://{generators.master_host}"}
    ):
        logger.warning(
            "the Locust master binds %s (loopback): only workers on this machine can join; "
            "give --master-host with an address the other machines reach",
            generators.master_host,
        )
    if generators.remote_workers:
        logger.info(
            "Locust master on %s:%d waits %.0f s for %d remote workers: start them with "
            "mmelocal loadtest-worker --master-host HOST --master-port %d",
            generators.master_host,
            port,
            generators.connect_timeout_s,
            generators.remote_workers,
            port,
        )
    return _run_worker(
        DIST_MODULE,
        master,
        out_path,
        tmpdir / "master.log",
        shape,
        progress,
        workers=workers,
        extra_s=generators.connect_timeout_s,
    )


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    package_root = str(Path(__file__).resolve().parents[3])  # the folder holding mmelocal/
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    return env


def _run_worker(
    module: str,
    args: list[str],
    out_path: Path,
    err_path: Path,
    shape: LoadShape,
    progress: Callable[[LoadProgress], None] | None,
    *,
    workers: Sequence[tuple[list[str], Path]] = (),
    extra_s: float = 0.0,
) -> dict[str, Any]:
    env = _child_env()
    limit_s = shape.duration_s + 120.0 + extra_s
    children: list[subprocess.Popen[Any]] = []
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            stdout=subprocess.PIPE,
            stderr=err,
            stdin=subprocess.DEVNULL,
            env=env,
            text=True,
            preexec_fn=_die_with_parent if _may_tie_to_thread() else None,
        )
        watchdog = threading.Timer(limit_s, proc.kill)
        watchdog.daemon = True
        watchdog.start()
        started = time.monotonic()
        try:
            for worker_args, log_path in workers:
                with open(log_path, "wb") as log:
                    children.append(
                        subprocess.Popen(
                            [sys.executable, "-m", module, *worker_args],
                            stdout=subprocess.DEVNULL,
                            stderr=log,
                            stdin=subprocess.DEVNULL,
                            env=env,
                            preexec_fn=_die_with_parent if _may_tie_to_thread() else None,
                        )
                    )
            assert proc.stdout is not None
            for line in proc.stdout:
                event = _parse_event(line)
                if event and event.get("event") == "progress" and progress is not None:
                    progress(LoadProgress(**{k: v for k, v in event.items() if k != "event"}))
            code = proc.wait(timeout=30)
        finally:
            watchdog.cancel()
            for child in (proc, *children):
                if child.poll() is None and child is not proc:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        child.wait(timeout=5)  # a worker quits after its final report
                if child.poll() is None:
                    child.kill()
                    child.wait()
    if time.monotonic() - started >= limit_s:
        raise BenchError(f"the load test did not finish within {limit_s:.0f} s and was stopped")
    if code != 0 or not out_path.exists():
        tail = "\n".join(err_path.read_text("utf-8", errors="replace").splitlines()[-15:])
        role = "Locust master" if workers or module == DIST_MODULE else "Locust worker"
        raise BenchError(f"the {role} failed (exit code {code}):\n{tail}")
    result: dict[str, Any] = json.loads(out_path.read_text("utf-8"))
    return result


def _may_tie_to_thread() -> bool:
    # PR_SET_PDEATHSIG fires when the *thread* that forked exits: only tie to the main thread
    return (
        sys.platform.startswith("linux") and threading.current_thread() is threading.main_thread()
    )


def _die_with_parent() -> None:  # runs in the child between fork and exec
    import ctypes
    import ctypes.util
    import signal

    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: no Locust left behind if we die


def _parse_event(line: str) -> dict[str, Any] | None:
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        event = json.loads(line)
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


__all__ = [
    "DEFAULT_ENDPOINT_NAME",
    "MODES",
    "LoadGenerators",
    "LoadProgress",
    "LoadTestConfig",
    "LoadTestResult",
    "check_reachable",
    "expand_targets",
    "prewarm",
    "run_loadtest",
    "summary_lines",
]
