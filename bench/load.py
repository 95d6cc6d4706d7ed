"""Closed-loop load: C clients, each with one keep-alive connection, N ``tools/call`` each.

Every client first sets up (connects; a legacy client also opens its session), then all
start together; each sends a call, waits for the whole answer, and sends the next. A run
stops early at ``max_seconds`` (no new calls; those in flight finish), so a peer that
spawns a process per request cannot stall the benchmark: such rows are marked capped.
The floor runs the same loop over one pipe (``floor_load``).

Every answer is checked. Each client numbers its requests from 1, as a real MCP client does
(so ids repeat across clients), and each call echoes a message naming the client and the call
(``client 12 call 34``); an answer counts as right only when it carries that text
(``expected``: one bytes search of the body). A wrong answer is sorted by ``classify``
(another client's echo, another of this client's calls, or no echo at all) and counted, not
treated as an error: the run goes on, and the verdicts refuse to compare such a server on
speed. A call that gets no answer by ``max_seconds`` + ``ANSWER_GRACE`` is counted as
missing (a server that sends an answer to the wrong connection leaves its rightful client
waiting).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

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
    b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo",'
    b'"arguments":{"message":"client %d call %d"},' + MODERN_META + b"}}"
)
"""A modern echo call: ``MODERN_CALL % (request_id, client, call)``."""
LEGACY_CALL = (
    b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo",'
    b'"arguments":{"message":"client %d call %d"}}}'
)
ECHO = b'"text":"client %d call %d"'
"""What the right answer to ``client``'s call number ``call`` carries (``expected``)."""
ECHO_START = b'"text":"client '
"""Where any echo starts: a right answer has exactly one."""
ECHOED = re.compile(rb'"text"\s*:\s*"client (\d+) call (\d+)"')
ANSWER_GRACE = 10.0
"""Seconds past ``max_seconds`` a run waits for answers in flight before counting them missing."""

RIGHT = "right"
OTHER_CLIENT = "another client's"
OTHER_CALL = "another of its calls"
NO_ECHO = "no echo"
MISSING = "missing"
WRONG_KINDS = (OTHER_CLIENT, OTHER_CALL, NO_ECHO, MISSING)
"""How an answer can be wrong, in the order the tables list them."""


def expected(client: int, call: int) -> bytes:
    return ECHO % (client, call)


def is_right(body: bytes, client: int, call: int) -> bool:
    """The check every answer gets: two searches of its bytes, no parsing."""
    return ECHO % (client, call) in body and body.count(ECHO_START) == 1


