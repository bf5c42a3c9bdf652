"""``mmelocal serve``: size parsing, and a real start / SIGTERM that leaves no Triton behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from mmelocal.emulator.platform import parse_size
from mmelocal.errors import UserInputError
from mmelocal.runtime.config import pick_free_port
from mmelocal.testing.tiny_model import write_tarball


@pytest.mark.parametrize(
    ("text", "value"),
    [("4GiB", 4 * 1024**3), ("512MB", 512 * 10**6), ("1.5G", 1_500_000_000), ("1000", 1000)],
)
def test_parse_size(text: str, value: int) -> None:
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "GiB", "-1GiB", "4 parsecs", "0"])
def test_parse_size_refuses(text: str) -> None:
    with pytest.raises(UserInputError, match="size"):
        parse_size(text)


@pytest.mark.triton
def test_serve_starts_answers_and_stops_cleanly(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    write_tarball(store / "m.tar.gz")
    port = pick_free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mmelocal",
            "serve",
            "--store",
            str(store),
            "--port",
            str(port),
            "--memory-budget",
            "1GiB",
            "--cache-dir",
            str(tmp_path / "cache"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{url}/ping", timeout=1) as r:
                    ping = json.loads(r.read())
                    break
            except OSError:
                time.sleep(0.2)
        assert ping["status"] == "Healthy"
        with urllib.request.urlopen(f"{url}/emulator/state", timeout=10) as r:
            triton_pid = json.loads(r.read())["instances"][0]["pid"]
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out.decode()
    assert b"MME emulator" in out
    time.sleep(0.5)
    with pytest.raises(ProcessLookupError):
        os.kill(triton_pid, 0)
