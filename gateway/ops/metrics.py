"""Prometheus metrics: request metrics observed as requests end, everything else read at scrape.

Request counters and latency histograms are the only work on the request path (two dict
lookups and a few additions, ``RequestMetrics``). Pools, children and sessions are read when
``/metrics`` is scraped, from the counters they keep anyway, so an idle gateway costs nothing.
Each app has its own registry (several gateways can live in one process, as in tests), with
prometheus_client's process, platform and GC collectors registered on it. docs/operations.md
lists every metric with its type, labels and label values; this is the short form:

| metric | type | labels |
|---|---|---|
| ``mcp_gateway_requests_total`` | counter | server, method, era, status, outcome |
| ``mcp_gateway_request_seconds`` | histogram (``LATENCY_BUCKETS``) | server, method, era |
| ``mcp_gateway_requests_in_flight`` | gauge | server |
| ``mcp_gateway_queue_waiting``, ``mcp_gateway_children`` (+ state) | gauge | server, pool |
| ``mcp_gateway_child_spawns_total``, ``…_restarts_total``, ``…_exits_total`` (+ reason) | counter | server, pool |
| ``mcp_gateway_child_start_seconds`` | histogram (``gateway.stdio.tally.START_BUCKETS``) | server, pool |
| ``_CHILD_COUNTERS``' (cancels, timeouts, non-JSON and oversized lines, bytes, questions) | counter | server, pool |
| ``mcp_gateway_children_resident_bytes`` (Linux) | gauge | server |
| ``mcp_gateway_children_cpu_seconds_total`` (Linux) | counter | server |
| ``mcp_gateway_sessions``, ``mcp_gateway_session_streams`` | gauge | server |
| ``mcp_gateway_server_state`` (1 for its state, else 0) | gauge | server, state |
| ``mcp_gateway_build_info`` (1) | gauge | version, python |
| ``mcp_gateway_state_key`` (1 per key of the state keyring) | gauge | fingerprint, position |
| ``mcp_gateway_connections_open``, ``…_max`` (gauge), ``…_refused_total`` (counter) | – | – |
| ``mcp_gateway_scrape_failures_total`` | counter | part, server |
| ``process_*``, ``python_*`` | prometheus_client's | theirs |

**Counters never fall.** A server's child counters include the pools it has dropped
(``Router.tallies``: a pool's tally is kept by pool kind once it has ended), so none falls when
an idle principal's or session's pool goes; a child's CPU time is the highest its process group
was read at (``gateway.stdio.usage``), kept when it exits.

**A fault in one part of the page costs that part only.** Each collector of the gateway's own
(requests, log drops, state keys), the one read of the children's usage, and each server's
series (its pools, children, sessions, state and usage) are collected in a failure domain of
their own (``ScrapeFailures``): a part that raises is left out of that
scrape, counted in ``mcp_gateway_scrape_failures_total{part, server}``, and logged with its
traceback the first time (an ERROR; later ones are only counted, so a scrape every 15 s does
not fill the log). The rest of the page, and every other server's series, are served as
always; a server's series are all left out together (never half of them). Before, one fault
anywhere failed the whole page with a 500 (a stalled child's state once did), leaving an
operator blind to every server exactly when one misbehaved. Alert on
``increase(mcp_gateway_scrape_failures_total[10m]) > 0``.

**Label values are bounded and have no spaces.** Every one comes from a fixed set or from the
configuration (server names; the state keys' fingerprints, at most
``gateway.protocol.keyring.MAX_STATE_KEYS``), never from a client: a JSON-RPC method outside
``METHOD_LABELS`` counts as ``other`` (a client sending unique names would otherwise grow the
registry, and the unauthenticated page, without bound); ``pool`` is the pool's kind (``shared``, ``principal``,
``session``), never a principal or session. ``status`` is the HTTP status sent, or ``499`` when
the client left before any was; ``outcome`` is ``ok``, ``error`` (a JSON-RPC error answer,
whatever its status) or ``cancelled`` (the client went away, or cancelled the request, before
the answer); ``reason`` is ``code_N``, a signal's name, ``start_failure`` or ``gateway_fault``
(``label_value``).
"""

