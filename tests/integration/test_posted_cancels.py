"""Cancellations POSTed by clients, with several clients at once (issue #12 items 5–7).

- A **modern** client's POSTed ``notifications/cancelled`` cancels the one request of the
  same principal it names (exact id type): the child is sent ``notifications/cancelled``
  with the child-side id, the pool slot is freed, and the request's stream ends without an
  answer. An ambiguous, foreign or mistyped id cancels nothing.
- A **legacy** client's own cancellation gets no answer either: its stream just ends (a
  cancelled request of a 2025-03-26 batch is left out of the answer: a component test now,
  tests/component/test_streams.py).
- ``notifications/cancelled`` sent **with an id** is refused (400/-32600) in both eras and
  never reaches the child: ``--record`` shows every line the child read.

The tests wait on events only: the first progress of a ``countdown`` says the call is
running at the child; a ``cancelled_ids`` call, written to the child's stdin after every
earlier line, says what the child has been told.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from gateway.stdio.pool import PoolSettings
from tests.conftest import server_spec
from tests.filewatch import wait_until
from tests.gateway_server import (
    MODERN_META,
    modern_call,
    modern_headers,
    open_legacy_session,
    parse_sse,
    running_gateway,
)

pytestmark = pytest.mark.anyio

CHILD_ERAS = ["modern", "legacy", "dual"]
LEGACY_VERSION = "2025-11-25"
LONG = {"steps": 100, "interval_ms": 300}
"""30 s of countdown: only a cancellation ends it within a test's bound."""


