"""Bad input to the bench commands ends in one line and a non-zero exit, never a traceback."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from mmelocal.cli.main import main
from mmelocal.runtime.server_config import pick_free_port


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "not-json.json").write_text("{")
    (tmp_path / "wrong-kind.json").write_text('{"kind": "capacity"}')
    (tmp_path / "unknown-kind.json").write_text('{"kind": "nonsense"}')
    (tmp_path / "simulated.json").write_text('{"source": "simulated", "requests": 3}')
    (tmp_path / "bad.yaml").write_text("stages: [\n")
    (tmp_path / "bad-stage.yaml").write_text("stages:\n  - {users: 5, duration_s: -1}\n")
    (tmp_path / "payload.json").write_text("{}")
    (tmp_path / "a-file").write_text("")
    return tmp_path


PROJECT = ["capacity", "project", "--per-model-mib", "1", "--baseline-mib", "1"]
LOADTEST = ["loadtest", "--endpoint", "http://127.0.0.1:1", "--payload", "{d}/payload.json"]

CASES = {
    "report: not JSON": (["report", "{d}/not-json.json", "--out", "{d}/o"], "not JSON"),
    "report: wrong kind": (["report", "{d}/wrong-kind.json", "--out", "{d}/o"], "'source'"),
    "report: unknown kind": (["report", "{d}/unknown-kind.json", "--out", "{d}/o"], "kind"),
    # a traffic simulate --json is an mmelocal result, just not one report lays out
    "report: a traffic result": (
        ["report", "{d}/simulated.json", "--out", "{d}/o"],
        "not a bench result (no 'kind' field): give the --json that capacity, capacity "
        "estimate, capacity project, loadtest, sweep or benchmark wrote",
    ),
    "report: out under a file": (
        ["report", "{d}/lt.json", "--out", "{d}/a-file/sub"],
        "a-file is a file",
    ),
    "project: threshold 1.5": ([*PROJECT, "--threshold", "1.5"], "threshold"),
    "project: negative MiB": ([*PROJECT[:3], "-3", *PROJECT[4:]], "--per-model-mib"),
    "project: malformed GPU YAML": ([*PROJECT, "--gpus", "{d}/bad.yaml"], "not valid YAML at"),
    "project: json under a file": ([*PROJECT, "--json", "{d}/a-file/x.json"], "is a file"),
    "capacity: zero budget": (["capacity", "x", "--memory-budget", "0"], "memory-budget"),
    # the --endpoint options were dropped without a word on a local measurement
    "sweep: --gpu with --endpoint": (
        ["sweep", "x", "--gpu", "0", "--endpoint", "e"],
        "--gpu chooses this machine's GPUs for a local sweep",
    ),
    "sweep: --gpu not numbers": (["sweep", "x", "--gpu", "a"], "comma-separated integers"),
    "sweep: --s3-uri without --endpoint": (
        ["sweep", "x", "--s3-uri", "s3://b/p/"],
        "--s3-uri is only read with --endpoint",
    ),
    "sweep: --region without --endpoint": (
        ["sweep", "x", "--region", "eu-west-1"],
        "--region is only read with --endpoint",
    ),
    "capacity: --s3-uri without --endpoint": (
        ["capacity", "x", "--s3-uri", "s3://b/p/"],
        "--s3-uri is only read with --endpoint",
    ),
    "capacity: --region without --endpoint": (
        ["capacity", "x", "--region", "eu-west-1"],
        "--region is only read with --endpoint",
    ),
    "capacity: --keep-copies without --endpoint": (
        ["capacity", "x", "--keep-copies"],
        "--keep-copies is only read with --endpoint",
    ),
    "loadtest: count 0": ([*LOADTEST, "--count", "0"], "--count"),
    "loadtest: max users -5": ([*LOADTEST, "--max-users", "-5"], "--max-users"),
    "loadtest: malformed shape YAML": ([*LOADTEST, "--shape", "{d}/bad.yaml"], "not valid YAML"),
    "loadtest: bad stage": ([*LOADTEST, "--shape", "{d}/bad-stage.yaml"], "stages[0]"),
    "loadtest: URL path (not markup)": (
        ["loadtest", "--endpoint", "http://127.0.0.1:1/foo", "--payload", "{d}/payload.json"],
        "/endpoints/NAME/invocations",
    ),
    "sweep: unknown format": (["sweep", "x", "--formats", "bogus"], "format must be one of"),
    "sweep: target-rps 0": (["sweep", "x", "--target-rps", "0"], "target_rps must be > 0"),
    "sweep: users not ints": (["sweep", "x", "--users", "a,b"], "comma-separated integers"),
    "sweep: users not increasing": (["sweep", "x", "--users", "40,5,10"], "e.g. 5,10,40"),
    "sweep: users 0": (["sweep", "x", "--users", "0,5"], "users must be an int >= 1"),
    "sweep: report under a file": (["sweep", "x", "--report", "{d}/a-file/r"], "is a file"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_one_line(name: str, files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bench_helpers import fake_loadtest

    from mmelocal.bench.results import write_result

    write_result(fake_loadtest(), files / "lt.json")
    argv, expected = CASES[name]
    code = main([arg.replace("{d}", str(files)) for arg in argv])
    out, err = capsys.readouterr()
    assert code != 0
    assert "Traceback" not in out + err
    assert expected in err, err
    error_lines = [line for line in err.splitlines() if line.lower().startswith("error")]
    assert len(error_lines) == 1, err


def test_unreachable_endpoint_fails_fast(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    port = pick_free_port()  # nothing listens there
    t0 = time.monotonic()
    code = main(
        [
            "loadtest",
            "--endpoint",
            f"http://127.0.0.1:{port}/endpoints/x",
            "--payload",
            str(files / "payload.json"),
        ]
    )
    _, err = capsys.readouterr()
    assert code == 2 and time.monotonic() - t0 < 10
    assert f"cannot reach http://127.0.0.1:{port}" in err


@pytest.fixture
def always_500() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            body = b"broken"
            self.send_response(500)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/endpoints/x"
    server.shutdown()
    thread.join(10)


def test_every_request_failing_exits_1_and_names_the_error(
    always_500: str, files: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shape = files / "one.yaml"
    shape.write_text("stages:\n  - {users: 2, duration_s: 1}\n")
    out_json = files / "lt-failed.json"
    argv = ["loadtest", "--endpoint", always_500, "--payload", str(files / "payload.json")]
    code = main([*argv, "--shape", str(shape), "--json", str(out_json)])
    out, err = capsys.readouterr()
    assert code == 1 and "every request failed" in err
    assert "error seen" in out and "500" in out
    data = json.loads(out_json.read_text())  # the numbers are still written
    assert data["requests"] > 0 and data["failures"] == data["requests"]


def test_sagemaker_endpoint_name_without_region_or_credentials(
    files: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bare endpoint name goes through boto3: without a region or credentials it used to
    run the whole shape sending nothing and report 'no failures'."""
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_ACCESS_KEY_ID",
                 "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL",
                 "AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(files / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(files / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    argv = ["loadtest", "--endpoint", "my-endpoint", "--payload", str(files / "payload.json")]
    assert main(argv) == 2
    assert "no AWS region for SageMaker endpoint 'my-endpoint'" in capsys.readouterr().err
    assert main([*argv, "--region", "eu-west-1"]) == 2
    assert "no AWS credentials" in capsys.readouterr().err


