"""The pool with real children: crash isolation, supervision, isolation, recycling.

Dispatch and saturation (max in flight, 503 on the queue bound for modern, legacy and batch
requests, a legacy session staying on its child) and idle stop are component tests now
(tests/component/test_pool.py): they polled ``/status`` here and timed real sleeps."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import orjson
import pytest

from gateway.relay.server_config import Isolation
from gateway.stdio.pool import PoolSettings
from gateway.stdio.spec import ChildSpec
from tests.conftest import TEST_SERVER, server_processes, server_spec
from tests.gateway_server import BASE_HEADERS, legacy_initialize, modern_call, modern_headers, running_gateway
from tests.logrecords import recording

pytestmark = pytest.mark.anyio


async def call(http: httpx.AsyncClient, url: str, tool: str, args: dict[str, Any], **headers: str) -> httpx.Response:
    return await http.post(url, headers=modern_headers("tools/call", tool, **headers), json=modern_call(1, tool, args))


async def status(http: httpx.AsyncClient, url: str) -> dict[str, Any]:
    reply = await http.get(url.replace("/mcp", "/status"))
    assert reply.status_code == 200
    return reply.json()["servers"][0]  # type: ignore[no-any-return]


def pool_children(server: dict[str, Any]) -> list[dict[str, Any]]:
    return [child for pool in server["pools"].values() for child in pool["children"]]


async def test_a_killed_child_fails_only_its_own_calls_and_is_replaced() -> None:
    baseline = len(server_processes())
    settings = PoolSettings(min_size=4, max_size=4)
    with anyio.fail_after(40), recording("gateway.child") as records:
        async with (
            running_gateway(server_spec("--stderr-lines", "2"), pool=settings) as url,
            httpx.AsyncClient(limits=httpx.Limits(max_connections=100), timeout=30) as http,
        ):
            results: list[dict[str, Any]] = []
            running, all_running = 0, anyio.Event()

            async def one_call() -> None:
                nonlocal running
                body = modern_call(1, "sleep", {"ms": 4000, "progress": True}, progressToken="p")
                async with http.stream("POST", url, headers=modern_headers("tools/call", "sleep"), json=body) as reply:
                    async for line in reply.aiter_lines():
                        if not line.startswith("data:"):
                            continue
                        message = orjson.loads(line[5:])
                        if message.get("method") != "notifications/progress":
                            results.append(message)
                            continue
                        running += 1  # the sleep has begun on its child
                        if running == 50:
                            all_running.set()

            await records.wait_for_text(") ready:", 4)  # all four pre-warmed children up
            async with anyio.create_task_group() as tg:
                for _ in range(50):
                    tg.start_soon(one_call)
                await all_running.wait()  # every call is leased to a child, and running there
                children = pool_children(await status(http, url))
                victim = max(children, key=lambda c: c["in_flight"])
                os.kill(victim["pid"], signal.SIGKILL)
            failed = [r for r in results if "error" in r]
            served = [r for r in results if "result" in r]
            assert len(failed) == victim["in_flight"]
            assert len(served) == 50 - victim["in_flight"]
            for answer in failed:
                assert answer["error"]["code"] == -31001
                assert "SIGKILL" in answer["error"]["message"]
                assert answer["error"]["data"]["signal"] == "SIGKILL"
                assert "stderr" not in answer["error"]["data"]  # the operator's, not the client's
            assert {a["result"]["structuredContent"]["pid"] for a in served} <= {c["pid"] for c in children}
            assert victim["pid"] not in {a["result"]["structuredContent"]["pid"] for a in served}
            await records.wait_for_text(") ready:", 5)  # the replacement is up
            assert (await call(http, url, "echo", {"message": "after"})).status_code == 200
            live = server_processes()
            assert len(live) == baseline + 4
            assert all(state != "Z" for _, state in live)
    assert len(server_processes()) == baseline


async def test_two_principals_never_share_a_child() -> None:
    with anyio.fail_after(30):
        async with (
            running_gateway(server_spec(), isolation=Isolation.PRINCIPAL, principal_header="X-User") as url,
            httpx.AsyncClient(timeout=30) as http,
        ):

            async def pid_of(user: str) -> int:
                reply = await call(http, url, "pid", {}, **{"x-user": user})
                return int(reply.json()["result"]["content"][0]["text"])

            alice, bob = await pid_of("alice"), await pid_of("bob")
            assert alice != bob
            assert await pid_of("alice") == alice
            assert await pid_of("bob") == bob


async def test_each_legacy_session_gets_a_child_of_its_own_under_session_isolation() -> None:
    with anyio.fail_after(30):
        async with (
            running_gateway(server_spec(), isolation=Isolation.SESSION) as url,
            httpx.AsyncClient(timeout=30) as http,
        ):
            pids = []
            for _ in range(2):
                init = await http.post(
                    url,
                    headers=BASE_HEADERS,
                    json=legacy_initialize("2025-11-25"),
                )
                headers = {**BASE_HEADERS, "mcp-session-id": init.headers["mcp-session-id"]}
                body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "pid", "arguments": {}}}
                first = await http.post(url, headers=headers, json=body)
                second = await http.post(url, headers=headers, json=body)
                assert first.json()["result"] == second.json()["result"]
                pids.append(first.json()["result"]["content"][0]["text"])
            assert pids[0] != pids[1]


async def test_header_credentials_reach_only_a_child_keyed_by_them() -> None:
    with anyio.fail_after(30):
        async with (
            running_gateway(server_spec(), env_from_headers={"x-api-key": "API_KEY"}) as url,
            httpx.AsyncClient(timeout=30) as http,
        ):

            async def env_and_pid(key: str) -> tuple[str, int]:
                env = await call(http, url, "env", {"names": ["API_KEY"]}, **{"x-api-key": key})
                pid = await call(http, url, "pid", {}, **{"x-api-key": key})
                return env.json()["result"]["structuredContent"]["env"]["API_KEY"], int(
                    pid.json()["result"]["content"][0]["text"]
                )

            one, two = await env_and_pid("key-one"), await env_and_pid("key-two")
            assert one[0] == "key-one"
            assert two[0] == "key-two"
            assert one[1] != two[1]
            assert (await env_and_pid("key-one"))[1] == one[1]
            labels = list((await status(http, url))["pools"])
            assert not any("key-one" in label or "key-two" in label for label in labels)


async def test_a_command_that_exits_at_once_backs_off_fails_fast_and_fails_readiness() -> None:
    with anyio.fail_after(30), recording("gateway.pool") as records:
        async with (
            running_gateway(server_spec("--exit-at-start", "1")) as url,
            httpx.AsyncClient(timeout=30) as http,
        ):
            ready_url = url.replace("/mcp", "/readyz")
            reply = await call(http, url, "echo", {"message": "x"})
            error = reply.json()["error"]  # every request fails with the reason meanwhile
            assert error["message"].startswith("cannot start")
            assert "exited with code 1 during start-up" in error["message"]
            await records.wait_for_text("failing after")
            started = anyio.current_time()
            fast = await call(http, url, "echo", {"message": "x"})
            assert anyio.current_time() - started < 0.5  # failing: no wait for a start
            assert "exited with code 1" in fast.json()["error"]["message"]
            readiness = await http.get(ready_url)
            assert readiness.status_code == 503
            assert readiness.text == "not ready: test failing\n"  # the reason is on /status only
            pool = next(iter((await status(http, url))["pools"].values()))
            # Five quick failures with doubling backoff (0.5, 1, 2, 4 s) take several seconds:
            # the spawn count stays small, the CPU is not spun.
            assert 5 <= pool["spawns"] <= 7


async def test_a_child_is_recycled_after_max_requests() -> None:
    settings = PoolSettings(min_size=1, max_size=1, max_requests=2)
    with anyio.fail_after(30):
        async with running_gateway(server_spec(), pool=settings) as url, httpx.AsyncClient(timeout=30) as http:
            pids = [int((await call(http, url, "pid", {})).json()["result"]["content"][0]["text"]) for _ in range(3)]
    assert pids[0] == pids[1]
    assert pids[2] != pids[1]


async def test_a_child_with_pending_requests_and_no_output_is_recycled() -> None:
    settings = PoolSettings(min_size=1, max_size=1, stall_timeout=0.5)
    with anyio.fail_after(30):
        async with running_gateway(server_spec(), pool=settings) as url, httpx.AsyncClient(timeout=30) as http:
            first = int((await call(http, url, "pid", {})).json()["result"]["content"][0]["text"])
            stalled = await call(http, url, "sleep", {"ms": 20_000})
            assert stalled.json()["error"]["code"] == -31001
            second = int((await call(http, url, "pid", {})).json()["result"]["content"][0]["text"])
    assert first != second


async def test_a_child_that_fails_its_liveness_check_is_recycled() -> None:
    settings = PoolSettings(min_size=1, max_size=1, liveness_interval=0.2, liveness_timeout=0.5)
    with anyio.fail_after(30), recording("gateway.pool", "gateway.child") as records:
        async with (
            running_gateway(server_spec(request_timeout=0.3), pool=settings) as url,
            httpx.AsyncClient(timeout=30) as http,
        ):
            frozen = int((await call(http, url, "pid", {})).json()["result"]["content"][0]["text"])
            assert (await call(http, url, "freeze", {})).json()["error"]["code"] == -31002  # it hangs: timeout
            # The idle check pings it, gets no answer, and replaces it.
            await records.wait_for_text(f"child pid {frozen} failed its liveness check")
            await records.wait_for_text(") ready:", 2)
            reply = await call(http, url, "pid", {})
            assert int(reply.json()["result"]["content"][0]["text"]) != frozen
    assert all(pid != frozen for pid, _ in server_processes())


class PoolClock:
    """``gateway.stdio.pool``'s ``time``: the real module, but a ``monotonic`` the test moves
    forward (past a restart backoff, instead of waiting it out or calling until it is over)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def monotonic(self) -> float:
        return time.monotonic() + self.offset

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


