"""The child session machine under random event orders (hypothesis stateful testing).

Requests (that may or may not ask, with or without timeouts and progress tokens), replies in
any order and to any id, progress, logs, questions, abandons, ticks of the clock, answered or
refused asks, garbage, and the exit at any point. Invariants, checked after every step:

- every request gets at most one outcome, and after the exit exactly one;
- nothing is delivered to a request after its outcome, and what names a child id (a reply,
  progress) goes to the request that id was minted for;
- an ``Ask`` goes to a request in flight opened with ``asks=True``;
- after the exit nothing is pending, open or timed.
"""

from __future__ import annotations

import math

import orjson
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from gateway.errors import ChildExitedError
from gateway.protocol.attribution import ToolLearning
from gateway.protocol.childactions import Answered, Ask, ChildAction, Deliver, Failed, Write
from gateway.protocol.childquestions import ASKER_LINGERS
from gateway.protocol.childsession import ChildSession
from gateway.protocol.framing import OversizedLine
from tests.unit.sessionsend import send

METHODS = st.sampled_from(["tools/call", "tools/list", "ping", "prompts/get", "subscriptions/listen"])


class SessionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.session: ChildSession[int] = ChildSession("srv", 7, input_timeout=3.0, max_line_bytes=64)
        self.session.tools = ToolLearning()
        self.now = 0.0
        self.sent = 0
        self.child_id_of: dict[int, int] = {}  # owner -> child id
        self.owner_of: dict[int, int] = {}  # child id -> owner
        self.asks_ok: dict[int, bool] = {}
        self.method_of: dict[int, str] = {}
        self.log_level_of: dict[int, str | None] = {}
        self.outcomes: dict[int, int] = {}
        self.open_asks: list[int] = []
        self.exited = False
        # Log lines go to nobody until then: a request was ended without its child's reply.
        self.logs_nobodys_until = -math.inf

    # -- driving --------------------------------------------------------------------------

    def apply(self, actions: list[ChildAction[int]], *, expected: int | None = None) -> None:
        for action in actions:
            if isinstance(action, (Answered, Failed)):
                assert self.outcomes.get(action.owner, 0) == 0, f"second outcome for {action.owner}"
                self.outcomes[action.owner] = 1
                if isinstance(action, Answered):
                    assert expected is not None
                    assert action.owner == expected
            elif isinstance(action, Deliver):
                assert self.outcomes.get(action.owner, 0) == 0, "delivered after the outcome"
                if action.notification.method == "notifications/progress":
                    assert expected is not None
                    assert action.owner == expected
            elif isinstance(action, Ask):
                assert self.outcomes.get(action.owner, 0) == 0
                assert self.asks_ok[action.owner]
                self.open_asks.append(action.ask_id)
            elif isinstance(action, Write):
                assert orjson.loads(action.line)["method"] == "notifications/cancelled"

    def live(self) -> list[int]:
        return [owner for owner in self.child_id_of if not self.outcomes.get(owner)]

    @rule(
        method=METHODS,
        asks=st.booleans(),
        timeout=st.none() | st.floats(min_value=0.1, max_value=10),
        cancellable=st.booleans(),
        token=st.booleans(),
        log_level=st.none() | st.sampled_from(["debug", "error"]),
    )
    def send(
        self, method: str, asks: bool, timeout: float | None, cancellable: bool, token: bool, log_level: str | None
    ) -> None:
        owner = self.sent
        self.sent += 1
        params = {"name": f"tool{owner % 3}", "_meta": {"progressToken": f"c{owner}"}} if token else None
        if self.exited:
            try:
                send(self.session, method, params, owner, now=self.now)
            except ChildExitedError:
                return
            raise AssertionError("a dead child took a request")
        sent = send(
            self.session,
            method,
            params,
            owner,
            now=self.now,
            timeout=timeout,
            cancellable=cancellable,
            asks=asks,
            log_level=log_level,
        )
        assert orjson.loads(sent.line)["id"] == sent.child_id
        self.child_id_of[owner] = sent.child_id
        self.owner_of[sent.child_id] = owner
        self.asks_ok[owner] = asks
        self.method_of[owner] = method
        self.log_level_of[owner] = log_level

    @rule(data=st.data(), error=st.booleans())
    def reply(self, data: st.DataObject, error: bool) -> None:
        ids = [*list(self.owner_of), 999]
        child_id = data.draw(st.sampled_from(ids))
        body = {"error": {"code": -1, "message": "no"}} if error else {"result": {}}
        self.apply(
            self.session.receive_line(orjson.dumps({"jsonrpc": "2.0", "id": child_id, **body}), self.now),
            expected=self.owner_of.get(child_id),
        )

    @rule(data=st.data())
    def progress(self, data: st.DataObject) -> None:
        child_id = data.draw(st.sampled_from([*self.owner_of, 999]))
        line = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": child_id}}
        self.apply(self.session.receive_line(orjson.dumps(line), self.now), expected=self.owner_of.get(child_id))

    @rule(level=st.sampled_from(["debug", "info", "error"]))
    def log(self, level: str) -> None:
        line = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": level, "data": "x"}}
        actions = self.session.receive_line(orjson.dumps(line), self.now)
        self.apply(actions)
        # A log goes to the one request in flight (listens aside), if its client wants that level.
        candidates = [owner for owner in self.live() if self.method_of[owner] != "subscriptions/listen"]
        ranks = {"debug": 0, "info": 1, "error": 3}
        wanted = (
            candidates
            if len(candidates) == 1
            and self.now >= self.logs_nobodys_until  # not just after a request ended without its reply
            and (minimum := self.log_level_of[candidates[0]]) is not None
            and ranks[level] >= ranks[minimum]
            else []
        )
        assert [action.owner for action in actions if isinstance(action, Deliver)] == wanted

    @rule(method=st.sampled_from(["sampling/createMessage", "elicitation/create", "roots/list", "ping"]))
    def question(self, method: str) -> None:
        line = {"jsonrpc": "2.0", "id": 5, "method": method}
        self.apply(self.session.receive_line(orjson.dumps(line), self.now))

    @precondition(lambda self: self.open_asks)
    @rule(data=st.data(), refuse=st.booleans())
    def close_ask(self, data: st.DataObject, refuse: bool) -> None:
        ask_id = data.draw(st.sampled_from(self.open_asks))
        self.open_asks.remove(ask_id)
        self.apply(self.session.ask_refused(ask_id) if refuse else self.session.ask_closed(ask_id))

    @precondition(lambda self: self.child_id_of)
    @rule(data=st.data())
    def abandon(self, data: st.DataObject) -> None:
        owner = data.draw(st.sampled_from(list(self.child_id_of)))
        actions = self.session.abandon(self.child_id_of[owner], self.now)
        if any(isinstance(action, Failed) and action.owner == owner for action in actions):  # it was pending
            self.logs_nobodys_until = self.now + ASKER_LINGERS
        self.apply(actions)

    @rule(seconds=st.floats(min_value=0, max_value=5))
    def tick(self, seconds: float) -> None:
        self.now += seconds
        deadline = self.session.next_deadline()
        assert deadline is None or not self.exited
        actions = self.session.tick(self.now)
        if any(isinstance(action, Failed) for action in actions):  # a request timed out
            self.logs_nobodys_until = self.now + ASKER_LINGERS
        self.apply(actions)

    @rule(garbage=st.sampled_from([b"hello", b"[1, 2]", b'{"jsonrpc": "2.0", "id": 1}', b"{}"]))
    def garbage(self, garbage: bytes) -> None:
        self.apply(self.session.receive_line(garbage, self.now))

    @rule(data=st.data())
    def oversized(self, data: st.DataObject) -> None:
        child_id = data.draw(st.sampled_from([*self.owner_of, 999]))
        line = OversizedLine(100, b'{"jsonrpc":"2.0","id":' + str(child_id).encode() + b",", b"}")
        self.apply(self.session.receive_oversized(line))

    @rule(returncode=st.none() | st.integers(min_value=-15, max_value=3), stopping=st.booleans())
    def exit(self, returncode: int | None, stopping: bool) -> None:
        self.apply(self.session.exited(returncode, stopping=stopping))
        self.exited = True
        self.open_asks.clear()

    # -- invariants -----------------------------------------------------------------------

    @invariant()
    def pending_matches_the_model(self) -> None:
        assert self.session.in_flight == len(self.live())
        assert all(count <= 1 for count in self.outcomes.values())

    @invariant()
    def after_the_exit_nothing_is_pending(self) -> None:
        if self.exited:
            assert self.session.in_flight == 0
            assert self.session.open_questions == 0
            assert self.session.next_deadline() is None
            assert all(self.outcomes.get(owner) == 1 for owner in self.child_id_of)

    def teardown(self) -> None:
        if not self.exited:
            self.exit(None, stopping=True)
        assert all(self.outcomes.get(owner) == 1 for owner in self.child_id_of)


SessionMachine.TestCase.settings = settings(max_examples=100, stateful_step_count=40, deadline=None)
TestChildSessionProperties = SessionMachine.TestCase
