"""A real gateway on a real socket: uvicorn serving the app on a pre-bound 127.0.0.1 port.

The socket is bound and listening before uvicorn starts, so a client may connect at once:
the kernel queues the connection until uvicorn accepts it. No sleeps, no port races.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import fields
from typing import Any

import anyio
import uvicorn
from starlette.applications import Starlette

from gateway.http.app import create_app
from gateway.http.connection import GuardedHttpTools
from gateway.http.edge_settings import EdgeSettings
from gateway.protocol.tasks import DEFAULT_FIRST_ROUND
from gateway.relay.router import Router
from gateway.relay.server_config import (
    ROOTS_LEARN_WAIT,
    CapabilityKeying,
    DualEra,
    Isolation,
    RootsKeying,
    ServerConfig,
)
from gateway.stdio.pool import PoolSettings
from gateway.stdio.spec import ChildSpec

MODERN = "2026-07-28"
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "tests", "version": "0"},
}
BASE_HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
OPERATOR_TOKEN = "operator-token-0123456789abcdef"
OPERATOR = {"authorization": f"Bearer {OPERATOR_TOKEN}"}
"""The headers that open ``/status`` and ``/ui`` on an app given ``operator_tokens=operator_tokens()``."""


def operator_tokens() -> Any:
    """The ``operator_tokens`` of ``create_app`` holding ``OPERATOR_TOKEN``."""
    from gateway.http.auth import TokenStore

    return TokenStore([OPERATOR_TOKEN], flag="--operator-token")


def app_for(routers: Router | list[Router], **options: Any) -> Starlette:
    """``create_app`` with the edge settings and its other parts given as keywords alike, the
    way tests name them: ``app_for(router, max_body_bytes=64, drain=drain)``."""
    edge = {f.name for f in fields(EdgeSettings)}
    settings = EdgeSettings(**{k: tuple(v) if isinstance(v, list) else v for k, v in options.items() if k in edge})
    return create_app(routers, settings, **{k: v for k, v in options.items() if k not in edge})


def loopback_socket() -> socket.socket:
    """A listening TCP socket on a free 127.0.0.1 port."""
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY on accepted sockets only when the listening
    # socket says TCP, and without it every response waits ~40 ms on Nagle + delayed ACK.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    return sock


ENGINE_VARIABLE = "GATEWAY_TEST_ENGINE"
"""``granian``: ``serving`` runs the app on Granian's embedded server instead of uvicorn, for the
engine comparison (``docs/architecture.md``, "The HTTP engine"): the same tests, the other engine."""


@asynccontextmanager
async def _granian_serving(app: Any, sock: socket.socket | None, *, http: Any, **config: Any) -> AsyncIterator[str]:
    """``serving`` on Granian: its own limits are set from the gateway's (head bytes, head time);
    the socket is Granian's own (it binds ``sock``'s port after ``sock`` is closed). Granian comes
    from ``bench/.peers/granian`` (``bench/install-peers.sh``) or the environment."""
    import sys

    from bench.procs import GRANIAN_DIR

    if GRANIAN_DIR.is_dir() and str(GRANIAN_DIR) not in sys.path:
        sys.path.insert(0, str(GRANIAN_DIR))
    from granian.constants import Interfaces
    from granian.http import HTTP1Settings
    from granian.server.embed import Server

    from gateway.http.connection import MAX_HEAD_BYTES

    sock = sock or loopback_socket()
    port = sock.getsockname()[1]
    sock.close()
    timeout = getattr(http, "header_timeout", None) or 10.0
    server: Any = Server(
        app,
        address="127.0.0.1",
        port=port,
        interface=Interfaces.ASGI,
        http1_settings=HTTP1Settings(header_read_timeout=int(timeout * 1000), max_buffer_size=MAX_HEAD_BYTES),
        log_enabled=False,
    )
    finished = anyio.Event()

    async def serve() -> None:
        try:
            await server.serve()
        finally:
            finished.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(serve)
        # Granian listens in its own time and says nothing when it does (its embedded server's
        # startup hook runs before its worker listens): the one probe loop of the tier, only for
        # GATEWAY_TEST_ENGINE=granian, bounded at 200 tries.
        for _ in range(200):
            try:
                probe = await anyio.connect_tcp("127.0.0.1", port)
            except OSError:
                await anyio.sleep(0.05)
                continue
            await probe.aclose()
            break
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.stop()
            with anyio.CancelScope(shield=True), anyio.move_on_after(15):
                await finished.wait()


class _Server(uvicorn.Server):
    """uvicorn, telling when its startup (the app's lifespan startup included) is done."""

    def __init__(self, config: uvicorn.Config, started: anyio.Event) -> None:
        super().__init__(config)
        self.started_event = started

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        self.started_event.set()


@asynccontextmanager
async def serving(
    app: Any, sock: socket.socket | None = None, *, http: type[asyncio.Protocol] = GuardedHttpTools, **config: Any
) -> AsyncIterator[str]:
    """Serve any ASGI app on a pre-bound 127.0.0.1 socket (``sock``, or a new one); yield its base
    URL (always http://, also when ``config`` holds uvicorn's TLS options) once the app's
    lifespan has started (what it opens, such as ``app.state.task_stores``, is there).

    ``http``: the protocol class, the gateway's own by default (``GuardedHttpTools.configured``
    gives it other limits)."""
    if os.environ.get(ENGINE_VARIABLE) == "granian":
        async with _granian_serving(app, sock, http=http, **config) as base:
            yield base
        return
    sock = sock or loopback_socket()
    port = sock.getsockname()[1]
    started, finished = anyio.Event(), anyio.Event()
    uv = _Server(
        uvicorn.Config(app, lifespan="on", log_level="warning", timeout_graceful_shutdown=5, http=http, **config),
        started,
    )

    async def serve() -> None:
        try:
            await uv.serve([sock])
        finally:
            started.set()  # also when it never started: the wait below must not hang
            finished.set()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(serve)
            await started.wait()  # the app's lifespan has started: what it opened is there
            try:
                yield f"http://127.0.0.1:{port}"
            finally:
                # Shut down gracefully even when the test failed, so the app's lifespan (and
                # every child) ends in its own task instead of being torn down mid-flight.
                uv.should_exit = True
                with anyio.CancelScope(shield=True), anyio.move_on_after(15):
                    await finished.wait()
    finally:
        sock.close()


@asynccontextmanager
async def running_gateway(
    spec: ChildSpec,
    *,
    pool: PoolSettings | None = None,
    isolation: Isolation = Isolation.SHARED,
    env_from_headers: dict[str, str] | None = None,
    pool_size: int | None = None,
    http: type[asyncio.Protocol] = GuardedHttpTools,
    dual_era: DualEra = DualEra.PER_CLIENT,
    capability_keying: CapabilityKeying = CapabilityKeying.SHARED,
    roots_keying: RootsKeying = RootsKeying.AUTO,
    roots_learn_wait: float = ROOTS_LEARN_WAIT,
    sock: socket.socket | None = None,
    task_first_round: float = DEFAULT_FIRST_ROUND,
    **app_options: Any,
) -> AsyncIterator[str]:
    """Serve ``spec`` behind the gateway (on ``sock``, a listening socket, when given); yield
    the MCP endpoint URL. ``dual_era=MODERN`` keeps legacy and modern clients of the (dual by
    default) test server on the same children. ``roots_learn_wait=0``: for a test whose first
    roots-declaring call would otherwise wait out the learning window (the test server fetches
    no roots at start-up unless run with ``--cache-roots``)."""
    if pool_size is not None:
        pool = PoolSettings(min_size=pool_size, max_size=pool_size, asking_max=0)  # exactly that many
    server = ServerConfig(
        "test",
        spec,
        pool or PoolSettings(),
        isolation,
        env_from_headers or {},
        dual_era=dual_era,
        capability_keying=capability_keying,
        roots_keying=roots_keying,
        roots_learn_wait=roots_learn_wait,
        task_first_round=task_first_round,
    )
    app = app_for(Router(server), **app_options)
    async with serving(app, sock, http=http) as base:
        yield f"{base}/mcp"


def modern_headers(method: str, name: str | None = None, **extra: str) -> dict[str, str]:
    headers = {**BASE_HEADERS, "mcp-protocol-version": MODERN, "mcp-method": method, **extra}
    if name is not None:
        headers["mcp-name"] = name
    return headers


def modern_call(request_id: Any, tool: str, arguments: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments or {}, "_meta": {**MODERN_META, **meta}},
    }


