"""The answer machine's stream kinds (``gateway.protocol.answer.STREAMS``): every (kind, state,
event) rule written out, and the streams' invariants over every short sequence of events.

As in ``test_answer.py``, the rules are written here independently of how the module builds its
table. A stream's rules are written once (``STREAM``, every state and event), and each kind
writes where it differs. ``DECIDED`` rows stand for each of the five decided states.
"""

from __future__ import annotations

import pytest

from gateway.protocol.answer import (
    DECIDED,
    ENDS_ON_DRAIN,
    LIVE,
    STREAMS,
    Action,
    Answer,
    Event,
    Kind,
    OutOfOrder,
    State,
)
from tests.unit.test_answer import rules_of

STREAM = """
WAITING    FIRST_NOTE            SSE        stream
SSE        EXHAUSTED             FINISHED   end_sse
SSE        CLIENT_GONE           ABANDONED  stop
SSE        WRITE_STALLED         ABANDONED  stop
SSE        DRAIN_BEGINS          SSE
SSE        BUDGET_SPENT          FINISHED   stop end_sse
SSE        DEADLINE              FINISHED   end_sse
SSE        STOPPED               FINISHED   end_sse
DECIDED    FIRST_NOTE            =
DECIDED    EXHAUSTED             =
DECIDED    CLIENT_GONE           =          stop
DECIDED    WRITE_STALLED         =          stop
DECIDED    DRAIN_BEGINS          =
DECIDED    BUDGET_SPENT          =          stop
DECIDED    DEADLINE              =
DECIDED    STOPPED               =
"""
"""Every rule of a stream that runs on through the drain (``Kind.RESUMED``); a pair not written
is out of order (``✗``): a stream opens at once (``WAITING`` takes nothing else), is never
polled, and gets no answer's events and no cancel in any state. ``=``: the state stays."""

EMULATED_LISTEN = """
SSE        DRAIN_BEGINS          FINISHED   stop write_graceful end_sse
SSE        DEADLINE              FINISHED   write_graceful end_sse
DECIDED    DRAIN_BEGINS          =          stop
"""
"""The gateway's own listen: the drain's start and its lifetime end it with its graceful result."""

TASK_LISTEN = """
SSE        DRAIN_BEGINS          FINISHED   stop write_graceful end_sse
DECIDED    DRAIN_BEGINS          =          stop
"""
"""The listen for task status: the drain's start ends it gracefully, its lifetime without."""

GET_STREAM = """
SSE        DRAIN_BEGINS          FINISHED   stop end_sse
DECIDED    DRAIN_BEGINS          =          stop
"""
"""A legacy session's GET stream: the drain's start ends it (it holds no request to wait for)."""

_STREAM = rules_of(STREAM)
DIFFERENCES = {
    Kind.EMULATED_LISTEN: rules_of(EMULATED_LISTEN),
    Kind.TASK_LISTEN: rules_of(TASK_LISTEN),
    Kind.GET_STREAM: rules_of(GET_STREAM),
    Kind.RESUMED: {},
}
EXPECTED = {kind: {**_STREAM, **differences} for kind, differences in DIFFERENCES.items()}
PAIRS = [(kind, state, event) for kind in sorted(STREAMS) for state in State for event in Event]


def test_the_stream_kinds_are_the_four_streamed_responses_and_each_difference_is_one() -> None:
    assert set(EXPECTED) == STREAMS == {Kind.EMULATED_LISTEN, Kind.TASK_LISTEN, Kind.GET_STREAM, Kind.RESUMED}
    for differences in DIFFERENCES.values():
        for key, rule in differences.items():
            assert rule != _STREAM[key], f"{key} is written as a difference but is every stream's rule"


@pytest.mark.parametrize(("kind", "state", "event"), PAIRS, ids=[f"{k.name}-{s.name}-{e.name}" for k, s, e in PAIRS])
def test_rule(kind: Kind, state: State, event: Event) -> None:
    expected = EXPECTED[kind].get((state, event))
    answer = Answer(kind)
    answer.state = state
    if expected is None:
        with pytest.raises(OutOfOrder, match=f"{event.name} cannot come to a {kind.name} answer in {state.name}"):
            answer.step(event)
        assert answer.state is state
        return
    assert answer.step(event) == expected[1]
    assert answer.state is expected[0]


