"""Attach to a Triton someone else runs (a kept ``mmelocal triton start`` server, a container).

:class:`ExternalLauncher` follows the :class:`~mmelocal.runtime.launcher.TritonLauncher`
protocol without owning a process: ``start()`` only waits until the server answers live,
``stop()`` does nothing, and ``is_alive()`` asks the server's health endpoint.
"""

from __future__ import annotations

from pathlib import Path

from mmelocal.runtime.launcher import Endpoints, LauncherContext
from mmelocal.runtime.readiness import http_ok, wait_for_listener, wait_until_ready


class ExternalLauncher(LauncherContext):
    """A handle on a running Triton at ``url`` (``http://host:port``).

    ``grpc_url``, ``metrics_url`` and ``sagemaker_url`` are optional; ``model_repository``
    is the server's repository when it is on this machine (needed to add models to it).
    A server known by its SageMaker front end alone (``url`` is ``sagemaker_url``) is
    checked at ``GET /models``: that front end answers 400 to the KServe health routes, and
    its ``/ping`` may answer "not ready" (a model that failed to load) while it runs.
    ``start()`` gives up after ``connect_grace_s`` when every connection is refused (nothing
    listens at ``url``), else after ``start_timeout_s``.
    """

    def __init__(
        self,
        url: str,
        *,
        grpc_url: str | None = None,
        metrics_url: str | None = None,
        sagemaker_url: str | None = None,
        model_repository: Path | str | None = None,
        log_path: Path | str | None = None,
        pid: int | None = None,
        start_timeout_s: float = 30.0,
        connect_grace_s: float = 5.0,
    ) -> None:
        self._endpoints = Endpoints(
            http_url=url, grpc_url=grpc_url, metrics_url=metrics_url, sagemaker_url=sagemaker_url
        )
        self._repo = Path(model_repository) if model_repository is not None else None
        self._log_path = Path(log_path) if log_path is not None else None
        self._pid = pid
        self.start_timeout_s = start_timeout_s
        self.connect_grace_s = connect_grace_s

    @property
    def endpoints(self) -> Endpoints:
        """The server's URLs as given."""
        return self._endpoints

    @property
    def log_path(self) -> Path | None:
        """The server's log file when known."""
        return self._log_path

    @property
    def model_repository(self) -> Path | None:
        """The server's repository when it is a local folder."""
        return self._repo

    def pid(self) -> int | None:
        """The server's pid when known (a kept local server)."""
        return self._pid

    def start(self) -> None:
        """Wait until the server answers live (it is not started here).

        Live, not ready: a server started with ``--strict-readiness`` (Triton's default)
        answers not-ready while any model it holds failed to load, and the models an
        external server holds are not ours to judge; ours are checked when they load."""
        wait_for_listener(
            self._endpoints.http_url, grace_s=min(self.connect_grace_s, self.start_timeout_s)
        )
        wait_until_ready(
            lambda: http_ok(self._health_url(), 2.0),
            timeout_s=self.start_timeout_s,
            url=self._endpoints.http_url,
            log_path=self._log_path,
        )

    def stop(self) -> None:
        """Nothing to stop: the server belongs to someone else."""

    def is_alive(self) -> bool:
        """True when the server's liveness endpoint answers 200."""
        return http_ok(self._health_url(), 2.0)

    def _health_url(self) -> str:
        """KServe's ``/v2/health/live``, or the model list of a SageMaker front end alone."""
        ends = self._endpoints
        if ends.sagemaker_url is not None and ends.sagemaker_url == ends.http_url:
            return f"{ends.sagemaker_url}/models"
        return f"{ends.http_url}/v2/health/live"


__all__ = ["ExternalLauncher"]
