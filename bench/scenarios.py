"""The measurements other than the load matrix: streaming, large replies, memory, cold start.

Each function takes running services (or starts its own) and returns plain numbers; the
orchestration, repetition and medians live in ``bench.suite``.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson

from bench.floor import PipeClient
from bench.httpclient import Connection, HttpError, call_body, modern_headers, request_bytes
from bench.load import http_load
from bench.procs import Service

# -- streaming ----------------------------------------------------------------------------

META_LOG_LEVEL = "io.modelcontextprotocol/logLevel"


@dataclass(frozen=True)
class StreamResult:
    sent: int
    received: int
    per_second: float
    p50_ms: float
    p99_ms: float
    final: bool = True
    """The call's result arrived after the notifications."""
    logs: int = 0
    """``notifications/message`` received (the child writes one every ``log_every`` steps)."""


def _stream_result(
    sent: int, started_ns: int, notes: list[tuple[int, dict[str, Any]]], final: bool = True, logs: int = 0
) -> StreamResult:
    latencies = sorted((at - int(n["params"]["message"])) / 1e6 for at, n in notes)
    span = (notes[-1][0] - started_ns) / 1e9 if notes else 0.0
    return StreamResult(
        sent,
        len(notes),
        len(notes) / span if span else 0.0,
        latencies[len(latencies) // 2] if latencies else float("nan"),
        latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))] if latencies else float("nan"),
        final,
        logs,
    )


async def gateway_stream(
    port: int, steps: int, interval_ms: float, *, require_final: bool = True, log_every: int = 0
) -> StreamResult:
    """One modern call whose answer is an SSE stream of ``steps`` progress notifications
    (``require_final=False``: a missing result is reported as ``final=False``, not raised;
    ``log_every``: the child also writes a log message after every so many, and the call
    asks for them)."""
    conn = await Connection("127.0.0.1", port).open()
    arguments: dict[str, object] = {"steps": steps, "interval_ms": interval_ms, "log_every": log_every}
    meta: dict[str, object] = {"progressToken": "p"}
    if log_every:
        meta[META_LOG_LEVEL] = "info"
    body = call_body(1, "progress", arguments, modern=True, **meta)
    started = time.monotonic_ns()
    await conn.send(request_bytes("127.0.0.1", port, "/mcp", modern_headers(name="progress"), body))
    status, headers = await conn.read_head()
    notes: list[tuple[int, dict[str, Any]]] = []
    final = None
    logs = 0
    if status == 200:
        async for at, message in conn.events(headers):
            assert isinstance(message, dict)
            if message.get("method") == "notifications/progress":
                notes.append((at, message))
            elif message.get("method") == "notifications/message":
                logs += 1
            elif "id" in message:
                final = message
    conn.close()
    answered = final is not None and "result" in final
    if not answered and require_final:
        raise HttpError(f"the progress call failed: HTTP {status}, {final!r}")
    return _stream_result(steps, started, notes, answered, logs)


async def floor_stream(argv: list[str], steps: int, interval_ms: float) -> StreamResult:
    notes: list[tuple[int, dict[str, Any]]] = []
    async with PipeClient(argv) as client:
        client.on_notification = lambda at, message: notes.append((at, message))
        body = call_body(1, "progress", {"steps": steps, "interval_ms": interval_ms}, modern=True, progressToken="p")
        started = time.monotonic_ns()
        await client.call_raw(1, body)
    return _stream_result(steps, started, notes)


# -- large replies ------------------------------------------------------------------------


async def gateway_blob(port: int, size: int) -> float:
    """Seconds from sending a call to holding its parsed ``size``-byte result."""
    conn = await Connection("127.0.0.1", port).open()
    raw = request_bytes(
        "127.0.0.1", port, "/mcp", modern_headers(name="blob"), call_body(1, "blob", {"bytes": size}, modern=True)
    )
    started = time.perf_counter()
    answer = await conn.request(raw)
    reply = orjson.loads(answer.body)
    elapsed = time.perf_counter() - started
    conn.close()
    text = reply.get("result", {}).get("content", [{}])[0].get("text", "")
    if len(text) != size:
        raise HttpError(f"blob of {size} bytes came back as HTTP {answer.status}: {answer.body[:200]!r}")
    return elapsed


async def floor_blob(client: PipeClient, size: int) -> float:
    started = time.perf_counter()
    reply = await client.call_raw(1, call_body(1, "blob", {"bytes": size}, modern=True))
    elapsed = time.perf_counter() - started
    if len(reply["result"]["content"][0]["text"]) != size:
        raise RuntimeError("the floor's blob has the wrong size")
    return elapsed


