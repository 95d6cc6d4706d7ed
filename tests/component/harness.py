"""The gateway's ASGI app in process, over fake children: no sockets, no processes.

``in_process_gateway(backend, ...)`` builds the app the way ``gateway.server`` does (a
``Router`` per server, ``create_app``) with the fake backend, runs its lifespan, and yields a
``Gateway`` (``in_process_servers(routers)``: the same for several servers, each router with a
fake backend of its own):

- ``gw.http``: an ``httpx.AsyncClient`` over ``httpx.ASGITransport``, for answers that can be
  read whole (JSON, or an SSE body that ends);
- ``gw.open(body, headers)``: one request driven straight into the app, whose response is read
  message by message as the app sends it, and which the test can leave (``disconnect()``: the
  app's ``receive`` then says ``http.disconnect``, as uvicorn does when a client goes away).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final

import anyio
import httpx
import orjson
from anyio.streams.memory import MemoryObjectReceiveStream
from starlette.applications import Starlette

from gateway.http.connection import HANGUP, Hangup
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
from tests.component.fakechild import FakeBackend
from tests.gateway_server import app_for

WAIT: Final = 10.0
FAKE_SPEC: Final = ChildSpec(
    "fake-server", stdin_close_grace=0.5, sigterm_grace=0.5, probe_timeout=2, handshake_timeout=2
)
"""Never run: the fake backend reads only its label and graces."""
URL: Final = "http://127.0.0.1/mcp"

Message = dict[str, Any]


def legacy_call(request_id: Any, tool: str, args: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    """A legacy client's ``tools/call`` (``meta``: its ``_meta``, e.g. ``progressToken``)."""
    params: dict[str, Any] = {"name": tool, "arguments": args or {}}
    if meta:
        params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


@asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    """Run the app's lifespan: startup before the block, shutdown after (bounded)."""
    to_app, app_receive = anyio.create_memory_object_stream[Message](4)
    app_send, from_app = anyio.create_memory_object_stream[Message](4)
    scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": {}}
    async with to_app, app_receive, app_send, from_app, anyio.create_task_group() as tg:

        async def run_app() -> None:
            await app(scope, app_receive.receive, app_send.send)  # type: ignore[arg-type]

        tg.start_soon(run_app)
        await to_app.send({"type": "lifespan.startup"})
        with anyio.fail_after(WAIT):
            started = await from_app.receive()
        assert started["type"] == "lifespan.startup.complete", started
        try:
            yield
        finally:
            with anyio.CancelScope(shield=True), anyio.fail_after(WAIT):
                await to_app.send({"type": "lifespan.shutdown"})
                ended = await from_app.receive()
            assert ended["type"] == "lifespan.shutdown.complete", ended


class LiveResponse:
    """One request's response as the app sends it."""

    def __init__(
        self, sent: MemoryObjectReceiveStream[Message], disconnect: anyio.Event, done: anyio.Event, hangup: Hangup
    ) -> None:
        self._sent = sent
        self._disconnect = disconnect
        self._hangup = hangup
        self.done = done  # the app's call returned
        self.status = 0
        self.headers: dict[str, str] = {}
        self._buffer = b""
        self.ended = False  # the last body chunk came

    async def start(self) -> int:
        """The status, once the app has started the response."""
        if not self.status:
            with anyio.fail_after(WAIT):
                message = await self._sent.receive()
            assert message["type"] == "http.response.start", message
            self.status = message["status"]
            self.headers = {k.decode().lower(): v.decode() for k, v in message.get("headers", [])}
        return self.status

    async def _more(self) -> bool:
        if self.ended:
            return False
        try:
            with anyio.fail_after(WAIT):
                message = await self._sent.receive()
        except anyio.EndOfStream:
            self.ended = True
            return False
        assert message["type"] == "http.response.body", message
        self._buffer += message.get("body", b"")
        if not message.get("more_body", False):
            self.ended = True
        return True

    async def next_message(self) -> Message | None:
        """The next SSE event's JSON message (comments skipped); None at the end of the stream."""
        await self.start()
        while True:
            block, sep, rest = self._buffer.replace(b"\r\n", b"\n").partition(b"\n\n")
            if sep:
                self._buffer = rest
                data = [line[5:].strip() for line in block.split(b"\n") if line.startswith(b"data:")]
                if any(data):  # a priming event (an id, empty data) carries no message
                    parsed: Message = orjson.loads(b"\n".join(data))
                    return parsed
                continue
            if not await self._more():
                return None

    async def messages(self) -> list[Message]:
        """Every remaining SSE message, until the response ends."""
        found = []
        while (message := await self.next_message()) is not None:
            found.append(message)
        return found

    async def body(self) -> bytes:
        """The whole (remaining) body."""
        await self.start()
        while await self._more():
            pass
        body, self._buffer = self._buffer, b""
        return body

    def sent_nothing(self) -> bool:
        """Whether the app has sent nothing at all (not even the response's start) so far."""
        if self.status:
            return False
        try:
            message = self._sent.receive_nowait()
        except anyio.WouldBlock:
            return True
        except anyio.EndOfStream:
            return True
        raise AssertionError(f"the app sent {message!r}")

    def disconnect(self) -> None:
        """The client goes away, told to the app as the real server tells it: pushed through
        the connection's ``Hangup`` (at once, synchronously), and ``receive`` now answers
        ``http.disconnect``."""
        self._disconnect.set()
        self._hangup.lost()


