"""The pending table of one child: minted ids, progress-token rewriting, late and foreign traffic."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.protocol.correlation import (
    ChildRequest,
    Correlator,
    Late,
    Pending,
    ProgressFor,
    ReplyFor,
    Unsolicited,
)
from gateway.protocol.jsonrpc import PROGRESS, ErrorReply, JsonId, Notification, Request, Result

tokens = st.integers(min_value=-(2**63), max_value=2**64 - 1) | st.text(max_size=20)


def progress(token: object, value: float = 1, **extra: Any) -> Notification:
    return Notification(PROGRESS, {"progressToken": token, "progress": value, **extra})


def with_token(token: object, **params: Any) -> dict[str, Any]:
    return {**params, "_meta": {"progressToken": token, "io.modelcontextprotocol/protocolVersion": "2026-07-28"}}


# --- minted ids -------------------------------------------------------------------------


def test_ids_are_minted_from_one_upwards_per_child() -> None:
    first, second = Correlator[str](), Correlator[str]()

    assert [first.outgoing("ping", None, "a")[0].id for _ in range(3)] == [1, 2, 3]
    assert second.outgoing("ping", None, "b")[0].id == 1


def test_the_outgoing_request_carries_the_method_the_params_and_the_minted_id() -> None:
    correlator = Correlator[str]()

    request, pending = correlator.outgoing("tools/call", {"name": "echo"}, "owner")

    assert request == Request(1, "tools/call", {"name": "echo"})
    assert pending == Pending(child_id=1, method="tools/call", owner="owner", client_token=None)
    assert correlator.is_pending(1)
    assert len(correlator) == 1


def test_an_abandoned_id_is_never_minted_again() -> None:
    correlator = Correlator[str]()
    _, pending = correlator.outgoing("tools/call", None, "a")

    assert correlator.abandon(pending.child_id) is pending
    assert correlator.outgoing("tools/call", None, "b")[0].id == pending.child_id + 1


@given(st.lists(st.sampled_from(["send", "abandon", "reply", "drain"]), max_size=60), st.randoms())
def test_no_id_is_minted_twice_whatever_happens_in_between(operations: list[str], rng: random.Random) -> None:
    correlator = Correlator[int]()
    minted: list[int] = []
    live: list[int] = []
    for operation in operations:
        if operation == "send":
            child_id = correlator.outgoing("ping", None, len(minted))[1].child_id
            minted.append(child_id)
            live.append(child_id)
        elif operation == "abandon" and live:
            assert correlator.abandon(live.pop(rng.randrange(len(live)))) is not None
        elif operation == "reply" and live:
            assert isinstance(correlator.incoming(Result(live.pop(rng.randrange(len(live))), {})), ReplyFor)
        elif operation == "drain":
            assert sorted(pending.child_id for pending in correlator.drain()) == sorted(live)
            live.clear()
        assert len(correlator) == len(live)

    assert minted == list(range(1, len(minted) + 1))


# --- replies ----------------------------------------------------------------------------


def test_64_owners_all_using_client_id_1_each_get_their_own_reply() -> None:
    correlator = Correlator[tuple[str, JsonId]]()
    sent = {}
    for n in range(64):
        request, _ = correlator.outgoing("tools/call", {"name": "echo", "arguments": {"n": n}}, (f"owner-{n}", 1))
        sent[request.id] = n
    assert len(sent) == 64

    replies = [Result(child_id, {"echo": n}) for child_id, n in sent.items()]
    random.Random(7).shuffle(replies)
    for reply in replies:
        routed = correlator.incoming(reply)
        assert isinstance(routed, ReplyFor)
        assert routed.reply is reply
        assert routed.pending.owner == (f"owner-{reply.result['echo']}", 1)

    assert len(correlator) == 0


def test_an_error_reply_is_delivered_to_its_owner_whole() -> None:
    correlator = Correlator[str]()
    request, _ = correlator.outgoing("tools/call", None, "owner")
    reply = ErrorReply(request.id, {"code": -32602, "message": "bad", "data": {"why": "x"}})

    routed = correlator.incoming(reply)

    assert routed == ReplyFor(Pending(1, "tools/call", "owner", None), reply)


def test_a_reply_is_delivered_once_and_a_second_one_is_late() -> None:
    correlator = Correlator[str]()
    request, _ = correlator.outgoing("ping", None, "owner")

    assert isinstance(correlator.incoming(Result(request.id, {})), ReplyFor)
    assert correlator.incoming(Result(request.id, {})) == Late(Result(request.id, {}))


def test_a_reply_after_abandon_is_late() -> None:
    correlator = Correlator[str]()
    request, pending = correlator.outgoing("tools/call", None, "owner")

    assert correlator.abandon(pending.child_id) is pending
    assert not correlator.is_pending(request.id)
    assert correlator.incoming(Result(request.id, {"late": True})) == Late(Result(request.id, {"late": True}))


def test_abandoning_an_unknown_id_returns_none() -> None:
    assert Correlator[str]().abandon(99) is None


@pytest.mark.parametrize(
    "reply",
    [
        Result(99, {}),
        Result("1", {}),
        ErrorReply("1", {"code": -1, "message": "m"}),
        ErrorReply(None, {"code": -1, "message": "m"}),
    ],
    ids=["unknown-int", "string-of-a-pending-id", "error-with-string-id", "error-without-id"],
)
def test_a_reply_for_an_id_that_is_not_pending_is_late_and_leaves_the_table_alone(reply: Result | ErrorReply) -> None:
    correlator = Correlator[str]()
    correlator.outgoing("ping", None, "owner")  # child id 1

    assert correlator.incoming(reply) == Late(reply)
    assert correlator.is_pending(1)


@pytest.mark.parametrize("value", ["1", 1.0, True, None])
def test_is_pending_only_answers_true_for_an_integer_id(value: object) -> None:
    correlator = Correlator[str]()
    correlator.outgoing("ping", None, "owner")

    assert correlator.is_pending(1)
    assert not correlator.is_pending(value)


# --- progress tokens --------------------------------------------------------------------


@given(tokens)
def test_a_progress_token_is_rewritten_to_the_child_id_and_restored_exactly(client_token: JsonId) -> None:
    correlator = Correlator[str]()
    correlator.outgoing("ping", None, "earlier")  # so the child id differs from 1
    request, pending = correlator.outgoing("tools/call", with_token(client_token, name="slow"), "owner")

    assert request.params is not None
    assert request.params["_meta"]["progressToken"] == request.id == 2
    assert request.params["name"] == "slow"
    assert request.params["_meta"]["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"
    assert pending.client_token == client_token

    routed = correlator.incoming(progress(request.id, 0.5, total=1, message="half"))

    assert isinstance(routed, ProgressFor)
    assert routed.pending is pending
    assert routed.notification == progress(client_token, 0.5, total=1, message="half")
    assert type(routed.notification.params["progressToken"]) is type(client_token)  # type: ignore[index]


def test_int_and_str_client_tokens_with_the_same_digits_are_restored_with_their_own_types() -> None:
    correlator = Correlator[str]()
    as_int, _ = correlator.outgoing("tools/call", with_token(7), "int-owner")
    as_str, _ = correlator.outgoing("tools/call", with_token("7"), "str-owner")

    to_int = correlator.incoming(progress(as_int.id))
    to_str = correlator.incoming(progress(as_str.id))

    assert isinstance(to_int, ProgressFor)
    assert isinstance(to_str, ProgressFor)
    assert to_int.pending.owner == "int-owner"
    assert to_str.pending.owner == "str-owner"
    assert to_int.notification.params == {"progressToken": 7, "progress": 1}
    assert to_str.notification.params == {"progressToken": "7", "progress": 1}


def test_rewriting_the_token_never_mutates_the_callers_params() -> None:
    params = with_token("client-token", arguments={"x": 1})
    before = copy.deepcopy(params)

    request, _ = Correlator[str]().outgoing("tools/call", params, "owner")

    assert params == before
    assert request.params is not params
    assert request.params is not None
    assert request.params["_meta"] is not params["_meta"]


@pytest.mark.parametrize(
    "params",
    [None, {}, {"name": "echo"}, {"_meta": {}}, {"_meta": {"traceparent": "00-x"}}, {"_meta": "not-an-object"}],
    ids=["none", "empty", "no-meta", "empty-meta", "meta-without-token", "meta-not-an-object"],
)
def test_a_request_without_a_progress_token_keeps_its_params_untouched(params: dict[str, Any] | None) -> None:
    before = copy.deepcopy(params)

    request, pending = Correlator[str]().outgoing("tools/call", params, "owner")

    assert request.params == before
    assert params == before
    assert pending.client_token is None


def test_progress_for_a_request_that_asked_for_none_is_late() -> None:
    correlator = Correlator[str]()
    request, _ = correlator.outgoing("tools/call", {"name": "x"}, "owner")

    note = progress(request.id)
    assert correlator.incoming(note) == Late(note)
    assert correlator.is_pending(request.id)


def test_progress_for_an_abandoned_request_is_late() -> None:
    correlator = Correlator[str]()
    request, pending = correlator.outgoing("tools/call", with_token("t"), "owner")
    correlator.abandon(pending.child_id)

    note = progress(request.id)
    assert correlator.incoming(note) == Late(note)


def test_progress_after_the_reply_is_late() -> None:
    correlator = Correlator[str]()
    request, _ = correlator.outgoing("tools/call", with_token("t"), "owner")
    correlator.incoming(Result(request.id, {}))

    note = progress(request.id)
    assert correlator.incoming(note) == Late(note)


@pytest.mark.parametrize(
    "note",
    [progress(99), progress("1"), progress(1.0), progress(True), progress(None), Notification(PROGRESS, None)],
    ids=["unknown-int", "string", "float", "bool", "null", "no-params"],
)
def test_progress_whose_token_is_not_a_pending_child_id_is_late(note: Notification) -> None:
    correlator = Correlator[str]()
    correlator.outgoing("tools/call", with_token("t"), "owner")  # child id 1 is pending with a token

    assert correlator.incoming(note) == Late(note)


# --- traffic that belongs to no request -------------------------------------------------


def test_a_request_from_the_child_is_a_child_request_even_when_its_id_collides() -> None:
    correlator = Correlator[str]()
    correlator.outgoing("tools/call", None, "owner")  # child id 1
    from_child = Request(1, "roots/list")

    assert correlator.incoming(from_child) == ChildRequest(from_child)
    assert correlator.is_pending(1)


@pytest.mark.parametrize(
    "note",
    [
        Notification("notifications/tools/list_changed"),
        Notification("notifications/message", {"level": "info", "data": "hi"}),
        Notification("notifications/cancelled", {"requestId": 1}),
    ],
)
def test_other_notifications_are_unsolicited(note: Notification) -> None:
    correlator = Correlator[str]()
    correlator.outgoing("tools/call", with_token("t"), "owner")

    assert correlator.incoming(note) == Unsolicited(note)


# --- drain ------------------------------------------------------------------------------


def test_drain_returns_every_pending_request_and_empties_the_table() -> None:
    correlator = Correlator[str]()
    pendings = [correlator.outgoing("tools/call", None, owner)[1] for owner in "abc"]

    assert correlator.drain() == pendings
    assert len(correlator) == 0
    assert not any(correlator.is_pending(pending.child_id) for pending in pendings)
    assert correlator.incoming(Result(1, {})) == Late(Result(1, {}))
    assert correlator.drain() == []
    assert correlator.outgoing("ping", None, "d")[0].id == 4
