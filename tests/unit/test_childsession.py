"""The child session machine, rule by rule (``gateway.protocol.childsession``): events in, actions out."""

from __future__ import annotations

import gc
import logging
import math
import weakref
from typing import Any

import orjson
import pytest

from gateway.errors import ChildExitedError, ChildFaultError, ChildProtocolError, ChildTimeoutError
from gateway.protocol import jsonrpc
from gateway.protocol.attribution import ToolLearning
from gateway.protocol.childactions import (
    Answered,
    Ask,
    Broadcast,
    Changed,
    ChildAction,
    ChildFacts,
    Deliver,
    Failed,
    Log,
    Timed,
    Unattributed,
    Withdrawn,
    Write,
)
from gateway.protocol.childexit import describe_exit
from gateway.protocol.childquestions import ASKER_LINGERS, ASKER_LINGERS_ASKING, MAX_HELD_QUESTIONS
from gateway.protocol.childsession import MAX_AUGMENTED_GONE, ChildSession
from gateway.protocol.childstate import COMPACT_ABOVE
from gateway.protocol.correlation import Correlator
from gateway.protocol.framing import OversizedLine
from gateway.protocol.jsonrpc import Notification, Result
from tests.unit.sessionsend import send

SAMPLING = "sampling/createMessage"


def make(**kwargs: Any) -> ChildSession[str]:
    return ChildSession("srv", 42, input_timeout=5.0, max_line_bytes=100, command="srv-cmd", **kwargs)


def line(obj: object) -> bytes:
    return orjson.dumps(obj)


def result(child_id: object, value: object = None) -> bytes:
    return line({"jsonrpc": "2.0", "id": child_id, "result": value if value is not None else {}})


def question(request_id: object = 90, method: str = SAMPLING) -> bytes:
    return line({"jsonrpc": "2.0", "id": request_id, "method": method, "params": {}})


def note(method: str, **params: object) -> bytes:
    return line({"jsonrpc": "2.0", "method": method, "params": params})


def call(name: str = "t") -> dict[str, object]:
    return {"name": name, "arguments": {}}


def of(kind: type, actions: list[ChildAction[str]]) -> list[Any]:
    return [action for action in actions if isinstance(action, kind)]


def without_facts(actions: list[ChildAction[str]]) -> list[ChildAction[str]]:
    """The actions but ``ChildFacts`` (rule 8) and ``Timed`` (the deadlines), tested on their own."""
    return [action for action in actions if not isinstance(action, (ChildFacts, Timed))]


def cancel_ids(actions: list[ChildAction[str]]) -> list[object]:
    return [orjson.loads(a.line)["params"]["requestId"] for a in of(Write, actions)]


# -- rule 1: one outcome per request -----------------------------------------------------------


def test_a_request_gets_a_minted_id_and_a_whole_line_and_its_reply_goes_to_its_owner() -> None:
    session = make()
    first = send(session, "tools/list", None, "a", now=0)
    second = send(session, "tools/list", None, "b", now=0)
    assert (first.child_id, second.child_id) == (1, 2)
    assert first.line.endswith(b"\n")
    assert orjson.loads(first.line)["id"] == 1
    assert first.deadline is None
    actions = session.receive_line(result(2, {"tools": []}), now=1)
    assert actions == [Answered("b", Result(2, {"tools": []}))]
    assert session.in_flight == 1


@pytest.mark.parametrize(
    "params",
    [None, {}, call("echo"), {"name": "echo", "_meta": {"progressToken": "tok", "x": 1}}],
)
def test_a_requests_line_is_what_encode_line_makes_of_its_request(params: dict[str, object] | None) -> None:
    """``send`` writes the line without a ``Request``: it agrees with the general encoding."""
    general = Correlator[str]()
    request, _ = general.outgoing("tools/call", params, "a")
    sent = send(make(), "tools/call", params, "a", now=0)
    assert sent.line == jsonrpc.encode_line(request)


def test_a_reply_for_an_id_no_longer_pending_is_late_and_dropped() -> None:
    session = make()
    sent = send(session, "ping", None, "a", now=0)
    session.receive_line(result(sent.child_id), now=0)
    [late] = session.receive_line(result(sent.child_id), now=0)
    assert isinstance(late, Log)
    assert late.level == logging.DEBUG
    assert "late message" in late.template


def test_progress_goes_to_its_request_with_the_clients_token_restored() -> None:
    session = make()
    sent = send(session, "tools/call", {**call(), "_meta": {"progressToken": "tok"}}, "a", now=0)
    assert orjson.loads(sent.line)["params"]["_meta"]["progressToken"] == sent.child_id
    [delivered] = session.receive_line(note("notifications/progress", progressToken=sent.child_id, progress=1), 0)
    assert isinstance(delivered, Deliver)
    assert delivered.owner == "a"
    assert delivered.notification.params == {"progressToken": "tok", "progress": 1}


def test_a_batch_on_stdio_is_taken_apart() -> None:
    session = make()
    send(session, "ping", None, "a", now=0)
    send(session, "ping", None, "b", now=0)
    batch = b"[" + result(1) + b"," + result(2) + b"]"
    assert [a.owner for a in of(Answered, session.receive_line(batch, now=0))] == ["a", "b"]


# -- rule 2: deadlines -------------------------------------------------------------------------


def test_a_request_past_its_deadline_fails_and_the_child_is_told_to_cancel() -> None:
    session = make()
    sent = send(session, "tools/call", call(), "a", now=10, timeout=2)
    assert sent.deadline == 12
    assert session.next_deadline() == 12
    assert session.tick(11.9) == []
    actions = session.tick(12)
    [failed] = of(Failed, actions)
    assert isinstance(failed.error, ChildTimeoutError)
    assert "did not answer tools/call within 2 s" in failed.error.message
    assert cancel_ids(actions) == [sent.child_id]
    assert (session.timeouts, session.cancels_sent, session.in_flight) == (1, 1, 0)
    assert session.next_deadline() is None
    assert of(Log, session.receive_line(result(sent.child_id), now=13))  # late: dropped


def test_a_request_that_may_not_be_cancelled_times_out_without_a_cancel() -> None:
    session = make()
    send(session, "server/discover", None, "probe", now=0, timeout=1, cancellable=False)
    actions = session.tick(5)
    assert of(Failed, actions)
    assert not of(Write, actions)


def test_the_default_timeout_applies_and_an_infinite_one_sets_no_deadline() -> None:
    session = make(request_timeout=30)
    assert send(session, "ping", None, "a", now=0).deadline == 30
    assert send(session, "subscriptions/listen", None, "b", now=0, timeout=math.inf).deadline is None
    assert send(make(), "ping", None, "c", now=0).deadline is None


