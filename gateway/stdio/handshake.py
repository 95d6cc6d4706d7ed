"""Run the era probe and, for a legacy child, ``initialize`` (decisions in
``gateway.protocol.handshake``; this module only does the I/O and the timeouts).

A child that is slow to answer is not silent in the log: every ``WAITING_LOG_INTERVAL``
seconds an INFO line says what it has not answered yet and how long of its budget has
passed (``still waiting for … to answer server/discover (10 s of 30)``). The seconds shown
never pass the budget: the timeout fires a little after it (the event loop is busy, the
reply is read) and "7 s of 5" would read as a broken limit.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Final, Protocol

import anyio

from gateway.errors import ChildExitedError, ChildStartError, ChildTimeoutError
from gateway.protocol import childexit, handshake
from gateway.protocol.handshake import ChildInfo, HandshakeError
from gateway.protocol.jsonrpc import ErrorReply, JsonObject, Reply
from gateway.stdio import hints
from gateway.stdio.spec import INITIALIZE_FIRST, ChildSpec

log = logging.getLogger("gateway.child")

WAITING_LOG_INTERVAL: Final = 5.0
"""Seconds between "still waiting" lines for a child that has not answered its handshake:
often enough that a slow ``npx`` download is visibly alive, rare enough to stay readable."""


class StartingChild(Protocol):
    """What the handshake needs of a child (``gateway.stdio.child.StdioChild`` is one): the
    handshake does not import the child module, which runs it."""

    @property
    def spec(self) -> ChildSpec: ...

    @property
    def pid(self) -> int: ...

    @property
    def stdout_noise(self) -> Sequence[str]: ...

    @property
    def stderr_tail(self) -> list[str]: ...

    def start_soon(self, func: Callable[[], Coroutine[object, object, None]]) -> None: ...

    async def request(
        self, method: str, params: JsonObject | None, *, timeout: float | None = None, cancellable: bool = True
    ) -> Reply: ...

    async def notify(self, method: str, params: JsonObject | None = None) -> None: ...


class StartWait:
    """Logs, while the handshake lasts, which answer the child still owes; ``describe()``
    says the same for whoever shows a start in progress (``/status``, ``inspect``);
    ``is_over()`` once the handshake has ended, either way."""

    def __init__(self, child: StartingChild) -> None:
        self.child = child
        self.scope = anyio.CancelScope()
        self.method = handshake.DISCOVER
        self.budget = child.spec.probe_timeout
        self.since = time.monotonic()  # not anyio's clock: describe() is also read from rich's refresh thread

    def now_waiting_for(self, method: str, budget: float) -> None:
        self.method, self.budget, self.since = method, budget, time.monotonic()

    def is_over(self) -> bool:
        return self.scope.cancel_called

    def waited(self) -> float:
        """Seconds of the current answer's budget used so far, at most the budget."""
        return min(time.monotonic() - self.since, self.budget)

    def describe(self) -> str:
        """``pid 4711 to answer server/discover (10 s of 30)``."""
        return f"pid {self.child.pid} to answer {self.method} ({self.waited():.0f} s of {self.budget:g})"

    async def run(self) -> None:
        with self.scope:
            while True:
                await anyio.sleep(WAITING_LOG_INTERVAL)
                log.info(
                    "still waiting for %s (pid %d) to answer %s (%.0f s of %g)",
                    self.child.spec.label,
                    self.child.pid,
                    self.method,
                    self.waited(),
                    self.budget,
                )


StartWatcher = Callable[[StartWait], None]
"""Told the ``StartWait`` of a handshake as it begins (a pool member keeps it for ``/status``)."""


async def run_handshake(child: StartingChild, gateway_version: str, on_start: StartWatcher | None = None) -> ChildInfo:
    waiting = StartWait(child)
    if on_start is not None:
        on_start(waiting)
    child.start_soon(waiting.run)
    try:
        return await _handshake(child, gateway_version, waiting)
    finally:
        waiting.scope.cancel()


async def _handshake(child: StartingChild, gateway_version: str, waiting: StartWait) -> ChildInfo:
    spec = child.spec
    try:
        if spec.handshake == INITIALIZE_FIRST:
            waiting.now_waiting_for(handshake.INITIALIZE, spec.handshake_timeout)
            return await _initialize_first(child, gateway_version)
        probe = await _probe(child, gateway_version)
        info = handshake.classify_probe(probe)
        if info is not None:
            return info
        log.debug("child %s did not answer server/discover as a modern server; initializing", spec.label)
        waiting.now_waiting_for(handshake.INITIALIZE, spec.handshake_timeout)
        info = handshake.accept_initialize(await _initialize(child, gateway_version))
        await child.notify(handshake.INITIALIZED)
        return info
    except ChildExitedError as exc:
        hint = hints.start_failure(
            spec.command,
            timed_out=False,
            exit_code=exc.data.get("exit_code"),
            stdout_noise=list(child.stdout_noise),
            stderr_tail=child.stderr_tail,
        )
        raise childexit.start_exit_error(spec.label, spec.command, exc, hint, exposed=spec.expose_errors) from exc
    except ChildTimeoutError as exc:
        hint = hints.start_failure(spec.command, timed_out=True, stdout_noise=list(child.stdout_noise))
        silent = f"no answer to initialize within {spec.handshake_timeout:g} s"
        raise ChildStartError(
            f"cannot start {spec.label}: {silent}",
            detailed=f"cannot start {spec.command}: {silent}" + (f"; hint: {hint}" if hint else ""),
            private={"command": spec.command, "stderr": child.stderr_tail or None, "hint": hint},
            exposed=spec.expose_errors,
        ) from exc
    except HandshakeError as exc:
        raise ChildStartError(
            f"cannot start {spec.label}: {exc}",
            detailed=f"cannot start {spec.command}: {exc}",
            private={"command": spec.command},
            exposed=spec.expose_errors,
        ) from exc


async def _initialize(child: StartingChild, gateway_version: str) -> Reply:
    spec = child.spec
    return await child.request(
        handshake.INITIALIZE,
        handshake.initialize_params(gateway_version, spec.declared_capabilities),
        timeout=spec.handshake_timeout,
        cancellable=False,
    )


async def _initialize_first(child: StartingChild, gateway_version: str) -> ChildInfo:
    """``initialize``; a child that refuses it (a modern-only server) is probed instead."""
    reply = await _initialize(child, gateway_version)
    if isinstance(reply, ErrorReply):
        log.debug("child %s refused initialize (%s); probing server/discover", child.spec.label, reply.message)
        info = handshake.classify_probe(await _probe(child, gateway_version))
        if info is None:
            raise HandshakeError(f"it refused initialize ({reply.message}) and did not answer server/discover")
        return info
    info = handshake.accept_initialize(reply)
    await child.notify(handshake.INITIALIZED)
    return info


async def _probe(child: StartingChild, gateway_version: str) -> Reply | None:
    """``server/discover``; None when it times out. The late reply, if any, is dropped, and no
    cancellation is sent: before ``initialize`` a legacy server should get nothing but ping."""
    try:
        return await child.request(
            handshake.DISCOVER,
            handshake.probe_params(gateway_version),
            timeout=child.spec.probe_timeout,
            cancellable=False,
        )
    except ChildTimeoutError:
        return None
