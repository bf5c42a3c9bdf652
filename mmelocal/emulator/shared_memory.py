"""The shared-memory regions registered through the emulator, for the Tritons that start
later.

A region is registered with each Triton's shared-memory manager
(:mod:`.shared_memory_routes`); a Triton that starts later (a restart after a crash, a
scale-out) has none. :class:`SharedMemoryRegions` keeps what was registered and not
unregistered since, and registers it again on an instance whose server came up, before
the instance takes calls (:meth:`SharedMemoryRegions.register_on`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mmelocal.emulator.instance import TritonInstance

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Registration:
    """One region's register request, as it came: sent again as it is."""

    path: str
    headers: tuple[tuple[str, str], ...]
    body: bytes


class SharedMemoryRegions:
    """The regions registered and not unregistered since, per kind (``system``, ``cuda``)
    and name, in the order they were registered."""

    def __init__(self) -> None:
        self.regions: dict[tuple[str, str], Registration] = {}

    def registered(
        self, kind: str, region: str, path: str, headers: list[tuple[str, str]], body: bytes
    ) -> None:
        """Every instance up took the region ``region`` of ``kind``."""
        self.regions[(kind, region)] = Registration(path=path, headers=tuple(headers), body=body)

    def unregistered(self, kind: str, region: str | None) -> None:
        """The region ``region`` of ``kind`` was unregistered (None: every one of ``kind``,
        as Triton's unregister with no region name does)."""
        for key in [k for k in self.regions if k[0] == kind and region in (None, k[1])]:
            del self.regions[key]

    async def register_on(self, inst: TritonInstance) -> None:
        """Register every region on ``inst``'s server, which just came up (those registered
        while this runs included: they went to the instances up alone). A region the
        server refuses (its key gone from ``/dev/shm``, a CUDA handle no longer valid) is
        logged; the instance comes up all the same (an inference naming the region gets
        Triton's error there)."""
        done: dict[tuple[str, str], Registration] = {}
        while todo := [(k, r) for k, r in self.regions.items() if done.get(k) is not r]:
            for key, registration in todo:
                done[key] = registration
                try:
                    reply = await inst.control.v2_request(
                        "POST", registration.path, list(registration.headers), registration.body
                    )
                except Exception as exc:
                    status, text = 0, str(exc)
                else:
                    status, text = reply.status, reply.body.decode("utf-8", "replace")
                if status != 200:
                    logger.warning(
                        "instance %d: %s shared-memory region %r not registered again: %s",
                        inst.index,
                        *key,
                        text[:300],
                    )
        for kind, region in done:
            if self.regions.get((kind, region)) is None:  # unregistered while this ran
                path = f"/v2/{kind}sharedmemory/region/{region}/unregister"
                try:
                    await inst.control.v2_request("POST", path)
                except Exception as exc:
                    logger.warning("instance %d: %s failed: %s", inst.index, path, exc)


__all__ = ["Registration", "SharedMemoryRegions"]
