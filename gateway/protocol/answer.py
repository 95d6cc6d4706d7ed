"""How one streamed response ends, as a state machine: events in, actions out, no I/O.

``gateway.http.stream.LazyStream`` owns one ``Answer`` per request, and
``gateway.http.longstream.LongStream`` one per stream that is not a request's answer (a listen,
the GET stream, a resumed stream: ``STREAMS``); each carries out what it returns. Two kinds of
events feed it:

- the answer's own task reports how the exchange went (``FIRST_FINAL``, ``FIRST_NOTE``,
  ``REFUSED``, ``FINAL``, ``EXHAUSTED``, ``POLL_CLOSED``) and carries out the actions at once;
- the world pushes what happened to the request (``CLIENT_GONE``, ``WRITE_STALLED``: the
  connection, ``gateway.http.connection.Hangup``; ``POSTED_CANCEL``: ``gateway.http.inflight``;
  ``SESSION_CANCEL``, ``SESSION_CANCEL_REPLY``: the session's ``CancelHandle``;
  ``DRAIN_BEGINS``, ``BUDGET_SPENT``: ``gateway.http.drain``, through ``gateway.http.sse.Watch``).
  Of their actions, the leading ones that need no I/O (``AT_ONCE``: ``STOP`` cancels the
  exchange and any write under way, ``SEAL`` seals a legacy request's stream) are done at
  once by whoever pushed; the rest are done by the answer's task once the exchange is over.
  When the exchange stopped and the machine was told no reason, the answer's task says why:
  ``DEADLINE`` (its lifetime, ``--max-stream-seconds``, or for a legacy stream nobody reads
  its resume window) or ``STOPPED`` (anything else, such as an event log that gave the stream
  up).

Kinds that answer a request through ``LazyStream``: ``CALL`` (a modern request), ``LISTEN`` (a
forwarded ``subscriptions/listen``: it ends with its graceful result when the drain starts or its
lifetime is over), ``LEGACY`` (a legacy session's request: it outlives its client, L-TR §Sending
Messages; its session cancels it).

Kinds that are a stream from their first byte (``STREAMS``, carried out by
``gateway.http.longstream.LongStream``): ``EMULATED_LISTEN`` (the gateway's own
``subscriptions/listen``, ``gateway.http.listen``), ``TASK_LISTEN`` (its listen for task status,
``gateway.http.tasklisten``), ``GET_STREAM`` (a legacy session's GET stream) and ``RESUMED`` (a
resume of a legacy request's stream, ``gateway.http.resume``). Their own task steps
``first_note`` as the stream opens, before anything from outside is watched, so ``WAITING``
takes nothing else; then ``exhausted`` when their source ends (the listen dropped, another GET
took the stream, the session ended, a polling connection closed) or ``deadline`` when their
lifetime is over. They are never polled, refused or cancelled by a POST or a session.

States: ``WAITING`` (nothing sent yet), ``SSE`` (the event stream is open), ``POLLED`` (a
legacy polling stream's connection was closed by the gateway; the call goes on), and the
decided ones: ``JSON`` (one JSON body: the final, a refusal, the session's error), ``FINISHED``
(the stream ended: after its final, its graceful end, the session's error, or none),
``CANCELLED`` (the client cancelled: no answer, an empty event stream if nothing was sent),
``SHUT_DOWN`` (the drain budget ran out: -31004 as JSON or as the last event), ``ABANDONED``
(the client left or the exchange was stopped: nothing more is sent; access log 499).

Rules (``✗``: out of order, ``OutOfOrder`` is raised; ``–``: ignored; ``=``: the state stays)::

    event                 WAITING                   SSE                        POLLED
    first_final           JSON send_json            ✗                          ✗
    first_note            SSE stream                ✗                          ✗
    refused               JSON send_refusal         ✗                          ✗
    final                 ✗                         FINISHED note_answer       FINISHED note_answer
                                                      end_sse
    exhausted             CANCELLED note_cancelled  FINISHED end_sse           FINISHED
                            start_sse end_sse
    poll_closed           ✗                         POLLED                     ✗
    client_gone           ABANDONED stop note_cancelled (all three); LEGACY: = note_cancelled
    write_stalled         ABANDONED stop note_cancelled (all three)
    posted_cancel         CANCELLED stop            CANCELLED stop             CANCELLED stop
                            note_cancelled            note_cancelled end_sse     note_cancelled
                            start_sse end_sse
    session_cancel        CANCELLED stop            CANCELLED stop seal        CANCELLED stop seal
                            note_cancelled            note_cancelled end_sse     note_cancelled
                            start_sse end_sse
    session_cancel_reply  JSON stop reply_json      FINISHED stop reply_event  FINISHED stop
                                                      end_sse
    drain_begins LISTEN   ABANDONED stop            FINISHED stop              FINISHED stop
                            note_cancelled            write_graceful end_sse
    drain_begins others   –                         –                          –
    budget_spent          SHUT_DOWN stop            SHUT_DOWN stop             SHUT_DOWN stop
                            note_shutdown             note_shutdown              note_shutdown
                            shutdown_json             shutdown_event end_sse
    deadline LISTEN       FINISHED start_sse        FINISHED write_graceful    FINISHED
                            write_graceful end_sse    end_sse
    deadline others,      ABANDONED note_cancelled (all three)
    stopped

    STREAMS (WAITING takes only first_note: SSE stream; POLLED takes nothing)
    event                 SSE
    exhausted             FINISHED end_sse
    client_gone,          ABANDONED stop
    write_stalled
    drain_begins          EMULATED_LISTEN, TASK_LISTEN: FINISHED stop write_graceful end_sse
                          GET_STREAM: FINISHED stop end_sse;  RESUMED: =
    budget_spent          FINISHED stop end_sse
    deadline              EMULATED_LISTEN: FINISHED write_graceful end_sse; others: FINISHED end_sse
    stopped               FINISHED end_sse
    others                ✗

1. **One final answer at most, one response start at most.** Once decided, nothing more is
   written: an event that stops a live exchange (``client_gone`` but for ``LEGACY``,
   ``write_stalled``, the cancels, ``drain_begins`` for ``LISTEN``, ``budget_spent``) only cuts
   a write still under way (``stop``); a ``LEGACY`` client's leaving is noted in ``JSON`` and
   ``FINISHED`` (``note_cancelled``; with ``stop`` for ``write_stalled``); everything else is
   ignored. The answer's own events in a decided state are ignored too: they raced the
   event that decided it.
2. **A legacy client's disconnect is not a cancellation**: its call goes on, nothing more
   reaches it (the edge drops sends to a lost connection) and the access log says it left.
   Only a reset for not reading (``write_stalled``) stops it.
3. **No answer after the client's own cancel** (a posted ``notifications/cancelled``, modern
   or legacy): the stream ends, or is an empty one (a POSTed request must be answered with
   JSON or SSE, and JSON would need a response object). A legacy stream that was opened is
   sealed (``seal``), before its end reaches the client: a client that resumes it (a
   2025-11-25 stream began with a priming event, so the TypeScript SDKs do) gets nothing for
   the request either, not even an error, for it has forgotten the id; so is a finished one
   whose final the client may not have had yet. The session's own cancel (``DELETE``,
   expiry) answers with its error (``on_cancel()``).
4. **A drain's start** ends a forwarded listen whose stream is open with its graceful result;
   one not yet answered is abandoned. Any other request runs on; the spent budget ends it
   with -31004. A listen's lifetime ends it with its graceful result in every live state.
5. An event that no live state of a kind takes is ``✗`` in every state of it: ``session_cancel``
   and ``session_cancel_reply`` come only to ``LEGACY`` answers, and a stream (``STREAMS``) gets
   no answer's events and no cancel. ``session_cancel`` in ``FINISHED`` is ``stop seal``.
6. **A stream ends once, and says so only when the gateway ends it**: its own end, its
   lifetime, the drain and the spent budget write its end (a listen's graceful result where its
   kind has one); a client that left or a write that failed gets nothing more. Which of them
   ends a stream is its kind's: a listen and a GET stream end at the drain's start, a resumed
   stream runs on until the budget is spent; a task listen's lifetime ends it without the
   graceful result (the client listens again), an emulated listen's with it.

Imports: the standard library only; no I/O.
"""

