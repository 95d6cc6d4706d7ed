"""A round-robin HTTP balancer for tests (each request goes to the next backend in turn, as a
plain Kubernetes Service or a reverse proxy without affinity would send it), and ``cluster``:
gateway instances with owner routing, on port-0 loopback sockets, behind one.

Responses (SSE included) stream back as they come; a client disconnect closes the upstream
request. Every request is recorded (backend index, method, status) so a test can assert
that requests really went round and that none was answered 404.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx

from gateway.http.edge_settings import MAX_BODY_BYTES
from gateway.relay.owner import OwnerRouting
from gateway.relay.router import Router
from gateway.relay.server_config import ServerConfig
from gateway.relay.statekeys import StateKeys
from gateway.stdio.spec import ChildSpec
from tests.gateway_server import app_for, loopback_socket, serving

SECRET = b"the replicas' shared secret, 32+"
LOOP_STALL_MARGIN = 30.0
HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "host", "content-length", "date", "server"})


@dataclass
class Hit:
    backend: int
    method: str
    status: int
    rpc: str | None  # the JSON-RPC method when the body names one


@dataclass
class RoundRobin:
    backends: list[str]
    hits: list[Hit] = field(default_factory=list)
    _next: int = 0
    _client: httpx.AsyncClient | None = None

    def statuses(self) -> list[int]:
        return [hit.status for hit in self.hits]

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    self._client = httpx.AsyncClient(timeout=httpx.Timeout(None, connect=5.0), trust_env=False)
                    await send({"type": "lifespan.startup.complete"})
                else:
                    assert self._client is not None
                    await self._client.aclose()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        assert scope["type"] == "http"
        assert self._client is not None
        index = self._next % len(self.backends)
        self._next += 1
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = [(k, v) for k, v in scope["headers"] if k.decode() not in HOP_BY_HOP]
        query = scope["query_string"].decode()
        url = self.backends[index] + scope["path"] + (f"?{query}" if query else "")
        request = self._client.build_request(scope["method"], url, headers=headers, content=body)
        upstream = await self._client.send(request, stream=True)
        rpc = None
        if body.startswith(b"{"):
            import orjson

            rpc = orjson.loads(body).get("method")
        self.hits.append(Hit(index, scope["method"], upstream.status_code, rpc))
        try:
            returned = [(k, v) for k, v in upstream.headers.raw if k.decode().lower() not in HOP_BY_HOP]
            await send({"type": "http.response.start", "status": upstream.status_code, "headers": returned})
            async with anyio.create_task_group() as tg:

                async def watch() -> None:
                    while (await receive())["type"] != "http.disconnect":
                        pass
                    tg.cancel_scope.cancel()

                tg.start_soon(watch)
                try:
                    async for chunk in upstream.aiter_raw():
                        await send({"type": "http.response.body", "body": chunk, "more_body": True})
                except httpx.HTTPError:
                    pass  # the backend went away mid-response: end this one
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await upstream.aclose()


@dataclass
class Cluster:
    url: str  # the balancer's MCP endpoint
    balancer: RoundRobin
    instances: list[str]  # each instance's base URL (its advertise URL)
    routings: list[OwnerRouting]
    apps: list[Any]
    seen: list[dict[str, str]] = field(default_factory=list)  # every request's headers, as the instances got them


@asynccontextmanager
async def cluster(
    spec: ChildSpec, size: int = 3, *, keys: Sequence[StateKeys] | None = None, **app_options: Any
) -> AsyncIterator[Cluster]:
    """``size`` instances on port-0 loopback sockets, and a round-robin balancer in front.
    ``keys``: each instance's keyring (default: ``SECRET`` for all)."""
    keys = list(keys) if keys is not None else [StateKeys.fixed(SECRET) for _ in range(size)]
    assert len(keys) == size
    sockets = [loopback_socket() for _ in range(size)]
    bases = [f"http://127.0.0.1:{sock.getsockname()[1]}" for sock in sockets]
    # All instances share this test's event loop, which a busy machine may stall for seconds:
    # a connect that long is not an owner gone (those refuse at once, on loopback).
    routings = [
        OwnerRouting(base, ring, max_body_bytes=MAX_BODY_BYTES, connect_timeout=LOOP_STALL_MARGIN)
        for base, ring in zip(bases, keys, strict=True)
    ]
    apps = [app_for(Router(ServerConfig("test", spec)), owner_routing=routing, **app_options) for routing in routings]
    async with AsyncExitStack() as stack:
        seen: list[dict[str, str]] = []
        for sock, app in zip(sockets, apps, strict=True):
            await stack.enter_async_context(serving(_recording(app, seen), sock))
        balancer = RoundRobin(bases)
        front = await stack.enter_async_context(serving(balancer))
        yield Cluster(f"{front}/mcp", balancer, bases, routings, apps, seen)


def _recording(app: Any, seen: list[dict[str, str]]) -> Any:
    async def recorded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            seen.append({k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]})
        await app(scope, receive, send)

    return recorded
