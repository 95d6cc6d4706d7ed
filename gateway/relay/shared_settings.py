"""Per-client settings on a child that several clients share (issue #12 item 9).

A legacy child keeps some settings per *process*, where the protocol meant them per client:
the log level of ``logging/setLevel`` and the roots it fetched with ``roots/list``. Through
a shared child one client's settings would reach every other client. So:

- **Log level.** A legacy session's ``logging/setLevel`` is stored on the session and
  answered ``{}`` by the gateway; it is never forwarded as it is. A legacy child that
  declares ``logging`` is told the *most verbose* level among the live sessions it serves
  and the request about to run (a modern request's ``logLevel``; ``loglevels.most_verbose``),
  before a request whenever that differs from what it was told last (a new session, a
  session's new level, a session gone, a modern request asking for more, a restarted child).
  Each client still gets only what it asked for: messages reach the one exchange they can be
  attributed to, at or above that client's own level (``gateway.stdio.child``). A modern
  child needs none of this: each request carries its client's ``logLevel``.
- **Roots.** A legacy child may fetch roots once and cache them (server-everything does,
  right after ``initialized``, when no request could answer for a client). The gateway notes
  whose roots a child was last given (a session, a modern client's principal, or the
  gateway's own answer; unknown at first). Before a ``tools/call``, ``prompts/get`` or
  ``resources/read`` of a different owner, a child that was told at ``initialize`` that
  roots may change (``roots.listChanged``) is sent ``notifications/roots/list_changed``. For
  a **legacy session**, when the child (or its pool) is known to ask for roots, this happens
  *before* the call (``refresh_roots``): the child's ``roots/list`` (unattributed, as
  nothing of it is in flight, so ``on_child_request`` hands it here) goes to the session on
  the call's stream, and the call is sent only once the child has the answer, so even a
  child that refreshes its cache in the background (server-everything) serves the call with
  this client's roots. One refresh at a time per pool, so that the question is the
  refreshing child's: the pool is claimed without a lock and freed once the question is in
  hand (or ``ROOTS_REFRESH_WAIT`` passed), before it goes to the client; a pool whose
  children let ``DEAF_AFTER`` refreshes in a row pass without asking within
  ``ROOTS_REFRESH_WAIT`` is not waited for again. For a **modern** client (or a child not
  yet known to ask) the notification goes just before the call, and a child that asks during
  the call is answered by the client through MRTR; a child that reads its cache first uses
  the previous client's roots for that call. The modern clients of one principal count as
  one owner. Only ``--isolation session`` isolates roots fully (see docs/bridging.md).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Callable, Iterable
from typing import Final
from weakref import WeakKeyDictionary, WeakSet

import anyio

from gateway.errors import CODE_INPUT_TIMEOUT, ChildError
from gateway.protocol import inputs, loglevels
from gateway.protocol.jsonrpc import JsonObject, Reply, Request, Result
from gateway.protocol.versions import Era
from gateway.relay.client import ClientContext
from gateway.relay.sessions import LegacySession
from gateway.stdio.ask import ChildAsk
from gateway.stdio.child import StdioChild
from gateway.stdio.pool import Pool

log = logging.getLogger("gateway.settings")

ROOTS_LIST_CHANGED: Final = "notifications/roots/list_changed"
SET_LEVEL_TIMEOUT: Final = 10.0
"""Seconds a child has to answer the gateway's ``logging/setLevel``; the request goes on either way."""

RootsOwner = tuple[str, str | None] | None
"""Whose roots a child holds: ("session", id), ("principal", name), or None (the gateway's answer)."""
UNKNOWN: Final = ("unknown", None)
ROOTS_REFRESH_WAIT: Final = 2.0
"""Seconds to wait for a child to ask ``roots/list`` after ``roots/list_changed`` before a
legacy session's call (then the call goes on, and the child may still ask during it)."""
DEAF_AFTER: Final = 3
"""Refreshes in a row a pool's children let pass without asking, after which the pool is not
waited for again: its servers do not re-fetch on ``roots/list_changed`` (a busy machine's one
slow answer must not switch the refresh off for good)."""