def test_the_drain_start_is_watched_for_the_kinds_it_ends() -> None:
    # a task each: only for a forwarded listen and the streams whose rules end them at its start
    assert {Kind.LISTEN, Kind.EMULATED_LISTEN, Kind.TASK_LISTEN, Kind.GET_STREAM} == ENDS_ON_DRAIN


@pytest.mark.parametrize(
    ("kind", "events", "state", "actions"),
    [
        # an emulated listen at the drain's start, then its budget: the graceful end, once
        (
            Kind.EMULATED_LISTEN,
            [Event.FIRST_NOTE, Event.DRAIN_BEGINS, Event.BUDGET_SPENT, Event.EXHAUSTED],
            State.FINISHED,
            [Action.STREAM, Action.STOP, Action.WRITE_GRACEFUL, Action.END_SSE, Action.STOP],
        ),
        # a task listen's lifetime: the stream ends, without the graceful result
        (Kind.TASK_LISTEN, [Event.FIRST_NOTE, Event.DEADLINE], State.FINISHED, [Action.STREAM, Action.END_SSE]),
        # a client that left a GET stream gets nothing more, not even its end
        (
            Kind.GET_STREAM,
            [Event.FIRST_NOTE, Event.CLIENT_GONE, Event.DRAIN_BEGINS, Event.EXHAUSTED],
            State.ABANDONED,
            [Action.STREAM, Action.STOP, Action.STOP],
        ),
        # a resumed stream runs on through the drain's start; the spent budget ends it
        (
            Kind.RESUMED,
            [Event.FIRST_NOTE, Event.DRAIN_BEGINS, Event.BUDGET_SPENT],
            State.FINISHED,
            [Action.STREAM, Action.STOP, Action.END_SSE],
        ),
    ],
)
def test_sequences(kind: Kind, events: list[Event], state: State, actions: list[Action]) -> None:
    answer = Answer(kind)
    done = [action for event in events for action in answer.step(event)]
    assert (answer.state, done) == (state, actions)


OWN = frozenset({Event.FIRST_NOTE, Event.EXHAUSTED, Event.DEADLINE, Event.STOPPED})
"""What a stream's own task steps; the rest is pushed by the world (the connection, the drain)."""
WRITES = frozenset({Action.WRITE_GRACEFUL, Action.END_SSE})


def _taken(kind: Kind, state: State) -> list[Event]:
    taken = []
    for event in Event:
        answer = Answer(kind)
        answer.state = state
        try:
            answer.step(event)
        except OutOfOrder:
            continue
        taken.append(event)
    return taken


def _check(kind: Kind, events: list[Event]) -> None:
    """Feed ``events`` (events the states take), then ``stopped`` if the stream is still live,
    and check the invariants."""
    answer = Answer(kind)
    done: list[Action] = []
    decisions = 0

    def feed(event: Event) -> None:
        nonlocal decisions
        before = answer.state
        actions = answer.step(event)
        assert Action.STOP not in actions[1:]  # stop first, and only from the world
        if Action.STOP in actions:
            assert event not in OWN
        if before in DECIDED:  # decided once: the state stays, nothing more is written
            assert answer.state is before
            assert set(actions) <= {Action.STOP}
        if before in LIVE and answer.state in DECIDED:
            decisions += 1
        done.extend(actions)

    for event in events:
        feed(event)
    if not events:
        return
    if answer.is_live:
        feed(Event.STOPPED)
    assert decisions == 1
    assert answer.state in DECIDED
    assert done[0] is Action.STREAM
    # the end is written once, after the graceful result (a listen's, and only a listen's)
    writes = [action for action in done if action in WRITES]
    if answer.state is State.ABANDONED:
        assert writes == []  # the client left: nothing more
    else:
        assert answer.state is State.FINISHED
        assert writes in ([Action.END_SSE], [Action.WRITE_GRACEFUL, Action.END_SSE])
    if Action.WRITE_GRACEFUL in done:
        assert kind in (Kind.EMULATED_LISTEN, Kind.TASK_LISTEN)


@pytest.mark.parametrize("kind", sorted(STREAMS), ids=[kind.name for kind in sorted(STREAMS)])
def test_every_short_sequence_keeps_the_streams_rules(kind: Kind) -> None:
    sequences = 0
    pending: list[list[Event]] = [[]]
    while pending:
        events = pending.pop()
        _check(kind, events)
        sequences += 1
        if len(events) < 5:
            answer = Answer(kind)
            for event in events:
                answer.step(event)
            pending.extend([*events, event] for event in _taken(kind, answer.state))
    assert sequences > 1_000
