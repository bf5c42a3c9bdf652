"""Helpers for the emulator tests that start Triton: raw HTTP, memory sampling, payloads."""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any, TypeVar

import numpy as np
from shared_helpers import wait_for  # noqa: F401 (re-exported)

from mmelocal.runtime.memory import process_tree_memory
from mmelocal.testing.tiny_model import request_json

T = TypeVar("T")


def payload(rows: int = 2, start: float = 0.0) -> tuple[np.ndarray, bytes]:
    """An input batch and its KServe v2 JSON body."""
    x = (np.arange(rows * 4, dtype=np.float32) + start).reshape(rows, 4)
    return x, json.dumps(request_json(x)).encode()


def output_of(body: bytes) -> np.ndarray:
    """OUTPUT0 from a KServe v2 JSON answer."""
    answer = json.loads(body)
    out = answer["outputs"][0]
    return np.asarray(out["data"], dtype=np.float32).reshape(out["shape"])


def raw_request(
    url: str,
    method: str,
    path: str,
    headers: list[tuple[str, str]] | None = None,
    body: bytes = b"",
    timeout_s: float = 120.0,
) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 request on a fresh socket, bytes exactly as given (NUL included)."""
    host, port = url.split("://", 1)[1].split(":")
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}:{port}", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in headers or []]
    lines.append(f"Content-Length: {len(body)}")
    data = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        sock.sendall(data)
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    raw = b"".join(chunks)
    head, _, rest = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    out = {}
    for line in header_lines:
        k, _, v = line.partition(":")
        out[k.strip().lower()] = v.strip()
    return int(status_line.split()[1]), out, rest


class MemorySampler:
    """Samples the summed PSS of a process tree every ``interval_s`` on a thread; keeps the max."""

    def __init__(self, pid_of: Any, interval_s: float = 0.02) -> None:
        self.pid_of = pid_of
        self.interval_s = interval_s
        self.max_bytes = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            used = process_tree_memory(self.pid_of()).pss_bytes
            self.max_bytes = max(self.max_bytes, used)
            self.samples += 1
            time.sleep(self.interval_s)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
