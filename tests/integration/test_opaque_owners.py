"""Owner references are opaque (docs/operations.md, "What clients see"): a session id, a task
id, a ``requestState`` and the refusals for a gone owner name no replica's address, however
their parts are decoded; yet each still routes to its owner between replicas.

Three instances behind a round-robin balancer (``tests.balancer``): whatever a client holds
was minted by one instance and is used through the others.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import re
import secrets
import time
from pathlib import Path
from typing import Any, Final

import anyio
import httpx
import orjson
import pytest

from gateway.protocol import owner as owners
from gateway.protocol import requeststate
from gateway.protocol import tasks as rules
from gateway.protocol.requeststate import StateClaims
from tests.balancer import SECRET, Cluster, cluster
from tests.conftest import server_spec
from tests.gateway_server import BASE_HEADERS, MODERN_META, legacy_initialize, modern_headers, parse_sse

pytestmark = pytest.mark.anyio

WAIT: Final = 60.0
CAPABILITIES_KEY: Final = "io.modelcontextprotocol/clientCapabilities"
SAMPLING: Final = {"method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 5}}
SAMPLED: Final = {"role": "assistant", "content": {"type": "text", "text": "hi"}, "model": "test-model"}


def decoded(reference: str) -> list[bytes]:
    """``reference`` and each of its ``.``-separated parts, as sent and base64url-decoded where
    they decode; a decoded part that is JSON (a ``requestState``'s claims) adds its values."""
    found = [reference.encode()]
    for part in reference.split("."):
        found.append(part.encode())
        if not re.fullmatch(r"[A-Za-z0-9_-]+", part):  # no base64url (a claim's URL): Python 3.15 warns
            continue
        with contextlib.suppress(ValueError, binascii.Error):
            raw = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
            found.append(raw)
            with contextlib.suppress(orjson.JSONDecodeError):
                claims = orjson.loads(raw)
                if isinstance(claims, dict):
                    found += [item for value in claims.values() if isinstance(value, str) for item in decoded(value)]
    return found


def assert_no_address(c: Cluster, reference: str) -> None:
    """No instance's address (host, port, URL) nor boot id is in ``reference`` or its decoded parts."""
    pieces = {b"127.0.0.1", b"http:"}
    for routing in c.routings:
        port = ":" + routing.me.url.rsplit(":", 1)[1]  # with its colon: five digits alone may occur by chance
        pieces |= {routing.me.url.encode(), port.encode(), routing.me.boot.encode()}
    for part in decoded(reference):
        for piece in pieces:
            assert piece not in part, (reference, piece)


def ping(request_id: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "ping"}


async def test_a_legacy_session_id_names_no_address_and_routes_from_every_instance() -> None:
    with anyio.fail_after(WAIT):
        async with cluster(server_spec("--era", "legacy")) as c, httpx.AsyncClient(timeout=WAIT) as http:
            init = await http.post(c.instances[0] + "/mcp", headers=BASE_HEADERS, json=legacy_initialize())
            session_id = init.headers["mcp-session-id"]
            session = {**BASE_HEADERS, "mcp-session-id": session_id, "mcp-protocol-version": "2025-11-25"}
            answers = [await http.post(base + "/mcp", headers=session, json=ping()) for base in c.instances]
    assert session_id.startswith(owners.SESSION_PREFIX)
    assert_no_address(c, session_id)
    assert [answer.status_code for answer in answers] == [200, 200, 200]


async def test_a_request_state_names_no_address_and_its_retry_resumes_through_another_instance() -> None:
    meta = {**MODERN_META, CAPABILITIES_KEY: {"sampling": {}}}
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "ask_client", "arguments": {"requests": [SAMPLING]}, "_meta": meta},
    }
    headers = modern_headers("tools/call", "ask_client")
    with anyio.fail_after(WAIT):
        async with cluster(server_spec("--era", "legacy")) as c, httpx.AsyncClient(timeout=WAIT) as http:
            first = await http.post(c.instances[0] + "/mcp", headers=headers, json=body)
            messages = parse_sse(first.text) if "event-stream" in first.headers["content-type"] else [first.json()]
            result = messages[-1]["result"]
            [key] = result["inputRequests"]
            retry = {**body, "id": 2, "params": {**body["params"]}}
            retry["params"].update(inputResponses={key: SAMPLED}, requestState=result["requestState"])
            resumed = await http.post(c.instances[2] + "/mcp", headers=headers, json=retry)
    state = result["requestState"]
    assert state.startswith(requeststate.PREFIX)
    assert_no_address(c, state)
    final = parse_sse(resumed.text)[-1] if "event-stream" in resumed.headers["content-type"] else resumed.json()
    assert final["result"]["structuredContent"]["answers"][0]["result"]["model"] == "test-model", final


