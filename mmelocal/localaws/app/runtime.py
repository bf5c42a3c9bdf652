"""The SageMaker runtime's face: ``POST /endpoints/{name}/invocations`` forwarded to the
emulator of one of the endpoint's production variants (``TargetVariant``, else drawn by
weight: :mod:`mmelocal.localaws.variants`), and the runtime calls no endpoint here serves
(``InvokeEndpointAsync``, ``InvokeEndpointWithResponseStream``) refused as the service
refuses them. An endpoint not in service, an unknown variant or inference component, and
a target model on a single-model endpoint answer the service's ``ValidationError``."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from mmelocal.facts.aws import LOCAL_REGION
from mmelocal.facts.runtime_api import TARGET_VARIANT_HEADER, UNSERVED_RUNTIME_CALLS
from mmelocal.facts.sagemaker import LOAD_AND_INVOKE_TIMEOUT_S, TARGET_MODEL_HEADER
from mmelocal.localaws.app.answers import answer
from mmelocal.localaws.app.wsgi import StartResponse, environ_key, read_body
from mmelocal.localaws.endpoints import EndpointManager
from mmelocal.localaws.logs import LogShipper
from mmelocal.rules.variants import target_variant_error

_INVOCATION = re.compile(r"^/endpoints/([^/]+)/invocations$")
#: the runtime's calls no endpoint here serves: InvokeEndpointAsync, and
#: InvokeEndpointWithResponseStream (botocore's sagemaker-runtime model)
_UNSERVED_INVOCATION = re.compile(
    rf"^/endpoints/([^/]+)/({'|'.join(map(re.escape, UNSERVED_RUNTIME_CALLS))})$"
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
_TARGET_VARIANT_KEY = "HTTP_" + TARGET_VARIANT_HEADER.upper().replace("-", "_")
#: InvokeEndpoint's request headers the emulator reads
_FORWARDED = ("Content-Type", "Accept", "Content-Encoding")
_HOP_BY_HOP = frozenset(
    ("connection", "keep-alive", "transfer-encoding", "content-length", "date", "server")
)


class RuntimeFace:
    """The runtime calls of the local AWS's endpoints (see the module docstring)."""

    def __init__(
        self, *, endpoints: EndpointManager, account_id: str, logs: LogShipper | None
    ) -> None:
        import urllib3

        self.endpoints = endpoints
        self.account_id = account_id
        self.logs = logs
        self._http = urllib3.PoolManager(maxsize=64, retries=False)

    def serve(
        self, environ: dict[str, Any], start_response: StartResponse, region: str, path: str
    ) -> Iterable[bytes] | None:
        """The answer to a runtime call on ``path``, or None where ``path`` is not one."""
        match = _INVOCATION.match(path)
        if match:
            return self._invoke(environ, start_response, region, match.group(1))
        match = _UNSERVED_INVOCATION.match(path)
        if match:
            return self._refuse_invocation(
                environ, start_response, region, match.group(1), match.group(2)
            )
        return None

    def _invoke(
        self, environ: dict[str, Any], start_response: StartResponse, region: str, name: str
    ) -> Iterable[bytes]:
        import urllib3

        from mmelocal.emulator.answers import sagemaker_error

        fleets = self.endpoints.variants(region or LOCAL_REGION, name)
        target = environ.get("HTTP_X_AMZN_SAGEMAKER_TARGET_MODEL")
        if fleets is None:
            refusal = sagemaker_error(
                400, "ValidationError", f"Endpoint {name} of account {self.account_id} not found."
            )
            return answer(start_response, refusal.status, refusal.headers, refusal.body)
        component = environ.get(_INFERENCE_COMPONENT_KEY)
        if component is not None:  # no endpoint here hosts inference components
            refusal = sagemaker_error(
                400,
                "ValidationError",
                f"Inference component {component} not found: endpoint {name} of account "
                f"{self.account_id} hosts no inference components.",
            )
            return answer(start_response, refusal.status, refusal.headers, refusal.body)
        wanted = environ.get(_TARGET_VARIANT_KEY)
        refused = None if wanted is None else target_variant_error(wanted, name, fleets.names())
        variant = None if refused is not None else fleets.choose(wanted)
        if variant is None:  # refused, or an update removed the variant since the check
            message = refused or target_variant_error(str(wanted), name, fleets.names())
            refusal = sagemaker_error(400, "ValidationError", str(message))
            return answer(start_response, refusal.status, refusal.headers, refusal.body)
        fleet = variant.fleet
        single = fleet.plan.single_model_target
        if single is not None and target is not None:
            refusal = sagemaker_error(
                400,
                "ValidationError",
                f"Endpoint {name} is not a multi-model endpoint and does not support target "
                "model header.",
            )
            return answer(start_response, refusal.status, refusal.headers, refusal.body)
        headers = {h: environ[k] for h in _FORWARDED if (k := environ_key(h)) in environ}
        for key, value in environ.items():
            if key.startswith("HTTP_X_AMZN_SAGEMAKER_") and key != _TARGET_VARIANT_KEY:
                headers["-".join(p.capitalize() for p in key[5:].split("_"))] = value
        if single is not None:
            headers[TARGET_MODEL_HEADER] = single
        body = read_body(environ)
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
            refusal = sagemaker_error(
                503, "ServiceUnavailable", f"Endpoint {name} could not serve the call: {exc}"
            )
            return answer(start_response, refusal.status, refusal.headers, refusal.body)
        out = [(k, v) for k, v in response.headers.items() if k.lower() not in _HOP_BY_HOP]
        data = response.data
        if response.status == 424 and self.logs is not None:  # ModelError: name its stream
            data = self.logs.model_error_body(region or LOCAL_REGION, fleet, data)
        return answer(start_response, response.status, out, data)

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

        read_body(environ)
        if self.endpoints.variants(region or LOCAL_REGION, name) is None:
            message = f"Endpoint {name} of account {self.account_id} not found."
        else:
            message = (
                f"Endpoint {name} {_UNSERVED[kind]}: mmelocal's local AWS serves "
                "InvokeEndpoint only."
            )
        refusal = sagemaker_error(400, "ValidationError", message)
        return answer(start_response, refusal.status, refusal.headers, refusal.body)


__all__ = ["RuntimeFace"]
