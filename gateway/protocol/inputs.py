"""Requests a child sends to the client — sampling, elicitation, roots — as pure decisions.

Legacy children ask the client things while serving a request (digest §4.1); modern
clients cannot receive requests at all and take them as MRTR ``input_required`` rounds
(§1.4). Who gets asked is decided elsewhere (``gateway.protocol.childsession`` attributes,
the relay routes); this module holds the rules they share (§7.6 C):

- ``is_declared``: a client gets a request only when its declared capabilities cover it
  (``sampling.tools`` for tool-enabled sampling, ``sampling.context`` for
  ``includeContext``, ``elicitation.url`` for URL mode; an empty ``elicitation`` means form).
- ``local_answer``: what the gateway answers itself when no client can (the request is
  unattributable, or the client did not declare the capability): ``ping`` → ``{}``;
  ``roots/list`` → the server's configured roots, else an error; ``elicitation/create`` →
  ``{"action": "decline"}`` when nobody is there (a user who is not there declines), an
  error when the client is there but lacks the capability; ``sampling/createMessage`` →
  an error, since no answer can be made up. Errors carry gateway-local codes, so a child
  can tell them from a client's.
- ``input_required_result`` and ``missing_capability_error``: the two modern answers.

Imports: standard library, ``gateway.errors`` and ``gateway.protocol`` only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from gateway.errors import CODE_NO_CLIENT_INPUT, GATEWAY_NAME
from gateway.protocol.jsonrpc import (
    METHOD_NOT_FOUND,
    MISSING_CLIENT_CAPABILITY,
    ErrorReply,
    JsonObject,
    Reply,
    Request,
    Result,
    error_object,
)
from gateway.protocol.tasks import RELATED_TASK_META

SAMPLING: Final = "sampling/createMessage"
ELICITATION: Final = "elicitation/create"
ROOTS: Final = "roots/list"
ROOTS_CAPABILITY: Final = "roots"
INPUT_METHODS: Final = frozenset({SAMPLING, ELICITATION, ROOTS})
"""Child requests that only a client can answer: the ones the gateway routes to one."""
MRTR_METHODS: Final = frozenset({"tools/call", "prompts/get", "resources/read"})
"""The only requests whose result may be ``input_required`` (MRTR §Supported Requests)."""
MAX_INPUT_REQUESTS: Final = 16
"""``inputRequests`` one round of a modern child may carry to a legacy client: each becomes a
request on the client's stream and an entry in its session's asks. A round with more ends the
request with -31003 (a person answers each one; no real round asks more than a few)."""
LEGACY_ONLY_PARAMS: Final = ("task", "elicitationId")
"""Legacy request fields with no place in a modern ``inputRequests`` entry (digest §7.6 C)."""


def required_capability(method: str, params: JsonObject | None) -> JsonObject:
    """The client capability a request needs, as ``requiredCapabilities`` spells it."""
    params = params or {}
    if method == SAMPLING:
        needs: JsonObject = {}
        if params.get("tools"):
            needs["tools"] = {}
        if params.get("includeContext") not in (None, "none"):
            needs["context"] = {}
        return {"sampling": needs}
    if method == ELICITATION:
        return {"elicitation": {"url" if params.get("mode") == "url" else "form": {}}}
    if method == ROOTS:
        return {"roots": {}}
    return {}


def is_declared(capabilities: Mapping[str, Any], method: str, params: JsonObject | None) -> bool:
    """Whether ``capabilities`` (a client's declared ones) cover this request."""
    needed = required_capability(method, params)
    if not needed:
        return False
    [(name, sub)] = needed.items()
    declared = capabilities.get(name)
    if not isinstance(declared, dict):
        return False
    if name == "elicitation" and not declared:
        declared = {"form": {}}  # an empty elicitation capability means form mode (client/elicitation)
    return all(key in declared for key in sub)


def local_answer(
    request: Request, roots: Sequence[Mapping[str, Any]] | None, reason: str, *, decline: bool = True
) -> Reply:
    """The gateway's own answer to a child request no client will see; ``reason`` says why.
    ``decline=False``: an elicitation gets an error too (its client is there but was not
    asked, so a made-up "decline" would misreport the user's choice)."""
    if request.method == "ping":
        return Result(request.id, {})
    if request.method == ROOTS and roots is not None:
        return Result(request.id, {"roots": [dict(root) for root in roots]})
    if request.method == ELICITATION and decline:
        return Result(request.id, {"action": "decline"})
    if request.method in INPUT_METHODS:
        hint = " (configure roots for this server to answer it)" if request.method == ROOTS else ""
        return ErrorReply(
            request.id,
            error_object(
                CODE_NO_CLIENT_INPUT,
                f"the gateway cannot answer {request.method}: {reason}{hint}",
                {"source": GATEWAY_NAME, "method": request.method},
            ),
        )
    return ErrorReply(request.id, error_object(METHOD_NOT_FOUND, f"the gateway does not handle {request.method!r}"))


def unattributed_answer(request: Request, roots: Sequence[Mapping[str, Any]] | None, reason: str) -> Reply:
    """The gateway's answer to a child request no client carries (asked outside any call, or
    left by every request that could): ``local_answer``, but a ``roots/list`` with no roots
    configured gets an empty list, not an error. A pool's children serve clients whose roots
    they are not given, so "none" is the truth; servers that fetch roots at start-up
    (server-everything, server-filesystem) take it as it is, where they logged the error as a
    failure on every pre-started child."""
    if request.method == ROOTS and roots is None:
        return Result(request.id, {"roots": []})
    return local_answer(request, roots, reason)


def told_to_child(configured: Mapping[str, Any], client: Mapping[str, Any]) -> JsonObject:
    """What a legacy child that serves one client is told at ``initialize``: the capabilities
    the server is configured to declare that this client declared too. Sub-fields narrow the
    same way: a configured capability with sub-fields (``elicitation.form``) passes only those
    the client declared; one configured bare (``{}``, the default) passes the client's as it
    spelled them. ``roots.listChanged`` is the configuration's, never the client's: the
    gateway forwards no client's roots notifications (shared children are keyed by the roots
    set they are given instead, ``gateway.relay.router``)."""
    told: JsonObject = {}
    for name, allowed in configured.items():
        given = client.get(name)
        if not isinstance(given, dict):
            continue
        limits = allowed if isinstance(allowed, Mapping) else {}
        narrowed = [k for k in limits if not (name == ROOTS_CAPABILITY and k == "listChanged")]
        kept = {k: v for k, v in given.items() if not narrowed or k in narrowed}
        if name == ROOTS_CAPABILITY:
            kept.pop("listChanged", None)
            if limits.get("listChanged") is True:
                kept["listChanged"] = True
        told[name] = kept
    return told


def capability_key(told: Mapping[str, Any]) -> str:
    """A canonical, readable name for a set of capabilities told to a child (the pool key's
    part that keeps children told different sets apart): ``elicitation.form,roots,sampling``,
    or ``none``. Values below the sub-field level are part of it too, in sorted JSON."""
    parts: list[str] = []
    for name in sorted(told):
        value = told[name]
        subs = sorted(value) if isinstance(value, Mapping) else []
        if not subs:
            parts.append(name)
        for sub in subs:
            detail = value[sub]
            plain = detail is True or detail == {}
            parts.append(f"{name}.{sub}" if plain else f"{name}.{sub}={json.dumps(detail, sort_keys=True)}")
    return ",".join(parts) or "none"


def related_task(params: Mapping[str, Any] | None) -> str | None:
    """The task a legacy child's request or notification names in its ``_meta`` (2025-11-25
    tasks: a question a task asks from the background), or None."""
    meta = (params or {}).get("_meta")
    related = meta.get(RELATED_TASK_META) if isinstance(meta, dict) else None
    task_id = related.get("taskId") if isinstance(related, dict) else None
    return task_id if isinstance(task_id, str) else None


def input_request(method: str, params: JsonObject | None) -> JsonObject:
    """One ``inputRequests`` entry: bare ``{method, params}``, legacy-only fields removed
    (the child's related-task ``_meta`` among them: a modern client's task is the gateway's)."""
    kept = {k: v for k, v in (params or {}).items() if k not in LEGACY_ONLY_PARAMS}
    meta = kept.get("_meta")
    if isinstance(meta, dict) and RELATED_TASK_META in meta:
        rest = {k: v for k, v in meta.items() if k != RELATED_TASK_META}
        if rest:
            kept["_meta"] = rest
        else:
            del kept["_meta"]
    return {"method": method, "params": kept}


def input_required_result(requests: Mapping[str, JsonObject], request_state: str) -> JsonObject:
    return {"resultType": "input_required", "inputRequests": dict(requests), "requestState": request_state}


def missing_capability_error(method: str, required: JsonObject) -> JsonObject:
    """-32021: the child needs something this request's ``clientCapabilities`` do not declare."""
    names = ", ".join(f"{name}.{sub}" if sub else name for name, subs in required.items() for sub in subs or [""])
    return error_object(
        MISSING_CLIENT_CAPABILITY,
        f"the server asked the client for {method}, which this request's clientCapabilities do not declare "
        f"({names}); the request was cancelled",
        {"requiredCapabilities": required},
    )


def merge_capabilities(*required: JsonObject) -> JsonObject:
    """Several ``requiredCapabilities`` as one object."""
    out: JsonObject = {}
    for needs in required:
        for name, sub in needs.items():
            out[name] = {**out.get(name, {}), **sub}
    return out
