"""Crash supervision over fake children: a principal that keeps crashing the shared child is
throttled while others are served. Moved here from tests/integration/test_hostile_children.py
(it polled ``/status`` until a call was on the child; the fake says when it arrives)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import anyio
import httpx
import pytest

from gateway.protocol.attribution import AskPolicy
from gateway.stdio.pool import PoolSettings
from tests.component.fakechild import Era, Script, fake_backend
from tests.component.harness import FAKE_SPEC, Gateway, in_process_gateway
from tests.gateway_server import OPERATOR, modern_call, modern_headers, operator_tokens

pytestmark = pytest.mark.anyio

IDENTITY: dict[str, Any] = {"principal_header": "X-User", "trusted_proxies": ["127.0.0.0/8"]}
CRASH = {"code": 3, "stderr": ["crashing on purpose"]}
DECLARES_ALL = {"io.modelcontextprotocol/clientCapabilities": {"sampling": {}, "elicitation": {}}}
SPEC = replace(FAKE_SPEC, client_capabilities={"sampling": {}, "elicitation": {}})
"""No roots: a call that declares roots would first get the gateway's roots round (client_roots)."""


async def call(gw: Gateway, user: str, tool: str, args: dict[str, Any]) -> httpx.Response:
    """A modern call that declares what the gateway declares to legacy children by default, so
    that a legacy child of the one shared pool serves it (children are keyed by what they are told)."""
    headers = modern_headers("tools/call", tool, **{"x-user": user})
    return await gw.http.post(gw.url, headers=headers, json=modern_call(1, tool, args, **DECLARES_ALL))


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_a_principal_that_keeps_crashing_the_shared_child_is_throttled_while_others_are_served(
    era: Era,
) -> None:
    never_asks = PoolSettings(min_size=1, max_size=1, child_asks=AskPolicy.NEVER)  # one shared child
    with anyio.fail_after(30):
        async with (
            fake_backend(Script(era=era)) as backend,
            in_process_gateway(
                backend, spec=SPEC, pool=never_asks, operator_tokens=operator_tokens(), **IDENTITY
            ) as gw,
        ):
            # The first crash takes a long call of alice's with it: half a strike each, and
            # both become suspects, whose requests then run alone on a child.
            shared: list[httpx.Response] = []

            async def alice_long_call() -> None:
                shared.append(await call(gw, "alice", "hold", {}))

            async with anyio.create_task_group() as tg:
                tg.start_soon(alice_long_call)
                await backend.wait_calls(1, "hold")  # alice's call is on the child
                first = await call(gw, "mallory", "crash", CRASH)
            assert first.json()["error"]["code"] == -31001
            assert "exited with code 3" in first.json()["error"]["message"]
            assert shared[0].json()["error"]["code"] == -31001  # it died with the child
            crashes = 1
            alice: list[httpx.Response] = []
            throttled = anyio.Event()

            async def alice_calls() -> None:
                after = 0
                while after < 20:  # keep calling until 20 calls after mallory was throttled
                    alice.append(await call(gw, "alice", "echo", {"message": "still here"}))
                    after += throttled.is_set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(alice_calls)
                refusal: httpx.Response | None = None
                for _ in range(15):  # bounded: the throttle must come within a few crashes
                    reply = await call(gw, "mallory", "crash", CRASH)
                    if reply.status_code == 429:
                        refusal = reply
                        break
                    assert reply.json()["error"]["code"] == -31001  # each killed the child
                    crashes += 1
                throttled.set()
            assert refusal is not None
            assert refusal.json()["error"]["code"] == -31008
            assert "crashed" in refusal.json()["error"]["message"]
            assert 1 <= int(refusal.headers["retry-after"]) <= 60
            assert crashes == 4  # ½ shared, then a whole strike for each crash she caused alone
            assert (await call(gw, "mallory", "echo", {"message": "x"})).status_code == 429
            # Alice was never refused, and no call of hers died with mallory's crashes.
            assert [r.json().get("error") for r in alice] == [None] * len(alice)
            assert len(alice) >= 20
            status = (await gw.http.get("/status", headers=OPERATOR)).json()["servers"][0]
            assert status["throttled_for_crashes"] == 2
            pool = next(iter(status["pools"].values()))
            assert pool["failing"] is False  # crashes while serving are not a crash loop
            assert pool["restarts"] >= crashes
            assert pool["crash_suspects"] == 1  # mallory; alice was cleared by a clean call
    assert len(backend.children) == crashes + 1  # each crash replaced at once; none started for the refusals


async def test_an_anonymous_crasher_is_throttled_by_its_address_and_other_anonymous_clients_are_served() -> None:
    """Without any identity, crash strikes are charged to the peer address (``anonymous@ADDRESS``),
    not to one ``anonymous`` principal: a crasher from one address gets 429 while another
    address calls on the same shared child. Before, the crasher throttled every anonymous client."""
    never_asks = PoolSettings(min_size=1, max_size=1, child_asks=AskPolicy.NEVER)
    with anyio.fail_after(30):
        async with (
            fake_backend(Script(era="modern")) as backend,
            in_process_gateway(backend, pool=never_asks) as gw,
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=gw.app, client=("10.0.0.2", 4321)), base_url="http://127.0.0.1"
            ) as bystander,
        ):

            async def anonymous(http: httpx.AsyncClient, tool: str, args: dict[str, Any]) -> httpx.Response:
                return await http.post(
                    "/mcp", headers=modern_headers("tools/call", tool), json=modern_call(1, tool, args)
                )

            refusal: httpx.Response | None = None
            for _ in range(10):  # bounded: the throttle comes after CRASH_STRIKES crashes
                reply = await anonymous(gw.http, "crash", CRASH)
                if reply.status_code == 429:
                    refusal = reply
                    break
                assert reply.json()["error"]["code"] == -31001
            assert refusal is not None
            served = await anonymous(bystander, "echo", {"message": "still here"})
            assert served.status_code == 200, served.text
            assert "error" not in served.json()
            assert "anonymous@127.0.0.1" in refusal.json()["error"]["message"]
            assert (await anonymous(gw.http, "echo", {"message": "x"})).status_code == 429
