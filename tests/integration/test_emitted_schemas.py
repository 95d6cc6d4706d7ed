"""What the gateway writes on the wire is valid against the official MCP JSON Schemas.

Modern clients (2026-07-28) are checked against ``schema-2026-07-28.json`` with a legacy
child (the gateway translates: answers ``server/discover`` itself, adds ``resultType``,
``ttlMs`` and ``cacheScope``) and with a modern child (pass-through with rewritten ids).
Legacy clients (2025-11-25 sessions) are checked against ``schema-2025-11-25.json`` with
both children too. Each message is checked as the response wrapper the schema defines for
its method and, where the wrapper's result is a union, as the result type itself.
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

from tests.conftest import server_spec
from tests.gateway_server import (
    BASE_HEADERS,
    MODERN_META,
    legacy_initialize,
    modern_call,
    modern_headers,
    parse_sse,
    running_gateway,
)
from tests.schemas import validate

pytestmark = pytest.mark.anyio

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
CHILD_ERAS = ["legacy", "modern"]


def modern_request(request_id: Any, method: str, **params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": {**params, "_meta": MODERN_META}}


def json_body(reply: httpx.Response, status: int = 200) -> dict[str, Any]:
    assert reply.status_code == status, reply.text
    assert reply.headers["content-type"] == "application/json"
    body: dict[str, Any] = reply.json()
    return body


# -- modern clients ---------------------------------------------------------------------


@pytest.mark.parametrize("child_era", CHILD_ERAS)
async def test_modern_results_and_progress_match_the_2026_07_28_schema(child_era: str) -> None:
    with anyio.fail_after(20):
        async with running_gateway(server_spec("--era", child_era)) as url, httpx.AsyncClient() as http:
            discovered = json_body(
                await http.post(
                    url, headers=modern_headers("server/discover"), json=modern_request(1, "server/discover")
                )
            )
            validate(discovered, "DiscoverResultResponse", MODERN)
            assert MODERN in discovered["result"]["supportedVersions"]

            listed = json_body(
                await http.post(url, headers=modern_headers("tools/list"), json=modern_request("l", "tools/list"))
            )
            validate(listed, "ListToolsResultResponse", MODERN)

            called = json_body(
                await http.post(
                    url, headers=modern_headers("tools/call", "echo"), json=modern_call(2, "echo", {"message": "hi"})
                )
            )
            validate(called, "CallToolResultResponse", MODERN)
            validate(called["result"], "CallToolResult", MODERN)  # the wrapper also admits InputRequiredResult

            failed = json_body(
                await http.post(url, headers=modern_headers("tools/call", "fail"), json=modern_call(3, "fail"))
            )
            validate(failed["result"], "CallToolResult", MODERN)
            assert failed["result"]["isError"] is True

            streamed = await http.post(
                url,
                headers=modern_headers("tools/call", "progress_burst"),
                json=modern_call(4, "progress_burst", {"count": 3, "tag": "t"}, progressToken="tok"),
            )
            assert streamed.headers["content-type"].startswith("text/event-stream")
            *progress, final = parse_sse(streamed.text)
            assert len(progress) == 3
            for note in progress:
                validate(note, "ProgressNotification", MODERN)
                validate(note, "JSONRPCMessage", MODERN)
            validate(final, "CallToolResultResponse", MODERN)
            validate(final["result"], "CallToolResult", MODERN)


@pytest.mark.parametrize("child_era", CHILD_ERAS)
async def test_modern_error_responses_match_the_2026_07_28_schema(child_era: str) -> None:
    with anyio.fail_after(20):
        async with running_gateway(server_spec("--era", child_era)) as url, httpx.AsyncClient() as http:
            headers = modern_headers("tools/call", "echo")
            del headers["mcp-method"]
            missing_header = json_body(
                await http.post(url, headers=headers, json=modern_call(1, "echo", {"message": "x"})), 400
            )
            validate(missing_header, "JSONRPCErrorResponse", MODERN)
            validate(missing_header, "HeaderMismatchError", MODERN)

            future = "2099-01-01"
            unsupported = json_body(
                await http.post(
                    url,
                    headers=modern_headers("tools/list", **{"mcp-protocol-version": future}),
                    json={
                        "jsonrpc": "2.0",
                        "id": 2,
                        "method": "tools/list",
                        "params": {"_meta": {**MODERN_META, "io.modelcontextprotocol/protocolVersion": future}},
                    },
                ),
                400,
            )
            validate(unsupported, "UnsupportedProtocolVersionError", MODERN)
            assert unsupported["error"]["data"]["requested"] == future

            no_meta = json_body(
                await http.post(
                    url,
                    headers=modern_headers("tools/list"),
                    json={"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {}},
                ),
                400,
            )
            validate(no_meta, "JSONRPCErrorResponse", MODERN)
            validate(no_meta["error"], "InvalidParamsError", MODERN)

            unknown_tool = json_body(
                await http.post(url, headers=modern_headers("tools/call", "nope"), json=modern_call(5, "nope"))
            )
            validate(unknown_tool, "JSONRPCErrorResponse", MODERN)
            validate(unknown_tool["error"], "InvalidParamsError", MODERN)

            child_error = json_body(
                await http.post(
                    url, headers=modern_headers("tools/call", "error_reply"), json=modern_call(6, "error_reply")
                )
            )
            validate(child_error, "JSONRPCErrorResponse", MODERN)
            assert child_error["error"] == {"code": 1234, "message": "custom failure", "data": {"detail": [1, 2]}}


@pytest.mark.parametrize("child_era", CHILD_ERAS)
async def test_a_modern_request_for_a_method_nobody_implements_gets_404_and_a_method_not_found_error(
    child_era: str,
) -> None:
    # SHTTP §Protocol Version Header: an unimplemented method is 404 + -32601 (digest §0.2,
    # §2.1); the JSON body is what tells a modern 404 from an HTTP+SSE host's (digest §7.1).
    with anyio.fail_after(20):
        async with running_gateway(server_spec("--era", child_era)) as url, httpx.AsyncClient() as http:
            reply = await http.post(url, headers=modern_headers("no/such"), json=modern_request(4, "no/such"))
            unknown_method = json_body(reply, 404)
            validate(unknown_method, "JSONRPCErrorResponse", MODERN)
            validate(unknown_method["error"], "MethodNotFoundError", MODERN)
            assert unknown_method["id"] == 4


# -- legacy clients ---------------------------------------------------------------------


@pytest.mark.parametrize("child_era", CHILD_ERAS)
async def test_legacy_session_results_and_progress_match_the_2025_11_25_schema(child_era: str) -> None:
    with anyio.fail_after(20):
        async with running_gateway(server_spec("--era", child_era)) as url, httpx.AsyncClient() as http:
            init = await http.post(
                url,
                headers=BASE_HEADERS,
                json=legacy_initialize(LEGACY),
            )
            initialized = json_body(init)
            validate(initialized, "JSONRPCResultResponse", LEGACY)
            validate(initialized["result"], "InitializeResult", LEGACY)
            assert initialized["result"]["protocolVersion"] == LEGACY
            headers = {**BASE_HEADERS, "mcp-session-id": init.headers["mcp-session-id"], "mcp-protocol-version": LEGACY}
            note = await http.post(url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
            assert note.status_code == 202

            listed = json_body(
                await http.post(url, headers=headers, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
            )
            validate(listed, "JSONRPCResultResponse", LEGACY)
            validate(listed["result"], "ListToolsResult", LEGACY)

            def call(request_id: int, tool: str, arguments: dict[str, Any], **meta: Any) -> dict[str, Any]:
                params: dict[str, Any] = {"name": tool, "arguments": arguments}
                if meta:
                    params["_meta"] = meta
                return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}

            called = json_body(await http.post(url, headers=headers, json=call(2, "echo", {"message": "hi"})))
            validate(called, "JSONRPCResultResponse", LEGACY)
            validate(called["result"], "CallToolResult", LEGACY)

            streamed = await http.post(
                url, headers=headers, json=call(3, "progress_burst", {"count": 3, "tag": "t"}, progressToken=7)
            )
            assert streamed.headers["content-type"].startswith("text/event-stream")
            *progress, final = parse_sse(streamed.text)
            assert len(progress) == 3
            for message in progress:
                validate(message, "ProgressNotification", LEGACY)
            validate(final, "JSONRPCResultResponse", LEGACY)
            validate(final["result"], "CallToolResult", LEGACY)

            child_error = json_body(await http.post(url, headers=headers, json=call(4, "error_reply", {})))
            validate(child_error, "JSONRPCErrorResponse", LEGACY)
