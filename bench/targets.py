"""``python -m bench`` (the default): issue #14's targets, measured in one run.

Groups, each with its own server processes (``--only`` picks some):

* ``load`` — C = 64 closed-loop ``tools/call`` on the echo server, both eras: the gateway
  with its default flags, the gateway with a bearer token required, every installed peer
  (``bench/install-peers.sh``) and the load generator's raw ceiling (``bench/noop.py``).
  Repetitions interleave the servers (rep → server → era) so drift on a shared machine hits
  them alike; rows are medians. While one server is measured every other one is paused
  (SIGSTOP to its process group): an idle Node peer's timers and GC, or a process-per-request
  peer's leftovers, would otherwise take CPU from the server under test on a 2-core machine
  (without the pause the gateway measured about 600 µs per call against 380 µs alone).
  The gateway's CPU is read from ``/proc`` just before the first call and after the last
  answer, so ``CPU µs/call`` excludes session setup.
* ``c1`` — C = 1 p50 of the gateway (both eras) against the stdio floor: the same loop
  over one pipe to the echo server (``bench/floor.py``), no HTTP; and of every installed
  peer, both eras, to compare overheads over the floor (issue #42). As in ``load``, each
  repetition measures every server in turn (floor, gateway, peers) with the others paused.
* ``stream`` — one modern call whose child writes 2,000 progress notifications flat out.
* ``memory`` — gateway RSS after a run of requests (both eras), then with 1,000 SSE
  streams held open at once.
* ``profile`` (only with ``--profile``) — py-spy on the gateway at C = 64, each era.

The verdicts and the tables are ``bench.verdicts``; this module only measures.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from bench import procs, scenarios
from bench.load import Row, floor_load, http_load
from bench.procs import Service
from bench.suite import probe, run

GATEWAY = "gateway"
GATEWAY_AUTH = "gateway (bearer auth)"
CEILING = "ceiling (raw)"
BRIDGE = "bridge (bare uvicorn)"
"""``bench/bridge.py``: the least a correct uvicorn gateway does per call; shown, never a peer."""
PROTOCOL_BRIDGE = "bridge (bare protocol)"
"""``bench/bridge.py --kind protocol``: the same bridge with no HTTP server library and no task
per request, the least any gateway on the event loop does per call; shown, never a peer."""
BRIDGES = (BRIDGE, PROTOCOL_BRIDGE)
YARDSTICKS = (CEILING, *BRIDGES)
"""Servers measured beside the peers to read the numbers by, never compared as peers."""
FLOOR = "floor (pipe)"
GATEWAYS = (GATEWAY, GATEWAY_AUTH)
ERAS = ("modern", "legacy")
TOKEN = "bench-token-0f3c9a7e5d1b2468"
AUTH_HEADERS = {"authorization": f"Bearer {TOKEN}"}
GROUPS = ("load", "c1", "stream", "memory")
"""What ``--only`` can pick; ``profile`` runs when asked for (``--profile``)."""
C1_WARM_CALLS = 20
"""Calls each server gets at C = 1 in each era before the C = 1 runs (tool lists, children)."""
C1_MAX_SECONDS = 10.0
"""A C = 1 run stops sending after this (supergateway spawns a child per modern request)."""


@dataclass(frozen=True)
class TargetPlan:
    name: str
    reps: int
    concurrency: int
    calls: int
    """Calls per client at ``concurrency``."""
    max_seconds: float
    """A load run stops sending after this (a peer that spawns a process per call is capped)."""
    c1_calls: int
    stream_steps: int
    flood_steps: int
    """Progress notifications of the run with log messages among them (progress may coalesce)."""
    flood_log_every: int
    memory_requests: int
    memory_concurrency: int
    memory_streams: int
    peers: bool = True


DEFAULT = TargetPlan(
    "default",
    reps=3,
    concurrency=64,
    calls=60,
    max_seconds=5.0,
    c1_calls=400,
    stream_steps=2000,
    flood_steps=20_000,
    flood_log_every=100,
    memory_requests=5000,
    memory_concurrency=8,
    memory_streams=1000,
)
QUICK = TargetPlan(
    "quick",
    reps=1,
    concurrency=64,
    calls=25,
    max_seconds=3.0,
    c1_calls=200,
    stream_steps=2000,
    flood_steps=20_000,
    flood_log_every=100,
    memory_requests=1000,
    memory_concurrency=8,
    memory_streams=1000,
)
TINY = TargetPlan(
    "tiny",
    reps=1,
    concurrency=4,
    calls=5,
    max_seconds=2.0,
    c1_calls=20,
    stream_steps=50,
    flood_steps=200,
    flood_log_every=10,
    memory_requests=40,
    memory_concurrency=4,
    memory_streams=20,
    peers=False,
)
TARGET_PLANS = {plan.name: plan for plan in (DEFAULT, QUICK, TINY)}


@dataclass
class Server:
    """One server of the load group and what was measured on it."""

    name: str
    eras: tuple[str, ...]
    problem: str | None = None
    """Why it was not measured at all (not installed, did not start)."""
    unsupported: dict[str, str] = field(default_factory=dict)
    runs: dict[str, list[Row]] = field(default_factory=dict)
    rss_mb: float | None = None
    children_rss_mb: float | None = None

    def row(self, era: str) -> Row | None:
        found = self.runs.get(era)
        return Row.median(found) if found else None


@dataclass(frozen=True)
class StreamNumbers:
    sent: int
    received: int
    """The fewest notifications any repetition delivered."""
    per_second: float
    """Median notifications/s at the client."""
    final: bool
    """Every repetition got the call's result."""
    floor_per_second: float | None = None


