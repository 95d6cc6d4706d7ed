"""The service's long-lived tasks are failure domains (issue #37): a fault in a parked call's
keeper, or in a task store's sweep, is logged with its traceback and costs that part alone; the
rest of the service serves on, every other client gets its 200, and the replica stays ready.

Without the boundary a keeper's fault (or one escaping a task run's own handling) climbed
into the service's task group and ended the app's lifespan (every MCP request of every server
503 from then on), and a sweep's fault failed the request it ran in (a 500) and could leave
the store unswept. The session listens' domains run with a real modern child:
``tests/integration/test_failure_domains.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from gateway.protocol import tasks as task_rules
from gateway.relay.suspensions import Suspension
from gateway.stdio import boundary
from tests.component.fakechild import Script, fake_backend
from tests.component.harness import Gateway, in_process_gateway
from tests.component.test_askers import IDENTITY, asking_call, listing, modern
from tests.component.test_task_owners import Client, task_gateway
from tests.gateway_server import modern_call, modern_headers
from tests.logrecords import recording

pytestmark = pytest.mark.anyio

BOUND = 20.0


def the_fault(where: str) -> Callable[[logging.LogRecord], bool]:
    """The boundary's record of the fault injected in ``where``: an error, with its traceback."""

    def logged(record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return (
            record.levelno == logging.ERROR
            and record.exc_info is not None
            and where in message
            and "injected" in message
        )

    return logged


async def still_serving(gw: Gateway, user: str) -> None:
    """Another client is answered, and the replica is ready."""
    echo = await modern(gw, user, modern_call(99, "echo", {"message": f"hi {user}"}), "echo")
    assert echo.status_code == 200, echo.text
    assert echo.json()["result"]["content"][0]["text"] == f"hi {user}"
    ready = await gw.http.get("/readyz")
    assert (ready.status_code, ready.text) == (200, "ready\n")


async def test_a_fault_in_a_parked_calls_keeper_ends_that_call_only_and_lets_go_of_what_it_held(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # alice's round is parked; her cancel wakes its keeper, which then fails. The boundary logs
    # it and lets the call go as at its timeout: the child is told, her parked slot is given
    # back (with one request allowed, a parked call would refuse her next call), and everyone
    # else, alice included, is served on.
    with anyio.fail_after(BOUND), recording("gateway.mrtr") as records:
        async with (
            fake_backend(Script(era="legacy")) as backend,
            in_process_gateway(backend, max_requests_per_principal=1, **IDENTITY) as gw,
        ):
            suspensions = gw.app.state.service.by_name["test"].relay.suspensions

            async def failing_keep(suspension: Suspension, timeout: float) -> None:
                await suspension.settled.wait()
                raise RuntimeError("injected into a parked call's keeper")

            monkeypatch.setattr(suspensions, "_keep", failing_keep)
            parked = (await modern(gw, "alice", asking_call(7))).json()
            assert parked["result"]["resultType"] == "input_required", parked
            [held] = backend.running_calls("ask")
            refused = await modern(gw, "alice", listing(8))  # her one request is her parked call
            assert refused.status_code == 429
            await still_serving(gw, "bob")
            cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}}
            headers = modern_headers("notifications/cancelled", None, **{"x-user": "alice"})
            assert (await gw.http.post(gw.url, headers=headers, json=cancel)).status_code == 202
            await records.wait_for(the_fault("the keeper of a parked tools/call"))
            await held.cancelled.wait()  # the call was let go: the child was told
            assert len(suspensions) == 0
            await still_serving(gw, "alice")  # her slot was given back
            await still_serving(gw, "bob")
            retry = asking_call(7) | {"id": 9}
            retry["params"] |= {"requestState": parked["result"]["requestState"], "inputResponses": {}}
            late = await modern(gw, "alice", retry)
            assert late.status_code == 400  # as for any call that ended before its retry
            assert late.json()["error"]["data"]["requestState"] in ("unknown", "replayed")


async def test_a_fault_in_the_task_stores_sweep_costs_no_request_and_the_sweep_runs_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The sweep (dropping outcomes past their TTL) runs in whichever request comes when one is
    # due. Here it fails, once, in alice's tasks/get: the boundary logs it, her request is
    # answered all the same, bob's task is made and read, and a later sweep drops what is due.
    with anyio.fail_after(BOUND), recording("gateway.tasks") as records:
        async with fake_backend(Script(era="dual")) as backend, task_gateway(backend, **IDENTITY) as (gw, store):
            now = [1_000.0]
            monkeypatch.setattr(store, "_clock", lambda: now[0])
            alice, bob = Client(gw, store, "127.0.0.1", "alice"), Client(gw, store, "127.0.0.1", "bob")
            old = await alice.task("echo", message="old")
            await alice.ended(old)
            purge, faults = store._purge, []

            def failing_purge(at: float) -> None:
                if not faults:
                    faults.append(at)
                    raise RuntimeError("injected into the task store's sweep")
                purge(at)

            monkeypatch.setattr(store, "_purge", failing_purge)
            now[0] += store.policy.ttl + 1  # the old task's outcome is due to be dropped
            mine = await alice.get(old)  # (Client.post: a 200)
            await records.wait_for(the_fault("the task store's sweep"))
            assert mine["result"]["taskId"] == old  # answered: the failed sweep dropped nothing
            now[0] += boundary.RESTART_PAUSE  # the next sweep is due
            new = await bob.task("echo", message="new")
            assert store.status(old) is None  # that sweep ran, in bob's request, and dropped it
            await bob.ended(new)
            assert (await bob.get(new))["result"]["status"] == task_rules.COMPLETED
            assert (await alice.get(old))["error"]["code"] == -32602  # gone, as at any TTL's end
            await still_serving(gw, "carol")


async def test_a_fault_that_escapes_a_task_runs_own_handling_fails_that_task_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Keeping alice's outcome fails (every time, so the run's own error handling fails too, and
    # the fault leaves the run): her task fails, and bob's task, calls and readiness are untouched.
    with anyio.fail_after(BOUND), recording("gateway.tasks") as records:
        async with fake_backend(Script(era="dual")) as backend, task_gateway(backend, **IDENTITY) as (gw, store):
            settle = store.settle

            def failing_settle(task: Any, final: Any) -> None:
                if task.principal == "alice":
                    raise RuntimeError("injected into keeping a task's outcome")
                settle(task, final)

            monkeypatch.setattr(store, "settle", failing_settle)
            alice, bob = Client(gw, store, "127.0.0.1", "alice"), Client(gw, store, "127.0.0.1", "bob")
            hers = await alice.task("echo", message="lost")
            await alice.ended(hers)
            await records.wait_for(the_fault("the run of task"))
            failed = (await alice.get(hers))["result"]
            assert failed["status"] == task_rules.FAILED
            assert failed["error"]["code"] == -31000  # the gateway's, as for any task it failed to run
            his = await bob.task("echo", message="kept")
            await bob.ended(his)
            assert (await bob.get(his))["result"]["result"]["content"][0]["text"] == "kept"
            await still_serving(gw, "carol")
