"""Roots are per client, by construction (issue #23): the keying rules, with fake children.

A fake legacy child that fetches roots right after ``initialized`` and keeps them (as
server-everything does), and whose ``cached`` tool answers with what it holds. The gateway
keys shared children by the roots set they are given and answers every ``roots/list`` of
theirs itself (``gateway.relay.router``, ``gateway.relay.client_roots``):

- a modern call that declares roots first gets the gateway's own round (``inputRequests.roots``)
  before any child is chosen, and its retry runs on a child given exactly those roots;
- a legacy session is asked ``roots/list`` on its first call's stream, once, and again after
  its ``notifications/roots/list_changed``;
- a client without roots, a roots answer that is not one, and ``MAX_ROOTS_SETS``.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from starlette.applications import Starlette

from gateway.protocol.jsonrpc import Notification, Request, Result
from gateway.relay import events
from gateway.relay import router as router_module
from gateway.relay.client import ClientContext
from gateway.relay.server_config import Isolation
from gateway.relay.service import Served, Service
from gateway.relay.sessions import LegacySession
from tests.component.fakecalls import DEFAULT_TOOLS
from tests.component.fakechild import Call, FakeChild, JsonObject, Script, fake_backend, text
from tests.component.harness import Gateway, in_process_gateway
from tests.gateway_server import modern_call, modern_headers, open_legacy_session, parse_sse

pytestmark = pytest.mark.anyio

BOUND = 20.0
CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
WITH_ROOTS = {"sampling": {}, "elicitation": {}, "roots": {}}
ROOTS = {name: [{"uri": f"file:///home/{name}", "name": name}] for name in ("alice", "bob")}


def caching_script() -> Script:
    """A legacy child that fetches roots after ``initialized``; ``cached`` shows what it holds."""
    held: dict[int, Any] = {}

    async def fetch(child: FakeChild, params: JsonObject) -> None:
        reply = await child.ask("roots/list", None)
        held[child.pid] = reply.get("result", reply.get("error"))

    async def cached(call: Call) -> JsonObject:
        return text(json.dumps(held.get(call.child.pid)), pid=call.child.pid)

    return Script(era="legacy", tools={"cached": cached}, on_notification={"notifications/initialized": fetch})


async def modern(gw: Gateway, request_id: str, capabilities: dict[str, Any], roots: Any = None) -> list[JsonObject]:
    """A modern ``cached`` call; the final messages of each round (the gateway's roots round
    answered with ``roots`` when it asks)."""
    meta = {CAPABILITIES_KEY: capabilities}
    body = modern_call(request_id, "cached", {}, **meta)
    finals = []
    for round_ in range(2):
        reply = await gw.http.post(gw.url, headers=modern_headers("tools/call", "cached"), json=body)
        message = parse_sse(reply.text)[-1] if reply.headers["content-type"].startswith("text/") else reply.json()
        message["status"] = reply.status_code
        finals.append(message)
        result = message.get("result", {})
        if result.get("resultType") != "input_required" or roots is None:
            break
        body = modern_call(f"{request_id}-{round_}", "cached", {}, **meta)
        body["params"].update(inputResponses={"roots": roots}, requestState=result["requestState"])
    return finals


def held(message: JsonObject) -> Any:
    assert "result" in message, message
    return json.loads(message["result"]["content"][0]["text"])


def served_of(app: Starlette) -> Served:
    """The one server's sessions and relay, as the app's lifespan opened them."""
    service: Service = app.state.service
    [served] = service.served
    return served


async def open_session(gw: Gateway, capabilities: dict[str, Any]) -> LegacySession:
    headers = await open_legacy_session(gw.http, gw.url, capabilities=capabilities)
    session = served_of(gw.app).sessions.get(headers["mcp-session-id"])
    assert session is not None
    return session


async def legacy(gw: Gateway, session: LegacySession, request_id: int, roots: Any) -> tuple[JsonObject, int]:
    """A legacy ``cached`` call through the relay (the in-process transport does not stream),
    answering each ``roots/list`` it yields with ``roots``; the final message and how many
    were asked."""
    request = Request(request_id, "tools/call", {"name": "cached", "arguments": {}})
    asked = 0
    async for event in served_of(gw.app).relay.exchange(request, ClientContext.of_session(session)):
        if isinstance(event, events.Ask):
            assert event.message["method"] == "roots/list"
            asked += 1
            session.take(Result(event.message["id"], roots))
        elif isinstance(event, events.Final):
            return event.message, asked
    raise AssertionError("no final message")


async def test_a_modern_call_with_roots_first_gets_the_gateways_round_then_a_child_given_only_its_roots() -> None:
    with anyio.fail_after(BOUND):
        async with fake_backend(caching_script()) as backend, in_process_gateway(backend) as gw:
            got: dict[str, list[JsonObject]] = {}

            async def one(name: str) -> None:
                got[name] = await modern(gw, name, WITH_ROOTS, {"roots": ROOTS[name]})

            async with anyio.create_task_group() as tg:
                for name in ROOTS:
                    tg.start_soon(one, name)
            status = (await gw.http.get("/status")).json()
    for name, (first, second) in got.items():
        assert first["result"]["inputRequests"] == {"roots": {"method": "roots/list", "params": {}}}
        assert first["result"]["requestState"].startswith("mcpgw2.")
        assert held(second) == {"roots": ROOTS[name]}  # its own, from the child's fetch at start
    assert got["alice"][1]["result"]["structuredContent"]["pid"] != got["bob"][1]["result"]["structuredContent"]["pid"]
    [server] = status["servers"]
    assert sum("roots=" in label for label in server["pools"]) == 2, sorted(server["pools"])
    # No child was sent the round's inputResponses or requestState.
    for child in backend.children:
        for message in child.received:
            assert "inputResponses" not in (message.get("params") or {}), message


async def test_a_modern_call_without_roots_is_not_asked_and_runs_on_a_child_never_given_a_clients_roots() -> None:
    with anyio.fail_after(BOUND):
        async with fake_backend(caching_script()) as backend, in_process_gateway(backend) as gw:
            await modern(gw, "alice", WITH_ROOTS, {"roots": ROOTS["alice"]})
            [final] = await modern(gw, "nobody", {"sampling": {}, "elicitation": {}})
    # The fake asks at start even when told no roots: the gateway answered it (no configured roots).
    assert "result" in final, final
    assert "home" not in json.dumps(held(final)), held(final)


async def test_a_roots_answer_that_is_not_one_is_a_400_and_a_missing_one_is_asked_again() -> None:
    with anyio.fail_after(BOUND):
        async with fake_backend(caching_script()) as backend, in_process_gateway(backend) as gw:
            first, bad = await modern(gw, "x", WITH_ROOTS, {"roots": [{"uri": "http://not-a-file"}]})
            assert bad["status"] == 400
            assert "file://" in bad["error"]["message"]
            state = first["result"]["requestState"]
            body = modern_call("y", "cached", {}, **{CAPABILITIES_KEY: WITH_ROOTS})
            body["params"].update(inputResponses={}, requestState=state)
            again = await gw.http.post(gw.url, headers=modern_headers("tools/call", "cached"), json=body)
            assert again.json()["result"]["resultType"] == "input_required"  # asked again, no error
            # The round's state is bound to its request: another tool's retry is refused.
            other = modern_call("z", "echo", {"message": "m"}, **{CAPABILITIES_KEY: WITH_ROOTS})
            other["params"].update(inputResponses={"roots": {"roots": []}}, requestState=state)
            refused = await gw.http.post(gw.url, headers=modern_headers("tools/call", "echo"), json=other)
            assert refused.status_code == 400, refused.text
    assert not any(call.name == "cached" for call in backend.calls())


async def test_a_legacy_session_is_asked_for_its_roots_once_and_again_after_list_changed() -> None:
    with anyio.fail_after(BOUND):
        async with fake_backend(caching_script()) as backend, in_process_gateway(backend) as gw:
            alice = await open_session(gw, WITH_ROOTS)
            bob = await open_session(gw, WITH_ROOTS)
            results: dict[str, tuple[JsonObject, int]] = {}

            async def one(name: str, session: LegacySession) -> None:
                results[name] = await legacy(gw, session, 1, {"roots": ROOTS[name]})

            async with anyio.create_task_group() as tg:
                tg.start_soon(one, "alice", alice)
                tg.start_soon(one, "bob", bob)
            for name in ROOTS:
                final, asked = results[name]
                assert (held(final), asked) == ({"roots": ROOTS[name]}, 1)
            final, asked = await legacy(gw, alice, 2, {"roots": ROOTS["alice"]})
            assert (held(final), asked) == ({"roots": ROOTS["alice"]}, 0)  # known: not asked again
            # Her roots change: she says so, and her next call runs on a child given the new set.
            alice.take(Notification("notifications/roots/list_changed"))
            moved = [{"uri": "file:///home/alice/elsewhere"}]
            final, asked = await legacy(gw, alice, 3, {"roots": moved})
            assert (held(final), asked) == ({"roots": moved}, 1)
            # Bob's child still holds his.
            final, asked = await legacy(gw, bob, 4, {"roots": ROOTS["bob"]})
            assert (held(final), asked) == ({"roots": ROOTS["bob"]}, 0)


async def test_a_legacy_session_whose_roots_answer_is_an_error_runs_on_children_given_no_clients_roots() -> None:
    with anyio.fail_after(BOUND):
        async with fake_backend(caching_script()) as backend, in_process_gateway(backend) as gw:
            alice = await open_session(gw, WITH_ROOTS)
            await legacy(gw, alice, 1, {"roots": ROOTS["alice"]})
            carol = await open_session(gw, WITH_ROOTS)
            final, asked = await legacy(gw, carol, 1, {"nothing": "here"})
    assert asked == 1
    assert "home" not in json.dumps(held(final)), held(final)  # not alice's: the gateway's own answer


async def test_at_max_roots_sets_an_unused_sets_children_make_room_for_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Idle roots pools do not lock new sets out (issue #36): the least recently used one that
    # nothing uses is stopped for the new set, and the one in use is never taken.
    monkeypatch.setattr(router_module, "MAX_ROOTS_SETS", 1)
    with anyio.fail_after(BOUND):
        async with fake_backend(caching_script()) as backend, in_process_gateway(backend) as gw:
            [_, alices] = await modern(gw, "alice", WITH_ROOTS, {"roots": ROOTS["alice"]})
            [_, bobs] = await modern(gw, "bob", WITH_ROOTS, {"roots": ROOTS["bob"]})
            [_, again] = await modern(gw, "alice2", WITH_ROOTS, {"roots": ROOTS["alice"]})
            status = (await gw.http.get("/status")).json()
    assert held(alices) == {"roots": ROOTS["alice"]}
    assert held(bobs) == {"roots": ROOTS["bob"]}  # alice's unused set made room
    assert held(again) == {"roots": ROOTS["alice"]}  # and bob's for hers again, on a new child
    [server] = status["servers"]
    assert sum("roots=" in label for label in server["pools"]) == 1, sorted(server["pools"])


async def test_past_max_roots_sets_in_use_a_call_with_another_set_gets_503(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(router_module, "MAX_ROOTS_SETS", 1)
    script = caching_script()
    script.tools = {**script.tools, "hold": DEFAULT_TOOLS["hold"]}
    with anyio.fail_after(BOUND):
        async with fake_backend(script) as backend, in_process_gateway(backend) as gw:
            body = modern_call("alice-hold", "hold", {}, **{CAPABILITIES_KEY: WITH_ROOTS})
            round_ = (await gw.http.post(gw.url, headers=modern_headers("tools/call", "hold"), json=body)).json()
            body["params"].update(inputResponses={"roots": {"roots": ROOTS["alice"]}})
            body["params"]["requestState"] = round_["result"]["requestState"]  # its retry holds
            async with anyio.create_task_group() as tg:
                holding: list[int] = []

                async def hold() -> None:
                    reply = await gw.http.post(gw.url, headers=modern_headers("tools/call", "hold"), json=body)
                    holding.append(reply.status_code)

                tg.start_soon(hold)
                [call] = await backend.wait_calls(1, "hold")
                [_, bobs] = await modern(gw, "bob", WITH_ROOTS, {"roots": ROOTS["bob"]})
                # A legacy session is asked for its roots on its call's stream first: the
                # refusal then ends that stream as its answer, never as an unhandled error.
                session = await open_session(gw, WITH_ROOTS)
                carols, asked = await legacy(gw, session, 9, {"roots": [{"uri": "file:///home/carol"}]})
                call.release()
    assert bobs["status"] == 503
    assert "MAX_ROOTS_SETS" in bobs["error"]["message"]
    assert asked == 1
    assert carols["id"] == 9
    assert "MAX_ROOTS_SETS" in carols["error"]["message"], carols
    assert holding == [200]  # the set in use kept its child


IDENTITY: dict[str, Any] = {"principal_header": "X-User", "trusted_proxies": ["127.0.0.0/8"]}


async def call_as(gw: Gateway, user: str, request_id: str, tool: str, roots: list[JsonObject]) -> JsonObject:
    """A modern ``tool`` call of client ``user`` declaring roots, its roots round answered with
    ``roots``: the final message (with the HTTP ``status``)."""
    headers = {**modern_headers("tools/call", tool), "X-User": user}
    body = modern_call(request_id, tool, {}, **{CAPABILITIES_KEY: WITH_ROOTS})
    round_ = await gw.http.post(gw.url, headers=headers, json=body)
    result = round_.json().get("result", {})
    assert result.get("resultType") == "input_required", round_.text
    body["params"].update(inputResponses={"roots": {"roots": roots}}, requestState=result["requestState"])
    reply = await gw.http.post(gw.url, headers=headers, json=body)
    streamed = reply.headers["content-type"].startswith("text/")
    message: JsonObject = parse_sse(reply.text)[-1] if streamed else reply.json()
    message["status"] = reply.status_code
    return message


async def test_one_client_holding_calls_in_many_roots_sets_cannot_take_every_set_from_the_others() -> None:
    """Roots sets are a server-wide resource (``MAX_ROOTS_SETS``); one client's share of them is
    ``MAX_ROOTS_SETS_PER_PRINCIPAL``. Past it, that client's call with yet another set gets
    429 (-31008), and the sets left stay for the others (before: 16 long calls of one client
    took every set and everyone else's new set got 503); a set already running is joined by
    anyone, and a set freed makes room for the client's next one."""
    share = router_module.MAX_ROOTS_SETS_PER_PRINCIPAL
    assert share < router_module.MAX_ROOTS_SETS
    script = caching_script()
    script.tools = {**script.tools, "hold": DEFAULT_TOOLS["hold"]}
    sets = [[{"uri": f"file:///home/mallory/{n}", "name": str(n)}] for n in range(share + 1)]
    with anyio.fail_after(BOUND):
        held_calls: list[JsonObject] = []
        one_done = anyio.Event()
        async with (
            fake_backend(script) as backend,
            in_process_gateway(backend, **IDENTITY) as gw,
            anyio.create_task_group() as tg,
        ):

            async def hold(n: int) -> None:
                held_calls.append(await call_as(gw, "mallory", f"hold-{n}", "hold", sets[n]))
                one_done.set()  # its answer came: the app is done with the call, its lease left

            for n in range(share):
                tg.start_soon(hold, n)
            holds = await backend.wait_calls(share, "hold")
            over = await call_as(gw, "mallory", "over", "cached", sets[share])
            bobs = await call_as(gw, "bob", "bob", "cached", ROOTS["bob"])
            joined = await call_as(gw, "mallory", "joins", "cached", sets[0])  # a set it runs already
            holds[0].release()
            await one_done.wait()
            freed = await call_as(gw, "mallory", "freed", "cached", sets[share])  # room again
            for call in holds[1:]:
                call.release()
    assert over["status"] == 429, over
    assert over["error"]["code"] == -31008
    assert "MAX_ROOTS_SETS_PER_PRINCIPAL" in over["error"]["message"]
    assert held(bobs) == {"roots": ROOTS["bob"]}  # another client's new set is served
    assert held(joined) == {"roots": sets[0]}
    assert held(freed) == {"roots": sets[share]}
    assert sorted(call["status"] for call in held_calls) == [200] * share


@pytest.mark.parametrize("isolation", [Isolation.PRINCIPAL, Isolation.SESSION])
async def test_a_first_call_before_any_child_is_up_is_still_given_its_clients_roots(isolation: Isolation) -> None:
    """Pools made on demand (principal or session isolation) have no child up when the first
    call comes, so the server's era was not known and that call ran without its roots (no
    round, the configured roots). Its own child is now started first, and the era read."""
    with anyio.fail_after(BOUND):
        async with (
            fake_backend(caching_script()) as backend,
            in_process_gateway(backend, isolation=isolation, **IDENTITY) as gw,
        ):
            assert backend.children == []  # nothing pre-warmed
            first = await call_as(gw, "alice", "first", "cached", ROOTS["alice"])
            bobs = await call_as(gw, "bob", "bob", "cached", ROOTS["bob"])
    assert held(first) == {"roots": ROOTS["alice"]}
    assert held(bobs) == {"roots": ROOTS["bob"]}
