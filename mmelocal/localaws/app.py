"""The WSGI application on the local AWS port: moto, with SageMaker's endpoints made real.

Requests are routed by what botocore sends, so one ``AWS_ENDPOINT_URL`` serves every
client:

* ``POST /endpoints/{name}/invocations`` signed for ``sagemaker`` (the runtime client):
  forwarded to the emulator of one of the endpoint's production variants (``TargetVariant``,
  else drawn by weight: :mod:`.variants`); an endpoint not in service, or an unknown
  variant, answers the service's ``ValidationError``;
* ``X-Amz-Target: SageMaker.<Operation>`` for the operations that create, update, delete
  or describe models, configs and endpoints: the service's checks moto lacks
  (:mod:`.checks`), then moto, then the endpoint's lifecycle (:mod:`.endpoints`);
  ``UpdateEndpoint``, which moto does not have, and ``UpdateEndpointWeightsAndCapacities``
  are answered here;
* everything else (S3, the rest of SageMaker, Application Auto Scaling, STS, ...) goes to
  moto's own dispatcher, which reads the SigV4 credential scope as well.

Requests that came through the HTTPS proxy (``CONNECT`` to an AWS host, :mod:`.proxy`)
arrive here decrypted and are routed the same way.
"""

from __future__ import annotations

import io
import json
import logging
import re
import threading
from collections.abc import Callable, Iterable
from typing import Any

from mmelocal.errors import AwsServiceError
from mmelocal.facts.runtime_api import (
    DUPLICATE_VARIANT_IN_REQUEST,
    ENDPOINT_FAILED,
    ENDPOINT_IN_PROGRESS,
    RETAINED_VARIANT_PROPERTIES,
    TARGET_VARIANT_HEADER,
    VARIANT_NOT_IN_CONFIG,
    ZERO_INSTANCES,
)
from mmelocal.facts.sagemaker import LOAD_AND_INVOKE_TIMEOUT_S, TARGET_MODEL_HEADER
from mmelocal.localaws.checks import (
    checks_page_size,
    model_data_problem,
    model_violations,
    page_size_problem,
)
from mmelocal.localaws.endpoint_list import list_endpoints
from mmelocal.localaws.endpoints import EndpointManager, EndpointState
from mmelocal.localaws.logs import LogShipper
from mmelocal.rules.variants import target_variant_error

logger = logging.getLogger(__name__)

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]
#: forward the (possibly changed) parameters to moto: its status and parsed JSON answer
Forward = Callable[[dict[str, Any]], tuple[int, Any]]
#: (region, operation, parameters, forward) -> the answer, or None to let moto answer
Overlay = Callable[[str, str, dict[str, Any], Forward], "tuple[int, Any] | None"]

#: an instance type moto's (lagging) list accepts, recorded in moto in place of the real one
MOTO_INSTANCE_TYPE = "ml.m5.large"
#: operations whose answers this layer completes even for mmelocal's own calls
_OVERLAYS = frozenset({"DescribeEndpointConfig"})
#: the ListEndpoints filter moto applies (status and times are the local AWS's)
_MOTO_LIST_FILTERS = frozenset({"NameContains"})
#: a ``MaxResults`` that has moto answer every match at once (it sets no upper bound)
_MOTO_EVERY_MATCH = 2**31 - 1
#: header that marks mmelocal's own calls to moto (they skip the endpoint layer)
INTERNAL_HEADER = "X-Mmelocal-Internal"
#: header on every call mmelocal makes to itself (served while a restore holds the others)
OWN_HEADER = "X-Mmelocal-Own"
#: how long a user's call waits for the state being restored at start-up
RESTORE_WAIT_S = 600.0
_INVOCATION = re.compile(r"^/endpoints/([^/]+)/invocations$")
#: the runtime's calls no endpoint here serves: InvokeEndpointAsync, and
#: InvokeEndpointWithResponseStream (botocore's sagemaker-runtime model)
_UNSERVED_INVOCATION = re.compile(
    r"^/endpoints/([^/]+)/(async-invocations|invocations-response-stream)$"
)
#: what each of them needs that the local AWS's (real-time, MME) endpoints lack
_UNSERVED = {
    "async-invocations": (
        "is not an asynchronous inference endpoint (it has no AsyncInferenceConfig)"
    ),
    "invocations-response-stream": "does not support response streaming",
}
#: InvokeEndpoint's ``InferenceComponentName`` (botocore's sagemaker-runtime model)
_INFERENCE_COMPONENT_KEY = "HTTP_X_AMZN_SAGEMAKER_INFERENCE_COMPONENT"
_SCOPE = re.compile(r"Credential=[^/]*/[^/]*/([^/]*)/([^/]*)/aws4_request")
_JSON_11 = "application/x-amz-json-1.1"
_TARGET_VARIANT_KEY = "HTTP_" + TARGET_VARIANT_HEADER.upper().replace("-", "_")
#: InvokeEndpoint's request headers the emulator reads
_FORWARDED = ("Content-Type", "Accept", "Content-Encoding")
_HOP_BY_HOP = frozenset(
    ("connection", "keep-alive", "transfer-encoding", "content-length", "date", "server")
)


