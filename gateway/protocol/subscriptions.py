"""``subscriptions/listen`` emulated for a legacy child (digest §1.5, §7.6 B, §7.7).

Pure functions: which of the requested notification types a legacy child can honour, and
the messages of a listen stream (the acknowledgement first, each notification tagged with
the listen's own ``subscriptionId``, the graceful end).

The three ``list_changed`` types are honoured, each when the child's ``initialize``
capabilities advertise ``listChanged`` for it. ``resourceSubscriptions`` is honoured when
the child advertises ``resources.subscribe``: the HTTP edge sends ``resources/subscribe``
per URI (reference-counted across the listeners on that child) and the acknowledgement
lists the URIs the child accepted; ``resources/updated`` for one of them, or for a
sub-resource (a URI under it), goes to the listeners that hold it.

The other way round, a legacy session's ``resources/subscribe`` on a modern child
(``SUBSCRIBE_METHODS``) becomes one child listen per session naming its URIs
(``session_listen_params``); the acknowledgement says which the child took
(``acknowledged_uris``), and the child's tagged ``resources/updated`` reaches the session
without the listen's id (``untagged``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Final

from gateway.protocol.jsonrpc import JsonId, JsonObject

LISTEN: Final = "subscriptions/listen"
ACKNOWLEDGED: Final = "notifications/subscriptions/acknowledged"
RESOURCES_UPDATED: Final = "notifications/resources/updated"
RESOURCE_SUBSCRIPTIONS: Final = "resourceSubscriptions"
SUBSCRIPTION_ID_KEY: Final = "io.modelcontextprotocol/subscriptionId"
SUBSCRIBE: Final = "resources/subscribe"
UNSUBSCRIBE: Final = "resources/unsubscribe"
SUBSCRIBE_METHODS: Final = frozenset({SUBSCRIBE, UNSUBSCRIBE})

LIST_CHANGED_TYPES: Final = {
    "toolsListChanged": ("tools", "notifications/tools/list_changed"),
    "promptsListChanged": ("prompts", "notifications/prompts/list_changed"),
    "resourcesListChanged": ("resources", "notifications/resources/list_changed"),
}
"""listen field → (the child capability that must say ``listChanged``, the notification)."""

MAX_LISTEN_URIS: Final = 256
"""Resource URIs one ``subscriptions/listen`` may name. Each is a ``resources/subscribe`` at a
child (and again at every roots child the listen follows, ``gateway.relay.listen_roots``), and
every ``resources/updated`` is matched against them; a listen naming more is refused (400
-32602) before any child is asked."""


MAX_SESSION_URIS: Final = MAX_LISTEN_URIS
"""Resource URIs one legacy session may hold at once (``resources/subscribe``), bounded like a
listen's and for the same reasons: each is a count at a child (``gateway.relay.session_subscriptions``)
and every ``resources/updated`` is matched against them. A subscribe to one more URI is refused
(-32602) before any child is asked; one the session holds already is no more."""


def subscribe_problem(held: Collection[str], uri: str) -> str | None:
    """Why a session holding ``held`` may not subscribe to ``uri`` too (None: it may)."""
    if uri in held or len(held) < MAX_SESSION_URIS:
        return None
    return f"this session holds {len(held)} resource subscriptions; at most {MAX_SESSION_URIS} per session"


def listen_problem(params: Mapping[str, Any] | None) -> str | None:
    """Why a ``subscriptions/listen`` is refused before any work (None: it may go on)."""
    requested = (params or {}).get("notifications")
    if not isinstance(requested, dict):
        return "subscriptions/listen needs params.notifications"
    uris = requested.get(RESOURCE_SUBSCRIPTIONS)
    if isinstance(uris, list) and len(uris) > MAX_LISTEN_URIS:
        return f"subscriptions/listen names {len(uris)} resource URIs; at most {MAX_LISTEN_URIS} per listen"
    return None


def honoured(requested: Mapping[str, Any], capabilities: Mapping[str, Any]) -> JsonObject:
    """The subset of ``requested`` a legacy child with ``capabilities`` can deliver."""
    subset: JsonObject = {}
    for key, (capability, _) in LIST_CHANGED_TYPES.items():
        advertised = capabilities.get(capability)
        if requested.get(key) is True and isinstance(advertised, dict) and advertised.get("listChanged") is True:
            subset[key] = True
    return subset


def requested_uris(requested: Mapping[str, Any], capabilities: Mapping[str, Any]) -> list[str]:
    """The resource URIs to subscribe to at the child: none unless it advertises ``resources.subscribe``."""
    resources = capabilities.get("resources")
    uris = requested.get(RESOURCE_SUBSCRIPTIONS)
    if not isinstance(resources, dict) or resources.get("subscribe") is not True or not isinstance(uris, list):
        return []
    return list(dict.fromkeys(uri for uri in uris if isinstance(uri, str) and uri))


def covers(uris: list[str], uri: Any) -> bool:
    """True if ``uri`` is one of ``uris`` or a sub-resource of one (§1.5: updated.uri may be)."""
    if not isinstance(uri, str):
        return False
    return any(uri == base or uri.startswith(base if base.endswith("/") else base + "/") for base in uris)


def wanted_methods(subset: Mapping[str, Any]) -> frozenset[str]:
    """The child notifications a listener that was granted ``subset`` receives."""
    return frozenset(method for key, (_, method) in LIST_CHANGED_TYPES.items() if subset.get(key) is True)


def acknowledged(listen_id: JsonId, subset: JsonObject) -> JsonObject:
    return {
        "jsonrpc": "2.0",
        "method": ACKNOWLEDGED,
        "params": {"notifications": subset, "_meta": {SUBSCRIPTION_ID_KEY: listen_id}},
    }


def tagged(method: str, params: JsonObject | None, listen_id: JsonId) -> JsonObject:
    """A child's notification as one listener gets it: its ``_meta`` names that listen."""
    body = dict(params or {})
    meta = body.get("_meta")
    body["_meta"] = {**(meta if isinstance(meta, dict) else {}), SUBSCRIPTION_ID_KEY: listen_id}
    return {"jsonrpc": "2.0", "method": method, "params": body}


