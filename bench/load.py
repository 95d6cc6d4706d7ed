"""Closed-loop load: C clients, each with one keep-alive connection, N ``tools/call`` each.

Every client first sets up (connects; a legacy client also opens its session), then all
start together; each sends a call, waits for the whole answer, and sends the next. A run
stops early at ``max_seconds`` (no new calls; those in flight finish), so a peer that
spawns a process per request cannot stall the benchmark: such rows are marked capped.
The floor runs the same loop over one pipe (``floor_load``).
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.floor import PipeClient
from bench.httpclient import (
    MODERN_META,
    Connection,
    HttpError,
    legacy_headers,
    modern_headers,
    open_session,
)

MODERN_CALL = (
    b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"message":"hello"},'
    + MODERN_META
    + b"}}"
)
LEGACY_CALL = (
    b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"message":"hello"}}}'
)


@dataclass
class LoadResult:
    concurrency: int
    ok: int = 0
    errors: int = 0
    elapsed: float = 0.0
    latencies: list[float] = field(default_factory=list, repr=False)
    capped: bool = False
    first_error: str | None = None
    cpu: float | None = None
    """Cores the server process used during the run (CPU seconds / wall seconds)."""
    cpu_seconds: float | None = None
    """CPU seconds the server used between the first call and the last answer (``cpu_clock``)."""

    @property
    def rps(self) -> float:
        return self.ok / self.elapsed if self.elapsed else 0.0

    def percentile_ms(self, q: float) -> float:
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000

    @property
    def p50_ms(self) -> float:
        return self.percentile_ms(0.50)

    @property
    def p99_ms(self) -> float:
        return self.percentile_ms(0.99)

    def error(self, text: str) -> None:
        self.errors += 1
        if self.first_error is None:
            self.first_error = text


def head_bytes(host: str, port: int, path: str, headers: dict[str, str]) -> bytes:
    lines = [f"POST {path} HTTP/1.1", f"host: {host}:{port}", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n").encode("latin-1")


class _Client:
    def __init__(self, index: int, host: str, port: int, path: str, era: str, extra: dict[str, str]) -> None:
        self.index = index
        self.conn = Connection(host, port)
        self.path = path
        self.era = era
        self.extra = extra
        self.session_id: str | None = None
        self.head = b""

    async def setup(self) -> None:
        await self.conn.open()
        if self.era == "legacy":
            self.session_id = await open_session(self.conn, self.path, self.extra)
            headers = legacy_headers(self.session_id)
        else:
            headers = modern_headers()
        self.head = head_bytes(self.conn.host, self.conn.port, self.path, {**headers, **self.extra})

    async def run(self, calls: int, deadline: float, result: LoadResult) -> None:
        template = LEGACY_CALL if self.era == "legacy" else MODERN_CALL
        first_id = self.index * calls + 1
        for request_id in range(first_id, first_id + calls):
            if time.perf_counter() > deadline:
                result.capped = True
                return
            body = template % request_id
            raw = self.head + b"content-length: %d\r\n\r\n" % len(body) + body
            started = time.perf_counter()
            try:
                answer = await self.conn.request(raw)
            except (HttpError, OSError) as exc:
                result.error(f"{type(exc).__name__}: {exc}")
                continue
            if answer.status == 200 and b'"result"' in answer.body:
                result.ok += 1
                result.latencies.append(time.perf_counter() - started)
            else:
                result.error(f"HTTP {answer.status}: {answer.body[:160].decode(errors='replace')}")

    async def teardown(self) -> None:
        if self.session_id is not None:
            extra = "".join(f"{name}: {value}\r\n" for name, value in self.extra.items())
            raw = (
                f"DELETE {self.path} HTTP/1.1\r\nhost: {self.conn.host}:{self.conn.port}\r\n"
                f"mcp-session-id: {self.session_id}\r\nmcp-protocol-version: 2025-11-25\r\n"
                f"{extra}content-length: 0\r\n\r\n"
            ).encode()
            with contextlib.suppress(HttpError, OSError, TimeoutError):
                await asyncio.wait_for(self.conn.request(raw), 10)
        self.conn.close()


async def http_load(
    port: int,
    *,
    era: str,
    concurrency: int,
    calls: int,
    max_seconds: float,
    path: str = "/mcp",
    host: str = "127.0.0.1",
    headers: dict[str, str] | None = None,
    cpu_clock: Callable[[], float] | None = None,
) -> LoadResult:
    """``headers``: sent with every request (e.g. ``authorization``). ``cpu_clock``: read just
    before the first call and after the last answer (session setup and teardown excluded),
    the difference kept as ``cpu_seconds`` and, per wall second, as ``cpu``."""
    result = LoadResult(concurrency)
    clients = [_Client(i, host, port, path, era, headers or {}) for i in range(concurrency)]
    setups = await asyncio.gather(*(c.setup() for c in clients), return_exceptions=True)
    ready = [c for c, s in zip(clients, setups, strict=True) if not isinstance(s, BaseException)]
    for outcome in setups:
        if isinstance(outcome, BaseException):
            result.error(f"setup: {type(outcome).__name__}: {outcome}")
    if ready:
        cpu_before = cpu_clock() if cpu_clock is not None else 0.0
        started = time.perf_counter()
        await asyncio.gather(*(c.run(calls, started + max_seconds, result) for c in ready))
        result.elapsed = time.perf_counter() - started
        if cpu_clock is not None:
            result.cpu_seconds = cpu_clock() - cpu_before
            result.cpu = result.cpu_seconds / result.elapsed if result.elapsed else None
    await asyncio.gather(*(c.teardown() for c in clients))
    return result


async def floor_load(argv: list[str], *, concurrency: int, calls: int, max_seconds: float) -> LoadResult:
    """The same loop, straight over one pipe to a fresh echo server."""
    result = LoadResult(concurrency)
    async with PipeClient(argv) as client:

        async def one(index: int, deadline: float) -> None:
            first_id = index * calls + 1
            for request_id in range(first_id, first_id + calls):
                if time.perf_counter() > deadline:
                    result.capped = True
                    return
                started = time.perf_counter()
                reply = await client.call_raw(request_id, MODERN_CALL % request_id)
                if "result" in reply:
                    result.ok += 1
                    result.latencies.append(time.perf_counter() - started)
                else:
                    result.error(str(reply.get("error")))

        started = time.perf_counter()
        await asyncio.gather(*(one(i, started + max_seconds) for i in range(concurrency)))
        result.elapsed = time.perf_counter() - started
    return result


@dataclass(frozen=True)
class Row:
    """One table row: a run's numbers, or the medians of repeated runs (errors summed)."""

    rps: float
    p50_ms: float
    p99_ms: float
    ok: int
    errors: int
    capped: bool = False
    cpu: float | None = None
    first_error: str | None = None
    runs: int = 1

    @classmethod
    def of(cls, result: LoadResult) -> Row:
        return cls(
            result.rps,
            result.p50_ms,
            result.p99_ms,
            result.ok,
            result.errors,
            result.capped,
            result.cpu,
            result.first_error,
        )

    @classmethod
    def median(cls, rows: list[Row]) -> Row:
        cpus = [r.cpu for r in rows if r.cpu is not None]
        return cls(
            statistics.median(r.rps for r in rows),
            statistics.median(r.p50_ms for r in rows),
            statistics.median(r.p99_ms for r in rows),
            sum(r.ok for r in rows),
            sum(r.errors for r in rows),
            any(r.capped for r in rows),
            statistics.median(cpus) if cpus else None,
            next((r.first_error for r in rows if r.first_error), None),
            len(rows),
        )