async def test_a_task_id_names_no_address_and_is_read_through_every_instance(tmp_path: Path) -> None:
    meta = {**MODERN_META, CAPABILITIES_KEY: {"extensions": {rules.EXTENSION: {}}}}
    gate = str(tmp_path / "gate")
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "wait_gate", "arguments": {"gate": gate}, "_meta": meta},
    }
    spec = server_spec("--era", "legacy", "--task-support", "wait_gate")
    with anyio.fail_after(WAIT):
        async with cluster(spec) as c, httpx.AsyncClient(timeout=WAIT) as http:
            created = await http.post(c.url, headers=modern_headers("tools/call", "wait_gate"), json=call)
            task_id = created.json()["result"]["taskId"]
            get = {"jsonrpc": "2.0", "id": 2, "method": rules.GET, "params": {"taskId": task_id, "_meta": meta}}
            polled = [
                await http.post(base + "/mcp", headers=modern_headers(rules.GET, task_id), json=get)
                for base in c.instances
            ]
            await anyio.Path(gate).touch()  # let the call end, so the cluster stops quickly
    assert task_id.startswith(rules.TASK_ID_PREFIX + owners.SESSION_PREFIX)
    assert_no_address(c, task_id)
    assert [reply.json()["result"]["status"] for reply in polled] == [rules.WORKING] * 3


async def test_the_refusals_for_a_gone_owner_name_no_address() -> None:
    """A session, a task and a parked call held by an instance that is gone (nothing listens at
    its address): 404, a lost task, a lost ``requestState``; none names the address."""
    with anyio.fail_after(WAIT):
        async with cluster(server_spec("--era", "legacy")) as c, httpx.AsyncClient(timeout=WAIT) as http:
            dark = owners.Owner("http://127.0.0.1:9", "gone-boot")  # the discard port: refused at once
            session_id = owners.mint_session_id(
                dark, owners.id_keys(c.routings[0].keys.ring, owners.SESSION_IDS)[0], secrets.token_bytes(16)
            )
            task_id = rules.mint_task_id(dark, c.routings[0].task_id_keys(), secrets.token_bytes(16))
            sealed = owners.seal_owner_text(
                dark, owners.derive_key(SECRET, "requestState owner seal"), secrets.token_bytes(16)
            )
            params: dict[str, Any] = {"name": "echo", "arguments": {}, "_meta": MODERN_META}
            claims = StateClaims(
                "sid", "", "test", "tools/call", requeststate.params_digest(params), time.time() + 60, owner=sealed
            )
            retry = {
                "jsonrpc": "2.0",
                "id": 3,
                "method": "tools/call",
                "params": {**params, "inputResponses": {}, "requestState": requeststate.encode_state(claims, SECRET)},
            }
            meta = {**MODERN_META, CAPABILITIES_KEY: {"extensions": {rules.EXTENSION: {}}}}
            get = {"jsonrpc": "2.0", "id": 2, "method": rules.GET, "params": {"taskId": task_id, "_meta": meta}}
            session = {**BASE_HEADERS, "mcp-session-id": session_id, "mcp-protocol-version": "2025-11-25"}
            gone = await http.post(c.url, headers=session, json=ping())
            lost_task = await http.post(c.url, headers=modern_headers(rules.GET, task_id), json=get)
            lost_call = await http.post(c.url, headers=modern_headers("tools/call", "echo"), json=retry)
    assert gone.status_code == 404
    assert "the replica that owns this session is unreachable" in gone.json()["error"]["message"]
    assert lost_task.json()["error"]["data"] == {"task": "lost"}
    assert lost_call.json()["error"]["data"] == {"requestState": "lost"}
    for reply in (gone, lost_task, lost_call):
        assert "unreachable" in reply.json()["error"]["message"]
        for piece in ("127.0.0.1", ":9", "gone-boot", "http:"):
            assert piece not in reply.text, reply.text
