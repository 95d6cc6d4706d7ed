"""Legacy children are told exactly their client's capabilities (issue #23).

A legacy child is told its client's capabilities once, at ``initialize``, and a server may
decide what to do from them before it asks anything. So a child serving a modern call is
handshaken with what that call declared (``_meta`` clientCapabilities), a legacy session's
child with what the session declared, and children told different sets never serve the same
call (the pool key holds the set). The test server's ``needs_sampling`` answers -32021
unless its client declared sampling at ``initialize``, as a server that checks first does.
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

from gateway.protocol.jsonrpc import MISSING_CLIENT_CAPABILITY
from tests.conftest import server_spec
from tests.gateway_server import modern_call, modern_headers, open_legacy_session, parse_sse, running_gateway
from tests.schemas import validate

pytestmark = pytest.mark.anyio

WAIT = 30.0
CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
TOOL = "needs_sampling"
SAMPLED = {"role": "assistant", "content": {"type": "text", "text": "hi there"}, "model": "test-model"}


def call(request_id: Any, capabilities: dict[str, Any]) -> dict[str, Any]:
    return modern_call(request_id, TOOL, {"prompt": "say hi"}, **{CAPABILITIES_KEY: capabilities})


async def modern_client(http: httpx.AsyncClient, url: str, capabilities: dict[str, Any]) -> httpx.Response:
    """One modern call of the tool; a sampling round is answered with ``SAMPLED``."""
    headers = modern_headers("tools/call", TOOL)
    first = await http.post(url, headers=headers, json=call(1, capabilities))
    body = first.json()
    if first.status_code != 200 or body.get("result", {}).get("resultType") != "input_required":
        return first
    [(key, asked)] = body["result"]["inputRequests"].items()
    assert asked["method"] == "sampling/createMessage"
    retry = call(2, capabilities)
    retry["params"].update(inputResponses={key: SAMPLED}, requestState=body["result"]["requestState"])
    return await http.post(url, headers=headers, json=retry)


async def legacy_client(http: httpx.AsyncClient, url: str, capabilities: dict[str, Any]) -> dict[str, Any]:
    """One legacy session's call of the tool; its sampling question is answered with ``SAMPLED``
    (and the gateway's ``roots/list``, for a session that declares roots, with none)."""
    session = await open_legacy_session(http, url, capabilities=capabilities)
    body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": TOOL, "arguments": {"prompt": "hi"}}}
    async with http.stream("POST", url, headers=session, json=body) as reply:
        if reply.headers["content-type"] == "application/json":
            answer: dict[str, Any] = (await reply.aread()) and reply.json()
            return answer
        text = ""
        async for chunk in reply.aiter_text():
            text += chunk
            for message in parse_sse(text):
                if message.get("method") in ("sampling/createMessage", "roots/list"):
                    text = ""
                    result = SAMPLED if message["method"] == "sampling/createMessage" else {"roots": []}
                    given = {"jsonrpc": "2.0", "id": message["id"], "result": result}
                    assert (await http.post(url, headers=session, json=given)).status_code == 202
                elif "id" in message and "method" not in message:
                    return message
    raise AssertionError("the call's stream ended without an answer")


async def test_clients_that_declare_sampling_and_clients_that_do_not_each_meet_a_child_told_their_own() -> None:
    got: dict[str, Any] = {}
    with anyio.fail_after(WAIT):
        async with running_gateway(server_spec("--era", "legacy")) as url, httpx.AsyncClient(timeout=WAIT) as http:

            async def run(name: str, era: str, capabilities: dict[str, Any]) -> None:
                client = modern_client if era == "modern" else legacy_client
                got[name] = await client(http, url, capabilities)

            async with anyio.create_task_group() as tg:  # at the same time, on the same gateway
                tg.start_soon(run, "modern without sampling", "modern", {"elicitation": {}})
                tg.start_soon(run, "modern with sampling", "modern", {"sampling": {}})
                tg.start_soon(run, "legacy without sampling", "legacy", {"roots": {}})
                tg.start_soon(run, "legacy with sampling", "legacy", {"sampling": {}})
            status = (await http.get(url.removesuffix("/mcp") + "/status")).json()
    refused = got["modern without sampling"]
    assert refused.status_code == 400
    validate(refused.json(), "JSONRPCErrorResponse")
    assert refused.json()["error"]["code"] == MISSING_CLIENT_CAPABILITY
    # The child's own refusal, before it asked anything: it was told no sampling (not the
    # gateway's -32021 for a question the client cannot answer, after the tool had started).
    assert refused.json()["error"]["message"] == "this tool needs a client that can sample"
    served = got["modern with sampling"]
    assert served.status_code == 200
    validate(served.json(), "JSONRPCResultResponse")
    assert served.json()["result"]["structuredContent"] == {"sampled": SAMPLED}
    assert got["legacy without sampling"]["error"] == {
        "code": MISSING_CLIENT_CAPABILITY,
        "message": "this tool needs a client that can sample",
        "data": {"requiredCapabilities": {"sampling": {}}},
    }
    assert got["legacy with sampling"]["result"]["structuredContent"] == {"sampled": SAMPLED}
    # One pool per capability set told (legacy clients of a legacy-only server share its pools).
    [server] = status["servers"]
    labels = sorted(server["pools"])
    assert "test capabilities=elicitation" in labels
    assert "test capabilities=sampling" in labels
    assert any(label.startswith("test capabilities=roots roots=") for label in labels), labels  # and its roots set
