"""Production variants, endpoint logs and the runtime API's variant headers: the service's
names and messages, each with where it comes from.

Sources:

* botocore's ``sagemaker-runtime`` model (``botocore/data/sagemaker-runtime/2017-05-13/
  service-2.json``): ``InvokeEndpoint``'s ``TargetVariant`` is the request header
  ``X-Amzn-SageMaker-Target-Variant``; the answer's ``InvokedProductionVariant`` is the
  header ``x-Amzn-Invoked-Production-Variant`` (its name lives in
  :mod:`mmelocal.facts.sagemaker` with the other runtime headers).
* "Testing models with production variants" (SageMaker developer guide,
  https://docs.aws.amazon.com/sagemaker/latest/dg/model-ab-testing.html): traffic is shared
  by the variants' weights; ``TargetVariant`` overrides the weights for that call.
* CreateEndpointConfig / ProductionVariant API reference: a variant's traffic share is its
  weight divided by the sum of all weights; the SageMaker SDK names a lone variant
  ``AllTraffic``.
* "Log Amazon SageMaker AI events with Amazon CloudWatch" (SageMaker developer guide,
  https://docs.aws.amazon.com/sagemaker/latest/dg/logging-cloudwatch.html): endpoints log to
  the group ``/aws/sagemaker/Endpoints/[EndpointName]``, stream
  ``[production-variant-name]/[instance-id]``.
"""

from __future__ import annotations

#: the runtime calls besides InvokeEndpoint, by their request path's last part (botocore's
#: sagemaker-runtime model: ``POST /endpoints/{EndpointName}/async-invocations``,
#: ``.../invocations-response-stream``): neither the emulator nor the local AWS serves them
UNSERVED_RUNTIME_CALLS = {
    "async-invocations": "InvokeEndpointAsync",
    "invocations-response-stream": "InvokeEndpointWithResponseStream",
}
#: InvokeEndpoint's request header naming the variant to serve the call
TARGET_VARIANT_HEADER = "X-Amzn-SageMaker-Target-Variant"
#: the variant name the SageMaker SDK gives a lone variant (``production_variant()``)
DEFAULT_VARIANT_NAME = "AllTraffic"
#: ``InitialVariantWeight`` when the config leaves it out (ProductionVariant API reference)
DEFAULT_VARIANT_WEIGHT = 1.0

#: an unknown ``TargetVariant``: the service answers ``ValidationError`` (HTTP 400) with the
#: variant's name in the message (the SageMaker SDK's integration test
#: ``test_spark_ml_predict_invocation_with_target_variant`` asserts both); the exact wording
#: is not published, so this one is ours
UNKNOWN_TARGET_VARIANT = (
    'The variant name "{variant}" is not present in endpoint "{endpoint}". Valid variant '
    "names: {valid}."
)