def credential_scope(environ: dict[str, Any]) -> tuple[str, str]:
    """``(region, service)`` from the SigV4 ``Authorization`` header (``("", "")`` if none)."""
    match = _SCOPE.search(environ.get("HTTP_AUTHORIZATION", ""))
    return (match.group(1), match.group(2)) if match else ("", "")


def _read_body(environ: dict[str, Any]) -> bytes:
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    body = environ["wsgi.input"].read(length) if length > 0 else b""
    environ["wsgi.input"] = io.BytesIO(body)
    return body


class LocalAwsApp:
    """The WSGI app (see the module docstring)."""

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
        import urllib3

        self._moto = moto_app
        self.endpoints = endpoints
        self._keys_under = keys_under
        self._internal = internal
        self.account_id = account_id
        self.logs = logs
        self._http = urllib3.PoolManager(maxsize=64, retries=False)
        #: regions SageMaker or Application Auto Scaling were called in (the state to save)
        self.regions: set[str] = set()
        #: set once the saved state is back: users' calls wait for it, mmelocal's do not
        self.ready = threading.Event()
        self.ready.set()
        #: (region, config) -> each variant's InstanceType (moto's list of types lags)
        self._instance_types: dict[tuple[str, str], list[str | None]] = {}
        #: X-Amz-Target prefix (a JSON service) -> what completes moto's answers there
        #: (CloudWatch, Application Auto Scaling: :mod:`.cloudwatch_api`, :mod:`.scaling`)
        self.overlays: dict[str, Overlay] = {}
        #: (X-Amz-Target prefix, operation) -> what corrects moto's answer for every caller,
        #: mmelocal's own calls included, beneath :attr:`overlays` (Application Auto
        #: Scaling's pages: :func:`.scaling.paged_records`)
        self.corrections: dict[tuple[str, str], Overlay] = {}
        #: (region, endpoint, its DescribeEndpoint, the new config) -> raise AwsServiceError to
        #: refuse an UpdateEndpoint (autoscaling's: :meth:`.scaling.Autoscaler.check_update`)
        self.update_checks: list[Callable[[str, str, dict[str, Any], dict[str, Any]], None]] = []
        self._sagemaker: dict[str, Callable[[dict[str, Any], str, dict[str, Any]], Any]] = {
            "CreateModel": self._create_model,
            "CreateEndpointConfig": self._create_endpoint_config,
            "DescribeModel": self._describe_model,
            "DescribeEndpointConfig": self._describe_endpoint_config,
            "CreateEndpoint": self._create_endpoint,
            "UpdateEndpoint": self._update_endpoint,
            "UpdateEndpointWeightsAndCapacities": self._update_weights_and_capacities,
            "DeleteEndpoint": self._delete_endpoint,
            "DescribeEndpoint": self._describe_endpoint,
            "ListEndpoints": self._list_endpoints,
        }

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if not self.ready.is_set() and not environ.get("HTTP_X_MMELOCAL_OWN"):
            self.ready.wait(RESTORE_WAIT_S)
        region, service = credential_scope(environ)
        path = environ.get("PATH_INFO", "")
        if (
            service in ("sagemaker", "application-autoscaling", "monitoring")
            and region not in self.regions
        ):
            self.regions.add(region)
        if environ.get("REQUEST_METHOD") == "POST" and service not in ("s3", ""):
            match = _INVOCATION.match(path)
            if match:
                return self._invoke(environ, start_response, region, match.group(1))
            match = _UNSERVED_INVOCATION.match(path)
            if match:
                return self._refuse_invocation(
                    environ, start_response, region, match.group(1), match.group(2)
                )
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        if checks_page_size(target):
            refused = page_size_problem(target, _json_params(environ))
            if refused is not None:
                return _moto_error(refused, environ, start_response)
        if target.startswith("SageMaker."):
            operation = target.partition(".")[2]
            if environ.get("HTTP_X_MMELOCAL_INTERNAL"):  # mmelocal's own: moto's records
                handler = self._sagemaker.get(operation) if operation in _OVERLAYS else None
            else:
                handler = self._sagemaker.get(operation)
            if handler is not None:
                return self._sagemaker_call(handler, environ, start_response, region)
        prefix, _, operation = target.partition(".")
        overlay = None if environ.get("HTTP_X_MMELOCAL_INTERNAL") else self.overlays.get(prefix)
        correction = self.corrections.get((prefix, operation))
        if overlay is not None or correction is not None:
            return self._overlay_call(
                overlay, correction, operation, environ, start_response, region
            )
        try:
            return self._moto(environ, start_response)
        except NotImplementedError as exc:  # the service's error, never an HTML 500
            return self._not_built(environ, start_response, target, exc)

    def _not_built(
        self, environ: dict[str, Any], start_response: StartResponse, target: str, exc: Exception
    ) -> Iterable[bytes]:
        operation = target.partition(".")[2] or environ.get("PATH_INFO", "")
        message = f"mmelocal's local AWS does not implement {operation or 'this operation'}"
        logger.warning("%s (%s)", message, exc)
        if target:  # a JSON protocol
            body = json.dumps({"__type": "UnknownOperationException", "message": message}).encode()
            headers = [
                ("Content-Type", _JSON_11),
                ("x-amzn-ErrorType", "UnknownOperationException"),
            ]
        else:
            body = (
                "<ErrorResponse><Error><Type>Sender</Type><Code>InvalidAction</Code>"
                f"<Message>{message}</Message></Error></ErrorResponse>"
            ).encode()
            headers = [("Content-Type", "text/xml")]
        start_response("400 Bad Request", [*headers, ("Content-Length", str(len(body)))])
        return [body]

    def _overlay_call(
        self,
        overlay: Overlay | None,
        correction: Overlay | None,
        operation: str,
        environ: dict[str, Any],
        start_response: StartResponse,
        region: str,
    ) -> Iterable[bytes]:
        params = _json_params(environ)
        region = region or "us-east-1"

        def to_moto(changed: dict[str, Any]) -> tuple[int, Any]:
            body = json.dumps(changed).encode()
            environ["wsgi.input"], environ["CONTENT_LENGTH"] = io.BytesIO(body), str(len(body))
            try:
                return self._moto_json(environ)
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
            return _moto_error(exc, environ, start_response)
        status, payload = answer
        return self._json_answer(
            start_response, status, payload, environ.get("CONTENT_TYPE") or _JSON_11
        )

    # -- SageMaker control plane -------------------------------------------------------
    def _sagemaker_call(
        self,
        handler: Callable[[dict[str, Any], str, dict[str, Any]], Any],
        environ: dict[str, Any],
        start_response: StartResponse,
        region: str,
    ) -> Iterable[bytes]:
        params = _json_params(environ)
        try:
            status, payload = handler(environ, region or "us-east-1", params)
        except AwsServiceError as exc:  # rendered by moto, as its own SageMaker errors
            return _moto_error(exc, environ, start_response)
        return self._json_answer(start_response, status, payload, _JSON_11)

    def _moto_json(self, environ: dict[str, Any]) -> tuple[int, Any]:
        """Forward the request to moto; its status and parsed JSON (bytes if not JSON)."""
        from werkzeug.wrappers import Response

        response = Response.from_app(self._moto, environ, buffered=True)
        data = response.get_data()
        try:
            return response.status_code, json.loads(data) if data else {}
        except ValueError:
            return response.status_code, data

    def _exists(self, region: str, describe: str, **name: str) -> dict[str, Any] | None:
        from botocore.exceptions import ClientError

        try:
            answer: dict[str, Any] = getattr(self._internal(region), describe)(**name)
        except ClientError:
            return None
        return answer

    def _check(self, operation: str, params: dict[str, Any]) -> None:
        problem = model_violations(operation, params)
        if problem is not None:
            raise AwsServiceError(problem)

    def _new_name(
        self,
        operation: str,
        region: str,
        params: dict[str, Any],
        describe: str,
        key: str,
        what: str,
    ) -> str:
        """The name under ``key`` that ``operation`` creates, after the checks of its
        parameters; refused as the service refuses it where ``describe`` finds that ``what``
        already."""
        self._check(operation, params)
        name = str(params.get(key, ""))
        existing = self._exists(region, describe, **{key: name})
        if existing is not None:
            arn = existing[key.removesuffix("Name") + "Arn"]
            raise AwsServiceError(f'Cannot create already existing {what} "{arn}".')
        return name

    def _endpoint_to_change(
        self, operation: str, region: str, params: dict[str, Any]
    ) -> tuple[str, dict[str, Any], EndpointState]:
        """The name, Describe answer and state of the endpoint ``operation`` changes, after
        the checks of its parameters; refused as the service refuses an unknown endpoint."""
        self._check(operation, params)
        name = str(params.get("EndpointName", ""))
        endpoint = self._exists(region, "describe_endpoint", EndpointName=name)
        state = self.endpoints.get(region, name)
        if endpoint is None or state is None:
            arn = f"arn:aws:sagemaker:{region}:{self.account_id}:endpoint/{name.lower()}"
            raise AwsServiceError(f'Could not find endpoint "{arn}".')
        return name, endpoint, state

    def _create_model(
        self, environ: dict[str, Any], region: str, params: dict[str, Any]
    ) -> tuple[int, Any]:
        self._new_name("CreateModel", region, params, "describe_model", "ModelName", "model")
        containers = [params.get("PrimaryContainer") or {}, *(params.get("Containers") or [])]
        for container in containers:
            problem = model_data_problem(container, keys_under=self._keys_under)
            if problem is not None:
                raise AwsServiceError(problem)
        return self._moto_json(environ)

    def _create_endpoint_config(
        self, environ: dict[str, Any], region: str, params: dict[str, Any]
    ) -> tuple[int, Any]:
        name = self._new_name(
            "CreateEndpointConfig",
            region,
            params,
            "describe_endpoint_config",
            "EndpointConfigName",
            "endpoint configuration",
        )
        # moto checks instance types against its own (older) list; the service's list is
        # botocore's enum, checked above: moto records a type it knows, this layer the real one
        variants = params.get("ProductionVariants") or []
        types = [v.get("InstanceType") if isinstance(v, dict) else None for v in variants]
        for variant in variants:
            if isinstance(variant, dict) and "InstanceType" in variant:
                variant["InstanceType"] = MOTO_INSTANCE_TYPE
        body = json.dumps(params).encode()
        environ["wsgi.input"], environ["CONTENT_LENGTH"] = io.BytesIO(body), str(len(body))
        status, answer = self._moto_json(environ)
        if status == 200:
            self._instance_types[(region, name)] = types
        return status, answer

    def _describe_model(
        self, environ: dict[str, Any], region: str, params: dict[str, Any]
    ) -> tuple[int, Any]:
        status, answer = self._moto_json(environ)
        return status, _without_unset(answer) if status == 200 else answer

    def _describe_endpoint_config(
        self, environ: dict[str, Any], region: str, params: dict[str, Any]
    ) -> tuple[int, Any]:
        status, answer = self._moto_json(environ)
        if status == 200:
            answer = _without_unset(answer)
        types = self._instance_types.get((region, str(params.get("EndpointConfigName", ""))))
        if status == 200 and isinstance(answer, dict) and types is not None:
            for variant, kind in zip(answer.get("ProductionVariants", []), types, strict=False):
                if kind is not None:
                    variant["InstanceType"] = kind
        return status, answer

    def _create_endpoint(
        self, environ: dict[str, Any], region: str, params: dict[str, Any]
    ) -> tuple[int, Any]:
        name = self._new_name(
            "CreateEndpoint", region, params, "describe_endpoint", "EndpointName", "endpoint"
        )
        status, answer = self._moto_json(environ)
        if status == 200:
            config_name = str(params["EndpointConfigName"])
            config = self._exists(
                region, "describe_endpoint_config", EndpointConfigName=config_name
            )
            variants = config.get("ProductionVariants") if config is not None else None
            self.endpoints.create(region, name, config_name, variants=variants)
        return status, answer

    def _update_endpoint(
        self, environ: dict[str, Any], region: str, params: dict[str, Any]
    ) -> tuple[int, Any]:
        name, endpoint, state = self._endpoint_to_change("UpdateEndpoint", region, params)
        config_name = str(params.get("EndpointConfigName", ""))
        config = self._exists(region, "describe_endpoint_config", EndpointConfigName=config_name)
        if config is None:
            arn = (
                f"arn:aws:sagemaker:{region}:{self.account_id}:endpoint-config/"
                f"{config_name.lower()}"
            )
            raise AwsServiceError(f'Could not find endpoint configuration "{arn}".')
        _refuse_unless_in_service(state, endpoint)
        for check in self.update_checks:
            check(region, name, endpoint, config)
        self.endpoints.update(
            region,
            name,
            config_name,
            retain=_retained(params),
            variants=config.get("ProductionVariants"),
        )
        return 200, {"EndpointArn": endpoint["EndpointArn"]}

    def _update_weights_and_capacities(
        self, environ: dict[str, Any], region: str, params: dict[str, Any]
    ) -> tuple[int, Any]:
        name, endpoint, state = self._endpoint_to_change(
            "UpdateEndpointWeightsAndCapacities", region, params
        )
        _refuse_unless_in_service(state, endpoint)
        fleets = state.fleets
        if fleets is None:
            raise AwsServiceError(ENDPOINT_IN_PROGRESS.format(arn=endpoint["EndpointArn"]))
        desired = list(params.get("DesiredWeightsAndCapacities") or [])
        seen: set[str] = set()
        for item in desired:
            variant = str(item.get("VariantName", ""))
            if variant in seen:
                raise AwsServiceError(DUPLICATE_VARIANT_IN_REQUEST.format(variant=variant))
            if fleets.get(variant) is None:
                raise AwsServiceError(
                    VARIANT_NOT_IN_CONFIG.format(variant=variant, config=fleets.config_name)
                )
            seen.add(variant)
            if item.get("DesiredInstanceCount") == 0:
                raise AwsServiceError(ZERO_INSTANCES.format(variant=variant))
        if not self.endpoints.update_weights_and_capacities(region, name, desired):
            # the autoscaler claimed it since the check above
            raise AwsServiceError(ENDPOINT_IN_PROGRESS.format(arn=endpoint["EndpointArn"]))
        return 200, {"EndpointArn": endpoint["EndpointArn"]}

    def _delete_endpoint(
        self, environ: dict[str, Any], region: str, params: dict[str, Any]
    ) -> tuple[int, Any]:
        name = str(params.get("EndpointName", ""))
        state = self.endpoints.get(region, name)
        if state is None or state.status == "Deleting":
            return self._moto_json(environ)  # moto's answer (not found, or a plain record)
        if not self.endpoints.delete(region, name):  # Creating or Updating
            endpoint = self._exists(region, "describe_endpoint", EndpointName=name) or {}
            raise AwsServiceError(ENDPOINT_IN_PROGRESS.format(arn=endpoint.get("EndpointArn")))
        return 200, {}

    def _describe_endpoint(
        self, environ: dict[str, Any], region: str, params: dict[str, Any]
    ) -> tuple[int, Any]:
        status, answer = self._moto_json(environ)
        if status == 200:
            answer = _without_unset(answer)
        state = self.endpoints.get(region, str(params.get("EndpointName", "")))
        if status == 200 and isinstance(answer, dict) and state is not None:
            answer["EndpointStatus"] = state.status
            answer["EndpointConfigName"] = state.config_name
            answer["LastModifiedTime"] = state.last_modified_s
            if state.created_s is not None:
                answer["CreationTime"] = state.created_s
            fleets = state.fleets
            if fleets is not None:
                answer["ProductionVariants"] = [dict(v) for v in fleets.described()]
            elif state.status in ("Creating", "Failed"):
                answer.pop("ProductionVariants", None)
            if state.failure_reason:
                answer["FailureReason"] = state.failure_reason
            else:
                answer.pop("FailureReason", None)
            if state.pending is not None:  # "only returned when the endpoint is creating or
                # updating with a new endpoint configuration" (botocore's sagemaker model)
                answer["PendingDeploymentSummary"] = state.pending
            else:
                answer.pop("PendingDeploymentSummary", None)
        return status, answer

    def _list_endpoints(
        self, environ: dict[str, Any], region: str, params: dict[str, Any]
    ) -> tuple[int, Any]:
        """Every endpoint whose name ``NameContains`` matches, shown as DescribeEndpoint
        shows it, then filtered, sorted and paged here (:func:`.endpoint_list.list_endpoints`):
        moto filters and sorts on its own records (a status and a LastModifiedTime that
        never change), and filtering its pages after it had cut them left pages short or
        empty while a NextToken remained."""
        query = {k: v for k, v in params.items() if k in _MOTO_LIST_FILTERS}
        body = json.dumps({**query, "MaxResults": _MOTO_EVERY_MATCH}).encode()
        environ["wsgi.input"], environ["CONTENT_LENGTH"] = io.BytesIO(body), str(len(body))
        status, answer = self._moto_json(environ)
        if status != 200 or not isinstance(answer, dict):
            return status, answer
        summaries = answer.get("Endpoints") or []
        for summary in summaries:
            state = self.endpoints.get(region, summary.get("EndpointName", ""))
            if state is not None:
                summary["EndpointStatus"] = state.status
                summary["LastModifiedTime"] = state.last_modified_s
                if state.created_s is not None:
                    summary["CreationTime"] = state.created_s
        return status, list_endpoints(summaries, params)

    # -- runtime -----------------------------------------------------------------------
    def _invoke(
        self, environ: dict[str, Any], start_response: StartResponse, region: str, name: str
    ) -> Iterable[bytes]:
        import urllib3

        from mmelocal.emulator.answers import sagemaker_error

        fleets = self.endpoints.variants(region or "us-east-1", name)
        target = environ.get("HTTP_X_AMZN_SAGEMAKER_TARGET_MODEL")
        if fleets is None:
            answer = sagemaker_error(
                400, "ValidationError", f"Endpoint {name} of account {self.account_id} not found."
            )
            return self._answer(start_response, answer.status, answer.headers, answer.body)
        component = environ.get(_INFERENCE_COMPONENT_KEY)
        if component is not None:  # no endpoint here hosts inference components
            answer = sagemaker_error(
                400,
                "ValidationError",
                f"Inference component {component} not found: endpoint {name} of account "
                f"{self.account_id} hosts no inference components.",
            )
            return self._answer(start_response, answer.status, answer.headers, answer.body)
        wanted = environ.get(_TARGET_VARIANT_KEY)
        refused = None if wanted is None else target_variant_error(wanted, name, fleets.names())
        variant = None if refused is not None else fleets.choose(wanted)
        if variant is None:  # refused, or an update removed the variant since the check
            message = refused or target_variant_error(str(wanted), name, fleets.names())
            answer = sagemaker_error(400, "ValidationError", str(message))
            return self._answer(start_response, answer.status, answer.headers, answer.body)
        fleet = variant.fleet
        single = fleet.plan.single_model_target
        if single is not None and target is not None:
            answer = sagemaker_error(
                400,
                "ValidationError",
                f"Endpoint {name} is not a multi-model endpoint and does not support target "
                "model header.",
            )
            return self._answer(start_response, answer.status, answer.headers, answer.body)
        headers = {h: environ[k] for h in _FORWARDED if (k := _environ_key(h)) in environ}
        for key, value in environ.items():
            if key.startswith("HTTP_X_AMZN_SAGEMAKER_") and key != _TARGET_VARIANT_KEY:
                headers["-".join(p.capitalize() for p in key[5:].split("_"))] = value
        if single is not None:
            headers[TARGET_MODEL_HEADER] = single
        body = _read_body(environ)
        try:
            with fleet.call():
                response = self._http.request(
                    "POST",
                    f"{fleet.url}/endpoints/{name}/invocations",
                    body=body,
                    headers=headers,
                    timeout=LOAD_AND_INVOKE_TIMEOUT_S,
                    preload_content=True,
                )
        except urllib3.exceptions.HTTPError as exc:  # the fleet stopped under the call
            answer = sagemaker_error(
                503, "ServiceUnavailable", f"Endpoint {name} could not serve the call: {exc}"
            )
            return self._answer(start_response, answer.status, answer.headers, answer.body)
        out = [(k, v) for k, v in response.headers.items() if k.lower() not in _HOP_BY_HOP]
        data = response.data
        if response.status == 424 and self.logs is not None:  # ModelError: name its stream
            data = self.logs.model_error_body(region or "us-east-1", fleet, data)
        return self._answer(start_response, response.status, out, data)

    def _refuse_invocation(
        self,
        environ: dict[str, Any],
        start_response: StartResponse,
        region: str,
        name: str,
        kind: str,
    ) -> Iterable[bytes]:
        """``InvokeEndpointAsync`` or ``InvokeEndpointWithResponseStream`` (``kind``, the
        path's last part), refused as the service refuses them on an endpoint that lacks
        what they need (every endpoint here does: neither is emulated), rather than moto's
        canned success whose output never appears or its HTML 404."""
        from mmelocal.emulator.answers import sagemaker_error

        _read_body(environ)
        if self.endpoints.variants(region or "us-east-1", name) is None:
            message = f"Endpoint {name} of account {self.account_id} not found."
        else:
            message = (
                f"Endpoint {name} {_UNSERVED[kind]}: mmelocal's local AWS serves "
                "InvokeEndpoint only."
            )
        answer = sagemaker_error(400, "ValidationError", message)
        return self._answer(start_response, answer.status, answer.headers, answer.body)

    @classmethod
    def _json_answer(
        cls, start_response: StartResponse, status: int, payload: Any, content_type: str
    ) -> Iterable[bytes]:
        """``payload`` (JSON, or bytes as they are) as the answer."""
        body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        return cls._answer(start_response, status, [("Content-Type", content_type)], body)

    @staticmethod
    def _answer(
        start_response: StartResponse, status: int, headers: Iterable[tuple[str, str]], body: bytes
    ) -> Iterable[bytes]:
        headers = [*headers, ("Content-Length", str(len(body)))]
        start_response(f"{status} {'OK' if status == 200 else 'Error'}", headers)
        return [body]


