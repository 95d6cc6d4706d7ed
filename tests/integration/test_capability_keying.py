"""What legacy children are told of their clients' capabilities (issues #23, #36).

By default (``--capability-keying shared``) every legacy child is told the configured set, so
one pool serves every client, and a question a child asks during a call is checked against
that call's client: -32021 for one that did not declare it. With ``exact``: a legacy child
is told its client's capabilities once, at ``initialize``, and a server may
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
from gateway.relay.server_config import CapabilityKeying
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


async def four_clients(keying: CapabilityKeying) -> tuple[dict[str, Any], list[str]]:
    """Modern and legacy clients with and without sampling, at once, on one gateway: their
    answers, and the server's pool labels."""
    got: dict[str, Any] = {}
    with anyio.fail_after(WAIT):
        spec = server_spec("--era", "legacy")
        gateway = running_gateway(spec, capability_keying=keying, roots_learn_wait=0)
        async with gateway as url, httpx.AsyncClient(timeout=WAIT) as http:

            async def run(name: str, era: str, capabilities: dict[str, Any]) -> None:
                client = modern_client if era == "modern" else legacy_client
                got[name] = await client(http, url, capabilities)

            async with anyio.create_task_group() as tg:  # at the same time, on the same gateway
                tg.start_soon(run, "modern without sampling", "modern", {"elicitation": {}})
                tg.start_soon(run, "modern with sampling", "modern", {"sampling": {}})
                tg.start_soon(run, "legacy without sampling", "legacy", {"roots": {}})
                tg.start_soon(run, "legacy with sampling", "legacy", {"sampling": {}})
            status = (await http.get(url.removesuffix("/mcp") + "/status")).json()
    [server] = status["servers"]
    return got, sorted(server["pools"])


async def test_by_default_every_client_shares_one_pool_and_each_question_is_checked_per_call() -> None:
    got, labels = await four_clients(CapabilityKeying.SHARED)
    assert labels == ["test"]
    refused = got["modern without sampling"]
    assert refused.status_code == 400
    validate(refused.json(), "JSONRPCErrorResponse")
    assert refused.json()["error"]["code"] == MISSING_CLIENT_CAPABILITY
    assert refused.json()["error"]["data"] == {"requiredCapabilities": {"sampling": {}}}
    assert "sampling" in refused.json()["error"]["message"]
    # A legacy client without sampling: the child's question is refused by the gateway, and
    # the child's tool says so; never another client's answer.
    assert "result" not in got["legacy without sampling"] or "sampled" not in str(got["legacy without sampling"])
    for name in ("modern with sampling", "legacy with sampling"):
        answer = got[name].json() if name.startswith("modern") else got[name]
        assert answer["result"]["structuredContent"] == {"sampled": SAMPLED}, name


async def test_with_exact_keying_each_client_meets_a_child_told_its_own() -> None:
    got, labels = await four_clients(CapabilityKeying.EXACT)
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
    assert "test capabilities=elicitation" in labels
    assert "test capabilities=sampling" in labels
    assert "test capabilities=roots" in labels  # no roots set of its own: the test server keeps no roots