def test_deadlines_fire_in_order_and_answered_ones_are_skipped() -> None:
    session = make()
    late = send(session, "ping", None, "late", now=0, timeout=9)
    early = send(session, "ping", None, "early", now=0, timeout=3)
    session.receive_line(result(early.child_id), now=1)
    assert session.next_deadline() == 9  # the answered one is skipped
    assert [a.owner for a in of(Failed, session.tick(100))] == ["late"]
    assert late.child_id not in [a.owner for a in of(Failed, session.tick(200))]


def test_the_deadline_heap_stays_proportional_to_the_live_requests() -> None:
    session = make()
    for n in range(20 * COMPACT_ABOVE):
        sent = send(session, "ping", None, f"r{n}", now=n, timeout=1000)
        session.receive_line(result(sent.child_id), now=n)
    assert len(session._deadlines) <= 2 * COMPACT_ABOVE + 2


def test_the_heap_counts_as_stale_only_the_entries_it_still_holds() -> None:
    """A deadline that passed is taken out of the heap: the request's end after it counts
    nothing stale (it did, so the count drifted above the stale entries really held)."""
    session = make()
    for n in range(3):
        send(session, "ping", None, f"r{n}", now=0, timeout=1)
    answered = send(session, "ping", None, "answered", now=0, timeout=9)
    session.receive_line(result(answered.child_id), now=0)
    assert len(of(Failed, session.tick(5))) == 3
    deadlines = session._deadlines
    assert deadlines._stale == sum(1 for slot in deadlines._heap if slot[2][0] is None) == 1


def test_an_answered_request_is_not_kept_alive_by_its_stale_deadline() -> None:
    """A stale heap entry lets go of its request at once: a megabyte of params, the owner and
    what the owner holds are freed when the answer comes, not at the next compaction."""

    class Owner:
        pass

    session: ChildSession[Owner] = ChildSession("srv", 42, input_timeout=5.0, max_line_bytes=100, command="srv-cmd")
    owner = Owner()
    gone = weakref.ref(owner)
    sent = send(session, "tools/call", call(), owner, now=0, timeout=1000)
    actions = session.receive_line(result(sent.child_id), now=1)
    del owner, actions
    gc.collect()
    assert gone() is None
    assert len(session._deadlines) == 1  # the stale entry is still there, empty
    assert session.next_deadline() is None


# -- rule 3: abandon ---------------------------------------------------------------------------


def test_an_abandoned_request_ends_once_and_the_child_is_told_once() -> None:
    session = make()
    sent = send(session, "tools/call", call(), "a", now=0, timeout=5)
    actions = session.abandon(sent.child_id, 0.0)
    [failed] = of(Failed, actions)
    assert isinstance(failed.error, ChildExitedError)
    assert "abandoned" in failed.error.message
    assert cancel_ids(actions) == [sent.child_id]
    assert session.abandon(sent.child_id, 0.0) == []
    assert session.tick(10) == []  # its deadline is gone with it
    assert of(Log, session.receive_line(result(sent.child_id), now=1))


def test_abandoning_an_uncancellable_request_sends_nothing() -> None:
    session = make()
    sent = send(session, "initialize", None, "a", now=0, cancellable=False)
    assert not of(Write, session.abandon(sent.child_id, 0.0))


# -- rule 4: what the child says -----------------------------------------------------------------


def test_a_non_json_line_is_noise_counted_and_kept() -> None:
    session = make()
    [warning] = session.receive_line(b"Server listening on stdio", now=0)
    assert isinstance(warning, Log)
    assert warning.level == logging.WARNING
    assert "non-JSON" in warning.template
    assert session.non_json_lines == 1
    assert list(session.noise) == ["Server listening on stdio"]


def test_json_that_is_not_json_rpc_fails_the_request_it_names_or_else_is_noise() -> None:
    session = make()
    sent = send(session, "ping", None, "a", now=0)
    [failed] = session.receive_line(line({"id": sent.child_id, "result": {}}), now=0)  # no "jsonrpc"
    assert isinstance(failed, Failed)
    assert isinstance(failed.error, ChildProtocolError)
    assert session.non_json_lines == 0
    [warning] = session.receive_line(line({"level": "info", "msg": "hello"}), now=0)
    assert isinstance(warning, Log)
    assert "invalid message" in warning.template
    assert session.non_json_lines == 1
    assert "hello" in session.noise[-1]


def test_an_over_long_line_fails_the_request_whose_id_it_carries() -> None:
    session = make()
    sent = send(session, "tools/call", call(), "a", now=0)
    head = b'{"jsonrpc":"2.0","id":' + str(sent.child_id).encode() + b',"result":{"x":"'
    actions = session.receive_oversized(OversizedLine(5000, head, b'xxx"}}'))
    [failed] = of(Failed, actions)
    assert isinstance(failed.error, ChildProtocolError)
    assert failed.error.data == {"size": 5000, "limit": 100}
    assert not of(Failed, session.receive_oversized(OversizedLine(5000, b"garbage", b"garbage")))
    assert session.oversized_lines == 2


def test_a_log_goes_to_the_one_request_in_flight_at_its_clients_level() -> None:
    session = make()
    send(session, "subscriptions/listen", None, "listen", now=0)  # listens never log
    send(session, "tools/call", call(), "a", now=0, log_level="info")
    [delivered] = session.receive_line(note("notifications/message", level="warning", data="x"), now=0)
    assert isinstance(delivered, Deliver)
    assert delivered.owner == "a"
    [logged] = session.receive_line(note("notifications/message", level="debug", data="y", logger="db"), now=0)
    assert isinstance(logged, Log)
    assert logged.level == logging.DEBUG
    assert logged.args[2] == " [db]"


def test_a_log_with_several_requests_in_flight_or_none_is_the_gateways() -> None:
    session = make()
    assert of(Log, session.receive_line(note("notifications/message", level="error", data="z"), now=0))
    send(session, "tools/call", call(), "a", now=0, log_level="debug")
    send(session, "tools/call", call(), "b", now=0, log_level="debug")
    [logged] = session.receive_line(note("notifications/message", level="error", data="z"), now=0)
    assert isinstance(logged, Log)
    assert logged.level == logging.ERROR
    assert logged.args[2] == ""


def test_a_log_just_after_a_cancel_is_the_gateways_not_the_call_left() -> None:
    """The cancelled call's tool may still be logging about its own client's work."""
    session = make()
    gone = send(session, "tools/call", call(), "gone", now=0, asks=True, log_level="debug").child_id
    send(session, "tools/call", call(), "other", now=0, log_level="debug")
    session.abandon(gone, 0)  # (a child never seen asking: it does not linger as an asker)
    [logged] = without_facts(session.receive_line(note("notifications/message", level="info", data="gone's"), now=1))
    assert isinstance(logged, Log)
    # ASKER_LINGERS after the cancel, logs go to the one request in flight again.
    [delivered] = without_facts(session.receive_line(note("notifications/message", level="info", data="x"), now=3))
    assert isinstance(delivered, Deliver)
    assert delivered.owner == "other"


