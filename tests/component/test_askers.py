"""An unanswered question never stops a server, over fake legacy children with default pool
settings (``gateway.protocol.dispatch`` rules 2, 4 and 5): quiet calls run beside a parked or
asking call, askers get children of their own on demand (stopped again when idle), and a
question costs its asker: past its cap of parked questions a principal gets 429, nobody else.

Every wait is on the fake's state (a call arrived, children running), bounded by ``fail_after``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import anyio
import httpx
import pytest

from gateway.protocol.handshake import META_CLIENT_CAPABILITIES
from gateway.stdio.pool import PoolSettings
from tests.component.fakechild import FakeBackend, Script, fake_backend
from tests.component.harness import FAKE_SPEC, Gateway, in_process_gateway, legacy_call
from tests.gateway_server import MODERN_META, modern_call, modern_headers, open_legacy_session

pytestmark = pytest.mark.anyio

BOUND = 20.0
IDENTITY: dict[str, Any] = {"principal_header": "X-User", "trusted_proxies": ["127.0.0.0/8"]}
ELICIT = {
    "mode": "form",
    "message": "Your name?",
    "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
}
ASK = {"method": "elicitation/create", "params": ELICIT}
OTHERS = 8


ELICITING = replace(FAKE_SPEC, client_capabilities={"elicitation": {}})
"""Children told exactly what these tests' askers declare: the pre-warmed pool is theirs
(children are keyed by the capabilities they are told)."""


def listing(request_id: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/list", "params": {"_meta": MODERN_META}}


def asking_call(request_id: int, same: bool = False) -> dict[str, Any]:
    """A modern call that asks; each its own request (its id in the arguments), or ``same``
    as every other ``same`` call (what a client sends again when it starts a call over)."""
    call = modern_call(request_id, "ask", ASK if same else {**ASK, "call": request_id})
    call["params"]["_meta"][META_CLIENT_CAPABILITIES] = {"elicitation": {}}
    return call


async def modern(gw: Gateway, user: str, body: dict[str, Any], tool: str = "ask") -> httpx.Response:
    headers = modern_headers(body["method"], tool if body["method"] == "tools/call" else None, **{"x-user": user})
    return await gw.http.post(gw.url, headers=headers, json=body)


async def park(gw: Gateway, user: str, request_id: int = 1) -> str:
    """A modern call of ``user`` that gets ``input_required`` and is never retried: its
    ``requestState``."""
    reply = (await modern(gw, user, asking_call(request_id))).json()
    assert reply["result"]["resultType"] == "input_required", reply
    state: str = reply["result"]["requestState"]
    return state


@asynccontextmanager
async def held_question(gw: Gateway, era: str) -> AsyncIterator[None]:
    """alice holds a question she never answers: parked (modern) or open on her stream (legacy)."""
    if era == "modern":
        await park(gw, "alice")
        yield
        return
    session = await open_legacy_session(gw.http, gw.url, capabilities={"elicitation": {}}, headers={"x-user": "alice"})
    async with gw.open(legacy_call(1, "ask", ASK), session) as response:
        question = await response.next_message()
        assert question is not None
        assert question["method"] == "elicitation/create"
        yield
        answer = {"jsonrpc": "2.0", "id": question["id"], "result": {"action": "decline"}}
        await gw.http.post(gw.url, headers=session, json=answer)  # (a legacy hang-up is no cancel)
        await response.messages()


async def echo_by_others(gw: Gateway) -> list[dict[str, Any]]:
    replies: list[dict[str, Any]] = []

    async def one(n: int) -> None:
        body = modern_call(n, "echo", {"message": f"hi {n}"})
        replies.append((await modern(gw, f"user{n}", body, "echo")).json())

    async with anyio.create_task_group() as tg:
        for n in range(OTHERS):
            tg.start_soon(one, n)
    return replies


def still_parked(backend: FakeBackend, count: int) -> bool:
    return len(backend.running_calls("ask")) == count


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_while_a_question_waits_quiet_calls_and_other_askers_are_served_at_once(era: str) -> None:
    with anyio.fail_after(BOUND):
        async with (
            fake_backend(Script(era="legacy")) as backend,
            in_process_gateway(backend, pool=PoolSettings(), **IDENTITY) as gw,
            held_question(gw, era),
        ):
            listed = await modern(gw, "bob", listing(2))
            assert listed.status_code == 200  # a list never asks: it shares alice's child
            replies = await echo_by_others(gw)  # unknown at first: may ask, so a child of its own
            assert still_parked(backend, 1)  # all answered while alice's question still waits
            carol = (await modern(gw, "carol", asking_call(3))).json()
            assert still_parked(backend, 2)
    assert sorted(r["result"]["content"][0]["text"] for r in replies) == sorted(f"hi {n}" for n in range(OTHERS))
    assert carol["result"]["resultType"] == "input_required"  # her own question, at once
    [(_, request)] = carol["result"]["inputRequests"].items()
    assert request["method"] == "elicitation/create"
    alice_child, carol_child = (c.child for c in backend.calls("ask"))
    assert alice_child is not carol_child


async def test_a_tool_learned_quiet_runs_on_the_child_of_a_parked_call() -> None:
    with anyio.fail_after(BOUND):
        async with (
            fake_backend(Script(era="legacy")) as backend,
            in_process_gateway(backend, spec=ELICITING, pool=PoolSettings(asking_max=0), **IDENTITY) as gw,
        ):
            # bob declares what alice does: children are keyed by the capabilities they are told
            told = {META_CLIENT_CAPABILITIES: {"elicitation": {}}}
            learned = await modern(gw, "bob", modern_call(1, "echo", {"message": "learn"}, **told), "echo")
            assert learned.json()["result"]["content"][0]["text"] == "learn"
            await park(gw, "alice")  # the only child (no room to grow) now holds alice's question
            quiet = await modern(gw, "bob", modern_call(2, "echo", {"message": "beside"}, **told), "echo")
            assert still_parked(backend, 1)
    assert quiet.json()["result"]["content"][0]["text"] == "beside"
    assert len(backend.children) == 1


async def test_a_principal_at_its_cap_of_parked_questions_gets_429_and_everyone_else_is_served() -> None:
    settings = PoolSettings(max_parked_per_principal=2)
    with anyio.fail_after(BOUND):
        async with (
            fake_backend(Script(era="legacy")) as backend,
            in_process_gateway(backend, pool=settings, **IDENTITY) as gw,
        ):
            await park(gw, "mallory", 1)
            await park(gw, "mallory", 2)
            refused = await modern(gw, "mallory", asking_call(3))
            listed = await modern(gw, "mallory", listing(4))
            replies = await echo_by_others(gw)
            bob = (await modern(gw, "bob", asking_call(5))).json()
            assert still_parked(backend, 3)
    assert refused.status_code == 429
    assert "retry-after" in refused.headers
    error = refused.json()["error"]
    assert "mallory already holds 2 calls waiting for its answers" in error["message"]
    assert "--max-parked-per-principal" in error["message"]
    assert [c.arguments["call"] for c in backend.calls("ask")] == [1, 2, 5]  # the refused call never reached a child
    assert listed.status_code == 200  # mallory's calls that never ask still run
    assert all("result" in r for r in replies)
    assert bob["result"]["resultType"] == "input_required"


async def test_children_started_for_askers_stop_after_the_idle_timeout() -> None:
    settings = PoolSettings(idle_timeout=0.2)
    with anyio.fail_after(BOUND):
        async with (
            fake_backend(Script(era="legacy")) as backend,
            in_process_gateway(backend, spec=ELICITING, pool=settings, **IDENTITY) as gw,
        ):
            session = await open_legacy_session(
                gw.http, gw.url, headers={"x-user": "alice"}, capabilities={"elicitation": {}}
            )
            async with (
                gw.open(legacy_call(1, "ask", ASK), session) as first,
                gw.open(legacy_call(2, "ask", ASK), session) as second,
            ):
                questions = [await first.next_message(), await second.next_message()]
                assert len(backend.running()) == 2  # the second asker got a child of its own
                for question in questions:
                    assert question is not None
                    answer = {"jsonrpc": "2.0", "id": question["id"], "result": {"action": "decline"}}
                    await gw.http.post(gw.url, headers=session, json=answer)
                await first.messages()
                await second.messages()
            await backend.until(lambda: len(backend.running()) == 1)  # back to the minimum


async def test_a_parked_call_counts_as_its_principals_request_in_flight_until_its_retry() -> None:
    with anyio.fail_after(BOUND):
        async with (
            fake_backend(Script(era="legacy")) as backend,
            in_process_gateway(backend, max_requests_per_principal=2, **IDENTITY) as gw,
        ):
            first = (await modern(gw, "mallory", asking_call(1))).json()
            await park(gw, "mallory", 2)
            refused = await modern(gw, "mallory", listing(3))  # this one and two parked: past her two
            other = await modern(gw, "bob", listing(4))
            [key] = first["result"]["inputRequests"]
            retry = asking_call(1) | {"id": 5}  # the same call, under a new request id
            retry["params"]["inputResponses"] = {key: {"action": "decline"}}
            retry["params"]["requestState"] = first["result"]["requestState"]
            resumed = (await modern(gw, "mallory", retry)).json()  # a retry is never refused for them
            again = await modern(gw, "mallory", listing(6))
            await backend.until(lambda: still_parked(backend, 1))  # the resumed call ended, the other waits
    assert refused.status_code == 429
    message = refused.json()["error"]["message"]
    assert "too many requests in flight for this client (at most 2), counting its 2 call(s) parked" in message
    assert other.status_code == 200
    assert resumed["result"]["resultType"] == "complete"
    assert again.status_code == 200


async def test_two_principals_abandoning_questions_do_not_make_a_thirds_asker_wait() -> None:
    # Every child that may ask holds an abandoned question (alice 3, bob 1): carol's asker gets
    # a child at once, by the end of alice's oldest parked call (dispatch rule 5, fair share),
    # not a 503 at the queue timeout. bob, holding no more than carol plus one, keeps his.
    settings = PoolSettings(max_size=1, asking_max=4, queue_timeout=BOUND)
    with anyio.fail_after(BOUND):
        async with (
            fake_backend(Script(era="legacy")) as backend,
            in_process_gateway(backend, pool=settings, **IDENTITY) as gw,
        ):
            for request_id in (1, 2, 3):
                await park(gw, "alice", request_id)
            await park(gw, "bob", 4)
            assert len(backend.running_calls("ask")) == 4  # the pool's asking bound, all held
            carol = (await modern(gw, "carol", asking_call(5))).json()
    assert carol["result"]["resultType"] == "input_required"  # her own question, at once
    first_alice = backend.calls("ask")[0]
    assert first_alice.cancelled.is_set()  # alice's oldest parked call was ended at its child
    assert not any(c.cancelled.is_set() for c in backend.calls("ask")[1:4])
    assert len(backend.children) == 4  # none started past the bound: carol's is alice's first child


async def test_abandoned_rounds_of_one_anonymous_address_cost_that_address_alone() -> None:
    # Anonymous clients are counted by address: eight rounds left unanswered from one address
    # refuse that address's next asker (429), never another address's.
    with anyio.fail_after(BOUND):
        async with (
            fake_backend(Script(era="legacy")) as backend,
            in_process_gateway(backend, pool=PoolSettings()) as gw,
        ):

            async def from_address(address: str, request_id: int) -> httpx.Response:
                transport = httpx.ASGITransport(app=gw.app, client=(address, 40000 + request_id))
                async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
                    return await http.post(
                        gw.url, headers=modern_headers("tools/call", "ask"), json=asking_call(request_id)
                    )

            for request_id in range(8):
                parked = (await from_address("127.0.0.2", request_id)).json()
                assert parked["result"]["resultType"] == "input_required", parked
            ninth = await from_address("127.0.0.2", 8)
            other = await from_address("127.0.0.3", 9)
            assert still_parked(backend, 9)
    assert ninth.status_code == 429
    assert "anonymous@127.0.0.2 already holds 8 calls" in ninth.json()["error"]["message"]
    assert other.json()["result"]["resultType"] == "input_required"  # another address, at once


async def test_a_round_the_client_cancels_ends_its_parked_call_and_frees_its_child() -> None:
    # A modern client abandons its round with notifications/cancelled naming the request that
    # got input_required: the parked call ends at the child and no longer counts against it.
    settings = PoolSettings(max_parked_per_principal=1)
    with anyio.fail_after(BOUND):
        async with (
            fake_backend(Script(era="legacy")) as backend,
            in_process_gateway(backend, pool=settings, **IDENTITY) as gw,
        ):
            state = await park(gw, "alice", 7)
            refused = await modern(gw, "alice", asking_call(8))  # at her cap of one
            cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}}
            headers = modern_headers("notifications/cancelled", None, **{"x-user": "alice"})
            # bob naming alice's request id cancels nothing of hers.
            bobs = await gw.http.post(gw.url, headers={**headers, "x-user": "bob"}, json=cancel)
            [parked] = backend.running_calls("ask")
            assert not parked.cancelled.is_set()
            accepted = await gw.http.post(gw.url, headers=headers, json=cancel)
            await parked.cancelled.wait()
            again = (await modern(gw, "alice", asking_call(9))).json()
            retry = asking_call(7) | {"id": 10}  # the same call, retried
            retry["params"] |= {"requestState": state, "inputResponses": {}}
            late = await modern(gw, "alice", retry)  # a retry that comes after all
    assert refused.status_code == 429
    assert bobs.status_code == accepted.status_code == 202
    assert again["result"]["resultType"] == "input_required"  # her cap has room again
    assert late.status_code == 400
    error = late.json()["error"]
    assert error["data"]["requestState"] == "unknown"  # told why, not "already used"
    assert "has ended (the client cancelled it (notifications/cancelled))" in error["message"]


async def test_the_same_call_sent_again_at_the_cap_ends_the_round_it_left_instead_of_a_429() -> None:
    # A person closed the dialog and clicked again: the client sends the call it left parked
    # (same tool, same arguments, no requestState). At its cap, that oldest round ends (its
    # call is cancelled at the child) and the new call takes its slot; a different call is
    # still refused, another principal is untouched, and the old round's retry is refused.
    settings = PoolSettings(max_parked_per_principal=2)
    with anyio.fail_after(BOUND):
        async with (
            fake_backend(Script(era="legacy")) as backend,
            in_process_gateway(backend, pool=settings, **IDENTITY) as gw,
        ):
            first = (await modern(gw, "alice", asking_call(1, same=True))).json()
            await park(gw, "alice", 2)  # another call of hers: at her cap of two now
            await park(gw, "bob", 3)  # the same request id as nobody's, another principal
            bobs = (await modern(gw, "bob", asking_call(4, same=True))).json()  # bob's own: under his cap
            other = await modern(gw, "alice", asking_call(5))  # a new, different call: refused
            again = (await modern(gw, "alice", asking_call(6, same=True))).json()
            alices_first, alices_other, _, bobs_same, _ = backend.calls("ask")
            await alices_first.cancelled.wait()  # the round she left ended at the child
            retry = asking_call(7, same=True)
            retry["params"] |= {"requestState": first["result"]["requestState"], "inputResponses": {}}
            retried = await modern(gw, "alice", retry)
            assert not alices_other.cancelled.is_set()
            assert not bobs_same.cancelled.is_set()
    assert first["result"]["resultType"] == "input_required"
    assert bobs["result"]["resultType"] == "input_required"
    assert other.status_code == 429
    assert again["result"]["resultType"] == "input_required"
    assert retried.status_code == 400
    error = retried.json()["error"]
    assert error["data"]["requestState"] == "unknown"  # she never used it: not a replay
    assert "has ended (the client sent the same request again, without its requestState)" in error["message"]
