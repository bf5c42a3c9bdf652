"""What tests in several folders share (``from shared_helpers import ...``; ``tests/`` is on
the path through ``tests/conftest.py``): polling (the suite's one wait helper, in a thread
or inside an event loop), the tritonservers a test started, waiting for an endpoint to go,
the tiny model as a reference tarball, every item of a SageMaker listing, a fresh name for
what a test makes in a shared service, a local AWS of a test's own whose tritonserver is a
stand-in script, and a stand-in ``pynvml`` for the GPU paths on a machine without one."""

from __future__ import annotations

import asyncio
import contextlib
import tarfile
import tempfile
import threading
import time
import types
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import psutil

from mmelocal.testing.tiny_model import expected, write_model

if TYPE_CHECKING:
    import pytest

    from mmelocal.localaws import LocalAws

T = TypeVar("T")


def wait_for(
    check: Callable[[], T], *, timeout_s: float = 120.0, interval_s: float = 0.05, what: str = ""
) -> T:
    """Poll ``check`` until it returns something true (returned), or fail after
    ``timeout_s`` (generous: loads crawl on a busy 2-core CI box) saying ``what`` was
    awaited. The one polling loop of the suite: tests do not write their own."""
    deadline = time.monotonic() + timeout_s
    while (value := _checked(check, deadline, timeout_s, what)) is None:
        time.sleep(interval_s)
    return value


async def wait_for_async(
    check: Callable[[], T], *, timeout_s: float = 120.0, interval_s: float = 0.05, what: str = ""
) -> T:
    """:func:`wait_for` inside a running event loop: between checks it awaits
    ``asyncio.sleep(interval_s)`` (0 yields once), so the loop's other tasks run."""
    deadline = time.monotonic() + timeout_s
    while (value := _checked(check, deadline, timeout_s, what)) is None:
        await asyncio.sleep(interval_s)
    return value


def _checked(check: Callable[[], T], deadline: float, timeout_s: float, what: str) -> T | None:
    """``check()`` when true; None to poll again; AssertionError once past ``deadline``."""
    value = check()
    if value:
        return value
    if time.monotonic() > deadline:
        raise AssertionError(f"{what or 'waited'}: still {value!r} after {timeout_s:g}s")
    return None


def tritonservers() -> list[psutil.Process]:
    """The tritonserver processes this test process started (and that still run)."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.name().startswith("tritonserver") and child.status() != "zombie":
                found.append(child)
        except psutil.NoSuchProcess:
            continue
    return found


def wait_gone(sm: Any, name: str, timeout_s: float = 180.0) -> None:
    """Wait until DescribeEndpoint no longer knows ``name`` (boto3's ``endpoint_deleted``
    waiter, polled every 0.2 s: as the service does, the endpoint stays Deleting while its
    instances stop, then goes)."""
    sm.get_waiter("endpoint_deleted").wait(
        EndpointName=name, WaiterConfig={"Delay": 0.2, "MaxAttempts": int(timeout_s / 0.2)}
    )


def delete_endpoint(sm: Any, name: str, timeout_s: float = 180.0) -> None:
    """DeleteEndpoint once ``name`` has left Creating and Updating: the service refuses to
    delete an endpoint in progress ("Cannot update in-progress endpoint")."""

    def settled() -> bool:
        return sm.describe_endpoint(EndpointName=name)["EndpointStatus"] not in (
            "Creating",
            "Updating",
        )

    wait_for(settled, timeout_s=timeout_s, interval_s=0.2, what=f"{name} out of progress")
    sm.delete_endpoint(EndpointName=name)


def gated_tritonserver(gate: Path) -> str:
    """A stand-in tritonserver (``sh``) that waits until ``gate`` exists, then exits 3: an
    endpoint that stays Creating for as long as the test needs, then fails."""
    return f"#!/bin/sh\nwhile [ ! -e {gate} ]; do sleep 0.05; done\nexit 3\n"


@contextlib.contextmanager
def local_aws_running(
    script: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[LocalAws]:
    """A local AWS of the test's own whose endpoints start ``script`` (``sh``) as their
    tritonserver, with the test's AWS environment pointed at it."""
    from mmelocal.localaws import LocalAws

    server = tmp_path / "tritonserver"
    server.write_text(script)
    server.chmod(0o755)
    with LocalAws(tritonserver=server, data_dir=tmp_path / "data") as aws:
        for key, value in aws.env().items():
            monkeypatch.setenv(key, value)
        yield aws


