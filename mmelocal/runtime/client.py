"""A thin layer over ``tritonclient`` (HTTP, or gRPC) with numpy in and out.

Every call has a timeout (a load whose stub cannot start hangs with no error, so nothing
may wait forever). Errors are mapped by :mod:`mmelocal.runtime.client_errors`: Triton's
refusals become :class:`~mmelocal.errors.ModelLoadError` or
:class:`~mmelocal.errors.InferenceError` carrying Triton's own message; a connection
failure while the server process is gone (``is_alive`` says so) becomes
:class:`~mmelocal.errors.ServerDiedError` at once.

One :class:`TritonClient` may be shared by threads: each thread gets its own underlying
tritonclient connection.
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import numpy as np

from mmelocal.errors import InferenceError, RuntimeLayerError, UserInputError
from mmelocal.facts.sagemaker import DIRECT_LOAD_TIMEOUT_S, REQUEST_TIMEOUT_S
from mmelocal.runtime.client_errors import DEATH_GRACE_S, ErrorMapper, server_gone, status_code
from mmelocal.runtime.launcher import Endpoints, TritonLauncher

logger = logging.getLogger(__name__)

PROTOCOLS = ("http", "grpc")
DEFAULT_TIMEOUT_S = REQUEST_TIMEOUT_S
DEFAULT_LOAD_TIMEOUT_S = DIRECT_LOAD_TIMEOUT_S


class TritonClient:
    """Load, unload, index, config, infer, statistics and metrics against one Triton.

    ``url`` is ``http://host:port`` (HTTP) or ``host:port`` (gRPC). ``is_alive`` (usually
    ``launcher.is_alive``) lets connection errors be told apart from a dead server. Use
    :meth:`for_launcher` to build one from a launcher.
    """

    def __init__(
        self,
        url: str,
        *,
        protocol: str = "http",
        timeout_s: float = DEFAULT_TIMEOUT_S,
        load_timeout_s: float = DEFAULT_LOAD_TIMEOUT_S,
        metrics_url: str | None = None,
        is_alive: Callable[[], bool] | None = None,
        log_path: Path | None = None,
    ) -> None:
        if protocol not in PROTOCOLS:
            raise UserInputError(
                f"protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}"
            )
        if timeout_s <= 0 or load_timeout_s <= 0:
            raise UserInputError("timeout_s and load_timeout_s must be > 0")
        self.protocol = protocol
        self.url = url.split("://", 1)[1] if "://" in url else url
        self.timeout_s = timeout_s
        self.load_timeout_s = load_timeout_s
        self.metrics_url = metrics_url
        self._errors = ErrorMapper(self.url, is_alive=is_alive, log_path=log_path)
        self._local = threading.local()
        self._all_lock = threading.Lock()
        self._all: list[Any] = []
        self._generation = 0

    @classmethod
    def for_launcher(
        cls, launcher: TritonLauncher, *, protocol: str = "http", **kwargs: Any
    ) -> TritonClient:
        """A client on ``launcher``'s endpoints that knows when its server died."""
        endpoints: Endpoints = launcher.endpoints
        if protocol == "grpc" and not endpoints.grpc_url:
            raise UserInputError(
                "this Triton has no gRPC port: in SageMaker mode the entrypoint turns it off "
                "unless SAGEMAKER_TRITON_ALLOW_GRPC=true is in its environment"
            )
        url = endpoints.http_url if protocol == "http" else (endpoints.grpc_url or "")
        return cls(
            url,
            protocol=protocol,
            metrics_url=endpoints.metrics_url,
            is_alive=launcher.is_alive,
            log_path=launcher.log_path,
            **kwargs,
        )

    # -- plumbing ---------------------------------------------------------------------
    def _raw(self, timeout_s: float) -> Any:
        if getattr(self._local, "generation", None) != self._generation:
            self._local.clients = {}
            self._local.generation = self._generation
        clients: dict[float, Any] = self._local.clients
        client = clients.get(timeout_s)
        if client is None:
            if self.protocol == "http":
                import tritonclient.http as th

                client = th.InferenceServerClient(
                    self.url, connection_timeout=min(timeout_s, 10.0), network_timeout=timeout_s
                )
            else:
                import tritonclient.grpc as tg

                client = tg.InferenceServerClient(self.url)
            clients[timeout_s] = client
            with self._all_lock:
                self._all.append(client)
        return client

    def _grpc_kwargs(self, timeout_s: float) -> dict[str, Any]:
        return {"client_timeout": timeout_s} if self.protocol == "grpc" else {}

    def _call(self, what: str, timeout_s: float) -> AbstractContextManager[None]:
        return self._errors.call(what, timeout_s)

    def _server_error(self, exc: Any, what: str) -> str:
        return self._errors.server_message(exc, what)

    # -- health -----------------------------------------------------------------------
    def server_live(self) -> bool:
        """True when the server answers live."""
        return self._bool("server live", lambda c: c.is_server_live(**self._grpc_kwargs(5.0)))

    def server_ready(self) -> bool:
        """True when the server answers ready."""
        return self._bool("server ready", lambda c: c.is_server_ready(**self._grpc_kwargs(5.0)))

    def model_ready(self, name: str, version: str = "") -> bool:
        """True when ``name`` is loaded and ready."""
        return self._bool(
            f"model ready {name}",
            lambda c: c.is_model_ready(name, version, **self._grpc_kwargs(5.0)),
        )

    def _bool(self, what: str, fn: Callable[[Any], Any]) -> bool:
        from tritonclient.utils import InferenceServerException

        with self._call(what, 5.0):
            try:
                return bool(fn(self._raw(5.0)))
            except InferenceServerException as exc:
                self._server_error(exc, what)
                return False
        return False  # pragma: no cover

    # -- repository -------------------------------------------------------------------
    def load(
        self,
        name: str,
        *,
        config: str | None = None,
        files: Mapping[str, bytes] | None = None,
        timeout_s: float | None = None,
    ) -> float:
        """Load (or reload) ``name``; return the seconds it took. Raises ModelLoadError."""
        from tritonclient.utils import InferenceServerException

        timeout = timeout_s or self.load_timeout_s
        start = time.monotonic()
        with self._call(f"load {name}", timeout):
            try:
                kwargs: dict[str, Any] = {"config": config}
                if files:
                    kwargs["files"] = {
                        k if k.startswith("file:") else f"file:{k}": v for k, v in files.items()
                    }
                self._raw(timeout).load_model(name, **kwargs, **self._grpc_kwargs(timeout))
            except InferenceServerException as exc:
                raise self._errors.load_error(exc, "load", name) from None
        took = time.monotonic() - start
        logger.info("loaded %s in %.2fs", name, took)
        return took

    def unload(
        self,
        name: str,
        *,
        unload_dependents: bool = False,
        wait: bool = True,
        timeout_s: float | None = None,
    ) -> float:
        """Unload ``name``; with ``wait`` poll the index until it is no longer READY."""
        from tritonclient.utils import InferenceServerException

        timeout = timeout_s or self.load_timeout_s
        start = time.monotonic()
        with self._call(f"unload {name}", timeout):
            try:
                self._raw(timeout).unload_model(
                    name, unload_dependents=unload_dependents, **self._grpc_kwargs(timeout)
                )
            except InferenceServerException as exc:
                raise self._errors.load_error(exc, "unload", name) from None
        while wait and self._state(name) in ("READY", "UNLOADING"):
            if time.monotonic() - start > timeout:
                raise RuntimeLayerError(f"{name!r} was still unloading after {timeout:g}s")
            time.sleep(0.05)
        took = time.monotonic() - start
        logger.info("unloaded %s in %.2fs", name, took)
        return took

    def _state(self, name: str) -> str | None:
        states = [m.get("state") for m in self.index() if m.get("name") == name]
        return "READY" if "READY" in states else (states[0] if states else None)

    def index(self, *, ready_only: bool = False) -> list[dict[str, Any]]:
        """The repository index: ``{"name", "version", "state", "reason"}`` per model."""
        from tritonclient.utils import InferenceServerException

        with self._call("repository index", self.timeout_s):
            try:
                if self.protocol == "http":
                    entries = self._raw(self.timeout_s).get_model_repository_index()
                else:
                    result = self._raw(self.timeout_s).get_model_repository_index(
                        as_json=True, client_timeout=self.timeout_s
                    )
                    entries = result.get("models", [])
            except InferenceServerException as exc:
                raise RuntimeLayerError(
                    f"repository index failed: {self._server_error(exc, 'index')}"
                ) from None
        models = [dict(e) for e in entries]
        return [m for m in models if m.get("state") == "READY"] if ready_only else models

    def model_config(self, name: str) -> dict[str, Any]:
        """The model's config as Triton serves it (JSON form)."""
        return self._json(f"config {name}", lambda c, kw: c.get_model_config(name, **kw), name)

    def model_metadata(self, name: str) -> dict[str, Any]:
        """The model's metadata (inputs/outputs with datatypes and shapes)."""
        return self._json(f"metadata {name}", lambda c, kw: c.get_model_metadata(name, **kw), name)

    def statistics(self, name: str = "") -> dict[str, Any]:
        """Inference statistics (all models when ``name`` is empty)."""
        return self._json(
            f"statistics {name}", lambda c, kw: c.get_inference_statistics(name, **kw), name
        )

    def _json(
        self, what: str, fn: Callable[[Any, dict[str, Any]], Any], name: str
    ) -> dict[str, Any]:
        from tritonclient.utils import InferenceServerException

        kwargs: dict[str, Any] = {}
        if self.protocol == "grpc":
            kwargs = {"as_json": True, "client_timeout": self.timeout_s}
        with self._call(what, self.timeout_s):
            try:
                result = fn(self._raw(self.timeout_s), kwargs)
            except InferenceServerException as exc:
                raise InferenceError(
                    f"{what}: {self._server_error(exc, what)}",
                    model_name=name,
                    status_code=status_code(exc),
                ) from None
        if self.protocol == "grpc" and "config" in result and what.startswith("config"):
            result = result["config"]
        return dict(result)

    # -- inference --------------------------------------------------------------------
    def infer(
        self,
        name: str,
        inputs: Mapping[str, np.ndarray],
        *,
        outputs: Sequence[str] | None = None,
        version: str = "",
        timeout_s: float | None = None,
    ) -> dict[str, np.ndarray]:
        """Run one request; return output name -> array (all outputs unless ``outputs``)."""
        from tritonclient.utils import InferenceServerException, np_to_triton_dtype

        module = _module(self.protocol)
        timeout = timeout_s or self.timeout_s
        infer_inputs = []
        for key, value in inputs.items():
            array = np.asarray(value)
            tensor = module.InferInput(key, list(array.shape), np_to_triton_dtype(array.dtype))
            if self.protocol == "http":
                tensor.set_data_from_numpy(array, binary_data=True)
            else:
                tensor.set_data_from_numpy(array)
            infer_inputs.append(tensor)
        requested = [module.InferRequestedOutput(o) for o in outputs] if outputs else None
        with self._call(f"infer {name}", timeout):
            try:
                result = self._raw(timeout).infer(
                    name,
                    infer_inputs,
                    model_version=version,
                    outputs=requested,
                    **self._grpc_kwargs(timeout),
                )
            except InferenceServerException as exc:
                message = self._server_error(exc, f"infer {name}")
                raise InferenceError(
                    f"inference on {name!r} failed: {message}",
                    model_name=name,
                    status_code=status_code(exc),
                ) from None
        response = result.get_response()
        names = outputs or [
            o["name"] if isinstance(o, dict) else o.name for o in _outputs_of(response)
        ]
        return {o: result.as_numpy(o) for o in names}

    # -- metrics ----------------------------------------------------------------------
    def metrics(self) -> str:
        """Prometheus metrics text (needs ``metrics_url``)."""
        if not self.metrics_url:
            raise UserInputError("this client has no metrics_url")
        try:
            with urllib.request.urlopen(f"{self.metrics_url}/metrics", timeout=self.timeout_s) as r:
                return str(r.read().decode("utf-8"))
        except OSError as exc:
            self._errors.check_alive("metrics", exc)
            raise RuntimeLayerError(f"metrics at {self.metrics_url} failed: {exc}") from exc

    def close(self) -> None:
        """Close every connection this client opened (in all threads).

        Close clients before stopping the server: Triton waits up to its exit timeout for
        open HTTP connections to go away.
        """
        with self._all_lock:
            clients, self._all = self._all, []
            self._generation += 1
        for client in clients:
            try:
                client.close()
            except Exception:  # closing is best effort
                logger.debug("closing a tritonclient failed", exc_info=True)

    def __enter__(self) -> TritonClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _module(protocol: str) -> Any:
    if protocol == "http":
        import tritonclient.http as th

        return th
    import tritonclient.grpc as tg

    return tg


def _outputs_of(response: Any) -> list[Any]:
    if isinstance(response, dict):
        return list(response.get("outputs", []))
    return list(response.outputs)


__all__ = ["DEATH_GRACE_S", "PROTOCOLS", "TritonClient", "server_gone"]
