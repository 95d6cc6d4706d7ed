"""Request limits, each named with its reason; ``gateway.http.edge`` applies them.

- Headers (``header_problem``): at most ``MAX_HEADERS`` headers, ``MAX_HEADER_BYTES`` in all, and
  ``MAX_MCP_HEADER_BYTES`` for any one ``Mcp-*`` value — checked before anything decodes a
  Base64 sentinel, so a client cannot make the gateway decode megabytes (431 otherwise).
- Per client (``PrincipalQuotas``): at most ``max_requests`` requests at once per client key and
  ``max_streams`` open streams (legacy GET streams and ``subscriptions/listen`` streams); past
  either, 429 with ``Retry-After``. This keeps one tenant from taking every child of a shared pool.
  The **client key** (``client_key``) is the principal (a token's name, the trusted proxy's
  identity header, a client certificate's subject, an OAuth ``sub``); a request without one is
  keyed by its TCP peer address, ``anonymous@ADDRESS``, so one anonymous client's idle streams
  or calls cannot lock every other anonymous client out. The same key is what the crash
  throttle, the legacy session cap and a POSTed cancel's owner go by (``CLIENT_KEY`` in the
  scope); which child a request may share is still decided by the principal alone (the pool's
  isolation key: anonymous clients still share children).
  A POST counts only once its body is read: the endpoint calls ``scope[SLOTS].admit()`` then, so
  connections that send headers and then trickle a body (bounded by the endpoint's body
  timeout) hold no slot, and cannot get everyone else of their principal a 429.
  A request's ``Slots`` sit in the scope (``gateway.slots``): a 2025-03-26 batch takes one
  more slot for each further request it carries (``Slots.take``), so a batch counts as the
  calls it makes, not as one; a legacy exchange whose client hung up (a legacy client's
  disconnect is not a cancellation) keeps its slot until it ends: it runs in the request's own
  response.
  A session ``DELETE`` is never refused: it is how a client at its limit ends what it holds.
  A parked MRTR call (``gateway.relay.suspensions``) counts against its principal's
  ``max_requests`` until its retry takes it or it ends (``PrincipalQuotas.hold``): a new call
  past the limit with parked calls counted gets 429 from the relay (``over_limit``); the retry
  that resumes a parked call is never refused for it. A question costs its asker.

The checks themselves are ``header_problem`` and ``PrincipalQuotas`` (one set of tables for
every endpoint); ``gateway.http.edge`` runs them.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from itertools import chain
from typing import Final

from starlette.responses import Response
from starlette.types import Scope

from gateway.http.edge_settings import MAX_REQUESTS_PER_PRINCIPAL, MAX_STREAMS_PER_PRINCIPAL
from gateway.http.wire import error_response
from gateway.protocol.jsonrpc import error_object
from gateway.protocol.throttle import LineThrottle

log = logging.getLogger("gateway.http")

MAX_HEADERS: Final = 100
"""Headers per request; real MCP clients send about a dozen."""
MAX_HEADER_BYTES: Final = 64 * 1024
"""All header names and values together."""
MAX_MCP_HEADER_BYTES: Final = 8 * 1024
"""One Mcp-* value (Mcp-Name, Mcp-Param-*): a tool name or a routing value, never a payload."""
ANONYMOUS: Final = "anonymous"
"""The key of a request with neither a principal nor a peer address (an in-process test client)."""
ANONYMOUS_PREFIX: Final = "anonymous@"
"""An anonymous client's key: this and its TCP peer address (IPv4 or IPv6, without the port)."""
CLIENT_KEY: Final = "gateway.client_key"
"""Scope key of the request's client key (``client_key``), set by ``PrincipalQuotas.open``."""
HEAD_BYTES: Final = "gateway.head_bytes"
"""Scope key of at most how many bytes the request's head (its request line and headers, as sent)
took, where the server counts them (``gateway.http.connection``); ``header_problem`` reads it."""
SLOTS: Final = "gateway.slots"
"""Scope key of a request's ``Slots``; a POST's endpoint calls ``admit()`` once the body is read."""


def client_key(scope: Scope) -> str:
    """Whom this request's limits, crash strikes and cancels are counted for: its principal, or
    for an anonymous request its TCP peer's address (``anonymous@127.0.0.1``). The port is left
    out: one client's requests come over several connections. Behind a proxy without
    ``--principal-header``, every client of the proxy is the proxy's address."""
    key = scope.get(CLIENT_KEY)
    if isinstance(key, str):
        return key
    principal = scope.get("gateway.principal")
    if isinstance(principal, str):
        key = principal
    else:
        client = scope.get("client")
        key = ANONYMOUS_PREFIX + str(client[0]) if client else ANONYMOUS
    scope[CLIENT_KEY] = key
    return key


