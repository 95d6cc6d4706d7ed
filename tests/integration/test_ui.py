"""The operator's page, ``/ui``, in a real headless browser (Debian's ``chromium``).

A real gateway serves two servers (a modern one, and a legacy one that writes stderr);
Chromium loads ``/ui`` and dumps the DOM it built, which must list both servers and every
child ``/status`` names, with their pids, eras and stderr; a screenshot must render. The
browser tests skip, saying why, only when chromium is not installed
(``scripts/install-chromium.sh``, run by ``.ci/run``, installs it).
"""

from __future__ import annotations

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
from gateway.relay.router import Router, ServerConfig
from gateway.stdio.pool import PoolSettings
from tests.conftest import server_spec
from tests.gateway_server import app_for, serving
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
    return {"authorization": f"Bearer {TOKEN}"} if "tokens" in options else {}


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


async def test_the_page_is_protected_like_status() -> None:
    with anyio.fail_after(60):
        async with two_servers(tokens=TokenStore([f"ops:{TOKEN}"])) as base, httpx.AsyncClient() as http:
            anonymous = await http.get(f"{base}/ui")
            status = await http.get(f"{base}/status")
            allowed = await http.get(f"{base}/ui", headers={"authorization": f"Bearer {TOKEN}"})
    assert anonymous.status_code == status.status_code == 401
    assert allowed.status_code == 200
    assert allowed.headers["content-type"].startswith("text/html")
    assert "default-src 'none'" in allowed.headers["content-security-policy"]
    assert '<meta http-equiv="refresh"' in allowed.text


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
