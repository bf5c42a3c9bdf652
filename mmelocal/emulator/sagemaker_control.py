"""The one client to a Triton server: loads, unloads and invokes, and v2 reads.

Loads and unloads go through Triton's SageMaker front end exactly as SageMaker drives it,
each with ``X-Amzn-SageMaker-Target-Model: TARGET`` (Triton names the model after that
header; the URL's KEY is a URL-safe digest of it). Every call is a request on one of two
keep-alive pools (:class:`~mmelocal.emulator.upstream.UpstreamPool`): the SageMaker front
end's, which invocations share (:mod:`.invocation` takes its connections directly), and
the v2 HTTP endpoint's, for model metadata. Every answer is one
:class:`~mmelocal.emulator.upstream.Reply`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from pathlib import Path

from mmelocal.emulator.model_state import UNLOADING, InstanceOptions, ModelEntry
from mmelocal.emulator.upstream import Reply, UpstreamError, UpstreamPool, UpstreamTimeoutError
from mmelocal.errors import EmulatorError, ModelLoadError
from mmelocal.facts.sagemaker import INVOKE_TIMEOUT_S, LOAD_LIMIT_S, REQUEST_TIMEOUT_S
from mmelocal.runtime.sagemaker import TARGET_MODEL_HEADER, load_body

logger = logging.getLogger(__name__)

#: turns a failed connection into the error callers get (the instance decides: died or busy)
ConnectionErrorFactory = Callable[[BaseException], EmulatorError]

_NOT_STARTED = "http://127.0.0.1:0"


def late_reply(timeout_s: float) -> Reply:
    """Triton's answer came later than the limit: as SageMaker, a 504 the caller gets as a
    ModelError."""
    message = (
        f"the model did not answer within {timeout_s:g}s "
        f"(SageMaker's limit is {INVOKE_TIMEOUT_S:g} s)"
    )
    return Reply(504, {"content-type": "application/json"}, json.dumps({"error": message}).encode())


def past_load_limit(
    target: str, limit_s: float, when: str, *, log_path: Path | None = None
) -> ModelLoadError:
    """The error of a load that did not end within the platform's limit, which covers the
    download, the extraction and the load together (the MME guide: "the model continues
    to download and load into the inference container for up to 360 seconds")."""
    return ModelLoadError(
        f"TargetModel {target!r} was not downloaded and loaded within {limit_s:g}s "
        f"(SageMaker's limit for a cold model is {LOAD_LIMIT_S:g} s): {when}",
        model_name=target,
        log_path=log_path,
    )


class SageMakerControl:
    """Every call the emulator makes to one Triton server."""

    def __init__(
        self,
        *,
        options: InstanceOptions,
        connection_error: ConnectionErrorFactory,
        log_path: Callable[[], Path | None],
    ) -> None:
        self.options = options
        self.connection_error = connection_error
        self.log_path = log_path
        #: keep-alive connections to the SageMaker front end (loads, unloads, invokes)
        self.pool = UpstreamPool(_NOT_STARTED)
        #: keep-alive connections to the v2 HTTP endpoint (model metadata)
        self.v2_pool: UpstreamPool | None = None

    @property
    def url(self) -> str:
        """The SageMaker front end's base URL."""
        return f"http://{self.pool.hostport.decode()}"

    def connect(self, sagemaker_url: str, v2_url: str | None, *, bridge: str | None = None) -> None:
        """Point the pools at a (re)started server; connections to the old one are closed.
        ``bridge``: see :class:`~mmelocal.emulator.upstream.UpstreamPool`."""
        self.close()
        self.pool = UpstreamPool(sagemaker_url, bridge=bridge)
        self.v2_pool = UpstreamPool(v2_url, bridge=bridge) if v2_url else None

    def close(self) -> None:
        """Close the idle connections."""
        self.pool.close()
        if self.v2_pool is not None:
            self.v2_pool.close()

    async def post_load(self, entry: ModelEntry, url_dir: str) -> tuple[int, str]:
        """``POST /models``: Triton's status and text. A load still running at the entry's
        deadline (``load_deadline_s``: the load's limit counts from its start, download
        included) raises the limit's error at once, the entry marked unloading and its
        undoing DELETE started as ``entry.undo`` (it may take up to the unload timeout:
        the caller does not wait for it)."""
        headers = [(TARGET_MODEL_HEADER, entry.target), ("Content-Type", "application/json")]
        limit_s = self.options.load_timeout_s
        timeout_s = min(limit_s, entry.load_deadline_s - asyncio.get_running_loop().time())
        if timeout_s <= 0:
            raise past_load_limit(entry.target, limit_s, "before Triton was asked to load it")
        try:
            reply = await self.pool.request(
                "POST",
                "/models",
                headers,
                load_body(entry.key, url_dir),
                timeout_s=timeout_s,
            )
        except UpstreamTimeoutError as exc:
            entry.state = UNLOADING
            entry.undo = asyncio.ensure_future(self._undo_load(entry))
            raise past_load_limit(
                entry.target,
                limit_s,
                f"Triton was still loading it (a stub that cannot start hangs the load; see "
                f"{self.log_path()})",
                log_path=self.log_path(),
            ) from exc
        except UpstreamError as exc:
            raise self.connection_error(exc) from exc
        return reply.status, reply.body.decode("utf-8", errors="replace")

    async def _undo_load(self, entry: ModelEntry) -> int:
        """``DELETE`` a load given up at the limit; Triton's status (0: the DELETE failed).
        The caller gets the limit's error whatever the DELETE does: one that fails, or that
        Triton does not answer 200, is logged (the model may stay in Triton's memory until
        the server restarts)."""
        try:
            status = await self.delete(entry)
        except Exception as exc:
            logger.warning(
                "the DELETE undoing the load of %r past the load limit failed: %s "
                "(Triton may keep the model; see %s)",
                entry.target,
                exc,
                self.log_path(),
            )
            return 0
        if status != 200:
            logger.warning(
                "the DELETE undoing the load of %r past the load limit was answered %d "
                "(Triton may keep the model; see %s)",
                entry.target,
                status,
                self.log_path(),
            )
        return status

    async def delete(self, entry: ModelEntry) -> int:
        """``DELETE /models/KEY``: Triton's status once the model is unavailable."""
        try:
            reply = await self.pool.request(
                "DELETE",
                f"/models/{entry.key}",
                [(TARGET_MODEL_HEADER, entry.target)],
                timeout_s=self.options.unload_timeout_s,
            )
        except UpstreamError as exc:
            raise self.connection_error(exc) from exc
        return reply.status

    async def invoke(
        self, key: str, target: str, body: bytes, headers: list[tuple[str, str]]
    ) -> Reply:
        """``POST /models/KEY/invoke``; a 504 reply past the invoke timeout (SageMaker's)."""
        headers.append((TARGET_MODEL_HEADER, target))
        timeout_s = self.options.invoke_timeout_s
        try:
            return await self.pool.request(
                "POST", f"/models/{key}/invoke", headers, body, timeout_s=timeout_s
            )
        except UpstreamTimeoutError:
            return late_reply(timeout_s)
        except UpstreamError as exc:
            raise self.connection_error(exc) from exc

    async def v2_get(self, path: str) -> Reply:
        """``GET`` on the v2 HTTP endpoint (model metadata, config, statistics)."""
        return await self.v2_request("GET", path)

    async def v2_request(
        self,
        method: str,
        path: str,
        headers: list[tuple[str, str]] | None = None,
        body: bytes = b"",
        *,
        runs_model: bool = False,
    ) -> Reply:
        """A request to the v2 HTTP endpoint. One that ``runs_model`` (``generate``) has
        the invoke timeout and is answered its 504 past it, as an invoke is."""
        if self.v2_pool is None:
            raise EmulatorError("this Triton has no v2 HTTP endpoint the emulator knows of")
        timeout_s = self.options.invoke_timeout_s if runs_model else REQUEST_TIMEOUT_S
        try:
            return await self.v2_pool.request(
                method, path, headers or [], body, timeout_s=timeout_s
            )
        except UpstreamTimeoutError as exc:
            if runs_model:
                return late_reply(timeout_s)
            raise self.connection_error(exc) from exc
        except UpstreamError as exc:
            raise self.connection_error(exc) from exc


__all__ = ["ConnectionErrorFactory", "SageMakerControl", "late_reply", "past_load_limit"]
