"""A legacy session's requests besides its POSTed messages: GET, DELETE, and a batch's slots.

``McpEndpoint`` hands these over (``gateway.http.endpoint``):

- ``stream``: ``GET`` opens the session's stream of unsolicited messages (``list_changed``),
  bounded by ``max_stream_seconds`` (the client reconnects); with ``Last-Event-ID`` it
  resumes the stream that id names instead, looked for in this session's streams only
  (``gateway.relay.streams``); a stream that is over for this client (its request cancelled
  by the client, or a GET stream another connection now reads) is answered 405;
- ``end``: ``DELETE`` ends the session (204);
- ``batch_slots``: each request of a 2025-03-26 batch is a call in flight of its principal.

A session belongs to whoever opened it: another principal's id is unknown (404) to this one,
and so is an anonymous client's to another address (``LegacySession.belongs_to``).
"""

from __future__ import annotations

from starlette.responses import Response

from gateway.http import wire
from gateway.http.limits import Slots
from gateway.http.resume import EventStream, LostStream, ResumedStream
from gateway.http.wire import rejection_response
from gateway.protocol import eventlog, ingress
from gateway.protocol.eventlog import Closed, Unknown
from gateway.protocol.headers import LAST_EVENT_ID
from gateway.protocol.jsonrpc import Message, Request, error_object
from gateway.protocol.outcome import Accepted, Rejection
from gateway.relay.sessions import LegacySession, SessionStore
from gateway.relay.streams import Lost

ALLOW = {"allow": "POST, GET, DELETE"}
"""What a 405 to a resume names: the endpoint's methods (the stream, not the method, is what is over)."""


def stream(
    headers: dict[str, str],
    principal: str | None,
    owner: str,
    sessions: SessionStore,
    *,
    max_stream_seconds: float,
    sse_poll_seconds: float,
) -> Response | EventStream | ResumedStream | LostStream:
    """The answer to a ``GET``: the session's stream, or the resume ``Last-Event-ID`` names."""
    session = _owned(ingress.check_get(headers, session_version=sessions.version_of), principal, owner, sessions)
    if isinstance(session, Response):
        return session
    last_event_id = headers.get(LAST_EVENT_ID)
    if last_event_id is not None:
        return resume(session, last_event_id, max_stream_seconds=max_stream_seconds, sse_poll_seconds=sse_poll_seconds)
    # Bounded: after max_stream_seconds the stream ends and the client reconnects (a
    # stream that lives forever would pin memory and a connection per forgotten tab).
    return EventStream(session.open_stream(), max_seconds=max_stream_seconds)


def resume(
    session: LegacySession, last_event_id: str, *, max_stream_seconds: float, sse_poll_seconds: float
) -> Response | EventStream | ResumedStream | LostStream:
    """Only this session's streams are looked in (another session's id is unknown here)."""
    found = session.streams.resume(last_event_id, priming=eventlog.primes(session.version))
    if isinstance(found, Unknown):
        return wire.error_response(400, error_object(-32600, f"cannot resume: {found.reason}; send the request again"))
    if isinstance(found, Closed):
        # Nothing more comes on it: 405 is the one answer to a GET besides an event stream
        # (L-TR §Listening), and the SDK clients take it as "no stream" without retrying
        # and without an error; an empty event stream would be resumed again.
        return wire.error_response(
            405, error_object(-32600, f"nothing more comes on this stream: {found.reason}"), headers=ALLOW
        )
    if isinstance(found, Lost):
        return LostStream(found)
    if found.stream.is_request:
        poll = sse_poll_seconds if eventlog.primes(session.version) else 0.0
        return ResumedStream(found, poll_seconds=poll)
    return EventStream(found, max_seconds=max_stream_seconds)


def end(headers: dict[str, str], principal: str | None, owner: str, sessions: SessionStore) -> Response:
    """The answer to a ``DELETE``: the session ends (204)."""
    session = _owned(ingress.check_delete(headers, session_version=sessions.version_of), principal, owner, sessions)
    if isinstance(session, Response):
        return session
    sessions.end(session.id)
    return Response(status_code=204)


def batch_slots(messages: tuple[Message, ...], slots: object) -> Response | None:
    """Each request of a batch is a call in flight: the batch takes a slot per request
    beyond the one its HTTP request holds, or is refused (429) before any of it runs."""
    extra = sum(isinstance(message, Request) for message in messages) - 1
    if extra <= 0 or not isinstance(slots, Slots) or slots.take(extra):
        return None
    return wire.error_response(
        429,
        error_object(
            -32600,
            f"a batch of {extra + 1} requests needs as many of this client's {slots.limit} requests "
            f"in flight; {slots.in_use()} are in use",
        ),
        retry_after=1,
    )


def _owned(
    outcome: Accepted | Rejection, principal: str | None, owner: str, sessions: SessionStore
) -> LegacySession | Response:
    """The session a GET or DELETE names, if it is live and this client's; else the refusal
    (another principal's or address's session is as unknown as an ended one)."""
    if isinstance(outcome, Rejection):
        return rejection_response(outcome)
    assert outcome.session_id is not None
    session = sessions.get(outcome.session_id)
    if session is None or not session.belongs_to(principal, owner):
        return rejection_response(ingress.unknown_session())
    return session
