"""Launching one child: ``open_child(spec)`` starts it through its ``ChildBackend`` (a real
process unless told otherwise, ``gateway.stdio.backend``), starts its pumps
(``gateway.stdio.child``), runs the era probe and handshake (``gateway.stdio.handshake``), holds
the gateway's listen for a modern child's list changes (``gateway.stdio.changes``), and yields
the ready ``StdioChild``; leaving the context stops the child with the spec's ladder
(``ChildProcess.stop``). A child that cannot start raises ``ChildStartError`` (or the
handshake's error) plainly, not in an ``ExceptionGroup``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

from gateway.stdio import changes
from gateway.stdio.backend import PROCESS_BACKEND, ChildBackend
from gateway.stdio.child import ChangeHandler, FactsHandler, NotificationHandler, StdioChild
from gateway.stdio.handshake import StartWatcher, run_handshake
from gateway.stdio.questions import RequestHandler
from gateway.stdio.spec import ChildSpec

log = logging.getLogger("gateway.child")


@asynccontextmanager
async def open_child(
    spec: ChildSpec,
    *,
    gateway_version: str = "0",
    on_request: RequestHandler | None = None,
    on_notification: NotificationHandler | None = None,
    on_change: ChangeHandler | None = None,
    on_facts: FactsHandler | None = None,
    backend: ChildBackend = PROCESS_BACKEND,
    on_start: StartWatcher | None = None,
    server: str | None = None,
    pool: str | None = None,
) -> AsyncIterator[StdioChild]:
    """Start (``backend``: a real process by default), handshake, yield a ready child; stop
    it on exit. Raises ``ChildStartError``. ``on_start`` is told what the handshake waits for;
    ``server`` and ``pool`` name the child in its log records (by default its spec's label)."""
    proc = await backend.open(spec)
    # Exceptions are carried out of the task group by hand: anyio would wrap them in an
    # ExceptionGroup, and callers should catch ChildStartError (or their own errors) plainly.
    failure: Exception | None = None
    async with anyio.create_task_group() as tg:
        child = StdioChild(
            spec, proc, tg, on_request, on_notification, on_change, on_facts=on_facts, server=server, pool=pool
        )
        log.info("child %s (pid %d) started", spec.label, child.pid, extra={**child.log_fields, "event": "start"})
        tg.start_soon(child.pump_actions)
        tg.start_soon(child.pump_stdout)
        tg.start_soon(child.pump_stdin)
        tg.start_soon(child.pump_deadlines)
        tg.start_soon(child.pump_stderr)
        tg.start_soon(child.watch_exit)
        try:
            child.info = await run_handshake(child, gateway_version, on_start)
        except Exception as exc:
            failure = exc
        if failure is None:
            era = child.info.era.value if child.info else None
            version = child.info.version if child.info else None
            log.info(
                "child %s (pid %d) ready: %s era, protocol %s",
                spec.label,
                child.pid,
                era or "?",
                version or "?",
                extra={**child.log_fields, "event": "ready", "era": era, "protocol": version},
            )
            # A modern child's list changes come on a listen only: the gateway holds one.
            tg.start_soon(changes.keep_listening, child, gateway_version)
            try:
                yield child
            except Exception as exc:
                failure = exc
            finally:
                await child.stop()
                tg.cancel_scope.cancel()
        else:
            await child.stop()
            tg.cancel_scope.cancel()
    if failure is not None:
        raise failure
