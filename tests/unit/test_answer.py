"""The answer machine (``gateway.protocol.answer``): every (kind, state, event) rule, and its
invariants over random event sequences.

The expected rules are written out below, row by row, independently of how the module builds
its table: a changed rule fails here until this page says so too. ``✗``: out of order
(``OutOfOrder``); an empty action list: the event is ignored (or, in a live state, changes
nothing yet).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.protocol.answer import (
    AT_ONCE,
    DECIDED,
    FINALS,
    LIVE,
    OWN_EVENTS,
    STARTS,
    STREAMS,
    WRITES,
    Action,
    Answer,
    Event,
    Kind,
    OutOfOrder,
    State,
    step,
)

CALL = """
WAITING    FIRST_FINAL           JSON       send_json
WAITING    FIRST_NOTE            SSE        stream
WAITING    REFUSED               JSON       send_refusal
WAITING    FINAL                 ✗
WAITING    EXHAUSTED             CANCELLED  note_cancelled start_sse end_sse
WAITING    POLL_CLOSED           ✗
WAITING    CLIENT_GONE           ABANDONED  stop note_cancelled
WAITING    WRITE_STALLED         ABANDONED  stop note_cancelled
WAITING    POSTED_CANCEL         CANCELLED  stop note_cancelled start_sse end_sse
WAITING    SESSION_CANCEL        ✗
WAITING    SESSION_CANCEL_REPLY  ✗
WAITING    DRAIN_BEGINS          WAITING
WAITING    BUDGET_SPENT          SHUT_DOWN  stop note_shutdown shutdown_json
WAITING    DEADLINE              ABANDONED  note_cancelled
WAITING    STOPPED               ABANDONED  note_cancelled

SSE        FIRST_FINAL           ✗
SSE        FIRST_NOTE            ✗
SSE        REFUSED               ✗
SSE        FINAL                 FINISHED   note_answer end_sse
SSE        EXHAUSTED             FINISHED   end_sse
SSE        POLL_CLOSED           POLLED
SSE        CLIENT_GONE           ABANDONED  stop note_cancelled
SSE        WRITE_STALLED         ABANDONED  stop note_cancelled
SSE        POSTED_CANCEL         CANCELLED  stop note_cancelled end_sse
SSE        SESSION_CANCEL        ✗
SSE        SESSION_CANCEL_REPLY  ✗
SSE        DRAIN_BEGINS          SSE
SSE        BUDGET_SPENT          SHUT_DOWN  stop note_shutdown shutdown_event end_sse
SSE        DEADLINE              ABANDONED  note_cancelled
SSE        STOPPED               ABANDONED  note_cancelled

POLLED     FIRST_FINAL           ✗
POLLED     FIRST_NOTE            ✗
POLLED     REFUSED               ✗
POLLED     FINAL                 FINISHED   note_answer
POLLED     EXHAUSTED             FINISHED
POLLED     POLL_CLOSED           ✗
POLLED     CLIENT_GONE           ABANDONED  stop note_cancelled
POLLED     WRITE_STALLED         ABANDONED  stop note_cancelled
POLLED     POSTED_CANCEL         CANCELLED  stop note_cancelled
POLLED     SESSION_CANCEL        ✗
POLLED     SESSION_CANCEL_REPLY  ✗
POLLED     DRAIN_BEGINS          POLLED
POLLED     BUDGET_SPENT          SHUT_DOWN  stop note_shutdown
POLLED     DEADLINE              ABANDONED  note_cancelled
POLLED     STOPPED               ABANDONED  note_cancelled

