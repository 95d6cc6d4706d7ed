"""The npm tier: roots are per client, by construction (issue #23).

In front of ``@modelcontextprotocol/server-filesystem`` (roots are its access rights) and
``@modelcontextprotocol/server-everything`` (it caches the roots it fetched once), six clients
run at the same time on one gateway: of each era, one with root A, one with root B and one that
declares no roots. Each reads only what its own roots allow (the one without: the server's own
directories, or the configured ``--root``), in every call, and ``list_allowed_directories`` /
``get-roots-list`` shows its own. With default flags and with each documented roots setting:
``clientCapabilities`` with ``roots.listChanged`` in a config file, ``--client-capability
roots.listChanged`` and ``--root`` (each made by the gateway's own parsers).

Both servers fetch roots outside any call, so the gateway learns that they keep them
(``--roots-keying auto``): a modern client with roots answers the gateway's own roots round
first (``inputRequests.roots``, ``gateway.relay.client_roots``); a legacy session answers the
gateway's ``roots/list`` on its first call's stream. Their calls run on children keyed by their
roots set; a client without roots runs on the usual children, given no client's roots.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from gateway.configfile import parse_servers
from gateway.relay.server_config import ServerConfig
from gateway.settings import convert
from gateway.stdio.spec import ChildSpec
from tests.gateway_server import MODERN_META, modern_call, modern_headers, parse_sse, running_gateway
from tests.integration.test_npm_everything import NPM_MODULES, everything_spec
from tests.integration.test_shared_settings import call, legacy_call, open_session

pytestmark = [pytest.mark.npm, pytest.mark.anyio]

FILESYSTEM = NPM_MODULES / "@modelcontextprotocol" / "server-filesystem" / "dist" / "index.js"
ROUNDS = 3
"""Calls of each kind per client: the first one sets its child up, the later ones must hold."""
WITH_ROOTS = {"sampling": {}, "elicitation": {}, "roots": {"listChanged": True}}
WITHOUT_ROOTS = {"sampling": {}, "elicitation": {}}

SETTINGS = ["default", "config-file listChanged", "--client-capability roots.listChanged", "--root"]


def configured(spec: ChildSpec, setting: str, conf: Path) -> ChildSpec:
    """``spec`` as the gateway's own parsers make it for ``setting``."""
    if setting == "config-file listChanged":
        entry = {
            "command": spec.command,
            "args": list(spec.args),
            "clientCapabilities": {"roots": {"listChanged": True}},
        }
        [server] = parse_servers({"mcpServers": {"fs": entry}}, ServerConfig("fs", spec))
        return replace(server.spec, name=spec.name)
    if setting == "--client-capability roots.listChanged":
        return replace(spec, client_capabilities=convert.client_capabilities(["roots.listChanged"]))
    if setting == "--root":
        return replace(spec, roots=convert.roots([str(conf)]))
    return spec


def root_of(path: Path) -> list[dict[str, str]]:
    return [{"uri": path.as_uri(), "name": path.name}]


async def modern_tool(
    http: httpx.AsyncClient,
    url: str,
    tool: str,
    arguments: dict[str, Any],
    capabilities: dict[str, Any],
    roots: list[dict[str, str]] | None,
    request_id: str,
) -> dict[str, Any]:
    """A modern ``tools/call``'s final message; the gateway's roots round (if it asks) answered
    with ``roots``."""
    meta = {**MODERN_META, "io.modelcontextprotocol/clientCapabilities": capabilities}
    body = modern_call(request_id, tool, arguments, **meta)
    for _ in range(3):
        reply = await http.post(url, headers=modern_headers("tools/call", tool), json=body)
        assert reply.status_code == 200, reply.text
        messages = parse_sse(reply.text) if reply.headers["content-type"].startswith("text/") else [reply.json()]
        result = messages[-1].get("result", {})
        if result.get("resultType") != "input_required":
            return dict(messages[-1])
        assert roots is not None, result  # never asked without declaring roots
        assert result["inputRequests"] == {"roots": {"method": "roots/list", "params": {}}}, result
        body = modern_call(request_id + "-retry", tool, arguments, **meta)
        body["params"].update(inputResponses={"roots": {"roots": roots}}, requestState=result["requestState"])
    raise AssertionError("asked for roots more than once")


def text_of(message: dict[str, Any]) -> str:
    """A tool result's text (an error's message)."""
    if "error" in message:
        return str(message["error"].get("message"))
    return "\n".join(part.get("text", "") for part in message["result"].get("content", []))


@pytest.fixture
def dirs(tmp_path: Path) -> dict[str, Path]:
    made = {}
    for name in ("own", "conf", "a", "b"):
        made[name] = path = (tmp_path / name).resolve()
        path.mkdir()
        (path / f"{name}.txt").write_text(f"secret of {name}\n")
    return made


