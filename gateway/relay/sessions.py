"""Legacy (2025-03-26 … 2025-11-25) HTTP sessions: minted by the gateway at ``initialize``.

A session remembers what the legacy lifecycle negotiated (version, the client's declared
capabilities and clientInfo) so that requests to a modern child can carry a full ``_meta``,
and it tracks its requests in flight so that a POSTed ``notifications/cancelled`` (no
answer follows) or a ``DELETE`` (answered -31005) can cancel them (``CancelHandle``). It
also holds the child's questions sent to this client (``track_ask``: a gateway id ``g-N``,
never reused in the session) until the client POSTs the response (``answer_ask``), which
then goes to the child under the child's own id.
Session ids are 192 random bits in URL-safe base64: globally unique, unguessable, and
visible ASCII as the transport requires (L-TR §Session Management); with owner routing
they also name the instance that holds them (``mint_id``, ``gateway.protocol.owner``).
Idle sessions expire (``SESSION_IDLE_TIMEOUT``); an expired or deleted id gets 404.

Sessions are bounded, and one client can never push out another's: a client (its principal,
or for an anonymous one its peer address: its ``owner``, ``gateway.http.limits.client_key``)
holding ``max_per_principal`` sessions gets 429 for the next ``initialize`` (``ClientThrottledError``),
and with ``max_sessions`` live in all the next one gets 503 (``GatewayUnavailableError``).
Both are checked before any child is leased or started for the new session. Idle sessions
past the idle timeout are forgotten first, so they never count.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

import anyio
import orjson

from gateway.errors import ClientThrottledError, GatewayUnavailableError
from gateway.protocol.eventlog import RESUME_WINDOW, primes
from gateway.protocol.jsonrpc import ErrorReply, JsonId, JsonObject, Message, Notification, Result
from gateway.relay.server_config import MAX_SESSIONS_PER_PRINCIPAL
from gateway.relay.streams import Reader, SessionStreams
from gateway.stdio.ask import ChildAsk
from gateway.stdio.child import StdioChild
from gateway.stdio.pool import Pool

log = logging.getLogger("gateway.relay.sessions")

SESSION_IDLE_TIMEOUT: Final = 3600.0
"""Seconds without a request after which a legacy session is forgotten."""
MAX_URL_ELICITATIONS_KEPT: Final = 32
"""URL elicitation ids a legacy session got from its children lately (a question, or a -32042's
list), kept so that the child's ``notifications/elicitation/complete`` for one reaches this
session's GET stream; older ones are forgotten (the notification is optional)."""
MAX_SESSIONS: Final = 10_000
"""Live sessions per server at most (bounded memory); past this, 503."""
FULL_RETRY_AFTER: Final = 60
"""Seconds a client is told to wait when sessions are full: sessions end by DELETE or by
idling out, both slow."""


class CancelHandle:
    """Cancels one request of a session. ``reply`` says whether the client still gets an
    answer: not after its own ``notifications/cancelled`` (2025-11-25 cancellation: the
    receiver SHOULD NOT respond), but yes when the gateway ends the request (``DELETE``,
    expiry, shutdown), so that a waiting client is told why."""

    __slots__ = ("_scope", "_tell", "cancelled", "reply")

    def __init__(self) -> None:
        self.reply = True
        self.cancelled = False
        self._scope: anyio.CancelScope | None = None
        self._tell: Callable[[bool], None] | None = None

    @property
    def scope(self) -> anyio.CancelScope:
        """The scope it cancels: one attached (``attach``), else its own, made when first asked."""
        if self._scope is None:
            self.attach(anyio.CancelScope())
        assert self._scope is not None
        return self._scope

    def attach(self, scope: anyio.CancelScope, tell: Callable[[bool], None] | None = None) -> None:
        """Cancel ``scope`` (a response's own, so no second scope per request), at once if
        the request was cancelled already. ``tell``: call ``tell(reply)`` instead, and let it
        decide (a response's answer machine, ``gateway.protocol.answer``: ``SESSION_CANCEL``,
        ``SESSION_CANCEL_REPLY``)."""
        self._scope = scope
        self._tell = tell
        if self.cancelled:
            self._end()

    def detach(self) -> None:
        """The response is over: nothing is told any more (and nothing refers back to it)."""
        self._tell = None

    def cancel(self, *, reply: bool) -> None:
        self.reply = reply
        self.cancelled = True
        self._end()

    def _end(self) -> None:
        if self._tell is not None:
            self._tell(self.reply)
        elif self._scope is not None:
            self._scope.cancel()


