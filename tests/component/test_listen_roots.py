"""A modern listen gets the updates its own client's calls cause on its roots children (issue #36).

On a server that keeps roots, a modern call of a client that declares roots runs on a child
given exactly its roots set, while its ``subscriptions/listen`` runs on the usual children. A
legacy server sends ``resources/updated`` only for its own process's subscriptions, so the
listen follows its client's calls there (``gateway.relay.listen_roots``). The fake child here
fetches roots after ``initialized`` (so the server is learnt to keep them), keeps its
``resources/subscribe``\\s per process, and its ``touch`` tool sends ``resources/updated`` for
the URI it is given when a subscription of that process covers it.

Clients are principals (``X-User`` from a trusted proxy): alice and bob declare roots (each
their own set), carol declares none. Each test waits on the listen streams' messages and the
fake children's state, every wait bounded.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from gateway.relay.service import Served, Service
from gateway.stdio.child import StdioChild
from tests.component.fakechild import DEFAULT_TOOLS, Call, FakeChild, JsonObject, Script, fake_backend, text
from tests.component.harness import Gateway, LiveResponse, in_process_gateway
from tests.gateway_server import MODERN_META, modern_call, modern_headers, parse_sse

pytestmark = pytest.mark.anyio

BOUND = 30.0
CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"
UPDATED = "notifications/resources/updated"
IDENTITY: dict[str, Any] = {"principal_header": "X-User", "trusted_proxies": ["127.0.0.0/8"]}
ROOTS = {name: [{"uri": f"file:///home/{name}", "name": name}] for name in ("alice", "bob")}
SUBSCRIBES = {"alice": ["file:///shared"], "bob": ["file:///shared"], "carol": ["file:///shared", "file:///carol"]}
TOUCHES = {"alice": "file:///shared/alice", "bob": "file:///shared/bob", "carol": "file:///carol/carol"}


class Subscribing:
    """A legacy child that keeps roots and subscriptions per process (server-everything's kind)."""

    def __init__(self) -> None:
        self.held: dict[int, set[str]] = {}  # by pid: the URIs its process is subscribed to
        self.unsubscribed: dict[int, list[str]] = {}

    def script(self) -> Script:
        async def fetch(child: FakeChild, params: JsonObject) -> None:
            await child.ask("roots/list", None)

        async def subscribe(child: FakeChild, params: JsonObject) -> JsonObject:
            self.held.setdefault(child.pid, set()).add(params["uri"])
            return {}

        async def unsubscribe(child: FakeChild, params: JsonObject) -> JsonObject:
            self.held.get(child.pid, set()).discard(params["uri"])
            self.unsubscribed.setdefault(child.pid, []).append(params["uri"])
            child.backend.changes.changed()
            return {}

        async def touch(call: Call) -> JsonObject:
            uri = call.arguments["uri"]
            if any(uri == base or uri.startswith(base + "/") for base in self.held.get(call.child.pid, ())):
                await call.child.write({"jsonrpc": "2.0", "method": UPDATED, "params": {"uri": uri}})
            return text("touched", pid=call.child.pid)

        return Script(
            era="legacy",
            tools={"touch": touch, "crash": DEFAULT_TOOLS["crash"]},
            capabilities={"tools": {}, "resources": {"subscribe": True}},
            on_notification={"notifications/initialized": fetch},
            on_request={"resources/subscribe": subscribe, "resources/unsubscribe": unsubscribe},
        )


def capabilities(name: str) -> JsonObject:
    return {"roots": {}} if name in ROOTS else {}


def listen_request(name: str) -> JsonObject:
    meta = {**MODERN_META, CAPABILITIES_KEY: capabilities(name)}
    params = {"notifications": {"resourceSubscriptions": SUBSCRIBES[name]}, "_meta": meta}
    return {"jsonrpc": "2.0", "id": f"listen-{name}", "method": "subscriptions/listen", "params": params}


async def call(gw: Gateway, name: str, request_id: str, tool: str, arguments: JsonObject) -> JsonObject:
    """``name``'s call (through the gateway's roots round when it declares roots): the final message."""
    meta = {CAPABILITIES_KEY: capabilities(name)}
    body = modern_call(request_id, tool, arguments, **meta)
    headers = {**modern_headers("tools/call", tool), "X-User": name}
    for round_ in range(2):
        reply = await gw.http.post(gw.url, headers=headers, json=body)
        message = parse_sse(reply.text)[-1] if reply.headers["content-type"].startswith("text/") else reply.json()
        result = message.get("result", {})
        if result.get("resultType") != "input_required":
            assert isinstance(message, dict)
            return message
        assert round_ == 0, message
        body = modern_call(f"{request_id}-retry", tool, arguments, **meta)
        body["params"].update(inputResponses={"roots": {"roots": ROOTS[name]}}, requestState=result["requestState"])
    raise AssertionError("no final result")


async def touch(gw: Gateway, name: str, request_id: str) -> int:
    """``name``'s ``touch`` of its URI; the pid of the child that ran it."""
    message = await call(gw, name, request_id, "touch", {"uri": TOUCHES[name]})
    assert "result" in message, message
    pid: int = message["result"]["structuredContent"]["pid"]
    return pid


def served_of(gw: Gateway) -> Served:
    service: Service = gw.app.state.service
    [served] = service.served
    return served


def gateway_children(gw: Gateway) -> list[StdioChild]:
    """The gateway's children of every pool of its one server."""
    return [child for pool in served_of(gw).router.pools.values() for child in pool.children()]


async def acknowledged(stream: LiveResponse, name: str) -> None:
    ack = await stream.next_message()
    assert ack is not None
    assert ack["method"] == "notifications/subscriptions/acknowledged", ack
    assert ack["params"]["notifications"] == {"resourceSubscriptions": SUBSCRIBES[name]}, ack


async def test_each_clients_listen_gets_the_updates_of_its_own_calls_and_no_one_elses() -> None:
    fake = Subscribing()
    with anyio.fail_after(BOUND):
        async with fake_backend(fake.script()) as backend, in_process_gateway(backend, **IDENTITY) as gw:
            names = ("alice", "bob", "carol")
            pids: dict[str, set[int]] = {name: set() for name in names}
            got: dict[str, list[JsonObject]] = {}
            async with (
                gw.open(listen_request("alice"), {**modern_headers("subscriptions/listen"), "X-User": "alice"}) as a,
                gw.open(listen_request("bob"), {**modern_headers("subscriptions/listen"), "X-User": "bob"}) as b,
                gw.open(listen_request("carol"), {**modern_headers("subscriptions/listen"), "X-User": "carol"}) as c,
            ):
                streams = {"alice": a, "bob": b, "carol": c}
                for name, stream in streams.items():
                    await acknowledged(stream, name)
                # Two rounds of all three calls: a message leaked to another's listen would come
                # before that listener's own second update, and be read in its place.
                for round_ in range(2):
                    for name in names:
                        pids[name].add(await touch(gw, name, f"{name}-{round_}"))
                for name, stream in streams.items():
                    got[name] = [message for _ in range(2) if (message := await stream.next_message()) is not None]
            # Every subscription the listens made is released when they end.
            await backend.until(lambda: not any(fake.held.values()))
            assert len(served_of(gw).listens.counts) == 0
    usual = next(iter(pids["carol"]))
    assert len({usual, *pids["alice"], *pids["bob"]}) == 3, pids  # each roots set on a child of its own
    for name in names:
        assert [m["method"] for m in got[name]] == [UPDATED, UPDATED], got[name]
        for message in got[name]:
            assert message["params"]["uri"] == TOUCHES[name], (name, got[name])
            assert message["params"]["_meta"][SUBSCRIPTION_ID] == f"listen-{name}"
    for name in ("alice", "bob"):
        [pid] = pids[name]
        assert fake.unsubscribed[pid] == ["file:///shared"]  # at its roots child, once


async def test_a_listen_opened_after_its_clients_call_follows_the_child_that_call_ran_on() -> None:
    fake = Subscribing()
    with anyio.fail_after(BOUND):
        async with fake_backend(fake.script()) as backend, in_process_gateway(backend, **IDENTITY) as gw:
            pid = await touch(gw, "alice", "before")  # nothing subscribed yet: no update
            [child] = [child for child in backend.children if child.pid == pid]
            headers = {**modern_headers("subscriptions/listen"), "X-User": "alice"}
            async with gw.open(listen_request("alice"), headers) as stream:
                await acknowledged(stream, "alice")
                assert fake.held[pid] == {"file:///shared"}  # subscribed at her roots child before the ack
                # The child's own update (a timer's, say) reaches her with no call of hers.
                await child.write({"jsonrpc": "2.0", "method": UPDATED, "params": {"uri": "file:///shared/x"}})
                update = await stream.next_message()
            await backend.until(lambda: not fake.held[pid])
    assert update is not None
    assert update["params"]["uri"] == "file:///shared/x", update


async def test_a_followed_child_that_exits_is_forgotten_and_the_listen_goes_on() -> None:
    fake = Subscribing()
    with anyio.fail_after(BOUND):
        async with fake_backend(fake.script()) as backend, in_process_gateway(backend, **IDENTITY) as gw:
            headers = {**modern_headers("subscriptions/listen"), "X-User": "alice"}
            async with gw.open(listen_request("alice"), headers) as stream:
                await acknowledged(stream, "alice")
                first = await touch(gw, "alice", "1")
                assert (await stream.next_message() or {}).get("method") == UPDATED
                [held] = [held for held in gateway_children(gw) if held.pid == first]
                crashed = await call(gw, "alice", "crash", "crash", {"code": 1})  # on her roots child
                assert "error" in crashed, crashed
                await held.wait_exited()  # (seen by the gateway); her listen is not dropped
                second = await touch(gw, "alice", "2")  # on a new child, subscribed again first
                update = await stream.next_message()
            await backend.until(lambda: not fake.held.get(second))
            assert len(served_of(gw).listens.counts) == 0  # the dead child's counts went too
    assert second != first
    assert update is not None
    assert update["method"] == UPDATED, update