JSON       FIRST_FINAL           JSON
JSON       FIRST_NOTE            JSON
JSON       REFUSED               JSON
JSON       FINAL                 JSON
JSON       EXHAUSTED             JSON
JSON       POLL_CLOSED           JSON
JSON       CLIENT_GONE           JSON       stop
JSON       WRITE_STALLED         JSON       stop
JSON       POSTED_CANCEL         JSON       stop
JSON       SESSION_CANCEL        ✗
JSON       SESSION_CANCEL_REPLY  ✗
JSON       DRAIN_BEGINS          JSON
JSON       BUDGET_SPENT          JSON       stop
JSON       DEADLINE              JSON
JSON       STOPPED               JSON

FINISHED   FIRST_FINAL           FINISHED
FINISHED   FIRST_NOTE            FINISHED
FINISHED   REFUSED               FINISHED
FINISHED   FINAL                 FINISHED
FINISHED   EXHAUSTED             FINISHED
FINISHED   POLL_CLOSED           FINISHED
FINISHED   CLIENT_GONE           FINISHED   stop
FINISHED   WRITE_STALLED         FINISHED   stop
FINISHED   POSTED_CANCEL         FINISHED   stop
FINISHED   SESSION_CANCEL        ✗
FINISHED   SESSION_CANCEL_REPLY  ✗
FINISHED   DRAIN_BEGINS          FINISHED
FINISHED   BUDGET_SPENT          FINISHED   stop
FINISHED   DEADLINE              FINISHED
FINISHED   STOPPED               FINISHED

CANCELLED  FIRST_FINAL           CANCELLED
CANCELLED  FIRST_NOTE            CANCELLED
CANCELLED  REFUSED               CANCELLED
CANCELLED  FINAL                 CANCELLED
CANCELLED  EXHAUSTED             CANCELLED
CANCELLED  POLL_CLOSED           CANCELLED
CANCELLED  CLIENT_GONE           CANCELLED  stop
CANCELLED  WRITE_STALLED         CANCELLED  stop
CANCELLED  POSTED_CANCEL         CANCELLED  stop
CANCELLED  SESSION_CANCEL        ✗
CANCELLED  SESSION_CANCEL_REPLY  ✗
CANCELLED  DRAIN_BEGINS          CANCELLED
CANCELLED  BUDGET_SPENT          CANCELLED  stop
CANCELLED  DEADLINE              CANCELLED
CANCELLED  STOPPED               CANCELLED

SHUT_DOWN  FIRST_FINAL           SHUT_DOWN
SHUT_DOWN  FIRST_NOTE            SHUT_DOWN
SHUT_DOWN  REFUSED               SHUT_DOWN
SHUT_DOWN  FINAL                 SHUT_DOWN
SHUT_DOWN  EXHAUSTED             SHUT_DOWN
SHUT_DOWN  POLL_CLOSED           SHUT_DOWN
SHUT_DOWN  CLIENT_GONE           SHUT_DOWN  stop
SHUT_DOWN  WRITE_STALLED         SHUT_DOWN  stop
SHUT_DOWN  POSTED_CANCEL         SHUT_DOWN  stop
SHUT_DOWN  SESSION_CANCEL        ✗
SHUT_DOWN  SESSION_CANCEL_REPLY  ✗
SHUT_DOWN  DRAIN_BEGINS          SHUT_DOWN
SHUT_DOWN  BUDGET_SPENT          SHUT_DOWN  stop
SHUT_DOWN  DEADLINE              SHUT_DOWN
SHUT_DOWN  STOPPED               SHUT_DOWN

