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

import array
import asyncio
import os
from collections.abc import Callable
from typing import Final, Protocol

try:  # the kernel's count of what a child has not read of its stdin (``PipeWriter.unread``)
    from fcntl import ioctl
    from termios import FIONREAD, TIOCOUTQ
except ImportError:  # pragma: no cover - not POSIX: nothing is counted
    ioctl = None  # type: ignore[assignment]

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

    async def read_stdout(self, deliver: Callable[[bytes], None]) -> None:
        """Hand each piece of the child's stdout (its JSON-RPC lines) to ``deliver`` as it is
        read, until the end of the stream (it has exited, or closed it); at most once. An
        exception ``deliver`` raises ends the reading and is raised here."""
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


def unread_counter(transport: asyncio.BaseTransport) -> tuple[int, int] | None:
    """The descriptor and ``ioctl`` request that count what a child has not read of its stdin
    (``PipeWriter.unread``), None where nothing does. asyncio's loop spawns a child with a pipe
    (FIONREAD on the write end: the bytes in the pipe); uvloop's, libuv, with a socket pair
    (TIOCOUTQ on our end: the memory of the writes the child has not read whole)."""
    if ioctl is None:  # pragma: no cover - not POSIX
        return None
    try:
        pipe = transport.get_extra_info("pipe")
        if pipe is not None:
            return pipe.fileno(), FIONREAD
        sock = transport.get_extra_info("socket")
        return (sock.fileno(), TIOCOUTQ) if sock is not None else None
    except (ValueError, OSError):  # closed already (a child that exited at once): nothing to count
        return None


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
        self._transport = transport = writer.transport  # a writer's for its whole life (read once: a property)
        self._unread_at = unread_counter(transport)  # where the kernel counts what the child has not read

    @classmethod
    def over(cls, stream: ByteSendStream) -> PipeWriter:
        # fenced: anyio.StreamWriterWrapper
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
        transport = self._transport
        return transport.get_write_buffer_size() + size <= transport.get_write_buffer_limits()[1]

    def write_now(self, item: bytes) -> bool:
        """``send`` without a coroutine, for the usual line: write ``item`` when the transport is
        open and takes it within its high-water mark (True), so ``send``'s drain would not wait.
        False: nothing written (call ``send``). Raises ``BrokenResourceError`` when the write
        broke the pipe (the transport closed on it), as ``send``'s drain would."""
        transport = self._transport
        # ``takes_at_once`` spelled out, and the transport written to as ``StreamWriter.write``
        # does: every request's line comes here, and each of those is a call.
        high = transport.get_write_buffer_limits()[1]
        if transport.is_closing() or transport.get_write_buffer_size() + len(item) > high:
            return False
        try:
            transport.write(item)
        except RuntimeError as exc:  # uvloop's write() once closed, as in ``send``
            raise anyio.BrokenResourceError from exc
        if transport.is_closing():
            raise anyio.BrokenResourceError("the pipe closed on a write")
        return True

    def unread(self) -> int | None:
        """How much of what it was handed the child has not read yet: 0 once it has read it all;
        None when this system cannot tell (or the pipe is closed). What waits in the transport's
        buffer, plus what the kernel holds for the child: bytes over a pipe; over a socket pair,
        the memory of the writes the child has not read whole (it moves when the child finishes
        reading a write, or another is written). Read once a maintenance tick (``LineWriter``'s
        stall watch), never on a request's path."""
        at, transport = self._unread_at, self._transport
        if at is None or transport.is_closing():  # closed: the descriptor may be another file's now
            return None
        count = array.array("i", [0])
        try:
            ioctl(at[0], at[1], count)
        except OSError:  # not a pipe or socket after all: stop asking
            self._unread_at = None
            return None
        return count[0] + transport.get_write_buffer_size()

    async def send(self, item: bytes) -> None:
        writer = self._writer
        try:
            writer.write(item)
            transport = writer.transport
            if transport.get_write_buffer_size() or transport.is_closing():
                # Suspends only over the high-water mark (or closing); raises once the pipe is
                # gone. All written at once to an open pipe (the usual case): nothing to wait for.
                await writer.drain()
        except (ConnectionResetError, BrokenPipeError, RuntimeError) as exc:
            # drain() raises the first two; uvloop's write() raises RuntimeError once closed
            raise anyio.BrokenResourceError from exc

    async def aclose(self) -> None:
        self._writer.close()


class OsProcess:
    """A real OS process as a ``ChildProcess``: anyio's ``Process`` plus the group-wide stop."""

    def __init__(self, proc: Process, stdout: int, spec: ChildSpec) -> None:
        # spawn pipes all three, stdout through a pipe of its own (``stdout``: the read end)
        assert proc.stdin is not None
        assert proc.stderr is not None
        self._proc = proc
        self._spec = spec
        self._stdin, self._stderr = PipeWriter.over(proc.stdin), proc.stderr
        self._stdout: int | None = stdout  # until read_stdout takes it

    def __repr__(self) -> str:
        return f"<OsProcess {self._spec.label} pid={self.pid} returncode={self.returncode}>"

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def stdin(self) -> ByteSendStream:
        return self._stdin

    async def read_stdout(self, deliver: Callable[[bytes], None]) -> None:
        fd, self._stdout = self._stdout, None
        if fd is None:
            raise RuntimeError("a child's stdout is read once")
        loop = asyncio.get_running_loop()
        try:
            pipe = os.fdopen(fd, "rb", buffering=0)
        except BaseException:
            os.close(fd)
            raise
        try:
            transport, reader = await loop.connect_read_pipe(lambda: StdoutReader(deliver, loop), pipe)
        except BaseException:
            pipe.close()
            raise
        try:
            await reader.ended
        finally:
            transport.close()

    def _close_stdout(self) -> None:
        """The read end of stdout closed, if it was never read (the child did not get as far)."""
        fd, self._stdout = self._stdout, None
        if fd is not None:
            os.close(fd)

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
        try:
            return await process.stop(self._proc, self._spec)
        finally:
            self._close_stdout()

    async def clear_group(self) -> None:
        await process.clear_group(self._proc.pid, self._spec)


class StdoutReader(asyncio.Protocol):
    """A child's stdout, read by the event loop and handed over in its read callback.

    Read this way, a line is with the session machine in the loop turn the pipe became
    readable: through anyio's process stream it took two more (the subprocess transport's
    deferred ``pipe_data_received``, then the reading task's wake-up)."""

    def __init__(self, deliver: Callable[[bytes], None], loop: asyncio.AbstractEventLoop) -> None:
        self._deliver = deliver
        self.ended: asyncio.Future[None] = loop.create_future()

    def data_received(self, data: bytes) -> None:
        if self.ended.done():
            return
        try:
            self._deliver(data)
        except Exception as exc:  # carried to read_stdout, which raises it
            self.ended.set_exception(exc)

    def eof_received(self) -> bool:
        return False  # the transport closes itself: connection_lost ends the reading

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.ended.done():
            self.ended.set_result(None)


class ProcessBackend:
    """Children as OS processes: argv run directly (never a shell) in a new session."""

    async def open(self, spec: ChildSpec) -> ChildProcess:
        proc, stdout = await process.spawn(spec)
        return OsProcess(proc, stdout, spec)


PROCESS_BACKEND: Final[ChildBackend] = ProcessBackend()
"""The default backend everywhere: real processes."""
