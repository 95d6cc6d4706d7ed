"""A POST whose whole body is already in (``BODY_RECEIVED``, set by the connection) is read by
the endpoint itself, from one message; every other POST through ``read_body``. Both ways give
the same answer: a served call, a body over ``max_body_bytes`` (413), a body in two messages
and a client gone before its body (nothing sent, nothing raised)."""

from __future__ import annotations

from typing import Any, Final

import anyio
import orjson
import pytest
from starlette.requests import ClientDisconnect
from starlette.types import Message

from gateway.http.connection import BODY_RECEIVED, HANGUP, Hangup
from tests.component.fakechild import fake_backend
from tests.component.harness import in_process_gateway
from tests.gateway_server import modern_call, modern_headers

pytestmark = pytest.mark.anyio
BOUND: Final = 20.0
LIMIT: Final = 400


def scope_of(body: bytes, *, received: bool) -> dict[str, Any]:
    headers = [(k.encode(), v.encode()) for k, v in modern_headers("tools/call", "echo").items()]
    headers += [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/mcp",
        "raw_path": b"/mcp",
        "root_path": "",
        "query_string": b"",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
        "state": {},
        HANGUP: Hangup(),
    }
    if received:
        scope[BODY_RECEIVED] = True
    return scope


async def answer(app: Any, body: bytes, messages: list[Message], *, received: bool) -> tuple[int, bytes]:
    """The status and body the app answers ``messages`` (the request's body as received) with."""
    sent: list[Message] = []
    pending = [*messages, {"type": "http.disconnect"}]

    async def receive() -> Message:
        return pending.pop(0) if len(pending) > 1 else pending[0]

    async def send(message: Message) -> None:
        sent.append(message)

    try:
        await app(scope_of(body, received=received), receive, send)
    except ClientDisconnect:  # raised through the edge: uvicorn would log it as a crash, a 500
        return -1, b""
    status = sent[0]["status"] if sent else 0
    return status, b"".join(m.get("body", b"") for m in sent[1:])


def whole(body: bytes) -> list[Message]:
    return [{"type": "http.request", "body": body, "more_body": False}]


def halves(body: bytes) -> list[Message]:
    return [
        {"type": "http.request", "body": body[:10], "more_body": True},
        {"type": "http.request", "body": body[10:], "more_body": False},
    ]


async def test_a_body_already_in_is_answered_as_one_read_through_read_body() -> None:
    call = orjson.dumps(modern_call(1, "echo", {"message": "hi"}))
    over = orjson.dumps(modern_call(2, "echo", {"message": "x" * LIMIT}))
    cases = [(call, whole(call)), (call, halves(call)), (over, whole(over)), (over, halves(over)), (call, [])]
    statuses: list[int] = []
    with anyio.fail_after(BOUND):
        async with fake_backend() as backend, in_process_gateway(backend, max_body_bytes=LIMIT) as gw:
            for body, messages in cases:
                fast = await answer(gw.app, body, messages, received=True)
                assert fast == await answer(gw.app, body, messages, received=False)
                statuses.append(fast[0])
    # 0: the client left before its body, and nothing was sent (the edge logs 499); never raised
    assert statuses == [200, 200, 413, 413, 0]