def test_a_log_while_a_cancelled_call_lingers_past_the_window_is_the_gateways() -> None:
    """A held question's candidate has its cancel held back 2 s, then lingers 2 s more: its
    tool learns of the cancel only then, and may log meanwhile."""
    session = make()
    gone = send(session, "tools/call", call("x"), "gone", now=0, asks=True, log_level="debug").child_id
    send(session, "tools/call", call("y"), "other", now=0, asks=True, log_level="debug")
    session.receive_line(question(80), now=0)  # held: either may have asked it
    session.abandon(gone, 0)  # its cancel held back
    session.tick(ASKER_LINGERS)  # the cancel is written now; it lingers on
    [logged] = without_facts(session.receive_line(note("notifications/message", level="info", data="g"), now=3))
    assert isinstance(logged, Log)


def test_a_log_heard_on_the_gateways_listen_just_after_a_cancel_is_the_gateways_too() -> None:
    session = make()
    gone = send(session, "tools/call", call(), "gone", now=0, log_level="debug").child_id
    send(session, "tools/call", call(), "other", now=0, log_level="debug")
    session.abandon(gone, 0)
    log_note = Notification("notifications/message", {"level": "info", "data": "gone's"})
    assert isinstance(without_facts(session.listened(log_note, now=1))[0], Log)
    [delivered] = without_facts(session.listened(log_note, now=ASKER_LINGERS + 1))
    assert isinstance(delivered, Deliver)


def test_a_request_whose_client_wants_no_logs_gets_none() -> None:
    session = make()
    send(session, "tools/call", call(), "a", now=0)
    assert of(Log, session.receive_line(note("notifications/message", level="emergency", data="z"), now=0))


def test_notifications_of_no_request_are_broadcast_and_a_tools_change_is_counted() -> None:
    session = make()
    [changed] = session.receive_line(note("notifications/tools/list_changed"), now=0)
    assert isinstance(changed, Broadcast)
    assert session.tools_generation == 1
    [other] = session.receive_line(note("notifications/resources/updated", uri="file:///x"), now=0)
    assert isinstance(other, Broadcast)
    assert session.tools_generation == 1


# -- rule 5: the child's questions -----------------------------------------------------------------


def test_a_question_with_one_request_that_may_ask_goes_to_it() -> None:
    session = make()
    send(session, "tools/list", None, "lister", now=0, asks=True)  # a list never asks
    send(session, "tools/call", call(), "caller", now=0, asks=True)
    [facts, ask] = session.receive_line(question(), now=0)
    assert facts == ChildFacts(open_questions=1, has_asked=True, alive=True)  # rule 8: first
    assert isinstance(ask, Ask)
    assert ask.owner == "caller"
    assert ask.request.method == SAMPLING
    assert session.has_asked
    assert session.open_questions == 1
    assert session.ask_closed(ask.ask_id) == [ChildFacts(0, True, True), Changed()]
    assert session.open_questions == 0


def test_a_question_the_child_cancels_is_withdrawn_from_its_client_and_closes_as_any() -> None:
    session = make()
    send(session, "tools/call", call(), "caller", now=0, asks=True)
    [ask] = without_facts(session.receive_line(question(90), now=0))
    assert isinstance(ask, Ask)
    actions = without_facts(session.receive_line(note("notifications/cancelled", requestId=90, reason="late"), now=1))
    assert [type(a) for a in actions] == [Withdrawn, Log]
    assert actions[0] == Withdrawn(ask.ask_id, "late")
    assert session.open_questions == 1  # open until the edge closes it, as any ask
    session.ask_closed(ask.ask_id)
    assert session.open_questions == 0


@pytest.mark.parametrize("named", [91, "90", None])
def test_a_cancel_that_names_no_open_question_is_nobodys(named: object) -> None:
    session = make()
    send(session, "tools/call", call(), "caller", now=0, asks=True)
    session.receive_line(question(90), now=0)
    cancel = note("notifications/cancelled", requestId=named)  # another id, or 90 as a string
    assert of(Broadcast, session.receive_line(cancel, now=1)) != []
    assert session.open_questions == 1


def test_a_held_question_the_child_cancels_is_dropped_and_goes_to_nobody() -> None:
    session = make()
    first = send(session, "tools/call", call("x"), "a", now=0, asks=True)
    send(session, "tools/call", call("y"), "b", now=0, asks=True)
    session.receive_line(question(90), now=0)  # two candidates: held
    assert session.open_questions == 1
    actions = without_facts(session.receive_line(note("notifications/cancelled", requestId=90), now=1))
    assert [type(a) for a in actions] == [Changed, Log]
    assert session.open_questions == 0
    assert not session.asks_open(SAMPLING)
    assert of(Ask, session.receive_line(result(first.child_id), now=2)) == []  # never given to "b"
    assert session.tick(10) == []  # its deadline is skipped


def test_open_listens_are_no_work_whichever_way_they_end() -> None:
    session = make()
    listens = [send(session, "subscriptions/listen", {"notifications": {}}, f"l{n}", now=0) for n in range(4)]
    call_sent = send(session, "tools/call", call(), "caller", now=0)
    assert (session.in_flight, session.working) == (5, 1)
    session.receive_line(result(listens[0].child_id, {"resultType": "complete"}), now=1)  # the graceful end
    session.receive_line(note("notifications/cancelled", requestId=listens[1].child_id), now=1)  # the child's cancel
    session.abandon(listens[2].child_id, now=1)  # the client left
    assert (session.in_flight, session.working) == (2, 1)
    session.receive_line(result(call_sent.child_id), now=1)
    assert (session.in_flight, session.working) == (1, 0)
    session.exited(0, stopping=True)
    assert (session.in_flight, session.working) == (0, 0)


def test_a_question_nobody_can_carry_is_the_gateways_to_answer() -> None:
    session = make()
    [none] = session.receive_line(question(), now=0)
    assert isinstance(none, Unattributed)
    assert none.reason == "no client request is in flight on the child"
    send(session, "tools/call", call(), "no-asks", now=0)  # not opened with asks=True
    [other] = session.receive_line(question(), now=0)
    assert isinstance(other, Unattributed)
    assert "none of the 1 request(s)" in other.reason
    assert not session.has_asked


def task_question(task_id: str, request_id: object = 91) -> bytes:
    meta = {"io.modelcontextprotocol/related-task": {"taskId": task_id}}
    return line({"jsonrpc": "2.0", "id": request_id, "method": ELICIT, "params": {"message": "?", "_meta": meta}})


ELICIT = "elicitation/create"