@dataclass
class LegacySession:
    id: str
    version: str
    capabilities: JsonObject
    client_info: JsonObject | None
    last_seen: float
    principal: str | None = None
    owner: str | None = None  # its client key: whose session cap it counts against, who may use it
    initialized: bool = False
    log_level: str | None = None
    in_flight: dict[JsonId, CancelHandle] = field(default_factory=dict)
    streams: SessionStreams = field(default_factory=SessionStreams)  # its SSE streams, kept for resumption
    child: StdioChild | None = None  # the child this session's requests go to (legacy state stays put)
    pool: Pool | None = None  # the pool that serves it: its children's list_changed reach this session
    roots_pool: Pool | None = None  # where its calls and subscriptions run when its roots are keyed
    # Resource URIs it holds on a legacy child, each with the child that holds it for the
    # session (gateway.relay.session_subscriptions): its resources/updated reach only these.
    subscriptions: dict[str, StdioChild] = field(default_factory=dict)
    asks: dict[str, ChildAsk] = field(default_factory=dict)  # gateway id → the child's question
    asks_sent: int = 0
    roots: tuple[dict[str, str], ...] | None = None  # its roots, from its last roots/list answer (client_roots)
    # The URL elicitation ids its children gave it lately, for their completion notifications.
    url_elicitations: deque[str] = field(default_factory=lambda: deque(maxlen=MAX_URL_ELICITATIONS_KEPT))
    on_end: list[Callable[[], None]] = field(default_factory=list)  # run once when the session ends

    def belongs_to(self, principal: str | None, owner: str) -> bool:
        """Whether a request of ``principal``, counted as ``owner`` (its client key,
        ``gateway.http.limits.client_key``), may use this session: the principal that opened
        it, and for an anonymous client the address that opened it (as tokens tie a session
        to its token's name). Anyone else is told the session does not exist (404)."""
        return self.principal == principal and (self.owner is None or self.owner == owner)

    def track_ask(self, ask: ChildAsk) -> str:
        """A session-unique id for a child's question sent to this client."""
        for stale in [k for k, a in self.asks.items() if a.is_answered]:  # timed out or its call ended
            del self.asks[stale]
        self.asks_sent += 1
        gateway_id = f"g-{self.asks_sent}"
        self.asks[gateway_id] = ask
        ask.client_id = gateway_id
        return gateway_id

    def forget_ask(self, ask: ChildAsk) -> str | None:
        """The id ``ask`` was sent to this client under, forgotten (the child withdrew it); None
        when it was not sent to this session. Read off the ask: ``track_ask`` may have dropped
        it from ``asks`` already, as it drops every answered one (a withdrawn one counts)."""
        gateway_id = ask.client_id
        if gateway_id is None:
            return None
        if self.asks.get(gateway_id) is ask:
            del self.asks[gateway_id]
        return gateway_id

    def answer_ask(self, reply: Result | ErrorReply) -> bool:
        """Hand the client's POSTed response to the child that asked; False if nobody waits for it."""
        ask = self.asks.pop(reply.id, None) if type(reply.id) is str else None
        if ask is None or not ask.answer(reply):
            log.debug("legacy session %s… answered %r, which no child waits for", self.id[:8], reply.id)
            return False
        return True

    def take(self, message: Message) -> None:
        """A notification or response the client POSTed: ``notifications/initialized``, a
        ``notifications/cancelled`` naming one of its requests, or its answer to a child's question."""
        if isinstance(message, Notification):
            if message.method == "notifications/initialized":
                self.initialized = True
            elif message.method == "notifications/cancelled" and message.params:
                self.cancel(message.params.get("requestId"))
            elif message.method == "notifications/roots/list_changed":
                self.roots = None  # asked again before its next call (gateway.relay.client_roots)
        elif isinstance(message, (Result, ErrorReply)):
            self.answer_ask(message)  # the client's answer to a child's question: to the child

    def open_stream(self) -> Reader:
        """A new GET stream for this session; an older one is closed (one message, one stream).
        A 2025-11-25 session's opens with a priming event (``SessionStreams.open_get``)."""
        return self.streams.open_get(priming=primes(self.version))

    def offer(self, message: JsonObject, *, live: bool = False) -> bool:
        """An unsolicited message for the GET stream (kept for a resume of it); False if the
        session has no GET stream open or waiting for a resume; ``live``: none open now
        (``SessionStreams.offer``)."""
        return self.streams.offer(orjson.dumps(message), live=live)

    @property
    def has_stream(self) -> bool:
        """Whether a connection reads the session's GET stream now."""
        stream = self.streams.get_stream
        return stream is not None and stream.reader is not None

    def is_subscribed(self, uri: str) -> bool:
        """``uri`` or a resource under one of the subscribed URIs (a sub-resource may update)."""
        return any(uri == held or uri.startswith(held.rstrip("/") + "/") for held in self.subscriptions)

    def cancel(self, client_id: object) -> bool:
        """The client cancelled the request it knows as ``client_id`` (exact JSON type): it
        ends without an answer. An unknown or finished id is ignored (races are normal)."""
        if not isinstance(client_id, (int, str)) or isinstance(client_id, bool):
            return False  # not a JSON-RPC id, so none of this session's
        handle = self.in_flight.get(client_id)
        if handle is None:
            # Ended already, its result perhaps still waiting in a stream the client would
            # resume: sealed as a running one's is (answer.py rule 3), so it never gets it.
            self.streams.seal_request(client_id)
            return False
        handle.cancel(reply=False)
        return True

    def cancel_all(self) -> None:
        for handle in self.in_flight.values():
            handle.cancel(reply=True)
        for hook in self.on_end:  # e.g. close the child listen holding its resource subscriptions
            hook()
        self.on_end.clear()
        self.asks.clear()  # their calls are cancelled; each call's end answers its child
        self.streams.close()


