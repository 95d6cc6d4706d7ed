"""Operations over fake children: readiness and ``/status`` for a server whose child cannot
start (alone, or beside a good server: reported, not blocking, unless required), and a
principal's request slots. Moved here from tests/integration/test_operations.py and
test_security.py, where they polled ``/status`` or retried requests until a state came."""

from __future__ import annotations

from dataclasses import replace

import anyio
import pytest

from gateway.http.drain import Drain
from gateway.relay.router import Router
from gateway.relay.server_config import ServerConfig
from gateway.stdio.spec import ChildSpec
from tests.component.fakechild import FakeBackend, Script, fake_backend
from tests.component.harness import FAKE_SPEC, Gateway, in_process_gateway, in_process_servers
from tests.gateway_server import modern_call, modern_headers
from tests.logrecords import recording

pytestmark = pytest.mark.anyio

BOUND = 20.0
BROKEN = Script(exit_at_start=3, stderr_at_start=("fatal: token expired",))
"""A server that can never start (an expired token, a removed package): exits at once."""


async def test_readiness_names_a_failing_server_and_status_gives_its_reason() -> None:
    script = Script(exit_at_start=4, stderr_at_start=("fatal: configured to exit",))
    with anyio.fail_after(BOUND):
        async with fake_backend(script) as backend, in_process_gateway(backend) as gw:
            # The pre-warmed child's start failed or is failing: either way this request's
            # answer is that failure (it waits for the start, or fails fast after it).
            reply = await gw.http.post(
                gw.url, headers=modern_headers("tools/call", "echo"), json=modern_call(1, "echo", {"message": "x"})
            )
            assert "exited with code 4" in reply.json()["error"]["message"]
            status = (await gw.http.get("/status")).text
            assert "exited with code 4" in status
            assert "fatal: configured to exit" in status  # the details, on the authenticated page
            ready = await gw.http.get("/readyz")
            assert ready.status_code == 503
            assert ready.text in ("not ready: test starting\n", "not ready: test failing\n")  # no stderr


async def test_a_principal_over_its_concurrency_limit_gets_429() -> None:
    with anyio.fail_after(BOUND):
        async with (
            fake_backend() as backend,
            in_process_gateway(backend, max_requests_per_principal=1) as gw,
            anyio.create_task_group() as tg,
        ):
            answered = anyio.Event()

            async def first() -> None:
                await gw.http.post(gw.url, headers=modern_headers("tools/call", "hold"), json=modern_call(1, "hold"))
                answered.set()

            tg.start_soon(first)
            [held] = await backend.wait_calls(1)  # the first request holds the principal's one slot
            second = await gw.http.post(gw.url, headers=modern_headers("tools/list"), json=modern_call(2, "x"))
            assert second.status_code == 429
            assert second.headers["retry-after"] == "1"
            held.release()
            await answered.wait()
            third = await gw.http.post(gw.url, headers=modern_headers("tools/list"), json=modern_call(3, "x"))
            assert third.status_code != 429  # the slot is free again once the first is answered


def good_and_broken(
    good: FakeBackend, broken: FakeBackend, *, broken_required: bool = False, broken_spec: ChildSpec = FAKE_SPEC
) -> list[Router]:
    return [
        Router(ServerConfig("good", FAKE_SPEC), backend=good),
        Router(ServerConfig("broken", broken_spec, ready_required=broken_required), backend=broken),
    ]


async def echo(gw: Gateway, server: str, message: str) -> str:
    reply = await gw.http.post(
        f"/servers/{server}/mcp",
        headers=modern_headers("tools/call", "echo"),
        json=modern_call(1, "echo", {"message": message}),
    )
    text: str = reply.json()["result"]["content"][0]["text"]
    return text


