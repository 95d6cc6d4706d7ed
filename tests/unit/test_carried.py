"""``Carried``: a child's actions inline up to the first that needs a task, then in order by its task."""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import pytest

from gateway.protocol.childactions import Broadcast, ChildAction, ChildFacts, Log, Write
from gateway.protocol.jsonrpc import Notification
from gateway.stdio.carried import Carried
from gateway.stdio.exchange import Exchange

pytestmark = pytest.mark.anyio


class Applied:
    def __init__(self) -> None:
        self.done: list[object] = []
        self.changed = anyio.Event()

    def __call__(self, actions: Sequence[ChildAction[Exchange]]) -> None:
        self.done.extend(actions)
        self.changed.set()


def line(n: int) -> Write:
    return Write(b"%d\n" % n)


BROADCAST = Broadcast(Notification("notifications/tools/list_changed", None))


def test_actions_that_need_no_task_are_carried_out_at_once() -> None:
    applied = Applied()
    carried = Carried(applied)
    carried.take([line(1), Log(20, "x"), line(2)])
    assert applied.done == [line(1), Log(20, "x"), line(2)]


def test_from_the_first_that_needs_a_task_everything_waits_in_order() -> None:
    applied = Applied()
    carried = Carried(applied)
    carried.take([line(1), BROADCAST, line(2)])
    assert applied.done == [line(1)]
    carried.take([line(3)])  # behind the broadcast: it may not overtake it
    assert applied.done == [line(1)]
    carried.flush()
    assert applied.done == [line(1), BROADCAST, line(2), line(3)]
    carried.take([line(4)])  # the queue is empty again: at once
    assert applied.done[-1] == line(4)


def test_the_facts_the_pool_decides_from_are_copied_at_once_also_while_actions_wait() -> None:
    # ``ChildFacts`` are the machine's facts now: a request the pool places before the action
    # task has run must find them, as it would if it read the machine.
    applied = Applied()
    carried = Carried(applied)
    carried.take([line(1), BROADCAST, line(2)])
    opened = ChildFacts(1, True, True)
    carried.take([opened, line(3)])  # the question opened behind the broadcast
    assert applied.done == [line(1), opened]
    carried.take([ChildFacts(0, True, False)])  # only facts: nothing to queue
    carried.flush()
    assert applied.done == [line(1), opened, ChildFacts(0, True, False), BROADCAST, line(2), line(3)]


async def test_the_action_task_carries_out_what_waits_when_it_is_woken() -> None:
    applied = Applied()
    carried = Carried(applied)
    async with anyio.create_task_group() as tg:
        tg.start_soon(carried.run)
        carried.take([BROADCAST, line(1)])
        assert applied.done == []
        with anyio.fail_after(10):
            await applied.changed.wait()
        assert applied.done == [BROADCAST, line(1)]  # in one go, in order
        tg.cancel_scope.cancel()
