"""The one path of every invocation: InvokeEndpoint and KServe v2 ``infer``, warm or cold.

A request is checked, given an instance where its target is ready and a keep-alive
connection to that instance, forwarded in one write, and answered from the reply's
callback. When everything is at hand (a warm target, an idle connection) all of that runs
in the HTTP parser's callback and the reply's, with one small object per request and no
task. When something must be awaited (a cold target's download and load, a new
connection, a recovery after Triton answered 404 or 507), a task awaits it and the
request goes on from the same point: the forwarding, the answer and the metrics are the
same code for every call.

No timer is created per request: the request's deadline (the invocation limit) is a
number the client connection's one deadline check reads (:mod:`.http_server`), which
calls :meth:`Invocation.expire` once it has passed. A success's answer head is encoded
once per content type (:func:`~.answers.encode_invocation_ok`).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
import zlib
from typing import Protocol

from mmelocal.emulator.answers import (
    FORWARDED_HEADERS,
    SAGEMAKER_BINARY,
    Answer,
    encode_invocation_ok,
    encode_v2_ok,
    invocation_answer,
    invocation_error,
    missing_target,
    payload_too_large,
    sagemaker_error,
    v2_error,
    v2_infer_error,
    with_cache_header,
)
from mmelocal.emulator.emulator import RECOVERABLE_STATUSES, Emulator, InvokeResult
from mmelocal.emulator.instance import TritonInstance
from mmelocal.emulator.routes import endpoint_name_error, header_error
from mmelocal.emulator.sagemaker_control import late_reply
from mmelocal.emulator.upstream import (
    Reply,
    UpstreamConnection,
    UpstreamError,
    UpstreamPool,
    UpstreamTimeoutError,
)
from mmelocal.errors import InstanceUnavailableError
from mmelocal.facts.runtime_api import TARGET_VARIANT_HEADER
from mmelocal.facts.sagemaker import (
    CUSTOM_ATTRIBUTES_HEADER,
    INFERENCE_HEADER_CONTENT_LENGTH,
    INFERENCE_ID_HEADER,
    TARGET_MODEL_HEADER,
)
from mmelocal.rules.variants import target_variant_error

_TARGET = TARGET_MODEL_HEADER.lower().encode()
_TARGET_TITLE = TARGET_MODEL_HEADER.encode()
_FORWARDED_NAMES = tuple(name.lower().encode() for name in FORWARDED_HEADERS)
_FORWARDED_TITLES = tuple(name.encode() for name in FORWARDED_HEADERS)
_ENCODING = b"content-encoding"
_JSON = b"application/json"
_BINARY = SAGEMAKER_BINARY.encode()
_V2_LENGTH = INFERENCE_HEADER_CONTENT_LENGTH.lower().encode()
_CUSTOM = CUSTOM_ATTRIBUTES_HEADER.lower()
_CUSTOM_NAME = _CUSTOM.encode()
_INFERENCE_ID = INFERENCE_ID_HEADER.lower().encode()
_TARGET_VARIANT = TARGET_VARIANT_HEADER.lower().encode()
#: the request headers the service validates before the call (absent from most calls)
_CHECKED_HEADERS = frozenset({_CUSTOM_NAME, _INFERENCE_ID, _TARGET_VARIANT})

#: the most a compressed v2 infer body may inflate to (a gzip bomb is refused)
MAX_DECODED_BYTES = 128 * 1024 * 1024
#: what Triton's HTTP front ends inflate (``GetRequestCompressionType``: exact values)
_WBITS = {b"gzip": 16 + zlib.MAX_WBITS, b"deflate": zlib.MAX_WBITS}


def unsupported_encoding() -> Answer:
    """Triton's v2 ``infer`` answer to a Content-Encoding it does not know (http_server.cc,
    ``DecompressBuffer``: ``TRITONSERVER_ERROR_UNSUPPORTED``, which it answers 501, with
    the codings it reads in ``Accept-Encoding``)."""
    answer = v2_error(501, "Unsupported compression type")
    return Answer(501, [("Accept-Encoding", "gzip, deflate"), *answer.headers], answer.body)


def decode_body(encoding: bytes, body: bytes) -> bytes | tuple[int, str]:
    """The body as Triton's HTTP front ends read it (``GetRequestCompressionType``: gzip
    and deflate inflated, ``identity`` or empty as is, exact values), or the status and
    message of the refusal: 0 for a coding Triton does not know, 400 for bad data, 413
    for a body that inflates past :data:`MAX_DECODED_BYTES`."""
    if encoding in (b"", b"identity"):
        return body
    wbits = _WBITS.get(encoding)
    if wbits is None:
        return 0, "Unsupported compression type"
    inflater = zlib.decompressobj(wbits)
    try:
        out = inflater.decompress(body, MAX_DECODED_BYTES + 1)
    except zlib.error as exc:
        return 400, f"request body is not valid {encoding.decode('latin-1')} data: {exc}"
    if len(out) > MAX_DECODED_BYTES or inflater.unconsumed_tail:
        return 413, f"request body inflates to over {MAX_DECODED_BYTES} bytes"
    return out


def sagemaker_encoding_reply(status: int, message: str) -> Reply:
    """What Triton's SageMaker front end answers an invoke whose body it cannot inflate
    (``SageMakerMMEHandleInfer``): 415 with no body and the codings it reads in
    ``Accept-Encoding`` for an unknown coding (``status`` 0); its JSON error (400) for
    anything else :func:`decode_body` refuses: bad data (400) and a body that inflates past
    :data:`MAX_DECODED_BYTES` (413 there: mmelocal's own guard, answered as Triton answers
    a failed inflate)."""
    if status == 0:
        return Reply(415, {"accept-encoding": "gzip, deflate"}, b"")
    body = json.dumps({"error": message}, separators=(",", ":")).encode()
    return Reply(400, {"content-type": "application/json"}, body)


class Requester(Protocol):
    """Where an invocation's answer goes (the client connection)."""

    def answered(self, request: object, answer: Answer | bytes, status: int) -> None:
        """Write ``answer`` (an Answer, or bytes already encoded) to ``request``'s client."""


