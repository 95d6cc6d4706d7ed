"""The gateway's own part of a legacy session, outside the child exchanges.

- ``open_session``: at ``initialize``, a session is created with the negotiated version, the
  client's capabilities and ``clientInfo``, and bound to the pool and the child that will
  serve it (``LegacySession.pool``, ``.child``); that child's handshake answers the client
  (``bridge.initialize_result``).
- ``local_answer``: the requests the gateway answers itself: ``ping``; ``logging/setLevel``
  is stored on the session (a legacy child is also told, by the relay; a modern child gets
  it as ``logLevel`` on each request); ``initialize`` again is refused; and
  ``resources/subscribe`` / ``unsubscribe`` when a modern child serves the session
  (``gateway.relay.session_listen``: one child listen per session), and a subscribe past
  ``subscriptions.MAX_SESSION_URIS`` (-32602); on a legacy child the relay's ``subscriptions``
  step answers them (``gateway.relay.session_subscriptions``).

What a session's client POSTs without an id (notifications, its answers to a child's
questions) is taken by ``LegacySession.take``.
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.errors import GatewayError
from gateway.protocol import bridge, loglevels, subscriptions, versions
from gateway.protocol.jsonrpc import INVALID_PARAMS, JsonObject, Request, error_object
from gateway.protocol.versions import Era
from gateway.relay.exchange import response
from gateway.relay.router import ANONYMOUS, Router
from gateway.relay.session_listen import SessionListens, is_served_by_modern_child
from gateway.relay.sessions import LegacySession, SessionStore


async def open_session(
    sessions: SessionStore,
    router: Router,
    request: Request,
    principal: str | None,
    headers: Mapping[str, str],
    owner: str | None = None,
) -> tuple[LegacySession, JsonObject]:
    """A new session for ``request`` (``initialize``) and the result that answers it.

    ``GatewayError``: the session limits (429 / 503; the per-client one counted for ``owner``,
    the client key of ``gateway.http.limits``, else for the principal), checked before any child is leased or
    started; or no child can be had, and the session is ended again."""
    params = request.params or {}
    requested = params.get("protocolVersion")
    capabilities = params.get("capabilities")
    client_info = params.get("clientInfo")
    session = sessions.create(
        versions.negotiate_legacy(requested if isinstance(requested, str) else ""),
        capabilities if isinstance(capabilities, dict) else {},
        client_info if isinstance(client_info, dict) else None,
        principal,
        owner,
    )
    try:
        pool = await router.pool_for(principal, session.id, headers, era=Era.LEGACY, capabilities=session.capabilities)
        async with pool.lease(principal=session.owner or principal or ANONYMOUS) as child:
            session.child, session.pool = child, pool
            assert child.info is not None
            return session, bridge.initialize_result(session.version, child.info)
    except GatewayError:
        sessions.end(session.id)
        raise


async def local_answer(session: LegacySession, message: Request, listens: SessionListens) -> JsonObject | None:
    """The gateway's answer to ``message``, or None when it goes to the child (``listens``: the
    session subscriptions served by child listens on a modern child)."""
    if message.method in subscriptions.SUBSCRIBE_METHODS and is_served_by_modern_child(session):
        return await listens.handle(session, message)
    if message.method == subscriptions.SUBSCRIBE:  # bounded before any lease or roots round
        uri = (message.params or {}).get("uri")
        problem = subscriptions.subscribe_problem(session.subscriptions, uri) if isinstance(uri, str) else None
        if problem is not None:
            return response(message.id, error=error_object(INVALID_PARAMS, problem, {"uri": uri}))
        return None
    if message.method == "ping":
        return response(message.id, result={})
    if message.method == loglevels.SET_LEVEL:
        level = (message.params or {}).get("level")
        if not loglevels.is_level(level):
            return response(
                message.id, error=error_object(INVALID_PARAMS, f"unknown log level {level!r}", {"level": level})
            )
        # The session's minimum for notifications/message; a legacy child is also told
        # (the relay forwards it; a modern child gets it as logLevel on each request).
        session.log_level = level
        return None
    if message.method == "initialize":
        return response(message.id, error=error_object(-32600, "this session is already initialized; start a new one"))
    return None