def header_problem(headers: list[tuple[bytes, bytes]], head_bytes: int | None = None) -> str | None:
    """Why these request headers are refused (431), or None. ``head_bytes``: at most how many
    bytes their head took (``HEAD_BYTES``), when known: names and values are part of it, so a
    head within ``MAX_MCP_HEADER_BYTES`` (the usual call) can pass neither byte limit, and its
    headers are not summed."""
    if len(headers) > MAX_HEADERS:
        return f"{len(headers)} headers; at most {MAX_HEADERS} are accepted"
    if head_bytes is not None and head_bytes <= MAX_MCP_HEADER_BYTES:
        return None
    total = sum(map(len, chain.from_iterable(headers)))  # names and values, counted in C
    if total > MAX_MCP_HEADER_BYTES:  # only then can one value be over its own limit
        for name, value in headers:
            if len(value) > MAX_MCP_HEADER_BYTES and name.startswith(b"mcp-"):
                return f"header {name.decode('latin-1')} is {len(value)} bytes; at most {MAX_MCP_HEADER_BYTES}"
    if total > MAX_HEADER_BYTES:
        return f"headers total {total} bytes; at most {MAX_HEADER_BYTES}"
    return None


def header_refusal(problem: str) -> Response:
    return error_response(431, error_object(-32600, problem))


class Slots:
    """The request slots one HTTP request holds for its principal (one once admitted)."""

    def __init__(
        self, table: Counter[str], principal: str, limit: int, what: str, quotas: PrincipalQuotas | None = None
    ) -> None:
        self.table = table
        self.quotas = quotas
        self.principal = principal
        self.limit = limit
        self.what = what  # "requests in flight" or "open streams", for the refusal
        self.held = 0  # one is taken at admission: for a POST, once its body is in

    def admit(self) -> Response | None:
        """Take this request's own slot (once); the 429 to answer when the principal has none left."""
        if self.held or self.take(1):
            return None
        return error_response(
            429, error_object(-32600, f"too many {self.what} for this client (at most {self.limit})"), retry_after=1
        )

    def in_use(self) -> int:
        return self.table[self.principal]

    def take(self, count: int) -> bool:
        """Hold ``count`` more slots, or none when that would pass the limit (0: no limit)."""
        # dict.get, not Counter's item lookup: a principal with nothing held yet costs no
        # Python-level __missing__ call on every request.
        held = self.table.get(self.principal, 0) + count
        if self.limit and held > self.limit:
            return False
        self.table[self.principal] = held
        self.held += count
        return True

    def as_stream(self) -> Response | None:
        """This request turned out to open a stream (``subscriptions/listen``): it counts
        against the principal's open streams, not its requests in flight, from now on. The 429
        to answer when the principal has no stream left (its request slot is given back)."""
        quotas = self.quotas
        if quotas is None or self.table is quotas.streams:
            return None
        self.close()
        self.table, self.limit, self.what, self.held = quotas.streams, quotas.max_streams, "open streams", 0
        return self.admit()

    def close(self) -> None:
        """The HTTP request ended: give back the slots it still holds."""
        if self.held:  # none held: the table has nothing of this request's
            left = self.table[self.principal] - self.held
            if left > 0:
                self.table[self.principal] = left
            else:
                self.table.pop(self.principal, None)
            self.held = 0


class PrincipalQuotas:
    """The request and stream tables of every principal, shared by all endpoints."""

    def __init__(
        self, *, max_requests: int = MAX_REQUESTS_PER_PRINCIPAL, max_streams: int = MAX_STREAMS_PER_PRINCIPAL
    ) -> None:
        self.max_requests = max_requests
        self.max_streams = max_streams
        self.requests: Counter[str] = Counter()
        self.streams: Counter[str] = Counter()
        self.parked: Counter[str] = Counter()  # MRTR calls parked, by principal (``hold``)

    def hold(self, principal: str) -> Callable[[], None]:
        """Count a parked MRTR call of ``principal`` (it holds a child until its retry); the
        function returned stops counting it, once. Parked calls are not request slots (the
        retry that resumes one must get in), but ``over_limit`` counts them for new calls."""
        table = self.parked
        table[principal] += 1
        held = True

        def release() -> None:
            nonlocal held
            if held:
                held = False
                left = table[principal] - 1
                if left > 0:
                    table[principal] = left
                else:
                    table.pop(principal, None)

        return release

    def over_limit(self, principal: str) -> str | None:
        """Why a new call of ``principal`` (already admitted, so counted) is refused: its
        requests in flight and its parked calls together pass ``max_requests``; else None."""
        parked = self.parked.get(principal, 0)
        total = self.requests.get(principal, 0) + parked
        if not parked or not self.max_requests or total <= self.max_requests:
            return None
        return (
            f"too many requests in flight for this client (at most {self.max_requests}), counting its "
            f"{parked} call(s) parked for its answers: answer them (retry with their requestState) first"
        )

    @staticmethod
    def applies(scope: Scope) -> bool:
        """MCP endpoints only; a DELETE only ends a session (and cancels its calls): a client at
        its limit can still free what it holds."""
        path: str = scope["path"]
        return path.endswith("/mcp") and scope["method"] != "DELETE"

    def open(self, scope: Scope) -> Slots:
        """This request's ``Slots`` (in the scope as ``SLOTS``), holding none yet; the caller
        ``close()``s them when the request ends."""
        key = client_key(scope)
        if scope["method"] == "GET":
            slots = Slots(self.streams, key, self.max_streams, "open streams", self)
        else:
            slots = Slots(self.requests, key, self.max_requests, "requests in flight", self)
        scope[SLOTS] = slots
        return slots