async def test_a_failing_pool_without_a_minimum_recovers_once_the_command_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gateway.protocol.supervision as supervision
    import gateway.stdio.pool as pool_module

    monkeypatch.setattr(supervision, "BACKOFF_FIRST", 0.01)  # the restart timers' sleeps stay short
    monkeypatch.setattr(supervision, "BACKOFF_MAX", 0.05)
    clock = PoolClock()  # moved past each backoff: every call starts the command (none fails fast)
    monkeypatch.setattr(pool_module, "time", clock)
    ready = tmp_path / "ready"
    script = tmp_path / "server.sh"
    script.write_text(f'#!/bin/sh\n[ -e "{ready}" ] || {{ echo "not yet" >&2; exit 1; }}\nexec "$@"\n')
    script.chmod(0o755)
    spec = ChildSpec(str(script), (sys.executable, str(TEST_SERVER)), probe_timeout=5, handshake_timeout=5)
    settings = PoolSettings(min_size=0, max_size=1)
    with anyio.fail_after(30), recording("gateway.pool") as records:
        async with running_gateway(spec, pool=settings) as url, httpx.AsyncClient(timeout=30) as http:
            for failures in range(1, supervision.CRASH_LOOP + 1):  # each call makes a start fail
                assert (
                    "exited with code 1" in (await call(http, url, "echo", {"message": "x"})).json()["error"]["message"]
                )
                assert len(records.matching(lambda r: "child failed to start" in r.getMessage())) == failures
                clock.offset += 1.0  # the backoff is over
            await records.wait_for_text(f"failing after {supervision.CRASH_LOOP} quick failures")
            ready.touch()  # the operator fixes the server
            reply = await call(http, url, "echo", {"message": "back"})  # it starts the fixed command
            assert reply.json()["result"]["content"][0]["text"] == "back", reply.text
            assert not any(p["failing"] for p in (await status(http, url))["pools"].values())
