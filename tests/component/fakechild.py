"""A scripted in-memory MCP server behind the ``ChildBackend`` seam: children without processes.

``FakeBackend`` is a ``gateway.stdio.backend.ChildBackend``. Each ``open(spec)`` makes a
``FakeChild``: a ``ChildProcess`` whose stdin, stdout and stderr are anyio memory streams, and
behind them an MCP server speaking newline-delimited JSON-RPC, scripted by a ``Script``:

- **era**: ``"legacy"`` (``initialize`` only; ``server/discover`` gets -32601), ``"modern"``
  (``server/discover`` only; ``initialize`` gets -32601 naming 2026-07-28) or ``"dual"`` (both;
  a request is served modern-style when its ``_meta`` names a protocol version);
- **tools** (``DEFAULT_TOOLS``): ``echo``; ``whoami`` (the fake pid); ``progress`` (``count``
  notifications tagged ``tag``, then ``hold`` if asked); ``hold`` (until the test releases or
  the gateway cancels it); ``ask`` (``method``/``params`` to the client, its answer returned);
  ``withdraw`` (the same question, withdrawn once the test releases the call); ``crash``
  (``stderr`` lines, then exit with ``code``, the call unanswered); ``stderr`` (``lines``
  written to stderr, in ``one_chunk`` if asked, then answered); other requests
  answered by ``on_request`` handlers (``resources/subscribe``, say), notifications handled by
  ``on_notification``;
- **faults**: ``break_stderr(exc)`` makes the gateway's read of the child's stderr raise
  ``exc`` (a bug in the gateway's pump, for the failure-domain tests);
- **listens** (modern): ``subscriptions/listen`` is held open and acknowledged with the list
  changes it asked for; ``list_changed(kind)`` says a list changed on each that took it, tagged,
  and to nobody when none is open (as a 2026-07-28 server must); ``listens`` holds the open ones;
- **process**: ``exit_at_start`` (code, after ``stderr_at_start``), ``silent`` (reads, never
  writes), ``ignore_stdin_close`` / ``ignore_terminate`` (for the stop ladder).

What the test waits on is state the fake keeps, with an event per change (``until``, never a
poll or a sleep): every message the child read (``received``), the lines each write to its
stdin carried (``reads``), its ``calls`` (one ``Call`` per ``tools/call``: ``arrived``;
``cancelled`` when ``notifications/cancelled`` names its child-side id; ``release()`` to answer
a held call), whether it exited (``exited``).
Cancelled calls are never answered, as a real server should do.

The tools and ``Call`` live in ``fakecalls``, the in-memory pipes in ``memstreams``.
"""

from __future__ import annotations

import asyncio
import contextvars
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import anyio
import orjson
from anyio.abc import ByteReceiveStream, ByteSendStream, TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from gateway.stdio.spec import ChildSpec
from tests.component.fakecalls import DEFAULT_TOOLS, Call, CallCancelled, JsonObject, ToolHandler, text
from tests.component.memstreams import WAIT, ByteReceive, ByteSend, Changes, pipe

__all__ = ["DEFAULT_TOOLS", "WAIT", "Call", "CallCancelled", "Era", "FakeBackend", "FakeChild", "Script", "text"]

Era = Literal["legacy", "modern", "dual"]
NotificationHandler = Callable[["FakeChild", JsonObject], Awaitable[None]]
RequestHandler = Callable[["FakeChild", JsonObject], Awaitable[JsonObject]]

MODERN: Final = "2026-07-28"
LEGACY_VERSIONS: Final = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
PROTOCOL_VERSION_KEY: Final = "io.modelcontextprotocol/protocolVersion"
SUBSCRIPTION_ID_KEY: Final = "io.modelcontextprotocol/subscriptionId"
LIST_CHANGES: Final = ("toolsListChanged", "promptsListChanged", "resourcesListChanged")
SERVER_INFO_KEY: Final = "io.modelcontextprotocol/serverInfo"
FAKE_PID_BASE: Final = 10_000_000
"""Fake pids start above Linux's highest pid (4,194,304): never a real process's."""


