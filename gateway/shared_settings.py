"""Per-client settings on a child that several clients share (issue #12 item 9).

A legacy child keeps some settings per *process*, where the protocol meant them per client:
the log level of ``logging/setLevel`` and the roots it fetched with ``roots/list``. Through
a shared child one client's settings would reach every other client. So:

- **Log level.** A legacy session's ``logging/setLevel`` is stored on the session and
  answered ``{}`` by the gateway; it is never forwarded as it is. A legacy child that
  declares ``logging`` is told the *most verbose* level among the live sessions it serves
  (``loglevels.most_verbose``), before each of their requests whenever that changed (a new
  session, a session's new level, a session gone, a restarted child). Each client still gets
  only what it asked for: messages reach the one exchange they can be attributed to, at or
  above that client's own level (``gateway.stdio.child``). A modern child needs none of
  this: each request carries its client's ``logLevel``.
- **Roots.** A legacy child may fetch roots once and cache them (server-everything does,
  right after ``initialized``, when no request could answer for a client). The gateway
  notes whose roots a child was last given (``note_asks``: a session, a modern client's
  principal, or the gateway's own answer; unknown at first). Before a ``tools/call``,
  ``prompts/get`` or ``resources/read`` of a different owner, a child that was told at
  ``initialize`` that roots may change (``roots.listChanged``) is sent
  ``notifications/roots/list_changed``, so that a child that caches asks again, during the
  new client's request, which answers it. A child that does not use roots ignores the
  notification. One that reads its cache before the new answer arrives uses the previous
  client's roots for that call, and the modern clients of one principal count as one owner:
  only ``--isolation session`` isolates roots fully (see docs/bridging.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any, Final
from weakref import WeakKeyDictionary

from gateway.errors import ChildError
from gateway.protocol import inputs, loglevels
from gateway.protocol.versions import Era
from gateway.stdio.child import StdioChild

log = logging.getLogger("gateway.settings")

ROOTS_LIST_CHANGED: Final = "notifications/roots/list_changed"
SET_LEVEL_TIMEOUT: Final = 10.0
"""Seconds a child has to answer the gateway's ``logging/setLevel``; the request goes on either way."""

RootsOwner = tuple[str, Any] | None
"""Whose roots a child holds: ("session", id), ("principal", name), or None (the gateway's answer)."""
UNKNOWN: Final = ("unknown", None)


def roots_owner(client: Any, method: str) -> RootsOwner:
    """Who answers a ``roots/list`` the child asks during ``client``'s ``method`` request (a
    ``relay.ClientContext``): the client when it declared roots and its request can carry the
    question (a legacy session's stream, a modern MRTR method), else the gateway."""
    if not inputs.is_declared(getattr(client, "capabilities", {}), inputs.ROOTS, None):
        return None
    session_id = getattr(client, "session_id", None)
    if getattr(client, "era", None) is Era.LEGACY:
        return ("session", session_id) if session_id is not None and client.accepts_requests else None
    return ("principal", getattr(client, "principal", None)) if method in inputs.MRTR_METHODS else None


class SharedSettings:
    def __init__(self, sessions_on: Callable[[StdioChild], Iterable[Any]]) -> None:
        """``sessions_on(child)``: the live legacy sessions whose requests go to ``child``."""
        self._sessions_on = sessions_on
        self._levels: WeakKeyDictionary[StdioChild, str] = WeakKeyDictionary()
        self._roots: WeakKeyDictionary[StdioChild, RootsOwner] = WeakKeyDictionary()

    def note_asks(self, child: StdioChild, asks: Iterable[Any], method: str, client: Any) -> None:
        """The child asked these questions (``ChildAsk``) during ``client``'s ``method`` request."""
        if any(ask.method == inputs.ROOTS for ask in asks):
            self._roots[child] = roots_owner(client, method)

    async def prepare(self, child: StdioChild, client: Any, method: str) -> None:
        """Before ``client``'s ``method`` request on ``child``: make the child's per-process settings fit."""
        info = child.info
        if info is None or info.era is not Era.LEGACY or not child.is_alive():
            return
        if "logging" in info.capabilities:
            await self._apply_log_level(child)
        if method in inputs.MRTR_METHODS:  # the requests that may ask (a tools/list never does)
            await self._refresh_roots(child, roots_owner(client, method))

    async def _apply_log_level(self, child: StdioChild) -> None:
        wanted = loglevels.most_verbose(session.log_level for session in self._sessions_on(child))
        if wanted is None or self._levels.get(child) == wanted:
            return
        self._levels[child] = wanted  # first, so that concurrent requests do not all send it
        try:
            reply = await child.request(loglevels.SET_LEVEL, {"level": wanted}, timeout=SET_LEVEL_TIMEOUT)
        except ChildError as exc:
            log.info("child %s: logging/setLevel %s failed: %s", child.spec.label, wanted, exc.message)
            return
        log.debug("child %s: log level %s (the most verbose of its sessions): %r", child.spec.label, wanted, reply)

    async def _refresh_roots(self, child: StdioChild, wanted: RootsOwner) -> None:
        declared = child.spec.declared_capabilities.get("roots")
        if not isinstance(declared, dict) or declared.get("listChanged") is not True:
            return  # it was not told that roots may change: it cannot be told now
        if self._roots.get(child, UNKNOWN) == wanted:
            return
        self._roots[child] = wanted  # if it asks again, it is during this request, for this owner
        try:
            await child.notify(ROOTS_LIST_CHANGED)
        except ChildError:
            return