ABANDONED  FIRST_FINAL           ABANDONED
ABANDONED  FIRST_NOTE            ABANDONED
ABANDONED  REFUSED               ABANDONED
ABANDONED  FINAL                 ABANDONED
ABANDONED  EXHAUSTED             ABANDONED
ABANDONED  POLL_CLOSED           ABANDONED
ABANDONED  CLIENT_GONE           ABANDONED  stop
ABANDONED  WRITE_STALLED         ABANDONED  stop
ABANDONED  POSTED_CANCEL         ABANDONED  stop
ABANDONED  SESSION_CANCEL        ✗
ABANDONED  SESSION_CANCEL_REPLY  ✗
ABANDONED  DRAIN_BEGINS          ABANDONED
ABANDONED  BUDGET_SPENT          ABANDONED  stop
ABANDONED  DEADLINE              ABANDONED
ABANDONED  STOPPED               ABANDONED
"""
"""Every (state, event) rule of a modern request (``Kind.CALL``): ``STATE EVENT NEXT actions…``."""

LISTEN = """
WAITING    DRAIN_BEGINS          ABANDONED  stop note_cancelled
WAITING    DEADLINE              FINISHED   start_sse write_graceful end_sse
SSE        DRAIN_BEGINS          FINISHED   stop write_graceful end_sse
SSE        DEADLINE              FINISHED   write_graceful end_sse
POLLED     DRAIN_BEGINS          FINISHED   stop
POLLED     DEADLINE              FINISHED
JSON       DRAIN_BEGINS          JSON       stop
FINISHED   DRAIN_BEGINS          FINISHED   stop
CANCELLED  DRAIN_BEGINS          CANCELLED  stop
SHUT_DOWN  DRAIN_BEGINS          SHUT_DOWN  stop
ABANDONED  DRAIN_BEGINS          ABANDONED  stop
"""
"""Where a forwarded ``subscriptions/listen`` differs from a ``CALL``: the drain's start ends it
gracefully once its stream is open, abandons it before; its lifetime ends it gracefully."""

LEGACY = """
WAITING    CLIENT_GONE           WAITING    note_cancelled
WAITING    SESSION_CANCEL        CANCELLED  stop note_cancelled start_sse end_sse
WAITING    SESSION_CANCEL_REPLY  JSON       stop reply_json
SSE        CLIENT_GONE           SSE        note_cancelled
SSE        SESSION_CANCEL        CANCELLED  stop seal note_cancelled end_sse
SSE        SESSION_CANCEL_REPLY  FINISHED   stop reply_event end_sse
POLLED     CLIENT_GONE           POLLED     note_cancelled
POLLED     SESSION_CANCEL        CANCELLED  stop seal note_cancelled
POLLED     SESSION_CANCEL_REPLY  FINISHED   stop
JSON       CLIENT_GONE           JSON       note_cancelled
JSON       WRITE_STALLED         JSON       stop note_cancelled
JSON       SESSION_CANCEL        JSON       stop
JSON       SESSION_CANCEL_REPLY  JSON       stop
FINISHED   CLIENT_GONE           FINISHED   note_cancelled
FINISHED   WRITE_STALLED         FINISHED   stop note_cancelled
FINISHED   SESSION_CANCEL        FINISHED   stop seal
FINISHED   SESSION_CANCEL_REPLY  FINISHED   stop
CANCELLED  CLIENT_GONE           CANCELLED
CANCELLED  SESSION_CANCEL        CANCELLED  stop
CANCELLED  SESSION_CANCEL_REPLY  CANCELLED  stop
SHUT_DOWN  CLIENT_GONE           SHUT_DOWN
SHUT_DOWN  SESSION_CANCEL        SHUT_DOWN  stop
SHUT_DOWN  SESSION_CANCEL_REPLY  SHUT_DOWN  stop
ABANDONED  CLIENT_GONE           ABANDONED
ABANDONED  SESSION_CANCEL        ABANDONED  stop
ABANDONED  SESSION_CANCEL_REPLY  ABANDONED  stop
"""
"""Where a legacy session's request differs from a ``CALL``: its client's leaving is noted, not a
stop; the session cancels it, without a reply (the client's own cancel: its stream, once
opened, is sealed, so that a resume gets nothing for the request) or with one."""

Rule = tuple[State, tuple[Action, ...]] | None


def rules_of(text: str) -> dict[tuple[State, Event], Rule]:
    """A written rule table: ``STATE EVENT TARGET actions…`` per line; ``✗`` for out of order,
    ``=`` for the state staying, ``DECIDED`` for each decided state (``test_answer_streams.py``)."""
    rules: dict[tuple[State, Event], Rule] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        state_name, event_name, target, *actions = line.split()
        event = Event[event_name]
        states = sorted(DECIDED) if state_name == "DECIDED" else [State[state_name]]
        for state in states:
            assert (state, event) not in rules, f"written twice: {line}"
            if target == "✗":
                rules[state, event] = None
            else:
                next_state = state if target == "=" else State[target]
                rules[state, event] = (next_state, tuple(Action[name.upper()] for name in actions))
    return rules


_CALL = rules_of(CALL)
REQUESTS = [kind for kind in Kind if kind not in STREAMS]
"""The kinds that answer a request (``LazyStream``); the streams' rules: ``test_answer_streams.py``."""
EXPECTED: dict[Kind, dict[tuple[State, Event], Rule]] = {
    Kind.CALL: _CALL,
    Kind.LISTEN: {**_CALL, **rules_of(LISTEN)},
    Kind.LEGACY: {**_CALL, **rules_of(LEGACY)},
}
PAIRS = [(kind, state, event) for kind in REQUESTS for state in State for event in Event]


