"""The ingress ladder: one HTTP request in, ``Accepted`` or ``Rejection`` out.

Contract: ``check_post``, ``check_get`` and ``check_delete`` take the headers (names
lower-cased by the HTTP edge) and, for POST, the body. They return the first failing
rung's ``Rejection`` (HTTP status + JSON-RPC error), else an ``Accepted`` naming era,
version and parsed messages. They never raise on client input.

POST rungs, in order (digest §2, §4.2, §7.1):

 1. ``Accept`` lists JSON and SSE, else 406: a MUST for every POST in every revision
    (no leniency for JSON-only clients: a child's progress needs SSE).
 2. ``Content-Type`` is ``application/json`` (parameters allowed), else 415.
 3. The body fits ``max_body_bytes``, else 413 (a backstop; the edge stops reading earlier).
 4. The body is JSON, else 400/-32700; nested at most ``MAX_JSON_DEPTH`` levels, else
    400/-32600 (the gateway re-encodes every message, and orjson writes only ~255 levels).
 5. An array is a batch: only on a live session negotiated at 2025-03-26, not empty, at
    most ``max_batch`` messages (counted before any is parsed), no ``initialize`` inside,
    each element valid; else 400/-32600 (404 for an unknown session).
 6. The value is a JSON-RPC message, else 400/-32600 (with the id when readable). A
    ``notifications/*`` method sent with an id (as a request) is 400/-32600 too: it is
    never forwarded, since a child acting on the method name would then cancel (or
    otherwise act on) whatever id it names, another client's included.
 7. Era: a modern ``MCP-Protocol-Version`` header or a ``_meta`` protocol version → modern
    (a stray ``Mcp-Session-Id`` is ignored); else ``initialize`` → new legacy session (its
    ``capabilities`` and ``clientInfo`` at most ``MAX_DECLARATION_BYTES`` of JSON each, else
    400/-32602);
    else ``Mcp-Session-Id`` → live session (unknown → 404), whose version header, if any,
    must name a legacy version (else 400/-32600 with ``data.supported``: legacy clients
    do not know -32022); else 400/-32020.
 8. Modern: a POSTed response → 400/-32600.
 9. Modern: ``MCP-Protocol-Version``, ``Mcp-Method`` and ``Mcp-Name`` (sentinel-decoded)
    present, with valid characters, and equal to the body, else 400/-32020
    (``mirrored.py``).
10. Modern: a modern version, else 400/-32022 with ``data.supported`` (the versions a
    request may name, ``versions.ADVERTISED_VERSIONS``, as ``server/discover`` lists
    them) and ``data.requested`` (the value sent, echoed as it was).
11. Modern requests: ``params._meta`` holds the version and client capabilities, and a
    ``logLevel`` it names is a log level (``server/utilities/logging``: SHOULD), else
    400/-32602: the same answer whatever the child's era (before a legacy child only the
    gateway reads the level).
12. Modern requests: removed or server→client methods → 404/-32601. Methods outside the
    inventory pass: they may be extensions, and the child decides.
13. Modern notifications are accepted (the caller answers 202). Only
    ``MODERN_CLIENT_NOTIFICATIONS`` mean anything; the caller forwards those and drops the
    rest. Header rules for notification POSTs are undefined (digest §8.5), so rung 9
    checks only the headers present, and rungs 11–12 are skipped.

A modern request of the usual shape (``plain_version``: a modern version in ``_meta`` and in
its header, client capabilities, its method and a plain ``Mcp-Name`` mirrored) passes rungs
9–12 in one pass; everything else, and so every refusal, goes up rungs 8–13 one by one
(``check_modern_rungs``), which word every error. The one pass restates those rungs for that
shape only and accepts only what they accept (a property test holds the two together).

Not here: ``Origin`` (403) and authentication are the edge's middleware; ``Mcp-Param-*``
needs the child's tool schemas, which this pure ladder lacks, so for an accepted modern
``tools/call`` the edge calls ``gateway.protocol.xmcpheader.check_param_headers`` next.

Imports: standard library, orjson and ``gateway.protocol`` only. No I/O, clock or async.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, TypeAlias

import orjson

from gateway.protocol import headers as h
from gateway.protocol import loglevels, versions
from gateway.protocol.handshake import META_LOG_LEVEL

# Rungs 4 and 6 live in ingressbody.py; re-exported for the ladder's callers.
from gateway.protocol.ingressbody import MAX_JSON_DEPTH as MAX_JSON_DEPTH
from gateway.protocol.ingressbody import NOTIFICATION_PREFIX as NOTIFICATION_PREFIX
from gateway.protocol.ingressbody import check_depth as check_depth
from gateway.protocol.ingressbody import exceeds_depth as exceeds_depth
from gateway.protocol.ingressbody import parse_body as parse_body
from gateway.protocol.ingressbody import parse_single as parse_single
from gateway.protocol.jsonrpc import (
    HEADER_MISMATCH,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    UNSUPPORTED_PROTOCOL_VERSION,
    ErrorReply,
    JsonId,
    Message,
    Notification,
    Request,
    Result,
)

# Rung 9 and the message helpers live in mirrored.py; re-exported for the ladder's callers.
from gateway.protocol.mirrored import NAME_PARAMS as NAME_PARAMS
from gateway.protocol.mirrored import PROTOCOL_VERSION_KEY as PROTOCOL_VERSION_KEY
from gateway.protocol.mirrored import check_mirrored_headers as check_mirrored_headers
from gateway.protocol.mirrored import message_id as message_id
from gateway.protocol.mirrored import meta_of as meta_of

# Accepted and Rejection are re-exported: callers import the ladder's values from here.
from gateway.protocol.outcome import Accepted as Accepted
from gateway.protocol.outcome import Rejection as Rejection
from gateway.protocol.outcome import describe, reject
from gateway.protocol.versions import LEGACY, MODERN

CLIENT_CAPABILITIES_KEY: Final = "io.modelcontextprotocol/clientCapabilities"

# Requests removed in 2026-07-28 (digest §1, "Removed"), and 2025-11-25's experimental
# ``tasks/result`` and ``tasks/list``, which the Tasks extension does not have (digest §9): never
# sent to a child, whose task list would name other clients' tasks.
REMOVED_METHODS: Final = frozenset(
    {
        "initialize",
        "ping",
        "logging/setLevel",
        "resources/subscribe",
        "resources/unsubscribe",
        "tasks/result",
        "tasks/list",
    }
)
# Requests only a server sends; no server implements them, so the answer is "not found".
SERVER_TO_CLIENT_METHODS: Final = frozenset({"sampling/createMessage", "elicitation/create", "roots/list"})
# The only client→server notification of 2026-07-28 (digest §1, "Inventory").
MODERN_CLIENT_NOTIFICATIONS: Final = frozenset({"notifications/cancelled"})

MAX_BATCH_MESSAGES: Final = 64
"""Messages in one 2025-03-26 batch (``--max-batch-size``). Each request in it is a child
call in flight; clients batch a handful, and 64 stays well under the per-principal limit."""

SessionLookup: TypeAlias = Callable[[str], str | None]
"""Session id → the negotiated version of a live legacy session the gateway minted, or None."""


# --- POST -----------------------------------------------------------------------------------


def check_post(
    headers: Mapping[str, str],
    body: bytes,
    *,
    max_body_bytes: int,
    session_version: SessionLookup,
    max_batch: int = MAX_BATCH_MESSAGES,
) -> Accepted | Rejection:
    """Run the POST ladder (module docstring) over one request."""
    early = check_accept(headers) or check_content_type(headers) or check_body_size(body, max_body_bytes)
    if early is not None:
        return early
    value = parse_body(body)
    if isinstance(value, Rejection):
        return value
    too_deep = check_depth(body, value)
    if too_deep is not None:
        return too_deep
    if isinstance(value, list):
        return check_batch(value, headers, session_version, max_batch)
    message = parse_single(value)
    if isinstance(message, Rejection):
        return message
    if not is_modern(message, headers):
        return check_legacy(message, headers, session_version)
    return check_modern(message, headers)


def check_accept(headers: Mapping[str, str]) -> Rejection | None:
    accept = headers.get(h.ACCEPT)
    if accept is not None and h.accepts_json_and_sse(accept):
        return None
    return reject(406, INVALID_REQUEST, f"Accept must list both {h.JSON_MEDIA_TYPE} and {h.SSE_MEDIA_TYPE}")


def check_content_type(headers: Mapping[str, str]) -> Rejection | None:
    value = headers.get(h.CONTENT_TYPE, "")
    if value == h.JSON_MEDIA_TYPE or h.media_type(value) == h.JSON_MEDIA_TYPE:  # the usual value needs no parse
        return None
    return reject(415, INVALID_REQUEST, f"Content-Type must be {h.JSON_MEDIA_TYPE}")


def check_body_size(body: bytes, max_body_bytes: int) -> Rejection | None:
    if len(body) <= max_body_bytes:
        return None
    return reject(413, INVALID_REQUEST, f"request body is larger than {max_body_bytes} bytes")


def check_batch(
    items: list[Any], headers: Mapping[str, str], session_version: SessionLookup, max_batch: int = MAX_BATCH_MESSAGES
) -> Accepted | Rejection:
    """Batches exist only in 2025-03-26, so only a session negotiated at that version may send one."""
    if not items:
        return reject(400, INVALID_REQUEST, "an empty batch is not a valid request")
    session_id = headers.get(h.MCP_SESSION_ID)
    version = session_version(session_id) if session_id is not None else None
    if session_id is not None and version is None:
        return unknown_session()
    if version is None or version not in versions.BATCH_VERSIONS:
        return reject(400, INVALID_REQUEST, "batches are not supported in this protocol revision")
    if len(items) > max_batch:  # before any element is parsed or dispatched
        return reject(
            400,
            INVALID_REQUEST,
            f"a batch of {len(items)} messages is too large: at most {max_batch} are accepted",
            data={"maxBatchSize": max_batch},
        )
    messages: list[Message] = []
    for item in items:
        message = parse_single(item)
        if isinstance(message, Rejection):
            return message
        if isinstance(message, Request) and message.method == "initialize":
            return reject(400, INVALID_REQUEST, "initialize must not be part of a batch", id=message.id)
        messages.append(message)
    version_problem = check_legacy_version_header(headers, None)
    if version_problem is not None:
        return version_problem
    return Accepted(LEGACY, version, tuple(messages), session_id, is_batch=True)


def is_modern(message: Message, headers: Mapping[str, str]) -> bool:
    """Digest §7.1.2: a modern version header, or any ``_meta`` protocol version, is modern."""
    if headers.get(h.MCP_PROTOCOL_VERSION) in versions.MODERN_VERSIONS:
        return True
    meta = meta_of(message)
    return meta is not None and PROTOCOL_VERSION_KEY in meta


# --- Legacy ---------------------------------------------------------------------------------


DECLARATIONS: Final = ("capabilities", "clientInfo")
MAX_DECLARATION_BYTES: Final = 16_384
"""Bytes of JSON a legacy client's ``initialize`` ``capabilities``, and its ``clientInfo``, may
take each: a session keeps both for its life, and a modern child is told them with every
request of the session, so a client must not park megabytes on the gateway per session (real
clients declare a few hundred bytes). Over it: 400, -32602, before any session is made."""


def declaration_bytes(value: object) -> int:
    """The size of ``value`` as compact JSON (0 for none)."""
    if value is None:
        return 0
    try:
        return len(orjson.dumps(value))
    except TypeError:  # (not from the wire: what orjson parsed it writes)
        return MAX_DECLARATION_BYTES + 1


def check_legacy(message: Message, headers: Mapping[str, str], session_version: SessionLookup) -> Accepted | Rejection:
    """A request that is not modern: ``initialize``, or traffic on a live legacy session."""
    mid = message_id(message)
    if isinstance(message, Request) and message.method == "initialize":
        # A stray Mcp-Session-Id on initialize is ignored: the client is starting over.
        params = message.params or {}
        requested = params.get("protocolVersion")
        if not isinstance(requested, str):
            return reject(400, INVALID_PARAMS, 'initialize needs a string "protocolVersion"', id=mid)
        for name in DECLARATIONS:
            size = declaration_bytes(params.get(name))
            if size > MAX_DECLARATION_BYTES:
                message_text = f"initialize params.{name} is {size:,} bytes of JSON; at most {MAX_DECLARATION_BYTES:,}"
                return reject(400, INVALID_PARAMS, message_text, id=mid)
        return Accepted(LEGACY, requested, (message,), None)
    session_id = headers.get(h.MCP_SESSION_ID)
    if session_id is None:
        return reject(
            400,
            HEADER_MISMATCH,
            "no MCP-Protocol-Version header naming 2026-07-28, no params._meta protocol version "
            "and no Mcp-Session-Id: send a 2026-07-28 request, or initialize a legacy session",
            id=mid,
        )
    version = session_version(session_id)
    if version is None:
        return unknown_session(mid)
    version_problem = check_legacy_version_header(headers, mid)
    if version_problem is not None:
        return version_problem
    return Accepted(LEGACY, version, (message,), session_id)


def unknown_session(mid: JsonId | None = None) -> Rejection:
    # L-TR §Session Management: a terminated session's id MUST get 404; the client re-initializes.
    return reject(404, INVALID_REQUEST, "unknown or ended session: initialize a new one", id=mid)


def check_legacy_version_header(headers: Mapping[str, str], mid: JsonId | None) -> Rejection | None:
    """On a legacy session, a version header must name a legacy version (L-TR: else 400).

    It is not compared with the session's negotiated version: clients that send the
    header send that one, and refusing a mismatch would break nothing but working clients.
    """
    value = headers.get(h.MCP_PROTOCOL_VERSION)
    if value is None or value in versions.LEGACY_VERSIONS:
        return None
    return reject(
        400,
        INVALID_REQUEST,
        f"unsupported MCP-Protocol-Version {describe(value)} for a legacy session",
        id=mid,
        data={"supported": list(versions.LEGACY_VERSIONS), "requested": value},
    )


# --- Modern ---------------------------------------------------------------------------------


def check_modern(message: Message, headers: Mapping[str, str]) -> Accepted | Rejection:
    """Rungs 8–13. A request of the usual shape passes them in one pass (``plain_version``);
    any other message, and every refusal, takes the rungs one by one (``check_modern_rungs``)."""
    if type(message) is Request:
        version = plain_version(message, headers)
        if version is not None:
            return Accepted(MODERN, version, (message,), None)
    return check_modern_rungs(message, headers)


def plain_version(message: Request, headers: Mapping[str, str]) -> str | None:
    """The version of a modern request that passes rungs 9–12, when it has the usual shape: a
    ``_meta`` naming a modern version and holding client capabilities, the same version and its
    method in the headers, and its ``Mcp-Name`` (if its method has one) passing; else None, and
    ``check_modern_rungs`` says what is wrong. Never accepts what the rungs would refuse
    (a unit test holds the two together)."""
    params = message.params
    if params is None:
        return None
    meta = params.get("_meta")
    if type(meta) is not dict:
        return None
    version = meta.get(PROTOCOL_VERSION_KEY)
    method = message.method
    key = NAME_PARAMS.get(method)
    name = params.get(key) if key is not None else None
    if (
        type(version) is not str
        or version not in versions.MODERN_VERSIONS  # rungs 10 and 11 (a modern version is a plain value)
        or headers.get(h.MCP_PROTOCOL_VERSION) != version  # rung 9
        or type(meta.get(CLIENT_CAPABILITIES_KEY)) is not dict  # rung 11
        or (META_LOG_LEVEL in meta and meta[META_LOG_LEVEL] not in loglevels.LEVELS)  # rung 11
        or headers.get(h.MCP_METHOD) != method  # rung 9
        or (key is None and h.has_invalid_header_chars(method))  # NAME_PARAMS' methods are plain
        or (type(name) is str and (headers.get(h.MCP_NAME) != name or not h.is_plain(name)))
        or method in REMOVED_METHODS  # rung 12
        or method in SERVER_TO_CLIENT_METHODS
    ):
        return None
    return version


def check_modern_rungs(message: Message, headers: Mapping[str, str]) -> Accepted | Rejection:
    """Rungs 8–13, one by one."""
    if isinstance(message, (Result, ErrorReply)):
        return reject(
            400,
            INVALID_REQUEST,
            "clients must not POST responses in protocol revision 2026-07-28",
            id=message.id,
        )
    meta = meta_of(message)  # read once: rungs 9, 10 and 11 look at it
    mismatch = check_mirrored_headers(message, headers, meta)
    if mismatch is not None:
        return mismatch
    header = headers.get(h.MCP_PROTOCOL_VERSION)
    version: Any = header if meta is None else meta.get(PROTOCOL_VERSION_KEY, header)
    unsupported = check_version_supported(version, message)
    if unsupported is not None:
        return unsupported
    if isinstance(message, Request):
        problem = check_required_meta(message, meta) or check_method_known(message)
        if problem is not None:
            return problem
    return Accepted(MODERN, version, (message,), None)


def check_version_supported(version: Any, message: Request | Notification) -> Rejection | None:
    if not isinstance(version, str):
        # Only a notification gets here (a request's header check refuses a non-string).
        return reject(
            400, INVALID_PARAMS, f'params._meta "{PROTOCOL_VERSION_KEY}" must be a string', id=message_id(message)
        )
    if version in versions.MODERN_VERSIONS:
        return None
    hint = " (a legacy revision: initialize a session to use it)" if version in versions.LEGACY_VERSIONS else ""
    return reject(
        400,
        UNSUPPORTED_PROTOCOL_VERSION,
        f"unsupported protocol version {describe(version)}{hint}",
        id=message_id(message),
        data={"supported": list(versions.ADVERTISED_VERSIONS), "requested": version},
    )


def check_required_meta(message: Request, meta: Mapping[str, Any] | None) -> Rejection | None:
    """Digest §1.1: every modern request carries both keys; missing → -32602. ``meta``: the
    request's ``meta_of``."""
    if meta is None:
        return reject(
            400,
            INVALID_PARAMS,
            f'params._meta is required, with "{PROTOCOL_VERSION_KEY}" and "{CLIENT_CAPABILITIES_KEY}"',
            id=message.id,
        )
    if not isinstance(meta.get(PROTOCOL_VERSION_KEY), str):
        return reject(
            400, INVALID_PARAMS, f'params._meta is missing "{PROTOCOL_VERSION_KEY}" (a string)', id=message.id
        )
    if not isinstance(meta.get(CLIENT_CAPABILITIES_KEY), dict):
        return reject(
            400,
            INVALID_PARAMS,
            f'params._meta is missing "{CLIENT_CAPABILITIES_KEY}" (an object; {{}} for none)',
            id=message.id,
        )
    if META_LOG_LEVEL in meta and not loglevels.is_level(level := meta[META_LOG_LEVEL]):
        return reject(
            400,
            INVALID_PARAMS,
            f'params._meta "{META_LOG_LEVEL}" is {describe(level)}, not a log level '
            f"(one of {', '.join(loglevels.LEVELS)})",
            id=message.id,
        )
    return None


