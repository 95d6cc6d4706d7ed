"""Rotating the replicas' shared secret with no restart (issue #40; docs/deployment.md,
"Rotating the state secret").

Two gateway instances with owner routing, each with its own keyring: what one mints (a legacy
session id, a parked MRTR call's ``requestState``, a task id) is used through the other, which
forwards it (signed with its own current key) to the owner. Mid-rotation the two disagree on
the current key but each holds the other's, and everything still routes; an instance that
does not hold the key something was signed with refuses it. Then the keyrings come from files
that the gateways re-read while they serve: each step of the documented procedure is written,
awaited on the gateway's own reload event (``StateKeys.next_change``), and checked. Every
request gets exactly one answer.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Final

import anyio
import httpx
import pytest

from gateway.protocol import tasks as rules
from gateway.protocol.keyring import fingerprint
from gateway.relay.statekeys import StateKeys
from tests.balancer import Cluster, cluster
from tests.conftest import server_spec
from tests.gateway_server import BASE_HEADERS, MODERN_META, legacy_initialize, modern_headers, parse_sse

pytestmark = pytest.mark.anyio

WAIT: Final = 60.0
OLD: Final = b"the key every replica had first, 32+"
NEW: Final = b"the key the operator rotates to, 32+"
CAPABILITIES_KEY: Final = "io.modelcontextprotocol/clientCapabilities"
SAMPLING: Final = {"method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 5}}
SAMPLED: Final = {"role": "assistant", "content": {"type": "text", "text": "hi"}, "model": "test-model"}
CHECK_INTERVAL: Final = 0.02
"""How often the test gateways look at their key files: the waits are on their reload events."""


def one_answer(reply: httpx.Response, request_id: Any) -> dict[str, Any]:
    """The one JSON-RPC answer to ``request_id`` in ``reply`` (JSON or SSE); fails on none or two."""
    messages = parse_sse(reply.text) if "event-stream" in reply.headers.get("content-type", "") else [reply.json()]
    answers = [m for m in messages if m.get("id") == request_id and ("result" in m or "error" in m)]
    assert len(answers) == 1, (reply.status_code, messages)
    return answers[0]


def ping(request_id: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "ping"}


async def open_session(http: httpx.AsyncClient, base: str) -> dict[str, str]:
    init = await http.post(base + "/mcp", headers=BASE_HEADERS, json=legacy_initialize())
    assert init.status_code == 200, init.text
    one_answer(init, 0)
    return {**BASE_HEADERS, "mcp-session-id": init.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}


async def session_ping(http: httpx.AsyncClient, base: str, session: dict[str, str], request_id: int) -> int:
    """The status of a ping in ``session`` sent to ``base``; a 200 carries exactly one answer."""
    reply = await http.post(base + "/mcp", headers=session, json=ping(request_id))
    if reply.status_code == 200:
        assert one_answer(reply, request_id)["result"] == {}
    else:  # the HTTP-level 404 of an unknown session: one error, before the request was read
        assert reply.status_code == 404, reply.text
        [error] = [reply.json()]
        assert error["error"]["message"].startswith("unknown"), error
    return reply.status_code


ASK: Final = {
    "jsonrpc": "2.0",
    "method": "tools/call",
    "params": {
        "name": "ask_client",
        "arguments": {"requests": [SAMPLING]},
        "_meta": {**MODERN_META, CAPABILITIES_KEY: {"sampling": {}}},
    },
}


async def park(http: httpx.AsyncClient, base: str, request_id: int) -> dict[str, Any]:
    """A modern call whose legacy child asks for sampling: parked at ``base``; its retry, to send."""
    headers = modern_headers("tools/call", "ask_client")
    first = await http.post(base + "/mcp", headers=headers, json={**ASK, "id": request_id})
    result = one_answer(first, request_id)["result"]
    [key] = result["inputRequests"]
    params = {**ASK["params"], "inputResponses": {key: SAMPLED}, "requestState": result["requestState"]}  # type: ignore[dict-item]
    return {**ASK, "id": request_id + 1, "params": params}


async def resume(http: httpx.AsyncClient, base: str, retry: dict[str, Any]) -> dict[str, Any]:
    """The parked call's retry sent to ``base``: its one answer."""
    reply = await http.post(base + "/mcp", headers=modern_headers("tools/call", "ask_client"), json=retry)
    return one_answer(reply, retry["id"])