@dataclass(frozen=True)
class MemoryNumbers:
    idle_mb: float
    steady_mb: float
    requests: int
    errors: int
    streams: int
    streams_open: int
    streams_completed: int
    open_mb: float
    refusal: str | None = None


@dataclass
class TargetResults:
    plan: TargetPlan
    groups: tuple[str, ...]
    servers: dict[str, Server] = field(default_factory=dict)
    c1: dict[str, Row] = field(default_factory=dict)
    """``floor (pipe)`` and the gateway's ``modern`` and ``legacy`` rows at C = 1."""
    c1_peers: dict[str, Server] = field(default_factory=dict)
    """Every peer at C = 1 when ``plan.peers``, as in the load group (``problem``,
    ``unsupported``, ``runs`` per era)."""
    stream: StreamNumbers | None = None
    flood: scenarios.StreamResult | None = None
    """One run of ``flood_steps`` progress with a log message every ``flood_log_every``."""
    memory: MemoryNumbers | None = None
    profile: dict[str, str] = field(default_factory=dict)
    load_average: tuple[str, str] = ("?", "?")
    """``/proc/loadavg``'s 1-minute figure before and after the run."""
    seconds: float = 0.0


@contextmanager
def paused(services: Iterable[Service]) -> Iterator[None]:
    """The servers not being measured, stopped (SIGSTOP) for the time of a measurement."""
    stopped = list(services)
    for service in stopped:
        service.pause()
    try:
        yield
    finally:
        for service in stopped:
            service.resume()


def load_average() -> str:
    try:
        with open("/proc/loadavg") as loadavg:
            return loadavg.read().split()[0]
    except (OSError, IndexError):
        return "?"