def graceful_end(listen_id: JsonId) -> JsonObject:
    """The result that ends a listen on purpose (§Graceful Closure): the client need not reconnect."""
    return {
        "jsonrpc": "2.0",
        "id": listen_id,
        "result": {"resultType": "complete", "_meta": {SUBSCRIPTION_ID_KEY: listen_id}},
    }


def retag(message: JsonObject, listen_id: JsonId) -> JsonObject:
    """A forwarded listen's notification with the child's ``subscriptionId`` (the child-side
    id) replaced by the client's listen id; untagged messages pass unchanged."""
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    if not isinstance(params, dict) or not isinstance(meta, dict) or SUBSCRIPTION_ID_KEY not in meta:
        return message
    return {**message, "params": {**params, "_meta": {**meta, SUBSCRIPTION_ID_KEY: listen_id}}}


def retag_result(result: JsonObject, listen_id: JsonId) -> JsonObject:
    """A forwarded listen's graceful result, naming the client's listen id."""
    meta = result.get("_meta")
    if not isinstance(meta, dict) or SUBSCRIPTION_ID_KEY not in meta:
        return result
    return {**result, "_meta": {**meta, SUBSCRIPTION_ID_KEY: listen_id}}


def session_listen_params(uris: list[str]) -> JsonObject:
    """A modern child's listen for a legacy session's resource subscriptions (``_meta`` is added
    by ``bridge.add_modern_meta``, from the session)."""
    return {"notifications": {RESOURCE_SUBSCRIPTIONS: list(uris)}}


def acknowledged_uris(params: JsonObject | None) -> list[str]:
    """The resource URIs a child's ``notifications/subscriptions/acknowledged`` honoured."""
    notifications = (params or {}).get("notifications")
    uris = notifications.get(RESOURCE_SUBSCRIPTIONS) if isinstance(notifications, dict) else None
    return [uri for uri in uris if isinstance(uri, str)] if isinstance(uris, list) else []


def untagged(method: str, params: JsonObject | None) -> JsonObject:
    """A listen's notification as a legacy session gets it: no ``subscriptionId`` (it never
    opened a listen), other ``_meta`` kept."""
    body = dict(params or {})
    meta = body.pop("_meta", None)
    if isinstance(meta, dict):
        kept = {k: v for k, v in meta.items() if k != SUBSCRIPTION_ID_KEY}
        if kept:
            body["_meta"] = kept
    return {"jsonrpc": "2.0", "method": method, "params": body}
