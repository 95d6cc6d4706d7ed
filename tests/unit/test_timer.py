"""The deadline timer (``gateway.stdio.timer``): one task that hands a machine the clock."""

from __future__ import annotations

import anyio
import pytest

from gateway.stdio.timer import DeadlineTimer

pytestmark = pytest.mark.anyio


class Machine:
    """Deadlines as a sorted list; ``due`` takes those that have passed."""

    def __init__(self) -> None:
        self.deadlines: list[float] = []
        self.fired: list[tuple[float, float]] = []  # (deadline, now)
        self.changed = anyio.Event()

    def next_deadline(self) -> float | None:
        return min(self.deadlines, default=None)

    def due(self, now: float) -> None:
        for deadline in [d for d in self.deadlines if d <= now]:
            self.deadlines.remove(deadline)
            self.fired.append((deadline, now))
        self.changed.set()


async def wait_fired(machine: Machine, count: int) -> None:
    while len(machine.fired) < count:
        machine.changed = anyio.Event()
        await machine.changed.wait()


async def test_a_deadline_is_handed_to_the_machine_once_it_has_passed() -> None:
    machine = Machine()
    timer = DeadlineTimer(machine.next_deadline, machine.due)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(timer.run)
            await anyio.wait_all_tasks_blocked()  # asleep with nothing to wait for
            deadline = anyio.current_time() + 0.05
            machine.deadlines.append(deadline)
            timer.note(deadline)
            await wait_fired(machine, 1)
            tg.cancel_scope.cancel()
    [(fired, now)] = machine.fired
    assert fired == deadline
    assert now >= deadline


async def test_an_earlier_deadline_wakes_a_timer_asleep_for_a_later_one() -> None:
    machine = Machine()
    timer = DeadlineTimer(machine.next_deadline, machine.due)
    far = anyio.current_time() + 3600
    machine.deadlines.append(far)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(timer.run)
            await anyio.wait_all_tasks_blocked()  # asleep until the far one
            soon = anyio.current_time() + 0.01
            machine.deadlines.append(soon)
            timer.note(far + 1)  # a later one: no need to wake
            timer.note(soon)
            await wait_fired(machine, 1)
            tg.cancel_scope.cancel()
    assert [deadline for deadline, _ in machine.fired] == [soon]
    assert machine.deadlines == [far]
