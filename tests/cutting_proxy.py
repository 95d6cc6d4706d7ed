"""A reverse proxy for tests that cuts every response ``cut_after`` seconds after its request
came, as a proxy or load balancer with a response timeout does (issues #26, #30): the upstream
request is closed, so the gateway sees its client leave, and the client sees its response end
without the rest (a 504 when not even the head came in time). With ``head_limit`` the cut
counts from the head instead, so a loaded machine that is slow to answer cannot turn a
streamed response into a 504 (the resumption tests cut streams, not heads).

Loopback only: serve it with ``tests.gateway_server.serving``. ``cuts`` counts the responses
it cut; ``methods`` records each request's method and ``Last-Event-ID`` header.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx

HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "host", "content-length", "date", "server"})


@dataclass
class CuttingProxy:
    backend: str  # base URL, e.g. http://127.0.0.1:PORT
    cut_after: float
    # None: the head's wait counts towards ``cut_after`` (nginx's proxy_read_timeout; a slow
    # synchronous answer gets 504). Else the head may take this long, and the body is cut
    # ``cut_after`` after the head came: a busy machine delays a stream's head, never its cut.
    head_limit: float | None = None
    cuts: int = 0
    requests: list[tuple[str, str | None]] = field(default_factory=list)  # (method, Last-Event-ID)
    _client: httpx.AsyncClient | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    # A connection per upstream request, as nginx's default (HTTP/1.0 upstream): a
                    # pooled one left idle as long as the gateway's keep-alive (uvicorn's 5 s) may be
                    # closed by the gateway just as the proxy sends on it.
                    self._client = httpx.AsyncClient(
                        timeout=httpx.Timeout(None, connect=5.0),
                        limits=httpx.Limits(max_keepalive_connections=0),
                        trust_env=False,
                    )
                    await send({"type": "lifespan.startup.complete"})
                else:
                    assert self._client is not None
                    await self._client.aclose()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        assert self._client is not None
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = [(k, v) for k, v in scope["headers"] if k.decode() not in HOP_BY_HOP]
        last = dict(scope["headers"]).get(b"last-event-id")
        self.requests.append((scope["method"], last.decode() if last else None))
        url = self.backend + scope["path"]
        request = self._client.build_request(scope["method"], url, headers=headers, content=body)
        deadline = anyio.current_time() + (self.cut_after if self.head_limit is None else self.head_limit)
        upstream: httpx.Response | None = None
        with anyio.move_on_at(deadline):
            upstream = await self._client.send(request, stream=True)
        if upstream is not None and self.head_limit is not None:
            deadline = anyio.current_time() + self.cut_after
        if upstream is None:  # no head within the limit: the proxy gives up, as a 504
            self.cuts += 1
            await send({"type": "http.response.start", "status": 504, "headers": []})
            await send({"type": "http.response.body", "body": b"proxy timeout", "more_body": False})
            return
        try:
            returned = [(k, v) for k, v in upstream.headers.raw if k.decode().lower() not in HOP_BY_HOP]
            await send({"type": "http.response.start", "status": upstream.status_code, "headers": returned})
            with anyio.move_on_at(deadline) as timer:
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
                        pass
                    tg.cancel_scope.cancel()
            if timer.cancelled_caught:
                self.cuts += 1
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            with anyio.CancelScope(shield=True):
                await upstream.aclose()
