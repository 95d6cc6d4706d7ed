"""A child call's holdings (``gateway.relay.suspensions.Holdings``): entered in order, left last
first, moved whole to a parked call, and every one left even when one fails; a parked call nobody
retries is closed before its questions are answered."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from gateway.protocol.jsonrpc import Request
from gateway.relay.suspensions import Call, Holdings, Suspensions
from gateway.stdio.ask import ChildAsk

pytestmark = pytest.mark.anyio


class Held:
    def __init__(self, name: str, log: list[str], fail: bool = False) -> None:
        self.name, self.log, self.fail = name, log, fail

    async def __aenter__(self) -> str:
        self.log.append(f"enter {self.name}")
        return self.name

    def leave(self) -> None:  # what ``Holdings`` calls: ``__aexit__`` without its coroutine
        self.log.append(f"leave {self.name}")
        if self.fail:
            raise RuntimeError(self.name)

    async def __aexit__(self, *exc_info: Any) -> None:
        self.leave()


async def test_holdings_are_left_last_first_when_the_block_ends() -> None:
    log: list[str] = []
    async with Holdings() as holdings:
        assert await holdings.enter(Held("lease", log)) == "lease"
        assert await holdings.enter(Held("exchange", log)) == "exchange"
    assert log == ["enter lease", "enter exchange", "leave exchange", "leave lease"]


async def test_popped_holdings_outlive_the_block_until_closed() -> None:
    log: list[str] = []
    async with Holdings() as holdings:
        await holdings.enter(Held("lease", log))
        await holdings.enter(Held("exchange", log))
        parked = holdings.pop_all()  # a parked MRTR call keeps both
    assert log == ["enter lease", "enter exchange"]
    await parked.aclose()
    assert log[2:] == ["leave exchange", "leave lease"]
    await parked.aclose()  # closed once only
    assert len(log) == 4


async def test_every_holding_is_left_even_when_one_fails_and_the_first_failure_is_raised() -> None:
    log: list[str] = []
    holdings = Holdings()
    await holdings.enter(Held("lease", log, fail=True))
    await holdings.enter(Held("exchange", log, fail=True))
    with pytest.raises(RuntimeError, match="exchange"):
        await holdings.aclose()
    assert log[2:] == ["leave exchange", "leave lease"]


async def test_a_parked_call_nobody_retries_is_closed_before_its_questions_are_answered() -> None:
    """Closing the call queues its cancel to the child; answered first, the child could finish
    the call (work nobody reads) before the cancel, or not, as the scheduler decided."""
    log: list[str] = []
    ask = ChildAsk(Request(7, "sampling/createMessage", {}))

    class Exchange:  # what the keeper reads of the call: its method; the rest rides in ``stack``
        method = "tools/call"

    class Closing(Held):
        def leave(self) -> None:
            log.append(f"close call; question answered: {ask.is_answered}")

    stack = Holdings()
    await stack.enter(Closing("call", log))
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            parked = Suspensions("test", task_group=tg)
            call = Call(child=None, ex=Exchange(), stack=stack)  # type: ignore[arg-type]
            parked.park(call, {"k1": ask}, Request(1, "tools/call", {}), None, 0.0)
    assert log == ["enter call", "close call; question answered: False"]
    assert ask.is_answered


async def test_holdings_are_one_calls_own_compared_and_hashed_as_objects() -> None:
    """A list underneath (made and added to with no Python call), still one call's holdings:
    two calls' holdings never compare equal, whatever they hold, and each can be a key."""
    log: list[str] = []
    first, second = Holdings(), Holdings()
    assert first != second
    assert first == first
    assert len({first, second}) == 2
    first.hold(Held("lease", log))  # entered already: held as it is
    await first.enter(Held("exchange", log))
    moved = first.pop_all()
    assert moved != first
    assert first == first
    first.close()  # holds nothing now
    moved.close()
    assert log == ["enter exchange", "leave exchange", "leave lease"]
