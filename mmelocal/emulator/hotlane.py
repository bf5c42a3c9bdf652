"""Cache hits served with callbacks: the hot lane of the fast front server.

On a warm endpoint almost every request targets a model that is already loaded, and the
emulator's work for it is bookkeeping: count it in flight, forward it, record metrics,
answer. The coroutine path (:mod:`.answers` -> :meth:`.Emulator.invoke`) spends more
CPU on its task, coroutine chain and futures than on that work, and a proxy's CPU is
what it takes away from Triton and the clients on the same machine. The lane does the
same work from the parser's callback to the upstream reply's callback, with one small
object per request.

It takes a request only when everything is ordinary: a known, valid target loaded and
ready on an instance that is up, and an idle keep-alive connection to that instance.
Otherwise (cold or unknown target, no idle connection, a header the lane does not
handle) it declines and the caller uses the coroutine path. When Triton answers 404 or
507, or the connection breaks, the request goes back to the coroutine path, which
recovers (reload, evict and retry, 503 when Triton is gone) exactly as it does for its
own requests. The answers are built by the same functions as the coroutine path's.
"""

from __future__ import annotations

import time
from typing import Protocol

from mmelocal.emulator.answers import (
    FORWARDED_HEADERS,
    SAGEMAKER_BINARY,
    Answer,
    invocation_answer,
    invocation_error,
    v2_answer,
    v2_infer_error,
)
from mmelocal.emulator.emulator import RECOVERABLE_STATUSES, Emulator, InvokeResult
from mmelocal.emulator.instance import TritonInstance
from mmelocal.emulator.sagemaker_control import late_reply
from mmelocal.emulator.upstream import (
    Reply,
    UpstreamConnection,
    UpstreamError,
    UpstreamTimeoutError,
)
from mmelocal.runtime.sagemaker import TARGET_MODEL_HEADER

_TARGET = TARGET_MODEL_HEADER.lower().encode()
_FORWARDED = tuple((name.lower().encode(), name.encode()) for name in FORWARDED_HEADERS)
_JSON = b"application/json"
_BINARY = SAGEMAKER_BINARY.encode()
_V2_LENGTH = b"inference-header-content-length"


class Requester(Protocol):
    """Where the lane hands a request's outcome (the front server's connection)."""

    def hot_done(self, request: object, answer: Answer) -> None:
        """Write the answer to the client."""

    def hot_fallback(self, request: object) -> None:
        """Serve the request on the coroutine path instead."""