class TargetRun:
    def __init__(
        self, plan: TargetPlan, log_dir: Path, groups: tuple[str, ...], say: Callable[[str], None] = print
    ) -> None:
        self.plan = plan
        self.log_dir = log_dir
        self.say = say
        self.results = TargetResults(plan, groups)

    def run_all(self, profile: bool = False) -> TargetResults:
        started = time.perf_counter()
        before = load_average()
        steps = {"load": self.load, "c1": self.c1, "stream": self.stream, "memory": self.memory}
        for group in self.results.groups:
            steps[group]()
        if profile:
            from bench.profile import profile_gateway

            self.results.profile = profile_gateway(self.log_dir, self.say, top=15)
        self.results.load_average = (before, load_average())
        self.results.seconds = time.perf_counter() - started
        return self.results

    # -- load at C = 64 -------------------------------------------------------------------

    def _add_peers(self, servers: dict[str, Server], services: dict[str, Service]) -> None:
        """Every peer as a ``Server`` (``plan.peers``); those installed get a ``Service`` too."""
        if not self.plan.peers:
            return
        for name, make in procs.PEER_SERVICES.items():
            servers[name] = Server(name, ERAS)
            peer = make(self.log_dir)
            if peer is None:
                servers[name].problem = "not installed (run bench/install-peers.sh)"
            else:
                services[name] = peer

    def _start(self, server: Server, service: Service) -> bool:
        try:
            service.start()
            service.wait_ready()
        except (OSError, RuntimeError) as exc:
            service.stop()
            server.problem = f"did not start: {str(exc).splitlines()[0][:120]}"
            self.say(f"  {server.name}: {server.problem}")
            return False
        return True

    def load(self) -> None:
        plan = self.plan
        log = self.log_dir
        services: dict[str, Service] = {
            GATEWAY: procs.gateway("gateway", log),
            GATEWAY_AUTH: procs.gateway("gateway-auth", log, "--auth-token", f"bench:{TOKEN}"),
            CEILING: procs.noop("raw", log),
            BRIDGE: procs.bridge(log),
            PROTOCOL_BRIDGE: procs.bridge(log, "protocol"),
        }
        servers = {
            GATEWAY: Server(GATEWAY, ERAS),
            GATEWAY_AUTH: Server(GATEWAY_AUTH, ERAS),
            CEILING: Server(CEILING, ("modern",)),
            BRIDGE: Server(BRIDGE, ERAS),
            PROTOCOL_BRIDGE: Server(PROTOCOL_BRIDGE, ERAS),
        }
        self._add_peers(servers, services)
        self.results.servers = servers
        self.say(f"load: C = {plan.concurrency}, {plan.reps} repetition(s): {', '.join(servers)}")
        live: dict[str, Service] = {}
        try:
            for name, service in services.items():
                if self._start(servers[name], service):
                    live[name] = service
            for name, service in live.items():
                self._probe(servers[name], service, plan.concurrency)
            self._load_reps(servers, live)
            for name, service in live.items():
                servers[name].rss_mb = scenarios.mb(service.rss_bytes())
                servers[name].children_rss_mb = scenarios.mb(service.children_rss_bytes())
        finally:
            for service in live.values():
                service.stop()

    def _probe(self, server: Server, service: Service, concurrency: int, calls: int = 5) -> None:
        """Mark each era ``server`` does not serve; warm the others with ``calls`` per client
        at ``concurrency``, the concurrency they are measured at."""
        headers = AUTH_HEADERS if server.name == GATEWAY_AUTH else None
        if headers is not None and run(probe(service.port, "modern")) is None:
            raise RuntimeError(f"{server.name} answered a call without its token: the auth rows would measure nothing")
        for era in server.eras:
            problem = run(probe(service.port, era, headers))
            if problem is not None:
                server.unsupported[era] = problem
                self.say(f"  {server.name} {era}: not supported ({problem})")
            else:  # warm, at the measured concurrency: tool lists fetched, children started, buffers grown
                run(
                    http_load(
                        service.port, era=era, concurrency=concurrency, calls=calls, max_seconds=5, headers=headers
                    )
                )

    def _load_reps(self, servers: dict[str, Server], live: dict[str, Service]) -> None:
        plan = self.plan
        for rep in range(plan.reps):
            for name, service in live.items():
                server = servers[name]
                headers = AUTH_HEADERS if name == GATEWAY_AUTH else None
                for era in server.eras:
                    if era in server.unsupported:
                        continue
                    others = [other for other_name, other in live.items() if other_name != name]
                    with paused(others):
                        result = run(
                            http_load(
                                service.port,
                                era=era,
                                concurrency=plan.concurrency,
                                calls=plan.calls,
                                max_seconds=plan.max_seconds,
                                headers=headers,
                                cpu_clock=service.cpu_seconds,
                            )
                        )
                    server.runs.setdefault(era, []).append(Row.of(result))
                    answered = result.answered
                    per_call = result.cpu_seconds / answered * 1e6 if result.cpu_seconds and answered else 0.0
                    wrong = sum(result.wrong.values())
                    self.say(
                        f"  {name:22} {era:6} {result.rps:8,.0f} req/s  p50 {result.p50_ms:7.2f} ms  "
                        f"CPU {per_call:6,.0f} µs/call  errors {result.errors}"
                        + (f"  WRONG ANSWERS {wrong:,} of {result.ok + wrong:,}" if wrong else "")
                        + ("  (capped)" if result.capped else "")
                    )
            self.say(f"load: repetition {rep + 1}/{plan.reps} done")

    # -- C = 1 against the floor ----------------------------------------------------------------

    def c1(self) -> None:
        """The floor, the gateway's two eras, then each live peer's eras, one client, every
        repetition; whichever server is measured, the others are paused (as in ``load``)."""
        plan = self.plan
        gateway = procs.gateway("gateway-c1", self.log_dir)
        runs: dict[str, list[Row]] = {FLOOR: [], "modern": [], "legacy": []}
        peers: dict[str, Server] = {name: Server(name, ERAS) for name in BRIDGES}
        services: dict[str, Service] = {
            BRIDGE: procs.bridge(self.log_dir),
            PROTOCOL_BRIDGE: procs.bridge(self.log_dir, "protocol"),
        }
        self._add_peers(peers, services)
        self.results.c1_peers = peers
        others = len(peers) - len(BRIDGES)  # the bridges are yardsticks, not peers
        versus = f"gateway, the bare bridges and {others} peer(s)" if others else "gateway and the bare bridges"
        self.say(f"C = 1: {plan.c1_calls} calls, {versus} vs the stdio floor, {plan.reps} repetition(s)")
        live: dict[str, Service] = {GATEWAY: gateway}
        try:
            gateway.start()
            gateway.wait_ready()
            for name, service in services.items():
                if self._start(peers[name], service):
                    live[name] = service
            for era in ERAS:
                run(http_load(gateway.port, era=era, concurrency=1, calls=C1_WARM_CALLS, max_seconds=5))
            for name, service in live.items():
                if name != GATEWAY:
                    self._probe(peers[name], service, 1, C1_WARM_CALLS)
            for _ in range(plan.reps):
                with paused(live.values()):
                    floor = run(
                        floor_load(procs.echo_command(), concurrency=1, calls=plan.c1_calls, max_seconds=C1_MAX_SECONDS)
                    )
                runs[FLOOR].append(Row.of(floor))
                for era in ERAS:
                    runs[era].append(self._c1_run(gateway, era, live))
                self.say(
                    f"  p50 floor {runs[FLOOR][-1].p50_ms:.3f} ms, gateway modern {runs['modern'][-1].p50_ms:.3f} ms, "
                    f"legacy {runs['legacy'][-1].p50_ms:.3f} ms"
                )
                for name, service in live.items():
                    if name == GATEWAY:
                        continue
                    server = peers[name]
                    for era in server.eras:
                        if era in server.unsupported:
                            continue
                        found = self._c1_run(service, era, live)
                        server.runs.setdefault(era, []).append(found)
                        wrong = found.wrong_answers
                        self.say(
                            f"  {name:22} {era:6} p50 {found.p50_ms:7.3f} ms "
                            f"({found.p50_ms - runs[FLOOR][-1].p50_ms:+.3f} over the floor)  errors {found.errors}"
                            + (f"  WRONG ANSWERS {wrong:,} of {found.calls:,}" if wrong else "")
                            + ("  (capped)" if found.capped else "")
                        )
        finally:
            for service in live.values():
                service.stop()
        self.results.c1 = {name: Row.median(rows) for name, rows in runs.items()}

    def _c1_run(self, service: Service, era: str, live: dict[str, Service]) -> Row:
        """One C = 1 run of ``plan.c1_calls`` calls on ``service``, every other live server paused."""
        with paused(other for other in live.values() if other is not service):
            result = run(
                http_load(
                    service.port,
                    era=era,
                    concurrency=1,
                    calls=self.plan.c1_calls,
                    max_seconds=C1_MAX_SECONDS,
                    cpu_clock=service.cpu_seconds,
                )
            )
        return Row.of(result)

    # -- streaming -------------------------------------------------------------------------------

    def stream(self) -> None:
        plan = self.plan
        gateway = procs.gateway("gateway-stream", self.log_dir)
        gateway_runs: list[scenarios.StreamResult] = []
        floor_runs: list[scenarios.StreamResult] = []
        self.say(f"streaming: {plan.stream_steps} progress notifications written flat out by the child")
        with gateway.start():
            gateway.wait_ready()
            run(scenarios.gateway_stream(gateway.port, 10, 0))  # warm: the tool list is fetched once
            for _ in range(plan.reps):
                found = run(scenarios.gateway_stream(gateway.port, plan.stream_steps, 0, require_final=False))
                gateway_runs.append(found)
                floor_runs.append(run(scenarios.floor_stream(procs.echo_command(), plan.stream_steps, 0)))
                self.say(
                    f"  gateway {found.received}/{found.sent} at {found.per_second:,.0f}/s "
                    f"(result {'arrived' if found.final else 'MISSING'}); floor {floor_runs[-1].per_second:,.0f}/s"
                )
            self.say(
                f"streaming: {plan.flood_steps} progress flat out, a log message after every {plan.flood_log_every}"
            )
            flood = run(
                scenarios.gateway_stream(
                    gateway.port, plan.flood_steps, 0, require_final=False, log_every=plan.flood_log_every
                )
            )
        self.results.stream = StreamNumbers(
            plan.stream_steps,
            min(r.received for r in gateway_runs),
            scenarios.median([r.per_second for r in gateway_runs]),
            all(r.final for r in gateway_runs),
            scenarios.median([r.per_second for r in floor_runs]),
        )
        self.results.flood = flood
        answered = "arrived" if flood.final else "MISSING"
        self.say(
            f"  gateway: {flood.logs}/{plan.flood_steps // plan.flood_log_every} log messages, progress "
            f"{flood.received}/{flood.sent} at {flood.per_second:,.0f}/s, result {answered}"
        )

    # -- memory -----------------------------------------------------------------------------------

    def memory(self) -> None:
        plan = self.plan
        # Streams are spread over principals (the gateway caps in-flight requests per principal).
        principals = ("--principal-header", scenarios.PRINCIPAL_HEADER, "--trusted-proxy", "127.0.0.1")
        gateway = procs.gateway("gateway-memory", self.log_dir, *principals)
        self.say(f"memory: {plan.memory_requests} requests, then {plan.memory_streams} streams open at once")
        with gateway.start():
            gateway.wait_ready()
            time.sleep(0.5)  # let start-up garbage settle before the idle reading
            idle = scenarios.mb(gateway.rss_bytes())
            # The principal header is trusted from 127.0.0.1, so a request without it is refused.
            steady_principal = {scenarios.PRINCIPAL_HEADER: "steady"}
            ok, errors = run(
                scenarios.mixed_requests(gateway.port, plan.memory_requests, plan.memory_concurrency, steady_principal)
            )
            steady = scenarios.mb(gateway.rss_bytes())
            opened, completed, open_mb, _, _, refusal = run(scenarios.hold_streams(gateway, plan.memory_streams))
        self.results.memory = MemoryNumbers(
            idle, steady, ok + errors, errors, plan.memory_streams, opened, completed, open_mb, refusal
        )
        self.say(
            f"  RSS idle {idle:.1f} MB, after {ok + errors} requests {steady:.1f} MB, "
            f"{opened} streams open {open_mb:.1f} MB, {completed}/{plan.memory_streams} completed"
        )
