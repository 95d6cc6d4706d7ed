"""What a legacy session's client POSTs without an id reaches the session (LegacySession.take)."""

from __future__ import annotations

import anyio
import pytest

from gateway.protocol.jsonrpc import ErrorReply, Notification, Request, Result
from gateway.relay.sessions import CancelHandle, LegacySession
from gateway.stdio.ask import ChildAsk

pytestmark = pytest.mark.anyio


def session() -> LegacySession:
    return LegacySession("s1", "2025-11-25", {}, None, last_seen=0.0)


async def test_initialized_marks_the_session_initialized() -> None:
    legacy = session()
    legacy.take(Notification("notifications/initialized"))
    assert legacy.initialized


async def test_a_cancelled_names_its_request_by_the_exact_json_type_of_its_id() -> None:
    legacy = session()
    seven, text_seven = CancelHandle(), CancelHandle()
    legacy.in_flight[7] = seven
    legacy.in_flight["7"] = text_seven
    legacy.take(Notification("notifications/cancelled", {"requestId": "7"}))
    assert text_seven.scope.cancel_called
    assert not text_seven.reply  # no answer follows the client's own cancel
    assert not seven.scope.cancel_called


async def test_a_cancelled_naming_true_or_nothing_cancels_nothing() -> None:
    legacy = session()
    one = legacy.in_flight[1] = CancelHandle()
    legacy.take(Notification("notifications/cancelled", {"requestId": True}))  # True == 1, but not an id
    legacy.take(Notification("notifications/cancelled", {}))
    assert not one.scope.cancel_called


async def test_the_clients_response_answers_the_childs_question_it_names() -> None:
    legacy = session()
    ask = ChildAsk(Request(3, "roots/list", None))
    gateway_id = legacy.track_ask(ask)
    legacy.take(Result(gateway_id, {"roots": []}))
    assert ask.is_answered
    assert gateway_id not in legacy.asks
    other = ChildAsk(Request(4, "roots/list", None))
    legacy.track_ask(other)
    legacy.take(ErrorReply("g-99", {"code": -1, "message": "no such question"}))  # nobody waits for it
    assert not other.is_answered


async def test_a_cancel_handle_cancels_the_scope_it_is_attached_to_even_when_cancelled_first() -> None:
    early, late = CancelHandle(), CancelHandle()
    early.cancel(reply=False)
    early_scope, late_scope = anyio.CancelScope(), anyio.CancelScope()
    early.attach(early_scope)  # cancelled before the response's scope existed: cancelled on attaching
    late.attach(late_scope)
    assert early_scope.cancel_called
    assert not early.reply
    assert not late_scope.cancel_called
    late.cancel(reply=True)
    assert late_scope.cancel_called
    assert late.reply
    assert late.scope is late_scope  # no second scope of its own


async def test_a_cancel_handle_attached_with_tell_tells_instead_of_cancelling() -> None:
    early, late = CancelHandle(), CancelHandle()
    early.cancel(reply=False)
    told: list[tuple[str, bool]] = []
    early_scope, late_scope = anyio.CancelScope(), anyio.CancelScope()
    early.attach(early_scope, lambda reply: told.append(("early", reply)))  # told on attaching
    late.attach(late_scope, lambda reply: told.append(("late", reply)))
    assert told == [("early", False)]
    late.cancel(reply=True)  # DELETE, expiry
    assert told == [("early", False), ("late", True)]
    assert not early_scope.cancel_called  # the answer's machine decides whether it stops
    assert not late_scope.cancel_called


async def test_a_withdrawn_question_is_forgotten_under_its_id_even_after_the_session_dropped_it() -> None:
    """The child withdrew g-1; another call's question was tracked before g-1's reader told the
    client, and tracking drops every answered ask (a withdrawn one counts): g-1 is still found,
    so the client is still told, and its late answer reaches nobody."""
    legacy = session()
    first = ChildAsk(Request("s-1", "elicitation/create", {"message": "?"}))
    assert legacy.track_ask(first) == "g-1"
    assert first.withdraw("timed out")
    second = ChildAsk(Request("s-2", "elicitation/create", {"message": "?"}))
    assert legacy.track_ask(second) == "g-2"
    assert "g-1" not in legacy.asks  # dropped by the second track
    assert legacy.forget_ask(first) == "g-1"
    assert legacy.forget_ask(second) == "g-2"
    assert legacy.asks == {}
    assert not legacy.answer_ask(Result("g-2", {"action": "accept"}))  # forgotten: nobody waits
    assert legacy.forget_ask(ChildAsk(Request("s-3", "ping", None))) is None  # never sent here