@dataclass
class Script:
    """How a fake child behaves."""

    era: Era = "dual"
    name: str = "fakeserver"
    tools: Mapping[str, ToolHandler] = field(default_factory=lambda: dict(DEFAULT_TOOLS))
    capabilities: JsonObject = field(default_factory=lambda: {"tools": {"listChanged": True}})
    stderr_at_start: tuple[str, ...] = ()
    exit_at_start: int | None = None
    silent: bool = False
    ignore_stdin_close: bool = False
    ignore_terminate: bool = False
    # What the child does on a notification from the gateway (run as a task of the server):
    # e.g. ``notifications/roots/list_changed`` → ask ``roots/list`` again, as a caching server does.
    on_notification: Mapping[str, NotificationHandler] = field(default_factory=dict)
    # The result of another request (run as a task of the server, so it may wait, or never
    # answer): e.g. ``resources/subscribe``; an unlisted one gets -32601.
    on_request: Mapping[str, RequestHandler] = field(default_factory=dict)
    # ``subscriptions/listen`` answered -32601 (a modern server without listens).
    refuse_listens: bool = False
    # A tool's inputSchema in tools/list (``{"type": "object"}`` for a tool not named here).
    schemas: Mapping[str, JsonObject] = field(default_factory=dict)
    # More fields of a tool's definition in tools/list (``execution`` of a task tool, say).
    tool_fields: Mapping[str, JsonObject] = field(default_factory=dict)


