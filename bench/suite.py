"""The whole benchmark: plans (full, quick, smoke) and the order things run in.

Every server under test is its own process. The load matrix runs all targets side by side
and interleaves them (repetition → concurrency → target), so drift on this shared machine
hits every target alike and the ratios stay fair; rows are medians of the repetitions.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from bench import procs, scenarios
from bench.floor import PipeClient
from bench.httpclient import Connection, call_body, legacy_headers, modern_headers, open_session, request_bytes
from bench.load import Row, floor_load, http_load
from bench.procs import Service

T = TypeVar("T")
MB = 1024 * 1024


@dataclass(frozen=True)
class Plan:
    name: str
    reps: int
    concurrencies: tuple[int, ...]
    calls: dict[int, int]
    """Calls per client, by concurrency."""
    max_seconds: float
    pool_sizes: tuple[int, ...]
    pool_concurrency: int
    pool_calls: int
    slow_work_ms: float
    stream_flood: int
    stream_paced: int
    stream_interval_ms: float
    large_mb: tuple[int, ...]
    memory_requests: int
    memory_concurrency: int
    memory_streams: int
    cold_delay: float
    peers: bool = True
    uvicorn_ceiling: bool = True


FULL = Plan(
    "full",
    reps=3,
    concurrencies=(1, 8, 64),
    calls={1: 500, 8: 250, 64: 40},
    max_seconds=4.0,
    pool_sizes=(1, 2, 4, 8),
    pool_concurrency=16,
    pool_calls=15,
    slow_work_ms=10.0,
    stream_flood=2000,
    stream_paced=200,
    stream_interval_ms=2.0,
    large_mb=(1, 10, 50),
    memory_requests=10_000,
    memory_concurrency=8,
    memory_streams=1000,
    cold_delay=2.0,
)
QUICK = Plan(
    "quick",
    reps=1,
    concurrencies=(1, 8, 64),
    calls={1: 100, 8: 50, 64: 8},
    max_seconds=2.0,
    pool_sizes=(1, 2, 4, 8),
    pool_concurrency=16,
    pool_calls=4,
    slow_work_ms=10.0,
    stream_flood=500,
    stream_paced=50,
    stream_interval_ms=2.0,
    large_mb=(1, 10),
    memory_requests=2000,
    memory_concurrency=8,
    memory_streams=200,
    cold_delay=1.0,
)
SMOKE = Plan(
    "smoke",
    reps=1,
    concurrencies=(1, 4),
    calls={1: 20, 4: 10},
    max_seconds=2.0,
    pool_sizes=(1, 2),
    pool_concurrency=4,
    pool_calls=3,
    slow_work_ms=5.0,
    stream_flood=50,
    stream_paced=10,
    stream_interval_ms=1.0,
    large_mb=(1,),
    memory_requests=100,
    memory_concurrency=4,
    memory_streams=20,
    cold_delay=0.3,
    peers=False,
    uvicorn_ceiling=False,
)
PLANS = {plan.name: plan for plan in (FULL, QUICK, SMOKE)}


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run one measurement on a fresh event loop (uvloop when installed, like the servers)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


@dataclass
class Target:
    """Something the load runs against, in the eras it supports."""

    name: str
    service: Service | None  # None: the floor (a pipe, no HTTP)
    eras: tuple[str, ...]
    unsupported: dict[str, str] = field(default_factory=dict)
    rows: dict[tuple[str, int], list[Row]] = field(default_factory=dict)

    def row(self, era: str, concurrency: int) -> Row | None:
        runs = self.rows.get((era, concurrency))
        return Row.median(runs) if runs else None


@dataclass
class Results:
    plan: Plan
    targets: list[Target] = field(default_factory=list)
    pool: dict[int, Row] = field(default_factory=dict)
    workers: dict[tuple[int, str], Row] = field(default_factory=dict)
    """``--workers N`` at the plan's highest concurrency, by (N, era)."""
    stream: dict[str, dict[str, scenarios.StreamResult]] = field(default_factory=dict)
    large: dict[int, tuple[float, float]] = field(default_factory=dict)
    memory: scenarios.MemoryResult | None = None
    cold: dict[str, tuple[float, float, bool]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def target(self, name: str) -> Target | None:
        return next((t for t in self.targets if t.name == name), None)


class Suite:
    def __init__(self, plan: Plan, log_dir: Path, say: Callable[[str], None] = print) -> None:
        self.plan = plan
        self.log_dir = log_dir
        self.say = say
        self.results = Results(plan)

    def run_all(self) -> Results:
        started = time.perf_counter()
        self.load_matrix()
        self.pool_scaling()
        self.workers_scaling()
        self.streaming_and_large()
        self.memory()
        self.cold_start()
        self.results.seconds = time.perf_counter() - started
        return self.results

    # -- load ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def _services(self, services: list[Service]) -> Iterator[list[Service]]:
        try:
            for service in services:
                service.start()
            for service in services:
                service.wait_ready()
            yield services
        finally:
            for service in services:
                service.stop()

    def load_matrix(self) -> None:
        plan = self.plan
        services = [procs.gateway("gateway", self.log_dir), procs.noop("raw", self.log_dir)]
        if plan.uvicorn_ceiling:
            services.append(procs.noop("uvicorn", self.log_dir))
        peers: list[Service] = []
        if plan.peers:
            for make in procs.PEER_SERVICES.values():
                peer = make(self.log_dir)
                if peer is not None:
                    peers.append(peer)
            if not peers:
                self.results.notes.append("no peers installed (run bench/install-peers.sh): peer columns are empty")
        self.say(f"load: starting {', '.join(s.name for s in services + peers)}")
        with self._services(services + peers):
            targets = [
                Target("ceiling (raw)", services[1], ("modern",)),
                *([Target("ceiling (uvicorn)", services[2], ("modern",))] if plan.uvicorn_ceiling else []),
                Target("floor (pipe)", None, ("modern",)),
                Target("gateway", services[0], ("modern", "legacy")),
                *(Target(p.name, p, ("modern", "legacy")) for p in peers),
            ]
            for target in targets:
                if target.service is not None:
                    for era in target.eras:
                        problem = run(probe(target.service.port, era))
                        if problem is not None:
                            target.unsupported[era] = problem
                            self.say(f"  {target.name} {era}: not supported ({problem})")
            self.results.targets = targets
            self._warm_up(targets)
            for rep in range(plan.reps):
                for concurrency in plan.concurrencies:
                    for target in targets:
                        for era in target.eras:
                            if era not in target.unsupported:
                                self._load_once(target, era, concurrency)
                self.say(f"load: repetition {rep + 1}/{plan.reps} done")

    def _warm_up(self, targets: list[Target]) -> None:
        for target in targets:
            if target.service is not None:
                for era in target.eras:
                    if era not in target.unsupported:
                        run(http_load(target.service.port, era=era, concurrency=4, calls=10, max_seconds=2))

    def _load_once(self, target: Target, era: str, concurrency: int) -> None:
        plan = self.plan
        calls = plan.calls[concurrency]
        if target.service is None:
            result = run(
                floor_load(procs.echo_command(), concurrency=concurrency, calls=calls, max_seconds=plan.max_seconds)
            )
        else:
            cpu_before = target.service.cpu_seconds()
            result = run(
                http_load(
                    target.service.port, era=era, concurrency=concurrency, calls=calls, max_seconds=plan.max_seconds
                )
            )
            if result.elapsed:
                result.cpu = (target.service.cpu_seconds() - cpu_before) / result.elapsed
        target.rows.setdefault((era, concurrency), []).append(Row.of(result))
        self.say(
            f"  {target.name:18} {era:6} C={concurrency:<3} {result.rps:9.0f} req/s  p50 {result.p50_ms:7.2f} ms"
            f"  p99 {result.p99_ms:7.2f} ms  errors {result.errors}" + ("  (capped)" if result.capped else "")
        )

    # -- pool scaling ---------------------------------------------------------------------

    def pool_scaling(self) -> None:
        plan = self.plan
        backend = [*procs.echo_command(slow=True), "--work-ms", str(plan.slow_work_ms)]
        gateways = {
            size: procs.gateway(
                f"gateway-pool{size}",
                self.log_dir,
                "--pool-min",
                str(size),
                "--pool-max",
                str(size),
                "--max-in-flight",
                "1",
                backend=backend,
            )
            for size in plan.pool_sizes
        }
        self.say(f"pool: slow backend ({plan.slow_work_ms:g} ms per call, serial), pool sizes {plan.pool_sizes}")
        runs: dict[int, list[Row]] = {size: [] for size in plan.pool_sizes}
        with self._services(list(gateways.values())):
            for gw in gateways.values():  # every child started and warm before timing
                run(http_load(gw.port, era="modern", concurrency=plan.pool_concurrency, calls=2, max_seconds=10))
            for _ in range(plan.reps):
                for size, gw in gateways.items():
                    result = run(
                        http_load(
                            gw.port,
                            era="modern",
                            concurrency=plan.pool_concurrency,
                            calls=plan.pool_calls,
                            max_seconds=60,
                        )
                    )
                    runs[size].append(Row.of(result))
                    self.say(
                        f"  pool {size}: {result.rps:7.0f} req/s  p50 {result.p50_ms:6.1f} ms  errors {result.errors}"
                    )
        self.results.pool = {size: Row.median(rows) for size, rows in runs.items()}

    # -- workers ----------------------------------------------------------------------------

    WORKER_COUNTS = (1, 2)

    def workers_scaling(self) -> None:
        """``--workers 1`` vs ``--workers 2`` on the echo server at the highest concurrency;
        CPU is the supervisor's and its workers' (children not included), as in the load rows."""
        plan = self.plan
        concurrency = max(plan.concurrencies)
        gateways = {
            n: procs.gateway(f"gateway-workers{n}", self.log_dir, "--workers", str(n)) for n in self.WORKER_COUNTS
        }
        self.say(f"workers: --workers {' vs '.join(map(str, self.WORKER_COUNTS))} at C={concurrency}")
        runs: dict[tuple[int, str], list[Row]] = {}
        with self._services(list(gateways.values())):
            for gw in gateways.values():  # every worker's child started before timing
                for era in ("modern", "legacy"):
                    run(http_load(gw.port, era=era, concurrency=concurrency, calls=2, max_seconds=10))
            for _ in range(plan.reps):
                for n, gw in gateways.items():
                    for era in ("modern", "legacy"):
                        pids = [gw.pid, *procs.children(gw.pid)]
                        before = sum(procs.cpu_of(pid) for pid in pids)
                        result = run(
                            http_load(
                                gw.port,
                                era=era,
                                concurrency=concurrency,
                                calls=plan.calls[concurrency],
                                max_seconds=plan.max_seconds,
                            )
                        )
                        if result.elapsed:
                            result.cpu = (sum(procs.cpu_of(pid) for pid in pids) - before) / result.elapsed
                        runs.setdefault((n, era), []).append(Row.of(result))
                        self.say(
                            f"  --workers {n} {era:6} C={concurrency}: {result.rps:7.0f} req/s  "
                            f"p50 {result.p50_ms:6.1f} ms  errors {result.errors}"
                        )
        self.results.workers = {key: Row.median(rows) for key, rows in runs.items()}

    # -- streaming and large replies --------------------------------------------------------

    def streaming_and_large(self) -> None:
        plan = self.plan
        limit = str(max(plan.large_mb) * 2 * MB + MB)
        gw = procs.gateway("gateway-stream", self.log_dir, "--max-line-bytes", limit)
        echo = procs.echo_command()
        flood: dict[str, list[scenarios.StreamResult]] = {"gateway": [], "floor (pipe)": []}
        paced: dict[str, list[scenarios.StreamResult]] = {"gateway": [], "floor (pipe)": []}
        large: dict[int, tuple[list[float], list[float]]] = {size: ([], []) for size in plan.large_mb}
        self.say(f"streaming: {plan.stream_flood} notifications flat out, {plan.stream_paced} paced; large replies")
        with self._services([gw]):
            run(scenarios.gateway_stream(gw.port, 10, 0))  # warm: the tool list is fetched once
            for _ in range(plan.reps):
                flood["gateway"].append(run(scenarios.gateway_stream(gw.port, plan.stream_flood, 0)))
                flood["floor (pipe)"].append(run(scenarios.floor_stream(echo, plan.stream_flood, 0)))
                paced["gateway"].append(
                    run(scenarios.gateway_stream(gw.port, plan.stream_paced, plan.stream_interval_ms))
                )
                paced["floor (pipe)"].append(
                    run(scenarios.floor_stream(echo, plan.stream_paced, plan.stream_interval_ms))
                )
            for _ in range(plan.reps):
                for size in plan.large_mb:
                    large[size][0].append(run(scenarios.gateway_blob(gw.port, size * MB)))
                    large[size][1].append(run(self._floor_blob(echo, size * MB)))
        for name in flood:
            self.results.stream[name] = {"flood": _median_stream(flood[name]), "paced": _median_stream(paced[name])}
        for size, (gateway_times, floor_times) in large.items():
            self.results.large[size] = (scenarios.median(gateway_times), scenarios.median(floor_times))
            self.say(
                f"  {size} MB: gateway {self.results.large[size][0]:.3f} s, floor {self.results.large[size][1]:.3f} s"
            )

    @staticmethod
    async def _floor_blob(argv: list[str], size: int) -> float:
        async with PipeClient(argv) as client:
            return await scenarios.floor_blob(client, size)

    # -- memory -----------------------------------------------------------------------------

    def memory(self) -> None:
        plan = self.plan
        # Streams are spread over principals (the gateway caps in-flight requests per principal).
        principals = ("--principal-header", scenarios.PRINCIPAL_HEADER, "--trusted-proxy", "127.0.0.1")
        gw = procs.gateway("gateway-memory", self.log_dir, *principals)
        self.say(f"memory: idle, {plan.memory_requests} requests, {plan.memory_streams} streams at once")
        with self._services([gw]):
            time.sleep(0.5)  # let start-up garbage settle before the idle reading
            idle = scenarios.mb(gw.rss_bytes())
            first = plan.memory_requests // 5
            ok1, err1 = run(scenarios.mixed_requests(gw.port, first, plan.memory_concurrency))
            warm = scenarios.mb(gw.rss_bytes())
            ok2, err2 = run(scenarios.mixed_requests(gw.port, plan.memory_requests - first, plan.memory_concurrency))
            after = scenarios.mb(gw.rss_bytes())
            opened, completed, open_mb, released_mb, open_seconds, refusal = run(
                scenarios.hold_streams(gw, plan.memory_streams)
            )
        self.results.memory = scenarios.MemoryResult(
            idle,
            warm,
            after,
            ok1 + ok2,
            err1 + err2,
            plan.memory_streams,
            opened,
            completed,
            open_mb,
            released_mb,
            open_seconds,
            refusal,
        )
        m = self.results.memory
        self.say(
            f"  RSS idle {m.idle_mb:.1f} MB, after {m.requests} requests {m.after_mb:.1f} MB, "
            f"{m.streams_open} streams open {m.open_mb:.1f} MB, {m.streams_completed}/{m.streams} completed"
        )

    # -- cold start -------------------------------------------------------------------------

    def cold_start(self) -> None:
        plan = self.plan
        backend = [*procs.echo_command(), "--start-delay", str(plan.cold_delay)]
        self.say(f"cold start: a server that sleeps {plan.cold_delay:g} s before reading stdin")
        cases = {
            "pre-warmed (--pool-min 1)": (["--pool-min", "1"], "/readyz"),
            "on demand (--pool-min 0)": (["--pool-min", "0", "--pool-max", "1"], "/healthz"),
        }
        for label, (flags, ready_path) in cases.items():
            gw = procs.gateway("gateway-cold-" + flags[1], self.log_dir, *flags, backend=backend)
            gw.start()
            try:
                gw.wait_ready(path=ready_path)
                latency, ok = run(scenarios.first_call(gw.port))
                since_launch = time.perf_counter() - gw.started_at
            finally:
                gw.stop()
            self.results.cold[label] = (since_launch, latency, ok)
            self.say(f"  {label}: first answer {since_launch:.2f} s after launch, the call itself took {latency:.3f} s")


def _median_stream(results: list[scenarios.StreamResult]) -> scenarios.StreamResult:
    return scenarios.StreamResult(
        results[0].sent,
        int(scenarios.median([r.received for r in results])),
        scenarios.median([r.per_second for r in results]),
        scenarios.median([r.p50_ms for r in results]),
        scenarios.median([r.p99_ms for r in results]),
    )


async def probe(port: int, era: str, extra: dict[str, str] | None = None) -> str | None:
    """None when the server answers one echo call in ``era`` (``extra``: headers to send
    with it, e.g. ``authorization``); else what went wrong."""
    conn = await Connection("127.0.0.1", port).open()
    try:
        if era == "legacy":
            session_id = await open_session(conn, "/mcp", extra)
            headers = legacy_headers(session_id, initialized=True)
            body = call_body(1, "echo", {"message": "hello"}, modern=False)
        else:
            headers = modern_headers()
            body = call_body(1, "echo", {"message": "hello"}, modern=True)
        headers.update(extra or {})
        answer = await asyncio.wait_for(conn.request(request_bytes(conn.host, conn.port, "/mcp", headers, body)), 30)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"[:200]
    finally:
        conn.close()
    if answer.status != 200 or b'"result"' not in answer.body:
        return f"HTTP {answer.status}: {answer.body[:160].decode(errors='replace')}"
    return None
