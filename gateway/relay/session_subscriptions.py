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
7. **Carry-over**: a child's subscriptions die with it (a crash, or a planned retirement),
   and a legacy client has no signal to subscribe again (an emulated listen's stream ends
   instead). So each child that holds session subscriptions has one watcher, in the
   service's task group and inside a failure boundary. When the child exits, the watcher
   forgets its counts and, per session, leases a child of the same pool the way the
   session's requests would (its affinity, its client key) and subscribes its URIs there
   through the counts: several sessions holding a URI make one subscribe at the new child.
   Bounded: one lease per session; when the pool is closed or failing, or the new child
   refuses, the URIs are dropped with one log line, so a later subscribe works. A URI the
   session subscribes or unsubscribes meanwhile waits for the move (as for its own subscribe
   in flight); a session that ends meanwhile lets go of what was re-made. Each carried-over
   set is logged (``subscriptions_moved``; ``subscriptions_dropped`` when given up).

Imports the subscription counts' type only (``gateway.relay.listens`` imports this module).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio
from anyio.abc import TaskGroup

from gateway.errors import GatewayError
from gateway.protocol import subscriptions
from gateway.protocol.jsonrpc import INVALID_PARAMS, JsonObject, Request, error_object
from gateway.relay.router import ANONYMOUS
from gateway.relay.sessions import LegacySession
from gateway.relay.translate import response
from gateway.stdio.boundary import contained
from gateway.stdio.child import StdioChild
from gateway.stdio.pool import Pool

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
        self._watched: set[StdioChild] = set()  # children whose exit a watcher waits for (rule 7)

    def __len__(self) -> int:
        """How many sessions hold (or are making) subscriptions now."""
        return len(self._holders)

    async def handle(self, session: LegacySession, request: Request, child: StdioChild, pool: Pool) -> JsonObject:
        """The answer to the session's ``resources/subscribe`` or ``unsubscribe``, run on
        ``child`` of ``pool`` (where its subscriptions move should the child exit)."""
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
            error = await self._hold(holder, child, pool, uri)
        finally:
            del holder.pending[uri]
            done.set()
        if error is not None:
            return response(request.id, error=error)
        return response(request.id, result={})

    async def _hold(self, holder: _Holder, child: StdioChild, pool: Pool, uri: str) -> JsonObject | None:
        """Subscribe ``uri`` at ``child`` of ``pool`` for the holder's session, through the
        counts (shielded: the count must match the child; bounded by ``SUBSCRIBE_TIMEOUT``), and
        note where it is held, unless the session ended meanwhile (then it is let go at once).
        None when subscribed, or nothing holds it any more; else the error that says why not."""
        with anyio.CancelScope(shield=True):
            error = await self.counts.subscribe(child, uri)
            if error is None and holder.ended:
                await self.counts.release(child, uri)
        if error is None and not holder.ended:
            holder.session.subscriptions[uri] = child
            self._watch(child, pool)
        return error

    def _holder(self, session: LegacySession) -> _Holder:
        holder = self._holders.get(session.id)
        if holder is None:
            holder = self._holders[session.id] = _Holder(session)
            session.on_end.append(lambda: self._end(holder))
        return holder

    def _forget_exited(self, session: LegacySession) -> None:
        """Drop what an exited child held that no watcher moves (its task group had closed)."""
        for uri, child in list(session.subscriptions.items()):
            if not child.is_alive() and child not in self._watched:
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

    # -- carry-over (rule 7) ------------------------------------------------------------

    def _watch(self, child: StdioChild, pool: Pool) -> None:
        """One watcher per child that holds session subscriptions."""
        if child in self._watched:
            return
        try:
            self._tg.start_soon(self._carry_over, child, pool)
        except RuntimeError:  # the service's task group has closed: its children stop anyway
            return
        self._watched.add(child)

    async def _carry_over(self, child: StdioChild, pool: Pool) -> None:
        try:
            with contained(log, f"watching child pid {child.pid} for its subscriptions", "they may be lost"):
                await child.wait_exited()
                taken = self._take_from(child)
                if taken:
                    async with anyio.create_task_group() as tg:  # one session's lease waits for nobody else's
                        for holder, uris in taken:
                            tg.start_soon(self._move, holder, uris, pool, child.pid)
        finally:
            self._watched.discard(child)

    def _take_from(self, child: StdioChild) -> list[tuple[_Holder, list[str]]]:
        """What every session holds at ``child`` (exited), no longer held there."""
        self._watched.discard(child)  # a subscribe there from now on starts a watcher again
        taken = []
        for holder in list(self._holders.values()):
            uris = [uri for uri, at in holder.session.subscriptions.items() if at is child]
            for uri in uris:
                del holder.session.subscriptions[uri]
                self.counts.forget(child, uri)
            if uris:
                taken.append((holder, uris))
        return taken

    async def _move(self, holder: _Holder, uris: list[str], pool: Pool, old_pid: int | None) -> None:
        """Subscribe ``uris`` again for the holder's session on a child of ``pool``."""
        session = holder.session
        # A URI the session subscribed again meanwhile (or is subscribing) is its own doing.
        uris = [uri for uri in uris if uri not in session.subscriptions and uri not in holder.pending]
        if holder.ended or not uris:
            return
        fields: dict[str, object] = {
            "server": pool.server,
            "pool": pool.label,
            "session": session.id[:8],
            "old_pid": old_pid,
        }
        done = anyio.Event()
        for uri in uris:
            holder.pending[uri] = done
        moved: list[str] = []
        new: StdioChild | None = None
        try:
            with contained(log, f"moving the subscriptions of session {session.id[:8]}…", "they are dropped"):
                prefer = session.child if session.child is not None and session.child.is_alive() else None
                charged = session.owner or session.principal or ANONYMOUS
                try:
                    async with pool.lease(prefer, charged, subscriptions.SUBSCRIBE) as new:
                        for uri in uris:
                            if holder.ended:  # it ended while the lease waited: nothing to make
                                break
                            if await self._hold(holder, new, pool, uri) is None and not holder.ended:
                                moved.append(uri)
                except GatewayError as exc:  # the pool is closed or failing: no retry
                    new = None
                    self._dropped(fields, len(uris), exc.message)
                    return
        finally:
            for uri in uris:
                if holder.pending.get(uri) is done:
                    del holder.pending[uri]
            done.set()
        if new is None:
            return
        if moved:  # (_hold watches the new child)
            log.info(
                "%s: moved %d resource subscription(s) of session %s… from exited child pid %s to pid %s",
                pool.label,
                len(moved),
                session.id[:8],
                old_pid,
                new.pid,
                extra={**fields, "event": "subscriptions_moved", "new_pid": new.pid, "count": len(moved)},
            )
        lost = len(uris) - len(moved)
        if lost and not holder.ended:
            self._dropped(fields, lost, f"child pid {new.pid} refused or died")

    def _dropped(self, fields: dict[str, object], count: int, why: str) -> None:
        log.warning(
            "%s: dropped %d resource subscription(s) of session %s… of exited child pid %s: %s",
            fields["pool"],
            count,
            fields["session"],
            fields["old_pid"],
            why,
            extra={**fields, "event": "subscriptions_dropped", "count": count, "error": why},
        )