def test_zero_requests_is_not_reported_as_no_failures() -> None:
    import dataclasses

    from bench_helpers import fake_loadtest

    from mmelocal.bench.loadtest.result import summary_lines

    loadtest = fake_loadtest()
    empty = dataclasses.replace(
        loadtest,
        steps=tuple(
            dataclasses.replace(s, requests=0, successes=0, failures=0) for s in loadtest.steps
        ),
    )
    assert "nothing was measured" in summary_lines(empty)[1]


def test_both_capacity_commands_print_a_copy_with_one_unit_per_size() -> None:
    """capacity and capacity --endpoint share one line (the endpoint's printed 'MiB MiB')."""
    from types import SimpleNamespace

    from mmelocal.cli._bench import copy_line

    record = SimpleNamespace(
        copies=3,
        marginal_bytes=20 * 2**20,
        used_bytes=500 * 2**20,
        delta_bytes=21 * 2**20,
        load_s=1.5,
    )
    line = copy_line(record, timing="first invocation")
    assert "MiB MiB" not in line
    assert "500.0 MiB in use (+21.0 MiB, own 20.0 MiB), first invocation 1.50 s" in line


@pytest.mark.parametrize(
    "argv",
    [
        ["capacity", "model-7.tar.gz", "--memory-budget", "1GiB"],
        ["capacity", "measure", "team/model-7.tgz", "--memory-budget", "1GiB"],
        ["capacity", "estimate", "model-7.tar.gz"],
        ["sweep", "model-7.tar.gz"],
    ],
)
def test_a_missing_tarball_is_named_missing(
    argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mistyped tarball was looked up on the Hugging Face hub as a model name ('cannot
    download model-7.tar.gz from https://huggingface.co ... check the network')."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # old code asked the hub: never leave the host
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "model-7.t" in err and "does not exist" in err and "HF_HUB_OFFLINE" not in err, err
    assert len([line for line in err.splitlines() if line.startswith("error")]) == 1, err