#: UpdateEndpointWeightsAndCapacities' ``ValidationException`` messages (as moto words them,
#: from the service's answers: moto's ``update_endpoint_weights_and_capacities``)
DUPLICATE_VARIANT_IN_REQUEST = 'The variant name "{variant}" was non-unique within the request.'
VARIANT_NOT_IN_CONFIG = (
    'The variant name(s) "{variant}" is/are not present within endpoint configuration "{config}".'
)
#: UpdateEndpoint / UpdateEndpointWeightsAndCapacities on an endpoint not InService, and
#: DeleteEndpoint on one Creating or Updating
ENDPOINT_IN_PROGRESS = 'Cannot update in-progress endpoint "{arn}".'
#: DescribeEndpoint's ``EndpointStatus`` values of an endpoint whose change is under way:
#: Creating and Updating (an autoscaler's resize too) refuse a change or a delete with
#: :data:`ENDPOINT_IN_PROGRESS`; SystemUpdating and RollingBack are the service's own
#: changes, which ``mmelocal undeploy`` waits out as well (the local AWS never shows them)
IN_PROGRESS_STATUSES = frozenset({"Creating", "Updating", "SystemUpdating", "RollingBack"})
#: DescribeEndpoint's ``EndpointStatus`` values (botocore's sagemaker model) of an endpoint
#: with nothing to invoke: OutOfService "is not available to take incoming requests",
#: Creating and Deleting (CreateEndpoint / DeleteEndpoint "is executing"), Failed ("could not
#: be created, updated, or re-scaled"; its ``FailureReason`` says why)
NO_REQUESTS_STATUSES = frozenset({"OutOfService", "Creating", "Deleting", "Failed"})
#: DescribeEndpoint's ``EndpointStatus`` (botocore's model) of an endpoint that stays so until
#: its owner acts: "Both the rolling deployment and auto-rollback failed. Your endpoint is
#: in service with a mix of the old and new endpoint configurations", to be restored as the
#: Rolling Deployments guide (:data:`ROLLING_DEPLOYMENTS_URL`) says
UPDATE_ROLLBACK_FAILED = "UpdateRollbackFailed"
ROLLING_DEPLOYMENTS_URL = (
    "https://docs.aws.amazon.com/sagemaker/latest/dg/deployment-guardrails-rolling.html"
)
#: ... on a Failed one: DescribeEndpoint's ``EndpointStatus`` (botocore's model) says
#: "DeleteEndpoint is the only operation that can be performed on a failed endpoint"; the
#: service's ``ValidationException`` reads "Cannot update failed endpoint" (deploy scripts
#: match it), worded as the in-progress one with the endpoint's ARN
ENDPOINT_FAILED = 'Cannot update failed endpoint "{arn}".'
#: UpdateEndpoint to the config the endpoint serves: UpdateEndpoint's API reference says "To
#: update an endpoint, you must create a new EndpointConfig"; the service's
#: ``ValidationException`` as deploy scripts quote it (measured, quoted in the comments of
#: public deploy scripts; their trailing period, if any, not shown)
CONFIG_IN_USE = 'Cannot update endpoint with the currently in use endpoint configuration "{config}"'
#: DesiredInstanceCount 0 (serverless-style scale to zero) on an instance-backed variant
ZERO_INSTANCES = (
    "Variant {variant}: DesiredInstanceCount 0 is for endpoints that host inference "
    "components; an instance-backed variant keeps at least 1 instance."
)

#: the variant properties ``UpdateEndpoint``'s ``RetainAllVariantProperties`` keeps from the
#: running variants (botocore's ``VariantPropertyType``; its third, ``DataCaptureConfig``,
#: is "Not currently supported"); ``ExcludeRetainedVariantProperties`` names those the new
#: config's ``InitialInstanceCount`` / ``InitialVariantWeight`` override
RETAINED_VARIANT_PROPERTIES = frozenset({"DesiredInstanceCount", "DesiredWeight"})

#: the CloudWatch Logs group of an endpoint and its streams (one per variant and instance)
LOG_GROUP = "/aws/sagemaker/Endpoints/{endpoint}"
LOG_STREAM = "{variant}/{instance_id}"


def log_group_name(endpoint: str) -> str:
    """``/aws/sagemaker/Endpoints/{endpoint}``."""
    return LOG_GROUP.format(endpoint=endpoint)


def log_stream_arn(region: str, account: str, endpoint: str, stream: str) -> str:
    """The ARN of one stream of an endpoint's log group (``ModelError``'s ``LogStreamArn``)."""
    return (
        f"arn:aws:logs:{region}:{account}:log-group:{log_group_name(endpoint)}:log-stream:{stream}"
    )


__all__ = [
    "CONFIG_IN_USE",
    "DEFAULT_VARIANT_NAME",
    "DEFAULT_VARIANT_WEIGHT",
    "DUPLICATE_VARIANT_IN_REQUEST",
    "ENDPOINT_FAILED",
    "ENDPOINT_IN_PROGRESS",
    "IN_PROGRESS_STATUSES",
    "LOG_GROUP",
    "LOG_STREAM",
    "NO_REQUESTS_STATUSES",
    "RETAINED_VARIANT_PROPERTIES",
    "ROLLING_DEPLOYMENTS_URL",
    "TARGET_VARIANT_HEADER",
    "UNKNOWN_TARGET_VARIANT",
    "UNSERVED_RUNTIME_CALLS",
    "UPDATE_ROLLBACK_FAILED",
    "VARIANT_NOT_IN_CONFIG",
    "ZERO_INSTANCES",
    "log_group_name",
    "log_stream_arn",
]