from __future__ import annotations

from enum import Enum, IntEnum
from typing import Final


class Kind(IntEnum):
    CALL = 0  # a modern request
    LISTEN = 1  # a forwarded subscriptions/listen
    LEGACY = 2  # a legacy session's request
    EMULATED_LISTEN = 3  # the gateway's own subscriptions/listen (gateway.http.listen)
    TASK_LISTEN = 4  # the gateway's listen for task status (gateway.http.tasklisten)
    GET_STREAM = 5  # a legacy session's GET stream (gateway.http.resume.EventStream)
    RESUMED = 6  # a resume of a legacy request's stream (gateway.http.resume.ResumedStream)


STREAMS: Final = frozenset({Kind.EMULATED_LISTEN, Kind.TASK_LISTEN, Kind.GET_STREAM, Kind.RESUMED})
"""Kinds that are a stream from their first byte, not a request's answer (``LongStream``)."""


class State(IntEnum):
    WAITING = 0
    SSE = 1
    POLLED = 2
    JSON = 3
    FINISHED = 4
    CANCELLED = 5
    SHUT_DOWN = 6
    ABANDONED = 7


LIVE: Final = frozenset({State.WAITING, State.SSE, State.POLLED})
_WAITING: Final = State.WAITING  # every answer's first state, read as a module name (see ``Answer``)
DECIDED: Final = frozenset(State) - LIVE


