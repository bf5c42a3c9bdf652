"""SageMaker's control-plane operations completed around moto: the service's checks moto
lacks (:mod:`mmelocal.localaws.checks`) before moto records anything, then moto, then the
endpoint's lifecycle (:mod:`mmelocal.localaws.endpoints`; a new endpoint is Creating there
before moto records it, so that no answer shows moto's record alone, InService).
``UpdateEndpoint``, which moto does not have, and ``UpdateEndpointWeightsAndCapacities``
are answered here; the Describe answers and ``ListEndpoints`` show what the endpoint's
fleets are, not moto's first record."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from mmelocal.errors import AwsServiceError
from mmelocal.facts.runtime_api import (
    CONFIG_IN_USE,
    DUPLICATE_VARIANT_IN_REQUEST,
    ENDPOINT_FAILED,
    ENDPOINT_IN_PROGRESS,
    RETAINED_VARIANT_PROPERTIES,
    VARIANT_NOT_IN_CONFIG,
    ZERO_INSTANCES,
)
from mmelocal.localaws.app.wsgi import WsgiApp, moto_json, replace_body
from mmelocal.localaws.checks import environment_problem, model_data_problem, model_violations
from mmelocal.localaws.endpoints import EndpointManager, EndpointState
from mmelocal.localaws.listing import LISTINGS, list_page

#: (environ, region, parameters) -> the operation's status and JSON answer
Handler = Callable[[dict[str, Any], str, dict[str, Any]], Any]
#: (region, endpoint, its DescribeEndpoint, the new config) -> raise AwsServiceError to
#: refuse an UpdateEndpoint
UpdateCheck = Callable[[str, str, dict[str, Any], dict[str, Any]], None]

#: an instance type moto's (lagging) list accepts, recorded in moto in place of the real one
MOTO_INSTANCE_TYPE = "ml.m5.large"
#: a ``MaxResults`` that has moto answer every record at once (it sets no upper bound)
_MOTO_EVERY_MATCH = 2**31 - 1


#: the ARNs whose ``ListTags`` the local AWS answers itself when the resource is missing
_TAGGED = re.compile(
    r"^arn:aws[a-z-]*:sagemaker:[a-z0-9-]+:\d{12}:(model|endpoint-config|endpoint)/(.+)$"
)
#: resource kind in an ARN -> (its Describe method, its name member, its name in messages)
_TAGGED_KINDS = {
    "model": ("describe_model", "ModelName", "model"),
    "endpoint-config": ("describe_endpoint_config", "EndpointConfigName", "endpoint configuration"),
    "endpoint": ("describe_endpoint", "EndpointName", "endpoint"),
}


class SageMakerControlPlane:
    """The SageMaker operations this layer answers (:attr:`handlers`; see the module
    docstring)."""

    def __init__(
        self,
        *,
        moto_app: WsgiApp,
        endpoints: EndpointManager,
        keys_under: Callable[[str, str], list[str] | None],
        internal: Callable[[str], Any],
        account_id: str,
        update_checks: list[UpdateCheck],
    ) -> None:
        self._moto = moto_app
        self.endpoints = endpoints
        self._keys_under = keys_under
        self._internal = internal
        self.account_id = account_id
        #: what may refuse an UpdateEndpoint (the app's list, which others fill)
        self.update_checks = update_checks
        #: (region, config) -> each variant's InstanceType (moto's list of types lags)
        self._instance_types: dict[tuple[str, str], list[str | None]] = {}
        #: operation -> its handler
        self.handlers: dict[str, Handler] = {
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
            "ListModels": self._list_records,
            "ListEndpointConfigs": self._list_records,
            "ListTags": self._list_tags,
        }

    def _moto_json(self, environ: dict[str, Any]) -> tuple[int, Any]:
        return moto_json(self._moto, environ)

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
        too_large = environment_problem(params)
        if too_large is not None:
            raise AwsServiceError(too_large)
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
        replace_body(environ, params)
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
        config_name = str(params.get("EndpointConfigName", ""))
        config = self._exists(region, "describe_endpoint_config", EndpointConfigName=config_name)
        variants = config.get("ProductionVariants") if config is not None else None
        # Creating before moto records it: no answer shows moto's record alone (InService)
        state = self.endpoints.create(region, name, config_name, variants=variants)
        if state is None:
            arn = f"arn:aws:sagemaker:{region}:{self.account_id}:endpoint/{name.lower()}"
            raise AwsServiceError(f'Cannot create already existing endpoint "{arn}".')
        try:
            status, answer = self._moto_json(environ)
        except BaseException:
            self.endpoints.discard(state)
            raise
        if status == 200:
            self.endpoints.start(state)
        else:
            self.endpoints.discard(state)
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
        if config_name == state.config_name:  # "you must create a new EndpointConfig"
            raise AwsServiceError(CONFIG_IN_USE.format(config=config_name))
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

    def _list_tags(
        self, environ: dict[str, Any], region: str, params: dict[str, Any]
    ) -> tuple[int, Any]:
        """``ListTags`` of a model, endpoint config or endpoint that does not exist (never
        made, or deleted: an endpoint's deletion ends while an undeploy reads its tags) is
        refused with ``ValidationException``, as the service refuses the tags of a deleted
        resource (aws/amazon-sagemaker-feedback#108); moto failed with a 500 there (it reads
        the tags of None). The message is mmelocal's."""
        arn = str(params.get("ResourceArn", ""))
        found = _TAGGED.match(arn)
        if found is None:
            return self._moto_json(environ)
        describe, key, what = _TAGGED_KINDS[found.group(1)]
        try:
            status, answer = self._moto_json(environ)
        except Exception:
            status, answer = 500, None
        if status < 500:
            return status, answer
        if self._exists(region, describe, **{key: found.group(2)}) is None:
            raise AwsServiceError(f'Could not find {what} "{arn}" to list its tags.')
        replace_body(environ, params)  # the first call read the body
        return self._moto_json(environ)  # there after all: moto's answer, as it is

    def _every_record(self, environ: dict[str, Any]) -> tuple[int, Any]:
        """moto's answer to the request asked for every record at once, unfiltered: the
        local AWS filters, sorts and pages (:mod:`.listing`)."""
        replace_body(environ, {"MaxResults": _MOTO_EVERY_MATCH})
        return self._moto_json(environ)

    def _list_records(
        self, environ: dict[str, Any], region: str, params: dict[str, Any]
    ) -> tuple[int, Any]:
        """``ListModels`` or ``ListEndpointConfigs`` (the ``X-Amz-Target``'s operation) as the
        service answers it (:func:`.listing.list_page`): moto ignores ``ListModels``'
        filters, sort and page size, and sorts ``ListEndpointConfigs`` ascending."""
        operation = str(environ.get("HTTP_X_AMZ_TARGET", "")).partition(".")[2]
        self._check(operation, params)
        status, answer = self._every_record(environ)
        if status != 200 or not isinstance(answer, dict):
            return status, answer
        records = answer.get(LISTINGS[operation].key) or []
        return status, list_page(operation, records, params)

    def _list_endpoints(
        self, environ: dict[str, Any], region: str, params: dict[str, Any]
    ) -> tuple[int, Any]:
        """Every endpoint, shown as DescribeEndpoint shows it, then sorted, paged and
        filtered here (:func:`.listing.list_page`): moto filters and sorts on its own
        records (a status and a LastModifiedTime that never change)."""
        self._check("ListEndpoints", params)
        status, answer = self._every_record(environ)
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
        return status, list_page("ListEndpoints", summaries, params)


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


def _without_unset(answer: Any) -> Any:
    """A Describe answer without the empty structures and lists moto writes for what was
    never set (``VpcConfig: {}``, ``DataCaptureConfig: {}``, ``Containers: []``): the
    service leaves them out, and clients that validate the answer (the SageMaker SDK 3.x's
    pydantic resources) refuse an empty structure whose members are required."""
    if not isinstance(answer, dict):
        return answer
    return {k: v for k, v in answer.items() if v != {} and v != []}


__all__ = ["MOTO_INSTANCE_TYPE", "Handler", "SageMakerControlPlane", "UpdateCheck"]
