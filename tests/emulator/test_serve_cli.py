"""``mmelocal serve``: size parsing, and a real start / SIGTERM that leaves no Triton behind."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from shared_helpers import wait_for

from mmelocal.errors import UserInputError
from mmelocal.runtime.server_config import pick_free_port
from mmelocal.testing.tiny_model import write_tarball


@pytest.mark.triton
def test_serve_starts_answers_and_stops_cleanly(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    write_tarball(store / "m.tar.gz")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mmelocal",
            "serve",
            "--store",
            str(store),
            "--port",
            "0",  # a free one, bound before the banner names it
            "--memory-budget",
            "1GiB",
            "--cache-dir",
            str(tmp_path / "cache"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    lines: list[bytes] = []
    stdout = proc.stdout
    assert stdout is not None
    reader = threading.Thread(target=lambda: lines.extend(iter(stdout.readline, b"")))
    reader.start()
    try:

        def announced() -> str | None:
            assert proc.poll() is None, b"".join(lines).decode(errors="replace")  # exited
            found = re.search(rb"endpoint\s+http://127\.0\.0\.1:(\d+)\b", b"".join(lines))
            return None if found is None else f"http://127.0.0.1:{int(found[1])}"

        url = wait_for(announced, timeout_s=60, what="the banner's endpoint")
        assert not url.endswith(":0")

        def pinged() -> dict[str, str] | None:
            try:
                with urllib.request.urlopen(f"{url}/ping", timeout=1) as r:
                    return dict(json.loads(r.read()))
            except OSError:
                return None

        ping = wait_for(pinged, timeout_s=120, interval_s=0.2, what=f"{url}/ping")
        assert ping["status"] == "Healthy"
        with urllib.request.urlopen(f"{url}/emulator/state", timeout=10) as r:
            triton_pid = json.loads(r.read())["instances"][0]["pid"]
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        reader.join(timeout=60)
    out = b"".join(lines)
    assert proc.returncode == 0, out.decode()
    assert b"MME emulator" in out
    assert not _alive(triton_pid, wait_s=30), "tritonserver outlived mmelocal serve"


def _alive(pid: int, *, wait_s: float) -> bool:
    """True when ``pid`` still runs (and is no zombie) after ``wait_s``."""
    import psutil

    try:
        psutil.Process(pid).wait(timeout=wait_s)
    except psutil.NoSuchProcess:
        return False
    except psutil.TimeoutExpired:
        return True
    return False


def _serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mmelocal", "serve", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _one_line_error(result: subprocess.CompletedProcess[str], words: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert any(words in line for line in lines), result.stderr


def test_serve_port_in_use_fails_before_starting_triton(tmp_path: Path, held_port: int) -> None:
    t0 = time.monotonic()
    result = _serve("--store", str(tmp_path), "--port", str(held_port))
    _one_line_error(result, f"cannot listen on 127.0.0.1:{held_port}")
    assert "choose another --port" in result.stderr
    assert time.monotonic() - t0 < 30
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--store", "{file}"), "is a file, not a folder"),
        (("--store", "{tmp}/missing"), "does not exist"),
        (("--store", "{tmp}", "--memory-budget", "abc"), "size must be a number"),
        (("--store", "{tmp}", "--memory-threshold", "1.5"), "--memory-threshold"),
        (("--store", "{tmp}", "--memory-threshold", "0"), "--memory-threshold"),
        (("--store", "{tmp}", "--instances", "0"), "--instances"),
        (("--store", "{tmp}", "--launcher", "external"), "--triton-url"),
    ],
)
def test_serve_bad_options_are_one_line(tmp_path: Path, args: tuple[str, ...], words: str) -> None:
    (tmp_path / "file.tar.gz").write_bytes(b"x")
    filled = [a.format(tmp=tmp_path, file=tmp_path / "file.tar.gz") for a in args]
    _one_line_error(_serve(*filled), words)


@pytest.mark.parametrize("credentials", [False, True])
def test_serve_s3_store_that_cannot_work_fails_before_the_banner(
    credentials: bool, refused_port: int
) -> None:
    """No credentials, or an S3 endpoint that does not answer: one line and nothing else,
    as for a missing folder. The banner ("MME emulator starting ...", with a made-up
    TargetModel since the store could not be listed) came first, on stdout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_SHARED_CREDENTIALS_FILE="/nonexistent", AWS_CONFIG_FILE="/nonexistent")
    env["AWS_EC2_METADATA_DISABLED"] = "true"
    if credentials:
        env.update(AWS_ACCESS_KEY_ID="any", AWS_SECRET_ACCESS_KEY="any")
    endpoint = f"http://127.0.0.1:{refused_port}"
    args = ["--store", "s3://bucket/prefix", "--s3-endpoint-url", endpoint]
    result = subprocess.run(
        [sys.executable, "-m", "mmelocal", "serve", *args, "--port", str(pick_free_port())],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    words = (
        f"cannot reach the S3 store s3://bucket/prefix/ at {endpoint}"
        if credentials
        else "no AWS credentials for the S3 store s3://bucket/prefix/"
    )
    _one_line_error(result, words)
    assert result.stdout == "" and len(result.stderr.strip().splitlines()) == 1, result


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("memory_threshold", 0.0, "memory_threshold must be in (0, 1]"),
        ("instances", 0, "instances must be >= 1"),
        ("invoke_timeout_s", 0.0, "invoke_timeout_s must be > 0"),
        ("load_timeout_s", -1.0, "load_timeout_s must be > 0"),
        ("watchdog_interval_s", 0.0, "watchdog_interval_s and hot_rps_threshold"),
        ("launcher", "k8s", "launcher must be one of local, docker, external"),
    ],
)
def test_config_names_the_field_and_the_allowed_values(
    field: str, value: object, words: str
) -> None:
    from mmelocal.emulator.emulator_config import EmulatorConfig

    with pytest.raises(UserInputError) as info:
        EmulatorConfig(store="unused", **{field: value})  # type: ignore[arg-type]
    assert words in str(info.value)


