"""Owner routing against hostile peers (issue #24, items 1, 9 and 10): instances on real
loopback sockets, raw connections that trickle bodies or carry forged forwards, a captured
forward replayed or altered, and an "owner" that accepts a forward and never answers.

The body timeout is shortened for these tests (``BODY_TIMEOUT``), and the owner checks
(``answer_check``) and probes (``connect_timeout``) are quick; every wait is bounded by
``fail_after``.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx
import orjson
import pytest

from gateway.http.auth import TokenStore
from gateway.http.edge_settings import MAX_BODY_BYTES
from gateway.protocol import owner as owners
from gateway.relay.owner import OwnerRouting
from gateway.relay.router import Router
from gateway.relay.server_config import ServerConfig
from gateway.relay.statekeys import StateKeys
from tests.balancer import SECRET
from tests.conftest import server_spec
from tests.gateway_server import BASE_HEADERS, app_for, loopback_socket, open_legacy_session, serving

pytestmark = pytest.mark.anyio

WAIT = 45.0
BODY_TIMEOUT = 1.0
TRICKLERS = 20
ALICE = {"authorization": "Bearer token-of-alice-0123456789"}


@dataclass
class Captured:
    method: str
    path: str
    headers: list[tuple[str, str]]
    body: bytes


@dataclass
class Pair:
    """Instance 0 (the owner) and instance 1 (the entry); forwards into the owner are recorded
    and, while ``intercepting``, answered 503 there instead of reaching it."""

    bases: list[str]
    routings: list[OwnerRouting]
    captured: list[Captured] = field(default_factory=list)
    intercepting: bool = False


@asynccontextmanager
async def pair(**options: Any) -> AsyncIterator[Pair]:
    sockets = [loopback_socket() for _ in range(2)]
    bases = [f"http://127.0.0.1:{sock.getsockname()[1]}" for sock in sockets]
    routings = [
        OwnerRouting(base, StateKeys.fixed(SECRET), max_body_bytes=MAX_BODY_BYTES, connect_timeout=WAIT / 2)
        for base in bases
    ]
    found = Pair(bases, routings)
    spec = server_spec("--era", "legacy")
    apps = [app_for(Router(ServerConfig("test", spec)), owner_routing=r, **options) for r in routings]

    async def owner(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not any(k == owners.FORWARD_HEADER.encode() for k, _ in scope["headers"]):
            await apps[0](scope, receive, send)
            return
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]]
        found.captured.append(Captured(scope["method"], scope["path"], headers, body))
        if found.intercepting:
            await send({"type": "http.response.start", "status": 503, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        replayed = False

        async def again() -> Any:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await apps[0](scope, again, send)

    async with AsyncExitStack() as stack:
        await stack.enter_async_context(serving(owner, sockets[0]))
        await stack.enter_async_context(serving(apps[1], sockets[1]))
        yield found


async def raw_exchange(base: str, head: str, body: bytes = b"", *, then_wait: bool = True) -> tuple[int, bytes]:
    """Send ``head`` (request line and headers) and ``body``, send nothing more, and return the
    status and body of the answer (the connection stays open until it comes)."""
    url = httpx.URL(base)
    async with await anyio.connect_tcp("127.0.0.1", url.port or 80) as stream:
        await stream.send(head.replace("\n", "\r\n").encode() + b"\r\n" + body)
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += await stream.receive()
        head_bytes, _, rest = answer.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head_bytes.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        )
        while len(rest) < length:
            rest += await stream.receive()
    return int(head_bytes.split()[1]), rest


def post_head(path: str, length: int, *extra: str) -> str:
    lines = [f"POST {path} HTTP/1.1", "host: 127.0.0.1", "content-type: application/json"]
    lines += ["accept: application/json, text/event-stream", f"content-length: {length}", *extra]
    return "\n".join(lines) + "\n"


async def test_trickling_bodies_through_owner_routing_get_the_same_408_as_a_single_instance() -> None:
    statuses: list[int] = []

    async def trickle(base: str) -> None:
        status, body = await raw_exchange(base, post_head("/mcp", 100), b'{"jsonrpc"')
        statuses.append(status)
        assert b"request body not received within" in body

    with anyio.fail_after(WAIT):
        async with pair(body_timeout=BODY_TIMEOUT) as p, anyio.create_task_group() as tg:
            for n in range(TRICKLERS):
                tg.start_soon(trickle, p.bases[n % 2])
    assert statuses == [408] * TRICKLERS


async def test_a_session_request_for_another_owner_with_a_trickling_body_gets_408() -> None:
    with anyio.fail_after(WAIT):
        async with pair(body_timeout=BODY_TIMEOUT) as p, httpx.AsyncClient() as http:
            session = await open_legacy_session(http, p.bases[0] + "/mcp")
            head = post_head("/mcp", 100, f"mcp-session-id: {session['mcp-session-id']}")
            status, answer = await raw_exchange(p.bases[1], head, b'{"jsonrpc"')
    assert status == 408
    assert b"request body not received within" in answer
    assert p.captured == []  # never forwarded


@pytest.mark.parametrize("path", ["/mcp", "/healthz", "/nowhere"])
async def test_a_bogus_forward_header_is_refused_before_its_body_is_read_on_any_path(path: str) -> None:
    forged = [
        f"{owners.FORWARD_HEADER}: v2;{int(time.time())};AAAA;{owners.body_digest(b'')};AAAA",
        f"{owners.TARGET_HEADER}: x#y",
        "origin: http://evil.example",
    ]
    with anyio.fail_after(WAIT):
        async with pair() as p:
            # A body of 1 MB is announced and never sent: the refusal cannot wait for it.
            status, body = await raw_exchange(p.bases[1], post_head(path, 1_000_000, *forged))
    assert status == 403
    assert b"failed verification" in body


async def test_a_validly_signed_forward_whose_body_trickles_gets_408() -> None:
    with anyio.fail_after(WAIT):
        async with pair(body_timeout=BODY_TIMEOUT) as p:
            me = p.routings[1].me  # the entry instance: the test's recorder in front of the owner reads bodies
            body = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"})
            signature = owners.sign_forward(
                owners.derive_key(SECRET, "forward"),
                now=int(time.time()),
                nonce=secrets.token_bytes(owners.NONCE_BYTES),
                method="POST",
                path="/mcp",
                principal=None,
                owner=me,
                digest=owners.body_digest(body),
            )
            forward = [f"{owners.FORWARD_HEADER}: {signature}", f"{owners.TARGET_HEADER}: {me.key}"]
            status, answer = await raw_exchange(p.bases[1], post_head("/mcp", len(body), *forward), body[:5])
    assert status == 408
    assert b"request body not received within" in answer


async def test_a_captured_forward_cannot_be_replayed_nor_moved_to_another_session() -> None:
    tokens = TokenStore(["alice:token-of-alice-0123456789"])
    echo = {
        "jsonrpc": "2.0",
        "id": 5,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"message": "hi"}},
    }
    with anyio.fail_after(WAIT):
        async with pair(tokens=tokens) as p, httpx.AsyncClient(timeout=WAIT) as http:
            owner = p.bases[0] + "/mcp"
            first = await open_legacy_session(http, owner, headers=ALICE)
            second = await open_legacy_session(http, owner, headers=ALICE)
            p.intercepting = True  # the forward is captured on its way, before the owner sees it
            held = await http.post(p.bases[1] + "/mcp", headers={**first, **ALICE}, json=echo)
            assert held.status_code == 503
            p.intercepting = False
            [forward] = p.captured
            assert ("mcp-session-id", first["mcp-session-id"]) in forward.headers

            async def replay(headers: list[tuple[str, str]]) -> httpx.Response:
                sent = [(k, v) for k, v in headers if k not in ("host", "content-length")]
                return await http.post(owner, headers=sent, content=forward.body)

            moved = [(k, second["mcp-session-id"] if k == "mcp-session-id" else v) for k, v in forward.headers]
            refused = await replay(moved)  # the same principal's other session: the signature covers the id
            assert refused.status_code == 403, refused.text
            assert "failed verification" in refused.json()["error"]["message"]
            assert (await replay(forward.headers)).status_code == 200  # once, as sent
            again = await replay(forward.headers)
            assert again.status_code == 403
            assert "received before" in again.json()["error"]["message"]


async def test_an_owner_that_accepts_a_forward_and_never_answers_is_gone_after_the_check(
    caplog: pytest.LogCaptureFixture,
) -> None:
    connections = 0

    async def silent(stream: Any) -> None:  # reads whatever comes, answers nothing
        nonlocal connections
        connections += 1
        async with stream:
            try:
                while True:
                    await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                pass

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    mute = owners.Owner(f"http://127.0.0.1:{port}", "mute")
    session_id = owners.mint_session_id(mute, owners.IdKeys.derive(SECRET, "session id"), secrets.token_bytes(16))
    sock = loopback_socket()
    routing = OwnerRouting(
        f"http://127.0.0.1:{sock.getsockname()[1]}",
        StateKeys.fixed(SECRET),
        max_body_bytes=MAX_BODY_BYTES,
        connect_timeout=1.0,
        answer_check=0.2,
    )
    app = app_for(Router(ServerConfig("test", server_spec("--era", "legacy"))), owner_routing=routing)
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    with anyio.fail_after(WAIT):
        async with listener, anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, silent)
            async with serving(app, sock) as base, httpx.AsyncClient(timeout=WAIT) as http:
                gone = await http.post(base + "/mcp", headers={**BASE_HEADERS, "mcp-session-id": session_id}, json=ping)
                again = await http.post(
                    base + "/mcp", headers={**BASE_HEADERS, "mcp-session-id": session_id}, json=ping
                )
            tg.cancel_scope.cancel()
    assert gone.status_code == 404
    assert "the replica that owns this session is unreachable" in gone.json()["error"]["message"]
    assert str(port) not in gone.text
    assert again.status_code == 404  # remembered as gone: answered at once
    assert connections >= 1  # the forward reached it (and the /healthz probe, which got no answer either)
    assert caplog.text.count("stopped answering") == 1  # the second request asked nobody