class InvocationPath:
    """Starts the invocations of one emulator; keeps the request heads it forwards."""

    def __init__(self, emulator: Emulator) -> None:
        self.emulator = emulator
        self.invoke_timeout_s = emulator.config.invoke_timeout_s
        #: the production variant the answers name
        self.variant = emulator.config.variant_name
        #: request heads up to the Content-Length value, per target, content type,
        #: forwarded headers' values and upstream
        self.heads: dict[tuple[bytes, bytes, tuple[bytes | None, ...], bytes], bytes] = {}


class Invocation:
    """One request on the path, from its checks to its answer."""

    # What every request sets is set in __init__ and _begin; the rest starts as these
    # class attributes, so a warm call assigns only what it changes (no __slots__: a slot
    # cannot have a class default).
    v2 = False
    target = ""
    raw_target = b""
    content_type = _JSON
    #: the values of the forwarded headers (None: absent), in FORWARDED_HEADERS' order
    forwarded: tuple[bytes | None, ...] = ()
    body = b""
    inst: TritonInstance | None = None
    conn: UpstreamConnection | None = None
    #: the connections ``conn`` came from
    pool: UpstreamPool | None = None
    task: asyncio.Future[None] | None = None
    #: when the request in flight to Triton is late (perf_counter seconds)
    deadline = math.inf
    sent_s = 0.0
    #: whether its model was loaded when the call arrived: the first attempt's (the one
    #: ``ModelCacheHit`` sample a call is, however many times it is forwarded)
    cache_hit = True
    #: the call got as far as its model (its target passed the checks): a failure is a
    #: ModelCacheHit sample too, :attr:`cache_hit`'s
    routed = False
    #: the time it waited for its model's load, every attempt's
    wait_s = 0.0
    #: recoveries after a 404 or 507 (one), a broken reused connection (one)
    attempts = 0
    fresh = False
    done = False
    #: Triton's answer to a body it cannot inflate, given once the target is ready
    refused: Reply | None = None

    def __init__(
        self, path: InvocationPath, request: object, requester: Requester, keep_alive: bool
    ) -> None:
        self.start_s = time.perf_counter()
        self.path = path
        self.emulator = path.emulator
        self.request = request
        self.requester = requester
        self.keep_alive = keep_alive

    # -- the two routes' checks ------------------------------------------------------------
    def invoke_endpoint(self, name: str, headers: dict[bytes, bytes], body: bytes) -> None:
        """``POST /endpoints/{name}/invocations``: the service's checks, then the call."""
        refused = endpoint_name_error(name)
        if refused is not None:  # refused before it reaches an endpoint: no metrics
            self._answer(sagemaker_error(400, "ValidationError", refused), record=False)
            return
        if not _CHECKED_HEADERS.isdisjoint(headers):  # rare: one C call when absent
            refused = self._header_refusal(name, headers)
            if refused is not None:  # the service's input validation, as the name's
                self._answer(sagemaker_error(400, "ValidationError", refused), record=False)
                return
        config = self.emulator.config
        if len(body) > config.max_payload_bytes:
            self._answer(payload_too_large(config.max_payload_bytes))
            return
        if config.endpoint_name is not None and name != config.endpoint_name:
            # another endpoint's call: none of this one's metrics (they name this one)
            not_found = sagemaker_error(400, "ValidationError", f"Endpoint {name} not found.")
            self._answer(not_found, record=False)
            return
        raw_target = headers.get(_TARGET)
        if raw_target is None:
            self._answer(missing_target())
            return
        encoding = headers.get(_ENCODING)
        if encoding is not None and encoding != b"identity":
            # Triton's SageMaker front end inflates the body, or refuses it (the wheel's
            # build does neither, so the emulator does what the front end's source does)
            decoded = decode_body(encoding, body)
            if isinstance(decoded, tuple):
                self.refused = sagemaker_encoding_reply(*decoded)
            else:
                body = decoded
            headers = {k: v for k, v in headers.items() if k != _ENCODING}
        self._begin(raw_target, headers.get(b"content-type") or _JSON, headers, body)

    def _header_refusal(self, name: str, headers: dict[bytes, bytes]) -> str | None:
        """The service's refusal of a ``CustomAttributes``, ``InferenceId`` or
        ``TargetVariant`` header (:func:`~.routes.header_error`,
        :func:`~mmelocal.rules.variants.target_variant_error`: this endpoint serves one
        variant), else None. Another endpoint's call is not judged here: it is "not found"
        whatever variant it names."""
        refused = header_error(headers.get(_CUSTOM_NAME), headers.get(_INFERENCE_ID))
        wanted = headers.get(_TARGET_VARIANT)
        config = self.emulator.config
        if refused is not None or wanted is None:
            return refused
        if config.endpoint_name is not None and name != config.endpoint_name:
            return None
        variant = wanted.decode("utf-8", "surrogateescape")
        return target_variant_error(variant, name, [config.variant_name])

    def v2_infer(self, target: str, headers: dict[bytes, bytes], body: bytes) -> None:
        """``POST /v2/models/{target}/infer``: the body inflated as Triton's v2 endpoint
        does, the binary extension translated to the SageMaker content type."""
        self.v2 = True
        encoding = headers.get(_ENCODING)
        if encoding is not None:
            decoded = decode_body(encoding, body)
            if isinstance(decoded, tuple):  # Triton's own answer: no metrics
                status, message = decoded
                answer = unsupported_encoding() if status == 0 else v2_error(status, message)
                self._answer(answer, record=False)
                return
            body = decoded
            headers = {k: v for k, v in headers.items() if k != _ENCODING}
        length = headers.get(_V2_LENGTH)
        content_type = _BINARY + length if length else _JSON
        self._begin(target.encode("utf-8", "surrogateescape"), content_type, headers, body)

    def _begin(
        self, raw_target: bytes, content_type: bytes, headers: dict[bytes, bytes], body: bytes
    ) -> None:
        target = raw_target.decode("utf-8", "surrogateescape")
        self.target, self.raw_target, self.content_type, self.body = (
            target,
            raw_target,
            content_type,
            body,
        )
        self.forwarded = tuple(map(headers.get, _FORWARDED_NAMES))
        emulator = self.emulator
        if not emulator.known_target(target):
            try:
                emulator.check_target(target)
            except Exception as exc:
                self._fail(exc)
                return
        self._attempt()

    # -- getting an instance and a connection ---------------------------------------------
    def _attempt(self) -> None:
        """Forward now when the target is ready and a connection idle, else await both."""
        target = self.target
        self.routed = True
        inst = None if self.fresh else self.emulator.router.hold_ready(target)
        if inst is not None:
            pool = inst.upstream
            conn = pool.take_idle()
            if conn is not None:  # a hit: cache_hit's default, on the first attempt
                self._send(inst, pool, conn)
                return
            inst.release(target)
        self.task = asyncio.ensure_future(self._prepare())

    async def _prepare(self) -> None:
        emulator, target = self.emulator, self.target
        first = self.attempts == 0 and not self.fresh
        try:
            if first:
                self.cache_hit = False  # until the acquire says: not loaded where it went
            inst = emulator.router.pick(target)
            wait_s = emulator.config.load_wait_timeout_s
            acquired = await inst.acquire(target, wait_timeout_s=wait_s)
            if first:
                self.cache_hit = acquired.cache_hit
            self.wait_s += acquired.wait_s
            pool = inst.upstream
            try:
                conn = await pool.connection(fresh=self.fresh)
            except UpstreamError as exc:
                inst.release(target)
                raise inst.connection_error(exc) from exc
            except BaseException:
                inst.release(target)
                raise
        except Exception as exc:
            self.task = None
            self._fail(exc)
            return
        self.task = None
        self._send(inst, pool, conn)

    # -- forwarding and the reply ------------------------------------------------------------
    def _send(self, inst: TritonInstance, upstream: UpstreamPool, conn: UpstreamConnection) -> None:
        self.pool = upstream
        if self.refused is not None:  # the front end answers without running the model
            self.inst, self.conn = inst, conn
            self.sent_s = time.perf_counter()
            self.on_reply(self.refused, None)
            return
        key = (self.raw_target, self.content_type, self.forwarded, upstream.hostport)
        heads = self.path.heads
        head = heads.get(key)
        if head is None:
            entry = inst.models.get(self.target)
            if entry is None:  # the instance stopped or restarted since the call acquired it
                inst.release(self.target)
                upstream.give_back(conn)
                self._fail(InstanceUnavailableError(f"instance {inst.index} is restarting; retry"))
                return
            if len(heads) > 10_000:
                heads.clear()
            head = heads[key] = (
                b"POST /models/%s/invoke HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\n%s%s: %s"
                b"\r\nContent-Length: "
                % (
                    entry.key.encode(),
                    upstream.hostport,
                    self.content_type,
                    b"".join(
                        b"%s: %s\r\n" % (title, value)
                        for title, value in zip(_FORWARDED_TITLES, self.forwarded, strict=True)
                        if value is not None
                    ),
                    _TARGET_TITLE,
                    self.raw_target,
                )
            )
        self.inst, self.conn = inst, conn
        self.sent_s = now = time.perf_counter()
        self.deadline = now + self.path.invoke_timeout_s
        body = self.body
        conn.send(b"%s%d\r\n\r\n%s" % (head, len(body), body), self.on_reply)

    def expire(self) -> None:
        """The deadline passed with no answer: drop the connection (504 for the caller)."""
        conn = self.conn
        if conn is not None:
            conn.expire(self.path.invoke_timeout_s)

    def cancel(self) -> None:
        """The client went away: stop waiting (a load or a recovery goes on without it:
        :meth:`~mmelocal.emulator.instance.TritonInstance.acquire` waits on the load and
        :meth:`_recover` on the recovery through :func:`asyncio.shield`)."""
        task = self.task
        if task is not None and not task.done():
            task.cancel()

    def on_reply(self, reply: Reply | None, error: UpstreamError | None) -> None:
        """Triton answered (or the connection failed): record, answer, or try again."""
        now = time.perf_counter()
        latency_s = now - self.sent_s
        inst, target, conn = self.inst, self.target, self.conn
        assert inst is not None and conn is not None
        self.conn = None
        self.deadline = math.inf
        inst.release(target)
        self.pool.give_back(conn)  # type: ignore[union-attr]
        if error is not None:
            if isinstance(error, UpstreamTimeoutError):
                reply = late_reply(self.path.invoke_timeout_s)
            elif not self.fresh:  # a kept-alive connection Triton closed: once more, new
                self.fresh = True
                self._again()
                return
            else:
                self._fail(inst.connection_error(error))
                return
        assert reply is not None
        status, headers, data = reply
        if status in RECOVERABLE_STATUSES and self.attempts < 1:
            self.attempts += 1
            self.emulator.metrics.counters["InvocationRetries"] += 1
            self.task = asyncio.ensure_future(self._recover(inst, status))
            return
        content_type = headers.get("content-type", "application/json")
        if self.v2:
            answer: Answer | bytes = encode_v2_ok(
                status, content_type, data, keep_alive=self.keep_alive
            )
        elif status == 200 and _CUSTOM not in headers:
            answer = encode_invocation_ok(
                content_type, self.path.variant, self.cache_hit, data, keep_alive=self.keep_alive
            )
        else:
            result = InvokeResult(
                status=status,
                body=data,
                headers=headers,
                cache_hit=self.cache_hit,
                model_latency_s=latency_s,
                wait_s=self.wait_s,
                instance=inst.index,
                log_path=inst.launcher.log_path,
            )
            try:
                answer = invocation_answer(self.emulator, target, result)
            except Exception as exc:  # never leave the client without an answer
                answer = invocation_error(exc, target)
        self.done = True
        self.emulator.metrics.record_served(
            status, now - self.start_s - latency_s, latency_s, self.cache_hit, self.wait_s
        )
        self.requester.answered(self.request, answer, status)

    def _again(self) -> None:
        self.emulator.metrics.counters["InvocationRetries"] += 1
        self._attempt()

    async def _recover(self, inst: TritonInstance, status: int) -> None:
        # shielded: a client that goes away stops waiting, the unload it began finishes
        recovery = asyncio.ensure_future(self.emulator.recover_from(inst, self.target, status))
        recovery.add_done_callback(lambda f: f.cancelled() or f.exception())
        try:
            await asyncio.shield(recovery)
        except Exception as exc:
            self.task = None
            self._fail(exc)
            return
        self.task = None
        self._attempt()

    # -- answering ----------------------------------------------------------------------------
    def _fail(self, exc: BaseException) -> None:
        target = self.target
        if self.v2:
            self._answer(v2_infer_error(exc, target))
            return
        answer = invocation_error(exc, target)
        self._answer(with_cache_header(answer, self.cache_hit) if self.routed else answer)

    def _answer(
        self,
        answer: Answer | bytes,
        *,
        status: int = 0,
        model_s: float = 0.0,
        record: bool = True,
    ) -> None:
        self.done = True
        if isinstance(answer, Answer):
            status = answer.status
        if record:
            self.emulator.metrics.record_invocation(
                status,
                time.perf_counter() - self.start_s - model_s,
                self.cache_hit if self.routed else None,
            )
        self.requester.answered(self.request, answer, status)


__all__ = [
    "MAX_DECODED_BYTES",
    "Invocation",
    "InvocationPath",
    "Requester",
    "decode_body",
    "sagemaker_encoding_reply",
    "unsupported_encoding",
]
