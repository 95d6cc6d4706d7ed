"""The operator's page, ``/ui``, in a real headless browser (Debian's ``chromium``).

A real gateway serves two servers (a modern one, and a legacy one that writes stderr);
Chromium loads ``/ui`` and dumps the DOM it built, which must list both servers and every
child ``/status`` names, with their pids, eras and stderr; a screenshot must render. The
browser tests skip, saying why, only when chromium is not installed
(``scripts/install-chromium.sh``, run by ``.ci/run``, installs it).
"""

from __future__ import annotations

import math
import os
import re
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from gateway.http.auth import TokenStore
from gateway.http.ui import render_page
from gateway.relay.router import Router
from gateway.relay.server_config import ServerConfig
from gateway.stdio.pool import PoolSettings
from tests.conftest import server_spec
from tests.gateway_server import OPERATOR, OPERATOR_TOKEN, app_for, operator_tokens, serving
from tests.logrecords import recording

pytestmark = pytest.mark.anyio

CHROMIUM_TIMEOUT = 60  # seconds for one headless run (a cold start on a busy machine)
TOKEN = "ui-test-token-0123456789abcdef"


@pytest.fixture
def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.skip("chromium is not installed (Debian package chromium; scripts/install-chromium.sh)")
    return path


@asynccontextmanager
async def two_servers(**options: Any) -> AsyncIterator[str]:
    """A gateway serving ``alpha`` (modern, two children) and ``beta`` (legacy, with stderr)."""
    alpha = ServerConfig("alpha", server_spec(), PoolSettings(min_size=2, max_size=2))
    beta = ServerConfig("beta", server_spec("--era", "legacy", "--stderr-lines", "3"), PoolSettings())
    with recording("gateway.child") as records:
        async with serving(app_for([Router(alpha), Router(beta)], **options)) as base:
            await records.wait_for_text(") ready:", 3)  # both pools pre-warm: three children
            yield base


def _auth(options: dict[str, Any]) -> dict[str, str]:
    return OPERATOR if "operator_tokens" in options else {}


async def browse(chromium: str, profile: Path, *flags: str) -> bytes:
    command = [chromium, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}", *flags]
    with anyio.fail_after(CHROMIUM_TIMEOUT):
        result = await anyio.run_process(command, check=False)
    assert result.returncode == 0, result.stderr.decode(errors="replace")[-2000:]
    return result.stdout


async def test_the_page_lists_every_server_and_child_in_a_real_browser(chromium: str, tmp_path: Path) -> None:
    with anyio.fail_after(90):
        async with two_servers() as base, httpx.AsyncClient() as http:
            status = (await http.get(f"{base}/status")).json()
            dom = (await browse(chromium, tmp_path / "profile", "--dump-dom", f"{base}/ui")).decode()
    assert "<title>mcp-stdio-gateway</title>" in dom
    sections = re.findall(r'<section class="server" data-server="([^"]+)"', dom)
    assert sections == ["alpha", "beta"]
    pids = [c["pid"] for s in status["servers"] for p in s["pools"].values() for c in p["children"]]
    assert len(pids) == 3
    shown = [int(pid) for pid in re.findall(r'<td class="mono pid">(\d+)</td>', dom)]
    assert sorted(shown) == sorted(pids)
    beta = dom[dom.index('data-server="beta"') :]
    assert "legacy" in beta
    assert "2025-11-25" in beta
    assert "boot line 3" in beta  # the child's stderr tail
    alpha = dom[dom.index('data-server="alpha"') : dom.index('data-server="beta"')]
    assert alpha.count("2026-07-28") == 2


async def test_the_page_renders_a_screenshot(chromium: str, tmp_path: Path) -> None:
    shot = tmp_path / "ui.png"
    with anyio.fail_after(90):
        async with two_servers() as base:
            await browse(chromium, tmp_path / "profile", f"--screenshot={shot}", "--window-size=1200,900", f"{base}/ui")
    data = shot.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(data) > 10_000  # a page, not a blank image


async def test_status_and_ui_take_the_operator_token_and_no_mcp_token_opens_them() -> None:
    """#24.11: an MCP endpoint's token read every server's argv, stderr and principals."""
    options = {"tokens": TokenStore([f"alice:{TOKEN}"]), "operator_tokens": operator_tokens()}
    mcp_token = {"authorization": f"Bearer {TOKEN}"}
    with anyio.fail_after(60):
        async with two_servers(**options) as base, httpx.AsyncClient() as http:
            replies = {
                (path, who): await http.get(f"{base}{path}", headers=headers)
                for path in ("/ui", "/status")
                for who, headers in (("nobody", {}), ("mcp client", mcp_token), ("operator", OPERATOR))
            }
            operator_on_mcp = await http.post(f"{base}/mcp", headers={**OPERATOR, "content-type": "application/json"})
    for path in ("/ui", "/status"):
        assert replies[(path, "nobody")].status_code == 401
        assert replies[(path, "mcp client")].status_code == 401
        assert replies[(path, "operator")].status_code == 200
    assert 'realm="mcp-stdio-gateway operator"' in replies[("/status", "nobody")].headers["www-authenticate"]
    login = replies[("/ui", "nobody")]
    assert login.headers["content-type"].startswith("text/html")
    assert '<form method="post" action="ui/login">' in login.text
    assert "form-action 'self'" in login.headers["content-security-policy"]
    page = replies[("/ui", "operator")]
    assert "default-src 'none'" in page.headers["content-security-policy"]
    assert '<meta http-equiv="refresh"' in page.text
    assert operator_on_mcp.status_code == 401  # and an operator token is no MCP token