class HotLane:
    """Serves cache hits of one emulator with callbacks (see the module docstring)."""

    def __init__(self, emulator: Emulator) -> None:
        self.emulator = emulator
        #: request heads up to the Content-Length value, per target and forwarded headers
        self._heads: dict[tuple[bytes, bytes, bytes, bytes], bytes] = {}

    def invocation(
        self,
        name: str,
        headers: dict[bytes, bytes],
        body: bytes,
        request: object,
        requester: Requester,
    ) -> bool:
        """``InvokeEndpoint`` for endpoint ``name``; False when the lane declines."""
        configured = self.emulator.config.endpoint_name
        if configured is not None and name != configured:
            return False
        if len(body) > self.emulator.config.max_payload_bytes:
            return False  # the coroutine path answers 413
        raw_target = headers.get(_TARGET)
        if raw_target is None:
            return False
        content_type = headers.get(b"content-type") or _JSON
        return self._start(raw_target, content_type, headers, body, request, requester, v2=False)

    def v2_infer(
        self,
        target: str,
        headers: dict[bytes, bytes],
        body: bytes,
        request: object,
        requester: Requester,
    ) -> bool:
        """KServe v2 ``infer`` for ``target``; False when the lane declines."""
        if b"content-encoding" in headers:
            return False  # inflated on the coroutine path, as Triton's v2 endpoint does
        length = headers.get(_V2_LENGTH)
        content_type = _BINARY + length if length else _JSON
        raw_target = target.encode("utf-8", "surrogateescape")
        return self._start(raw_target, content_type, headers, body, request, requester, v2=True)

    def _start(
        self,
        raw_target: bytes,
        content_type: bytes,
        headers: dict[bytes, bytes],
        body: bytes,
        request: object,
        requester: Requester,
        *,
        v2: bool,
    ) -> bool:
        emulator = self.emulator
        try:
            target = raw_target.decode("utf-8")
        except UnicodeDecodeError:
            return False  # the coroutine path refuses it
        if not emulator.known_target(target):
            return False
        inst = emulator.router.pick_ready(target)
        if inst is None:
            return False
        upstream = inst.upstream
        conn = upstream.take_idle()
        if conn is None:
            return False
        extra = b""
        for name, title in _FORWARDED:
            value = headers.get(name)
            if value is not None:
                extra += b"%s: %s\r\n" % (title, value)
        key = (raw_target, content_type, extra, upstream.hostport)
        head = self._heads.get(key)
        if head is None:
            if len(self._heads) > 10_000:
                self._heads.clear()
            head = self._heads[key] = (
                b"POST /models/%s/invoke HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\n%s%s: %s"
                b"\r\nContent-Length: "
                % (
                    inst.models[target].key.encode(),
                    upstream.hostport,
                    content_type,
                    extra,
                    TARGET_MODEL_HEADER.encode(),
                    raw_target,
                )
            )
        inst.hold_ready(target)  # pick_ready found it ready, on this same loop turn
        call = _Call(emulator, inst, target, conn, request, requester, v2)
        call.sent_s = time.perf_counter()
        conn.send(
            b"%s%d\r\n\r\n%s" % (head, len(body), body),
            call.on_reply,
            timeout_s=inst.options.invoke_timeout_s,
        )
        return True


class _Call:
    """One request on the lane, from its forwarding to its answer."""

    __slots__ = (
        "conn",
        "emulator",
        "inst",
        "request",
        "requester",
        "sent_s",
        "start_s",
        "target",
        "v2",
    )

    def __init__(
        self,
        emulator: Emulator,
        inst: TritonInstance,
        target: str,
        conn: UpstreamConnection,
        request: object,
        requester: Requester,
        v2: bool,
    ) -> None:
        self.start_s = time.perf_counter()
        self.emulator = emulator
        self.inst = inst
        self.target = target
        self.conn = conn
        self.request = request
        self.requester = requester
        self.v2 = v2
        self.sent_s = 0.0

    def on_reply(self, reply: Reply | None, error: UpstreamError | None) -> None:
        """Triton answered (or the connection failed): record, answer or fall back."""
        latency_s = time.perf_counter() - self.sent_s
        inst, target = self.inst, self.target
        inst.release(target)
        inst.upstream.give_back(self.conn)
        if isinstance(error, UpstreamTimeoutError):
            status, headers, data = late_reply(inst.options.invoke_timeout_s)
        elif error is not None or reply is None or reply[0] in RECOVERABLE_STATUSES:
            # a broken connection, a model Triton lost, or no memory: the coroutine path
            # recovers (new connection or 503, reload, evict and retry)
            self.emulator.metrics.counters["HotLaneFallbacks"] += 1
            self.requester.hot_fallback(self.request)
            return
        else:
            status, headers, data = reply
        emulator = self.emulator
        emulator.note_served(cache_hit=True, wait_s=0.0, model_latency_s=latency_s)
        result = InvokeResult(
            status=status,
            body=data,
            headers=headers,
            cache_hit=True,
            model_latency_s=latency_s,
            wait_s=0.0,
            instance=inst.index,
        )
        try:
            answer = v2_answer(result) if self.v2 else invocation_answer(emulator, target, result)
        except Exception as exc:  # never leave the client without an answer
            answer = v2_infer_error(exc, target) if self.v2 else invocation_error(exc, target)
        metrics = emulator.metrics
        metrics.counters["HotLaneInvocations"] += 1
        metrics.record_invocation(answer.status, time.perf_counter() - self.start_s - latency_s)
        self.requester.hot_done(self.request, answer)


__all__ = ["HotLane", "Requester"]