def test_the_rows_name_every_pair_and_each_difference_is_one() -> None:
    assert set(_CALL) == {(state, event) for state in State for event in Event}
    for text in (LISTEN, LEGACY):
        for key, rule in rules_of(text).items():
            assert rule != _CALL[key], f"{key} is written as a difference but is the CALL's rule"


@pytest.mark.parametrize(("kind", "state", "event"), PAIRS, ids=[f"{k.name}-{s.name}-{e.name}" for k, s, e in PAIRS])
def test_rule(kind: Kind, state: State, event: Event) -> None:
    expected = EXPECTED[kind][state, event]
    answer = Answer(kind)
    answer.state = state
    if expected is None:
        with pytest.raises(OutOfOrder, match=f"{event.name} cannot come to a {kind.name} answer in {state.name}"):
            step(kind, state, event)
        with pytest.raises(OutOfOrder):
            answer.step(event)
        assert answer.state is state  # an out-of-order event leaves the answer as it was
        return
    assert step(kind, state, event) == expected
    assert answer.step(event) == expected[1]
    assert answer.state is expected[0]
    assert answer.is_live is (expected[0] in LIVE)


def test_an_answer_begins_waiting() -> None:
    answer = Answer(Kind.LEGACY)
    assert (answer.kind, answer.state, answer.is_live) == (Kind.LEGACY, State.WAITING, True)
    assert repr(answer) == "<Answer LEGACY WAITING>"
    assert {State.WAITING, State.SSE, State.POLLED} == LIVE
    assert set(State) - LIVE == DECIDED