from __future__ import annotations

import logging
import math
import platform
import time
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import partial
from itertools import accumulate
from typing import Final, NamedTuple, TypeVar

import prometheus_client.metrics
from prometheus_client import CollectorRegistry, GCCollector, Info, PlatformCollector, ProcessCollector
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString  # fenced: prometheus_client.floatToGoString

from gateway.ops.logs import DROPPED
from gateway.relay.readiness import ServerState
from gateway.relay.router import Router
from gateway.relay.sessions import SessionStore
from gateway.relay.statekeys import StateKeys
from gateway.stdio import usage
from gateway.stdio.member import CHILD_STATES, member_state
from gateway.stdio.pool import Pool
from gateway.stdio.tally import START_BUCKETS

log = logging.getLogger("gateway.metrics")
_T = TypeVar("_T")

LATENCY_LABELS: Final = ("server", "method", "era")
LATENCY_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
_MCP_METHODS: Final = (
    # MCP requests and notifications a client sends, in every revision (digest §1).
    "initialize", "ping", "server/discover", "tools/list", "tools/call", "prompts/list", "prompts/get",
    "resources/list", "resources/templates/list", "resources/read", "resources/subscribe",
    "resources/unsubscribe", "subscriptions/listen", "completion/complete", "logging/setLevel",
    "tasks/get", "tasks/result", "tasks/list", "tasks/cancel",
    "notifications/initialized", "notifications/cancelled", "notifications/progress",
    "notifications/roots/list_changed", "notifications/elicitation/complete",
    "sampling/createMessage", "elicitation/create", "roots/list",
    # What the gateway calls a JSON-RPC response a client POSTs.
    "response",
    # Requests refused before their body was read are labelled with the HTTP method.
    "GET", "POST", "DELETE", "OPTIONS", "HEAD", "PUT", "PATCH",
)  # fmt: skip
METHOD_LABELS: Final[Mapping[str, str]] = {
    **{method: method for method in _MCP_METHODS},
    # The gateway's names for a legacy session's requests without a JSON-RPC method (the access
    # log's words), as label values without spaces.
    "GET stream": "get_stream",
    "DELETE session": "delete_session",
}
"""The ``method`` label of each method counted by name; any other is counted as ``other``."""
OUTCOMES: Final = ("ok", "error", "cancelled")
_CHILD_COUNTERS: Final = {
    "cancels_sent": ("mcp_gateway_cancellations_sent", "notifications/cancelled sent to children"),
    "timeouts": ("mcp_gateway_timeouts", "requests that timed out in the gateway"),
    "non_json_lines": ("mcp_gateway_non_json_lines", "stdout lines from children that were not JSON-RPC"),
    "oversized_lines": ("mcp_gateway_oversized_lines", "stdout lines over the line limit"),
    "bytes_in": ("mcp_gateway_child_bytes_in", "bytes read from children's stdout"),
    "bytes_out": ("mcp_gateway_child_bytes_out", "bytes written to children's stdin"),
    "questions_to_clients": (
        "mcp_gateway_child_questions_to_clients",
        "children's questions (sampling, elicitation, roots) attributed to a client request",
    ),
    "questions_answered_by_gateway": (
        "mcp_gateway_child_questions_answered_by_gateway",
        "children's questions the gateway answered in a client's place (unattributable, undeclared, unanswered)",
    ),
}


