"""A synchronous client for Triton's SageMaker front end (``--allow-sagemaker=true``).

The HTTP contract as Triton 2.51 implements it with ``SAGEMAKER_MULTI_MODEL=true``.
Two names are in play: ``NAME`` (``model_name`` in the load body, SageMaker's hash of the
model; the key of Triton's SageMaker model list and the name in every URL path) and ``T``
(the ``X-Amzn-SageMaker-Target-Model`` header, default ``NAME``: the name Triton loads
the model under, the one ``/v2/models/T`` and statistics know). Send the header on
**every** model call: without it Triton falls back to ``NAME`` and, when they differ,
invokes an unknown model (400) or polls for a model it does not have (up to 350 s).

=========================  =========================================  ======================
request                    body                                       answers
=========================  =========================================  ======================
``GET /ping``              --                                         200 healthy
``POST /models`` + H(T)    ``{"model_name": NAME, "url": DIR}``;      200 loaded; 409 NAME or
                           DIR holds one model folder (or several     DIR already registered;
                           with an ensemble), or is the model folder  507 out of memory;
                           itself                                     400 other load error
``GET /models``            --                                         200 ``{"models": [{
                                                                      "modelName", "modelUrl"
                                                                      }]}``: only entries with
                                                                      NAME == T are filled in
``GET /models/NAME``       --                                         200 ``{"modelName",
                                                                      "modelUrl"}``, 404
``POST /models/NAME/       KServe v2 JSON, or binary tensors with     200 raw answer; 400
invoke`` + H(T)            ``application/vnd.sagemaker-triton.        (bad request, model
                           binary+json;json-header-size=N``           error); 404 NAME not
                                                                      loaded; 507 OOM
``DELETE /models/NAME``    --                                         200 once T is
 + H(T)                                                               unavailable (Triton
                                                                      polls up to 350 s and
                                                                      unregisters DIR); 404
=========================  =========================================  ======================

Errors come back as ``{"error": "<Triton's message>"}``. Loading the same DIR twice is a
409 even under another NAME: give every load its own folder. The emulator speaks this
contract with its own async client; :func:`load_body` and :data:`TARGET_MODEL_HEADER` are
the pieces it shares. A synchronous client for tests lives in
:mod:`mmelocal.testing.sagemaker_client`.
"""

from __future__ import annotations

import json
from pathlib import Path

from mmelocal.facts.sagemaker import (
    DIRECT_LOAD_TIMEOUT_S,
    REQUEST_TIMEOUT_S,
    TARGET_MODEL_HEADER,
    UNLOAD_TIMEOUT_S,
)

#: Triton's own wait for an unload is up to 350 s; ours must be a little longer.
DEFAULT_UNLOAD_TIMEOUT_S = UNLOAD_TIMEOUT_S
DEFAULT_LOAD_TIMEOUT_S = DIRECT_LOAD_TIMEOUT_S
DEFAULT_TIMEOUT_S = REQUEST_TIMEOUT_S


def load_body(model_name: str, url_dir: Path | str) -> bytes:
    """The JSON body of ``POST /models``."""
    return json.dumps({"model_name": model_name, "url": str(url_dir)}).encode("utf-8")


__all__ = [
    "DEFAULT_LOAD_TIMEOUT_S",
    "DEFAULT_TIMEOUT_S",
    "DEFAULT_UNLOAD_TIMEOUT_S",
    "TARGET_MODEL_HEADER",
    "load_body",
]