class SessionStore:
    def __init__(
        self,
        idle_timeout: float = SESSION_IDLE_TIMEOUT,
        max_sessions: int = MAX_SESSIONS,
        on_end: Callable[[str], None] | None = None,
        max_per_principal: int = MAX_SESSIONS_PER_PRINCIPAL,
        mint_id: Callable[[], str] | None = None,
        resume_window: float = RESUME_WINDOW,
    ) -> None:
        self._resume_window = resume_window
        self._sessions: dict[str, LegacySession] = {}
        self._mint_id = mint_id or _random_id
        self._on_end = on_end
        self._idle_timeout = idle_timeout
        self._max_sessions = max_sessions
        self._max_per_principal = max_per_principal
        self._by_principal: Counter[str | None] = Counter()

    def __len__(self) -> int:
        return len(self._sessions)

    def create(
        self,
        version: str,
        capabilities: JsonObject,
        client_info: JsonObject | None,
        principal: str | None = None,
        owner: str | None = None,
    ) -> LegacySession:
        """A new session of ``principal``; raises ``ClientThrottledError`` (429) when ``owner``
        (else ``principal``) holds its limit,
        ``GatewayUnavailableError`` (503) when the store is full. Nobody else's session is ended."""
        now = time.monotonic()
        self.expire(now)
        counted = owner if owner is not None else principal
        if self._by_principal[counted] >= self._max_per_principal:
            raise ClientThrottledError(
                f"this client already holds {self._max_per_principal} legacy sessions "
                "(--max-sessions-per-principal); end one with DELETE, or let one idle out",
                retry_after=FULL_RETRY_AFTER,
                max_sessions_per_principal=self._max_per_principal,
            )
        if len(self._sessions) >= self._max_sessions:
            raise GatewayUnavailableError(
                f"the gateway holds its limit of {self._max_sessions} legacy sessions; retry later",
                retry_after=FULL_RETRY_AFTER,
                max_sessions=self._max_sessions,
            )
        session = LegacySession(self._mint_id(), version, capabilities, client_info, now, principal, counted)
        session.streams.window = self._resume_window
        self._sessions[session.id] = session
        self._by_principal[counted] += 1
        return session

    def get(self, session_id: str) -> LegacySession | None:
        session = self._sessions.get(session_id)
        if session is None:
            return None
        now = time.monotonic()
        if now - session.last_seen > self._idle_timeout and not session.in_flight:
            self.end(session_id)
            return None
        session.last_seen = now
        return session

    def version_of(self, session_id: str) -> str | None:
        session = self.get(session_id)
        return session.version if session else None

    def end(self, session_id: str) -> bool:
        session = self._sessions.pop(session_id, None)
        if session is None:
            return False
        self._by_principal[session.owner] -= 1
        if self._by_principal[session.owner] <= 0:
            del self._by_principal[session.owner]
        session.cancel_all()
        if self._on_end is not None:
            self._on_end(session_id)
        return True

    def expire(self, now: float) -> None:
        stale = [s.id for s in self._sessions.values() if now - s.last_seen > self._idle_timeout and not s.in_flight]
        for session_id in stale:
            self.end(session_id)
        clock = anyio.current_time()  # the streams' clock (anyio's), not time.monotonic's callers
        for session in self._sessions.values():
            session.streams.sweep(clock)

    def open_streams(self) -> int:
        return sum(1 for session in self._sessions.values() if session.has_stream)

    def serving(self, pool: Pool) -> list[LegacySession]:
        """The sessions that ``pool`` serves (their requests go to its children)."""
        return [session for session in self._sessions.values() if session.pool is pool]

    def awaiting_completion(self, pool: Pool, elicitation_id: str) -> list[LegacySession]:
        """The sessions ``pool``'s children gave URL elicitation ``elicitation_id`` to (its
        calls run there: the session's pool, or its roots pool)."""
        return [
            session
            for session in self._sessions.values()
            if pool in (session.pool, session.roots_pool) and elicitation_id in session.url_elicitations
        ]

    def on_child(self, child: StdioChild) -> list[LegacySession]:
        """The sessions whose requests go to ``child`` (the one they last used)."""
        return [session for session in self._sessions.values() if session.child is child]

    def broadcast(self, message: JsonObject, to: Callable[[LegacySession], bool] = lambda _: True) -> int:
        """Offer ``message`` to the GET stream of every session ``to`` accepts; return how many took it."""
        return sum(session.offer(message) for session in self._sessions.values() if to(session))

    def end_all(self) -> None:
        for session_id in list(self._sessions):
            self.end(session_id)


def _random_id() -> str:
    return secrets.token_urlsafe(24)
