"""A slow start is visibly alive (issue #29 item 5): ``/status`` says what each starting child
has not answered yet, ``call``'s spinner shows the seconds and that, and ``inspect``'s spinner
the same from its own handshake; ``inspect --startup-timeout`` bounds ``initialize``.

The child is the test server with ``--silent-probe`` (it never answers ``server/discover``, so
the handshake waits out ``probe_timeout`` and then sends ``initialize``, which it answers)."""

from __future__ import annotations

import io
import logging
import sys

import anyio
import httpx
import pytest
from rich.console import Console

from gateway.stdio import handshake as stdio_handshake
from gateway.tools import inspect as inspect_cli
from gateway.tools.call import startwatch
from tests.conftest import TEST_SERVER, server_spec
from tests.gateway_server import running_gateway
from tests.integration.test_call_cli import call

pytestmark = pytest.mark.anyio

PROBE = 3.0
"""The silent probe's budget: the window in which the start is in progress."""


class StillWaiting(logging.Handler):
    """Sets ``seen`` at the handshake's first "still waiting" line."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.seen = anyio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "still waiting for" in record.getMessage():
            self.seen.set()


async def test_status_names_the_answer_a_starting_child_still_owes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stdio_handshake, "WAITING_LOG_INTERVAL", 0.05)
    waiting = StillWaiting()
    logger = logging.getLogger("gateway.child")
    logger.addHandler(waiting)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        with anyio.fail_after(30):
            async with running_gateway(server_spec("--silent-probe", probe_timeout=20.0)) as url:
                await waiting.seen.wait()  # the handshake is under way
                async with httpx.AsyncClient() as http:
                    status = (await http.get(url.replace("/mcp", "/status"))).json()
    finally:
        logger.removeHandler(waiting)
        logger.setLevel(level)
    children = [c for p in status["servers"][0]["pools"].values() for c in p["children"]]
    (starting,) = [c for c in children if c["state"] == "starting"]
    assert starting["waiting_for"].startswith("pid ")
    assert " to answer server/discover (" in starting["waiting_for"]
    assert starting["waiting_for"].endswith(" of 20)")
    assert startwatch.describe(status, None) == f"the gateway is waiting for {starting['waiting_for']}"


async def test_call_s_spinner_shows_the_seconds_and_what_the_gateway_waits_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(startwatch, "STATUS_POLL_INTERVAL", 0.05)
    with anyio.fail_after(30):
        async with running_gateway(server_spec("--silent-probe", probe_timeout=PROBE), pool_size=1) as url:
            run = await call(url, "echo", "--arg", "message=late")  # stderr is a terminal there
    assert (run.code, run.out) == (0, "late\n"), run.err
    screen = " ".join(run.err.split())
    assert f"waiting for {url} to answer (" in screen
    assert "s; the gateway is waiting for pid " in screen
    assert "to answer server/discover (" in screen


def test_the_status_url_and_its_server_follow_the_endpoint_path() -> None:
    assert startwatch.status_url("http://h:1/mcp") == ("http://h:1/status", None)
    assert startwatch.status_url("http://h:1/servers/files/mcp/") == ("http://h:1/status", "files")
    assert startwatch.status_url("http://h:1/api/servers/a/mcp?x=1") == ("http://h:1/api/status", "a")
    assert startwatch.status_url("http://h:1/sse") is None


def test_a_pool_that_keeps_failing_is_described_by_its_last_error() -> None:
    status = {"servers": [{"name": "x", "pools": {"p": {"last_error": "cannot start x: boom", "children": []}}}]}
    assert (
        startwatch.describe(status, "x") == "its server's last start failed (cannot start x: boom); the gateway retries"
    )
    assert startwatch.describe(status, "other") is None
    assert startwatch.describe({"not": "status"}, None) is None


async def test_inspect_shows_what_the_server_still_owes_and_takes_a_startup_timeout() -> None:
    out, err = io.StringIO(), io.StringIO()
    command = [sys.executable, str(TEST_SERVER), "--silent"]
    argv = ["--probe-timeout", "0.5", "--startup-timeout", "1", "--", *command]
    with anyio.fail_after(30):
        code = await inspect_cli.run_inspect(
            argv,
            out=Console(file=out, width=200),
            err=Console(file=err, width=400, force_terminal=True, emoji=False, highlight=False),
        )
    screen = " ".join(err.getvalue().split())
    assert code == inspect_cli.EXIT_CANNOT_START
    assert "no answer to initialize within 1 s" in screen  # --startup-timeout, not the default 60 s
    assert "starting " in screen
    assert "; waiting for pid " in screen
    assert " to answer initialize (" in screen
    assert "of 1)" in screen
