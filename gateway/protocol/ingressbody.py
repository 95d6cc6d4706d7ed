"""Rungs 4 and 6 of the ingress ladder (``gateway.protocol.ingress``): a POST body as JSON
within ``MAX_JSON_DEPTH`` levels, and one JSON-RPC message out of a decoded value (a
``notifications/*`` method sent with an id refused). Each returns its value or the
``Rejection`` the ladder answers with.

Imports: standard library, orjson and ``gateway.protocol`` only. No I/O, clock or async.
"""

from __future__ import annotations

from typing import Any, Final

from gateway.protocol.jsonrpc import (
    INVALID_REQUEST,
    PARSE_ERROR,
    InvalidMessage,
    Message,
    ParseError,
    Request,
    decode,
    is_id,
    parse_message,
)
from gateway.protocol.outcome import Rejection, describe, reject

# Methods under this prefix are notifications in every revision; sent with an id they are refused.
NOTIFICATION_PREFIX: Final = "notifications/"

MAX_JSON_DEPTH: Final = 128
"""Deepest nesting of arrays and objects in a POST body. orjson reads 1,024 levels but
writes only about 255, and every message is written again (to the child, to the client,
inside envelopes of the gateway's own), so deeper input would fail late as a 500. No MCP
payload comes near 128; half of orjson's limit leaves room for the envelopes."""


def parse_body(body: bytes) -> Any:
    """The decoded JSON value, or a 400/-32700 ``Rejection``."""
    try:
        return decode(body)
    except ParseError as exc:
        return reject(400, PARSE_ERROR, str(exc))


def check_depth(body: bytes, value: Any, limit: int = MAX_JSON_DEPTH) -> Rejection | None:
    """Rung 4's nesting bound. Cheap on the hot path: each level opens and closes once, so a
    value nested past ``limit`` takes more than ``2 * limit`` bytes, and no short body (the
    usual call) is looked into. Nor can it nest deeper than the body has ``[`` and ``{`` bytes
    (counted in C), so the walk runs only for bodies with more than ``limit`` of them, and then
    iteratively (no recursion limit to hit)."""
    if len(body) <= 2 * limit or body.count(b"{") + body.count(b"[") <= limit:
        return None
    if not exceeds_depth(value, limit):
        return None
    raw_id = value.get("id") if isinstance(value, dict) else None
    return reject(
        400,
        INVALID_REQUEST,
        f"the JSON is nested more than {limit} levels deep",
        id=raw_id if is_id(raw_id) else None,
        data={"maxDepth": limit},
    )


def exceeds_depth(value: Any, limit: int) -> bool:
    """True when arrays and objects nest more than ``limit`` levels (the outermost is level 1).

    Level by level, without recursion; ``type() is`` because orjson makes exact dicts and lists."""
    level = [value] if type(value) is dict or type(value) is list else []
    depth = 1
    while level:
        deeper = []
        for item in level:
            for child in item.values() if type(item) is dict else item:
                if type(child) is dict or type(child) is list:
                    deeper.append(child)
        if deeper and depth >= limit:
            return True
        level = deeper
        depth += 1
    return False


def parse_single(value: Any) -> Message | Rejection:
    try:
        message = parse_message(value)
    except InvalidMessage as exc:
        return reject(400, INVALID_REQUEST, exc.reason, id=exc.id)
    if isinstance(message, Request) and message.method.startswith(NOTIFICATION_PREFIX):
        return reject(
            400,
            INVALID_REQUEST,
            f"{describe(message.method)} is a notification: send it without an id (it was not forwarded)",
            id=message.id,
        )
    return message
