"""A synchronous client for Triton's SageMaker front end, for tests and scripts.

The contract it speaks is described in :mod:`mmelocal.runtime.sagemaker`.
:class:`SageMakerClient` keeps connections alive (urllib3 pool, thread-safe), passes invoke
payloads through unchanged (:class:`SageMakerResponse` holds status, body bytes and headers
raw) and puts a timeout on every call. urllib3 comes with boto3; mmelocal itself does not
depend on it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from mmelocal.errors import ModelLoadError, RuntimeLayerError, ServerDiedError, UserInputError
from mmelocal.runtime.client_errors import DEATH_GRACE_S, server_gone
from mmelocal.runtime.sagemaker import (
    DEFAULT_LOAD_TIMEOUT_S,
    DEFAULT_TIMEOUT_S,
    DEFAULT_UNLOAD_TIMEOUT_S,
    TARGET_MODEL_HEADER,
    load_body,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class SageMakerResponse:
    """A raw answer from the front end: status code, body bytes and headers."""

    status: int
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True for a 2xx status."""
        return 200 <= self.status < 300

    def json(self) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.body.decode("utf-8"))

    @property
    def text(self) -> str:
        """The body as text (for error messages)."""
        return self.body.decode("utf-8", errors="replace")


class SageMakerClient:
    """Sync client for Triton's SageMaker MME routes (see the module docstring).

    ``is_alive`` (usually ``launcher.is_alive``) turns a connection failure into a
    :class:`ServerDiedError` when the server process is gone.
    """

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        is_alive: Callable[[], bool] | None = None,
        pool_size: int = 16,
    ) -> None:
        import urllib3

        if not url.startswith("http://"):
            raise UserInputError(f"url must start with http://, got {url!r}")
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self._is_alive = is_alive
        self._pool = urllib3.PoolManager(maxsize=pool_size, retries=False)

    def request(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> SageMakerResponse:
        """Send one request and return the raw answer (any status; connection errors raise)."""
        import urllib3

        timeout = self.timeout_s if timeout_s is None else timeout_s
        try:
            response = self._pool.request(
                method,
                f"{self.url}{path}",
                body=body,
                headers=dict(headers or {}),
                timeout=urllib3.Timeout(connect=min(5.0, timeout), read=timeout),
                preload_content=True,
            )
        except urllib3.exceptions.HTTPError as exc:
            if server_gone(self._is_alive, grace_s=DEATH_GRACE_S):
                raise ServerDiedError(
                    f"Triton is gone: {method} {self.url}{path} failed ({exc})"
                ) from exc
            if isinstance(exc, urllib3.exceptions.TimeoutError):
                raise RuntimeLayerError(
                    f"{method} {self.url}{path} got no answer within {timeout:g}s"
                ) from exc
            raise RuntimeLayerError(f"{method} {self.url}{path} failed: {exc}") from exc
        return SageMakerResponse(
            status=response.status, body=response.data, headers=dict(response.headers)
        )

    def ping(self, *, timeout_s: float = 2.0) -> bool:
        """True when ``GET /ping`` answers 200."""
        try:
            return self.request("GET", "/ping", timeout_s=timeout_s).ok
        except RuntimeLayerError:
            return False

    def load(
        self,
        name: str,
        url_dir: Path | str,
        *,
        target_model: str | None = None,
        timeout_s: float = DEFAULT_LOAD_TIMEOUT_S,
    ) -> SageMakerResponse:
        """``POST /models``: load the model folder in ``url_dir`` as ``target_model`` (or name).

        Raises :class:`ModelLoadError` (``status_code`` 409/507/400 and Triton's message)
        unless Triton answered 200.
        """
        target = target_model or name
        response = self.request(
            "POST",
            "/models",
            body=load_body(name, url_dir),
            headers={TARGET_MODEL_HEADER: target, "Content-Type": "application/json"},
            timeout_s=timeout_s,
        )
        if not response.ok:
            raise ModelLoadError(
                f"Triton's SageMaker front end refused to load {target!r} "
                f"(HTTP {response.status}): {response.text}",
                model_name=target,
                triton_message=response.text,
                status_code=response.status,
            )
        logger.info("loaded %s from %s through the SageMaker front end", target, url_dir)
        return response

    def unload(
        self,
        name: str,
        *,
        target_model: str | None = None,
        timeout_s: float = DEFAULT_UNLOAD_TIMEOUT_S,
    ) -> SageMakerResponse:
        """``DELETE /models/NAME``; returns the raw answer (404 when not loaded)."""
        target = target_model or name
        response = self.request(
            "DELETE",
            f"/models/{quote(name, safe='')}",
            headers={TARGET_MODEL_HEADER: target},
            timeout_s=timeout_s,
        )
        if response.ok:
            logger.info("unloaded %s through the SageMaker front end", target)
        return response

    def list_models(self) -> list[dict[str, Any]]:
        """``GET /models``: ``{"modelName", "modelUrl"}`` of ready models (empty ones dropped)."""
        response = self.request("GET", "/models")
        if not response.ok:
            raise RuntimeLayerError(f"GET /models answered {response.status}: {response.text}")
        data = response.json()
        models = data.get("models", []) if isinstance(data, dict) else data
        return [m for m in models if m]

    def describe(self, name: str) -> SageMakerResponse:
        """``GET /models/NAME`` (404 when not loaded)."""
        return self.request("GET", f"/models/{quote(name, safe='')}")

    def invoke(
        self,
        name: str,
        body: bytes,
        *,
        target_model: str | None = None,
        content_type: str = "application/json",
        accept: str | None = None,
        extra_headers: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> SageMakerResponse:
        """``POST /models/NAME/invoke`` with ``body`` unchanged; the answer comes back raw."""
        headers = {TARGET_MODEL_HEADER: target_model or name, "Content-Type": content_type}
        if accept:
            headers["Accept"] = accept
        headers.update(extra_headers or {})
        return self.request(
            "POST",
            f"/models/{quote(name, safe='')}/invoke",
            body=body,
            headers=headers,
            timeout_s=timeout_s,
        )

    def close(self) -> None:
        """Close the pooled connections."""
        self._pool.clear()

    def __enter__(self) -> SageMakerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["SageMakerClient", "SageMakerResponse"]
