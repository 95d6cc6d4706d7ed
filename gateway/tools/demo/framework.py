"""A tiny thread-based stdio MCP server framework for the demo and test servers.

* **Framing** (digest §3, §4.1): one JSON-RPC message per UTF-8 line on stdin. Compact JSON
  lines go to stdout under one lock, each flushed. Only JSON-RPC goes to stdout (unless a tool
  calls ``ToolContext.write_line``). Diagnostics go to stderr.
* **Eras:** ``eras`` is ``{"modern"}``, ``{"legacy"}`` or both.
  Modern (2026-07-28) requests must carry ``params._meta`` protocolVersion and
  clientCapabilities (else -32602). Other versions get -32022 ``{supported, requested}``.
  Results get ``resultType`` and ``_meta`` serverInfo; cacheable ones also get
  ``ttlMs``/``cacheScope`` (below). ``initialize`` gets -32601.
  Legacy (2024-11-05 … 2025-11-25): ``initialize`` echoes a known version or offers
  2025-11-25. Requests before it (except ``ping``) get -32600, ``server/discover`` gets
  -32601, and results have no modern fields.
  A dual server serves a request modern-style if its ``_meta`` names a protocol version or it
  is ``server/discover``, and legacy-style otherwise. Both run in one process.
* **Concurrency:** the reader validates and routes in arrival order. Each ``tools/call`` runs
  on its own daemon thread, so a slow tool never blocks another; so does each request whose
  method was registered with ``add_call_handler`` (``prompts/get``, ``resources/read``: a
  handler that may ask the client, like a tool). Other requests are answered on the reader.
* **Cache hints:** a modern result of a cacheable method (``CACHEABLE_METHODS``: discover, the
  lists, ``resources/read``) gets ``ttlMs``/``cacheScope`` unless its handler set them.
* **Cancellation:** ``notifications/cancelled`` for an in-flight id (exact JSON type: ``7`` is
  not ``"7"``) sets ``ctx.cancelled``. After that, nothing is written for the request: no
  progress and no reply (unless the tool called ``ignore_cancellation``). Every requestId
  received is kept in order in ``StdioServer.cancelled_ids``.
* **Server→client requests:** ``ctx.send_request`` writes id ``"s-N"`` and waits. Responses
  (an id, a result or error, no method) go to that waiter.
* **Bad input:** a non-JSON or non-UTF-8 line gets -32700 with id null. A value that is not
  an object (batches included) gets -32600 with id null. Notifications are never answered.
* **EOF:** ``serve()`` gives in-flight calls ``eof_grace`` seconds to reply, abandons the rest
  (daemon threads), stops all output and returns.

Imports: standard library only, so the servers start fast and run anywhere.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import IO, Any

from gateway.tools.demo import answers
from gateway.tools.demo.context import Tool as Tool
from gateway.tools.demo.context import ToolContext as ToolContext
from gateway.tools.demo.context import ToolHandler as ToolHandler
from gateway.tools.demo.listens import Listens
from gateway.tools.demo.outgoing import Outgoing
from gateway.tools.demo.rpc import (
    CACHEABLE_METHODS,
    EOF_GRACE_SECONDS,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    SEND_REQUEST_TIMEOUT,
    Era,
    LineSource,
    RequestId,
    id_key,
    is_request_id,
)
from gateway.tools.demo.rpc import (
    JsonObject as JsonObject,
)
from gateway.tools.demo.rpc import (
    RpcError as RpcError,
)

# Re-exported (``X as X``): tool modules import these from the framework.
from gateway.tools.demo.tools import ToolInputError as ToolInputError
from gateway.tools.demo.tools import int_arg as int_arg
from gateway.tools.demo.tools import object_schema as object_schema
from gateway.tools.demo.tools import str_arg as str_arg
from gateway.tools.demo.tools import str_list_arg as str_list_arg
from gateway.tools.demo.tools import text_result as text_result


class StdioServer:
    """A stdio MCP server. Register tools, then call ``serve()``, which returns at stdin EOF."""

    def __init__(
        self,
        name: str,
        version: str,
        *,
        eras: Iterable[str] = ("modern", "legacy"),
        instructions: str | None = None,
        capabilities: JsonObject | None = None,
        ttl_ms: int = 60_000,
        cache_scope: str = "public",
        silent_methods: Iterable[str] = (),
        eof_grace: float = EOF_GRACE_SECONDS,
        page_size: int | None = None,
        stdin: LineSource | None = None,
        stdout: IO[bytes] | None = None,
    ) -> None:
        self.eras = frozenset(eras)
        if not self.eras or not self.eras <= {"modern", "legacy"}:
            raise ValueError(f"eras must be a non-empty subset of {{'modern', 'legacy'}}, got {sorted(self.eras)!r}")
        self.server_info: JsonObject = {"name": name, "version": version}
        self.instructions = instructions
        self.capabilities: JsonObject = capabilities if capabilities is not None else {"tools": {}}
        self.log_level: Any = None  # the last logging/setLevel (legacy); recorded, not applied
        self.ttl_ms = ttl_ms
        self.cache_scope = cache_scope
        self.silent_methods = frozenset(silent_methods)
        self.eof_grace = eof_grace
        self.page_size = page_size  # tools/list pages of this many tools (None: one page)
        self.stdout_lock = threading.RLock()  # re-entrant: a tool holding it may still write
        self._in = stdin if stdin is not None else sys.stdin.buffer
        self._out = stdout if stdout is not None else sys.stdout.buffer
        self._stdout_closed = False
        self._tools: dict[str, Tool] = {}
        self._lock = threading.Lock()  # guards the tables below; never held during I/O
        self._idle = threading.Condition(self._lock)
        self._in_flight: dict[tuple[type, Any], ToolContext] = {}
        self._cancelled_ids: list[Any] = []
        self._cancels_changed = threading.Condition(self._lock)
        # Extra handling of client notifications by method (run on the reader thread, in order).
        self.notification_handlers: dict[str, Callable[[JsonObject], None]] = {}
        # Extra requests answered inline, by method (params → result, or RpcError).
        self.request_handlers: dict[str, Callable[[JsonObject], JsonObject]] = {}
        # Extra requests answered on a thread of their own, by method (add_call_handler).
        self._call_handlers: dict[str, Tool] = {}
        self._listens = Listens(self.send)  # modern subscriptions/listen
        self.subscribed: set[str] = set()  # legacy resources/subscribe URIs held (not yet unsubscribed)
        self._outgoing = Outgoing(self.send, self._write)  # requests to the client
        self._legacy_version: str | None = None
        self.client_capabilities: JsonObject = {}  # what the client declared at initialize (legacy era)

    # -- registration -------------------------------------------------------------------------

    def add_tool(self, tool: Tool) -> None:
        self._tools[tool.name] = tool

    def add_call_handler(self, method: str, handler: ToolHandler) -> None:
        """Answer ``method`` as a ``tools/call`` is answered: on a thread of its own, with a
        ``ToolContext`` (progress, questions to the client, cancellation), ``handler(ctx, params)``
        returning the result. An ``RpcError`` it raises is the reply; any other exception is a
        -32603 error (there is no ``isError`` result outside ``tools/call``)."""
        self._call_handlers[method] = Tool(method, f"the {method} handler", {}, handler)

    @property
    def cancelled_ids(self) -> list[Any]:
        """Every ``requestId`` received in ``notifications/cancelled``, in arrival order."""
        with self._lock:
            return list(self._cancelled_ids)

    def wait_cancelled(self, count: int, timeout: float) -> list[Any]:
        """``cancelled_ids`` once there are at least ``count`` (or after ``timeout`` seconds)."""
        with self._cancels_changed:
            self._cancels_changed.wait_for(lambda: len(self._cancelled_ids) >= count, timeout)
            return list(self._cancelled_ids)

    def wait_in_flight(self, count: int, timeout: float) -> int:
        """How many tool calls are in flight, once at most ``count`` are (or after ``timeout``
        seconds): a call leaves when its tool has returned and its reply was written (or not,
        when it was cancelled)."""
        with self._idle:
            self._idle.wait_for(lambda: len(self._in_flight) <= count, timeout)
            return len(self._in_flight)

    # -- output -------------------------------------------------------------------------------

    def send(self, message: Any) -> None:
        """Write one JSON value as a compact line."""
        try:
            data = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate cannot be UTF-8; \u-escapes can carry it
            data = json.dumps(message, separators=(",", ":")).encode("ascii")
        self._write(data + b"\n")

    def write_line(self, text: str) -> None:
        self._write(text.encode("utf-8", "replace") + b"\n")

    def notify(self, method: str, params: JsonObject | None = None) -> None:
        """Send a notification (to the open modern listens that take it, if any: ``Listens``)."""
        self._listens.notify(method, params)

    def end_listens(self, *, cancelled: bool = False) -> int:
        """End every open listen (``Listens.end``); return how many there were."""
        return self._listens.end(cancelled=cancelled)

    def send_request(
        self,
        method: str,
        params: JsonObject | None = None,
        timeout: float = SEND_REQUEST_TIMEOUT,
        *,
        cancel_on_timeout: bool = False,
    ) -> JsonObject:
        """Send a server→client request and wait for its result (see ``ToolContext.send_request``)."""
        return self._outgoing.request(method, params, timeout, cancel_on_timeout=cancel_on_timeout)

    def send_requests(
        self,
        requests: list[tuple[str, JsonObject | None]],
        timeout: float = SEND_REQUEST_TIMEOUT,
        lead: Sequence[JsonObject] = (),
    ) -> list[JsonObject | Exception]:
        """Several server→client requests written as one chunk; wait for every answer
        (``Outgoing.requests``; ``lead``: messages written first in the same chunk)."""
        return self._outgoing.requests(requests, timeout, lead)

    def log(self, text: str) -> None:
        sys.stderr.write(f"{self.server_info['name']}: {text}\n")
        sys.stderr.flush()

    def _write(self, data: bytes) -> None:
        with self.stdout_lock:
            if self._stdout_closed:
                return
            try:
                self._out.write(data)
                self._out.flush()
            except (OSError, ValueError) as exc:  # the client closed our stdout: stop writing
                self._stdout_closed = True
                self.log(f"stdout is gone ({exc!r}); output stops")

    # -- input --------------------------------------------------------------------------------

    def serve(self) -> None:
        """Read and handle messages until stdin EOF, then wind down (see the module contract)."""
        try:
            while raw := self._in.readline():
                self._on_line(raw)
        finally:
            self._on_eof()

    def _on_eof(self) -> None:
        self._outgoing.close()
        with self._idle:
            self._idle.wait_for(lambda: not self._in_flight, timeout=self.eof_grace)
        with self.stdout_lock:
            # Abandoned handlers may still try to write: dropping their output here means
            # interpreter shutdown never meets a daemon thread holding the stdout buffer.
            self._stdout_closed = True

    def _on_line(self, raw: bytes) -> None:
        if not raw.strip():
            return
        try:
            message = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            self._send_error(None, RpcError(PARSE_ERROR, "parse error: a line is not UTF-8 JSON"))
            return
        self._on_message(message)

    def _on_message(self, message: Any) -> None:
        if not isinstance(message, dict):
            what = "batches are not supported" if isinstance(message, list) else "not a JSON object"
            self._send_error(None, RpcError(INVALID_REQUEST, f"invalid request: {what}"))
            return
        method = message.get("method")
        has_id = "id" in message
        reply_id = message["id"] if has_id and is_request_id(message["id"]) else None
        if method is None and has_id and ("result" in message or "error" in message):
            self._on_response(message)
        elif not isinstance(method, str) or message.get("jsonrpc") != "2.0":
            if has_id:  # never answer what could be a notification
                self._send_error(reply_id, RpcError(INVALID_REQUEST, "invalid request: not JSON-RPC 2.0"))
        elif not has_id:
            params = message.get("params")
            self._on_notification(method, params if isinstance(params, dict) else {})
        elif reply_id is None:
            self._send_error(None, RpcError(INVALID_REQUEST, "invalid request: id must be a string or integer"))
        else:
            params = message.get("params", {})
            if params is None:
                params = {}
            if isinstance(params, dict):
                self._on_request(reply_id, method, params)
            else:
                self._send_error(reply_id, RpcError(INVALID_PARAMS, "invalid params: params must be an object"))

    def _on_notification(self, method: str, params: JsonObject) -> None:
        # notifications/initialized needs no action: requests are accepted once initialize is answered.
        handler = self.notification_handlers.get(method)
        if handler is not None:
            handler(params)
        if method != "notifications/cancelled" or "requestId" not in params:
            return
        request_id = params["requestId"]
        with self._lock:
            self._cancelled_ids.append(request_id)
            self._cancels_changed.notify_all()
            ctx = self._in_flight.get(id_key(request_id)) if is_request_id(request_id) else None
        self._listens.drop(request_id)  # a listen ends without a response
        if ctx is not None:
            ctx._cancel()

    def _on_response(self, message: JsonObject) -> None:
        if not self._outgoing.resolve(message):
            self.log(f"ignoring a response to unknown request id {message['id']!r}")

    # -- requests -----------------------------------------------------------------------------

    def _on_request(self, request_id: RequestId, method: str, params: JsonObject) -> None:
        if method in self.silent_methods:
            return
        try:
            era = answers.era_of(self.eras, self._legacy_version is not None, method, params)
            if method == "tools/call":
                self._start_tool_call(request_id, era, params)
                return
            if method in self._call_handlers:
                self._start_call(request_id, era, params, method, self._call_handlers[method], params)
                return
            if method == "subscriptions/listen" and era == "modern":
                self._listens.open(request_id, params, self.capabilities)
                return
            result = self._answer(era, method, params)
        except RpcError as exc:
            self._send_error(request_id, exc)
            return
        self.send({"jsonrpc": "2.0", "id": request_id, "result": self._decorate(era, result, method)})

    def _answer(self, era: Era, method: str, params: JsonObject) -> JsonObject:
        """The result of a request that is answered inline (everything but ``tools/call``)."""
        if method == "initialize":
            return self._initialize(params)
        if method == "ping" and era == "legacy":
            return {}
        if method in ("resources/subscribe", "resources/unsubscribe") and era == "legacy":
            uri = params.get("uri")
            if not isinstance(uri, str) or uri.startswith("bad:"):
                raise RpcError(INVALID_PARAMS, f"cannot subscribe to {uri!r}")
            if method == "resources/subscribe":
                self.subscribed.add(uri)
            else:
                self.subscribed.discard(uri)
            return {}  # nothing else changes here: resources/updated is sent by the notify tool
        if method == "logging/setLevel" and era == "legacy":
            self.log_level = params.get("level")
            return {}
        if method == "server/discover":
            return answers.discover_result(self.capabilities, self.instructions)
        if method == "tools/list":
            return answers.tools_page(list(self._tools.values()), self.page_size, params.get("cursor"))
        handler = self.request_handlers.get(method)
        if handler is not None:
            return handler(params)
        raise RpcError(METHOD_NOT_FOUND, f"method not found: {method}")

    def _initialize(self, params: JsonObject) -> JsonObject:
        version, capabilities, result = answers.initialize_result(
            params, self.capabilities, self.server_info, self.instructions
        )
        with self._lock:
            self._legacy_version = version
            self.client_capabilities = capabilities
        return result

    def _decorate(self, era: Era, result: JsonObject, method: str) -> JsonObject:
        if era == "modern" and method in CACHEABLE_METHODS:
            result = answers.cache_hints(self.ttl_ms, self.cache_scope) | result  # the handler's own win
        return answers.decorate(era, result, self.server_info)

    def _send_error(self, request_id: RequestId | None, error: RpcError) -> None:
        self.send({"jsonrpc": "2.0", "id": request_id, "error": error.to_json()})

    # -- tool calls ---------------------------------------------------------------------------

    def _start_tool_call(self, request_id: RequestId, era: Era, params: JsonObject) -> None:
        name = params.get("name")
        if not isinstance(name, str):
            raise RpcError(INVALID_PARAMS, "tools/call: params.name must be a string")
        tool = self._tools.get(name)
        if tool is None:
            raise RpcError(INVALID_PARAMS, f"unknown tool: {name}")
        arguments = params.get("arguments")
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            raise RpcError(INVALID_PARAMS, "tools/call: params.arguments must be an object")
        self._start_call(request_id, era, params, "tools/call", tool, arguments)

    def _start_call(
        self, request_id: RequestId, era: Era, params: JsonObject, method: str, tool: Tool, arguments: JsonObject
    ) -> None:
        """Run ``tool`` (a tool, or the handler of ``method``: ``add_call_handler``) on a thread of its own."""
        meta = params.get("_meta")
        ctx = ToolContext(self, request_id, era, meta.get("progressToken") if isinstance(meta, dict) else None)
        ctx.meta = dict(meta) if isinstance(meta, dict) else {}
        ctx.params = dict(params)
        with self._lock:
            if id_key(request_id) in self._in_flight:
                raise RpcError(INVALID_REQUEST, f"request id {request_id!r} is already in flight")
            self._in_flight[id_key(request_id)] = ctx
        name = f"call:{tool.name}:{request_id}"
        thread = threading.Thread(target=self._run_tool, args=(tool, ctx, arguments, method), name=name, daemon=True)
        thread.start()

    def _run_tool(self, tool: Tool, ctx: ToolContext, arguments: JsonObject, method: str) -> None:
        is_tool = method == "tools/call"
        try:
            reply: JsonObject = {"jsonrpc": "2.0", "id": ctx.request_id}
            try:
                result = tool.handler(ctx, arguments)
                if not isinstance(result, dict):
                    raise TypeError(f"tool {tool.name} returned {type(result).__name__}, not a dict")
            except RpcError as exc:
                reply["error"] = exc.to_json()
            except ToolInputError as exc:
                if not is_tool:
                    reply["error"] = RpcError(INVALID_PARAMS, f"{tool.name}: {exc}").to_json()
                result = text_result(f"{tool.name}: {exc}", is_error=True)
            except Exception as exc:
                self.log(f"{tool.name} raised {exc!r}")
                if not is_tool:
                    reply["error"] = RpcError(INTERNAL_ERROR, f"{tool.name} failed: {type(exc).__name__}").to_json()
                result = text_result(f"{tool.name} failed: {type(exc).__name__}: {exc}", is_error=True)
            if "error" not in reply:
                reply["result"] = self._decorate(ctx.era, result, method)
            ctx._finish(reply)
            for action in ctx._after_reply:
                threading.Thread(target=action, name=f"after:{tool.name}", daemon=True).start()
        finally:
            with self._idle:
                self._in_flight.pop(id_key(ctx.request_id), None)
                self._idle.notify_all()


# -- helpers for tools ------------------------------------------------------------------------
