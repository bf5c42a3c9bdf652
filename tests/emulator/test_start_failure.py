"""A Triton that cannot start fails ``EmulatorServer.start`` with tritonserver's own words;
a stop while it starts ends the start and stops what it spawned.

The setup error used to be handed over before the server's loop closed, so the caller's
``stop()`` could meet a loop closed under it and raise "Event loop is closed" in place of
the reason (the local AWS showed that as an endpoint's FailureReason, once, under load)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import psutil
import pytest
from shared_helpers import InBackground, wait_for

from mmelocal.emulator import server as server_module
from mmelocal.emulator.emulator import EmulatorConfig
from mmelocal.emulator.server import EmulatorServer
from mmelocal.errors import EmulatorError


def _emulator_threads() -> list[threading.Thread]:
    """The emulator loop threads of this process (any test's)."""
    return [t for t in threading.enumerate() if t.name == "mme-emulator"]


@pytest.fixture
def broken_tritonserver(tmp_path: Path) -> Path:
    broken = tmp_path / "tritonserver"
    broken.write_text("#!/bin/sh\necho 'tritonserver: cannot start here' >&2\nexit 3\n")
    broken.chmod(0o755)
    return broken


def test_the_reason_survives_a_loop_closing_as_the_caller_stops(
    tmp_path: Path, broken_tritonserver: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The caller's stop() runs once the server's loop is closed, while its thread still
    lives (the waits are bounded: where the error is handed over only after the close, the
    caller cannot be in stop() yet, and the thread's wait times out)."""
    closed, stopping, stopped = threading.Event(), threading.Event(), threading.Event()
    real_loop, real_stop = server_module.new_event_loop, EmulatorServer.stop

    def lingering_loop() -> asyncio.AbstractEventLoop:
        loop = real_loop()
        close = loop.close

        def close_then_linger() -> None:
            close()
            closed.set()
            if stopping.wait(timeout=0.5):
                stopped.wait(timeout=0.5)

        loop.close = close_then_linger  # type: ignore[method-assign]
        return loop

    def stop(self: EmulatorServer) -> None:
        stopping.set()
        closed.wait(timeout=0.5)
        try:
            real_stop(self)
        finally:
            stopped.set()

    monkeypatch.setattr(server_module, "new_event_loop", lingering_loop)
    monkeypatch.setattr(EmulatorServer, "stop", stop)
    (tmp_path / "store").mkdir()
    threads_before = set(_emulator_threads())  # another module's may still be ending
    server = EmulatorServer(
        EmulatorConfig(store=str(tmp_path / "store"), tritonserver=broken_tritonserver)
    )
    with pytest.raises(Exception, match="cannot start here"):
        server.start()
    server.stop()  # idempotent after a failed start
    assert not [t for t in _emulator_threads() if t not in threads_before]


def test_a_stop_ends_a_start_under_way_and_stops_its_triton(tmp_path: Path) -> None:
    """``stop()`` from another thread while ``start()`` waits for a Triton that has not
    answered yet (the local AWS shutting down with an endpoint Creating) ends the start at
    once with EmulatorError, and the tritonserver it spawned is gone. The stop used to
    halt the loop under the start: start() raised RuntimeError ("Event loop stopped before
    Future completed") and the tritonserver went on running."""
    pid_file = tmp_path / "pid"
    never_ready = tmp_path / "tritonserver"
    never_ready.write_text(f"#!/bin/sh\necho $$ > {pid_file}\nexec sleep 600\n")
    never_ready.chmod(0o755)
    (tmp_path / "store").mkdir()
    threads_before = set(_emulator_threads())  # another module's may still be ending
    server = EmulatorServer(EmulatorConfig(store=str(tmp_path / "store"), tritonserver=never_ready))
    starting = InBackground(server.start)
    pid = int(wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), timeout_s=60))
    server.stop()
    assert starting.join(timeout_s=60)
    failures = starting.failures
    assert len(failures) == 1 and isinstance(failures[0], EmulatorError), failures
    assert "stopped while it was starting" in str(failures[0])
    assert not _runs(pid)
    assert not [t for t in _emulator_threads() if t not in threads_before]


def _runs(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