class Event(IntEnum):
    FIRST_FINAL = 0  # the exchange's first event is its final reply
    FIRST_NOTE = 1  # its first event is a notification, progress or a question
    REFUSED = 2  # it was refused before any event (GatewayUnavailableError, Rejected)
    FINAL = 3  # the stream wrote the final reply
    EXHAUSTED = 4  # the exchange ended without a final reply
    POLL_CLOSED = 5  # the gateway closed a polling stream's connection (legacy)
    CLIENT_GONE = 6  # the connection was lost
    WRITE_STALLED = 7  # the connection was reset for not reading
    POSTED_CANCEL = 8  # the client POSTed notifications/cancelled for it (modern, InFlight)
    SESSION_CANCEL = 9  # the session cancelled it without an answer (the client's own cancel)
    SESSION_CANCEL_REPLY = 10  # the session cancelled it with an answer (DELETE, expiry)
    DRAIN_BEGINS = 11
    BUDGET_SPENT = 12  # the drain budget ran out
    DEADLINE = 13  # the exchange was stopped by its deadline
    STOPPED = 14  # the exchange was stopped for a reason the machine was not told


OWN_EVENTS: Final = frozenset(
    {Event.FIRST_FINAL, Event.FIRST_NOTE, Event.REFUSED, Event.FINAL, Event.EXHAUSTED, Event.POLL_CLOSED}
)
"""Reported by the answer's own task, whose actions it carries out at once."""


