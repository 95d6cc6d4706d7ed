"""What a pool's children send that no client exchange carries.

``Unsolicited`` is registered with the router (``attach``) for every pool it opens:

- **notifications** (``on_notification``): the emulated listens of that pool take the
  types they were granted (``gateway.relay.listens``); ``list_changed`` goes to the GET
  streams of the legacy sessions that pool serves, and ``resources/updated`` to those of
  them that subscribed to the resource (or a parent of it), also from the roots pool where a
  session's calls and subscriptions run when its roots are keyed (``roots_pool``). Never across principals,
  sessions or credentials: a pool is all of these at once.
- ``notifications/elicitation/complete`` goes to the GET stream of the one legacy session the
  pool's children gave that URL elicitation id to (``LegacySession.url_elicitations``), and
  to nobody when none or several hold it.
- **requests** (``on_request``, a child's unattributable question): a roots pool's
  ``roots/list`` is noted (``SharedSettings.on_child_request``: a fresh child's first call
  waits for it) and answered by the gateway with the pool's roots;
  a sampling, elicitation or roots request goes on the GET stream of the one legacy
  session the child serves, when there is exactly one (the pool is that session's own,
  ``isolation: session``), its GET stream is open and it declared the capability. The
  client's POSTed answer (or, after ``input_timeout``, -31007) is the reply. Otherwise
  None: the gateway answers it locally.
- **losses** (a child of the pool crashed, or the pool closed): the pool's emulated
  listens are dropped (``Listens.on_pool_loss``).
"""

from __future__ import annotations

import logging
from typing import Final

import anyio

from gateway.errors import CODE_INPUT_TIMEOUT
from gateway.protocol import inputs, urlelicitation
from gateway.protocol.jsonrpc import Notification, Reply, Request
from gateway.relay.listens import Listens
from gateway.relay.router import Router
from gateway.relay.sessions import SessionStore
from gateway.relay.shared_settings import SharedSettings
from gateway.stdio.ask import ChildAsk
from gateway.stdio.pool import Pool

log = logging.getLogger("gateway.relay.unsolicited")

LIST_CHANGED: Final = frozenset(
    {
        "notifications/tools/list_changed",
        "notifications/prompts/list_changed",
        "notifications/resources/list_changed",
    }
)
RESOURCE_UPDATED: Final = "notifications/resources/updated"


class Unsolicited:
    def __init__(self, sessions: SessionStore, listens: Listens, settings: SharedSettings) -> None:
        self.sessions = sessions
        self.listens = listens
        self.settings = settings

    def attach(self, router: Router) -> None:
        """Hear the unsolicited messages of every pool ``router`` opens."""
        router.add_listener(self.on_notification)
        router.add_loss_listener(self.listens.on_pool_loss)
        router.add_request_handler(self.on_request)

    def on_notification(self, pool: Pool, notification: Notification) -> None:
        self.listens.offer(pool, notification)  # modern listeners take what they opted into
        if notification.method in LIST_CHANGED:
            self.sessions.broadcast(notification.to_dict(), lambda session: session.pool is pool)
        elif notification.method == RESOURCE_UPDATED and notification.params:
            uri = notification.params.get("uri")
            if isinstance(uri, str):
                self.sessions.broadcast(
                    notification.to_dict(),
                    lambda session: pool in (session.pool, session.roots_pool) and session.is_subscribed(uri),
                )
        elif notification.method == urlelicitation.COMPLETE and notification.params:
            self._completed(pool, notification)
        else:
            log.debug("unsolicited %s from the child not forwarded", notification.method)

    def _completed(self, pool: Pool, notification: Notification) -> None:
        """A URL elicitation completed: to the one legacy session it was given to (a shared
        child's ids are its own, so two sessions holding the same one tell nothing apart)."""
        assert notification.params is not None
        eid = notification.params.get("elicitationId")
        if not isinstance(eid, str):
            return
        sessions = self.sessions.awaiting_completion(pool, eid)
        if len(sessions) != 1:
            log.debug("%s for %d sessions: not forwarded", notification.method, len(sessions))
            return
        [session] = sessions
        session.url_elicitations.remove(eid)
        session.offer(notification.to_dict())

    async def on_request(self, pool: Pool, request: Request) -> Reply | None:
        refreshed = await self.settings.on_child_request(pool, request)
        if refreshed is not None:
            return refreshed
        if request.method not in inputs.INPUT_METHODS or pool.session_id is None:
            return None
        served = self.sessions.serving(pool)
        if len(served) != 1 or served[0].id != pool.session_id:
            return None
        [session] = served
        if not inputs.is_declared(session.capabilities, request.method, request.params):
            return None
        ask = ChildAsk(request)
        gateway_id = session.track_ask(ask)
        if not session.offer(Request(gateway_id, request.method, request.params).to_dict(), live=True):
            session.asks.pop(gateway_id, None)  # no GET stream open (or it is full)
            return None
        timeout = pool.spec.input_timeout
        try:
            with anyio.move_on_after(timeout):
                await ask.wait()
        finally:  # a no-op when answered; else the timeout (or the child's end) answers it
            ask.answer_error(
                CODE_INPUT_TIMEOUT,
                f"the client did not answer {ask.method} within {timeout:g} s",
                timeout_seconds=timeout,
            )
        assert ask.reply is not None
        return ask.reply