def check_method_known(message: Request) -> Rejection | None:
    if message.method in REMOVED_METHODS:
        reason = "was removed in protocol revision 2026-07-28"
    elif message.method in SERVER_TO_CLIENT_METHODS:
        reason = "is sent by servers, not to them"
    else:
        return None
    return reject(404, METHOD_NOT_FOUND, f"method {describe(message.method)} {reason}", id=message.id)


# --- GET and DELETE (legacy sessions only) --------------------------------------------------


def check_get(headers: Mapping[str, str], *, session_version: SessionLookup) -> Accepted | Rejection:
    """A legacy session's server→client stream. ``Last-Event-ID`` is the caller's to ignore."""
    target = check_session_target(headers, session_version)
    if isinstance(target, Rejection):
        return target
    if not h.accepts(headers.get(h.ACCEPT), h.SSE_MEDIA_TYPE):
        return reject(406, INVALID_REQUEST, f"Accept must list {h.SSE_MEDIA_TYPE}")
    return target


def check_delete(headers: Mapping[str, str], *, session_version: SessionLookup) -> Accepted | Rejection:
    """A legacy client ending its session."""
    return check_session_target(headers, session_version)


def check_session_target(headers: Mapping[str, str], session_version: SessionLookup) -> Accepted | Rejection:
    """GET and DELETE exist only for legacy sessions; without one → 405 with ``Allow: POST``."""
    session_id = headers.get(h.MCP_SESSION_ID)
    if session_id is None or headers.get(h.MCP_PROTOCOL_VERSION) in versions.MODERN_VERSIONS:
        return reject(
            405,
            INVALID_REQUEST,
            "GET and DELETE serve legacy sessions only (send Mcp-Session-Id); use POST",
            headers=((h.ALLOW, "POST"),),
        )
    version = session_version(session_id)
    if version is None:
        return unknown_session()
    version_problem = check_legacy_version_header(headers, None)
    if version_problem is not None:
        return version_problem
    return Accepted(LEGACY, version, (), session_id)