def test_a_question_that_names_its_task_goes_to_that_tasks_result_whatever_else_may_ask() -> None:
    session = make()
    send(session, "tools/call", call(), "caller", now=0, asks=True)  # may ask, alone: would get a plain question
    send(session, "tasks/result", {"taskId": "A"}, "waits-a", now=0, asks=True)
    send(session, "tasks/result", {"taskId": "B"}, "waits-b", now=0, asks=True)
    [to_b] = without_facts(session.receive_line(task_question("B"), now=0))
    [to_a] = without_facts(session.receive_line(task_question("A", 92), now=0))
    assert isinstance(to_b, Ask)
    assert isinstance(to_a, Ask)
    assert (to_b.owner, to_a.owner) == ("waits-b", "waits-a")
    assert not session.has_asked  # no tool asked: nothing is learned, no child is made exclusive
    [plain] = without_facts(session.receive_line(question(), now=0))
    assert isinstance(plain, Ask)
    assert plain.owner == "caller"


def test_a_tasks_question_with_nobody_waiting_on_that_task_is_never_another_calls() -> None:
    session = make()
    send(session, "tools/call", call(), "caller", now=0, asks=True)
    send(session, "tasks/result", {"taskId": "A"}, "no-asks", now=0)  # not opened with asks=True
    [none] = session.receive_line(task_question("A"), now=0)
    assert isinstance(none, Unattributed)


def test_a_child_request_that_is_no_question_is_answered_by_the_gateway() -> None:
    session = make()
    send(session, "tools/call", call(), "a", now=0, asks=True)
    [ping] = session.receive_line(question(method="ping"), now=0)
    assert isinstance(ping, Unattributed)


def test_an_ask_its_owner_cannot_take_is_answered_by_the_gateway() -> None:
    session = make()
    send(session, "tools/call", call(), "a", now=0, asks=True)
    [ask] = without_facts(session.receive_line(question(), now=0))
    [answer] = without_facts(session.ask_refused(ask.ask_id))
    assert isinstance(answer, Unattributed)
    assert answer.request.method == SAMPLING
    assert session.open_questions == 0
    assert session.ask_refused(ask.ask_id) == []


def test_an_ambiguous_question_is_held_until_one_candidate_is_left() -> None:
    session = make()
    first = send(session, "tools/call", call("x"), "a", now=0, asks=True)
    send(session, "tools/call", call("y"), "b", now=0, asks=True)
    [held] = without_facts(session.receive_line(question(), now=0))
    assert isinstance(held, Log)
    assert "held" in held.template
    assert session.open_questions == 1
    assert session.next_deadline() == 5.0
    actions = session.receive_line(result(first.child_id), now=1)
    assert [type(a) for a in actions] == [Answered, Ask, Changed]
    assert of(Ask, actions)[0].owner == "b"
    assert session.tick(10) == []  # settled: its deadline is skipped


def test_which_questions_are_open_is_known_by_method_asked_or_held() -> None:
    session = make()
    send(session, "tools/call", call(), "caller", now=0, asks=True)
    [ask] = without_facts(session.receive_line(question(), now=0))
    assert isinstance(ask, Ask)
    assert session.asks_open(SAMPLING)
    assert not session.asks_open("roots/list")
    send(session, "tools/call", call("y"), "other", now=0, asks=True)
    session.receive_line(question(91, "roots/list"), now=0)  # two candidates now: held
    assert session.asks_open("roots/list")
    session.ask_closed(ask.ask_id)
    assert not session.asks_open(SAMPLING)
    assert session.asks_open("roots/list")


def test_a_question_answered_alike_whoever_asked_is_never_held() -> None:
    # A keeping server's roots/list is answered from the pool whichever call asked: holding it
    # as ambiguous could only stall both calls (each waiting for it) until the input timeout.
    session = make()
    session.answer_alike(lambda method: method == "roots/list")
    send(session, "tools/call", call("x"), "a", now=0, asks=True)
    send(session, "tools/call", call("y"), "b", now=0, asks=True)
    [roots] = session.receive_line(question(method="roots/list"), now=0)
    assert isinstance(roots, Unattributed)
    assert session.open_questions == 0
    [held] = without_facts(session.receive_line(question(91), now=0))  # sampling is still the asker's alone
    assert isinstance(held, Log)
    assert "held" in held.template


def test_a_held_question_goes_to_the_last_of_its_candidates_not_to_a_later_request() -> None:
    session = make()
    child_ids = [send(session, "tools/call", call(n), n, now=0, asks=True).child_id for n in "abc"]
    session.receive_line(question(), now=0)
    session.receive_line(result(child_ids[0]), now=0)  # answered without waiting for it: not its
    assert session.open_questions == 1  # still two candidates
    send(session, "tools/call", call(), "late-comer", now=0, asks=True)  # not a candidate
    actions = session.receive_line(result(child_ids[1]), now=0)
    [ask] = of(Ask, actions)
    assert ask.owner == "c"
    assert of(Changed, actions)
    assert session.open_questions == 1  # now an open ask


def test_a_held_question_whose_asking_candidate_the_gateway_ended_never_goes_to_another() -> None:
    """A candidate that asked before and whose client then left did not end by itself: its
    tool may be the one waiting for this answer too. The question went to the last candidate
    left (another client's); it is the gateway's now, and the ended one lingers."""
    session = ChildSession[str]("srv", 42, input_timeout=60.0)
    a = send(session, "tools/call", call("a"), "a", now=0, asks=True).child_id
    [first] = of(Ask, session.receive_line(question(80), now=0))  # a's, alone in flight
    session.ask_closed(first.ask_id)  # answered
    b = send(session, "tools/call", call("b"), "b", now=0, asks=True).child_id  # a quiet tool's, say
    session.receive_line(question(81), now=0)  # held: a's or b's
    actions = session.abandon(a, 1.0)
    assert not of(Ask, actions)
    assert session.open_questions == 2  # the held question, and a, lingering
    actions = session.receive_line(result(b), now=2)  # b ends: only a is left, lingering
    assert not of(Ask, actions)
    [answered] = of(Unattributed, actions)
    assert "was cancelled" in answered.reason
    assert of(Changed, session.tick(1 + ASKER_LINGERS))
    assert session.open_questions == 0


def held_with_a_leaver(**options: Any) -> tuple[ChildSession[str], int, int]:
    """Two calls that may ask, "gone" and "other", neither having asked before; the child asks
    (held: either's); then "gone"'s client leaves at 1 s. Its child id and "other"'s."""
    session = ChildSession[str]("srv", 42, input_timeout=60.0)
    gone = send(session, "tools/call", call("a"), "gone", now=0, asks=True, **options).child_id
    other = send(session, "tools/call", call("b"), "other", now=0, asks=True).child_id
    [held] = without_facts(session.receive_line(question(81), now=0))
    assert isinstance(held, Log)
    actions = session.abandon(gone, 1.0) if not options else session.tick(options["timeout"])
    assert [a.owner for a in of(Failed, actions)] == ["gone"]
    assert not of(Ask, actions)
    assert session.open_questions == 2  # the held question, and the leaver, lingering
    return session, gone, other