BUSY_RETRY_AFTER: Final = 1
"""``Retry-After`` seconds of the 503 a connection past ``--max-connections`` gets."""
REFUSAL_LOG_RATE: Final = 1.0
"""Log lines a second about connections refused at the cap (after a burst of 5); the rest
are counted (``OpenConnections.refused``, ``mcp_gateway_connections_refused_total``) and the
next line says how many it did not show."""
MAX_REFUSING: Final = 64
"""Connections past the cap held at once while they wait to be answered 503 (each at most
``PAST_CAP_HEAD_TIMEOUT`` for its head, over TLS its handshake included, then
``REFUSAL_DRAIN`` to read the 503); past these too, a connection is closed at once,
unanswered. So the descriptors a listener holds stay within its cap plus these and
``PROBE_RESERVE``."""
PROBE_RESERVE: Final = 4
"""Connections past the cap that are served anyway when their request is ``GET /healthz`` or
``GET /readyz``: a liveness probe on the main port (the chart's default, the Dockerfile's
``HEALTHCHECK``) must not fail because clients hold every connection, or the orchestrator
restarts a gateway that is merely busy."""
PROBE_PATHS: Final = (b"GET /healthz ", b"GET /healthz?", b"GET /readyz ", b"GET /readyz?")


class OpenConnections:
    """The connections one listener holds, against its cap (module doc): shared by every
    protocol object of that listener (``GuardedHttpTools.configured(connections=...)``), read
    by ``/metrics``. ``cap`` None: no cap (a protocol class used without one). ``flag`` names
    the cap in the log (the ops listener's is not ``--max-connections``)."""

    __slots__ = ("_throttle", "cap", "flag", "open", "probes", "refused", "refusing")

    def __init__(self, cap: int | None, flag: str = "--max-connections") -> None:
        self.cap = cap
        self.flag = flag
        self.open = 0  # served
        self.refusing = 0  # past the cap, waiting for their head or reading their 503
        self.probes = 0  # past the cap, served as probes (``PROBE_RESERVE``)
        self.refused = 0  # answered 503, or closed at once past ``MAX_REFUSING``, in all
        self._throttle: LineThrottle | None = None

    def admit(self) -> bool | None:
        """A new connection: True, served (counted in ``open``); False, past the cap, to be
        answered 503 at its head (counted in ``refusing``); None, past those too (``MAX_REFUSING``),
        to be closed at once (counted as refused)."""
        if self.cap is None or self.open < self.cap:
            self.open += 1
            return True
        if self.refusing < MAX_REFUSING:
            self.refusing += 1
            return False
        self.refused += 1
        return None

    def release(self, admitted: bool) -> None:
        """A connection ends: ``admitted`` as ``admit`` said (True: served; False: refusing)."""
        if admitted:
            self.open -= 1
        else:
            self.refusing -= 1

    def probe_ended(self) -> None:
        self.probes -= 1

    def as_probe(self) -> bool:
        """A refusing connection whose request is a probe: served from ``PROBE_RESERVE``."""
        if self.probes >= PROBE_RESERVE:
            return False
        self.refusing -= 1
        self.probes += 1
        return True

    def snapshot(self) -> tuple[int, int | None, int]:
        """Open, cap and refused so far (``gateway.ops.metrics.ConnectionMetrics``)."""
        return self.open, self.cap, self.refused

    def refuse(self, peer: str, now: float) -> None:
        """A connection past the cap is answered 503: counted, and logged (``REFUSAL_LOG_RATE``)."""
        self.refused += 1
        if self._throttle is None:
            self._throttle = LineThrottle(REFUSAL_LOG_RATE, 5, now)
        dropped = self._throttle.admit(now)
        if dropped is None:
            return
        more = f" ({dropped} more refused since the last line)" if dropped else ""
        log.warning("%s refused (503): %d connections open, the most %s allows%s", peer, self.cap, self.flag, more)