@dataclass
class Gateway:
    app: Starlette
    http: httpx.AsyncClient
    url: str = URL

    @asynccontextmanager
    async def open(
        self, body: Any, headers: Mapping[str, str], *, method: str = "POST", path: str = "/mcp"
    ) -> AsyncIterator[LiveResponse]:
        """Drive one request into the app; leaving the block disconnects (if the response is
        still open) and waits for the app's call to return."""
        raw = body if isinstance(body, bytes) else orjson.dumps(body)
        sent_in, sent_out = anyio.create_memory_object_stream[Message](1024)
        disconnect, done = anyio.Event(), anyio.Event()
        hangup = Hangup()  # what GuardedHttpTools puts in every request's scope
        requested = False

        async def receive() -> Message:
            nonlocal requested
            if not requested:
                requested = True
                return {"type": "http.request", "body": raw, "more_body": False}
            await disconnect.wait()
            return {"type": "http.disconnect"}

        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "root_path": "",
            "query_string": b"",
            "headers": [(b"host", b"127.0.0.1"), *((k.lower().encode(), v.encode()) for k, v in headers.items())],
            "client": ("127.0.0.1", 50000),
            "server": ("127.0.0.1", 80),
            "state": {},
            HANGUP: hangup,
        }

        async def run() -> None:
            try:
                await self.app(scope, receive, sent_in.send)  # type: ignore[arg-type]
            finally:
                sent_in.close()
                done.set()

        async with sent_in, sent_out, anyio.create_task_group() as tg:
            tg.start_soon(run)
            response = LiveResponse(sent_out, disconnect, done, hangup)
            try:
                yield response
            finally:
                response.disconnect()
                with anyio.CancelScope(shield=True), anyio.fail_after(WAIT):
                    await done.wait()


@asynccontextmanager
async def in_process_gateway(
    backend: FakeBackend,
    *,
    spec: ChildSpec = FAKE_SPEC,
    pool: PoolSettings | None = None,
    isolation: Isolation = Isolation.SHARED,
    dual_era: DualEra = DualEra.PER_CLIENT,
    roots_keying: RootsKeying = RootsKeying.AUTO,
    roots_learn_wait: float = ROOTS_LEARN_WAIT,
    capability_keying: CapabilityKeying = CapabilityKeying.SHARED,
    **app_options: Any,
) -> AsyncIterator[Gateway]:
    """The gateway's app over ``backend``'s children, lifespan running, with a client."""
    server = ServerConfig(
        "test",
        spec,
        pool or PoolSettings(),
        isolation,
        dual_era=dual_era,
        roots_keying=roots_keying,
        roots_learn_wait=roots_learn_wait,
        capability_keying=capability_keying,
    )
    async with in_process_servers([Router(server, backend=backend)], **app_options) as gw:
        yield gw


@asynccontextmanager
async def in_process_servers(routers: list[Router], **app_options: Any) -> AsyncIterator[Gateway]:
    """The gateway's app over ``routers`` (each with its own fake backend, so each server's
    children may be scripted apart), lifespan running, with a client. With several servers
    ``gw.url`` is the first one's ``/servers/NAME/mcp``."""
    app = app_for(routers, **app_options)
    url = URL if len(routers) == 1 else f"http://127.0.0.1/servers/{routers[0].server.name}/mcp"
    async with lifespan(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1", timeout=WAIT) as http:
            yield Gateway(app, http, url)
