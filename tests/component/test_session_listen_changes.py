"""A legacy session's listen on a modern child changes without a lock held across the
child's acknowledgement (issue #27 item 4): concurrent subscribes of one session coalesce.

The session's ``resources/subscribe`` used to take a per-session lock and, under it, open a
new child listen and wait up to ``ACK_TIMEOUT`` for its acknowledgement; each concurrent
subscribe then made a change of its own, one after another. Now the wanted set is decided at
once, one change is in flight at a time, and those that arrive meanwhile are made together
in the next one (``SessionListen._settle``).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import anyio
import pytest

from gateway.protocol.jsonrpc import JsonObject, Request
from gateway.relay.session_listen import SessionListen
from gateway.relay.sessions import LegacySession

pytestmark = pytest.mark.anyio

BOUND = 10.0


async def test_subscribes_sent_while_a_change_is_in_flight_are_made_in_one_change_after_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    changes: list[list[str]] = []
    first_started, acknowledge = anyio.Event(), anyio.Event()

    async def change(self: SessionListen, wanted: list[str]) -> JsonObject | None:
        """The child's listen for ``wanted``: the first is acknowledged when the test says."""
        changes.append(list(wanted))
        if len(changes) == 1:
            first_started.set()
            await acknowledge.wait()
        self.uris, self._current = list(wanted), cast(Any, object())
        return None

    monkeypatch.setattr(SessionListen, "_change", change)
    session = cast(LegacySession, SimpleNamespace(id="session-1", on_end=[]))
    answers: dict[str, JsonObject] = {}
    with anyio.fail_after(BOUND):
        async with anyio.create_task_group() as tg:
            listen = SessionListen(session, tg)

            async def subscribe(uri: str) -> None:
                answers[uri] = await listen.handle(Request(uri, "resources/subscribe", {"uri": uri}))

            tg.start_soon(subscribe, "file:///a")
            await first_started.wait()
            for uri in ("file:///b", "file:///c", "file:///d"):
                tg.start_soon(subscribe, uri)
            await anyio.wait_all_tasks_blocked()  # each waits for the change in flight
            acknowledge.set()
    assert changes == [["file:///a"], ["file:///a", "file:///b", "file:///c", "file:///d"]]
    assert {uri: answer.get("result") for uri, answer in answers.items()} == {
        "file:///a": {},
        "file:///b": {},
        "file:///c": {},
        "file:///d": {},
    }
    assert listen.uris == ["file:///a", "file:///b", "file:///c", "file:///d"]