def sampled(answer: dict[str, Any]) -> bool:
    """The resumed call's answer carries the client's sampled message."""
    assert "result" in answer, answer
    return bool(answer["result"]["structuredContent"]["answers"][0]["result"]["model"] == SAMPLED["model"])


async def test_replicas_mid_rotation_honour_each_others_sessions_rounds_and_tasks(tmp_path: Path) -> None:
    # Step 2 under way: A already signs with the new key, B still with the old; each holds both.
    keys = [StateKeys.fixed(NEW, OLD), StateKeys.fixed(OLD, NEW)]
    meta = {**MODERN_META, CAPABILITIES_KEY: {"extensions": {rules.EXTENSION: {}}}}
    spec = server_spec("--era", "legacy", "--task-support", "wait_gate")
    gate = tmp_path / "gate"
    with anyio.fail_after(WAIT):
        async with cluster(spec, 2, keys=keys) as c, httpx.AsyncClient(timeout=WAIT) as http:
            a, b = c.instances
            for owner, other in ((a, b), (b, a)):
                session = await open_session(http, owner)
                assert await session_ping(http, other, session, 1) == 200  # forwarded to its owner
                retry = await park(http, owner, 10)
                assert sampled(await resume(http, other, retry))
                call = {
                    "jsonrpc": "2.0",
                    "id": 20,
                    "method": "tools/call",
                    "params": {"name": "wait_gate", "arguments": {"gate": str(gate)}, "_meta": meta},
                }
                created = await http.post(owner + "/mcp", headers=modern_headers("tools/call", "wait_gate"), json=call)
                task_id = one_answer(created, 20)["result"]["taskId"]
                get = {"jsonrpc": "2.0", "id": 21, "method": rules.GET, "params": {"taskId": task_id, "_meta": meta}}
                polled = await http.post(other + "/mcp", headers=modern_headers(rules.GET, task_id), json=get)
                assert one_answer(polled, 21)["result"]["status"] == rules.WORKING
            await anyio.Path(gate).touch()  # let the tasks end, so the cluster stops quickly
    assert_forwarded_both_ways(c)


def assert_forwarded_both_ways(c: Cluster) -> None:
    forwarded = [headers for headers in c.seen if "x-mcp-gateway-forward" in headers]
    assert len(forwarded) >= 6, len(forwarded)


async def test_a_replica_without_the_new_key_refuses_what_it_signs_so_the_key_goes_second_first() -> None:
    # Step 1 skipped on B: A signs with a key B never got, its ids, tokens and forwards alike.
    with anyio.fail_after(WAIT):
        async with (
            cluster(server_spec("--era", "legacy"), 2, keys=[StateKeys.fixed(NEW, OLD), StateKeys.fixed(OLD)]) as c,
            httpx.AsyncClient(timeout=WAIT) as http,
        ):
            a, b = c.instances
            from_a = await open_session(http, a)
            assert await session_ping(http, b, from_a, 1) == 404
            from_b = await open_session(http, b)
            assert await session_ping(http, b, from_b, 2) == 200
            forwarded = await http.post(a + "/mcp", headers=from_b, json=ping(3))  # A verifies B's id...
            assert forwarded.status_code == 403  # ...but B refuses A's forward
            assert "failed verification" in forwarded.json()["error"]["message"]
            retry = await park(http, a, 10)
            refused = await resume(http, b, retry)
            assert refused["error"]["data"]["requestState"] == "tampered"
            assert sampled(await resume(http, a, retry))  # refused, not taken: its owner still has it