def test_a_held_questions_candidate_that_never_asked_has_its_cancel_held_back_while_it_lingers() -> None:
    """The held question may be the leaver's, or the other's: the leaver's child may still end
    it on its own, which would prove it asked nothing. So its cancel waits for its linger."""
    session, gone, _ = held_with_a_leaver()
    assert session.cancels_sent == 0
    assert not of(Write, session.tick(1.0 + ASKER_LINGERS - 0.5))
    actions = session.tick(1.0 + ASKER_LINGERS)
    assert cancel_ids(actions) == [gone]  # not ended by its child in time: cancelled now
    assert not of(Unattributed, actions)  # and it lingers from then: the question stays held
    assert [a.at for a in of(Timed, actions)] == [1.0 + 2 * ASKER_LINGERS]
    assert session.open_questions == 2
    assert session.cancels_sent == 1


def test_a_held_question_whose_leaving_candidate_its_child_ends_on_its_own_goes_to_the_other() -> None:
    """The leaver's child answers it before any cancel (a result or an error: its own end),
    so the question was not its, and the other call, the one candidate left, asked it. No
    cancel is written for the leaver at all. (A soak saw the other client's dialog declined
    by the gateway when a task's quiet call beside it was cancelled by its client.)"""

    def error(child_id: object) -> bytes:
        return line({"jsonrpc": "2.0", "id": child_id, "error": {"code": 1, "message": "x"}})

    for reply in (result, error):
        session, gone, _ = held_with_a_leaver()
        actions = session.receive_line(reply(gone), now=1.5)
        assert not of(Answered, actions)  # a late reply: its caller has left
        [ask] = of(Ask, actions)
        assert (ask.owner, ask.request.id) == ("other", 81)
        assert not of(Unattributed, actions)
        assert session.open_questions == 1  # the other's ask, open at the edge
        assert not of(Write, session.tick(100.0))
        assert session.cancels_sent == 0


def test_a_held_questions_candidate_that_timed_out_has_its_cancel_held_back_too() -> None:
    session, gone, _ = held_with_a_leaver(timeout=1.0)
    assert session.cancels_sent == 0
    [ask] = of(Ask, session.receive_line(result(gone), now=1.5))  # ended on its own after all
    assert ask.owner == "other"
    assert not of(Write, session.tick(100.0))


def test_a_held_question_stays_the_gateways_when_its_leaving_candidate_is_ended_after_the_cancel() -> None:
    """A reply after the cancel proves nothing (the tool may have turned its cancelled question
    into a result), and nor does the other call's own end: the question is the gateway's,
    never the other's, however the linger ends."""
    for then in ("linger ends", "late reply", "other ends"):
        session, gone, other = held_with_a_leaver()
        assert cancel_ids(session.tick(1.0 + ASKER_LINGERS)) == [gone], then
        if then == "linger ends":
            actions = session.tick(1.0 + 2 * ASKER_LINGERS)
        elif then == "late reply":
            actions = session.receive_line(result(gone), now=4)
        else:
            actions = session.receive_line(result(other), now=4)
            assert [a.owner for a in of(Answered, actions)] == ["other"], then
        assert not of(Ask, actions), then
        [answered] = of(Unattributed, actions)
        assert answered.request.id == 81, then
        assert "may have asked it was cancelled" in answered.reason, then
        assert session.cancels_sent == 1, then
        if then == "other ends":  # the leaver lingers on, then the child is free of both
            assert session.open_questions == 1, then
            assert of(Changed, session.tick(1.0 + 2 * ASKER_LINGERS)), then
        assert session.open_questions == 0, then
        if then != "other ends":  # the linger over, a question only the other may ask is its own
            [ask] = of(Ask, session.receive_line(question(82), now=9))
            assert ask.owner == "other", then


def test_the_held_question_is_the_gateways_when_the_other_candidate_ends_first() -> None:
    """The other call ends by its own result: the leaver, lingering, is the one candidate left,
    so the question was the leaver's (the gateway answers it). Its next question shows it asks
    on: its cancel is written at once, and it lingers longer."""
    session, gone, other = held_with_a_leaver()
    actions = session.receive_line(result(other), now=1.5)
    [answered] = of(Unattributed, actions)
    assert "may have asked it was cancelled" in answered.reason
    assert not of(Write, actions)
    actions = session.receive_line(question(82), now=1.6)
    assert cancel_ids(actions) == [gone]
    [answered] = of(Unattributed, actions)
    assert "asked before on this child was cancelled" in answered.reason
    assert [a.at for a in of(Timed, actions)] == [1.6 + ASKER_LINGERS_ASKING]
    assert not of(Write, session.tick(100.0))  # written once
    assert session.cancels_sent == 1


def test_a_held_question_is_answered_by_the_gateway_after_the_input_timeout() -> None:
    session = make()
    send(session, "tools/call", call("x"), "a", now=0, asks=True)
    send(session, "tools/call", call("y"), "b", now=0, asks=True)
    session.receive_line(question(), now=2)
    actions = session.tick(7)
    assert [type(a) for a in actions] == [ChildFacts, Changed, Unattributed]
    assert "none was left alone within 5 s" in of(Unattributed, actions)[0].reason
    assert session.open_questions == 0
    assert session.in_flight == 2


def asked_then_cancelled(session: ChildSession[str], now: float = 0) -> int:
    """A call of owner "gone" that asked its client something (the ask still open) and was
    then abandoned by its caller: its child id."""
    gone = send(session, "tools/call", call("asks"), "gone", now=now, asks=True).child_id
    [ask] = of(Ask, session.receive_line(question(80), now=now))
    assert ask.owner == "gone"
    actions = session.abandon(gone, now)
    assert cancel_ids(actions) == [gone]
    return gone


def test_a_cancelled_call_that_asked_lingers_and_its_next_question_is_the_gateways() -> None:
    """A tool that does not stop at the cancel asks again: that question is no other call's."""
    session = make()
    asked_then_cancelled(session, now=0)
    assert session.open_questions == 2  # its ask, still open at the edge, and the lingering call
    [late] = without_facts(session.receive_line(question(81), now=1))
    assert isinstance(late, Unattributed)
    assert "the request that asked before on this child was cancelled" in late.reason


def test_a_question_a_lingering_call_may_have_asked_is_held_and_never_given_to_another_call() -> None:
    session = make()
    asked_then_cancelled(session, now=0)
    other = send(session, "tools/call", call("quiet"), "other", now=0, asks=True).child_id
    [held] = without_facts(session.receive_line(question(81), now=1))
    assert isinstance(held, Log)
    assert "held" in held.template
    actions = session.receive_line(result(other), now=2)  # the other call ends with its own result
    assert [a.owner for a in of(Answered, actions)] == ["other"]
    assert not of(Ask, actions)
    [answered] = of(Unattributed, actions)
    assert "was cancelled" in answered.reason