# -- memory -------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryResult:
    idle_mb: float
    warm_mb: float
    """After the first round of requests (both eras)."""
    after_mb: float
    requests: int
    request_errors: int
    streams: int
    streams_open: int
    streams_completed: int
    open_mb: float
    released_mb: float
    open_seconds: float
    refusal: str | None = None


def mb(value: int) -> float:
    return value / (1024 * 1024)


async def mixed_requests(
    port: int, total: int, concurrency: int, headers: dict[str, str] | None = None
) -> tuple[int, int]:
    """``total`` calls, half modern and half legacy; (right answers, errors and wrong answers).
    ``headers``: sent with every request (the memory gateway names a principal in one)."""
    per_client = max(1, total // (2 * concurrency))
    ok = errors = 0
    for era in ("modern", "legacy"):
        result = await http_load(
            port, era=era, concurrency=concurrency, calls=per_client, max_seconds=600, headers=headers
        )
        ok, errors = ok + result.ok, errors + result.errors + sum(result.wrong.values())
    return ok, errors


PRINCIPAL_HEADER = "x-bench-principal"
"""The gateway caps requests in flight per principal (256, anonymous clients being one), so
the streams are spread over principals named in this header (``--principal-header``)."""
STREAMS_PER_PRINCIPAL = 200


async def hold_streams(service: Service, count: int) -> tuple[int, int, float, float, float, str | None]:
    """Open ``count`` SSE streams at once (a ``hold`` call each, answered with one progress
    notification and kept open), read the gateway's RSS, release them all and read every
    final answer. Returns (open, completed, RSS while open, RSS after, seconds to open, the
    first refusal if any)."""
    port = service.port
    refusals: list[str] = []
    gate = asyncio.Semaphore(100)  # connect in waves: the listen backlog is finite
    Stream = tuple[Connection, AsyncIterator[tuple[int, object]]]

    async def open_one(index: int) -> Stream | None:
        async with gate:
            conn = await Connection("127.0.0.1", port).open()
            body = call_body(index, "hold", {}, modern=True, progressToken=f"h{index}")
            headers = modern_headers(name="hold")
            headers[PRINCIPAL_HEADER] = f"p{index // STREAMS_PER_PRINCIPAL}"
            await conn.send(request_bytes("127.0.0.1", port, "/mcp", headers, body))
            status, headers = await conn.read_head()
            if status != 200 or not headers.get("content-type", "").startswith("text/event-stream"):
                answer = await conn.read_body(headers)
                refusals.append(f"HTTP {status}: {answer[:120].decode(errors='replace')}")
                conn.close()
                return None
            events = conn.events(headers)
            await anext(events)  # the first progress notification: the stream is open
            return conn, events

    started = time.perf_counter()
    opened = await asyncio.gather(*(open_one(i + 1) for i in range(count)), return_exceptions=True)
    open_seconds = time.perf_counter() - started
    streams = [s for s in opened if isinstance(s, tuple)]
    open_rss = mb(service.rss_bytes())

    async def finish(stream: Stream) -> bool:
        conn, events = stream
        try:
            async for _, message in events:
                if isinstance(message, dict) and "id" in message and "method" not in message:
                    return "result" in message
        finally:
            conn.close()
        return False

    waiting = [asyncio.ensure_future(finish(s)) for s in streams]
    release = await Connection("127.0.0.1", port).open()
    body = call_body(0, "release", {}, modern=True)
    headers = {**modern_headers(name="release"), PRINCIPAL_HEADER: "release"}
    released = await release.request(request_bytes("127.0.0.1", port, "/mcp", headers, body))
    release.close()
    if released.status != 200:
        refusals.append(f"release: HTTP {released.status}: {released.body[:120].decode(errors='replace')}")
        for task in waiting:
            task.cancel()
    done = await asyncio.wait_for(asyncio.gather(*waiting, return_exceptions=True), 120)
    completed = sum(1 for d in done if d is True)
    refusal = f"{len(refusals)} refused, first: {refusals[0]}" if refusals else None
    return len(streams), completed, open_rss, mb(service.rss_bytes()), open_seconds, refusal


# -- cold start ---------------------------------------------------------------------------


async def first_call(port: int) -> tuple[float, bool]:
    """Seconds for one echo call on a fresh connection, and whether it succeeded."""
    conn = await Connection("127.0.0.1", port).open()
    raw = request_bytes(
        "127.0.0.1", port, "/mcp", modern_headers(), call_body(1, "echo", {"message": "hi"}, modern=True)
    )
    started = time.perf_counter()
    answer = await conn.request(raw)
    elapsed = time.perf_counter() - started
    conn.close()
    return elapsed, answer.status == 200 and b'"result"' in answer.body


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")