def classify(body: bytes, client: int, call: int) -> str:
    """What an answer to ``client``'s call ``call`` carries: ``RIGHT``, ``OTHER_CLIENT``,
    ``OTHER_CALL`` or ``NO_ECHO``. Only answers that fail ``is_right`` need it (whitespace
    after the colon is allowed here, so a server that re-serialises JSON with spaces is
    judged on what it said, not how)."""
    found = ECHOED.findall(body)
    if not found:
        return NO_ECHO
    if len(found) > 1:  # two echoes in one answer: whatever else, not this call's answer alone
        return OTHER_CLIENT if any(int(c) != client for c, _ in found) else OTHER_CALL
    echoed_client, echoed_call = (int(n) for n in found[0])
    if echoed_client != client:
        return OTHER_CLIENT
    return RIGHT if echoed_call == call else OTHER_CALL


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
    wrong: dict[str, int] = field(default_factory=dict)
    """Wrong answers by kind (``WRONG_KINDS``); ``ok`` counts the right ones only."""
    first_wrong: str | None = None

    @property
    def answered(self) -> int:
        """Answers received, right or wrong (missing ones are not answers)."""
        return self.ok + sum(n for kind, n in self.wrong.items() if kind != MISSING)

    @property
    def rps(self) -> float:
        """Answers per second, right or wrong: a server's speed, whether or not it may be compared."""
        return self.answered / self.elapsed if self.elapsed else 0.0

    def wrong_answer(self, kind: str, text: str) -> None:
        self.wrong[kind] = self.wrong.get(kind, 0) + 1
        if self.first_wrong is None:
            self.first_wrong = text

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
        self.in_flight = 0
        """The call last sent (the one a stuck client waits on)."""
        self.finished = 0.0

    async def setup(self) -> None:
        await self.conn.open()
        if self.era == "legacy":
            self.session_id = await open_session(self.conn, self.path, self.extra)
            headers = legacy_headers(self.session_id, initialized=True)
        else:
            headers = modern_headers()
        self.head = head_bytes(self.conn.host, self.conn.port, self.path, {**headers, **self.extra})

    async def run(self, calls: int, deadline: float, result: LoadResult) -> None:
        template = LEGACY_CALL if self.era == "legacy" else MODERN_CALL
        client = self.index
        for call in range(1, calls + 1):  # the call number is also the request's id
            if time.perf_counter() > deadline:
                result.capped = True
                return
            body = template % (call, client, call)
            raw = self.head + b"content-length: %d\r\n\r\n" % len(body) + body
            started = time.perf_counter()
            self.in_flight = call
            try:
                answer = await self.conn.request(raw)
            except (HttpError, OSError) as exc:
                result.error(f"{type(exc).__name__}: {exc}")
                continue
            took = time.perf_counter() - started
            if answer.status == 200 and is_right(answer.body, client, call):
                result.ok += 1
                result.latencies.append(took)
            elif b'"result"' in answer.body or (200 <= answer.status < 300 and b'"error"' not in answer.body):
                kind = classify(answer.body, client, call)  # an empty 202 too: no echo
                if kind == RIGHT:  # the echo, spelled with spaces
                    result.ok += 1
                else:
                    text = answer.body[:160].decode(errors="replace")
                    result.wrong_answer(kind, f"client {client} call {call} got {text}")
                result.latencies.append(took)
            else:
                result.error(f"HTTP {answer.status}: {answer.body[:160].decode(errors='replace')}")
        self.finished = time.perf_counter()

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
        runs = [asyncio.ensure_future(c.run(calls, started + max_seconds, result)) for c in ready]
        _, stuck = await asyncio.wait(runs, timeout=max_seconds + ANSWER_GRACE)
        result.elapsed = time.perf_counter() - started
        if stuck:  # their answers never came (sent to another connection, or nowhere)
            done = [c.finished for c, task in zip(ready, runs, strict=True) if task not in stuck]
            result.elapsed = max(done, default=started + result.elapsed) - started
            for client, task in zip(ready, runs, strict=True):
                if task in stuck:
                    task.cancel()
                    result.wrong_answer(MISSING, f"client {client.index} call {client.in_flight}: no answer")
            await asyncio.gather(*stuck, return_exceptions=True)
            for client in ready:
                client.conn.close()
        for task in runs:
            if task not in stuck:
                task.result()  # a bug in the client is raised, not hidden
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
            first_id = index * calls + 1  # one pipe: its ids must not repeat
            for call in range(1, calls + 1):
                if time.perf_counter() > deadline:
                    result.capped = True
                    return
                request_id = first_id + call - 1
                started = time.perf_counter()
                reply = await client.call_raw(request_id, MODERN_CALL % (request_id, index, call))
                took = time.perf_counter() - started
                if "result" not in reply:
                    result.error(str(reply.get("error")))
                    continue
                # The same check as over HTTP, on the reply the pipe client has parsed already.
                kind = RIGHT if _echo_text(reply) == f"client {index} call {call}" else None
                if kind is None:
                    kind = classify(orjson.dumps(reply), index, call)
                if kind == RIGHT:
                    result.ok += 1
                else:
                    result.wrong_answer(kind, f"client {index} call {call} got {str(reply)[:160]}")
                result.latencies.append(took)

        started = time.perf_counter()
        await asyncio.gather(*(one(i, started + max_seconds) for i in range(concurrency)))
        result.elapsed = time.perf_counter() - started
    return result


def _echo_text(reply: dict[str, Any]) -> object:
    try:
        return reply["result"]["content"][0]["text"]
    except (KeyError, IndexError, TypeError):
        return None


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
    wrong: dict[str, int] = field(default_factory=dict)
    """Wrong answers by kind (``WRONG_KINDS``), summed over the runs."""
    first_wrong: str | None = None

    @property
    def wrong_answers(self) -> int:
        return sum(self.wrong.values())

    @property
    def calls(self) -> int:
        """Calls that got an answer, right or wrong, or none by the deadline."""
        return self.ok + self.wrong_answers

    def answers_line(self) -> str:
        """How the answers went, e.g. ``2,892 of 2,944 answers went to the wrong client``."""
        if not self.wrong:
            return f"{self.ok:,} of {self.ok:,} answers right"
        other = self.wrong.get(OTHER_CLIENT, 0)
        head = (
            f"{other:,} of {self.calls:,} answers went to the wrong client"
            if other
            else f"{self.wrong_answers:,} of {self.calls:,} answers wrong"
        )
        kinds = ", ".join(f"{kind}: {self.wrong[kind]:,}" for kind in WRONG_KINDS if self.wrong.get(kind))
        return f"{head} ({kinds}; right: {self.ok:,})"

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
            wrong=dict(result.wrong),
            first_wrong=result.first_wrong,
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
            {kind: n for kind in WRONG_KINDS if (n := sum(r.wrong.get(kind, 0) for r in rows))},
            next((r.first_wrong for r in rows if r.first_wrong), None),
        )
