"""What a demo tool handler sees: ``Tool`` (a registration) and ``ToolContext`` (progress,
notifications, questions to the client, cancellation while one ``tools/call`` runs), plus
the ``Waiter`` of one server→client request. ``framework.py`` re-exports them.

Imports: standard library and ``rpc`` only.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

from gateway.tools.demo.rpc import SEND_REQUEST_TIMEOUT, Era, JsonObject, RequestId

if TYPE_CHECKING:
    from gateway.tools.demo.framework import StdioServer

ToolHandler = Callable[["ToolContext", JsonObject], JsonObject]


@dataclass(frozen=True)
class Tool:
    """A registered tool. ``input_schema`` is a JSON Schema object with ``type: object`` at its root."""

    name: str
    description: str
    input_schema: JsonObject
    handler: ToolHandler
    execution: JsonObject | None = None  # e.g. {"taskSupport": "optional"} (2025-11-25)

    def describe(self) -> JsonObject:
        described: JsonObject = {"name": self.name, "description": self.description, "inputSchema": self.input_schema}
        if self.execution is not None:
            described["execution"] = self.execution
        return described


class ToolContext:
    """What a tool handler can do to the client while one ``tools/call`` runs."""

    def __init__(self, server: StdioServer, request_id: RequestId, era: Era, progress_token: Any) -> None:
        self.request_id: RequestId = request_id
        self.era: Era = era
        self.cancelled = threading.Event()
        self.meta: JsonObject = {}  # the request's _meta, as the server received it
        self.params: JsonObject = {}  # the request's params (a modern MRTR retry's inputResponses, requestState)
        self._server = server
        self._progress_token = progress_token
        # Orders cancellation against this request's own writes, so that nothing for the
        # request follows a processed cancellation (digest §1.6).
        self._lock = threading.Lock()
        self._done = False
        self._reply_suppressed = False
        self._ignores_cancellation = False
        self._after_reply: list[Callable[[], None]] = []

    def progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        """Send ``notifications/progress`` if the request gave a progressToken; else do nothing."""
        if self._progress_token is None:
            return
        params: JsonObject = {"progressToken": self._progress_token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        with self._lock:
            if not (self._done or self.cancelled.is_set()):
                self._server.send({"jsonrpc": "2.0", "method": "notifications/progress", "params": params})

    def notify(self, method: str, params: JsonObject | None = None) -> None:
        """Send an unsolicited notification. Not tied to this request, so sent even after a cancel."""
        self._server.notify(method, params)

    def after_reply(self, action: Callable[[], None]) -> None:
        """Run ``action`` on a new thread once this call's reply is written (or dropped): the
        client then has no request of this call in flight, as with a server asking unprompted."""
        self._after_reply.append(action)

    def send_request(
        self,
        method: str,
        params: JsonObject | None = None,
        timeout: float = SEND_REQUEST_TIMEOUT,
        *,
        cancel_on_timeout: bool = False,
    ) -> JsonObject:
        """Ask the client something and return its result. Raises RpcError, TimeoutError,
        ConnectionError. ``cancel_on_timeout``: withdraw it when no answer comes in time."""
        return self._server.send_request(method, params, timeout, cancel_on_timeout=cancel_on_timeout)

    def send_requests(
        self, requests: list[tuple[str, JsonObject | None]], timeout: float = SEND_REQUEST_TIMEOUT
    ) -> list[JsonObject | Exception]:
        """Ask the client several things in one write (so they are read together); each answer is
        a result or the exception ``send_request`` would have raised."""
        return self._server.send_requests(requests, timeout)

    def write_raw(self, message: Any) -> None:
        """Write any JSON value as one line, as is. For tests of how malformed output is handled."""
        self._server.send(message)

    def write_line(self, text: str) -> None:
        """Write a raw (possibly non-JSON) line to stdout under the write lock."""
        self._server.write_line(text)

    def suppress_reply(self) -> None:
        """Send no reply for this request (the tool wrote its own, or none is wanted)."""
        self._reply_suppressed = True

    def ignore_cancellation(self) -> None:
        """Reply even if cancelled: simulates a server that answers too late."""
        self._ignores_cancellation = True

    @contextlib.contextmanager
    def holding_stdout(self) -> Iterator[None]:
        """Hold the stdout lock, so no other thread is mid-line (e.g. around a signal to self)."""
        with self._server.stdout_lock:
            yield

    def exit_process(self, code: int, stderr_text: str | None = None) -> NoReturn:
        """Write ``stderr_text``, then exit at once with ``code``. Never cuts another thread's line."""
        if stderr_text:
            sys.stderr.write(stderr_text if stderr_text.endswith("\n") else stderr_text + "\n")
        sys.stderr.flush()
        with self._server.stdout_lock:
            os._exit(code)

    def _cancel(self) -> None:
        with self._lock:
            if not self._done:
                self.cancelled.set()

    def _finish(self, reply: JsonObject) -> None:
        with self._lock:
            self._done = True
            dropped = self.cancelled.is_set() and not self._ignores_cancellation
            if not (self._reply_suppressed or dropped):
                self._server.send(reply)


class Waiter:
    """One server→client request waiting for its response. A ``None`` message means stdin closed."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.message: JsonObject | None = None

    def resolve(self, message: JsonObject | None) -> None:
        self.message = message
        self.event.set()
