"""SageMaker's limits, timeouts, name rules, header names and the memory threshold of its MME
procedures.

Each number here is one fact with one name; the modules that use it import it from here
(the emulator, the runtime's SageMaker client, bench, deploy and the CLI's defaults).
Where a figure is mmelocal's own choice rather than the platform's, its comment says so.

Sources: the InvokeEndpoint API reference
(https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_runtime_InvokeEndpoint.html),
botocore's service model (``botocore/data/sagemaker-runtime/2017-05-13/service-2.json``),
the MME guide ("Retry Requests on ModelNotReadyException Errors") and Triton 2.51's
SageMaker front end (``src/sagemaker_server.cc``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

# --- the InvokeEndpoint body -------------------------------------------------------------

#: The largest InvokeEndpoint body, in bytes: 6 MiB. botocore's model gives ``BodyBlob``
#: ``"max": 6291456`` (botocore does not enforce it on the client) and the API reference
#: says "6 MB". We take botocore's figure, which the emulator has always enforced: it is
#: the only exact number published, the service's own 413 message names a binary figure
#: (with the older 5 MB limit it read "HTTP content length exceeded 5246976 bytes",
#: aws/sagemaker-python-sdk#171: more than 5,000,000), and of the two readings of "6 MB" it
#: is the one that never refuses a body the service accepts. A larger body is answered 413
#: with no ``__type``: boto3 raises ClientError with Code "413".
MAX_PAYLOAD_BYTES: Final = 6_291_456

# --- names -------------------------------------------------------------------------------

#: The rule for an ``EndpointName``, as botocore's models give it: the runtime's
#: (``sagemaker-runtime``: pattern ``^[a-zA-Z0-9](-*[a-zA-Z0-9])*``, ``"max": 63``) and the
#: control plane's (``sagemaker``: the same with ``{0,62}`` groups, ``"max": 63``) are the
#: same rule: this pattern (matched whole) and this length. The pattern is the runtime's
#: text, which the service's validation message quotes.
ENDPOINT_NAME_PATTERN: Final = "^[a-zA-Z0-9](-*[a-zA-Z0-9])*"
MAX_ENDPOINT_NAME_LENGTH: Final = 63
#: A model's ``Environment`` in CreateModel (botocore's sagemaker model and the API
#: reference; botocore's validator checks none of these): at most this many entries, keys
#: matching this pattern, values of at most this many bytes, keys and values together at
#: most this many bytes (32 KB).
MAX_ENVIRONMENT_ENTRIES: Final = 100
ENVIRONMENT_KEY_PATTERN: Final = "^[a-zA-Z_][a-zA-Z0-9_]{0,1023}$"
MAX_ENVIRONMENT_VALUE_BYTES: Final = 1024
MAX_ENVIRONMENT_TOTAL_BYTES: Final = 32 * 1024
#: The longest ``TargetModel`` (botocore's ``TargetModelHeader``: 1 to 1024 characters,
#: pattern ``\A\S[\p{Print}]*\z``).
MAX_TARGET_MODEL_LENGTH: Final = 1024
#: ``TargetModel``'s pattern, as botocore's ``TargetModelHeader`` gives it (and the
#: service's validation message quotes it).
TARGET_MODEL_PATTERN: Final = r"\A\S[\p{Print}]*\z"


def environment_bytes(environment: Mapping[str, str]) -> int:
    """The bytes of an ``Environment``'s keys and values together (UTF-8), what
    :data:`MAX_ENVIRONMENT_TOTAL_BYTES` bounds."""
    return sum(len(k.encode()) + len(v.encode()) for k, v in environment.items())


def target_model_problem(target: str) -> str | None:
    """What is wrong with ``target`` as a ``TargetModel`` by the service's rule (1 to
    :data:`MAX_TARGET_MODEL_LENGTH` characters, :data:`TARGET_MODEL_PATTERN`: no control
    character, not starting with whitespace), or None. The emulator's store adds its own
    rules for a safe key (no ``..``) on top."""
    shown = repr(target[:80]) + ("..." if len(target) > 80 else "")
    if not target:
        return "TargetModel must not be empty"
    if len(target) > MAX_TARGET_MODEL_LENGTH:
        return (
            f"TargetModel must be at most {MAX_TARGET_MODEL_LENGTH} characters, got {len(target)}"
        )
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in target):
        return f"TargetModel {shown} contains NUL or control characters"
    if target[0].isspace() or not target.isprintable():
        return (
            f"TargetModel {shown} failed to satisfy constraint: Member must satisfy regular "
            f"expression pattern: {TARGET_MODEL_PATTERN} (printable characters, not starting "
            "with whitespace)"
        )
    return None


#: The longest ``CustomAttributes`` (botocore's ``CustomAttributesHeader``: at most 1024
#: characters, pattern ``\p{ASCII}*``; botocore checks neither on the client).
MAX_CUSTOM_ATTRIBUTES_LENGTH: Final = 1024
#: The longest ``InferenceId`` (botocore's ``InferenceId``: 1 to 64 characters, the
#: pattern of ``TargetModel``).
MAX_INFERENCE_ID_LENGTH: Final = 64

#: The ``EndpointStatus`` values of an endpoint whose production variants serve
#: invocations: InService, and Updating ("UpdateEndpoint or
#: UpdateEndpointWeightsAndCapacities is executing", botocore's sagemaker model), while
#: which the variants that ran before the update go on serving.
SERVING_ENDPOINT_STATUSES: Final = ("InService", "Updating")

# --- the platform's times (seconds) ------------------------------------------------------

#: How long the container may take to answer one invocation (InvokeEndpoint API reference:
#: "the model container has 60 seconds to respond"); past it the caller gets a ModelError.
INVOKE_TIMEOUT_S: Final = 60.0
#: How long a call to a cold model waits for its load before the platform answers
#: ``ModelNotReadyException`` (429) while the load goes on (the MME guide).
MODEL_NOT_READY_AFTER_S: Final = 60.0
#: How long the platform lets a cold load go on after that answer (the MME guide: "up to
#: 360 seconds"); a load that takes longer has failed.
LOAD_LIMIT_S: Final = 360.0
#: How long Triton's SageMaker front end polls after ``DELETE /models/NAME`` for the model
#: to become unavailable before it answers (``SageMakerMMEUnloadModel``, 2.51).
TRITON_UNLOAD_WAIT_S: Final = 350.0
#: How long mmelocal waits for that DELETE to answer: Triton's wait plus a margin, so that
#: Triton's own answer (or failure) arrives first.
UNLOAD_TIMEOUT_S: Final = TRITON_UNLOAD_WAIT_S + 10.0

# --- mmelocal's own waits and thresholds (not the platform's) ----------------------------

#: How long mmelocal waits for one load it asks a Triton for directly (``check``,
#: ``capacity``, :class:`~mmelocal.runtime.client.TritonClient`), outside the emulator. Not
#: a platform limit: shorter than :data:`LOAD_LIMIT_S`, so that a load that hangs (a Python
#: stub that cannot start never answers) fails in minutes.
DIRECT_LOAD_TIMEOUT_S: Final = 300.0
#: How long mmelocal waits for one request to a Triton (metadata, inference, statistics).
REQUEST_TIMEOUT_S: Final = INVOKE_TIMEOUT_S
#: How long an update, a delete or a scale-in lets the calls in flight on what it stops
#: finish: the container's time to answer plus a margin.
DRAIN_TIMEOUT_S: Final = INVOKE_TIMEOUT_S + 15.0
#: How long the local AWS waits for a fleet's answer to one call (or a single-model
#: endpoint's first load): a cold load's whole time, then the invocation's.
LOAD_AND_INVOKE_TIMEOUT_S: Final = LOAD_LIMIT_S + INVOKE_TIMEOUT_S
#: ``DescribeEndpoint``'s ``FailureReason``: at most this many characters (API reference).
FAILURE_REASON_MAX_CHARS: Final = 1024
#: The endpoints on one ``ListEndpoints`` page when ``MaxResults`` is left out (botocore's
#: sagemaker model, ``ListEndpointsInput.MaxResults``: "This value defaults to 10").
ENDPOINTS_PAGE_SIZE: Final = 10
#: The models (``ListModels``) or endpoint configs (``ListEndpointConfigs``) on one page when
#: ``MaxResults`` is left out. Neither botocore's sagemaker model nor the API reference
#: publishes it: mmelocal's own figure, the default ``ListEndpoints`` documents (and most of
#: SageMaker's ``List*`` operations: "The default value is 10"), so that a script that reads
#: one page without its ``NextToken`` misses items here as it may in the cloud.
MODELS_PAGE_SIZE: Final = ENDPOINTS_PAGE_SIZE

#: How long a load that finds no room waits, holding its instance's load lock, for a
#: loaded model to go idle so it can be evicted, before it fails (507
#: ``InsufficientMemory``): the emulator's (and the traffic simulator's) figure. SageMaker
#: publishes no such wait: mmelocal's own.
BUSY_WAIT_S: Final = 30.0
#: A model called at least this many times per second (over :data:`HOT_MODEL_WINDOW_S`)
#: is hot: the emulator's router (and the traffic simulator) loads it on one more instance.
#: SageMaker replicates hot models but publishes no threshold: mmelocal's own figure.
HOT_MODEL_RPS: Final = 50.0
#: The window, in seconds, over which a model's request rate is counted for that rule.
HOT_MODEL_WINDOW_S: Final = 1.0

# --- memory ------------------------------------------------------------------------------

#: The fraction of a GPU's memory the published "max models per GPU" procedure fills
#: before it stops (the rest is left for batches); the emulator's eviction threshold and
#: every capacity, estimate and projection default.
MEMORY_THRESHOLD: Final = 0.9

# --- header names ------------------------------------------------------------------------

#: The model a call names (``TargetModel``); Triton's SageMaker front end also reads it on
#: ``POST /models`` and ``DELETE``: the loaded model is known to Triton by its value.
TARGET_MODEL_HEADER: Final = "X-Amzn-SageMaker-Target-Model"
#: ``CustomAttributes``, passed to the container and back as they are.
CUSTOM_ATTRIBUTES_HEADER: Final = "X-Amzn-SageMaker-Custom-Attributes"
#: ``InferenceId``: added to the captured data when data capture is on.
INFERENCE_ID_HEADER: Final = "X-Amzn-SageMaker-Inference-Id"
#: The variant that served a call (boto3: ``InvokedProductionVariant``).
INVOKED_VARIANT_HEADER: Final = "x-Amzn-Invoked-Production-Variant"
#: The error type of a rest-json error answer (beside ``__type`` in the body).
ERROR_TYPE_HEADER: Final = "x-amzn-ErrorType"
#: Every answer's request id.
REQUEST_ID_HEADER: Final = "x-amzn-RequestId"
#: Triton's header (KServe v2 binary tensor extension, also through its SageMaker front
#: end) giving the length of the JSON part of a body that carries binary tensors.
INFERENCE_HEADER_CONTENT_LENGTH: Final = "Inference-Header-Content-Length"
#: The content type of Triton's binary tensors through its SageMaker front end (followed
#: by the JSON header's length).
SAGEMAKER_BINARY_CONTENT_TYPE: Final = (
    "application/vnd.sagemaker-triton.binary+json;json-header-size="
)

__all__ = [
    "BUSY_WAIT_S",
    "CUSTOM_ATTRIBUTES_HEADER",
    "DIRECT_LOAD_TIMEOUT_S",
    "DRAIN_TIMEOUT_S",
    "ENDPOINTS_PAGE_SIZE",
    "ENDPOINT_NAME_PATTERN",
    "ENVIRONMENT_KEY_PATTERN",
    "ERROR_TYPE_HEADER",
    "FAILURE_REASON_MAX_CHARS",
    "HOT_MODEL_RPS",
    "HOT_MODEL_WINDOW_S",
    "INFERENCE_HEADER_CONTENT_LENGTH",
    "INFERENCE_ID_HEADER",
    "INVOKED_VARIANT_HEADER",
    "INVOKE_TIMEOUT_S",
    "LOAD_AND_INVOKE_TIMEOUT_S",
    "LOAD_LIMIT_S",
    "MAX_CUSTOM_ATTRIBUTES_LENGTH",
    "MAX_ENDPOINT_NAME_LENGTH",
    "MAX_ENVIRONMENT_ENTRIES",
    "MAX_ENVIRONMENT_TOTAL_BYTES",
    "MAX_ENVIRONMENT_VALUE_BYTES",
    "MAX_INFERENCE_ID_LENGTH",
    "MAX_PAYLOAD_BYTES",
    "MAX_TARGET_MODEL_LENGTH",
    "MEMORY_THRESHOLD",
    "MODELS_PAGE_SIZE",
    "MODEL_NOT_READY_AFTER_S",
    "REQUEST_ID_HEADER",
    "REQUEST_TIMEOUT_S",
    "SAGEMAKER_BINARY_CONTENT_TYPE",
    "SERVING_ENDPOINT_STATUSES",
    "TARGET_MODEL_HEADER",
    "TARGET_MODEL_PATTERN",
    "TRITON_UNLOAD_WAIT_S",
    "UNLOAD_TIMEOUT_S",
    "environment_bytes",
    "target_model_problem",
]
