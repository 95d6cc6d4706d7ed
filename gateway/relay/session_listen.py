"""A legacy session's ``resources/subscribe`` when a modern child serves it (digest §7.6 D).

A 2026-07-28 child has no ``resources/subscribe``: it sends ``resources/updated`` only on a
``subscriptions/listen`` whose ``resourceSubscriptions`` name the URI. So the subscriptions of
one legacy session on a modern (or dual, spoken to as modern) child are **one child listen
per session** (``SessionListen``) naming exactly that session's URIs:

- ``resources/subscribe`` / ``unsubscribe`` change the set: a listen with the new set is
  opened, and once the child has acknowledged it the previous one is closed (the child gets
  ``notifications/cancelled`` with its id), so no update falls between the two; an empty set
  just closes it. The session's request is answered ``{}`` after the acknowledgement; a URI
  the child left out of it gets -32602. A child without ``resources.subscribe`` gets -32601.
- The listen's ``resources/updated`` goes to **this session's** GET stream only (no other
  session shares the listen), without the listen's ``subscriptionId``.
- The listen takes no pool lease: it lasts as long as the subscriptions, and a lease would
  take a ``--max-in-flight`` slot from the session's own requests, which prefer its child.
- The child exits (crash, recycling) or ends the listen: it is opened again, on a live child
  of the session's pool, after ``REOPEN_DELAY`` (doubling while attempts fail), at most
  ``MAX_REOPENS`` times (a fresh subscribe resets the count). Updates sent while no listen
  was open are lost, as they are for a legacy child that restarts.
- The session ends (``DELETE``, expiry): the listen is closed.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Final

import anyio
from anyio.abc import TaskGroup, TaskStatus

from gateway.errors import ChildError, GatewayError
from gateway.protocol import bridge, subscriptions
from gateway.protocol.jsonrpc import INVALID_PARAMS, METHOD_NOT_FOUND, JsonObject, Notification, Request, error_object
from gateway.protocol.versions import Era
from gateway.relay.exchange import response
from gateway.relay.sessions import LegacySession
from gateway.stdio.boundary import keep_running
from gateway.stdio.child import StdioChild

log = logging.getLogger("gateway.relay.session_listen")

ACK_TIMEOUT: Final = 30.0
"""Seconds a child has to acknowledge a session's listen; then the subscribe gets an error."""
MAX_REOPENS: Final = 10
"""Times a lost listen is opened again (since the session last changed its subscriptions)
before they are given up: a child that keeps ending it must not be hammered forever."""
REOPEN_DELAY: Final = 1.0
"""Seconds before the first attempt to open a lost listen again, doubled after each failed
attempt: a crashed child's pool restarts it after a backoff of its own."""
REOPEN_DELAY_MAX: Final = 30.0


def is_served_by_modern_child(session: LegacySession) -> bool:
    info = session.child.info if session.child is not None else None
    return info is not None and info.era is Era.MODERN


@dataclass(eq=False)
class _Flight:
    """The one change of a session's listen in progress, and its outcome for those waiting."""

    generation: int
    done: anyio.Event = field(default_factory=anyio.Event)
    error: JsonObject | None = None
    interrupted: bool = False  # its caller was cancelled: the change may not be made


class _Open:
    """One child listen: its scope, and what the acknowledgement (or the failure) said."""

    def __init__(self, child: StdioChild) -> None:
        self.child = child
        self.scope = anyio.CancelScope()
        self.acknowledged = False  # the child acknowledged the listen (``SessionListen._run``)
        self.uris: list[str] = []
        self.error: JsonObject | None = None
        self.on_purpose = False  # closed by the gateway: nothing to re-open
        self.ended = False  # the child exchange is over

    def close(self) -> None:
        self.on_purpose = True
        self.scope.cancel()


