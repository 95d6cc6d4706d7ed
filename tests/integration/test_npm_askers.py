"""The npm tier: an unanswered question never stops server-everything (no pool flags).

server-everything is a legacy child told it may ask (sampling, elicitation, roots), so every
``tools/call`` of a tool not yet learned quiet needs a child to itself. With the default pool
(``--pool-min 1``, ``--pool-max-asking 16``, ``--max-parked-per-principal 8``): while alice
holds one question she never answers, and mallory holds her cap of eight, eight other clients'
``echo`` calls are answered, mallory's next asking call gets 429, and carol's
``trigger-elicitation-request`` gets its own question at once, all before any held question
ends. Both eras: the holders, the echo callers and carol are modern (a parked MRTR call) or
legacy (an open question on the call's SSE stream). Principals come from a trusted identity
header, as behind an authenticating proxy.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Any

import anyio
import httpx
import pytest

from gateway.protocol.dispatchstate import MAX_PARKED_PER_PRINCIPAL
from tests.gateway_server import (
    OPERATOR,
    modern_call,
    modern_headers,
    open_legacy_session,
    operator_tokens,
    running_gateway,
)
from tests.integration.test_client_requests import messages, sse
from tests.integration.test_npm_everything import EVERYTHING, everything_spec

if not EVERYTHING.is_file():  # pragma: no cover - the npm servers are installed in CI
    pytest.skip("the npm servers are not installed", allow_module_level=True)

pytestmark = [pytest.mark.npm, pytest.mark.anyio]

IDENTITY: dict[str, Any] = {"principal_header": "X-User", "trusted_proxies": ["127.0.0.0/8"]}
ELICIT_TOOL = "trigger-elicitation-request"
OTHERS = 8
DEADLINE = 120.0
"""A ceiling for the whole test (a dozen node children start); the questions it holds would
end only after ``--input-timeout`` (300 s), so everything asserted came before that."""


class Client:
    """One client of ``era`` named ``user`` (its principal)."""

    def __init__(self, http: httpx.AsyncClient, url: str, era: str, user: str, stack: AsyncExitStack) -> None:
        self.http, self.url, self.era, self.user, self.stack = http, url, era, user, stack
        self.session: dict[str, str] | None = None
        self.open: list[tuple[dict[str, str], dict[str, Any]]] = []  # (session, question) left unanswered

    async def _session(self) -> dict[str, str]:
        if self.session is None:
            self.session = await open_legacy_session(
                self.http, self.url, capabilities={"elicitation": {}}, headers={"x-user": self.user}
            )
        return self.session

    async def ask(self, request_id: int, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        """Call the elicitation tool: its question (modern: the ``input_required`` result,
        never retried; legacy: the question on the call's stream, left open). Modern calls
        with other ``arguments`` are other requests: the same call sent again at the cap
        would end the round it left instead of a 429."""
        if self.era == "modern":
            call = modern_call(request_id, ELICIT_TOOL, arguments or {})
            call["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] = {"elicitation": {}}
            headers = modern_headers("tools/call", ELICIT_TOOL, **{"x-user": self.user})
            reply = await self.http.post(self.url, headers=headers, json=call)
            return {"status": reply.status_code, **reply.json()}
        session = await self._session()
        body = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {"name": ELICIT_TOOL}}
        reply = await self.stack.enter_async_context(self.http.stream("POST", self.url, headers=session, json=body))
        if not reply.headers["content-type"].startswith("text/event-stream"):
            await reply.aread()
            return {"status": reply.status_code, **reply.json()}
        question = await anext(sse(reply))
        self.open.append((session, question))
        return {"status": reply.status_code, **question}

    async def echo(self, message: str) -> dict[str, Any]:
        if self.era == "modern":
            headers = modern_headers("tools/call", "echo", **{"x-user": self.user})
            reply = await self.http.post(self.url, headers=headers, json=modern_call(1, "echo", {"message": message}))
        else:
            body = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "echo", "arguments": {"message": message}},
            }
            reply = await self.http.post(self.url, headers=await self._session(), json=body)
        [final] = messages(reply)
        return final

    async def decline_all(self) -> None:
        for session, question in self.open:
            answer = {"jsonrpc": "2.0", "id": question["id"], "result": {"action": "decline"}}
            await self.http.post(self.url, headers=session, json=answer)


def is_question(asked: dict[str, Any], era: str) -> bool:
    if era == "modern":
        result = asked.get("result", {})
        return result.get("resultType") == "input_required" and [
            r["method"] for r in result["inputRequests"].values()
        ] == ["elicitation/create"]
    return asked.get("method") == "elicitation/create"


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_while_questions_wait_unanswered_eight_clients_echo_and_another_client_gets_its_own_question(
    era: str,
) -> None:
    with anyio.fail_after(DEADLINE):
        async with (
            running_gateway(everything_spec(), operator_tokens=operator_tokens(), **IDENTITY) as url,
            httpx.AsyncClient(timeout=DEADLINE) as http,
            AsyncExitStack() as stack,
        ):
            alice, mallory, carol = (Client(http, url, era, name, stack) for name in ("alice", "mallory", "carol"))
            try:
                assert is_question(await alice.ask(1), era)
                for n in range(MAX_PARKED_PER_PRINCIPAL):
                    assert is_question(await mallory.ask(10 + n), era)
                refused = await mallory.ask(99, {"another": "call"})  # past her cap
                others = [Client(http, url, era, f"user{n}", stack) for n in range(OTHERS)]
                echoed: dict[int, dict[str, Any]] = {}

                async def echo(n: int) -> None:
                    echoed[n] = await others[n].echo(f"hello {n}")

                async with anyio.create_task_group() as tg:
                    for n in range(OTHERS):
                        tg.start_soon(echo, n)
                carols = await carol.ask(2)
                status = (await http.get(url.removesuffix("/mcp") + "/status", headers=OPERATOR)).json()
            finally:
                for client in (alice, mallory, carol):
                    await client.decline_all()
    assert refused["status"] == 429
    assert "mallory already holds 8 calls waiting for its answers" in refused["error"]["message"]
    for n in range(OTHERS):
        assert echoed[n]["result"]["content"][0]["text"] == f"Echo: hello {n}", echoed[n]
    assert is_question(carols, era)  # her own, while the nine held questions still waited
    # Children are keyed by the capabilities they are told: the askers' pool, and the pre-warmed one.
    pools = list(status["servers"][0]["pools"].values())
    waiting = sum(child["questions_open"] for pool in pools for child in pool["children"])
    assert waiting >= 1 + MAX_PARKED_PER_PRINCIPAL + 1
    assert all(len(pool["children"]) <= 16 for pool in pools)
