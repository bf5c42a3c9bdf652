"""The control calls of Triton's SageMaker front end: ``POST /models`` and ``DELETE``.

Loads and unloads go through the front end exactly as SageMaker drives it, each with
``X-Amzn-SageMaker-Target-Model: TARGET`` (Triton names the model after that header; the
URL's KEY is a URL-safe digest of it). Invocations take the keep-alive lane of
:mod:`mmelocal.emulator.upstream` instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import aiohttp

from mmelocal.emulator.model_state import InstanceOptions, ModelEntry
from mmelocal.errors import EmulatorError, ModelLoadError
from mmelocal.runtime.sagemaker import TARGET_MODEL_HEADER, load_body

#: turns a failed connection into the error callers get (the instance decides: died or busy)
ConnectionErrorFactory = Callable[[BaseException], EmulatorError]


class SageMakerControl:
    """Load and unload calls to one Triton server's SageMaker front end."""

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
        self.session: aiohttp.ClientSession | None = None
        #: the front end's base URL (set when the server starts or restarts)
        self.url = ""

    def _session(self) -> aiohttp.ClientSession:
        if self.session is None:
            raise EmulatorError("the instance is not started: no HTTP session to Triton")
        return self.session

    async def post_load(self, entry: ModelEntry, url_dir: str) -> tuple[int, str]:
        """``POST /models``: Triton's status and text; a load past the timeout is undone."""
        try:
            async with self._session().post(
                f"{self.url}/models",
                data=load_body(entry.key, url_dir),
                headers={TARGET_MODEL_HEADER: entry.target, "Content-Type": "application/json"},
                timeout=aiohttp.ClientTimeout(total=self.options.load_timeout_s),
            ) as resp:
                return resp.status, await resp.text()
        except asyncio.TimeoutError as exc:
            await self.delete(entry)
            raise ModelLoadError(
                f"Triton did not finish loading {entry.target!r} within "
                f"{self.options.load_timeout_s:g}s (a stub that cannot start hangs the load; "
                f"see {self.log_path()})",
                model_name=entry.target,
            ) from exc
        except aiohttp.ClientError as exc:
            raise self.connection_error(exc) from exc

    async def delete(self, entry: ModelEntry) -> int:
        """``DELETE /models/KEY``: Triton's status once the model is unavailable."""
        try:
            async with self._session().delete(
                f"{self.url}/models/{entry.key}",
                headers={TARGET_MODEL_HEADER: entry.target},
                timeout=aiohttp.ClientTimeout(total=self.options.unload_timeout_s),
            ) as resp:
                await resp.read()
                return resp.status
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise self.connection_error(exc) from exc


__all__ = ["ConnectionErrorFactory", "SageMakerControl"]
