"""A server's modern ``subscriptions/listen`` streams (``gateway.tools.demo.framework``):
what each listen was granted, the notifications routed to them, and their end.

While listens are open, a ``list_changed`` goes to each listen that opted in, tagged with its
``subscriptionId``, instead of out plainly, and so does a ``resources/updated`` to each listen
whose ``resourceSubscriptions`` cover its URI. A listen ends with the graceful result, or with
``notifications/cancelled`` naming it, or when the client cancels it (``drop``).

Imports: standard library and ``rpc`` only.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from gateway.tools.demo.rpc import (
    LISTEN_TYPES,
    RESOURCES_UPDATED,
    SUBSCRIPTION_ID_KEY,
    JsonObject,
    RequestId,
    id_key,
    is_request_id,
)


class Listens:
    """The open listens: id → (listen id, notification methods, resource URIs) granted."""

    def __init__(self, send: Callable[[Any], None]) -> None:
        self._send = send
        self._lock = threading.Lock()
        self._open: dict[tuple[type, Any], tuple[RequestId, frozenset[str], tuple[str, ...]]] = {}

    def open(self, request_id: RequestId, params: JsonObject, capabilities: JsonObject) -> None:
        """Grant what was asked that the server has, and acknowledge it."""
        requested = params.get("notifications")
        requested = requested if isinstance(requested, dict) else {}
        granted: JsonObject = {key: True for key in LISTEN_TYPES if requested.get(key) is True}
        methods = frozenset(LISTEN_TYPES[key] for key in granted)
        wanted = requested.get("resourceSubscriptions")
        resources = capabilities.get("resources")
        uris: tuple[str, ...] = ()
        if isinstance(resources, dict) and resources.get("subscribe") is True and isinstance(wanted, list):
            # "bad:" URIs are refused, as for legacy resources/subscribe: the ack leaves them out.
            uris = tuple(u for u in wanted if isinstance(u, str) and u and not u.startswith("bad:"))
            granted["resourceSubscriptions"] = list(uris)
        with self._lock:
            self._open[id_key(request_id)] = (request_id, methods, uris)
        ack = {"notifications": granted, "_meta": {SUBSCRIPTION_ID_KEY: request_id}}
        self._send({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged", "params": ack})

    def notify(self, method: str, params: JsonObject | None = None) -> None:
        """Send a notification: to the listens that take it while any is open (module doc), else plainly."""
        with self._lock:
            listens = list(self._open.values())
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
                self._send({"jsonrpc": "2.0", "method": method, "params": body})
            return
        message: JsonObject = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self._send(message)

    def end(self, *, cancelled: bool = False) -> int:
        """End every open listen with the graceful result (or, ``cancelled``, with
        ``notifications/cancelled`` naming it); return how many there were."""
        with self._lock:
            listens = list(self._open.values())
            self._open.clear()
        for listen_id, _, _ in listens:
            if cancelled:
                params = {"requestId": listen_id, "reason": "the server ends the subscription"}
                self._send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params})
                continue
            result = {"resultType": "complete", "_meta": {SUBSCRIPTION_ID_KEY: listen_id}}
            self._send({"jsonrpc": "2.0", "id": listen_id, "result": result})
        return len(listens)

    def drop(self, request_id: Any) -> None:
        """The client cancelled ``request_id``: if it is a listen, it ends without a response."""
        if is_request_id(request_id):
            with self._lock:
                self._open.pop(id_key(request_id), None)