def roots_owner(client: ClientContext, method: str) -> RootsOwner:
    """Who answers a ``roots/list`` the child asks during ``client``'s ``method`` request: the
    client when it declared roots and its request can carry the question (a legacy session's
    stream, a modern MRTR method), else the gateway."""
    if not inputs.is_declared(client.capabilities, inputs.ROOTS, None):
        return None
    session_id = client.session_id
    if client.era is Era.LEGACY:
        return ("session", session_id) if session_id is not None and client.accepts_requests else None
    return ("principal", client.principal) if method in inputs.MRTR_METHODS else None


class _Refresh:
    """A refresh in progress: the child's ``roots/list``, once it asks."""

    def __init__(self, child: StdioChild) -> None:
        self.child = child
        self.asked = anyio.Event()
        self.ask: ChildAsk | None = None
        self.freed = anyio.Event()  # the pool is free for the next refresh


class SharedSettings:
    def __init__(self, sessions_on: Callable[[StdioChild], Iterable[LegacySession]]) -> None:
        """``sessions_on(child)``: the live legacy sessions whose requests go to ``child``."""
        self._sessions_on = sessions_on
        self._levels: WeakKeyDictionary[StdioChild, str] = WeakKeyDictionary()
        self._roots: WeakKeyDictionary[StdioChild, RootsOwner] = WeakKeyDictionary()
        self._asking_pools: WeakSet[Pool] = WeakSet()  # their children ask for roots unprompted
        self._asking_children: WeakSet[StdioChild] = WeakSet()  # asked for roots during a request
        self._misses: WeakKeyDictionary[Pool, int] = WeakKeyDictionary()  # pool → refreshes not asked for
        self._refreshing: WeakKeyDictionary[Pool, _Refresh] = WeakKeyDictionary()  # pool → refresh

    def note_asks(self, child: StdioChild, asks: Iterable[ChildAsk], method: str, client: ClientContext) -> None:
        """The child asked these questions during ``client``'s ``method`` request."""
        if any(ask.method == inputs.ROOTS for ask in asks):
            self._roots[child] = roots_owner(client, method)
            self._asking_children.add(child)

    async def on_child_request(self, pool: Pool, request: Request) -> Reply | None:
        """A child's question that no exchange carries: a refresh's ``roots/list`` is answered
        by the refresh's client; None for anything else (it is not ours)."""
        if request.method != inputs.ROOTS:
            return None
        self._asking_pools.add(pool)
        refresh = self._refreshing.get(pool)
        if refresh is None or refresh.ask is not None:
            # Not a refresh's: whoever answers it now (the gateway, or a session's GET stream),
            # it is not the owner noted last (a modern client's call may have ended before its
            # child asked). Which child asked is not known here: none of the pool's is known to
            # hold anyone's roots, so the next call of any client refreshes again.
            for child in pool.children():
                self._roots[child] = UNKNOWN
            return None
        refresh.ask = ask = ChildAsk(request)
        refresh.asked.set()
        return await ask.wait()  # the refresh answers it (the client's answer, or an error)

    def refresh_roots(
        self, child: StdioChild, client: ClientContext, method: str
    ) -> AsyncGenerator[JsonObject, None] | None:
        """Before a legacy session's call: have a child that caches roots fetch this client's
        now, on the call's stream (the iterator yields the question for the client; see the
        module doc). None when there is nothing to refresh, the usual case: then no iterator
        is made."""
        info = child.info
        if info is None or info.era is not Era.LEGACY or method not in inputs.MRTR_METHODS or not self._told(child):
            return None
        wanted = roots_owner(client, method)
        session = client.session
        pool = session.pool if session is not None else None
        if self._roots.get(child, UNKNOWN) == wanted or wanted is None or session is None or pool is None:
            return None
        if pool not in self._asking_pools and child not in self._asking_children:
            return None
        if self._misses.get(pool, 0) >= DEAF_AFTER:
            return None
        return self._refresh_roots(child, session, pool, wanted)

    async def _refresh_roots(
        self, child: StdioChild, session: LegacySession, pool: Pool, wanted: RootsOwner
    ) -> AsyncGenerator[JsonObject, None]:
        # No lock: the pool is claimed synchronously (single-flight), and freed as soon as the
        # child's question is in hand or ROOTS_REFRESH_WAIT has passed, before the question is
        # yielded to the client and its answer awaited. So a consumer that never resumes this
        # generator (or closes it from another task) holds up nobody's refresh.
        refresh = await self._claim(pool, child)
        try:
            with anyio.move_on_after(ROOTS_REFRESH_WAIT):  # the notify too: a stuck stdin is a miss
                try:
                    await child.notify(ROOTS_LIST_CHANGED)
                except ChildError:
                    return
                await refresh.asked.wait()
            ask = refresh.ask
            self._roots[child] = wanted  # if it asks during the call after all, this client answers
            if ask is None:
                self._misses[pool] = misses = self._misses.get(pool, 0) + 1
                if misses >= DEAF_AFTER:
                    log.info("%s: its children do not ask for roots again on roots/list_changed", child.spec.label)
                return
            self._misses[pool] = 0
        finally:
            self._free(pool, refresh)
        try:
            yield Request(session.track_ask(ask), ask.method, ask.params).to_dict()
            with anyio.move_on_after(child.spec.input_timeout):
                await ask.wait()
        finally:
            ask.answer_error(CODE_INPUT_TIMEOUT, "the client did not answer roots/list")  # a no-op when answered
            if not isinstance(ask.reply, Result):
                self._roots[child] = UNKNOWN

    async def _claim(self, pool: Pool, child: StdioChild) -> _Refresh:
        """Make ``child``'s the one refresh in progress on ``pool`` (so that the pool's
        unattributed ``roots/list`` is its child's), after any other has freed it. Decided
        without an await between the check and the claim; a claim is freed within
        ``ROOTS_REFRESH_WAIT`` by whichever task runs the refresh's end."""
        while (current := self._refreshing.get(pool)) is not None:
            await current.freed.wait()
        refresh = self._refreshing[pool] = _Refresh(child)
        return refresh

    def _free(self, pool: Pool, refresh: _Refresh) -> None:
        if self._refreshing.get(pool) is refresh:
            del self._refreshing[pool]
        refresh.freed.set()

    async def prepare(
        self, child: StdioChild, client: ClientContext, method: str, log_level: str | None = None
    ) -> None:
        """Before ``client``'s ``method`` request on ``child`` (which wants logs at ``log_level``):
        make the child's per-process settings fit."""
        info = child.info
        if info is None or info.era is not Era.LEGACY or not child.is_alive():
            return
        if "logging" in info.capabilities:
            await self._apply_log_level(child, log_level)
        if method in inputs.MRTR_METHODS:  # the requests that may ask (a tools/list never does)
            await self._notify_roots_changed(child, roots_owner(client, method))

    async def _apply_log_level(self, child: StdioChild, log_level: str | None) -> None:
        levels = [session.log_level for session in self._sessions_on(child)]
        wanted = loglevels.most_verbose([*levels, log_level])
        if wanted is None or self._levels.get(child) == wanted:
            return
        self._levels[child] = wanted  # first, so that concurrent requests do not all send it
        try:
            reply = await child.request(loglevels.SET_LEVEL, {"level": wanted}, timeout=SET_LEVEL_TIMEOUT)
        except ChildError as exc:
            log.info("child %s: logging/setLevel %s failed: %s", child.spec.label, wanted, exc.message)
            return
        log.debug("child %s: log level %s (the most verbose of its sessions): %r", child.spec.label, wanted, reply)

    def _told(self, child: StdioChild) -> bool:
        """Whether the child was told at ``initialize`` that roots may change."""
        declared = child.declared_capabilities.get("roots")
        return isinstance(declared, dict) and declared.get("listChanged") is True

    async def _notify_roots_changed(self, child: StdioChild, wanted: RootsOwner) -> None:
        if not self._told(child) or self._roots.get(child, UNKNOWN) == wanted:
            return
        self._roots[child] = wanted  # if it asks again, it is during this request, for this owner
        try:
            await child.notify(ROOTS_LIST_CHANGED)
        except ChildError:
            return
