"""A legacy session's ``resources/subscribe`` on a legacy child, counted with every other holder.

A legacy child believes it has one client: one ``resources/unsubscribe`` ends the URI for
everyone its stdio serves. On a shared child, that is many clients. The rules:

1. **One count per (child, URI)** for every holder there: the emulated listens and the roots
   children they follow (``gateway.relay.listens``, ``gateway.relay.listen_roots``) and the
   legacy sessions (here) share ``SubscriptionCounts``. The child gets ``resources/subscribe``
   when the first holder comes and ``resources/unsubscribe`` when the last lets go.
2. **Subscribe** (the ``subscriptions`` step of ``gateway.relay.steps``, on the child the
   session's lease got: its affinity, or its roots pool's child when its roots are keyed): a
   URI the session holds already is answered ``{}`` at once. Otherwise it is counted: when
   nobody holds it at that child, the child is asked, and its refusal (or the gateway's error
   when it died) is the answer, holding nothing; when someone does, ``{}`` without a word to
   the child. The request is seen through once the child has it (shielded, bounded by
   ``SUBSCRIBE_TIMEOUT``), so the count always matches the child.
3. **Unsubscribe**: the session lets go of the URI wherever it holds it; the child is told
   only if it was the last holder. A URI the session does not hold is answered ``{}`` and not
   forwarded: that would drop another holder's.
4. **The session ends** (``DELETE``, expiry, the drain): everything it holds is let go, in
   the service's task group. A subscribe that completes after its session ended is let go at
   once.
5. **Bound**: a session holds at most ``subscriptions.MAX_SESSION_URIS`` URIs (its
   subscribes in flight included); one more is refused with -32602 before any child is asked
   (``gateway.relay.legacy.local_answer`` checks it before the lease, here again with those
   in flight).
6. **Delivery** stays per session: ``LegacySession.subscriptions`` (each URI and the child
   that holds it for the session) filters ``resources/updated`` (``gateway.relay.unsolicited``).
   A child that exited holds nothing any more: its entries are dropped (and their counts
   forgotten) at the session's next subscribe or unsubscribe, so subscribing again works.

Imports the subscription counts' type only (``gateway.relay.listens`` imports this module).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio
from anyio.abc import TaskGroup

from gateway.protocol import subscriptions
from gateway.protocol.jsonrpc import INVALID_PARAMS, JsonObject, Request, error_object
from gateway.relay.sessions import LegacySession
from gateway.relay.translate import response
from gateway.stdio.boundary import contained
from gateway.stdio.child import StdioChild

if TYPE_CHECKING:
    from gateway.relay.listens import SubscriptionCounts

log = logging.getLogger("gateway.relay.session_subscriptions")


@dataclass(eq=False)
class _Holder:
    """One session's subscribes in flight, and whether it has ended."""

    session: LegacySession
    pending: dict[str, anyio.Event] = field(default_factory=dict)  # URI → its subscribe's end
    ended: bool = False


class SessionSubscriptions:
    """The resource subscriptions of the legacy sessions on legacy children (the module doc)."""

    def __init__(self, counts: SubscriptionCounts, task_group: TaskGroup) -> None:
        """``counts``: the listens' (``Listens.counts``); ``task_group``: the service's, where
        an ended session's subscriptions are released."""
        self.counts = counts
        self._holders: dict[str, _Holder] = {}
        self._tg = task_group

    def __len__(self) -> int:
        """How many sessions hold (or are making) subscriptions now."""
        return len(self._holders)

    async def handle(self, session: LegacySession, request: Request, child: StdioChild) -> JsonObject:
        """The answer to the session's ``resources/subscribe`` or ``unsubscribe``, run on ``child``."""
        uri = (request.params or {}).get("uri")
        if not isinstance(uri, str) or not uri:
            return response(request.id, error=error_object(INVALID_PARAMS, f"{request.method} needs params.uri"))
        holder = self._holder(session)
        while (busy := holder.pending.get(uri)) is not None:  # its own subscribe of it, in flight
            await busy.wait()
        self._forget_exited(session)
        if request.method == subscriptions.UNSUBSCRIBE:
            held = session.subscriptions.pop(uri, None)
            if held is not None:
                with anyio.CancelScope(shield=True):  # the count must match the child
                    await self.counts.release(held, uri)
            return response(request.id, result={})
        if uri in session.subscriptions:
            return response(request.id, result={})
        problem = subscriptions.subscribe_problem([*session.subscriptions, *holder.pending], uri)
        if problem is not None:
            return response(request.id, error=error_object(INVALID_PARAMS, problem, {"uri": uri}))
        done = holder.pending[uri] = anyio.Event()
        try:
            with anyio.CancelScope(shield=True):  # bounded by SUBSCRIBE_TIMEOUT
                error = await self.counts.subscribe(child, uri)
                if error is None and holder.ended:  # the session ended meanwhile: nothing holds it
                    await self.counts.release(child, uri)
        finally:
            del holder.pending[uri]
            done.set()
        if error is not None:
            return response(request.id, error=error)
        if not holder.ended:
            session.subscriptions[uri] = child
        return response(request.id, result={})

    def _holder(self, session: LegacySession) -> _Holder:
        holder = self._holders.get(session.id)
        if holder is None:
            holder = self._holders[session.id] = _Holder(session)
            session.on_end.append(lambda: self._end(holder))
        return holder

    def _forget_exited(self, session: LegacySession) -> None:
        for uri, child in list(session.subscriptions.items()):
            if not child.is_alive():
                del session.subscriptions[uri]
                self.counts.forget(child, uri)

    def _end(self, holder: _Holder) -> None:
        """The session ended: let go of everything it holds."""
        holder.ended = True
        self._holders.pop(holder.session.id, None)
        held = list(holder.session.subscriptions.items())
        holder.session.subscriptions.clear()
        if not held:
            return
        try:
            self._tg.start_soon(self._release, holder.session.id, held)
        except RuntimeError:  # the service's task group has closed: its children stop anyway
            for uri, child in held:
                self.counts.forget(child, uri)

    async def _release(self, session_id: str, held: list[tuple[str, StdioChild]]) -> None:
        with contained(log, f"releasing the subscriptions of session {session_id[:8]}…", "they may stay at the child"):
            for uri, child in held:
                await self.counts.release(child, uri)
