"""A modern child's list changes, heard by the gateway on a listen of its own (digest §1.5, §7.7).

A 2025 child tells whoever holds its stdio that its tools, prompts or resources changed
(``notifications/*/list_changed``, unsolicited). A 2026-07-28 child sends them only on a
``subscriptions/listen`` that asked for them: without one it says nothing, and the gateway's
tool cache (the ``Mcp-Param-*`` checks, the tools hidden from HTTP clients) and the legacy
sessions it serves (their GET streams) would never learn of a change. So once a modern child's
handshake declares ``listChanged`` for any of the three, ``keep_listening`` holds one listen of
the gateway's own open on it for as long as it runs, asking for exactly those:

- Each change it hears goes where a legacy child's unsolicited one goes
  (``StdioChild.heard``): a tools change makes the tool caches list again, and every change
  reaches the pool's listeners (``gateway.relay.unsolicited``: the legacy sessions the pool
  serves). A modern client's own listens are forwarded to the child as before and hear it
  there; a modern pool has no emulated listens, so nothing is heard twice.
- The listen takes no pool lease and is not work the stall check waits on
  (``ChildSession.working``).
- Ended by the child while it runs (the graceful result, or ``notifications/cancelled``): opened
  again after ``REOPEN_DELAY`` (doubled each time), at most ``MAX_REOPENS`` times; once the
  child acknowledges it again, each list it watches is taken as changed (a change made while
  none was open went unheard: the digest's "re-subscribe plus a synthetic list_changed"). Refused (an
  error answer) or failed (a malformed answer, a full stdin): logged, and not asked again.
  The child gone: over.
- A failure of the gateway's own in here is logged as an ERROR and ends the listening, never
  the child (it serves calls on; only its list changes go unheard).

A change the child makes before its listen is acknowledged (a few milliseconds after the
handshake) is not heard; the first ``tools/list`` walk happens after, on the first call.
"""

from __future__ import annotations

import logging
import math
from typing import Final

import anyio

from gateway.errors import GatewayError
from gateway.protocol import handshake, subscriptions
from gateway.protocol.jsonrpc import ErrorReply, Notification
from gateway.protocol.versions import Era
from gateway.stdio.child import StdioChild

log = logging.getLogger("gateway.child")

MAX_REOPENS: Final = 5
"""Times a listen the child ended is opened again; a child that keeps ending it is let be."""
REOPEN_DELAY: Final = 1.0
"""Seconds before the first reopen, doubled after each."""


def wanted(child: StdioChild) -> dict[str, object]:
    """The list changes to listen for on ``child``: those its handshake declares
    ``listChanged`` for, on a modern child; else none."""
    info = child.info
    if info is None or info.era is not Era.MODERN:
        return {}
    return subscriptions.honoured({key: True for key in subscriptions.LIST_CHANGED_TYPES}, info.capabilities)


async def keep_listening(child: StdioChild, gateway_version: str) -> None:
    """Hold the gateway's listen on ``child`` (the module doc); returns when there is nothing
    (more) to hear."""
    notifications = wanted(child)
    if not notifications:
        return
    methods = subscriptions.wanted_methods(notifications)
    params = {"notifications": notifications, "_meta": handshake.modern_meta(gateway_version)}
    label = f"child {child.spec.label} (pid {child.pid})"
    try:
        for attempt in range(MAX_REOPENS + 1):
            if attempt:
                await anyio.sleep(REOPEN_DELAY * 2 ** (attempt - 1))
            try:
                async with child.exchange(subscriptions.LISTEN, params, timeout=math.inf) as ex:
                    async for item in ex:
                        if not isinstance(item, Notification):
                            continue
                        if item.method in methods:
                            untagged = subscriptions.untagged(item.method, item.params)
                            child.heard(Notification(item.method, untagged["params"] or None))
                        elif item.method == subscriptions.ACKNOWLEDGED and attempt:
                            # Open again: a change while none was open went unheard, so each
                            # list is taken as changed (the digest's synthetic list_changed).
                            for method in sorted(methods):
                                child.heard(Notification(method))
                    reply = ex.reply()
            except GatewayError as exc:
                if child.is_alive():  # (gone or going: its successor listens for itself)
                    message = "%s: the gateway's listen failed (%s); its list changes are not heard"
                    log.info(message, label, exc, extra=child.log_fields)
                return
            if isinstance(reply, ErrorReply):
                log.info(
                    "%s refused the gateway's listen for list changes (%s); its changes are not heard",
                    label,
                    reply.error.get("message"),
                    extra=child.log_fields,
                )
                return
            if attempt < MAX_REOPENS:
                message = "%s ended the gateway's listen for list changes; listening again"
                log.info(message, label, extra=child.log_fields)
        log.info("%s keeps ending the gateway's listen; its list changes are not heard", label, extra=child.log_fields)
    except Exception as exc:  # the gateway's own failure: the listening ends, the child serves on
        log.error("the gateway failed listening to %s: %r", label, exc, exc_info=exc, extra=child.log_fields)
