"""Where a child's bytes come from: the seam between the gateway and a running stdio server.

A ``ChildBackend`` turns a ``ChildSpec`` into a running ``ChildProcess``: its three byte
streams (stdin to send on, stdout and stderr to receive from), an identity for logs
(``pid``), its exit (``wait``, ``returncode``) and the ways to end it (``terminate``,
``kill``, and ``stop``, the spec's whole stop ladder). Everything above it (``StdioChild``:
framing, correlation, the handshake; the pool; the relay) sees only this, so it runs the
same over a real process or an in-memory fake.

- ``ProcessBackend`` (the default, ``PROCESS_BACKEND``) is the real thing: an OS process
  spawned directly in its own session (``gateway.stdio.process.spawn``), stopped with the
  spec's ladder over its process group, with what it left behind cleared.
- The component tests pass a scripted in-memory fake (``tests/component/fakechild.py``): an
  MCP server speaking newline-delimited JSON-RPC over anyio memory streams, no process at all.

The seam is chosen at composition: ``open_child(spec, backend=...)``, ``Pool(...,
backend=...)``, ``Router(..., backend=...)``; every default is the real process.

Imports: anyio and ``gateway.stdio`` (``process``, ``spec``) only.
"""

from __future__ import annotations

import asyncio
from typing import Final, Protocol

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream, Process

from gateway.stdio import process
from gateway.stdio.spec import ChildSpec


class ChildProcess(Protocol):
    """One running child, as ``StdioChild`` drives it."""

    @property
    def pid(self) -> int:
        """Its identity in logs, errors and ``/status`` (an OS pid for a real process)."""
        ...

    @property
    def stdin(self) -> ByteSendStream:
        """Lines to the child; closing it is the first rung of the stop ladder."""
        ...

    @property
    def stdout(self) -> ByteReceiveStream:
        """The child's JSON-RPC lines; end of stream once it has exited (or closed it)."""
        ...

    @property
    def stderr(self) -> ByteReceiveStream:
        """The child's diagnostics, drained forever (their tail is quoted in errors)."""
        ...

    @property
    def returncode(self) -> int | None:
        """None while it runs; the exit code, or ``-signal`` when a signal ended it."""
        ...

    async def wait(self) -> int:
        """Until it has exited; its return code."""
        ...

    def terminate(self) -> None:
        """Ask it to end (SIGTERM to its group for a real process)."""
        ...

    def kill(self) -> None:
        """End it now (SIGKILL to its group for a real process)."""
        ...

    async def stop(self) -> int | None:
        """The spec's stop ladder (close stdin, grace, terminate, grace, kill), idempotent,
        shielded from cancellation, safe on a dead child; the return code."""
        ...

    async def clear_group(self) -> None:
        """End what the child left running after it exited (processes still holding its
        pipes); nothing to do where there is no such thing."""
        ...


class ChildBackend(Protocol):
    """Starts children."""

    async def open(self, spec: ChildSpec) -> ChildProcess:
        """A running child for ``spec``, or ``ChildStartError('cannot start PROGRAM: REASON')``."""
        ...


class PipeWriter(ByteSendStream):
    """A child's stdin as asyncio's ``StreamWriter`` under anyio's wrapper: a line goes to the
    pipe's transport at once (which writes it to the pipe at once when it can), and the drain
    waits only while the transport is over its high-water mark. anyio's own ``send`` ends
    every write with a checkpoint: a whole pass through the event loop, resuming the request's
    whole coroutine stack, for each line a request writes.

    ``over(stream)`` is this for anyio's asyncio stdin. It reads anyio's private
    ``StreamWriterWrapper._stream`` (fenced: ``docs/architecture.md``, the anyio range pinned in
    ``pyproject.toml``, ``tests/integration/test_fences.py``): a stream without it raises
    ``TypeError`` rather than falling back to anyio's ``send`` unnoticed."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    @classmethod
    def over(cls, stream: ByteSendStream) -> PipeWriter:
        writer = getattr(stream, "_stream", None)  # anyio's StreamWriterWrapper keeps it there
        if not isinstance(writer, asyncio.StreamWriter):
            raise TypeError(
                f"{type(stream).__module__}.{type(stream).__qualname__} holds no asyncio.StreamWriter in _stream: "
                "anyio's process stdin changed; see 'Library internals' in docs/architecture.md"
            )
        return cls(writer)

    def takes_at_once(self, size: int) -> bool:
        """Whether ``send`` of ``size`` bytes returns without waiting: the transport's buffer stays
        within its high-water mark, so ``drain`` does not suspend (the public transport API)."""
        transport = self._writer.transport
        return transport.get_write_buffer_size() + size <= transport.get_write_buffer_limits()[1]

    async def send(self, item: bytes) -> None:
        writer = self._writer
        try:
            writer.write(item)
            # Suspends only over the high-water mark (or closing); raises once the pipe is gone.
            await writer.drain()
        except (ConnectionResetError, BrokenPipeError, RuntimeError) as exc:
            # drain() raises the first two; uvloop's write() raises RuntimeError once closed
            raise anyio.BrokenResourceError from exc

    async def aclose(self) -> None:
        self._writer.close()


class OsProcess:
    """A real OS process as a ``ChildProcess``: anyio's ``Process`` plus the group-wide stop."""

    def __init__(self, proc: Process, spec: ChildSpec) -> None:
        # spawn pipes all three
        assert proc.stdin is not None
        assert proc.stdout is not None
        assert proc.stderr is not None
        self._proc = proc
        self._spec = spec
        self._stdin, self._stdout, self._stderr = PipeWriter.over(proc.stdin), proc.stdout, proc.stderr

    def __repr__(self) -> str:
        return f"<OsProcess {self._spec.label} pid={self.pid} returncode={self.returncode}>"

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def stdin(self) -> ByteSendStream:
        return self._stdin

    @property
    def stdout(self) -> ByteReceiveStream:
        return self._stdout

    @property
    def stderr(self) -> ByteReceiveStream:
        return self._stderr

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode

    async def wait(self) -> int:
        return await self._proc.wait()

    def terminate(self) -> None:
        self._proc.terminate()

    def kill(self) -> None:
        self._proc.kill()

    async def stop(self) -> int | None:
        return await process.stop(self._proc, self._spec)

    async def clear_group(self) -> None:
        await process.clear_group(self._proc.pid, self._spec)


class ProcessBackend:
    """Children as OS processes: argv run directly (never a shell) in a new session."""

    async def open(self, spec: ChildSpec) -> ChildProcess:
        return OsProcess(await process.spawn(spec), spec)


PROCESS_BACKEND: Final[ChildBackend] = ProcessBackend()
"""The default backend everywhere: real processes."""
