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
- **Roots.** Shared legacy children are keyed by the roots set they are given
  (``gateway.relay.router``, ``gateway.relay.client_roots``): the gateway answers every
  ``roots/list`` of such a child with its pool's roots, so no child holds another client's
  roots and nothing is refreshed. What is left here is to confirm, before the first
  ``tools/call``, ``prompts/get`` or ``resources/read`` on a child of a roots pool, that the
  child has fetched its roots: a server fetches them right after ``initialized``
  (server-everything, server-filesystem), and a call sent meanwhile would run before it holds
  them (with the server's own directories). So that call waits (at most
  ``ROOTS_CONFIRM_WAIT``) for the child's ``roots/list`` to be answered, then for a ``ping``
  (the child has read the answer and applied what it does at once), then ``ROOTS_SETTLE``
  (for what it does with them asynchronously: a measured bound, not a confirmation). The
  child's own count of questions the gateway answered tells that it was this child that
  asked (the pool's handler is not told which child asks; in a roots pool a fresh child asks
  nothing else before its first call). A server whose child does not ask within the wait is
  not waited for again (it asks during calls, or never).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine, Iterable
from typing import Final
from weakref import WeakKeyDictionary

import anyio

from gateway.errors import ChildError
from gateway.protocol import inputs, loglevels
from gateway.protocol.handshake import ChildInfo
from gateway.protocol.jsonrpc import Reply, Request
from gateway.protocol.versions import LEGACY
from gateway.relay.client import ClientContext
from gateway.relay.sessions import LegacySession
from gateway.stdio.child import StdioChild
from gateway.stdio.pool import Pool

log = logging.getLogger("gateway.settings")

SET_LEVEL_TIMEOUT: Final = 10.0
"""Seconds a child has to answer the gateway's ``logging/setLevel``; the request goes on either way."""

ROOTS_CONFIRM_WAIT: Final = 5.0
"""Seconds the first call on a child of a roots pool waits for the child to fetch its roots
(it does so right after ``initialized``; the npm servers within ~10 ms): past it the call goes on,
and the server is not waited for again."""
CONFIRM_PING_TIMEOUT: Final = 5.0
"""Seconds a child has to answer the ``ping`` that follows its roots (then the call goes on)."""
ROOTS_SETTLE: Final = 0.050
"""Seconds the first call on a fresh child of a roots pool waits after that ``ping``: a server
may apply its roots asynchronously (server-filesystem resolves each root's path first, and
answers the ``ping`` before it is done). Measured on the shared 2-core machine: applied 0.2–0.3 ms
after the ``ping``'s answer (10 runs; 2.3–3.8 ms after the roots answer); 50 ms covers that
with room, once per child (whose start costs ~1.2 s)."""


class SharedSettings:
    def __init__(self, sessions_on: Callable[[StdioChild], Iterable[LegacySession]]) -> None:
        """``sessions_on(child)``: the live legacy sessions whose requests go to ``child``."""
        self._sessions_on = sessions_on
        self._levels: WeakKeyDictionary[StdioChild, str] = WeakKeyDictionary()
        self._asked: WeakKeyDictionary[Pool, anyio.Event] = WeakKeyDictionary()  # set at the pool's next ask
        self._confirming: WeakKeyDictionary[StdioChild, anyio.Event] = WeakKeyDictionary()  # set: confirmed
        self._silent: set[tuple[str, ...]] = set()  # commands whose children do not fetch roots at start

    async def on_child_request(self, pool: Pool, request: Request) -> Reply | None:
        """A child's question that no exchange carries: a roots pool's ``roots/list`` is noted
        (``confirm_roots``); the gateway answers it with the pool's roots (``ChildSpec.roots``).
        Always None: nothing is answered here."""
        if request.method == inputs.ROOTS and pool.spec.answers_roots:
            self._asked.pop(pool, anyio.Event()).set()  # answered as soon as this returns
        return None

    async def confirm_roots(self, child: StdioChild, pool: Pool) -> None:
        """Before the first call on ``child`` of a roots pool: wait until it fetched its roots.
        Concurrent first calls wait for the one that confirms (or, if it is cancelled, one of
        them confirms in its place)."""
        command = tuple(pool.spec.argv)
        while command not in self._silent:
            confirming = self._confirming.get(child)
            if confirming is None:
                break
            if confirming.is_set():
                return  # confirmed
            await confirming.wait()
        else:
            return
        done = self._confirming[child] = anyio.Event()
        confirmed = False
        try:
            confirmed = await self._confirm(child, pool, command)
        finally:
            if not confirmed:
                del self._confirming[child]  # nobody is confirmed by a cancelled wait
            done.set()

    async def _confirm(self, child: StdioChild, pool: Pool, command: tuple[str, ...]) -> bool:
        with anyio.move_on_after(ROOTS_CONFIRM_WAIT) as waited:
            # The gateway answers it right after the pool's handler returns, without an await
            # in between: by the time a waiter runs, the child's count of such answers is up.
            while not child.questions.answered_by_gateway:
                await self._asked.setdefault(pool, anyio.Event()).wait()
        if waited.cancelled_caught:
            log.info("%s: its children do not fetch roots at start; calls are not held for them", pool.label)
            self._silent.add(command)
            return True
        try:
            await child.request("ping", None, timeout=CONFIRM_PING_TIMEOUT)
        except ChildError:
            return True  # it is gone: its calls fail on their own
        await anyio.sleep(ROOTS_SETTLE)  # what it does with them after reading them (module doc)
        return True

    def prepare(
        self,
        child: StdioChild,
        client: ClientContext,
        method: str,
        log_level: str | None = None,
        pool: Pool | None = None,
    ) -> Coroutine[object, object, None] | None:
        """Before ``client``'s ``method`` request on ``child`` of ``pool`` (which wants logs at
        ``log_level``): what makes the child's per-process settings fit, to await; None when
        nothing is to be done (the usual legacy call: no coroutine is made for it)."""
        info = child.info
        if info is None or info.era is not LEGACY or not child.is_alive():
            return None
        if "logging" not in info.capabilities and not (
            pool is not None and method in inputs.MRTR_METHODS and pool.spec.answers_roots and pool.spec.roots
        ):
            return None  # what ``_prepare`` would find now, with nothing awaited before it
        return self._prepare(child, info, method, log_level, pool)

    async def _prepare(
        self, child: StdioChild, info: ChildInfo, method: str, log_level: str | None, pool: Pool | None
    ) -> None:
        if "logging" in info.capabilities:
            await self._apply_log_level(child, log_level)
        if pool is not None and method in inputs.MRTR_METHODS and pool.spec.answers_roots and pool.spec.roots:
            await self.confirm_roots(child, pool)

    async def _apply_log_level(self, child: StdioChild, log_level: str | None) -> None:
        levels = [session.log_level for session in self._sessions_on(child)]
        wanted = loglevels.most_verbose([*levels, log_level])
        if wanted is None or self._levels.get(child) == wanted:
            return
        self._levels[child] = wanted  # first, so that concurrent requests do not all send it
        try:
            reply = await child.request(loglevels.SET_LEVEL, {"level": wanted}, timeout=SET_LEVEL_TIMEOUT)
        except ChildError as exc:
            log.info("child %s: logging/setLevel %s failed: %s", child.spec.label, wanted, exc.detailed)
            return
        log.debug("child %s: log level %s (the most verbose of its sessions): %r", child.spec.label, wanted, reply)