@pytest.mark.parametrize(
    ("kind", "events", "state", "actions"),
    [
        # the usual answers, as the edge feeds them
        (Kind.CALL, [Event.FIRST_FINAL], State.JSON, [Action.SEND_JSON]),
        (
            Kind.CALL,
            [Event.FIRST_NOTE, Event.FINAL],
            State.FINISHED,
            [Action.STREAM, Action.NOTE_ANSWER, Action.END_SSE],
        ),
        # a POSTed cancel before the response began: an empty event stream, once the exchange is over
        (
            Kind.CALL,
            [Event.POSTED_CANCEL, Event.EXHAUSTED],
            State.CANCELLED,
            [Action.STOP, Action.NOTE_CANCELLED, Action.START_SSE, Action.END_SSE],
        ),
        # a legacy client left mid-stream: the call goes on to its final, the log says it left
        (
            Kind.LEGACY,
            [Event.FIRST_NOTE, Event.CLIENT_GONE, Event.FINAL],
            State.FINISHED,
            [Action.STREAM, Action.NOTE_CANCELLED, Action.NOTE_ANSWER, Action.END_SSE],
        ),
        # a polling stream closed, then DELETE: the reply is the session's, nothing is written
        (
            Kind.LEGACY,
            [Event.FIRST_NOTE, Event.POLL_CLOSED, Event.SESSION_CANCEL_REPLY, Event.FINAL],
            State.FINISHED,
            [Action.STREAM, Action.STOP],
        ),
        # a legacy client cancels while its polling stream's connection is closed: the stream is
        # sealed at once (a resume gets nothing), and nothing is written
        (
            Kind.LEGACY,
            [Event.FIRST_NOTE, Event.POLL_CLOSED, Event.SESSION_CANCEL, Event.EXHAUSTED],
            State.CANCELLED,
            [Action.STREAM, Action.STOP, Action.SEAL, Action.NOTE_CANCELLED],
        ),
        # a listen at the drain's start, then its budget: the graceful end only
        (
            Kind.LISTEN,
            [Event.FIRST_NOTE, Event.DRAIN_BEGINS, Event.BUDGET_SPENT, Event.EXHAUSTED],
            State.FINISHED,
            [Action.STREAM, Action.STOP, Action.WRITE_GRACEFUL, Action.END_SSE, Action.STOP],
        ),
        # a modern call at the drain's start runs on; the spent budget ends it with -31004
        (
            Kind.CALL,
            [Event.FIRST_NOTE, Event.DRAIN_BEGINS, Event.BUDGET_SPENT, Event.FINAL],
            State.SHUT_DOWN,
            [Action.STREAM, Action.STOP, Action.NOTE_SHUTDOWN, Action.SHUTDOWN_EVENT, Action.END_SSE],
        ),
    ],
)
def test_sequences(kind: Kind, events: list[Event], state: State, actions: list[Action]) -> None:
    answer = Answer(kind)
    done = [action for event in events for action in answer.step(event)]
    assert (answer.state, done) == (state, actions)


EXTERNAL = frozenset(Event) - OWN_EVENTS - {Event.DEADLINE, Event.STOPPED}
"""Pushed by the world (the connection, the drain, the session, a POSTed cancel)."""
SSE_ONLY = frozenset({Action.WRITE_GRACEFUL, Action.SHUTDOWN_EVENT, Action.REPLY_EVENT, Action.END_SSE})
ANSWERS = FINALS | {Action.NOTE_ANSWER}
"""A final answer written (or, for the stream's own final, noted as written)."""


def _allowed(kind: Kind, state: State, event: Event) -> bool:
    try:
        step(kind, state, event)
    except OutOfOrder:
        return False
    return True


