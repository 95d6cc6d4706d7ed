"""HTTP fuzzing against a live gateway: random and mutated requests, bounded in count and time.

Every request must get a well-formed answer (a status, and a JSON-RPC error body whenever
the status is an error with a body), the gateway must stay up, and nothing malformed may
reach the child: the test server records every line it reads, and each must be a valid
JSON-RPC message.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import anyio
import httpx
import orjson
import pytest

from gateway.protocol.jsonrpc import parse_message
from tests.conftest import server_spec
from tests.gateway_server import BASE_HEADERS, MODERN_META, modern_call, modern_headers, running_gateway

pytestmark = pytest.mark.anyio

REQUESTS = 400
SEED = 20261130

VALID_BODIES: list[Any] = [
    modern_call(1, "echo", {"message": "hi"}),
    {"jsonrpc": "2.0", "id": "x", "method": "tools/list", "params": {"_meta": MODERN_META}},
    {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}},
    },
    {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}},
]
WEIRD_VALUES: list[Any] = [None, True, 1.5, -1, 2**70, "", "\x00", "é" * 3, [], {}, [1, [2]], {"a": {"b": None}}]
HEADER_NAMES = [
    "mcp-method",
    "mcp-name",
    "mcp-protocol-version",
    "mcp-session-id",
    "content-type",
    "accept",
    "mcp-param-x",
]
HEADER_VALUES = [
    *("tools/call", "echo", "2026-07-28", "2025-03-26", "=?base64?!!?=", "=?base64?ZWNobw==?=", ""),
    *("application/json", "*/*", "text/event-stream", "x" * 300),
]


def mutate(rng: random.Random, value: Any, depth: int = 0) -> Any:
    if depth > 3 or rng.random() < 0.2:
        return rng.choice(WEIRD_VALUES)
    if isinstance(value, dict):
        out = dict(value)
        key = rng.choice([*out, "id", "method", "params", "jsonrpc", "result", "error", "_meta"])
        action = rng.random()
        if action < 0.3:
            out.pop(key, None)
        elif action < 0.7:
            out[key] = mutate(rng, out.get(key), depth + 1)
        else:
            out[key] = rng.choice(WEIRD_VALUES)
        return out
    if isinstance(value, list):
        return [mutate(rng, v, depth + 1) for v in value] or [rng.choice(VALID_BODIES)]
    return rng.choice(WEIRD_VALUES)


def random_request(rng: random.Random) -> tuple[str, dict[str, str], bytes]:
    method = rng.choices(["POST", "GET", "DELETE", "PUT", "PATCH"], weights=[80, 8, 6, 3, 3])[0]
    kind = rng.random()
    if kind < 0.15:
        body = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 200)))
    elif kind < 0.25:
        body = json.dumps([mutate(rng, rng.choice(VALID_BODIES)) for _ in range(rng.randint(0, 3))]).encode()
    else:
        body = json.dumps(mutate(rng, rng.choice(VALID_BODIES))).encode()  # stdlib: writes 2**70 too
    headers = dict(rng.choice([BASE_HEADERS, modern_headers("tools/call", "echo"), modern_headers("tools/list"), {}]))
    for _ in range(rng.randint(0, 3)):
        headers[rng.choice(HEADER_NAMES)] = rng.choice(HEADER_VALUES)
    return method, headers, body


def well_formed(reply: httpx.Response) -> None:
    assert 200 <= reply.status_code < 600
    if reply.status_code in (202, 204) or not reply.content:
        return
    content_type = reply.headers.get("content-type", "")
    if content_type.startswith("text/event-stream"):
        return
    assert content_type.startswith("application/json"), (reply.status_code, content_type, reply.content[:200])
    body = reply.json()
    items = body if isinstance(body, list) else [body]
    for item in items:
        assert item["jsonrpc"] == "2.0"
        assert ("result" in item) != ("error" in item)
        if "error" in item:
            assert isinstance(item["error"]["code"], int)
            assert isinstance(item["error"]["message"], str)
        if reply.status_code >= 400:
            assert "error" in item


async def test_random_and_mutated_requests_all_get_well_formed_answers(tmp_path: Path) -> None:
    record = tmp_path / "stdin.jsonl"
    rng = random.Random(SEED)
    with anyio.fail_after(120):
        async with running_gateway(server_spec("--record", str(record))) as url, httpx.AsyncClient(timeout=20) as http:
            for _ in range(REQUESTS):
                method, headers, body = random_request(rng)
                reply = await http.request(method, url, headers=headers, content=body if method == "POST" else None)
                well_formed(reply)
            alive = await http.post(
                url, headers=modern_headers("tools/call", "echo"), json=modern_call(9, "echo", {"message": "ok"})
            )
            assert "result" in alive.json(), alive.text
            assert alive.json()["result"]["content"][0]["text"] == "ok"
    lines = record.read_bytes().splitlines()
    assert lines, "the child read nothing at all"
    for line in lines:
        parse_message(orjson.loads(line))  # raises if anything malformed reached the child
