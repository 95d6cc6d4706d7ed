"""A response's head and its body in one write: one system call and one TCP segment per answer.

uvicorn writes a response's status line and headers the moment the app sends
``http.response.start``, and its body when the app sends ``http.response.body``: two
``write`` system calls and, with ``TCP_NODELAY`` (which uvicorn sets), two segments for a
JSON answer that the gateway sends in one go. The peer then wakes twice to read one answer.

``HeldHead`` is the connection's transport with one difference: the write that follows
``hold_next()`` (``GuardedHttpTools`` calls it when a request's head is complete, so it is
that request's response head) is held until the next write, which takes it along, or until
the end of this turn of the event loop, whichever comes first. So a head followed at once by
its body leaves in one write, and a head whose body comes later (an SSE stream waiting for
its first event) leaves one loop turn late. Order is kept (the held bytes go first), ``close``
writes what is held first, and ``abort`` drops it (as it drops the transport's own buffer).
Every other method is the transport's own.
"""

from __future__ import annotations

import asyncio
from typing import Any


class HeldHead(asyncio.Transport):
    __slots__ = ("_held", "_hold", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._transport = transport
        self._loop = loop
        self._hold = False
        self._held: bytes | None = None

    def hold_next(self) -> None:
        """Hold the next write (a response's head) for the write after it, or this loop turn."""
        self._hold = True

    def write(self, data: bytes | bytearray | memoryview) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self._transport.write(held + data)
        elif self._hold:
            self._hold = False
            self._held = bytes(data)
            self._loop.call_soon(self._flush)
        else:
            self._transport.write(data)

    def _flush(self) -> None:
        held = self._held
        if held is not None:
            self._held = None
            if not self._transport.is_closing():
                self._transport.write(held)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def abort(self) -> None:
        self._held = None
        self._transport.abort()

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(list_of_data))

    def write_eof(self) -> None:
        self._flush()
        self._transport.write_eof()

    def can_write_eof(self) -> bool:
        return self._transport.can_write_eof()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._transport.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._transport.get_protocol()

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def is_reading(self) -> bool:
        return self._transport.is_reading()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + (len(self._held) if self._held is not None else 0)

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._transport.get_write_buffer_limits()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._transport.set_write_buffer_limits(high, low)