class SessionListen:
    def __init__(self, session: LegacySession, task_group: TaskGroup) -> None:
        self.session = session
        self.uris: list[str] = []  # what the session subscribed to (and the child took)
        self._tg = task_group
        self._wanted: list[str] = []  # what the session asked for last (the child is told in _settle)
        self._generation = 0  # bumped at each change of the wanted set (and each re-open)
        self._applied = 0  # the generation the last change made
        self._flight: _Flight | None = None  # the change being made now
        self._current: _Open | None = None
        self._latest: _Open | None = None  # the last acknowledged listen: the one that delivers
        self._reopens = 0
        self._ended = False
        session.on_end.append(self.end)

    async def handle(self, request: Request) -> JsonObject:
        """The answer to the session's ``resources/subscribe`` or ``unsubscribe``."""
        uri = (request.params or {}).get("uri")
        if not isinstance(uri, str) or not uri:
            return response(request.id, error=error_object(INVALID_PARAMS, f"{request.method} needs params.uri"))
        # Decided at once (no await): the set the session wants now; the child is told after.
        wanted = [u for u in self._wanted if u != uri]
        problem = subscriptions.subscribe_problem(self._wanted, uri)
        if request.method == subscriptions.SUBSCRIBE and problem is not None:
            return response(request.id, error=error_object(INVALID_PARAMS, problem, {"uri": uri}))
        if request.method == subscriptions.SUBSCRIBE:
            wanted.append(uri)
        if wanted != self._wanted:
            self._wanted, self._generation, self._reopens = wanted, self._generation + 1, 0
        settled = self._flight is None and self._applied == self._generation
        if settled and wanted == self.uris and (self._current is not None or not wanted):
            return response(request.id, result={})
        if settled:  # the same set again, but its listen is lost: open it again
            self._generation += 1
        error = await self._settle(self._generation)
        if error is not None:
            return response(request.id, error=error)
        if request.method == subscriptions.SUBSCRIBE and uri not in self.uris:
            message = f"the server did not accept a subscription to {uri!r}"
            return response(request.id, error=error_object(INVALID_PARAMS, message, {"uri": uri}))
        return response(request.id, result={})

    async def _settle(self, target: int) -> JsonObject | None:
        """Until a change that covers generation ``target`` of the wanted set has been made;
        its error, if any. Single-flight: one change at a time, made by one of the callers
        outside any lock; the others wait for its outcome (a later set is made after it), so
        concurrent subscribes coalesce and nothing waits on a lock held across the child's
        acknowledgement."""
        while True:
            flight = self._flight
            if flight is not None:
                await flight.done.wait()
                if flight.generation >= target and not flight.interrupted:
                    return flight.error
                continue
            if self._applied >= target:
                return None
            flight = self._flight = _Flight(self._generation)
            try:
                flight.error = await self._change(list(self._wanted))
                self._applied = max(self._applied, flight.generation)
                if flight.generation == self._generation:  # what the child took (a refused URI is dropped)
                    self._wanted = list(self.uris)
            except BaseException:
                flight.interrupted = True  # a waiter makes the change instead
                raise
            finally:
                self._flight = None
                flight.done.set()
            if flight.generation >= target:
                return flight.error

    def end(self) -> None:
        self._ended = True
        if self._current is not None:
            self._current.close()
            self._current = None

    async def _change(self, wanted: list[str]) -> JsonObject | None:
        """Open a listen for ``wanted``, then close the old one (called by the one flight in ``_settle``)."""
        old = self._current
        if not wanted:
            self.uris, self._current = [], None
            if old is not None:
                old.close()
            return None
        try:
            child = await self._child()
        except GatewayError as exc:
            return exc.error_object()
        info = child.info
        assert info is not None
        resources = info.capabilities.get("resources")
        if not isinstance(resources, dict) or resources.get("subscribe") is not True:
            return error_object(METHOD_NOT_FOUND, "this server does not support resource subscriptions")
        opened = _Open(child)
        with anyio.move_on_after(ACK_TIMEOUT) as waiting:
            # Returns at the acknowledgement, or once the listen failed; the listen runs on in
            # the session listens' task group. A wait cut short cancels it (TaskGroup.start).
            await self._tg.start(self._run, opened, wanted)
        if waiting.cancelled_caught:
            return error_object(-32603, f"the server did not acknowledge the subscription within {ACK_TIMEOUT:g} s")
        if opened.error is not None:
            opened.close()
            return opened.error
        if old is not None:
            old.close()
        if self._ended:  # the session ended while the child was answering
            opened.close()
            return None
        self._current, self.uris = opened, [u for u in wanted if u in opened.uris]
        if opened.ended:  # lost already (the child died just after acknowledging): open it again
            self._lost(opened)
        return None

    async def _child(self) -> StdioChild:
        child, pool = self.session.child, self.session.pool
        if child is not None and child.is_alive():
            return child
        assert pool is not None  # bound at initialize, with the child
        async with pool.lease() as leased:  # only to pick (or start) a live child
            self.session.child = leased
            return leased

    async def _run(self, opened: _Open, uris: list[str], *, task_status: TaskStatus[None]) -> None:
        """The child listen, reported started at its acknowledgement (or, failed, at its end:
        ``opened.error`` says why)."""
        info = opened.child.info
        assert info is not None
        session = self.session
        params = bridge.add_modern_meta(
            subscriptions.session_listen_params(uris),
            version=info.version,
            capabilities=session.capabilities,
            client_info=session.client_info,
        )
        with opened.scope:
            try:
                async with opened.child.exchange(subscriptions.LISTEN, params, timeout=math.inf) as ex:
                    async for note in ex:
                        if not isinstance(note, Notification):  # never: the listen takes no asks
                            continue
                        if note.method == subscriptions.ACKNOWLEDGED and not opened.acknowledged:
                            opened.uris = subscriptions.acknowledged_uris(note.params)
                            self._latest = opened  # from now on the previous listen's copies are dropped
                            opened.acknowledged = True
                            task_status.started()
                        elif self._delivers(opened, note):
                            session.offer(subscriptions.untagged(note.method, note.params))
                    reply = ex.reply()
                    if not opened.acknowledged:
                        opened.error = getattr(reply, "error", None) or error_object(
                            -32603, "the server ended the subscription before acknowledging it"
                        )
            except ChildError as exc:
                opened.error = exc.error_object()
            except Exception as exc:  # this listen's failure domain: it ends (and opens again), the rest runs on
                log.error(
                    "the gateway failed in legacy session %s…'s child listen: %r; it is opened again",
                    session.id[:8],
                    exc,
                    exc_info=exc,
                )
                opened.error = error_object(-32603, "the gateway failed on the server's subscription")
        if not opened.acknowledged:  # failed before the acknowledgement: the caller reads why
            task_status.started()
        opened.ended = True
        self._lost(opened)

    def _lost(self, opened: _Open) -> None:
        if not opened.on_purpose and opened is self._current:
            log.info("legacy session %s…: the child's listen ended; opening it again", self.session.id[:8])
            self._current = None
            what = f"legacy session {self.session.id[:8]}…'s listen re-open"
            self._tg.start_soon(keep_running, self._reopen, log, what)

    def _delivers(self, opened: _Open, note: Notification) -> bool:
        """Only the latest acknowledged listen delivers, and only updates of what it was granted."""
        if note.method != subscriptions.RESOURCES_UPDATED or opened is not self._latest:
            return False
        return subscriptions.covers(opened.uris, (note.params or {}).get("uri"))

    async def _reopen(self) -> None:
        delay = REOPEN_DELAY
        while True:
            await anyio.sleep(delay)
            if self._ended or self._current is not None or self._flight is not None or not self.uris:
                return  # ended, open again already, or a change in flight opens one anyway
            self._reopens += 1
            if self._reopens > MAX_REOPENS:
                log.warning(
                    "legacy session %s…: resource subscriptions given up after %d re-opens",
                    self.session.id[:8],
                    MAX_REOPENS,
                )
                self.uris, self._wanted = [], []
                return
            self._generation += 1
            error = await self._settle(self._generation)
            if error is None:
                return
            log.info("legacy session %s…: listen not open again yet: %s", self.session.id[:8], error.get("message"))
            delay = min(delay * 2, REOPEN_DELAY_MAX)


class SessionListens:
    """The ``SessionListen`` of each legacy session that subscribed on a modern child; their
    child listens run in ``task_group`` (the service's, ``gateway.relay.service``)."""

    def __init__(self, task_group: TaskGroup) -> None:
        self._tg = task_group
        self._by_session: dict[str, SessionListen] = {}

    async def handle(self, session: LegacySession, request: Request) -> JsonObject:
        listen = self._by_session.get(session.id)
        if listen is None:
            listen = self._by_session[session.id] = SessionListen(session, self._tg)

            def forget() -> None:
                self._by_session.pop(session.id, None)

            session.on_end.append(forget)
        return await listen.handle(request)
