"""How a relayed exchange's messages look on each side: the child's params for its era,
the client's notifications and reply for the client's era, the response envelope, and the
errors the gateway writes when a child's question cannot reach its client. Pure functions
over the relay's types; ``gateway.relay.exchange`` drives them.
"""

from __future__ import annotations

from typing import Any

from gateway.errors import CODE_NO_CLIENT_INPUT, GATEWAY_NAME
from gateway.protocol import bridge, inputs, jsonrpc, loglevels, subscriptions, tasks
from gateway.protocol.handshake import META_CLIENT_CAPABILITIES, META_LOG_LEVEL, ChildInfo
from gateway.protocol.jsonrpc import PROGRESS, ErrorReply, JsonObject, Notification, Request, Result
from gateway.protocol.versions import LEGACY, MODERN
from gateway.relay.client import ClientContext
from gateway.stdio.ask import ChildAsk


def response(client_id: Any, *, result: JsonObject | None = None, error: JsonObject | None = None) -> JsonObject:
    if error is not None:
        return {"jsonrpc": "2.0", "id": client_id, "error": error}
    return {"jsonrpc": "2.0", "id": client_id, "result": result}


def note_for_client(note: Notification, request: Request, resumed: bool) -> JsonObject | None:
    """A notification as the client gets it. After a retry, progress carries the retry's
    token (or is dropped if the retry asked for none): the original request is over.
    On a forwarded listen, the child's ``subscriptionId`` (its own id) becomes the client's."""
    if request.method == subscriptions.LISTEN:
        if note.method in (PROGRESS, loglevels.LOG_MESSAGE):  # never on a listen stream (§1.5)
            return None
        return subscriptions.retag(note.to_dict(), request.id)
    if not resumed or note.method != PROGRESS or note.params is None:
        return note.to_dict()
    meta = (request.params or {}).get("_meta")
    token = meta.get("progressToken") if isinstance(meta, dict) else None
    if token is None:
        return None
    return Notification(note.method, {**note.params, "progressToken": token}).to_dict()


def params_for_child(params: JsonObject | None, client: ClientContext, child: ChildInfo) -> JsonObject | None:
    if client.trace:  # most requests carry no trace context: no call for them
        params = bridge.with_trace(params, client.trace)
    if child.era is LEGACY:
        return bridge.strip_modern_meta(params) if client.era is MODERN else params
    if client.era is LEGACY:
        return bridge.add_modern_meta(
            params,
            version=child.version,
            capabilities=client.capabilities,
            client_info=client.client_info,
            log_level=client.log_level,
        )
    if child.serves_tasks or not params or "_meta" not in params:
        return params  # (no ``_meta``, no declared capabilities: ``_without_tasks_extension`` would keep them)
    meta = params["_meta"]
    capabilities = meta.get(META_CLIENT_CAPABILITIES) if isinstance(meta, dict) else None
    if not isinstance(capabilities, dict) or "extensions" not in capabilities:
        return params  # (most clients declare no extension: no call for them)
    assert isinstance(meta, dict)
    return _without_tasks_extension(params, meta, capabilities)


def _without_tasks_extension(params: JsonObject, meta: JsonObject, capabilities: JsonObject) -> JsonObject:
    """A modern client's params for a modern child (their ``_meta`` and its declared
    ``capabilities``, which name extensions), without the Tasks extension: the gateway serves
    tasks itself, so the child answers every call with its result and never with a task id
    the gateway could not route."""
    kept = tasks.without_extension(capabilities)
    if kept is capabilities:
        return params
    return {**params, "_meta": {**meta, META_CLIENT_CAPABILITIES: kept}}


def reply_for_client(
    request: Request, reply: Result | ErrorReply, client: ClientContext, child: ChildInfo
) -> JsonObject:
    if isinstance(reply, ErrorReply):
        error = bridge.modernize_error(reply.error) if client.era is MODERN else reply.error
        return response(request.id, error=error)
    result = reply.result
    if request.method == subscriptions.LISTEN:
        result = subscriptions.retag_result(result, request.id)
    if client.era is MODERN and child.era is LEGACY:
        result = bridge.modernize_result(request.method, result, child)
    elif client.era is MODERN and request.method == "server/discover":
        result = bridge.advertised_discover(result)
    elif client.era is LEGACY and child.era is MODERN:
        result = bridge.legacy_result(result)
    return {"jsonrpc": "2.0", "id": request.id, "result": result}  # (``response``, spelled out: every reply)


def log_level(request: Request, client: ClientContext) -> str | None:
    """The level at or above which the child's attributable log messages reach this client:
    a modern request's own ``logLevel``, a legacy session's ``logging/setLevel``; else none."""
    if client.era is LEGACY:
        return client.log_level
    meta = (request.params or {}).get("_meta")
    level = meta.get(META_LOG_LEVEL) if isinstance(meta, dict) else None
    return level if level is not None and loglevels.is_level(level) else None  # (most requests name none)


def input_required_problem(wanted: object, state: object) -> str | None:
    """Why a modern child's ``input_required`` result cannot be acted on, or None."""
    if not isinstance(wanted, dict):
        return "input_required with inputRequests that is not an object"
    if state is not None and not isinstance(state, str):
        return "input_required with a requestState that is not a string"
    if not wanted and state is None:
        return "input_required with neither inputRequests nor requestState"
    if len(wanted) > inputs.MAX_INPUT_REQUESTS:
        most = inputs.MAX_INPUT_REQUESTS
        return f"input_required with {len(wanted)} inputRequests; the gateway relays at most {most}"
    for key, entry in wanted.items():
        method = entry.get("method") if isinstance(entry, dict) else None
        if method not in inputs.INPUT_METHODS:
            return f"inputRequests[{key!r}] is not a sampling, elicitation or roots request"
        if entry.get("params") is not None and not isinstance(entry.get("params"), dict):
            return f"inputRequests[{key!r}].params is not an object"
    return None


def undeclared_input_error(ask: ChildAsk, client: ClientContext) -> JsonObject:
    """The legacy client's answer when the modern child wants what the client cannot give."""
    required = inputs.required_capability(ask.method, ask.params)
    if not client.accepts_requests or client.session is None:
        why = "this request cannot carry a request to the client (a batch)"
    else:
        why = f"this session did not declare the {capability_name(ask)} capability at initialize"
    return jsonrpc.error_object(
        CODE_NO_CLIENT_INPUT,
        f"the server needs {ask.method} from the client to complete this request, but {why}",
        {"source": GATEWAY_NAME, "method": ask.method, "requiredCapabilities": required},
    )


def client_refusal_error(ask: ChildAsk, reply: ErrorReply) -> JsonObject:
    """The client answered the child's input request with an error: ``inputResponses`` carry
    results only, so the request ends here, quoting the client's error."""
    return jsonrpc.error_object(
        CODE_NO_CLIENT_INPUT,
        f"the client answered {ask.method} with an error, so the server cannot complete this request: "
        f"{reply.error.get('message')}",
        {"source": GATEWAY_NAME, "method": ask.method, "clientError": reply.error},
    )


def capability_name(ask: ChildAsk) -> str:
    [(name, sub)] = inputs.required_capability(ask.method, ask.params).items()
    return ", ".join(f"{name}.{key}" for key in sub) or name
