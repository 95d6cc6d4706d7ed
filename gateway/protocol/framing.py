"""Newline-delimited JSON framing for stdio, bounded and linear-time.

``LineFramer.feed(chunk)`` returns the complete lines in the chunk (without ``\\n`` or a
trailing ``\\r``; blank lines skipped) and ``OversizedLine`` events. It never rescans bytes
it has already searched, so a 16 MiB line costs one pass, not a pass per chunk.

Over-long lines (policy, documented in README "stdio framing"): a line longer than
``max_line_bytes`` is not buffered. The framer keeps only its first and last
``SNIFF_BYTES`` bytes, discards the rest as it arrives, and reports an ``OversizedLine`` when
the newline finally comes. The child session uses the head and tail to find the
JSON-RPC id (``sniff_id``) and fails that one request with a clear error instead of leaving
it to hang; the child itself stays usable. Imports: standard library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

import orjson

DEFAULT_MAX_LINE_BYTES: Final = 16 * 1024 * 1024
"""One message per line; 16 MiB holds any sane tool result and bounds a runaway child."""

SNIFF_BYTES: Final = 512
"""Bytes kept from each end of an over-long line to find its id."""


@dataclass(frozen=True, slots=True)
class OversizedLine:
    size: int
    head: bytes
    tail: bytes


class LineFramer:
    def __init__(self, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        if max_line_bytes < 1:
            raise ValueError("max_line_bytes must be positive")
        self.max_line_bytes = max_line_bytes
        self._buffer = bytearray()
        self._scanned = 0  # bytes of _buffer already known to hold no newline
        self._discarding = False
        self._discard_size = 0
        self._discard_head = b""
        self._discard_tail = bytearray()

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def feed(self, chunk: bytes) -> list[bytes | OversizedLine]:
        end = len(chunk) - 1
        if not self._buffer and not self._discarding and end <= self.max_line_bytes and chunk.find(b"\n") == end:
            # The common read: exactly one whole line, nothing before it. Taken as it is, not
            # copied into the buffer and out again (what the loop below would make of it).
            line = chunk[:end].rstrip(b"\r")
            return [line] if line.strip() else []
        out: list[bytes | OversizedLine] = []
        start = 0
        if self._discarding:
            start = self._discard(chunk, out)
            if start < 0:
                return out
        self._buffer += chunk[start:] if start else chunk
        while True:
            newline = self._buffer.find(b"\n", self._scanned)
            if newline < 0:
                self._scanned = len(self._buffer)
                if len(self._buffer) > self.max_line_bytes:
                    self._start_discard()
                return out
            if newline > self.max_line_bytes:
                self._emit_oversized(bytes(self._buffer[:newline]), out)
            else:
                line = bytes(self._buffer[:newline]).rstrip(b"\r")
                if line.strip():
                    out.append(line)
            del self._buffer[: newline + 1]
            self._scanned = 0

    def _start_discard(self) -> None:
        self._discarding = True
        self._discard_size = len(self._buffer)
        self._discard_head = bytes(self._buffer[:SNIFF_BYTES])
        self._discard_tail = bytearray(self._buffer[-SNIFF_BYTES:])
        self._buffer.clear()
        self._scanned = 0

    def _discard(self, chunk: bytes, out: list[bytes | OversizedLine]) -> int:
        """Skip bytes of an over-long line; return where the next line starts, or -1."""
        newline = chunk.find(b"\n")
        part = chunk if newline < 0 else chunk[:newline]
        self._discard_size += len(part)
        self._discard_tail += part[-SNIFF_BYTES:]
        del self._discard_tail[:-SNIFF_BYTES]
        if newline < 0:
            return -1
        out.append(OversizedLine(self._discard_size, self._discard_head, bytes(self._discard_tail).rstrip(b"\r")))
        self._discarding = False
        self._discard_tail = bytearray()
        return newline + 1

    @staticmethod
    def _emit_oversized(line: bytes, out: list[bytes | OversizedLine]) -> None:
        out.append(OversizedLine(len(line), line[:SNIFF_BYTES], line[-SNIFF_BYTES:].rstrip(b"\r")))


_ID = rb'(-?\d+|"(?:[^"\\]|\\.)*")'
_TAIL_ID: Final = re.compile(rb'"id"\s*:\s*' + _ID + rb"\s*}\s*$")
_HEAD_ID: Final = re.compile(rb'^\s*{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*' + _ID + rb"\s*,")


def sniff_id(line: OversizedLine) -> int | str | None:
    """Best-effort id of an over-long message: last key of the object, or first (after jsonrpc)."""
    match = _TAIL_ID.search(line.tail) or _HEAD_ID.search(line.head)
    if match is None:
        return None
    raw = match.group(1)
    if raw.startswith(b'"'):
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return None
        return value if isinstance(value, str) else None
    return int(raw)
