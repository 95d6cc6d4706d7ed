"""Discovery agrees with itself (issue #12 item 8): what ``server/discover`` advertises and
what a -32022 offers name the same versions, whatever the child's era, and -32022 echoes
the version that was asked for. A client that retries with an offered version is served."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

from tests.conftest import server_spec
from tests.gateway_server import MODERN, MODERN_META, modern_headers, running_gateway

pytestmark = pytest.mark.anyio

PROTOCOL_VERSION_KEY = "io.modelcontextprotocol/protocolVersion"


def tools_list(request_id: Any, version: str) -> dict[str, Any]:
    meta = {**MODERN_META, PROTOCOL_VERSION_KEY: version}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/list", "params": {"_meta": meta}}


def versioned_headers(version: str) -> dict[str, str]:
    return {**modern_headers("tools/list"), "mcp-protocol-version": version}


@pytest.mark.parametrize("child_era", ["modern", "legacy", "dual"])
async def test_the_versions_of_a_32022_are_those_discover_advertises_for_every_client(child_era: str) -> None:
    asked = ["2025-11-25", "2025-03-26", "2099-01-01", "2026-07-28-draft"]
    refusals: dict[str, dict[str, Any]] = {}
    with anyio.fail_after(30):
        async with running_gateway(server_spec("--era", child_era)) as url, httpx.AsyncClient(timeout=20) as http:

            async def refused(version: str) -> None:
                reply = await http.post(url, headers=versioned_headers(version), json=tools_list(version, version))
                assert reply.status_code == 400, reply.text
                refusals[version] = reply.json()

            async with anyio.create_task_group() as tg:  # several clients at once
                for version in asked:
                    tg.start_soon(refused, version)
            discover = await http.post(
                url,
                headers=modern_headers("server/discover"),
                json={"jsonrpc": "2.0", "id": "d", "method": "server/discover", "params": {"_meta": MODERN_META}},
            )
            advertised = discover.json()["result"]["supportedVersions"]
            assert advertised == [MODERN]
            for version, body in refusals.items():
                assert body["id"] == version
                assert body["error"]["code"] == -32022
                assert body["error"]["data"]["requested"] == version
                assert set(body["error"]["data"]["supported"]) <= set(advertised)
            for offered in refusals["2025-11-25"]["error"]["data"]["supported"]:
                retry = await http.post(url, headers=versioned_headers(offered), json=tools_list(1, offered))
                assert retry.status_code == 200, retry.text
                assert "tools" in retry.json()["result"]
