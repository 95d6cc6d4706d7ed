"""Prometheus metrics: request metrics observed as requests end, everything else read at scrape.

Request counters and latency histograms are the only work on the request path (one label
lookup and two increments). Pools, children and sessions are read when ``/metrics`` is
scraped, from the counters they keep anyway, so an idle gateway costs nothing.
Each app has its own registry (several gateways can live in one process, as in tests).

| metric | labels |
|---|---|
| ``mcp_gateway_requests_total`` | server, method, era, status, outcome |
| ``mcp_gateway_request_seconds`` (histogram) | server, method, era |
| ``mcp_gateway_requests_in_flight`` | server |
| ``mcp_gateway_queue_waiting`` | server, pool (``shared``, ``principal`` or ``session``: summed by kind) |
| ``mcp_gateway_children`` | server, pool, state |
| ``mcp_gateway_child_spawns_total`` / ``_restarts_total`` | server, pool |
| ``mcp_gateway_child_exits_total`` | server, pool, reason (``code 0``, ``SIGKILL``, ``start failure``) |
| ``mcp_gateway_child_start_seconds`` (summary of recent cold starts) | server, pool |
| ``mcp_gateway_cancellations_sent_total``, ``mcp_gateway_timeouts_total``, | server, pool |
| ``mcp_gateway_non_json_lines_total``, ``mcp_gateway_child_bytes_{in,out}_total`` | server, pool |
| ``mcp_gateway_child_questions_to_clients_total``, ``…_answered_by_gateway_total`` | server, pool |
| ``mcp_gateway_sessions``, ``mcp_gateway_session_streams`` | server |

Every label value comes from a fixed set or from the configuration (server names), never
from a client: a JSON-RPC method outside ``METHOD_LABELS`` counts as ``other`` (a client
sending unique names would otherwise grow the registry, and the unauthenticated page,
without bound). ``status`` is the HTTP status sent, or ``499`` when the client left before
any was; ``outcome`` is ``ok``, ``error`` (a JSON-RPC error answer, whatever its status) or
``cancelled`` (the client went away, or cancelled the request, before the answer).
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable, Iterator, Sequence
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.registry import Collector

from gateway.relay.router import Router
from gateway.relay.sessions import SessionStore
from gateway.stdio.pool import Pool

LATENCY_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
METHOD_LABELS: Final = frozenset(
    {
        # MCP requests and notifications a client sends, in every revision (digest §1).
        "initialize", "ping", "server/discover", "tools/list", "tools/call", "prompts/list", "prompts/get",
        "resources/list", "resources/templates/list", "resources/read", "resources/subscribe",
        "resources/unsubscribe", "subscriptions/listen", "completion/complete", "logging/setLevel",
        "tasks/get", "tasks/result", "tasks/list", "tasks/cancel",
        "notifications/initialized", "notifications/cancelled", "notifications/progress",
        "notifications/roots/list_changed", "notifications/elicitation/complete",
        "sampling/createMessage", "elicitation/create", "roots/list",
        # What the gateway calls requests without a JSON-RPC method.
        "response", "GET stream", "DELETE session",
        # Requests refused before their body was read are labelled with the HTTP method.
        "GET", "POST", "DELETE", "OPTIONS", "HEAD", "PUT", "PATCH",
    }
)  # fmt: skip
"""The values of the ``method`` label; any other method is counted as ``other``."""
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
    def __init__(self, routers: Sequence[Router], sessions: Callable[[str], SessionStore]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "mcp_gateway_requests",
            "MCP requests answered, by JSON-RPC method, client era, HTTP status and outcome",
            ["server", "method", "era", "status", "outcome"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "mcp_gateway_request_seconds",
            "Time from request to the end of the answer (the whole stream for SSE)",
            ["server", "method", "era"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "mcp_gateway_requests_in_flight", "Requests being answered", ["server"], registry=self.registry
        )
        self.registry.register(_PoolCollector(routers, sessions))
        # ``labels()`` checks and joins its values on every call; the children it returns are
        # kept here by label values instead. Every label comes from a bounded set (see the
        # module docstring), so these hold no more than the registry does.
        self._counted: dict[tuple[str, str, str, int, str], Counter] = {}
        self._timed: dict[tuple[str, str, str], Histogram] = {}
        self._in_flight: dict[str, Gauge] = {}

    def in_flight_of(self, server: str) -> Gauge:
        """The ``requests_in_flight`` gauge of ``server`` (a configured name)."""
        gauge = self._in_flight.get(server)
        if gauge is None:
            gauge = self._in_flight[server] = self.in_flight.labels(server)
        return gauge

    def observe(self, server: str, method: str, era: str, status: int, outcome: str, seconds: float) -> None:
        method = method if method in METHOD_LABELS else "other"
        key = (server, method, era, status, outcome)
        counter = self._counted.get(key)
        if counter is None:
            counter = self._counted[key] = self.requests.labels(server, method, era, str(status), outcome)
        counter.inc()
        timed = key[:3]
        histogram = self._timed.get(timed)
        if histogram is None:
            histogram = self._timed[timed] = self.latency.labels(server, method, era)
        histogram.observe(seconds)


def method_label(method: str) -> str:
    """``method`` when it is one of ``METHOD_LABELS``, else ``other``."""
    return method if method in METHOD_LABELS else "other"


class _PoolCollector(Collector):
    def __init__(self, routers: Sequence[Router], sessions: Callable[[str], SessionStore]) -> None:
        self.routers = routers
        self.sessions = sessions

    def collect(self) -> Iterator[Metric]:
        labels = ["server", "pool"]
        children = GaugeMetricFamily("mcp_gateway_children", "Children by state", labels=[*labels, "state"])
        waiting = GaugeMetricFamily("mcp_gateway_queue_waiting", "Requests waiting for a free child", labels=labels)
        spawns = CounterMetricFamily("mcp_gateway_child_spawns", "Children started", labels=labels)
        restarts = CounterMetricFamily("mcp_gateway_child_restarts", "Children restarted after an exit", labels=labels)
        exits = CounterMetricFamily("mcp_gateway_child_exits", "Child exits by reason", labels=[*labels, "reason"])
        starts = SummaryMetricFamily("mcp_gateway_child_start_seconds", "Recent cold starts", labels=labels)
        counters = {key: CounterMetricFamily(name, doc, labels=labels) for key, (name, doc) in _CHILD_COUNTERS.items()}
        sessions = GaugeMetricFamily("mcp_gateway_sessions", "Open legacy sessions", labels=["server"])
        streams = GaugeMetricFamily("mcp_gateway_session_streams", "Open legacy GET streams", labels=["server"])
        for router in self.routers:
            name = router.server.name
            store = self.sessions(name)
            sessions.add_metric([name], len(store))
            streams.add_metric([name], store.open_streams())
            # Pools are aggregated by kind (shared, principal, session): a label per principal,
            # session or credential would put identities on an unauthenticated endpoint and
            # grow without bound.
            by_kind: dict[str, list[Pool]] = {}
            for pool_key, pool in list(router.pools.items()):
                by_kind.setdefault(pool_key.scope.partition(":")[0], []).append(pool)
            for kind, pools in by_kind.items():
                key = [name, kind]
                states = {"ready": 0, "starting": 0, "retiring": 0}
                exit_reasons: Tally[str] = Tally()
                totals: Tally[str] = Tally()
                start_seconds: list[float] = []
                for pool in pools:
                    status = pool.status()
                    for child in status["children"]:
                        states[child["state"]] += 1
                    exit_reasons.update(pool.exits)
                    totals.update(pool.totals())
                    start_seconds += pool.start_seconds
                for state, count in states.items():
                    children.add_metric([*key, state], count)
                waiting.add_metric(key, sum(pool.status()["waiting"] for pool in pools))
                spawns.add_metric(key, sum(pool.spawns for pool in pools))
                restarts.add_metric(key, sum(pool.restarts for pool in pools))
                for reason, count in exit_reasons.items():
                    exits.add_metric([*key, reason], count)
                starts.add_metric(key, count_value=len(start_seconds), sum_value=sum(start_seconds))
                for counter_key, family in counters.items():
                    family.add_metric(key, totals.get(counter_key, 0))
        yield from (children, waiting, spawns, restarts, exits, starts, *counters.values(), sessions, streams)