def test_a_held_question_stays_the_gateways_when_the_lingering_call_is_done_first() -> None:
    """Its linger over (the time, or its late reply), the question may still have been the
    cancelled call's: it goes to the gateway, not to the call left in flight."""
    for done in ("time", "late reply"):
        session = ChildSession[str]("srv", 42, input_timeout=60.0)  # held past the linger
        gone = asked_then_cancelled(session, now=0)
        send(session, "tools/call", call("quiet"), "other", now=0, asks=True)
        session.receive_line(question(81), now=1)  # held: the lingering call or the other's
        actions = session.tick(1 + ASKER_LINGERS) if done == "time" else session.receive_line(result(gone), now=2)
        assert not of(Ask, actions), done
        [answered] = of(Unattributed, actions)
        assert "was cancelled" in answered.reason, done
        assert session.open_questions == 1, done  # only the first ask, open at the edge


def test_a_lingering_call_stops_lingering_after_the_time_or_its_late_reply_and_questions_go_as_before() -> None:
    for done in ("time", "late reply"):
        session = make()
        gone = asked_then_cancelled(session, now=0)
        assert session.open_questions == 2
        if done == "time":
            assert not of(Changed, session.tick(ASKER_LINGERS - 0.5))  # not yet
            actions = session.tick(ASKER_LINGERS)
        else:
            actions = session.receive_line(result(gone), now=1)
        assert of(Changed, actions), done  # the pool may give the child an asking call again
        assert session.open_questions == 1, done
        send(session, "tools/call", call("next"), "next", now=20, asks=True)
        [ask] = of(Ask, session.receive_line(question(82), now=20))
        assert ask.owner == "next", done


def test_each_question_of_a_lingering_call_starts_its_linger_anew() -> None:
    session = make()
    asked_then_cancelled(session, now=0)
    session.receive_line(question(81), now=1)  # it asks on at 1 s: it lingers, longer, from then
    assert not of(Changed, session.tick(ASKER_LINGERS + 1))
    assert session.open_questions == 2
    session.receive_line(question(82), now=1 + ASKER_LINGERS_ASKING - 1)  # and again: anew from then
    assert not of(Changed, session.tick(1 + ASKER_LINGERS_ASKING))
    assert of(Changed, session.tick(2 * ASKER_LINGERS_ASKING))
    assert session.open_questions == 1


def test_the_deadlines_the_machine_sets_itself_are_told_to_the_edges_timer() -> None:
    """A held question's input timeout and a lingering asker's end are set by the machine, not
    by a request the edge sent: ``Timed`` tells the edge's timer to wake by then (it slept on,
    and a child whose asker lingered took no asking call again until some later deadline)."""
    session = make()
    gone = send(session, "tools/call", call("asks"), "gone", now=0, asks=True).child_id
    session.receive_line(question(80), now=0)
    assert [a.at for a in of(Timed, session.abandon(gone, 1))] == [1 + ASKER_LINGERS]
    assert session.next_deadline() == 1 + ASKER_LINGERS
    [timed] = of(Timed, session.receive_line(question(81), now=2))  # it asks on
    assert timed.at == 2 + ASKER_LINGERS_ASKING
    send(session, "tools/call", call("x"), "a", now=3, asks=True)
    [held] = of(Timed, session.receive_line(question(82), now=3))  # ambiguous: held
    assert held.at == 3 + 5.0  # the input timeout


def seen_asking(session: ChildSession[str]) -> None:
    """The child asked during a call before (answered, and the call done)."""
    answered = send(session, "tools/call", call(), "earlier", now=0, asks=True).child_id
    [ask] = of(Ask, session.receive_line(question(79), now=0))
    session.ask_closed(ask.ask_id)
    session.receive_line(result(answered), now=0)
    assert session.open_questions == 0


def test_a_call_cancelled_before_it_asked_lingers_with_its_cancel_written_at_once() -> None:
    """On a child seen to ask, a tool that goes on past its cancel may ask first then: the
    question is nobody's, never the next call's (the pool gives the child no asking call
    meanwhile)."""
    session = make()
    seen_asking(session)
    gone = send(session, "tools/call", call(), "gone", now=0, asks=True).child_id
    actions = session.abandon(gone, 0)  # never asked
    assert cancel_ids(actions) == [gone]  # written now: no held question waits on it
    assert [a.at for a in of(Timed, actions)] == [ASKER_LINGERS]
    assert session.open_questions == 1  # it lingers: no asking call is admitted to the child
    [late] = without_facts(session.receive_line(question(80), now=0.5))
    assert isinstance(late, Unattributed)
    assert "the request that asked before on this child was cancelled" in late.reason
    assert not of(Changed, session.tick(0.5 + ASKER_LINGERS_ASKING - 0.1))  # it asks on: it lingers longer
    assert of(Changed, session.tick(0.5 + ASKER_LINGERS_ASKING))
    assert session.open_questions == 0
    session.send_line("tools/call", call(), "next", now=20, asks=True)
    [next_ask] = of(Ask, session.receive_line(question(81), now=20))
    assert next_ask.owner == "next"


def test_a_call_cancelled_before_it_asked_lingers_when_its_tool_is_known_to_ask() -> None:
    session = learning_session()
    assert session.tools is not None
    session.tools.note_asked(["tools/call t"])  # learned on another child of the pool
    gone = send(session, "tools/call", call("t"), "gone", now=0, asks=True).child_id
    assert of(Timed, session.abandon(gone, 0))
    assert session.open_questions == 1


def test_a_call_cancelled_before_it_asked_stops_lingering_at_its_time_or_late_reply() -> None:
    for done in ("time", "late reply"):
        session = make()
        seen_asking(session)
        gone = send(session, "tools/call", call(), "gone", now=0, asks=True).child_id
        session.abandon(gone, 0)
        actions = session.tick(ASKER_LINGERS) if done == "time" else session.receive_line(result(gone), now=1)
        assert of(Changed, actions), done
        assert session.open_questions == 0, done


def test_a_cancelled_call_lingers_on_no_child_never_seen_asking_nor_when_it_cannot_ask() -> None:
    """Most servers ask nothing: a cancel there keeps the child from nobody's next call."""
    session = make()
    gone = send(session, "tools/call", call(), "gone", now=0, asks=True).child_id
    actions = session.abandon(gone, 0)
    assert cancel_ids(actions) == [gone]
    assert not of(Timed, actions)
    assert session.open_questions == 0
    seen_asking(session)
    listed = send(session, "tools/list", None, "lister", now=0, asks=True).child_id
    assert not of(Timed, session.abandon(listed, 0))
    assert session.open_questions == 0