class GatewayMetrics:
    def __init__(
        self, routers: Sequence[Router], sessions: Callable[[str], SessionStore | None], *, version: str = "0"
    ) -> None:
        """``sessions(server)``: that server's legacy sessions (None: none yet, the service is not
        open); ``version``: the gateway's (``mcp_gateway_build_info``)."""
        self.registry = CollectorRegistry(auto_describe=True)
        self.failures = ScrapeFailures()
        self.requests = RequestMetrics()
        self.register(self.requests, "requests")
        self.registry.register(_PoolCollector(routers, sessions, self.failures))  # contained per server
        self.register(LogDropMetrics(), "log_drops")
        self.registry.register(self.failures)
        # The default registry's collectors, on this app's own registry: process_* (CPU, memory,
        # open files, start time of this process) and python_* (the interpreter, its collector).
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        build = Info("mcp_gateway_build", "The gateway's version and the Python it runs on", registry=self.registry)
        build.info({"version": version, "python": platform.python_version()})
        self.observe: Final = self.requests.observe
        """A request answered: ``RequestMetrics.observe`` itself (one call frame, not two, a request)."""

    def register(self, collector: Collector, part: str) -> None:
        """``collector`` on this registry, in a failure domain of its own (``part``: its name
        in ``mcp_gateway_scrape_failures_total``; module docstring)."""
        self.registry.register(_Contained(collector, part, self.failures))

    def enter(self, server: str) -> None:
        """A request to ``server`` (a configured name) began: one more in flight."""
        in_flight = self.requests.in_flight
        in_flight[server] = in_flight.get(server, 0) + 1

    def leave(self, server: str) -> None:
        self.requests.in_flight[server] -= 1