def write_keys(path: Path, *keys: bytes) -> None:
    """The file as a Kubernetes Secret update writes it: a new file moved over the old one."""
    fresh = path.with_name(path.name + ".new")
    fresh.write_bytes(b"".join(key + b"\n" for key in keys))
    os.replace(fresh, path)


async def rotate(files: dict[StateKeys, Path], *keys: bytes) -> None:
    """Write ``keys`` to each gateway's file and wait until each has taken them in."""
    for state_keys, path in files.items():
        changed = state_keys.next_change()
        write_keys(path, *keys)
        await changed.wait()
        assert state_keys.ring.keys == keys
        assert state_keys.problem is None


async def test_the_documented_rotation_with_live_reloads_keeps_every_token_until_its_key_goes(tmp_path: Path) -> None:
    paths = [tmp_path / "a" / "state-secret", tmp_path / "b" / "state-secret"]
    for path in paths:
        path.parent.mkdir()
        write_keys(path, OLD)
    keys = [StateKeys.load(str(path), check_interval=CHECK_INTERVAL) for path in paths]
    with anyio.fail_after(WAIT):
        async with (
            cluster(server_spec("--era", "legacy"), 2, keys=keys) as c,
            httpx.AsyncClient(timeout=WAIT) as http,
        ):
            a, b = c.instances
            old_session = await open_session(http, a)
            old_round = await park(http, b, 10)  # parked on B, signed with the old key

            # 1. The new key as the second line, on every replica; nothing changes for clients.
            await rotate(dict(zip(keys, paths, strict=True)), OLD, NEW)
            assert await session_ping(http, b, old_session, 1) == 200

            # 2. The new key first: A first, then B. Each still takes what the other signs.
            await rotate({keys[0]: paths[0]}, NEW, OLD)
            new_session = await open_session(http, a)
            assert await session_ping(http, b, new_session, 2) == 200
            await rotate({keys[1]: paths[1]}, NEW, OLD)
            assert await session_ping(http, b, old_session, 3) == 200
            assert sampled(await resume(http, a, old_round))  # minted before the swap, resumed after
            new_round = await park(http, b, 20)
            status = (await http.get(a + "/status")).json()["state_keys"]
            metrics = (await http.get(b + "/metrics")).text

            # 3. The old key dropped: what it signed is refused; what the new one signed lives on.
            await rotate(dict(zip(keys, paths, strict=True)), NEW)
            assert await session_ping(http, a, old_session, 4) == 404
            assert await session_ping(http, b, old_session, 5) == 404
            assert await session_ping(http, a, new_session, 6) == 200
            assert await session_ping(http, b, new_session, 7) == 200
            assert sampled(await resume(http, a, new_round))
    assert status == {
        "current": fingerprint(NEW),
        "previous": [fingerprint(OLD)],
        "file": str(paths[0]),
        "reloads": 2,
        "problem": None,
    }
    assert f'mcp_gateway_state_key{{fingerprint="{fingerprint(NEW)}",position="current"}} 1.0' in metrics
    assert f'mcp_gateway_state_key{{fingerprint="{fingerprint(OLD)}",position="previous"}} 1.0' in metrics


async def test_a_bad_file_mid_rotation_keeps_the_keys_in_force_and_shows_why_on_status(tmp_path: Path) -> None:
    path = tmp_path / "state-secret"
    write_keys(path, OLD)
    keys = StateKeys.load(str(path), check_interval=CHECK_INTERVAL)
    with anyio.fail_after(WAIT):
        async with (
            cluster(server_spec("--era", "legacy"), 1, keys=[keys]) as c,
            httpx.AsyncClient(timeout=WAIT) as http,
        ):
            [a] = c.instances
            session = await open_session(http, a)
            changed = keys.next_change()
            write_keys(path, OLD, b"too short")
            await changed.wait()
            assert await session_ping(http, a, session, 1) == 200
            status = (await http.get(a + "/status")).json()["state_keys"]
    assert keys.ring.keys == (OLD,)
    assert status["current"] == fingerprint(OLD)
    assert status["problem"] == "line 2: a key needs at least 16 bytes (it has 9)"