@pytest.fixture
def silent_tritonserver(tmp_path: Path) -> Path:
    """A tritonserver that exits at once and writes nothing (so serve stops after its banner)."""
    broken = tmp_path / "bin" / "tritonserver"
    broken.parent.mkdir()
    broken.write_text("#!/bin/sh\nexit 3\n")
    broken.chmod(0o755)
    return broken


def test_the_banner_names_a_target_model_the_store_holds(
    tmp_path: Path, silent_tritonserver: Path
) -> None:
    """It suggested TargetModel='model.tar.gz' whatever the store held."""
    store = tmp_path / "store"
    (store / "team").mkdir(parents=True)
    args = ["--store", str(store), "--port", "0", "--tritonserver", str(silent_tritonserver)]
    empty = " ".join(_serve(*args).stdout.split())
    assert "TargetModel=" not in empty, empty
    hint = f"no model archive yet: write one with `mmelocal package MODEL_DIR --out {store}`"
    assert hint in empty, empty
    write_tarball(store / "team" / "bert-7.tar.gz")
    write_tarball(store / "resnet-2.tar.gz")
    shown = "".join(_serve(*args).stdout.split())  # the banner wraps at the terminal width
    assert "TargetModel='resnet-2.tar.gz'" in shown, shown
    # the call it shows needs credentials and a region to be signed, any will do: on a
    # machine with none, boto3 raised NoCredentialsError (NoRegionError) before sending it
    assert "(anyAWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEYandregionwilldo:" in shown, shown


def test_a_failed_start_keeps_the_log_it_names(tmp_path: Path, silent_tritonserver: Path) -> None:
    """With no --cache-dir the log lives in a temporary cache, which was deleted at exit: the
    error named a log that no longer existed."""
    (tmp_path / "store").mkdir()
    (tmp_path / "tmp").mkdir()
    args = ["--store", str(tmp_path / "store"), "--tritonserver", str(silent_tritonserver)]
    result = subprocess.run(
        [sys.executable, "-m", "mmelocal", "serve", *args, "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "TMPDIR": str(tmp_path / "tmp")},
    )
    assert result.returncode == 2, result.stderr
    err = "".join(result.stderr.split())  # the line wraps at the terminal width
    found = re.search(r"\(log:(/\S+?\.log)\)", err)
    assert found is not None, result.stderr
    assert Path(found[1]).is_file(), result.stderr
    assert Path(found[1]).is_relative_to(tmp_path / "tmp")