class ScrapeFailures(Collector):
    """The failure domains of a scrape (module docstring): ``attempt`` runs one part's
    collection; a fault in it is counted by part and server (labels from the code and the
    configuration only) and logged the first time each. Serves
    ``mcp_gateway_scrape_failures_total``."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()

    def expect(self, part: str, server: str = "") -> None:
        """Serve ``part``'s count from 0: a series that first appears at 1 would hide its first
        failure from ``increase()``."""
        self.counts[(part, server)] += 0

    def attempt(self, part: str, server: str, collect: Callable[[], _T]) -> _T | None:
        """What ``collect`` returns, or None when it raises (counted, and logged once)."""
        try:
            return collect()
        except Exception as exc:
            key = (part, server)
            if not self.counts[key]:
                where = f"the series of server {server}" if server else f"the {part} metrics"
                log.error(
                    "/metrics: collecting %s failed: %r; left out of this scrape (and counted in "
                    "mcp_gateway_scrape_failures_total, not logged again); the rest of the page is served",
                    where,
                    exc,
                    exc_info=exc,
                )
            self.counts[key] += 1
            return None

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "mcp_gateway_scrape_failures",
            "Parts of /metrics left out of a scrape because collecting them failed, by part and server",
            labels=["part", "server"],
        )
        for (part, server), count in list(self.counts.items()):
            family.add_metric([part, server], count)
        yield family


class _Contained(Collector):
    """A collector whose families are left out of a scrape when collecting them fails (``ScrapeFailures``)."""

    def __init__(self, inner: Collector, part: str, failures: ScrapeFailures) -> None:
        self.inner, self.part, self.failures = inner, part, failures
        failures.expect(part)

    def collect(self) -> Iterable[Metric]:
        return self.failures.attempt(self.part, "", lambda: list(self.inner.collect())) or []


class LogDropMetrics(Collector):
    """``mcp_gateway_log_lines_dropped_total``: log lines dropped because the log output fell
    ``MAX_LOG_QUEUE_LINES`` behind (``gateway.ops.logs``), read at scrape."""

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "mcp_gateway_log_lines_dropped",
            "Log lines dropped because the log output fell behind (MAX_LOG_QUEUE_LINES waited)",
        )
        family.add_metric([], DROPPED.total)
        yield family


class StateKeyMetrics(Collector):
    """``mcp_gateway_state_key``: 1 for each key of the state keyring in force, by fingerprint
    (never the key) and position (``current``, ``previous``), read at scrape: while rotating,
    ``count by (fingerprint) (mcp_gateway_state_key{position="current"})`` says which replicas
    sign with which key."""

    def __init__(self, keys: StateKeys) -> None:
        self.keys = keys

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "mcp_gateway_state_key",
            "The keys of the state keyring in force (--state-secret-file), by fingerprint: 1 each",
            labels=["fingerprint", "position"],
        )
        for index, fingerprint in enumerate(self.keys.ring.fingerprints):
            family.add_metric([fingerprint, "current" if index == 0 else "previous"], 1)
        yield family


class ConnectionMetrics(Collector):
    """``mcp_gateway_connections_open``, ``mcp_gateway_connections_max`` and
    ``mcp_gateway_connections_refused_total``: the main listener's connections against
    ``--max-connections``, read at scrape from ``read`` (open, cap, refused so far)."""

    def __init__(self, read: Callable[[], tuple[int, int | None, int]]) -> None:
        self.read = read

    def collect(self) -> Iterator[Metric]:
        open_now, cap, refused = self.read()
        yield GaugeMetricFamily(
            "mcp_gateway_connections_open", "Connections the listener holds now, from all clients", value=open_now
        )
        if cap is not None:
            yield GaugeMetricFamily(
                "mcp_gateway_connections_max", "Connections the listener holds at most (--max-connections)", value=cap
            )
        yield CounterMetricFamily(
            "mcp_gateway_connections_refused",
            "Connections refused with 503 because the listener held --max-connections already",
            value=refused,
        )


class _Latencies:
    """One histogram child: the count per bucket (not cumulative), the sum, when it was made."""

    __slots__ = ("counts", "created", "sum")

    def __init__(self) -> None:
        self.counts = [0.0] * len(_BOUNDS)
        self.sum = 0.0
        self.created = time.time()


_BOUNDS: Final = (*LATENCY_BUCKETS, math.inf)
_BOUND_LABELS: Final = tuple(floatToGoString(bound) for bound in _BOUNDS)  # type: ignore[no-untyped-call]
_START_LES: Final = tuple(floatToGoString(bound) for bound in (*START_BUCKETS, math.inf))  # type: ignore[no-untyped-call]


class RequestMetrics(Collector):
    """``mcp_gateway_requests_total``, ``mcp_gateway_request_seconds`` and
    ``mcp_gateway_requests_in_flight``, kept as plain numbers by label values and turned into
    metric families at scrape time: the same series a ``Counter``, a ``Histogram`` and a
    ``Gauge`` would give (``_created`` included), without their lock and label checks on
    every request. Every label comes from a bounded set (see the module docstring). Updated
    and scraped on the event loop."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str, str, int, str], list[float]] = {}  # labels → [count, created]
        self.latencies: dict[tuple[str, str, str], _Latencies] = {}
        self.in_flight: dict[str, int] = {}
        self._series: dict[tuple[str, str, str, int, str], tuple[list[float], _Latencies]] = {}
        """Labels → their count and their histogram (in ``counts`` and ``latencies``): one look-up a request."""

    def observe(self, server: str, method: str, era: str, status: int, outcome: str, seconds: float) -> None:
        """A request answered: ``method`` is counted under its label (``METHOD_LABELS``, else
        ``other``), so a client sending unique names grows no table."""
        method = METHOD_LABELS.get(method, "other")
        series = self._series.get((server, method, era, status, outcome))
        if series is None:
            series = self._add(server, method, era, status, outcome)
        series[0][0] += 1.0
        latencies = series[1]
        latencies.counts[bisect_left(_BOUNDS, seconds)] += 1.0  # the first bucket whose bound is ≥ seconds
        latencies.sum += seconds

    def _add(self, server: str, method: str, era: str, status: int, outcome: str) -> tuple[list[float], _Latencies]:
        """The count and the histogram of labels seen for the first time (the histogram may be
        known already: it has no ``status`` or ``outcome`` label)."""
        key = (server, method, era, status, outcome)
        count = self.counts.get(key)
        if count is None:
            count = self.counts[key] = [0.0, time.time()]
        latencies = self.latencies.get(key[:3])
        if latencies is None:
            latencies = self.latencies[key[:3]] = _Latencies()
        series = self._series[key] = (count, latencies)
        return series

    def collect(self) -> Iterator[Metric]:
        # fenced: prometheus_client._use_created
        created = getattr(prometheus_client.metrics, "_use_created", True)  # PROMETHEUS_DISABLE_CREATED_SERIES
        requests = CounterMetricFamily(
            "mcp_gateway_requests",
            "MCP requests answered, by JSON-RPC method, client era, HTTP status and outcome",
            labels=["server", "method", "era", "status", "outcome"],
        )
        for (server, method, era, status, outcome), (value, since) in list(self.counts.items()):
            requests.add_metric([server, method, era, str(status), outcome], value, created=since if created else None)
        latency = HistogramMetricFamily(
            "mcp_gateway_request_seconds",
            "Time from request to the end of the answer (the whole stream for SSE)",
            labels=LATENCY_LABELS,
        )
        for labels, latencies in list(self.latencies.items()):
            buckets = list(zip(_BOUND_LABELS, accumulate(latencies.counts), strict=True))
            latency.add_metric(list(labels), buckets, latencies.sum)
            if created:
                series = dict(zip(LATENCY_LABELS, labels, strict=True))
                latency.samples.append(Sample(latency.name + "_created", series, latencies.created))
        in_flight = GaugeMetricFamily("mcp_gateway_requests_in_flight", "Requests being answered", labels=["server"])
        for server, value in list(self.in_flight.items()):
            in_flight.add_metric([server], value)
        yield from (requests, latency, in_flight)