class Action(Enum):
    STOP = "cancel the exchange and any write under way (done at once by whoever pushed the event)"
    SEND_JSON = "the final reply as one JSON body (its answer noted)"
    SEND_REFUSAL = "the refusal as a JSON error response"
    STREAM = "open the event stream and write the exchange's events up to its final"
    START_SSE = "send the event stream's headers"
    END_SSE = "end the event stream"
    NOTE_ANSWER = "note the final reply in the access log"
    NOTE_CANCELLED = "note in the access log that the client left or cancelled"
    WRITE_GRACEFUL = "write the graceful end (a listen's result) as the last event"
    NOTE_SHUTDOWN = "note the shutdown error in the access log"
    SHUTDOWN_JSON = "the shutdown error (-31004, HTTP 200: never a retryable 503) as a JSON response"
    SHUTDOWN_EVENT = "the shutdown error as the last event"
    REPLY_JSON = "the session's error (on_cancel()) as a JSON response (noted)"
    REPLY_EVENT = "the session's error as the last event (noted)"
    SEAL = "seal a legacy request's stream: a resume of it gets nothing for the request (405)"


Actions = tuple[Action, ...]
Rule = tuple[State, Actions]

FINALS: Final = frozenset(
    {
        Action.SEND_JSON,
        Action.SEND_REFUSAL,
        Action.WRITE_GRACEFUL,
        Action.SHUTDOWN_JSON,
        Action.SHUTDOWN_EVENT,
        Action.REPLY_JSON,
        Action.REPLY_EVENT,
    }
)
"""Actions that write a final answer (besides the stream's own ``FINAL``)."""
STARTS: Final = frozenset(
    {Action.SEND_JSON, Action.SEND_REFUSAL, Action.STREAM, Action.START_SSE, Action.SHUTDOWN_JSON, Action.REPLY_JSON}
)
"""Actions that start the HTTP response."""
WRITES: Final = frozenset(FINALS | STARTS | {Action.END_SSE})
"""Actions that send something to the client."""


AT_ONCE: Final = frozenset({Action.STOP, Action.SEAL})
"""Actions done at once by whoever pushed the event, when they lead its actions (no I/O)."""


class OutOfOrder(Exception):
    """An event that cannot come in this state (a bug in the edge that feeds the machine)."""


S, E, A = State, Event, Action
_CANCEL: Final = (
    (S.CANCELLED, (A.STOP, A.NOTE_CANCELLED, A.START_SSE, A.END_SSE)),
    (S.CANCELLED, (A.STOP, A.NOTE_CANCELLED, A.END_SSE)),
    (S.CANCELLED, (A.STOP, A.NOTE_CANCELLED)),
)
_OWN_CANCEL: Final = (  # a legacy client's own cancel: its stream, once opened, is sealed too
    _CANCEL[0],
    (S.CANCELLED, (A.STOP, A.SEAL, A.NOTE_CANCELLED, A.END_SSE)),
    (S.CANCELLED, (A.STOP, A.SEAL, A.NOTE_CANCELLED)),
)
_ABANDON: Final = (S.ABANDONED, (A.STOP, A.NOTE_CANCELLED))
_GONE_UNSTOPPED: Final = (S.ABANDONED, (A.NOTE_CANCELLED,))
_GRACEFUL_DEADLINE: Final = (
    (S.FINISHED, (A.START_SSE, A.WRITE_GRACEFUL, A.END_SSE)),
    (S.FINISHED, (A.WRITE_GRACEFUL, A.END_SSE)),
    (S.FINISHED, ()),
)