class FakeChild:
    """A ``ChildProcess`` with a scripted MCP server behind its streams."""

    def __init__(self, backend: FakeBackend, spec: ChildSpec, script: Script, index: int) -> None:
        self.backend = backend
        self.spec = spec
        self.script = script
        self.index = index
        self._pid = FAKE_PID_BASE + index
        self._stdin_send, self._stdin_recv = pipe()
        self._stdout_send, self._stdout_recv = pipe()
        self._stderr_send, self._stderr_recv = pipe()
        self._stdin, self._stdout, self._stderr = (
            ByteSend(self._stdin_send),
            ByteReceive(self._stdout_recv),
            ByteReceive(self._stderr_recv),
        )
        self._returncode: int | None = None
        self.exited = anyio.Event()
        self.received: list[JsonObject] = []  # every message read from stdin, in order
        self.reads: list[int] = []  # the lines each write to stdin carried (one read each)
        self.calls: list[Call] = []
        self.era_of_handshake: str | None = None  # "initialize" or "server/discover", whichever succeeded
        self._legacy_version: str | None = None
        self._asks: dict[str, MemoryObjectSendStream[JsonObject]] = {}
        self._ask_ids = 0
        self.listens: dict[int | str, JsonObject] = {}  # open subscriptions/listen: id → what it was granted
        self._scope = anyio.CancelScope()

    def __repr__(self) -> str:
        return f"<FakeChild {self._pid} {self.script.era} returncode={self._returncode}>"

    # -- ChildProcess ---------------------------------------------------------------------

    @property
    def pid(self) -> int:
        return self._pid

    @property
    def stdin(self) -> ByteSendStream:
        return self._stdin

    async def read_stdout(self, deliver: Callable[[bytes], None]) -> None:
        # As a real child's: ``deliver`` runs in a loop callback, outside any task and in an
        # empty context (where anyio can start no task), and what it raises ends the reading.
        loop = asyncio.get_running_loop()

        def run(chunk: bytes, done: asyncio.Future[None]) -> None:
            if done.cancelled():  # the reading was cancelled (the gateway stops) before the callback ran
                return
            try:
                deliver(chunk)
            except Exception as exc:
                done.set_exception(exc)
            else:
                done.set_result(None)

        while True:
            try:
                chunk = await self._stdout.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                return
            done = loop.create_future()
            loop.call_soon(run, chunk, done, context=contextvars.Context())  # no task, no anyio run's context
            await done

    @property
    def stderr(self) -> ByteReceiveStream:
        return self._stderr

    @property
    def returncode(self) -> int | None:
        return self._returncode

    async def wait(self) -> int:
        await self.exited.wait()
        assert self._returncode is not None
        return self._returncode

    def terminate(self) -> None:
        if not self.script.ignore_terminate:
            self._end(-signal.SIGTERM)

    def kill(self) -> None:
        self._end(-signal.SIGKILL)

    async def stop(self) -> int | None:
        with anyio.CancelScope(shield=True):
            await self._stdin.aclose()
            for grace, rung in ((self.spec.stdin_close_grace, self.terminate), (self.spec.sigterm_grace, self.kill)):
                with anyio.move_on_after(grace):
                    await self.exited.wait()
                if not self.exited.is_set():
                    rung()
            await self.exited.wait()
        return self._returncode

    async def clear_group(self) -> None:
        return None  # nothing outlives a fake

    def close_streams(self) -> None:
        """Close every end of the pipes (what a real process's exit and the OS would do)."""
        ends: list[MemoryObjectSendStream[Any] | MemoryObjectReceiveStream[Any]] = [
            self._stdin_send,
            self._stdin_recv,
            self._stdout_send,
            self._stdout_recv,
            self._stderr_send,
            self._stderr_recv,
            *self._asks.values(),
        ]
        for end in ends:
            end.close()

    def break_stderr(self, fault: Exception) -> None:
        """Make the gateway's stderr pump of this child fail with ``fault`` now (an exception
        the gateway does not expect, at its read of the child's stderr)."""
        self._stderr.fault = fault
        self._stderr_send.send_nowait(b"")  # wakes the pump's pending read

    # -- what tests wait on ---------------------------------------------------------------

    @property
    def is_running(self) -> bool:
        return not self.exited.is_set()

    def running_calls(self, name: str | None = None) -> list[Call]:
        """Calls that arrived and are neither released (answered) nor cancelled."""
        return [
            c for c in self.calls if not c.is_released and not c.cancelled.is_set() and (name is None or c.name == name)
        ]

    def cancels(self) -> list[Any]:
        """The ``requestId`` of every ``notifications/cancelled`` read, in order."""
        return [
            m.get("params", {}).get("requestId") for m in self.received if m.get("method") == "notifications/cancelled"
        ]

    # -- the server -----------------------------------------------------------------------

    async def serve(self) -> None:
        with self._scope:
            try:
                async with anyio.create_task_group() as tg:
                    await self._run(tg)
            finally:
                if self._returncode is None:
                    self._end(0)
                self._stdin_recv.close()

    async def _run(self, tg: TaskGroup) -> None:
        for said in self.script.stderr_at_start:
            await self._stderr_send.send(said.encode() + b"\n")
        if self.script.exit_at_start is not None:
            self._end(self.script.exit_at_start)
            return
        buffer = b""
        async for chunk in self._stdin_recv:
            self.reads.append(chunk.count(b"\n"))
            lines = (buffer + chunk).split(b"\n")
            buffer = lines.pop()
            for line in lines:
                if line.strip():
                    await self._on_line(line, tg)
        # stdin closed: a well-behaved server exits (after nothing: its calls are abandoned)
        if self.script.ignore_stdin_close:
            await anyio.sleep_forever()
        self._end(0)

    async def _on_line(self, line: bytes, tg: TaskGroup) -> None:
        message = orjson.loads(line)
        self.received.append(message)
        self.backend.changes.changed()
        if self.script.silent:
            return
        method = message.get("method")
        if method is None:  # a response to one of our questions
            answer = self._asks.pop(str(message.get("id")), None)
            if answer is not None:
                with answer:
                    answer.send_nowait(message)
            return
        params = message.get("params") or {}
        if "id" not in message:
            if method == "notifications/cancelled":
                if self.listens.pop(params.get("requestId"), None) is not None:
                    self.backend.changes.changed()
                for call in self.calls:
                    if call.id == params.get("requestId") and type(call.id) is type(params.get("requestId")):
                        call.cancelled.set()
                        self.backend.changes.changed()
            handler = self.script.on_notification.get(method)
            if handler is not None:
                tg.start_soon(handler, self, params)
            return
        await self._on_request(message["id"], method, params, tg)

    def _is_modern(self, method: str, params: JsonObject) -> bool:
        if self.script.era == "modern":
            return True
        if self.script.era == "legacy":
            return False
        meta = params.get("_meta")
        return method == "server/discover" or (isinstance(meta, dict) and PROTOCOL_VERSION_KEY in meta)

    async def _on_request(self, request_id: int | str, method: str, params: JsonObject, tg: TaskGroup) -> None:
        modern = self._is_modern(method, params)
        if method == "initialize":
            if self.script.era == "modern":
                await self._error(request_id, -32601, f"only {MODERN} is spoken", {"supported": [MODERN]})
                return
            requested = params.get("protocolVersion")
            self._legacy_version = requested if requested in LEGACY_VERSIONS else LEGACY_VERSIONS[-1]
            self.era_of_handshake = "initialize"
            result: JsonObject = {
                "protocolVersion": self._legacy_version,
                "capabilities": self.script.capabilities,
                "serverInfo": {"name": self.script.name, "version": "1"},
            }
            await self._result(request_id, result)
        elif method == "server/discover":
            if self.script.era == "legacy":
                await self._error(request_id, -32601, "method not found: server/discover")
                return
            self.era_of_handshake = "server/discover"
            await self._result(
                request_id, {"supportedVersions": [MODERN], "capabilities": self.script.capabilities}, True
            )
        elif method == "ping":
            await self._result(request_id, {}, modern)
        elif method == "subscriptions/listen" and modern and self.script.refuse_listens:
            await self._error(request_id, -32601, "method not found: subscriptions/listen")
        elif method == "subscriptions/listen" and modern:
            # Held open: list changes go to the listens that asked for them (``list_changed``).
            asked = params.get("notifications")
            asked = asked if isinstance(asked, dict) else {}
            granted = {key: True for key in LIST_CHANGES if asked.get(key) is True}
            self.listens[request_id] = granted
            ack = {"notifications": granted, "_meta": {SUBSCRIPTION_ID_KEY: request_id}}
            await self.write({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged", "params": ack})
            self.backend.changes.changed()
        elif not modern and self._legacy_version is None:
            await self._error(request_id, -32600, "not initialized: send initialize first")
        elif method == "tools/list":
            schemas = self.script.schemas
            fields = self.script.tool_fields
            tools = [
                {"name": name, "inputSchema": schemas.get(name, {"type": "object"}), **fields.get(name, {})}
                for name in self.script.tools
            ]
            await self._result(request_id, {"tools": tools}, modern)
        elif method == "tools/call":
            call = Call(self, request_id, params, modern)
            handler = self.script.tools.get(call.name)
            if handler is None:
                await self._error(request_id, -32602, f"unknown tool: {call.name}")
                return
            self.calls.append(call)
            self.backend.changes.changed()
            tg.start_soon(self._run_call, call, handler)
        elif (answer := self.script.on_request.get(method)) is not None:
            tg.start_soon(self._answer_with, answer, request_id, params, modern)
        else:
            await self._error(request_id, -32601, f"method not found: {method}")

    async def _run_call(self, call: Call, handler: ToolHandler) -> None:
        try:
            result = await handler(call)
        except CallCancelled:
            return
        if call.cancelled.is_set():
            return
        await self._result(call.id, result, call.modern)
        call.answered = True
        self.backend.changes.changed()

    async def _answer_with(
        self, answer: RequestHandler, request_id: int | str, params: JsonObject, modern: bool
    ) -> None:
        await self._result(request_id, await answer(self, params), modern)

    async def question(self, method: str, params: JsonObject | None) -> str:
        """Ask the client ``method`` without waiting for its answer (an answer that comes is
        in ``received``); its id, for ``withdraw``."""
        self._ask_ids += 1
        ask_id = f"s-{self._ask_ids}"
        request: JsonObject = {"jsonrpc": "2.0", "id": ask_id, "method": method}
        if params is not None:
            request["params"] = params
        await self.write(request)
        return ask_id

    async def withdraw(self, ask_id: str, reason: str) -> None:
        """Cancel a question of ours, as the TypeScript SDK does when its wait for it times out."""
        params = {"requestId": ask_id, "reason": reason}
        await self.write({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params})

    async def ask(self, method: str, params: JsonObject | None) -> JsonObject:
        self._ask_ids += 1
        ask_id = f"s-{self._ask_ids}"
        send, receive = anyio.create_memory_object_stream[JsonObject](1)
        self._asks[ask_id] = send
        request: JsonObject = {"jsonrpc": "2.0", "id": ask_id, "method": method}
        if params is not None:
            request["params"] = params
        await self.write(request)
        with receive:
            return await receive.receive()

    async def _result(self, request_id: int | str, result: JsonObject, modern: bool = False) -> None:
        if modern:
            result = {**result, "resultType": "complete"}
            result["_meta"] = {**result.get("_meta", {}), SERVER_INFO_KEY: {"name": self.script.name, "version": "1"}}
        await self.write({"jsonrpc": "2.0", "id": request_id, "result": result})

    async def _error(self, request_id: int | str, code: int, message: str, data: Any = None) -> None:
        error: JsonObject = {"code": code, "message": message}
        if data is not None:
            error["data"] = data
        await self.write({"jsonrpc": "2.0", "id": request_id, "error": error})

    async def list_changed(self, kind: str = "tools") -> int:
        """Say that the ``kind`` list changed, as a 2026-07-28 server does: on each open listen
        that asked for it, tagged with its id (none open: said to nobody). How many heard it."""
        key = f"{kind}ListChanged"
        heard = [listen_id for listen_id, granted in self.listens.items() if granted.get(key)]
        for listen_id in heard:
            params = {"_meta": {SUBSCRIPTION_ID_KEY: listen_id}}
            await self.write({"jsonrpc": "2.0", "method": f"notifications/{kind}/list_changed", "params": params})
        return len(heard)

    async def write(self, message: JsonObject) -> None:
        if self.exited.is_set():
            return
        await self._stdout_send.send(orjson.dumps(message) + b"\n")

    async def write_stderr(self, lines: list[str], *, one_chunk: bool = False) -> None:
        """Write ``lines`` to stderr, each with its newline: each its own chunk, as a child that
        flushes every line, or all in ``one_chunk`` (the gateway reads them at one moment)."""
        if one_chunk:
            await self._stderr_send.send(b"".join(line.encode() + b"\n" for line in lines))
            return
        for line in lines:
            await self._stderr_send.send(line.encode() + b"\n")

    async def exit(self, code: int, *, stderr: list[str] | None = None) -> None:
        """Write ``stderr`` lines, then end the process with ``code`` (a crash, from a tool or a test)."""
        await self.write_stderr(stderr or [])
        self._end(code)

    def _end(self, returncode: int) -> None:
        if self._returncode is not None:
            return
        self._returncode = returncode
        self._stdout_send.close()
        self._stderr_send.close()
        self._scope.cancel()  # the server's task closes stdin (the gateway's writes then break)
        self.exited.set()
        self.backend.changes.changed()


class FakeBackend:
    """A ``ChildBackend`` of scripted fake children, run in its own task group (enter it
    before the gateway, leave it after)."""

    def __init__(self, script: Script | Callable[[int], Script] | None = None) -> None:
        self._script = script if script is not None else Script()
        self.children: list[FakeChild] = []
        self.changes = Changes()
        self._tg: TaskGroup | None = None

    async def open(self, spec: ChildSpec) -> FakeChild:
        assert self._tg is not None, "enter the FakeBackend before the gateway opens children"
        index = len(self.children)
        script = self._script(index) if callable(self._script) else self._script
        child = FakeChild(self, spec, script, index)
        self.children.append(child)
        self._tg.start_soon(child.serve)
        self.changes.changed()
        return child

    async def until(self, predicate: Callable[[], bool], timeout: float = WAIT) -> None:
        """Until ``predicate`` holds, checked at each change of any child (bounded)."""
        await self.changes.until(predicate, timeout)

    def running(self) -> list[FakeChild]:
        return [child for child in self.children if child.is_running]

    def calls(self, name: str | None = None) -> list[Call]:
        return [call for child in self.children for call in child.calls if name is None or call.name == name]

    def running_calls(self, name: str | None = None) -> list[Call]:
        return [call for child in self.children for call in child.running_calls(name)]

    async def wait_calls(self, count: int, name: str | None = None) -> list[Call]:
        """Until ``count`` calls (of ``name``) are running at the children; those calls."""
        await self.until(lambda: len(self.running_calls(name)) >= count)
        return self.running_calls(name)

    @asynccontextmanager
    async def running_in(self) -> AsyncIterator[FakeBackend]:
        async with anyio.create_task_group() as tg:
            self._tg = tg
            try:
                yield self
            finally:
                for child in self.children:
                    child.kill()  # what the gateway left running (it stops its children itself)
                    child.close_streams()
                self._tg = None


@asynccontextmanager
async def fake_backend(script: Script | Callable[[int], Script] | None = None) -> AsyncIterator[FakeBackend]:
    async with FakeBackend(script).running_in() as backend:
        yield backend
