"""The WSGI application itself: each request routed by what botocore sends, to the
runtime's face (:mod:`.runtime`), SageMaker's control plane (:mod:`.control_plane`), the
overlays that complete moto's answers for other JSON services (CloudWatch, Application
Auto Scaling, CloudWatch Logs), or moto itself."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from mmelocal.errors import AwsServiceError
from mmelocal.facts.aws import LOCAL_REGION
from mmelocal.localaws.app.answers import JSON_11, json_answer, moto_error, not_built
from mmelocal.localaws.app.control_plane import Handler, SageMakerControlPlane, UpdateCheck
from mmelocal.localaws.app.runtime import RuntimeFace
from mmelocal.localaws.app.wsgi import (
    Forward,
    StartResponse,
    WsgiApp,
    credential_scope,
    environ_key,
    json_params,
    moto_json,
    replace_body,
)
from mmelocal.localaws.checks import checks_page_size, page_size_problem
from mmelocal.localaws.endpoints import EndpointManager
from mmelocal.localaws.logs import LogShipper

#: (region, operation, parameters, forward) -> the answer, or None to let moto answer
Overlay = Callable[[str, str, dict[str, Any], Forward], "tuple[int, Any] | None"]

#: operations whose answers this layer completes even for mmelocal's own calls
_OVERLAYS = frozenset({"DescribeEndpointConfig"})
#: header that marks mmelocal's own calls to moto (they skip the endpoint layer)
INTERNAL_HEADER = "X-Mmelocal-Internal"
#: header on every call mmelocal makes to itself (served while a restore holds the others)
OWN_HEADER = "X-Mmelocal-Own"
_INTERNAL_KEY = environ_key(INTERNAL_HEADER)
_OWN_KEY = environ_key(OWN_HEADER)
#: the header moto files a request's records under (``BaseResponse.get_current_account``:
#: after the ``MOTO_ACCOUNT_ID`` environment variable, before the access key)
_MOTO_ACCOUNT_KEY = environ_key("x-moto-account-id")
#: how long a user's call waits for the state being restored at start-up
RESTORE_WAIT_S = 600.0


class LocalAwsApp:
    """The WSGI app on the local AWS port (see :mod:`mmelocal.localaws.app`)."""

    def __init__(
        self,
        *,
        moto_app: WsgiApp,
        endpoints: EndpointManager,
        keys_under: Callable[[str, str], list[str] | None],
        internal: Callable[[str], Any],
        account_id: str,
        logs: LogShipper | None = None,
    ) -> None:
        self._moto = moto_app
        self.endpoints = endpoints
        self.account_id = account_id
        self.logs = logs
        self._runtime = RuntimeFace(endpoints=endpoints, account_id=account_id, logs=logs)
        #: regions SageMaker or Application Auto Scaling were called in (the state to save)
        self.regions: set[str] = set()
        #: set once the saved state is back: users' calls wait for it, mmelocal's do not
        self.ready = threading.Event()
        self.ready.set()
        #: X-Amz-Target prefix (a JSON service) -> what completes moto's answers there
        #: (CloudWatch, Application Auto Scaling: :mod:`.cloudwatch_api`, :mod:`.scaling`)
        self.overlays: dict[str, Overlay] = {}
        #: (X-Amz-Target prefix, operation) -> what corrects moto's answer for every caller,
        #: mmelocal's own calls included, beneath :attr:`overlays` (Application Auto
        #: Scaling's pages: :func:`.scaling.paged_records`)
        self.corrections: dict[tuple[str, str], Overlay] = {}
        #: (region, endpoint, its DescribeEndpoint, the new config) -> raise AwsServiceError to
        #: refuse an UpdateEndpoint (autoscaling's: :meth:`.scaling.Autoscaler.check_update`)
        self.update_checks: list[UpdateCheck] = []
        self._control = SageMakerControlPlane(
            moto_app=moto_app,
            endpoints=endpoints,
            keys_under=keys_under,
            internal=internal,
            account_id=account_id,
            update_checks=self.update_checks,
        )

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        environ[_MOTO_ACCOUNT_KEY] = self.account_id  # this server's records, none of another's
        if not self.ready.is_set() and not environ.get(_OWN_KEY):
            self.ready.wait(RESTORE_WAIT_S)
        region, service = credential_scope(environ)
        path = environ.get("PATH_INFO", "")
        if (
            service in ("sagemaker", "application-autoscaling", "monitoring")
            and region not in self.regions
        ):
            self.regions.add(region)
        if environ.get("REQUEST_METHOD") == "POST" and service not in ("s3", ""):
            answered = self._runtime.serve(environ, start_response, region, path)
            if answered is not None:
                return answered
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        if checks_page_size(target):
            refused = page_size_problem(target, json_params(environ))
            if refused is not None:
                return moto_error(refused, environ, start_response)
        if target.startswith("SageMaker."):
            operation = target.partition(".")[2]
            handlers = self._control.handlers
            if environ.get(_INTERNAL_KEY):  # mmelocal's own: moto's records
                handler = handlers.get(operation) if operation in _OVERLAYS else None
            else:
                handler = handlers.get(operation)
            if handler is not None:
                return self._sagemaker_call(handler, environ, start_response, region)
        prefix, _, operation = target.partition(".")
        overlay = None if environ.get(_INTERNAL_KEY) else self.overlays.get(prefix)
        correction = self.corrections.get((prefix, operation))
        if overlay is not None or correction is not None:
            return self._overlay_call(
                overlay, correction, operation, environ, start_response, region
            )
        try:
            return self._moto(environ, start_response)
        except NotImplementedError as exc:  # the service's error, never an HTML 500
            return not_built(environ, start_response, target, exc)

    def _overlay_call(
        self,
        overlay: Overlay | None,
        correction: Overlay | None,
        operation: str,
        environ: dict[str, Any],
        start_response: StartResponse,
        region: str,
    ) -> Iterable[bytes]:
        params = json_params(environ)
        region = region or LOCAL_REGION

        def to_moto(changed: dict[str, Any]) -> tuple[int, Any]:
            replace_body(environ, changed)
            try:
                return moto_json(self._moto, environ)
            except NotImplementedError as exc:
                raise AwsServiceError(
                    f"mmelocal's local AWS does not implement {operation}",
                    code="UnknownOperationException",
                ) from exc

        def forward(changed: dict[str, Any]) -> tuple[int, Any]:
            corrected = correction(region, operation, changed, to_moto) if correction else None
            return corrected if corrected is not None else to_moto(changed)

        try:
            answer = overlay(region, operation, params, forward) if overlay else None
            if answer is None:
                answer = forward(params)
        except AwsServiceError as exc:
            return moto_error(exc, environ, start_response)
        status, payload = answer
        return json_answer(start_response, status, payload, environ.get("CONTENT_TYPE") or JSON_11)

    def _sagemaker_call(
        self,
        handler: Handler,
        environ: dict[str, Any],
        start_response: StartResponse,
        region: str,
    ) -> Iterable[bytes]:
        params = json_params(environ)
        try:
            status, payload = handler(environ, region or LOCAL_REGION, params)
        except AwsServiceError as exc:  # rendered by moto, as its own SageMaker errors
            return moto_error(exc, environ, start_response)
        return json_answer(start_response, status, payload, JSON_11)


__all__ = ["INTERNAL_HEADER", "OWN_HEADER", "RESTORE_WAIT_S", "LocalAwsApp", "Overlay"]