def test_a_task_handle_that_comes_after_its_request_was_ended_is_cancelled() -> None:
    """A task-augmented call ended without its reply is sent no ``notifications/cancelled``
    (it ends no task, and a compliant child then sends no reply): its late handle is answered
    with ``tasks/cancel``, once."""
    session = make()
    session.takes_tasks = True  # it declares task-augmented tools/call
    augmented = {"name": "research", "arguments": {}, "task": {"ttl": 60000}}
    gone = send(session, "tools/call", augmented, "gone", now=0, asks=True).child_id
    assert not of(Write, session.abandon(gone, 0))  # no notifications/cancelled: it ends no task
    handle = {"task": {"taskId": "child-task-7", "status": "working"}}
    actions = session.receive_line(result(gone, handle), now=1)
    [write] = of(Write, actions)
    cancel = orjson.loads(write.line)
    assert cancel["method"] == "tasks/cancel"
    assert cancel["params"] == {"taskId": "child-task-7"}
    assert isinstance(cancel["id"], int)
    assert cancel["id"] != gone
    assert not of(Write, session.receive_line(result(gone, handle), now=2))  # once
    assert not of(Write, session.receive_line(result(cancel["id"], {}), now=2))  # its reply: dropped


def test_a_late_handle_of_a_request_sent_without_task_or_a_late_plain_result_is_left_alone() -> None:
    session = make()
    session.takes_tasks = True
    plain = send(session, "tools/call", call(), "plain", now=0, asks=True).child_id
    session.abandon(plain, 0)
    assert not of(Write, session.receive_line(result(plain, {"task": {"taskId": "t"}}), now=1))
    augmented = send(session, "tools/call", {"name": "x", "task": {"ttl": 1}}, "a", now=0, asks=True).child_id
    session.abandon(augmented, 0)
    assert not of(Write, session.receive_line(result(augmented, {"content": []}), now=1))


def test_a_child_that_takes_no_tasks_is_told_of_an_augmented_calls_cancel() -> None:
    """It ignores ``task`` (a session may send one though it was declared none): the call runs
    as any call, so it is cancelled as any call."""
    session = make()
    sent = send(session, "tools/call", {"name": "x", "task": {"ttl": 1}}, "a", now=0, asks=True).child_id
    assert cancel_ids(session.abandon(sent, 0)) == [sent]


def test_only_the_latest_ended_augmented_requests_are_remembered() -> None:
    session = make()
    session.takes_tasks = True
    ids = []
    for n in range(MAX_AUGMENTED_GONE + 1):
        child_id = send(session, "tools/call", {"name": "x", "task": {"ttl": 1}}, f"o{n}", now=0, asks=True).child_id
        session.abandon(child_id, 0)
        ids.append(child_id)
    handle = {"task": {"taskId": "t", "status": "working"}}
    assert not of(Write, session.receive_line(result(ids[0], handle), now=1))  # forgotten
    assert of(Write, session.receive_line(result(ids[-1], handle), now=1))


# -- rule 6: tool learning ---------------------------------------------------------------------


def learning_session() -> ChildSession[str]:
    session = make()
    session.legacy = True
    session.tools = ToolLearning()
    return session


def test_a_tool_that_ends_with_a_result_and_no_question_is_learned_quiet() -> None:
    session = learning_session()
    sent = send(session, "tools/call", call("quiet"), "a", now=0, asks=True)
    actions = session.receive_line(result(sent.child_id), now=0)
    assert of(Log, actions)
    assert session.tools is not None
    assert session.tools.is_quiet("tools/call quiet")


def test_a_task_handle_teaches_nothing_since_the_task_asks_later() -> None:
    session = learning_session()
    sent = send(session, "tools/call", call("research"), "a", now=0, asks=True)
    session.receive_line(result(sent.child_id, {"task": {"taskId": "t-1", "status": "working"}}), now=0)
    assert session.tools is not None
    assert not session.tools.is_quiet("tools/call research")


def test_a_tool_error_teaches_nothing_so_made_up_names_cannot_fill_the_table() -> None:
    session = learning_session()
    for n in range(3):  # as a child answers an unknown tool: a result that is an error
        sent = send(session, "tools/call", call(f"made-up-{n}"), "a", now=0, asks=True)
        unknown = {"content": [{"type": "text", "text": f"unknown tool: made-up-{n}"}], "isError": True}
        session.receive_line(result(sent.child_id, unknown), now=0)
    assert session.tools is not None
    assert session.tools.quiet == set()
    sent = send(session, "tools/call", call("real"), "a", now=0, asks=True)
    session.receive_line(result(sent.child_id, {"content": [], "isError": False}), now=0)
    assert session.tools.quiet == {"tools/call real"}


def test_the_callers_tool_key_is_used_as_given() -> None:
    session = learning_session()
    sent = send(session, "tools/call", call("x"), "a", now=0, asks=True, tool="tools/call given")
    session.receive_line(result(sent.child_id), now=0)
    assert session.tools is not None
    assert session.tools.quiet == {"tools/call given"}


def test_a_tool_that_asked_is_never_quiet_and_a_quiet_one_that_asks_is_unlearned() -> None:
    session = learning_session()
    assert session.tools is not None
    session.tools.quiet.add("tools/call t")
    sent = send(session, "tools/call", call(), "a", now=0, asks=True)
    [unlearned, ask] = without_facts(session.receive_line(question(), now=0))
    assert isinstance(unlearned, Log)
    assert "asked after all" in unlearned.template
    assert isinstance(ask, Ask)
    session.receive_line(result(sent.child_id), now=0)
    assert session.tools.asking == {"tools/call t"}
    assert not session.tools.quiet


def test_no_learning_for_a_modern_child_an_error_or_a_request_that_may_not_ask() -> None:
    session = learning_session()
    assert session.tools is not None
    send(session, "tools/call", call("err"), "a", now=0, asks=True)
    session.receive_line(line({"jsonrpc": "2.0", "id": 1, "error": {"code": -1, "message": "no"}}), now=0)
    send(session, "tools/call", call("no-asks"), "b", now=0)
    session.receive_line(result(2), now=0)
    modern = make()
    modern.tools = session.tools
    send(modern, "tools/call", call("modern"), "c", now=0, asks=True)
    modern.receive_line(result(1), now=0)
    assert session.tools.quiet == set()


def test_unresolved_questions_mark_every_candidates_tool_asking() -> None:
    session = learning_session()
    send(session, "tools/call", call("x"), "a", now=0, asks=True)
    send(session, "tools/call", call("y"), "b", now=0, asks=True)
    session.receive_line(question(), now=0)
    session.tick(100)
    assert session.tools is not None
    assert session.tools.asking == {"tools/call x", "tools/call y"}


# -- rule 7: exit ------------------------------------------------------------------------------


