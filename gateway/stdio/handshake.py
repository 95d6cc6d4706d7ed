"""Run the era probe and, for a legacy child, ``initialize`` (decisions in
``gateway.protocol.handshake``; this module only does the I/O and the timeouts)."""

from __future__ import annotations

import logging

from gateway.errors import ChildExitedError, ChildStartError, ChildTimeoutError
from gateway.protocol import handshake
from gateway.protocol.handshake import ChildInfo, HandshakeError
from gateway.protocol.jsonrpc import ErrorReply, Reply
from gateway.stdio import hints
from gateway.stdio.child import StdioChild
from gateway.stdio.spec import INITIALIZE_FIRST

log = logging.getLogger("gateway.child")


async def run_handshake(child: StdioChild, gateway_version: str) -> ChildInfo:
    spec = child.spec
    try:
        if spec.handshake == INITIALIZE_FIRST:
            return await _initialize_first(child, gateway_version)
        probe = await _probe(child, gateway_version)
        info = handshake.classify_probe(probe)
        if info is not None:
            return info
        log.debug("child %s did not answer server/discover as a modern server; initializing", spec.label)
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
        how = exc.message.split("; stderr: ", 1)
        message = f"cannot start {spec.command}: {how[0]} during start-up"
        if len(how) == 2:
            message += f"; stderr: {how[1]}"
        if hint:
            message += f"; hint: {hint}"
        raise ChildStartError(message, **{**exc.data, "hint": hint}) from exc
    except ChildTimeoutError as exc:
        hint = hints.start_failure(spec.command, timed_out=True, stdout_noise=list(child.stdout_noise))
        raise ChildStartError(
            f"cannot start {spec.command}: no answer to initialize within {spec.handshake_timeout:g} s"
            + (f"; hint: {hint}" if hint else ""),
            command=spec.command,
            stderr=child.stderr_tail or None,
            hint=hint,
        ) from exc
    except HandshakeError as exc:
        raise ChildStartError(f"cannot start {spec.command}: {exc}", command=spec.command) from exc


async def _initialize(child: StdioChild, gateway_version: str) -> Reply:
    spec = child.spec
    async with child.exchange(
        handshake.INITIALIZE,
        handshake.initialize_params(gateway_version, spec.declared_capabilities),
        timeout=spec.handshake_timeout,
        cancellable=False,
    ) as ex:
        async for _ in ex:
            pass
        return ex.reply()


async def _initialize_first(child: StdioChild, gateway_version: str) -> ChildInfo:
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


async def _probe(child: StdioChild, gateway_version: str) -> Reply | None:
    """``server/discover``; None when it times out. The late reply, if any, is dropped, and no
    cancellation is sent: before ``initialize`` a legacy server should get nothing but ping."""
    try:
        async with child.exchange(
            handshake.DISCOVER,
            handshake.probe_params(gateway_version),
            timeout=child.spec.probe_timeout,
            cancellable=False,
        ) as ex:
            async for _ in ex:
                pass
            return ex.reply()
    except ChildTimeoutError:
        return None