_LIVE_RULES: Final[dict[Event, tuple[Rule | None, Rule | None, Rule | None]]] = {
    # event: (in WAITING, in SSE, in POLLED); None: out of order
    E.FIRST_FINAL: ((S.JSON, (A.SEND_JSON,)), None, None),
    E.FIRST_NOTE: ((S.SSE, (A.STREAM,)), None, None),
    E.REFUSED: ((S.JSON, (A.SEND_REFUSAL,)), None, None),
    E.FINAL: (None, (S.FINISHED, (A.NOTE_ANSWER, A.END_SSE)), (S.FINISHED, (A.NOTE_ANSWER,))),
    E.EXHAUSTED: (
        (S.CANCELLED, (A.NOTE_CANCELLED, A.START_SSE, A.END_SSE)),
        (S.FINISHED, (A.END_SSE,)),
        (S.FINISHED, ()),
    ),
    E.POLL_CLOSED: (None, (S.POLLED, ()), None),
    E.CLIENT_GONE: (_ABANDON, _ABANDON, _ABANDON),
    E.WRITE_STALLED: (_ABANDON, _ABANDON, _ABANDON),
    E.POSTED_CANCEL: _CANCEL,
    E.SESSION_CANCEL: (None, None, None),
    E.SESSION_CANCEL_REPLY: (None, None, None),
    E.DRAIN_BEGINS: ((S.WAITING, ()), (S.SSE, ()), (S.POLLED, ())),
    E.BUDGET_SPENT: (
        (S.SHUT_DOWN, (A.STOP, A.NOTE_SHUTDOWN, A.SHUTDOWN_JSON)),
        (S.SHUT_DOWN, (A.STOP, A.NOTE_SHUTDOWN, A.SHUTDOWN_EVENT, A.END_SSE)),
        (S.SHUT_DOWN, (A.STOP, A.NOTE_SHUTDOWN)),
    ),
    E.DEADLINE: (_GONE_UNSTOPPED, _GONE_UNSTOPPED, _GONE_UNSTOPPED),
    E.STOPPED: (_GONE_UNSTOPPED, _GONE_UNSTOPPED, _GONE_UNSTOPPED),
}
"""The live states' rules for a ``CALL``; ``_KIND_RULES`` says where the other kinds differ."""

_NEVER: Final = (None, None, None)
_STREAM_RULES: Final[dict[Event, tuple[Rule | None, Rule | None, Rule | None]]] = {
    # event: (in WAITING, in SSE, in POLLED) for every kind in STREAMS; None: out of order
    E.FIRST_FINAL: _NEVER,
    E.FIRST_NOTE: ((S.SSE, (A.STREAM,)), None, None),
    E.REFUSED: _NEVER,
    E.FINAL: _NEVER,
    E.EXHAUSTED: (None, (S.FINISHED, (A.END_SSE,)), None),
    E.POLL_CLOSED: _NEVER,
    E.CLIENT_GONE: (None, (S.ABANDONED, (A.STOP,)), None),
    E.WRITE_STALLED: (None, (S.ABANDONED, (A.STOP,)), None),
    E.POSTED_CANCEL: _NEVER,
    E.SESSION_CANCEL: _NEVER,
    E.SESSION_CANCEL_REPLY: _NEVER,
    E.DRAIN_BEGINS: (None, (S.SSE, ()), None),
    E.BUDGET_SPENT: (None, (S.FINISHED, (A.STOP, A.END_SSE)), None),
    E.DEADLINE: (None, (S.FINISHED, (A.END_SSE,)), None),
    E.STOPPED: (None, (S.FINISHED, (A.END_SSE,)), None),
}
"""The live states' rules for a stream; ``_KIND_RULES`` says where each kind of stream differs."""
_GRACEFUL_DRAIN: Final = (None, (S.FINISHED, (A.STOP, A.WRITE_GRACEFUL, A.END_SSE)), None)

_KIND_RULES: Final[dict[Kind, dict[Event, tuple[Rule | None, Rule | None, Rule | None]]]] = {
    Kind.CALL: {},
    Kind.LISTEN: {
        E.DRAIN_BEGINS: (_ABANDON, (S.FINISHED, (A.STOP, A.WRITE_GRACEFUL, A.END_SSE)), (S.FINISHED, (A.STOP,))),
        E.DEADLINE: _GRACEFUL_DEADLINE,
    },
    Kind.LEGACY: {
        E.CLIENT_GONE: (
            (S.WAITING, (A.NOTE_CANCELLED,)),
            (S.SSE, (A.NOTE_CANCELLED,)),
            (S.POLLED, (A.NOTE_CANCELLED,)),
        ),
        E.SESSION_CANCEL: _OWN_CANCEL,
        E.SESSION_CANCEL_REPLY: (
            (S.JSON, (A.STOP, A.REPLY_JSON)),
            (S.FINISHED, (A.STOP, A.REPLY_EVENT, A.END_SSE)),
            (S.FINISHED, (A.STOP,)),
        ),
    },
    Kind.EMULATED_LISTEN: {
        **_STREAM_RULES,
        E.DRAIN_BEGINS: _GRACEFUL_DRAIN,
        E.DEADLINE: (None, (S.FINISHED, (A.WRITE_GRACEFUL, A.END_SSE)), None),
    },
    Kind.TASK_LISTEN: {**_STREAM_RULES, E.DRAIN_BEGINS: _GRACEFUL_DRAIN},
    Kind.GET_STREAM: {**_STREAM_RULES, E.DRAIN_BEGINS: (None, (S.FINISHED, (A.STOP, A.END_SSE)), None)},
    Kind.RESUMED: _STREAM_RULES,
}