def _retained(params: dict[str, Any]) -> frozenset[str]:
    """The variant properties an ``UpdateEndpoint`` keeps from the running variants: none
    unless ``RetainAllVariantProperties``, then all but those
    ``ExcludeRetainedVariantProperties`` names."""
    if not params.get("RetainAllVariantProperties"):
        return frozenset()
    excluded = {
        str(p.get("VariantPropertyType"))
        for p in params.get("ExcludeRetainedVariantProperties") or []
        if isinstance(p, dict)
    }
    return RETAINED_VARIANT_PROPERTIES - excluded


def _refuse_unless_in_service(state: EndpointState, endpoint: dict[str, Any]) -> None:
    """The service's refusal to change an endpoint that is not InService: a Failed one
    can only be deleted, one in progress waits for its change to end."""
    if state.status == "Failed":
        raise AwsServiceError(ENDPOINT_FAILED.format(arn=endpoint["EndpointArn"]))
    if state.status != "InService":
        raise AwsServiceError(ENDPOINT_IN_PROGRESS.format(arn=endpoint["EndpointArn"]))


def _json_params(environ: dict[str, Any]) -> Any:
    """The request's JSON parameters (none where the body is not JSON: the operation's own
    checks then name what is missing)."""
    try:
        return json.loads(_read_body(environ) or b"{}")
    except ValueError:
        return {}


def _moto_error(
    exc: AwsServiceError, environ: dict[str, Any], start_response: StartResponse
) -> Iterable[bytes]:
    """``exc`` rendered by moto, as its own errors of the JSON protocols."""
    from moto.core.exceptions import JsonRESTError

    error = JsonRESTError(exc.code, str(exc))
    error.code = exc.status
    return error(environ, start_response)  # type: ignore[no-any-return]


def _without_unset(answer: Any) -> Any:
    """A Describe answer without the empty structures and lists moto writes for what was
    never set (``VpcConfig: {}``, ``DataCaptureConfig: {}``, ``Containers: []``): the
    service leaves them out, and clients that validate the answer (the SageMaker SDK 3.x's
    pydantic resources) refuse an empty structure whose members are required."""
    if not isinstance(answer, dict):
        return answer
    return {k: v for k, v in answer.items() if v != {} and v != []}


def _environ_key(header: str) -> str:
    key = header.upper().replace("-", "_")
    return key if key in ("CONTENT_TYPE", "CONTENT_LENGTH") else f"HTTP_{key}"


__all__ = ["INTERNAL_HEADER", "OWN_HEADER", "LocalAwsApp", "credential_scope"]