def method_label(method: str) -> str:
    """``method``'s label (``METHOD_LABELS``), else ``other``."""
    return METHOD_LABELS.get(method, "other")


def label_value(text: str) -> str:
    """A label value without spaces: an exit reason (``code 0`` → ``code_0``, ``start failure``
    → ``start_failure``), a worker (``worker 2 of 3`` → ``worker_2_of_3``)."""
    return text.replace(" ", "_")


class _Families(NamedTuple):
    """The pool collector's families, each server's samples added to them."""

    children: GaugeMetricFamily
    waiting: GaugeMetricFamily
    spawns: CounterMetricFamily
    restarts: CounterMetricFamily
    exits: CounterMetricFamily
    starts: HistogramMetricFamily
    counters: dict[str, CounterMetricFamily]
    sessions: GaugeMetricFamily
    streams: GaugeMetricFamily
    server_states: GaugeMetricFamily
    resident: GaugeMetricFamily
    cpu: CounterMetricFamily


class _PoolCollector(Collector):
    def __init__(
        self, routers: Sequence[Router], sessions: Callable[[str], SessionStore | None], failures: ScrapeFailures
    ) -> None:
        self.routers = routers
        self.sessions = sessions
        self.failures = failures
        for router in routers:
            failures.expect("server", router.server.name)
        if usage.READABLE:
            failures.expect("children_usage")

    def collect(self) -> Iterator[Metric]:
        labels = ["server", "pool"]
        families = _Families(
            children=GaugeMetricFamily("mcp_gateway_children", "Children by state", labels=[*labels, "state"]),
            waiting=GaugeMetricFamily("mcp_gateway_queue_waiting", "Requests waiting for a free child", labels=labels),
            spawns=CounterMetricFamily("mcp_gateway_child_spawns", "Children started", labels=labels),
            restarts=CounterMetricFamily(
                "mcp_gateway_child_restarts", "Children restarted after an exit", labels=labels
            ),
            exits=CounterMetricFamily("mcp_gateway_child_exits", "Child exits by reason", labels=[*labels, "reason"]),
            starts=HistogramMetricFamily(
                "mcp_gateway_child_start_seconds", "Cold starts: spawn to handshake done", labels=labels
            ),
            counters={
                key: CounterMetricFamily(name, doc, labels=labels) for key, (name, doc) in _CHILD_COUNTERS.items()
            },
            sessions=GaugeMetricFamily("mcp_gateway_sessions", "Open legacy sessions", labels=["server"]),
            streams=GaugeMetricFamily("mcp_gateway_session_streams", "Open legacy GET streams", labels=["server"]),
            server_states=GaugeMetricFamily(
                "mcp_gateway_server_state",
                "1 for the state each server is in (ready, starting, failing), 0 for the others",
                labels=["server", "state"],
            ),
            resident=GaugeMetricFamily(
                "mcp_gateway_children_resident_bytes",
                "Resident memory of the server's live children (each child's process group)",
                labels=["server"],
            ),
            cpu=CounterMetricFamily(
                "mcp_gateway_children_cpu_seconds",
                "CPU time of the server's children (each child's process group), exited children included",
                labels=["server"],
            ),
        )
        # The children's usage: one pass over /proc for every server (None: not on this system,
        # or the read failed, which leaves out the usage families alone).
        groups = self.failures.attempt("children_usage", "", self._read_usage) if usage.READABLE else None
        for router in self.routers:
            # Each server's samples are worked out first and added only when all of them were:
            # a fault leaves out that server's series, whole, and no other server's.
            for add in (
                self.failures.attempt("server", router.server.name, partial(self._samples, router, families, groups))
                or ()
            ):
                add()
        f = families
        yield from (f.children, f.waiting, f.spawns, f.restarts, f.exits, f.starts, *f.counters.values())
        yield from (f.sessions, f.streams, f.server_states)
        if groups is not None:
            yield from (f.resident, f.cpu)

    def _read_usage(self) -> dict[int, usage.GroupUsage]:
        """Every live child's process group's usage (``gateway.stdio.usage``), by the child's pid."""
        pids = {
            m.child.pid for r in self.routers for pool in r.live_pools() for m in pool.members if m.child is not None
        }
        return usage.read_groups(pids)

    def _samples(
        self, router: Router, f: _Families, groups: Mapping[int, usage.GroupUsage] | None
    ) -> list[Callable[[], None]]:
        """One server's samples, each to be added to its family (``groups``: the children's
        usage, when read)."""
        samples: list[Callable[[], None]] = []
        add = samples.append
        name = router.server.name
        if groups is not None:
            add(partial(f.resident.add_metric, [name], self._usage(router, groups)))
            cpu_us = sum(tally.children.get("cpu_us", 0) for tally in router.tallies().values())
            add(partial(f.cpu.add_metric, [name], cpu_us / 1_000_000))
        current = router.state()
        for server_state in ServerState:
            add(partial(f.server_states.add_metric, [name, server_state.value], 1 if server_state is current else 0))
        store = self.sessions(name)
        if store is not None:
            add(partial(f.sessions.add_metric, [name], len(store)))
            add(partial(f.streams.add_metric, [name], store.open_streams()))
        # Pools are aggregated by kind (shared, principal, session): a label per principal,
        # session or credential would put identities on an unauthenticated endpoint and
        # grow without bound.
        by_kind: dict[str, list[Pool]] = {}
        for pool_key, pool in list(router.pools.items()):
            by_kind.setdefault(pool_key.kind, []).append(pool)
        for kind, pools in by_kind.items():
            states = dict.fromkeys(CHILD_STATES, 0)
            for pool in pools:
                for member in pool.members:
                    states[member_state(member)] += 1
            for state, count in states.items():
                add(partial(f.children.add_metric, [name, kind, state], count))
            add(partial(f.waiting.add_metric, [name, kind], sum(pool.dispatch.waiting for pool in pools)))
        # Counters: the pools gone count too, so none falls when an idle pool is dropped.
        for kind, tally in router.tallies().items():
            key = [name, kind]
            add(partial(f.spawns.add_metric, key, tally.spawns))
            add(partial(f.restarts.add_metric, key, tally.restarts))
            for reason, count in tally.exits.items():
                add(partial(f.exits.add_metric, [*key, label_value(reason)], count))
            buckets = [(le, count) for le, (_, count) in zip(_START_LES, tally.starts.buckets(), strict=True)]
            add(partial(f.starts.add_metric, key, buckets, tally.starts.sum))
            for counter_key, family in f.counters.items():
                add(partial(family.add_metric, key, tally.children.get(counter_key, 0)))
        return samples

    @staticmethod
    def _usage(router: Router, groups: Mapping[int, usage.GroupUsage]) -> int:
        """Resident bytes of ``router``'s live children, their process groups summed. Each live
        child keeps its highest CPU reading, which its pool keeps when it exits: the CPU counter
        never falls."""
        rss = 0
        for pool in router.live_pools():
            for member in pool.members:
                child = member.child
                group = groups.get(child.pid) if child is not None else None
                if child is not None and group is not None:
                    child.note_cpu(group.cpu_seconds)
                    rss += group.rss_bytes
        return rss