class StreamedCall:
    """One POST read as it streams; ``wait_for`` sleeps until a predicate over it holds."""

    def __init__(self, http: httpx.AsyncClient, url: str, headers: dict[str, str], body: dict[str, Any]) -> None:
        self.http, self.url, self.headers, self.body = http, url, headers, body
        self.messages: list[dict[str, Any]] = []
        self.content_type = ""
        self.done = False
        self._changed = anyio.Event()

    async def run(self) -> None:
        async with self.http.stream("POST", self.url, headers=self.headers, json=self.body) as reply:
            assert reply.status_code == 200, await reply.aread()
            self.content_type = reply.headers["content-type"]
            text = ""
            async for chunk in reply.aiter_text():
                text += chunk
                if self.content_type.startswith("text/event-stream"):
                    self.messages = parse_sse(text)
                self._tell()
            if self.content_type == "application/json":
                self.messages = [json.loads(text)]
        self.done = True
        self._tell()

    def _tell(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_for(self, predicate: Callable[[StreamedCall], bool]) -> None:
        while not predicate(self):
            await self._changed.wait()

    @property
    def progress(self) -> int:
        return sum(1 for m in self.messages if m.get("method") == "notifications/progress")

    @property
    def final(self) -> dict[str, Any] | None:
        finals = [m for m in self.messages if "id" in m and "method" not in m]
        assert len(finals) <= 1, finals
        return finals[0] if finals else None


def running(call: StreamedCall) -> bool:
    return call.progress > 0


def modern_cancel(request_id: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": request_id}}


def as_user(headers: dict[str, str], user: str | None) -> dict[str, str]:
    return headers if user is None else {**headers, "x-user": user}


async def cancelled_ids(http: httpx.AsyncClient, url: str, session: dict[str, str] | None = None) -> list[Any]:
    """What the child was told so far: this call reaches its stdin after every earlier line.
    With ``session``, asked by that legacy session (a dual child may serve each era apart)."""
    if session is not None:
        reply = await http.post(url, headers=session, json=legacy_call("q", "cancelled_ids", {}))
    else:
        reply = await http.post(
            url, headers=modern_headers("tools/call", "cancelled_ids"), json=modern_call("q", "cancelled_ids")
        )
    assert reply.status_code == 200, reply.text
    ids: list[Any] = reply.json()["result"]["structuredContent"]["ids"]
    return ids


def recorded(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def child_id_of(path: Path, arguments: dict[str, Any]) -> Any:
    """The id the gateway gave the child for the tools/call with these arguments."""
    [found] = [
        m["id"] for m in recorded(path) if m.get("method") == "tools/call" and m["params"]["arguments"] == arguments
    ]
    return found


async def open_session(http: httpx.AsyncClient, url: str, user: str | None = None) -> dict[str, str]:
    return await open_legacy_session(http, url, version=LEGACY_VERSION, headers=as_user({}, user))


def legacy_call(request_id: Any, tool: str, arguments: dict[str, Any], token: Any = None) -> dict[str, Any]:
    params: dict[str, Any] = {"name": tool, "arguments": arguments}
    if token is not None:
        params["_meta"] = {"progressToken": token}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


# -- item 5: a modern client's POSTed cancellation ---------------------------------------


@pytest.mark.parametrize("child_era", CHILD_ERAS)
async def test_a_posted_modern_cancel_reaches_the_child_with_its_own_id_and_frees_the_only_slot(
    child_era: str, tmp_path: Path
) -> None:
    record = tmp_path / "stdin.jsonl"
    spec = server_spec("--era", child_era, "--record", str(record))
    # One child, one request at a time: a call the cancel did not free would hold the slot,
    # and the next call would wait out the queue and get 503.
    pool = PoolSettings(min_size=1, max_size=1, max_in_flight=1, queue_timeout=5)
    with anyio.fail_after(30):
        async with (
            running_gateway(spec, pool=pool) as url,
            httpx.AsyncClient(timeout=20) as http,
            anyio.create_task_group() as tg,
        ):
            slow = StreamedCall(
                http,
                url,
                modern_headers("tools/call", "countdown"),
                modern_call("a", "countdown", LONG, progressToken=1),
            )
            tg.start_soon(slow.run)
            await slow.wait_for(running)
            cancel = await http.post(url, headers=modern_headers("notifications/cancelled"), json=modern_cancel("a"))
            assert cancel.status_code == 202
            await slow.wait_for(lambda c: c.done)
            assert slow.content_type.startswith("text/event-stream")
            assert slow.final is None  # a cancelled request is not answered: the stream just ends
            assert await cancelled_ids(http, url) == [child_id_of(record, LONG)]


async def test_a_posted_cancel_cancels_only_the_one_request_of_its_principal_that_it_names(tmp_path: Path) -> None:
    record = tmp_path / "stdin.jsonl"
    spec = server_spec("--era", "dual", "--record", str(record))

    def work(n: int) -> dict[str, Any]:
        return {"steps": 100, "interval_ms": 300 + n}  # distinct, so the child's id of each is known

    with anyio.fail_after(40):
        async with (
            running_gateway(spec, principal_header="x-user", principal_header_required="no", pool_size=1) as url,
            httpx.AsyncClient(timeout=30) as http,
            anyio.create_task_group() as tg,
        ):
            legacy_alice = await open_session(http, url, "alice")
            calls = {
                "alice": StreamedCall(
                    http,
                    url,
                    as_user(modern_headers("tools/call", "countdown"), "alice"),
                    modern_call(1, "countdown", work(0), progressToken="t"),
                ),
                "bob": StreamedCall(
                    http,
                    url,
                    as_user(modern_headers("tools/call", "countdown"), "bob"),
                    modern_call(1, "countdown", work(1), progressToken="t"),
                ),
                "carol": StreamedCall(
                    http,
                    url,
                    modern_headers("tools/call", "countdown"),  # anonymous
                    modern_call(1, "countdown", work(2), progressToken="t"),
                ),
                "dave-1": StreamedCall(
                    http,
                    url,
                    as_user(modern_headers("tools/call", "countdown"), "dave"),
                    modern_call(7, "countdown", work(3), progressToken="t"),
                ),
                "dave-2": StreamedCall(
                    http,
                    url,
                    as_user(modern_headers("tools/call", "countdown"), "dave"),
                    modern_call(7, "countdown", work(4), progressToken="t"),
                ),
                # Alice's legacy session uses id 1 too: a modern cancel never reaches a session.
                "alice-legacy": StreamedCall(http, url, legacy_alice, legacy_call(1, "countdown", work(5), token="t")),
            }
            for call in calls.values():
                tg.start_soon(call.run)
            for call in calls.values():
                await call.wait_for(running)
            cancel_headers = modern_headers("notifications/cancelled")
            for user, request_id in [("alice", 1), ("dave", 7), ("mallory", 1), ("bob", "1")]:
                posted = await http.post(url, headers=as_user(cancel_headers, user), json=modern_cancel(request_id))
                assert posted.status_code == 202
            await calls["alice"].wait_for(lambda c: c.done)
            assert calls["alice"].final is None
            # Only alice's modern call was cancelled: dave's id is ambiguous, mallory has no
            # call, and bob's id is the integer 1, not "1".
            assert await cancelled_ids(http, url) == [child_id_of(record, work(0))]
            for name, call in calls.items():
                if name != "alice":
                    seen = call.progress
                    await call.wait_for(lambda c, seen=seen: c.progress > seen)  # still running
                    assert not call.done
            tg.cancel_scope.cancel()


# -- item 6: a legacy client's own cancellation gets no answer -------------------------------


@pytest.mark.parametrize("child_era", CHILD_ERAS)
async def test_a_legacy_self_cancel_ends_the_stream_without_a_reply_and_leaves_other_sessions_alone(
    child_era: str, tmp_path: Path
) -> None:
    record = tmp_path / "stdin.jsonl"
    spec = server_spec("--era", child_era, "--record", str(record))
    quick = {"steps": 3, "interval_ms": 100}
    with anyio.fail_after(30):
        async with (
            running_gateway(spec, pool_size=1) as url,
            httpx.AsyncClient(timeout=20) as http,
            anyio.create_task_group() as tg,
        ):
            first, second = await open_session(http, url), await open_session(http, url)
            mine = StreamedCall(http, url, first, legacy_call("nap", "countdown", LONG, token="p"))
            theirs = StreamedCall(http, url, second, legacy_call("nap", "countdown", quick, token="p"))
            unstarted = StreamedCall(http, url, first, legacy_call("later", "sleep", {"ms": 30_000}))
            for call in (mine, theirs):
                tg.start_soon(call.run)
            await mine.wait_for(running)
            posted = await http.post(url, headers=first, json=modern_cancel("nap"))
            assert posted.status_code == 202
            await mine.wait_for(lambda c: c.done)
            assert mine.final is None  # no -31005, no result: the stream just ends
            await theirs.wait_for(lambda c: c.done)
            assert theirs.final is not None
            assert theirs.final["result"]["content"][0]["text"] == "done after 3 steps"
            # A cancel before anything came back: the answer is an event stream with nothing in it.
            tg.start_soon(unstarted.run)
            # Until the child has read the sleep call (so the gateway holds it): a sleep sends
            # nothing back, so the child's stdin record is watched (inotify) for it.
            with anyio.fail_after(10):
                read = lambda: any(m.get("params", {}).get("arguments") == {"ms": 30_000} for m in recorded(record))  # noqa: E731
                await wait_until(record, read)
            posted = await http.post(url, headers=first, json=modern_cancel("later"))
            assert posted.status_code == 202
            await unstarted.wait_for(lambda c: c.done)
            assert unstarted.content_type.startswith("text/event-stream")
            assert unstarted.messages == []
            told = await cancelled_ids(http, url, first)
            assert told == [child_id_of(record, LONG), child_id_of(record, {"ms": 30_000})]


# -- item 7: notifications/cancelled as a request --------------------------------------------


@pytest.mark.parametrize("child_era", CHILD_ERAS)
async def test_a_cancelled_notification_sent_with_an_id_is_refused_and_never_reaches_the_child(
    child_era: str, tmp_path: Path
) -> None:
    record = tmp_path / "stdin.jsonl"
    spec = server_spec("--era", child_era, "--record", str(record))
    victim_work = {"steps": 10, "interval_ms": 50}
    with anyio.fail_after(30):
        async with (
            running_gateway(spec, pool_size=1) as url,
            httpx.AsyncClient(timeout=20) as http,
            anyio.create_task_group() as tg,
        ):
            session = await open_session(http, url)
            victims = [
                StreamedCall(
                    http,
                    url,
                    modern_headers("tools/call", "countdown"),
                    modern_call(1, "countdown", victim_work, progressToken=1),
                ),
                StreamedCall(
                    http, url, await open_session(http, url), legacy_call(1, "countdown", victim_work, token=1)
                ),
            ]
            for victim in victims:
                tg.start_soon(victim.run)
            for victim in victims:
                await victim.wait_for(running)

            async def guess(child_id: int) -> None:
                # Both eras try to cancel whatever the child knows by a guessed id.
                body = {
                    "jsonrpc": "2.0",
                    "id": f"x{child_id}",
                    "method": "notifications/cancelled",
                    "params": {"requestId": child_id},
                }
                modern = await http.post(
                    url,
                    headers=modern_headers("notifications/cancelled"),
                    json={**body, "params": {**body["params"], "_meta": MODERN_META}},
                )
                legacy = await http.post(url, headers=session, json=body)
                for refused in (modern, legacy):
                    assert refused.status_code == 400
                    assert refused.json()["error"]["code"] == -32600
                    assert refused.json()["id"] == f"x{child_id}"

            async with anyio.create_task_group() as guesses:
                for child_id in range(1, 6):
                    guesses.start_soon(guess, child_id)
            for victim in victims:
                await victim.wait_for(lambda c: c.done)
                assert victim.final is not None
                assert "result" in victim.final
            assert await cancelled_ids(http, url) == []
            assert await cancelled_ids(http, url, session) == []
            assert not [m for m in recorded(record) if m.get("method") == "notifications/cancelled"]
