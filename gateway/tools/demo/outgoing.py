"""A server's requests to its client (``gateway.tools.demo.framework``): ids ``s-1``, ``s-2``,
…, each with the ``Waiter`` its response resolves; at stdin's end every one still waiting is
resolved with nothing (its caller gets ``ConnectionError``) and no new one may start.

Imports: standard library, ``context`` and ``rpc`` only.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from gateway.tools.demo.context import Waiter
from gateway.tools.demo.rpc import JsonObject, RpcError, id_key, is_request_id, result_of


class Outgoing:
    """The server→client requests in flight; ``send`` writes one message, ``write`` raw bytes."""

    def __init__(self, send: Callable[[Any], None], write: Callable[[bytes], None]) -> None:
        self._send = send
        self._write = write
        self._lock = threading.Lock()
        self._waiting: dict[tuple[type, Any], Waiter] = {}
        self._ids = itertools.count(1)
        self._closed = False

    def request(
        self, method: str, params: JsonObject | None, timeout: float, *, cancel_on_timeout: bool = False
    ) -> JsonObject:
        """Send one request and wait for its result (``ToolContext.send_request``); with
        ``cancel_on_timeout``, a request left unanswered is withdrawn (``notifications/cancelled``
        naming it), as the TypeScript SDK's servers do."""
        waiter = Waiter()
        with self._lock:
            if self._closed:
                raise ConnectionError("stdin is closed: the client can no longer reply")
            request_id = f"s-{next(self._ids)}"
            self._waiting[id_key(request_id)] = waiter
        message: JsonObject = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        self._send(message)
        if not waiter.event.wait(timeout):
            with self._lock:
                self._waiting.pop(id_key(request_id), None)
            if cancel_on_timeout:
                reason = f"no reply within {timeout} s"
                self._send(
                    {
                        "jsonrpc": "2.0",
                        "method": "notifications/cancelled",
                        "params": {"requestId": request_id, "reason": reason},
                    }
                )
            raise TimeoutError(f"no reply to {method} ({request_id}) within {timeout} s")
        return result_of(waiter.message)

    def requests(
        self, requests: list[tuple[str, JsonObject | None]], timeout: float, lead: Sequence[JsonObject] = ()
    ) -> list[JsonObject | Exception]:
        """Several requests written as one chunk; wait for every answer (an exception in its
        place for one that failed). ``lead``: messages written first in the same chunk (a reply
        the requests follow at once)."""
        waiters: list[tuple[str, Waiter]] = []
        lines = [
            json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n" for message in lead
        ]
        with self._lock:
            if self._closed:
                raise ConnectionError("stdin is closed: the client can no longer reply")
            for method, params in requests:
                request_id = f"s-{next(self._ids)}"
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

    def resolve(self, message: JsonObject) -> bool:
        """A response from the client: hand it to its waiter; False when none waits for its id."""
        response_id = message["id"]
        with self._lock:
            waiter = self._waiting.pop(id_key(response_id), None) if is_request_id(response_id) else None
        if waiter is None:
            return False
        waiter.resolve(message)
        return True

    def close(self) -> None:
        """Stdin ended: every waiter gets nothing, and no request may start."""
        with self._lock:
            self._closed = True
            waiters = list(self._waiting.values())
            self._waiting.clear()
        for waiter in waiters:
            waiter.resolve(None)