def parse_sse(text: str) -> list[dict[str, Any]]:
    """The JSON messages of an SSE body (``data:`` lines; comments and a priming event's empty
    data ignored)."""
    import orjson

    messages = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        data = [line[5:].lstrip() for line in block.splitlines() if line.startswith("data:")]
        if any(data):
            messages.append(orjson.loads("\n".join(data)))
    return messages


async def sse_messages(stream: Any) -> AsyncIterator[dict[str, Any]]:
    """The JSON messages of a streamed SSE response (an ``httpx.Response`` being read), each as
    soon as its event is whole."""
    text, seen = "", 0
    async for chunk in stream.aiter_text():
        text += chunk
        found = parse_sse(text)
        for message in found[seen:]:
            yield message
        seen = len(found)


def legacy_initialize(
    version: str = "2025-11-25", name: str = "t", capabilities: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A legacy client's ``initialize`` request (no client capabilities unless given)."""
    return {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": version,
            "capabilities": capabilities or {},
            "clientInfo": {"name": name, "version": "1"},
        },
    }


async def open_legacy_session(
    http: Any,
    url: str,
    *,
    version: str = "2025-11-25",
    headers: dict[str, str] | None = None,
    capabilities: dict[str, Any] | None = None,
) -> dict[str, str]:
    """``initialize`` then ``notifications/initialized`` (``http``: an ``httpx.AsyncClient``);
    the headers that carry the new session, its version and the given ``headers`` after that."""
    extra = headers or {}
    init = await http.post(
        url, headers={**BASE_HEADERS, **extra}, json=legacy_initialize(version, capabilities=capabilities)
    )
    assert init.status_code == 200, init.text
    session = {
        **BASE_HEADERS,
        **extra,
        "mcp-session-id": init.headers["mcp-session-id"],
        "mcp-protocol-version": version,
    }
    done = await http.post(url, headers=session, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert done.status_code == 202, done.text
    return session