def _decided_rule(kind: Kind, state: State, event: Event) -> Rule | None:
    """Rule 1: in a decided state, a stopping event only cuts a write under way."""
    live = [_live_rule(kind, live_state, event) for live_state in (S.WAITING, S.SSE, S.POLLED)]
    if live == [None, None, None]:
        return None  # rule 5
    answered = state in (S.JSON, S.FINISHED)
    if kind is Kind.LEGACY and event is E.CLIENT_GONE:
        return (state, (A.NOTE_CANCELLED,) if answered else ())
    if kind is Kind.LEGACY and event is E.WRITE_STALLED and answered:
        return (state, (A.STOP, A.NOTE_CANCELLED))
    if event is E.SESSION_CANCEL and state is S.FINISHED:  # rule 3: its final may wait in the stream
        return (state, (A.STOP, A.SEAL))
    first = live[0] or live[1]  # what the event does to a live answer (a stream: once open)
    stops = first is not None and A.STOP in first[1]
    return (state, (A.STOP,) if stops else ())


def _live_rule(kind: Kind, state: State, event: Event) -> Rule | None:
    return _KIND_RULES[kind].get(event, _LIVE_RULES[event])[state]


def _table(kind: Kind) -> tuple[tuple[Rule | None, ...], ...]:
    return tuple(
        tuple(_live_rule(kind, state, event) if state in LIVE else _decided_rule(kind, state, event) for event in Event)
        for state in State
    )


_TABLES: Final = tuple(_table(kind) for kind in Kind)
"""Indexed by kind, state and event (all ``IntEnum``: a rule is three tuple lookups)."""

ENDS_ON_DRAIN: Final = frozenset(kind for kind in Kind if _TABLES[kind][S.SSE][E.DRAIN_BEGINS] != (S.SSE, ()))
"""Kinds the drain's start ends (``drain_begins`` is watched only for them: a task each)."""


def step(kind: Kind, state: State, event: Event) -> Rule:
    """The next state and the actions to carry out, in order; ``OutOfOrder`` for ``✗``."""
    rule = _TABLES[kind][state][event]
    if rule is None:
        raise OutOfOrder(f"{event.name} cannot come to a {kind.name} answer in {state.name}")
    return rule


class Answer:
    """One request's answer: its kind and the state it is in."""

    __slots__ = ("_table", "kind", "state")

    def __init__(self, kind: Kind) -> None:
        self.kind = kind
        self.state = _WAITING
        self._table = _TABLES[kind]

    def step(self, event: Event) -> Actions:
        """Take ``event``: the actions to carry out, in order."""
        rule = self._table[self.state][event]
        if rule is None:
            raise OutOfOrder(f"{event.name} cannot come to a {self.kind.name} answer in {self.state.name}")
        self.state = rule[0]
        return rule[1]

    @property
    def is_live(self) -> bool:
        """Not decided yet: the exchange's end (or an event) still decides the answer."""
        return self.state <= State.POLLED

    def __repr__(self) -> str:
        return f"<Answer {self.kind.name} {self.state.name}>"
