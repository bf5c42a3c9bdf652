"""What the emulator keeps of the shared-memory regions registered through it, and what a
server that comes up is given (no server: the instance's v2 calls are recorded)."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace
from typing import Any

import pytest

from mmelocal.emulator.shared_memory import SharedMemoryRegions

JSON = [("Content-Type", "application/json")]


def _instance(asked: list[str], refuse: str = "", during: Any = None) -> Any:
    async def v2_request(
        method: str, path: str, headers: Any = None, body: bytes = b""
    ) -> SimpleNamespace:
        asked.append(path)
        if during is not None and len(asked) == 1:
            during()  # a register or unregister arrives while the server is given its regions
        await asyncio.sleep(0)
        status = 400 if refuse and refuse in path else 200
        return SimpleNamespace(status=status, body=b'{"error":"Unable to open"}')

    return SimpleNamespace(index=3, control=SimpleNamespace(v2_request=v2_request))


def _register(regions: SharedMemoryRegions, kind: str, name: str) -> None:
    path = f"/v2/{kind}sharedmemory/region/{name}/register"
    regions.registered(kind, name, path, JSON, b"{}")


def test_a_server_that_comes_up_gets_what_is_registered_and_not_unregistered() -> None:
    regions = SharedMemoryRegions()
    for kind, name in (("system", "a"), ("system", "b"), ("cuda", "c"), ("system", "d")):
        _register(regions, kind, name)
    regions.unregistered("system", "b")
    asked: list[str] = []
    asyncio.run(regions.register_on(_instance(asked)))
    assert asked == [
        "/v2/systemsharedmemory/region/a/register",
        "/v2/cudasharedmemory/region/c/register",
        "/v2/systemsharedmemory/region/d/register",
    ]
    regions.unregistered("system", None)  # Triton's unregister with no name: every one
    asked.clear()
    asyncio.run(regions.register_on(_instance(asked)))
    assert asked == ["/v2/cudasharedmemory/region/c/register"]


def test_what_changes_while_a_server_is_given_its_regions_reaches_it() -> None:
    """A register or unregister through the routes goes to the instances up alone: one
    that comes up meanwhile gets the new region, and loses one unregistered meanwhile."""
    regions = SharedMemoryRegions()
    _register(regions, "system", "a")

    def meanwhile() -> None:
        _register(regions, "system", "late")
        regions.unregistered("system", "a")

    asked: list[str] = []
    asyncio.run(regions.register_on(_instance(asked, during=meanwhile)))
    assert asked == [
        "/v2/systemsharedmemory/region/a/register",
        "/v2/systemsharedmemory/region/late/register",
        "/v2/systemsharedmemory/region/a/unregister",
    ]


def test_a_region_the_new_server_refuses_is_logged_and_the_others_registered(
    caplog: pytest.LogCaptureFixture,
) -> None:
    regions = SharedMemoryRegions()
    _register(regions, "system", "gone")
    _register(regions, "system", "kept")
    asked: list[str] = []
    with caplog.at_level(logging.WARNING, logger="mmelocal.emulator.shared_memory"):
        asyncio.run(regions.register_on(_instance(asked, refuse="gone")))
    assert asked[-1] == "/v2/systemsharedmemory/region/kept/register"
    (record,) = caplog.records
    assert "'gone'" in record.getMessage() and "instance 3" in record.getMessage()
    assert set(regions.regions) == {("system", "gone"), ("system", "kept")}
