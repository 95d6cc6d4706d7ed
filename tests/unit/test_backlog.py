"""The reader backlog: progress may coalesce past a bound; nothing else is ever dropped. The
inbox and exchange can be waited on without taking anything (a task's first sign)."""

from __future__ import annotations

import anyio
import pytest

from gateway.errors import ChildExitedError
from gateway.protocol.backlog import Backlog
from gateway.protocol.jsonrpc import PROGRESS, Notification, Request, Result
from gateway.stdio.ask import ChildAsk
from gateway.stdio.exchange import Exchange
from gateway.stdio.inbox import Inbox, progress_key


def drain(backlog: Backlog[str]) -> list[str]:
    out = []
    while backlog:
        out.append(backlog.pop())
    return out


def test_below_the_bound_every_item_is_kept_in_order() -> None:
    backlog: Backlog[str] = Backlog(coalesce_above=10)
    for n in range(10):
        assert backlog.put(f"p{n}", key="tok")
    assert drain(backlog) == [f"p{n}" for n in range(10)]
    assert backlog.coalesced == backlog.dropped == 0


def test_past_the_bound_progress_for_one_token_keeps_only_its_latest_value() -> None:
    backlog: Backlog[str] = Backlog(coalesce_above=2)
    backlog.put("a1", key="a")
    backlog.put("log", key=None)
    for n in range(2, 50):
        backlog.put(f"a{n}", key="a")
    backlog.put("b1", key="b")
    backlog.put("result", key=None)
    assert drain(backlog) == ["a49", "log", "b1", "result"]
    assert backlog.coalesced == 48


def test_past_the_hard_limit_only_an_item_put_with_always_is_queued() -> None:
    backlog: Backlog[str] = Backlog(coalesce_above=2, hard_limit=3)
    for n in range(3):
        assert backlog.put(f"m{n}")
    assert not backlog.put("p", key="new-token")  # progress for a token with nothing queued: refused
    assert not backlog.put("log")  # a flood of anything else is bounded too
    assert backlog.put("result", always=True)  # the final answer never is
    assert backlog.dropped == 2
    assert drain(backlog) == ["m0", "m1", "m2", "result"]


def test_a_popped_progress_is_not_replaced_afterwards() -> None:
    backlog: Backlog[str] = Backlog(coalesce_above=1)
    backlog.put("p1", key="t")
    assert backlog.pop() == "p1"
    backlog.put("x")
    backlog.put("p2", key="t")  # over the bound, but p1 is gone: queued, not written into p1's box
    assert drain(backlog) == ["x", "p2"]


@pytest.mark.anyio
async def test_a_reader_that_falls_far_behind_still_gets_the_last_progress_and_the_result() -> None:
    inbox: Inbox[dict[str, object]] = Inbox(coalesce_above=100)
    for n in range(1, 50_001):  # a child writing flat out while the reader does nothing
        params = {"progressToken": "tok", "progress": n}
        assert inbox.put({"method": PROGRESS, "params": params}, progress_key(PROGRESS, params))
    inbox.put({"method": "notifications/message", "params": {"data": "kept"}})
    inbox.put({"id": 1, "result": {}})
    inbox.close()
    received = []
    with anyio.fail_after(5):
        try:
            while True:
                received.append(await inbox.get())
        except anyio.EndOfStream:
            pass
    progress = [m["params"]["progress"] for m in received if m.get("method") == PROGRESS]  # type: ignore[index]
    assert progress[:99] == list(range(1, 100))  # below the bound, each one
    assert progress[-1] == 50_000  # past it, coalesced to the latest
    assert len(progress) == 100
    assert received[-2:] == [{"method": "notifications/message", "params": {"data": "kept"}}, {"id": 1, "result": {}}]


def test_first_shows_the_oldest_item_without_taking_it() -> None:
    backlog: Backlog[str] = Backlog(coalesce_above=10)
    assert backlog.first() is None
    backlog.put("a")
    backlog.put("b")
    assert backlog.first() == "a"
    assert drain(backlog) == ["a", "b"]


@pytest.mark.anyio
async def test_an_inbox_wait_returns_once_an_item_is_queued_or_it_closes_taking_nothing() -> None:
    inbox: Inbox[str] = Inbox()
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(inbox.wait)
            await anyio.wait_all_tasks_blocked()
            inbox.put("x")
        assert await inbox.wait() == "x" == inbox.first()  # ready at once: still queued, the oldest given
        assert await inbox.get() == "x"
        async with anyio.create_task_group() as tg:
            tg.start_soon(inbox.wait)
            await anyio.wait_all_tasks_blocked()
            inbox.close()
        assert await inbox.wait() is None  # closed, nothing queued
    with pytest.raises(anyio.EndOfStream):
        inbox.get_nowait()


@pytest.mark.anyio
async def test_an_exchanges_first_sign_is_its_oldest_item_else_its_reply_taking_nothing() -> None:
    with anyio.fail_after(5):
        asked = Exchange("tools/call")
        ask = ChildAsk(Request(1, "elicitation/create", {}))
        assert asked.offer_ask(ask)
        asked.deliver(Notification("notifications/message", {}))
        assert await asked.first_sign() is ask
        assert await anext(asked) is ask  # nothing was taken
        answered = Exchange("tools/call")
        answered.finish(Result(2, {"resultType": "input_required"}))
        first = await answered.first_sign()
        assert isinstance(first, Result)
        assert first.result == {"resultType": "input_required"}


@pytest.mark.anyio
async def test_an_exchanges_first_sign_is_its_reply_exactly_when_its_wait_gives_none_and_it_replied() -> None:
    # What the relay asks for the usual call, without first_sign's frame (Relay._on_child).
    with anyio.fail_after(5):
        answered = Exchange("tools/call")
        assert not answered.replied
        answered.finish(Result(2, {}))
        assert await answered.wait() is None
        assert answered.replied
        assert isinstance(await answered.first_sign(), Result)
        failed = Exchange("tools/call")
        failed.finish(error=ChildExitedError("gone"))
        assert await failed.wait() is None
        assert not failed.replied
        assert await failed.first_sign() is None
        noted = Exchange("tools/call")
        note = Notification("notifications/message", {})
        noted.deliver(note)
        noted.finish(Result(3, {}))
        assert await noted.wait() is note
        assert noted.replied
        assert await noted.first_sign() is note
        left = Exchange("tools/call")
        left.leave()  # the reader went away before any outcome
        assert await left.wait() is None
        assert not left.replied
        assert await left.first_sign() is None
