"""Triton's shared-memory routes on the emulator's v2 face.

``/v2/systemsharedmemory[/region/NAME]/status|register|unregister`` and the same under
``/v2/cudasharedmemory`` (``systemsharedmemory_regex_``, ``cudasharedmemory_regex_``,
``HandleSystemSharedMemory``, ``HandleCudaSharedMemory`` in ``src/http_server.cc`` 2.51)
are passed to the Tritons: a region is registered with Triton's shared-memory manager,
which its SageMaker front end shares (``main.cc`` hands one manager to every endpoint),
so an invocation forwarded to ``/models/KEY/invoke`` reads and writes the region there.

Which instance: an invocation may go to any instance (a hot model has copies), so a
registration is made on every instance that is up, and undone on those that took it when
one refuses it (the caller gets that refusal, as Triton gave it); an unregistration goes
to every instance up; a status is the first instance's. The region must be reachable from
each Triton: a local server shares this machine's ``/dev/shm``; a container does only
with the host's IPC namespace (``--ipc=host``), else Triton refuses the key. What was
registered and not unregistered since is kept (:class:`~.shared_memory.SharedMemoryRegions`)
and registered again on an instance whose server starts later (a restart after a crash,
a scale-out) before it takes calls.
"""

from __future__ import annotations

import re

from mmelocal.emulator.answers import Answer, reply_answer, v2_error, v2_exception
from mmelocal.emulator.emulator import Emulator
from mmelocal.emulator.instance import TritonInstance
from mmelocal.errors import InstanceUnavailableError
from mmelocal.facts.invoke_errors import V2_METHOD_NOT_ALLOWED

#: Triton's two shared-memory routes (the same regex but for the kind)
SHARED_MEMORY_ROUTE = re.compile(
    r"/v2/(system|cuda)sharedmemory(?:/region/([^/]+))?/(status|register|unregister)"
)


async def shared_memory(
    emulator: Emulator,
    method: str,
    path: str,
    match: re.Match[str],
    headers: list[tuple[str, str]],
    body: bytes,
) -> Answer:
    """One request on a shared-memory route (``match``: :data:`SHARED_MEMORY_ROUTE`'s on
    ``path``); the methods Triton takes (status by GET, the others by POST), else 405."""
    kind, region, action = match.groups()
    if method != ("GET" if action == "status" else "POST"):
        return v2_error(405, V2_METHOD_NOT_ALLOWED)
    up = [i for i in emulator.instances if i.up]
    if not up:
        return v2_exception(InstanceUnavailableError("every Triton instance is restarting; retry"))
    try:
        if action == "status":
            return reply_answer(await up[0].control.v2_request(method, path, headers))
        done: list[TritonInstance] = []
        for inst in up:
            reply = await inst.control.v2_request(method, path, headers, body)
            if reply.status != 200 and action == "register":
                undo = f"/v2/{kind}sharedmemory/region/{region}/unregister"
                for other in done:
                    await other.control.v2_request("POST", undo)
                return reply_answer(reply)
            done.append(inst)
    except Exception as exc:
        return v2_exception(exc)
    if reply.status == 200 and action == "register" and region is not None:
        emulator.shared_memory.registered(kind, region, path, headers, body)
    elif reply.status == 200 and action == "unregister":
        emulator.shared_memory.unregistered(kind, region)
    return reply_answer(reply)


__all__ = ["SHARED_MEMORY_ROUTE", "shared_memory"]