def listed(client: Any, method: str, **query: Any) -> list[dict[str, Any]]:
    """Every item a SageMaker ``list_*`` (``list_endpoints``, ``list_models``,
    ``list_endpoint_configs``) answers to ``query``, read page by page with boto3's
    paginator: the service cuts a page before it filters (``mmelocal.localaws.listing``),
    so one page may miss matches while a ``NextToken`` remains."""
    key = method.removeprefix("list_").title().replace("_", "")
    pages = client.get_paginator(method).paginate(**query)
    return [item for page in pages for item in page[key]]


class InBackground:
    """``call()`` started on a thread of its own, keeping what it raised (``failures``):
    a start that another thread is to stop."""

    def __init__(self, call: Callable[[], object]) -> None:
        self.failures: list[BaseException] = []

        def run() -> None:
            try:
                call()
            except BaseException as exc:
                self.failures.append(exc)

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def join(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for ``call`` to end; whether it has."""
        self.thread.join(timeout=timeout_s)
        return not self.thread.is_alive()


def unique(prefix: str) -> str:
    """A fresh name, ``prefix`` and 8 hex digits (the session's local AWS and Docker engine
    are shared: what a test makes there is named uniquely)."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def write_reference_tarball(path: Path, *, scale: float, name: str = "tiny") -> Path:
    """The tiny model as ``path`` with the reference data a build records (inputs and the
    outputs the model must answer: the bench's payload)."""
    x = np.arange(8, dtype=np.float32).reshape(2, 4) / 8
    with tempfile.TemporaryDirectory() as work:
        model = write_model(Path(work), name=name, scale=scale)
        np.savez(
            model / "mmelocal_reference.npz",
            **{"input:INPUT0": x, "output:OUTPUT0": expected(x, scale)},
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(path, "w:gz") as tar:
            tar.add(model, arcname=name)
    return path


class StandInNvml(types.ModuleType):
    """A stand-in ``pynvml`` (no GPU here; put it in ``sys.modules``): one device per
    ``used`` entry (index -> bytes in use), ``total_bytes`` each (or ``totals_bytes``, by
    index), named by ``names`` (by index), UUID ``GPU-<index as 8 hex digits>-...``, 42 %
    busy, with pid 4242 holding 1 GiB and pid 1 5 GiB of it."""

    class NVMLError(Exception):
        pass

    def __init__(
        self,
        used: Mapping[int, int],
        total_bytes: int = 16 * 2**30,
        names: tuple[str, ...] = (),
        totals_bytes: tuple[int, ...] = (),
    ) -> None:
        super().__init__("pynvml")
        self.used = dict(used)
        self.total_bytes = total_bytes
        self.names = names
        self.totals_bytes = totals_bytes

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return len(self.used)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, handle: int) -> str:
        return self.names[handle]

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return f"GPU-{handle:08x}-0000-0000-0000-{handle:012x}"

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        total = self.totals_bytes[handle] if self.totals_bytes else self.total_bytes
        return types.SimpleNamespace(used=self.used[handle], total=total)

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any:
        return types.SimpleNamespace(gpu=42)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[Any]:
        return [
            types.SimpleNamespace(pid=4242, usedGpuMemory=2**30),
            types.SimpleNamespace(pid=1, usedGpuMemory=5 * 2**30),
        ]