class Replay:
    """An answer fed as the edge feeds it, each step checked against the machine's rules."""

    def __init__(self, kind: Kind) -> None:
        self.kind = kind
        self.answer = Answer(kind)
        self.done: list[Action] = []
        self.decisions = 0
        self.polled = False

    def taken(self) -> list[Event]:
        """The events the answer's state takes (the others are out of order)."""
        return [event for event in Event if _allowed(self.kind, self.answer.state, event)]

    def feed(self, event: Event) -> None:
        kind, answer = self.kind, self.answer
        before = answer.state
        try:
            actions = answer.step(event)
        except OutOfOrder:
            # only the answer's own events in the wrong live state, or a session's cancel of a
            # request that has no session
            assert (event in OWN_EVENTS and before in LIVE) or (
                kind is not Kind.LEGACY and event in (Event.SESSION_CANCEL, Event.SESSION_CANCEL_REPLY)
            )
            assert answer.state is before
            return
        # STOP comes first, and only from the world; what is done at once (no I/O) leads
        assert Action.STOP not in actions[1:]
        if Action.STOP in actions:
            assert event in EXTERNAL
        leading = next((i for i, action in enumerate(actions) if action not in AT_ONCE), len(actions))
        assert not set(actions[leading:]) & AT_ONCE
        if Action.SEAL in actions:  # only a legacy client's own cancel seals its stream
            assert (kind, event) == (Kind.LEGACY, Event.SESSION_CANCEL)
        if kind is Kind.LEGACY and event is Event.CLIENT_GONE:
            assert Action.STOP not in actions  # a legacy client's leaving is no cancellation
        if before in DECIDED:
            # decided once: the state stays, and nothing more is sent or answered
            assert answer.state is before
            assert not set(actions) & (WRITES | ANSWERS | {Action.STREAM, Action.NOTE_SHUTDOWN})
        elif event in EXTERNAL and Action.STOP not in actions:
            # the world cannot decide a running exchange's answer without stopping it
            assert answer.state in LIVE
            assert not set(actions) & WRITES
        if before in LIVE and answer.state in DECIDED:
            self.decisions += 1
        if before is State.SSE and answer.state is State.POLLED:
            self.polled = True
        elif self.polled:  # its connection was closed already: nothing more goes on it
            assert not set(actions) & SSE_ONLY
        self.done.extend(actions)

    def finish(self, end: Event) -> None:
        """The exchange is over: a live answer is told why it stopped (``end``)."""
        self.feed(end)
        every, state = self.done, self.answer.state
        # exactly one final outcome
        assert self.decisions == 1
        assert state in DECIDED
        # one response start at most, one final answer at most, one end of the stream at most
        assert sum(action in STARTS for action in every) <= 1
        assert sum(action in ANSWERS for action in every) <= 1
        assert every.count(Action.END_SSE) <= 1
        for i, action in enumerate(every):
            opened = {Action.STREAM, Action.START_SSE} & set(every[:i])
            if action in SSE_ONLY:
                assert opened, f"{action.name} before the stream was opened: {every}"
            if action in STARTS:
                assert not opened, f"{action.name} after the response began: {every}"
        if state is State.CANCELLED:
            # the client cancelled: no reply, of any kind, and the log says so
            assert not set(every) & (ANSWERS | {Action.NOTE_SHUTDOWN})
            assert Action.NOTE_CANCELLED in every
        if state is State.SHUT_DOWN:
            assert Action.NOTE_SHUTDOWN in every
        if state is State.ABANDONED:
            assert Action.NOTE_CANCELLED in every
            assert not set(every) & ANSWERS


@settings(max_examples=1000)
@given(
    kind=st.sampled_from(REQUESTS),
    picks=st.lists(st.integers(0, 2 * len(Event) - 1), max_size=12),
    end=st.sampled_from([Event.STOPPED, Event.DEADLINE]),
)
def test_any_sequence_keeps_the_rules(kind: Kind, picks: list[int], end: Event) -> None:
    """Events in any order: a pick below ``len(Event)`` is one of the events the state takes,
    any other an event at random, perhaps out of order (and then dropped)."""
    replay = Replay(kind)
    for pick in picks:
        if pick < len(Event):
            taken = replay.taken()
            replay.feed(taken[pick % len(taken)])
        else:
            replay.feed(Event(pick - len(Event)))
    replay.finish(end)


DEPTH = 4


@pytest.mark.parametrize("kind", REQUESTS, ids=[kind.name for kind in REQUESTS])
def test_every_short_sequence_keeps_the_rules(kind: Kind) -> None:
    """Every sequence of up to ``DEPTH`` events the states take (random ones miss rare paths,
    such as a polling stream closed before its final)."""
    sequences = 0
    pending: list[list[Event]] = [[]]
    while pending:
        events = pending.pop()
        for end in (Event.STOPPED, Event.DEADLINE):
            replay = Replay(kind)
            for event in events:
                replay.feed(event)
            replay.finish(end)
            sequences += 1
        if len(events) < DEPTH:
            replay = Replay(kind)
            for event in events:
                replay.feed(event)
            pending.extend([*events, event] for event in replay.taken())
    assert sequences > 10_000