def test_the_exit_fails_everything_pending_with_one_error_naming_the_exit() -> None:
    session = make()
    send(session, "tools/call", call("x"), "a", now=0, asks=True, timeout=3)
    send(session, "tools/call", call("y"), "b", now=0, asks=True)
    session.receive_line(question(), now=0)  # held
    actions = session.exited(-9, stderr_tail=["one", "two", "three", "four"])
    failed = of(Failed, actions)
    assert [a.owner for a in failed] == ["a", "b"]
    assert failed[0].error is failed[1].error
    error = failed[0].error
    assert error.message == "srv was killed by SIGKILL"
    assert error.detailed == "srv (pid 42) was killed by SIGKILL; stderr: two | three | four"
    assert error.data == {"signal": "SIGKILL"}
    assert error.private["stderr"] == ["one", "two", "three", "four"]
    (record,) = of(Log, actions)
    assert record.level == logging.WARNING
    assert record.args == (error.detailed,)  # the operator's reading
    assert record.fields == {"event": "exit", "exit_code": None, "signal": "SIGKILL", "planned": False}
    assert (session.in_flight, session.open_questions, session.next_deadline()) == (0, 0, None)
    with pytest.raises(ChildExitedError):
        send(session, "ping", None, "c", now=1)
    assert session.exited(0) == []


def test_a_fault_of_the_gateway_fails_everything_pending_and_the_later_exit_changes_nothing() -> None:
    session = make()
    send(session, "tools/call", call("x"), "a", now=0, timeout=3)
    send(session, "tools/call", call("y"), "b", now=0)
    actions = session.faulted("stderr pump")
    failed = of(Failed, actions)
    assert [a.owner for a in failed] == ["a", "b"]
    error = failed[0].error
    assert isinstance(error, ChildFaultError)
    assert error.detailed == (
        "srv (pid 42) was stopped: the gateway hit an internal error on this child (in its stderr pump); "
        "it is restarted"
    )
    assert "pid" not in error.message
    assert error.data["gateway_fault"] == "stderr pump"
    assert of(Log, actions) == []  # the edge logs it, with the traceback
    assert (session.in_flight, session.next_deadline()) == (0, None)
    assert session.exited(-15) == []
    assert session.death is error
    assert session.faulted("stdout pump") == []


def test_a_child_the_gateway_stopped_exits_with_a_record_at_info_level() -> None:
    session = make()
    actions = session.exited(0, stopping=True)
    (record,) = of(Log, actions)
    assert actions == [ChildFacts(0, False, False), record]  # rule 8: it no longer lives
    assert record.level == logging.INFO
    assert record.fields == {"event": "exit", "exit_code": 0, "signal": None, "planned": True}
    assert session.death is not None
    assert session.death.message == "srv exited with code 0 after the gateway stopped it"
    assert session.death.detailed == "srv (pid 42) exited with code 0 after the gateway stopped it"


def test_a_child_the_gateway_stopped_with_requests_in_flight_leaves_its_details_in_the_log() -> None:
    session = make()
    send(session, "tools/call", call("x"), "a", now=0)
    actions = session.exited(-15, stderr_tail=["last words"], stopping=True)
    [failed] = of(Failed, actions)
    assert failed.error.message == "srv was killed by SIGTERM after the gateway stopped it"
    [log] = of(Log, actions)
    assert (log.level, log.args) == (logging.INFO, (failed.error.detailed,))
    assert "last words" in failed.error.detailed


def test_an_open_ask_is_forgotten_at_the_exit() -> None:
    session = make()
    send(session, "tools/call", call(), "a", now=0, asks=True)
    [ask] = without_facts(session.receive_line(question(), now=0))
    session.exited(None)
    assert session.open_questions == 0
    assert session.ask_closed(ask.ask_id) == [Changed()]


# -- rule 8: what the pool decides from -------------------------------------------------------------


def test_the_facts_the_pool_decides_from_lead_the_actions_whenever_they_change() -> None:
    session = make()
    send(session, "tools/call", call("x"), "a", now=0, asks=True)
    send(session, "tools/call", call("y"), "b", now=0, asks=True)
    assert not of(ChildFacts, session.receive_line(note("notifications/tools/list_changed"), now=0))  # none changed
    held = session.receive_line(question(), now=0)  # held as ambiguous: open, asked
    assert held[0] == ChildFacts(1, True, True)
    second = session.receive_line(question(91), now=0)
    assert second[0] == ChildFacts(2, True, True)
    actions = session.exited(1)  # the death comes before the failures it causes
    assert actions[0] == ChildFacts(0, True, False)
    assert [type(a) for a in actions[1:3]] == [Failed, Failed]
    assert session.exited(1) == []


def test_a_fault_tells_the_death_first_too() -> None:
    session = make()
    send(session, "tools/call", call(), "a", now=0)
    assert [type(a) for a in session.faulted("stdin pump")] == [ChildFacts, Failed]


@pytest.mark.parametrize(
    ("returncode", "described"),
    [
        (None, ("closed its stdout", None, None)),
        (3, ("exited with code 3", 3, None)),
        (-15, ("was killed by SIGTERM", None, "SIGTERM")),
        (-200, ("was killed by signal 200", None, "signal 200")),
    ],
)
def test_an_exit_is_described_by_its_code_or_signal(returncode: int | None, described: tuple[object, ...]) -> None:
    assert describe_exit(returncode) == described


def test_notifications_carry_through_unchanged() -> None:
    session = make()
    send(session, "tools/call", call(), "a", now=0)
    [broadcast] = session.receive_line(note("notifications/prompts/list_changed"), now=0)
    assert broadcast == Broadcast(Notification("notifications/prompts/list_changed", {}))


def test_the_exit_record_quotes_the_stderr_tail_redacted_but_the_error_keeps_it() -> None:
    session = make()
    actions = session.exited(1, stderr_tail=["fatal: API_KEY=sk-123 refused"])
    (record,) = of(Log, actions)
    assert record.args == ("srv (pid 42) exited with code 1; stderr: fatal: API_KEY=[redacted] refused",)
    assert session.death is not None
    assert session.death.private["stderr"] == ["fatal: API_KEY=sk-123 refused"]  # the operator's /status
    assert "sk-123" not in session.death.message  # and no client's answer quotes it


def test_a_non_json_line_is_logged_redacted_and_kept_as_it_came() -> None:
    session = make()
    (warning,) = of(Log, session.receive_line(b"starting with token=abc123", now=0))
    assert warning.args[-1] == "starting with token=[redacted]"
    assert warning.fields == {"event": "stdout_dropped"}
    assert list(session.noise) == ["starting with token=abc123"]  # for the operator's /status


def test_held_questions_are_bounded_and_one_past_the_bound_is_the_gateways_at_once() -> None:
    session = make()
    send(session, "tools/call", call("x"), "a", now=0, asks=True)
    send(session, "tools/call", call("y"), "b", now=0, asks=True)
    for n in range(MAX_HELD_QUESTIONS):
        session.receive_line(question(100 + n), now=0)
    assert session.open_questions == MAX_HELD_QUESTIONS
    [refused] = of(Unattributed, session.receive_line(question(999), now=0))
    assert refused.request.id == 999
    assert f"at most {MAX_HELD_QUESTIONS}" in refused.reason
    assert session.open_questions == MAX_HELD_QUESTIONS
