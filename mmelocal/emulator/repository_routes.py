"""Triton's model repository routes on the emulator's v2 face (the emulator's extension:
SageMaker's Triton serves no repository API, ``--allow-http=false`` in
``docker/sagemaker/serve``).

``POST /v2/repository[/NAME]/index`` lists the models the instances hold, as one Triton
lists its own; ``POST /v2/repository/models/{target}/load|unload`` loads a TargetModel from
the store (a load overriding its config or files is refused: :func:`_load_refusal`) or
unloads it from every instance. Triton's route, handlers and errors are those of
``src/http_server.cc`` 2.51 (``modelcontrol_regex_``, ``HandleRepositoryIndex``,
``HandleRepositoryControl``).
"""

from __future__ import annotations

import json
import re
from urllib.parse import unquote

from mmelocal.emulator.answers import Answer, reply_answer, v2_error, v2_exception
from mmelocal.emulator.emulator import Emulator
from mmelocal.emulator.model_state import READY
from mmelocal.facts.invoke_errors import (
    V2_BAD_JSON,
    V2_BAD_PARAMETER,
    V2_JSON_ERROR_STATUS,
    V2_LOAD_OVERRIDE,
    V2_LOAD_OVERRIDE_STATUS,
    V2_METHOD_NOT_ALLOWED,
    V2_NOT_BOOLEAN,
    V2_NOT_OBJECT,
    V2_NOT_STRING,
    V2_REPOSITORY_NAME,
)

_JSON_HEADERS = [("Content-Type", "application/json; charset=utf-8")]

#: Triton's repository route (``modelcontrol_regex_``, ``src/http_server.cc`` 2.51:
#: ``/v2/repository(?:/([^/]+))?/(index|models/([^/]+)/(load|unload))``), a TargetModel
#: with ``/`` taken as on the model route (:func:`~.answers.parse_v2_path`)
REPOSITORY_ROUTE = re.compile(r"/v2/repository(?:/([^/]+))?/(?:(index)|models/(.+)/(load|unload))")


async def v2_repository(
    emulator: Emulator,
    method: str,
    repository: str | None,
    index: str | None,
    target: str | None,
    action: str | None,
    *,
    body: bytes = b"",
) -> Answer:
    """``POST /v2/repository[/NAME]/index`` (the index whatever NAME is, as Triton's
    ``HandleRepositoryIndex`` does not read it) and ``POST
    /v2/repository/models/{target}/load|unload``; a named repository's load or unload is
    Triton's 501 (``HandleRepositoryControl``), any other method 405."""
    if method != "POST":
        return v2_error(405, V2_METHOD_NOT_ALLOWED)
    if index is not None:
        return await v2_index(emulator, body)
    if repository is not None:
        return v2_error(501, V2_REPOSITORY_NAME)
    assert target is not None and action is not None
    return await v2_repository_action(emulator, unquote(target), action, body)


async def v2_repository_action(
    emulator: Emulator, target: str, action: str, body: bytes = b""
) -> Answer:
    """``POST /v2/repository/models/{target}/load|unload``: a load from the store (one
    whose body overrides the config or files is refused: :func:`_load_refusal`); an
    unload from every instance, with its ensemble steps (the SageMaker ``DELETE``'s, so
    whatever ``unload_dependents`` says)."""
    try:
        if action == "load":
            refusal = _load_refusal(body)
            if refusal is not None:
                return refusal
            await emulator.ensure_loaded(target)
        else:
            for inst in emulator.instances:
                await inst.unload(target, reason="unload requested through /v2/repository")
    except Exception as exc:
        return v2_exception(exc)
    return Answer(200, [], b"")


def _load_refusal(body: bytes) -> Answer | None:
    """The refusal of a load's body, else None. What Triton cannot read is its 500, as
    ``HandleRepositoryControl`` reads it (a document that is no object, or has no
    ``parameters``, is a plain load); a ``config`` or ``file:PATH`` parameter (what
    tritonclient's ``load_model(config=..., files=...)`` sends) is refused 501: SageMaker
    loads a model from its tarball alone, and an override made in one Triton would be
    lost at the model's next load there and absent from the other instances."""
    if not body:
        return None
    try:
        request = json.loads(body)
    except ValueError as exc:
        return v2_error(V2_JSON_ERROR_STATUS, V2_BAD_JSON.format(detail=exc))
    if not isinstance(request, dict) or "parameters" not in request:
        return None
    parameters = request["parameters"]
    if not isinstance(parameters, dict):
        return v2_error(V2_JSON_ERROR_STATUS, V2_NOT_OBJECT)
    for name, value in parameters.items():  # in order, as Triton reads them
        if not isinstance(value, str):
            return v2_error(V2_JSON_ERROR_STATUS, V2_NOT_STRING)
        if name != "config" and not name.startswith("file:"):
            return v2_error(V2_JSON_ERROR_STATUS, V2_BAD_PARAMETER)
    if not parameters:
        return None
    names = ", ".join(repr(name) for name in parameters)
    return v2_error(V2_LOAD_OVERRIDE_STATUS, V2_LOAD_OVERRIDE.format(names=names))


async def v2_index(emulator: Emulator, body: bytes = b"") -> Answer:
    """``POST /v2/repository/index``: the models the instances hold (the store is
    open-ended), each once however many instances hold it, as one Triton lists its own,
    sorted by name: with the body's ``"ready": true`` those ready alone, else those
    loading or unloading too, in Triton's states (``HandleRepositoryIndex`` reads
    ``ready``, false when absent; ``ModelRepositoryManager::RepositoryIndex``). A body
    Triton cannot read is answered as Triton answers it (:func:`_index_ready`)."""
    ready_only = _index_ready(body)
    if isinstance(ready_only, Answer):
        return await _triton_refusal(emulator, body, ready_only)
    states: dict[str, str] = {}
    for inst in emulator.instances:
        for entry in list(inst.models.values()):
            if states.get(entry.target) != READY:  # ready anywhere: ready
                states[entry.target] = entry.state
    return _json_answer(
        [
            {"name": t, "version": "1", "state": states[t].upper()}
            for t in sorted(states)
            if not ready_only or states[t] == READY
        ]
    )


def _index_ready(body: bytes) -> bool | Answer:
    """The index request's ``ready`` as Triton reads it: false for no body, for a JSON
    document that is no object or has no ``ready``; Triton's 500 for a body that is no
    JSON and for a ``ready`` that is no boolean (TritonJson's errors)."""
    if not body:
        return False
    try:
        request = json.loads(body)
    except ValueError as exc:
        return v2_error(V2_JSON_ERROR_STATUS, V2_BAD_JSON.format(detail=exc))
    if not isinstance(request, dict) or "ready" not in request:
        return False
    ready = request["ready"]
    if not isinstance(ready, bool):
        return v2_error(V2_JSON_ERROR_STATUS, V2_NOT_BOOLEAN)
    return ready


async def _triton_refusal(emulator: Emulator, body: bytes, own: Answer) -> Answer:
    """Triton's own refusal of an index request's ``body`` (its JSON parser's words),
    from an instance that is up; ``own`` when none is, or Triton took the body."""
    inst = next((i for i in emulator.instances if i.up), None)
    if inst is None:
        return own
    try:
        reply = await inst.control.v2_request("POST", "/v2/repository/index", _JSON_HEADERS, body)
    except Exception:
        return own
    return own if reply.status == 200 else reply_answer(reply)


def _json_answer(data: object) -> Answer:
    return Answer(200, list(_JSON_HEADERS), json.dumps(data).encode())


__all__ = ["REPOSITORY_ROUTE", "v2_index", "v2_repository", "v2_repository_action"]