async def test_a_broken_server_is_reported_but_the_replica_stays_ready_for_the_good_one() -> None:
    drain = Drain()
    with anyio.fail_after(BOUND), recording("gateway.pool") as records:
        async with (
            fake_backend() as good,
            fake_backend(BROKEN) as broken,
            in_process_servers(good_and_broken(good, broken), drain=drain) as gw,
        ):
            assert await echo(gw, "good", "still here") == "still here"
            await records.wait_for_text("broken: restarting in")  # its first start is over: it holds nothing
            ready = await gw.http.get("/readyz")
            assert (ready.status_code, ready.text) == (200, "ready; degraded: broken starting\n")
            await records.wait_for_text("broken: failing after")  # five quick failures (backoff 0.5 … 4 s)
            ready = await gw.http.get("/readyz")
            assert (ready.status_code, ready.text) == (200, "ready; degraded: broken failing\n")  # no stderr
            assert await echo(gw, "good", "served") == "served"
            servers = {server["name"]: server for server in (await gw.http.get("/status")).json()["servers"]}
            assert (servers["good"]["state"], servers["good"]["ready_required"]) == ("ready", False)
            assert (servers["broken"]["state"], servers["broken"]["ready_required"]) == ("failing", False)
            (pool,) = servers["broken"]["pools"].values()
            assert "fatal: token expired" in pool["last_error"]  # the reason, on the operator's page
            metrics = (await gw.http.get("/metrics")).text
            assert 'mcp_gateway_server_state{server="good",state="ready"} 1.0' in metrics
            assert 'mcp_gateway_server_state{server="broken",state="failing"} 1.0' in metrics
            assert 'mcp_gateway_server_state{server="broken",state="ready"} 0.0' in metrics
            drain.begin()  # draining comes first, whatever the servers' states
            ready = await gw.http.get("/readyz")
            assert (ready.status_code, ready.text) == (503, "not ready: draining\n")


async def test_a_required_broken_server_makes_the_replica_unready_naming_it() -> None:
    with anyio.fail_after(BOUND), recording("gateway.pool") as records:
        async with (
            fake_backend() as good,
            fake_backend(BROKEN) as broken,
            in_process_servers(good_and_broken(good, broken, broken_required=True)) as gw,
        ):
            assert await echo(gw, "good", "still here") == "still here"  # the good one serves meanwhile
            await records.wait_for_text("broken: restarting in")
            ready = await gw.http.get("/readyz")
            assert ready.status_code == 503
            # Starting (in its backoff) or, five quick failures later, failing: required either way.
            assert ready.text in ("not ready: broken starting (required)\n", "not ready: broken failing (required)\n")
            servers = {server["name"]: server for server in (await gw.http.get("/status")).json()["servers"]}
            assert servers["broken"]["ready_required"] is True


async def test_a_server_in_its_first_start_holds_the_replica_until_the_start_ends() -> None:
    slow = Script(silent=True)  # never answers its handshake: its first start does not end in this test
    patient = replace(FAKE_SPEC, probe_timeout=BOUND * 2, handshake_timeout=BOUND * 2)
    with anyio.fail_after(BOUND):
        async with (
            fake_backend() as good,
            fake_backend(slow) as starting,
            in_process_servers(good_and_broken(good, starting, broken_spec=patient)) as gw,
        ):
            assert await echo(gw, "good", "up") == "up"
            await starting.until(lambda: bool(starting.running()))
            ready = await gw.http.get("/readyz")
            assert (ready.status_code, ready.text) == (503, "not ready: broken starting\n")


async def test_a_fault_reading_one_server_shows_it_unknown_and_every_other_server_as_always(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``/status`` and ``/ui`` with a fault reading one server's status (a gateway bug): both
    answer 200, that server shows ``unknown`` with its error, the good one in full; the fault is
    logged once with its traceback, not at every page, and again only after the server's part
    worked in between. Before, the whole page was a 500."""
    with anyio.fail_after(BOUND), recording("gateway.status") as records:
        async with fake_backend() as good, fake_backend() as bad, in_process_servers(good_and_broken(good, bad)) as gw:
            assert await echo(gw, "good", "hi") == "hi"
            [broken] = [router for router in gw.app.state.routers if router.server.name == "broken"]

            def fails() -> None:
                raise RuntimeError("a bug reading the broken server")

            monkeypatch.setattr(broken, "status", fails)
            first, page = await gw.http.get("/status"), await gw.http.get("/ui")
            monkeypatch.undo()
            healthy = await gw.http.get("/status")
            monkeypatch.setattr(broken, "status", fails)
            again = await gw.http.get("/status")
    for reply in (first, page, healthy, again):
        assert reply.status_code == 200, reply.text
    servers = {server["name"]: server for server in first.json()["servers"]}
    assert servers["broken"] == {
        "name": "broken",
        "state": "unknown",
        "status_error": "RuntimeError('a bug reading the broken server')",
    }
    assert servers["good"]["state"] == "ready"
    assert servers["good"]["pools"]
    assert "status unavailable: RuntimeError(&#x27;a bug reading the broken server&#x27;)" in page.text
    assert all("status_error" not in server for server in healthy.json()["servers"])
    errors = records.matching(lambda r: r.levelname == "ERROR")
    assert len(errors) == 2  # the first fault, and the first after it had worked again
    assert all(r.exc_info and "reading server broken failed" in r.getMessage() for r in errors)
