"""A tiny thread-based stdio MCP server framework for the demo and test servers.

* **Framing** (digest §3, §4.1): one JSON-RPC message per UTF-8 line on stdin. Compact JSON
  lines go to stdout under one lock, each flushed. Only JSON-RPC goes to stdout (unless a tool
  calls ``ToolContext.write_line``). Diagnostics go to stderr.
* **Eras:** ``eras`` is ``{"modern"}``, ``{"legacy"}`` or both.
  Modern (2026-07-28) requests must carry ``params._meta`` protocolVersion and
  clientCapabilities (else -32602). Other versions get -32022 ``{supported, requested}``.
  Results get ``resultType`` and ``_meta`` serverInfo. Discover and tools/list also get
  ``ttlMs``/``cacheScope``. ``initialize`` gets -32601.
  Legacy (2024-11-05 … 2025-11-25): ``initialize`` echoes a known version or offers
  2025-11-25. Requests before it (except ``ping``) get -32600, ``server/discover`` gets
  -32601, and results have no modern fields.
  A dual server serves a request modern-style if its ``_meta`` names a protocol version or it
  is ``server/discover``, and legacy-style otherwise. Both run in one process.
* **Concurrency:** the reader validates and routes in arrival order. Each ``tools/call`` runs
  on its own daemon thread, so a slow tool never blocks another.
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

import itertools
import json
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import IO, Any

from gateway.tools.demo.context import Tool as Tool
from gateway.tools.demo.context import ToolContext as ToolContext
from gateway.tools.demo.context import ToolHandler as ToolHandler
from gateway.tools.demo.context import Waiter
from gateway.tools.demo.rpc import (
    EOF_GRACE_SECONDS,
    INVALID_PARAMS,
    INVALID_REQUEST,
    LATEST_LEGACY,
    LEGACY_VERSIONS,
    LISTEN_TYPES,
    METHOD_NOT_FOUND,
    MODERN_ONLY_METHODS,
    MODERN_VERSIONS,
    PARSE_ERROR,
    PROTOCOL_VERSION_KEY,
    RESOURCES_UPDATED,
    SEND_REQUEST_TIMEOUT,
    SERVER_INFO_KEY,
    SUBSCRIPTION_ID_KEY,
    Era,
    LineSource,
    RequestId,
    check_modern_meta,
    id_key,
    is_request_id,
    result_of,
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
        self._waiting: dict[tuple[type, Any], Waiter] = {}
        self._cancelled_ids: list[Any] = []
        self._cancels_changed = threading.Condition(self._lock)
        # Extra handling of client notifications by method (run on the reader thread, in order).
        self.notification_handlers: dict[str, Callable[[JsonObject], None]] = {}
        # Extra requests answered inline, by method (params → result, or RpcError).
        self.request_handlers: dict[str, Callable[[JsonObject], JsonObject]] = {}
        # Modern listens: id → (listen id, notification methods, resource URIs) granted.
        self._listens: dict[tuple[type, Any], tuple[RequestId, frozenset[str], tuple[str, ...]]] = {}
        self._out_ids = itertools.count(1)
        self._legacy_version: str | None = None
        self.client_capabilities: JsonObject = {}  # what the client declared at initialize (legacy era)
        self._eof = False

    # -- registration -------------------------------------------------------------------------

    def add_tool(self, tool: Tool) -> None:
        self._tools[tool.name] = tool

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
        """Send a notification; while modern listens are open, a ``list_changed`` goes to each
        listen that opted in, tagged with its ``subscriptionId``, instead, and so does a
        ``resources/updated`` to each listen whose ``resourceSubscriptions`` cover its URI."""
        with self._lock:
            listens = list(self._listens.values())
        uri = (params or {}).get("uri")
        covering = [
            listen_id
            for listen_id, _, uris in listens
            if method == RESOURCES_UPDATED and any(uri == held or str(uri).startswith(held + "/") for held in uris)
        ]
        if covering or (listens and method in LISTEN_TYPES.values()):
            for listen_id in covering or [listen_id for listen_id, methods, _ in listens if method in methods]:
                body = dict(params or {})
                body["_meta"] = {**body.get("_meta", {}), SUBSCRIPTION_ID_KEY: listen_id}
                self.send({"jsonrpc": "2.0", "method": method, "params": body})
            return
        message: JsonObject = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)

    def end_listens(self, *, cancelled: bool = False) -> int:
        """End every open listen with the graceful result (or, ``cancelled``, with
        ``notifications/cancelled`` naming it); return how many there were."""
        with self._lock:
            listens = list(self._listens.values())
            self._listens.clear()
        for listen_id, _, _ in listens:
            if cancelled:
                params = {"requestId": listen_id, "reason": "the server ends the subscription"}
                self.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params})
                continue
            result = {"resultType": "complete", "_meta": {SUBSCRIPTION_ID_KEY: listen_id}}
            self.send({"jsonrpc": "2.0", "id": listen_id, "result": result})
        return len(listens)

    def _listen(self, request_id: RequestId, params: JsonObject) -> None:
        requested = params.get("notifications")
        requested = requested if isinstance(requested, dict) else {}
        granted: JsonObject = {key: True for key in LISTEN_TYPES if requested.get(key) is True}
        methods = frozenset(LISTEN_TYPES[key] for key in granted)
        wanted = requested.get("resourceSubscriptions")
        resources = self.capabilities.get("resources")
        uris: tuple[str, ...] = ()
        if isinstance(resources, dict) and resources.get("subscribe") is True and isinstance(wanted, list):
            # "bad:" URIs are refused, as for legacy resources/subscribe: the ack leaves them out.
            uris = tuple(u for u in wanted if isinstance(u, str) and u and not u.startswith("bad:"))
            granted["resourceSubscriptions"] = list(uris)
        with self._lock:
            self._listens[id_key(request_id)] = (request_id, methods, uris)
        ack = {"notifications": granted, "_meta": {SUBSCRIPTION_ID_KEY: request_id}}
        self.send({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged", "params": ack})

    def send_request(
        self, method: str, params: JsonObject | None = None, timeout: float = SEND_REQUEST_TIMEOUT
    ) -> JsonObject:
        """Send a server→client request and wait for its result (see ``ToolContext.send_request``)."""
        waiter = Waiter()
        with self._lock:
            if self._eof:
                raise ConnectionError("stdin is closed: the client can no longer reply")
            request_id = f"s-{next(self._out_ids)}"
            self._waiting[id_key(request_id)] = waiter
        message: JsonObject = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        if not waiter.event.wait(timeout):
            with self._lock:
                self._waiting.pop(id_key(request_id), None)
            raise TimeoutError(f"no reply to {method} ({request_id}) within {timeout} s")
        return result_of(waiter.message)

    def send_requests(
        self,
        requests: list[tuple[str, JsonObject | None]],
        timeout: float = SEND_REQUEST_TIMEOUT,
        lead: Sequence[JsonObject] = (),
    ) -> list[JsonObject | Exception]:
        """Several server→client requests written as one chunk; wait for every answer.
        ``lead``: messages written first in the same chunk (a reply the requests follow at once)."""
        waiters: list[tuple[str, Waiter]] = []
        lines = [
            json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n" for message in lead
        ]
        with self._lock:
            if self._eof:
                raise ConnectionError("stdin is closed: the client can no longer reply")
            for method, params in requests:
                request_id = f"s-{next(self._out_ids)}"
                waiter = Waiter()
                self._waiting[id_key(request_id)] = waiter
                waiters.append((request_id, waiter))
                message: JsonObject = {"jsonrpc": "2.0", "id": request_id, "method": method}
                if params is not None:
                    message["params"] = params
                lines.append(json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n")
        self._write(b"".join(lines))
        answers: list[JsonObject | Exception] = []
        deadline = time.monotonic() + timeout
        for (request_id, waiter), (method, _) in zip(waiters, requests, strict=True):
            if not waiter.event.wait(max(0.0, deadline - time.monotonic())):
                with self._lock:
                    self._waiting.pop(id_key(request_id), None)
                answers.append(TimeoutError(f"no reply to {method} ({request_id}) within {timeout} s"))
                continue
            try:
                answers.append(result_of(waiter.message))
            except (RpcError, ConnectionError) as exc:
                answers.append(exc)
        return answers

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
        with self._lock:
            self._eof = True
            waiters = list(self._waiting.values())
            self._waiting.clear()
        for waiter in waiters:
            waiter.resolve(None)
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
            if is_request_id(request_id):
                self._listens.pop(id_key(request_id), None)  # a listen ends without a response
            ctx = self._in_flight.get(id_key(request_id)) if is_request_id(request_id) else None
        if ctx is not None:
            ctx._cancel()

    def _on_response(self, message: JsonObject) -> None:
        response_id = message["id"]
        with self._lock:
            waiter = self._waiting.pop(id_key(response_id), None) if is_request_id(response_id) else None
        if waiter is None:
            self.log(f"ignoring a response to unknown request id {response_id!r}")
        else:
            waiter.resolve(message)

    # -- requests -----------------------------------------------------------------------------

    def _on_request(self, request_id: RequestId, method: str, params: JsonObject) -> None:
        if method in self.silent_methods:
            return
        try:
            era = self._era_of(method, params)
            if method == "tools/call":
                self._start_tool_call(request_id, era, params)
                return
            if method == "subscriptions/listen" and era == "modern":
                self._listen(request_id, params)
                return
            result = self._answer(era, method, params)
        except RpcError as exc:
            self._send_error(request_id, exc)
            return
        self.send({"jsonrpc": "2.0", "id": request_id, "result": self._decorate(era, result)})

    def _era_of(self, method: str, params: JsonObject) -> Era:
        """Which era serves this request, or the RpcError that refuses it (the era ladder)."""
        if method == "initialize":
            if "legacy" in self.eras:
                return "legacy"
            versions = ", ".join(MODERN_VERSIONS)
            raise RpcError(
                METHOD_NOT_FOUND,
                f"initialize is not supported: this server speaks only {versions}; use server/discover",
                {"supported": list(MODERN_VERSIONS)},
            )
        meta = params.get("_meta")
        marked_modern = isinstance(meta, dict) and PROTOCOL_VERSION_KEY in meta
        if "legacy" not in self.eras or ("modern" in self.eras and (marked_modern or method in MODERN_ONLY_METHODS)):
            check_modern_meta(meta)
            return "modern"
        if method in MODERN_ONLY_METHODS:
            raise RpcError(METHOD_NOT_FOUND, f"method not found: {method}")
        if self._legacy_version is None and method != "ping":
            raise RpcError(INVALID_REQUEST, "not initialized: send initialize first")
        return "legacy"

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
            return {}  # nothing changes here: resources/updated is sent by the notify tool
        if method == "logging/setLevel" and era == "legacy":
            self.log_level = params.get("level")
            return {}
        if method == "server/discover":
            result: JsonObject = {"supportedVersions": list(MODERN_VERSIONS), "capabilities": self.capabilities}
            if self.instructions is not None:
                result["instructions"] = self.instructions
            return result | self._cache_hints()
        if method == "tools/list":
            tools: JsonObject = self._tools_page(params.get("cursor"))
            return tools | self._cache_hints() if era == "modern" else tools
        handler = self.request_handlers.get(method)
        if handler is not None:
            return handler(params)
        raise RpcError(METHOD_NOT_FOUND, f"method not found: {method}")

    def _tools_page(self, cursor: Any) -> JsonObject:
        """One page of tools; the cursor is the index of the page's first tool."""
        described = [tool.describe() for tool in list(self._tools.values())]
        if self.page_size is None:
            return {"tools": described}
        start = int(cursor) if isinstance(cursor, str) and cursor.isdigit() else 0
        page: JsonObject = {"tools": described[start : start + self.page_size]}
        if start + self.page_size < len(described):
            page["nextCursor"] = str(start + self.page_size)
        return page

    def _initialize(self, params: JsonObject) -> JsonObject:
        requested = params.get("protocolVersion")
        if not isinstance(requested, str):
            raise RpcError(INVALID_PARAMS, "initialize: params.protocolVersion must be a string")
        # Echo a supported version, else offer our latest (2025-11-25/basic/lifecycle).
        version = requested if requested in LEGACY_VERSIONS else LATEST_LEGACY
        capabilities = params.get("capabilities")
        with self._lock:
            self._legacy_version = version
            self.client_capabilities = capabilities if isinstance(capabilities, dict) else {}
        result: JsonObject = {
            "protocolVersion": version,
            "capabilities": self.capabilities,
            "serverInfo": self.server_info,
        }
        if self.instructions is not None:
            result["instructions"] = self.instructions
        return result

    def _cache_hints(self) -> JsonObject:
        return {"ttlMs": self.ttl_ms, "cacheScope": self.cache_scope}

    def _decorate(self, era: Era, result: JsonObject) -> JsonObject:
        """Add the fields every modern result carries. Legacy results pass through untouched."""
        if era == "modern":
            result.setdefault("resultType", "complete")
            meta = result.get("_meta")
            result["_meta"] = {**(meta if isinstance(meta, dict) else {}), SERVER_INFO_KEY: self.server_info}
        return result

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
        meta = params.get("_meta")
        ctx = ToolContext(self, request_id, era, meta.get("progressToken") if isinstance(meta, dict) else None)
        ctx.meta = dict(meta) if isinstance(meta, dict) else {}
        ctx.params = dict(params)
        with self._lock:
            if id_key(request_id) in self._in_flight:
                raise RpcError(INVALID_REQUEST, f"request id {request_id!r} is already in flight")
            self._in_flight[id_key(request_id)] = ctx
        thread = threading.Thread(
            target=self._run_tool, args=(tool, ctx, arguments), name=f"tool:{name}:{request_id}", daemon=True
        )
        thread.start()

    def _run_tool(self, tool: Tool, ctx: ToolContext, arguments: JsonObject) -> None:
        try:
            reply: JsonObject = {"jsonrpc": "2.0", "id": ctx.request_id}
            try:
                result = tool.handler(ctx, arguments)
                if not isinstance(result, dict):
                    raise TypeError(f"tool {tool.name} returned {type(result).__name__}, not a dict")
            except RpcError as exc:
                reply["error"] = exc.to_json()
            except ToolInputError as exc:
                result = text_result(f"{tool.name}: {exc}", is_error=True)
            except Exception as exc:
                self.log(f"tool {tool.name} raised {exc!r}")
                result = text_result(f"{tool.name} failed: {type(exc).__name__}: {exc}", is_error=True)
            if "error" not in reply:
                reply["result"] = self._decorate(ctx.era, result)
            ctx._finish(reply)
            for action in ctx._after_reply:
                threading.Thread(target=action, name=f"after:{tool.name}", daemon=True).start()
        finally:
            with self._idle:
                self._in_flight.pop(id_key(ctx.request_id), None)
                self._idle.notify_all()


# -- helpers for tools ------------------------------------------------------------------------
