"""What a starting child is said to owe (``gateway.stdio.handshake.StartWait``) and the
``inspect`` spinner that shows it: the seconds shown never pass the budget, and a wait that
is over is not shown as one (issue #41: "7 s of 5")."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest

from gateway.stdio.handshake import StartWait
from gateway.stdio.spec import ChildSpec
from gateway.tools.inspect import Starting

pytestmark = pytest.mark.anyio  # a StartWait holds a cancel scope


def start_wait(probe_timeout: float = 5) -> StartWait:
    child: Any = SimpleNamespace(spec=ChildSpec("server", probe_timeout=probe_timeout), pid=4711)
    return StartWait(child)


async def test_a_wait_shows_the_seconds_so_far_of_its_budget() -> None:
    wait = start_wait(probe_timeout=5)
    wait.since = time.monotonic() - 3.2
    assert wait.describe() == "pid 4711 to answer server/discover (3 s of 5)"


async def test_a_wait_past_its_budget_shows_the_budget_not_more() -> None:
    wait = start_wait(probe_timeout=5)
    wait.since = time.monotonic() - 7  # the timeout fired late, or the reply is still being read
    assert wait.describe() == "pid 4711 to answer server/discover (5 s of 5)"


async def test_the_next_answer_owed_counts_against_its_own_budget() -> None:
    wait = start_wait(probe_timeout=5)
    wait.since = time.monotonic() - 5
    wait.now_waiting_for("initialize", 60)
    assert wait.describe() == "pid 4711 to answer initialize (0 s of 60)"


async def test_inspect_stops_showing_the_wait_once_the_handshake_is_over() -> None:
    wait = start_wait(probe_timeout=5)
    starting = Starting("server")
    starting.watch(wait)
    assert "waiting for pid 4711 to answer server/discover" in str(starting.__rich__())
    wait.since = time.monotonic() - 7
    wait.scope.cancel()  # what run_handshake does when the handshake ends
    shown = str(starting.__rich__())
    assert "waiting for" not in shown
    assert "of 5)" not in shown
    assert "reading its tools, prompts and resources" in shown