@pytest.mark.skipif(
    not FILESYSTEM.is_file(), reason="server-filesystem is not installed (scripts/install-npm-servers.sh)"
)
@pytest.mark.parametrize("setting", SETTINGS)
async def test_server_filesystem_gives_each_concurrent_client_its_own_roots_only(
    setting: str, dirs: dict[str, Path]
) -> None:
    base = ChildSpec(
        "node",
        (str(FILESYSTEM), str(dirs["own"])),
        handshake_timeout=20.0,
        stdin_close_grace=1.0,
        sigterm_grace=1.0,
        name="server-filesystem",
    )
    spec = configured(base, setting, dirs["conf"])
    # The client without roots gets the server's own directory, or the configured root.
    fallback = "conf" if setting == "--root" else "own"
    clients = {"a": "a", "b": "b", "none": fallback}
    seen: dict[str, list[str]] = {}
    with anyio.fail_after(120):
        async with running_gateway(spec) as url, httpx.AsyncClient(timeout=60) as http:

            async def legacy(name: str) -> None:
                declares = WITHOUT_ROOTS if name == "none" else WITH_ROOTS
                session = await open_session(http, url, declares)
                roots = None if name == "none" else root_of(dirs[name])
                for i in range(ROUNDS):
                    got, _ = await call(http, url, session, legacy_call(f"l{i}", "list_allowed_directories", {}), roots)
                    seen.setdefault(f"legacy {name}", []).append(text_of(got[-1]))
                    for other, path in dirs.items():
                        args = {"path": str(path / f"{other}.txt")}
                        got, _ = await call(
                            http, url, session, legacy_call(f"r{i}{other}", "read_text_file", args), roots
                        )
                        seen.setdefault(f"legacy {name} reads {other}", []).append(text_of(got[-1]))

            async def modern(name: str) -> None:
                declares = WITHOUT_ROOTS if name == "none" else WITH_ROOTS
                roots = None if name == "none" else root_of(dirs[name])
                for i in range(ROUNDS):
                    result = await modern_tool(http, url, "list_allowed_directories", {}, declares, roots, f"m{i}")
                    seen.setdefault(f"modern {name}", []).append(text_of(result))
                    for other, path in dirs.items():
                        args = {"path": str(path / f"{other}.txt")}
                        result = await modern_tool(http, url, "read_text_file", args, declares, roots, f"r{i}{other}")
                        seen.setdefault(f"modern {name} reads {other}", []).append(text_of(result))

            async with anyio.create_task_group() as tg:
                for name in clients:
                    tg.start_soon(legacy, name)
                    tg.start_soon(modern, name)
    for era in ("legacy", "modern"):
        for name, allowed in clients.items():
            listed = seen[f"{era} {name}"]
            assert len(listed) == ROUNDS
            for text in listed:
                shown = {line for line in text.splitlines()[1:] if line}
                assert shown == {str(dirs[allowed])}, (era, name, listed)
            for other in dirs:
                reads = seen[f"{era} {name} reads {other}"]
                assert len(reads) == ROUNDS
                for text in reads:
                    if other == allowed:
                        assert text == f"secret of {other}\n", (era, name, other, text)
                    else:
                        assert "secret" not in text, (era, name, other, text)
                        assert "denied" in text.lower(), (era, name, other, text)


@pytest.mark.parametrize("setting", SETTINGS)
async def test_server_everything_gives_each_concurrent_client_its_own_roots_only(
    setting: str, dirs: dict[str, Path]
) -> None:
    spec = configured(everything_spec(), setting, dirs["conf"])
    names = ("a", "b", "none")
    seen: dict[str, list[str]] = {}
    with anyio.fail_after(120):
        async with running_gateway(spec) as url, httpx.AsyncClient(timeout=60) as http:

            async def legacy(name: str) -> None:
                declares = WITHOUT_ROOTS if name == "none" else WITH_ROOTS
                session = await open_session(http, url, declares)
                roots = None if name == "none" else root_of(dirs[name])
                for i in range(ROUNDS):
                    got, _ = await call(http, url, session, legacy_call(f"l{i}", "get-roots-list", {}), roots)
                    seen.setdefault(f"legacy {name}", []).append(json.dumps(got[-1]))

            async def modern(name: str) -> None:
                declares = WITHOUT_ROOTS if name == "none" else WITH_ROOTS
                roots = None if name == "none" else root_of(dirs[name])
                for i in range(ROUNDS):
                    result = await modern_tool(http, url, "get-roots-list", {}, declares, roots, f"m{i}")
                    seen.setdefault(f"modern {name}", []).append(json.dumps(result))

            async with anyio.create_task_group() as tg:
                for name in names:
                    tg.start_soon(legacy, name)
                    tg.start_soon(modern, name)
    for era in ("legacy", "modern"):
        for name in names:
            answers = seen[f"{era} {name}"]
            assert len(answers) == ROUNDS
            own = dirs[name] if name != "none" else dirs["conf"] if setting == "--root" else None
            for text in answers:
                if own is not None:
                    assert own.as_uri() in text, (era, name, text)
                else:  # the usual children, told roots but given none by the gateway
                    assert "no roots" in text.lower(), (era, name, text)
                assert not any(path.as_uri() in text for path in dirs.values() if path != own), (era, name, text)