async def test_the_login_form_exchanges_the_operator_token_for_a_strict_httponly_cookie(tmp_path: Path) -> None:
    """#29.12: a browser cannot send a bearer header; the form sets a cookie for /ui and /status."""
    token_file = tmp_path / "operators"
    token_file.write_text(f"ops:{OPERATOR_TOKEN}\n")
    operators = TokenStore(path=str(token_file), flag="--operator-token")
    with anyio.fail_after(60):
        async with two_servers(tokens=TokenStore([f"alice:{TOKEN}"]), operator_tokens=operators) as base:
            form = {"content-type": "application/x-www-form-urlencoded", "origin": base}
            async with httpx.AsyncClient(base_url=base) as http:
                wrong = await http.post("/ui/login", headers=form, content=b"token=not-the-operator-token")
                assert wrong.status_code == 401
                assert "not an operator token" in wrong.text
                foreign = await http.post(
                    "/ui/login", headers={**form, "origin": "http://evil.example"}, content=f"token={OPERATOR_TOKEN}"
                )
                assert foreign.status_code == 403  # a cross-site form post (CSRF) never reaches the check
                via_tls_proxy = {**form, "origin": base.replace("http://", "https://")}  # the page over HTTPS
                assert (
                    await http.post("/ui/login", headers=via_tls_proxy, content=f"token={OPERATOR_TOKEN}")
                ).status_code == 303
                signed_in = await http.post("/ui/login", headers=form, content=f"token={OPERATOR_TOKEN}")
                assert signed_in.status_code == 303
                assert signed_in.headers["location"] == "/ui"
                cookies = signed_in.headers.get_list("set-cookie")
                assert sorted(c.split("; ")[1] for c in cookies) == ["Path=/status", "Path=/ui"]
                for cookie in cookies:
                    assert "; HttpOnly" in cookie
                    assert "; SameSite=Strict" in cookie
                    assert "Secure" not in cookie  # plain HTTP here; HTTPS adds it
                    assert OPERATOR_TOKEN not in cookie
                jar = {"cookie": cookies[0].split(";")[0]}
                assert (await http.get("/ui", headers=jar)).status_code == 200
                assert (await http.get("/status", headers=jar)).status_code == 200
                tampered = {"cookie": jar["cookie"][:-4] + "0000"}
                assert (await http.get("/status", headers=tampered)).status_code == 401
                token_file.write_text("ops:another-operator-token-0123456789\n")
                os.utime(token_file, (1, 1))  # a different mtime, whatever the clock's resolution
                operators._checked = -math.inf  # due for its look at the file (at most once a second)
                assert (await http.get("/status", headers=jar)).status_code == 401  # its token is gone


async def test_a_browser_without_the_cookie_gets_the_login_form(chromium: str, tmp_path: Path) -> None:
    with anyio.fail_after(90):
        async with two_servers(operator_tokens=operator_tokens()) as base:
            dom = (await browse(chromium, tmp_path / "profile", "--dump-dom", f"{base}/ui")).decode()
    assert '<form method="post" action="ui/login">' in dom
    assert 'type="password" name="token"' in dom
    assert "data-server" not in dom  # nothing of the servers before the login


def test_every_value_on_the_page_is_escaped() -> None:
    hostile = "<script>alert(1)</script>"
    child = {"pid": 7, "state": hostile, "era": hostile, "protocol_version": hostile, "stderr": [hostile]}
    status = {
        "version": hostile,
        "sessions": 0,
        "servers": [
            {
                "name": hostile,
                "command": [hostile],
                "isolation": hostile,
                "ready": False,
                "pools": {hostile: {"children": [child], "last_error": hostile, "waiting": hostile}},
            }
        ],
        "recent_errors": [{"time": hostile, "level": hostile, "logger": hostile, "message": hostile}],
    }
    page = render_page(status)
    assert "<script" not in page
    assert page.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 10


async def test_status_keeps_the_recent_errors_newest_first() -> None:
    failing = ServerConfig("broken", server_spec("--exit-at-start", "3"), PoolSettings(min_size=1, max_size=1))
    with anyio.fail_after(60), recording("gateway.pool") as records:
        async with serving(app_for([Router(failing)])) as base, httpx.AsyncClient() as http:
            await records.wait_for_text("child failed to start", 2)  # the pool retries with backoff
            status = (await http.get(f"{base}/status")).json()
            assert len(status["recent_errors"]) >= 2
            page = (await http.get(f"{base}/ui")).text
    messages = [e["message"] for e in status["recent_errors"]]
    assert any("child failed to start" in m and "exited with code 3" in m for m in messages)
    assert status["recent_errors"][0]["time"] >= status["recent_errors"][-1]["time"]
    assert "child failed to start" in page
