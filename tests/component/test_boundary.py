"""The failure-domain boundary (gateway/stdio/boundary.py): what it stops and what it lets pass."""

from __future__ import annotations

import logging

import anyio
import pytest

from gateway.stdio import boundary
from gateway.stdio.boundary import Guarded, contained, keep_running

pytestmark = pytest.mark.anyio

log = logging.getLogger("tests.boundary")


async def test_a_fault_is_logged_with_its_traceback_and_handed_to_the_domain(caplog: pytest.LogCaptureFixture) -> None:
    faults: list[Exception] = []
    with contained(log, "a test task", "it is dropped", faults.append):
        raise RuntimeError("injected")
    assert [str(f) for f in faults] == ["injected"]
    [record] = [r for r in caplog.records if r.name == "tests.boundary"]
    assert record.exc_info is not None
    assert "a test task" in record.getMessage()


async def test_cancellation_passes_the_boundary() -> None:
    with anyio.fail_after(5):
        with anyio.CancelScope() as scope:
            with contained(log, "a test task", "it is dropped"):
                scope.cancel()
                await anyio.sleep_forever()
            pytest.fail("the cancellation was swallowed")  # pragma: no cover
        assert scope.cancelled_caught


async def test_a_guarded_task_that_fails_leaves_its_task_group_running() -> None:
    faults: list[Exception] = []
    faulted, survivor_done = anyio.Event(), anyio.Event()

    def on_fault(exc: Exception) -> None:
        faults.append(exc)
        faulted.set()

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            guarded = Guarded(tg, log, "a guarded task", "it is dropped", on_fault)

            async def fails() -> None:
                raise RuntimeError("injected")

            async def survives() -> None:
                await faulted.wait()  # the fault came first, and this task was not cancelled by it
                survivor_done.set()

            tg.start_soon(survives)
            guarded.start_soon(fails)
    assert survivor_done.is_set()
    assert len(faults) == 1


async def test_a_long_lived_loop_runs_again_after_a_fault(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(boundary, "RESTART_PAUSE", 0.0)
    runs = 0

    async def loop() -> None:
        nonlocal runs
        runs += 1
        if runs < 3:
            raise RuntimeError(f"fault {runs}")

    with anyio.fail_after(5):
        await keep_running(loop, log, "a test loop")
    assert runs == 3
