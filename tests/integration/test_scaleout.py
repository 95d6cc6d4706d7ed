"""Any replica, any request (issue #15): three gateway instances behind a round-robin balancer.

Each instance has its own pools and its own ``--advertise-url``; they share the state
secret. The balancer (``tests.balancer``) sends every request to the next instance in turn,
so a legacy session's requests, its GET stream and its DELETE, and an MRTR retry, mostly
reach an instance that does not hold the session or the parked call: the owner routing
(``gateway.http.forward``) must carry each to its owner. Nothing may answer 404.
"""

from __future__ import annotations

import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client
from mcp import types as sdk

from gateway.config import Settings
from gateway.http.auth import TokenStore
from gateway.http.edge_settings import MAX_BODY_BYTES
from gateway.protocol import owner as owners
from gateway.relay.owner import OwnerRouting
from gateway.relay.router import Router
from gateway.relay.server_config import ServerConfig
from gateway.relay.statekeys import StateKeys
from gateway.server import build_app
from tests.balancer import SECRET, cluster
from tests.conftest import server_spec
from tests.gateway_server import (
    BASE_HEADERS,
    MODERN,
    app_for,
    legacy_initialize,
    loopback_socket,
    modern_call,
    open_legacy_session,
    serving,
)

pytestmark = pytest.mark.anyio

WAIT = 60.0
CALLS = 50


async def open_session(http: httpx.AsyncClient, url: str) -> dict[str, str]:
    return await open_legacy_session(http, url)


def call(request_id: int, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }


async def test_the_sdk_client_in_legacy_mode_works_through_round_robin_with_zero_404s() -> None:
    progress: list[float] = []
    every_progress = anyio.Event()

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)
        if len(progress) == 2 * CALLS:
            every_progress.set()

    with anyio.fail_after(WAIT):
        async with cluster(server_spec("--era", "legacy")) as c, Client(c.url, mode="legacy") as client:
            for n in range(CALLS):
                result = await client.call_tool(
                    "progress_burst", {"count": 2, "tag": f"call-{n}"}, progress_callback=on_progress
                )
                assert result.is_error is not True, result
                [content] = result.content
                assert isinstance(content, sdk.TextContent)
                assert content.text == f"call-{n}"
            await every_progress.wait()  # the SDK runs progress callbacks in tasks of their own
    statuses = c.balancer.statuses()
    assert 404 not in statuses, c.balancer.hits
    assert {hit.backend for hit in c.balancer.hits} == {0, 1, 2}
    methods = {hit.method for hit in c.balancer.hits}
    assert {"GET", "DELETE", "POST"} <= methods, methods
    calls = [hit for hit in c.balancer.hits if hit.rpc == "tools/call"]
    assert len(calls) == CALLS
    assert {hit.backend for hit in calls} == {0, 1, 2}
    assert all(status < 400 for status in statuses), c.balancer.hits


async def test_a_parked_mrtr_call_resumes_when_the_retry_reaches_another_instance() -> None:
    asked: list[str] = []

    async def on_sampling(context: Any, params: sdk.CreateMessageRequestParams) -> sdk.CreateMessageResult:
        asked.append("sampling")
        return sdk.CreateMessageResult(
            role="assistant", content=sdk.TextContent(type="text", text="hi there"), model="test-model"
        )

    request = {
        "method": "sampling/createMessage",
        "params": {"messages": [{"role": "user", "content": {"type": "text", "text": "say hi"}}], "maxTokens": 5},
    }
    with anyio.fail_after(WAIT):
        async with (
            cluster(server_spec("--era", "legacy")) as c,
            Client(c.url, mode="2026-07-28", sampling_callback=on_sampling) as client,
        ):
            result = await client.call_tool("ask_client", {"requests": [request]})
    assert asked == ["sampling"]
    assert result.structured_content is not None
    assert result.structured_content["answers"][0]["result"]["model"] == "test-model"
    calls = [hit for hit in c.balancer.hits if hit.rpc == "tools/call"]
    assert len(calls) == 2
    assert calls[0].backend != calls[1].backend
    assert 404 not in c.balancer.statuses()


async def test_a_retry_forwarded_to_a_draining_owner_resumes_its_parked_call_there() -> None:
    """A rolling update: the replica holding a parked MRTR call starts to drain, and the
    client's retry reaches the other replica, which forwards it to the owner. The owner lets it
    in (its ``requestState`` names a call held there) and the call finishes; a new call that
    reaches the draining replica is refused as before. Before, the forward got the owner's
    503 "retry on another replica", where no replica holds the call."""
    capabilities = {"io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}
    elicit = {"method": "elicitation/create", "params": {"message": "Name?", "requestedSchema": {"type": "object"}}}
    arguments = {"requests": [elicit]}
    headers = {**BASE_HEADERS, "mcp-protocol-version": MODERN, "mcp-method": "tools/call", "mcp-name": "ask_client"}
    with anyio.fail_after(WAIT):
        async with cluster(server_spec("--era", "legacy"), size=2) as c, httpx.AsyncClient(timeout=WAIT) as http:
            first = await http.post(
                c.url, headers=headers, json=modern_call(1, "ask_client", arguments, **capabilities)
            )
            round_ = first.json()["result"]
            assert round_["resultType"] == "input_required", round_
            [key] = round_["inputRequests"]
            owner = c.balancer.hits[-1].backend
            c.apps[owner].state.drain.begin()  # as on SIGTERM
            new_call = await http.post(  # reaches the draining owner (round robin: the next is the other)
                c.instances[owner] + "/mcp",
                headers=headers,
                json=modern_call(2, "ask_client", arguments, **capabilities),
            )
            retry = modern_call(3, "ask_client", arguments, **capabilities)
            accepted = {"action": "accept", "content": {"name": "Ada"}}
            retry["params"].update(inputResponses={key: accepted}, requestState=round_["requestState"])
            resumed = await http.post(c.url, headers=headers, json=retry)
            assert c.balancer.hits[-1].backend != owner  # it was forwarded
    assert new_call.status_code == 503, new_call.text
    assert resumed.status_code == 200, resumed.text
    assert resumed.json()["result"]["structuredContent"]["answers"] == [{"result": accepted}]


async def test_a_legacy_sessions_resources_subscribe_and_its_updates_cross_instances() -> None:
    with anyio.fail_after(WAIT):
        async with cluster(server_spec("--era", "legacy", "--subscribe")) as c, httpx.AsyncClient() as http:
            init = await http.post(c.url, headers=BASE_HEADERS, json=legacy_initialize())
            assert init.status_code == 200
            session = {**BASE_HEADERS, "mcp-session-id": init.headers["mcp-session-id"]}
            done = await http.post(
                c.url, headers=session, json={"jsonrpc": "2.0", "method": "notifications/initialized"}
            )
            assert done.status_code == 202
            subscribe = {"jsonrpc": "2.0", "id": 1, "method": "resources/subscribe", "params": {"uri": "file:///docs"}}
            assert (await http.post(c.url, headers=session, json=subscribe)).json()["result"] == {}
            async with http.stream("GET", c.url, headers={**session, "accept": "text/event-stream"}) as stream:
                assert stream.status_code == 200
                notify = {
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "tools/call",
                    "params": {
                        "name": "notify",
                        "arguments": {"method": "notifications/resources/updated", "params": {"uri": "file:///docs/a"}},
                    },
                }
                assert (await http.post(c.url, headers=session, json=notify)).status_code == 200
                async for line in stream.aiter_lines():
                    if line.startswith("data:") and line[5:].strip():  # (the priming event's data is empty)
                        assert "file:///docs/a" in line
                        break
            deleted = await http.delete(c.url, headers=session)
            assert deleted.status_code == 204
    assert 404 not in c.balancer.statuses()
    assert {hit.backend for hit in c.balancer.hits} == {0, 1, 2}


async def test_a_forged_owner_in_a_session_id_is_refused_and_never_forwarded() -> None:
    with anyio.fail_after(WAIT):
        async with cluster(server_spec("--era", "legacy")) as c, httpx.AsyncClient() as http:
            init = await http.post(c.instances[0] + "/mcp", headers=BASE_HEADERS, json=legacy_initialize())
            real = init.headers["mcp-session-id"]
            other = await http.post(c.instances[1] + "/mcp", headers=BASE_HEADERS, json=legacy_initialize())
            # Same random part and signature, but the sealed owner swapped for another instance's.
            prefix, rand, _, mac = real.split(".")
            forged = ".".join([prefix, rand, other.headers["mcp-session-id"].split(".")[2], mac])
            ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
            for target in c.instances:
                reply = await http.post(target + "/mcp", headers={**BASE_HEADERS, "mcp-session-id": forged}, json=ping)
                assert reply.status_code == 404
                assert "failed verification" in reply.json()["error"]["message"]
            # The real id works from every instance.
            for target in c.instances:
                reply = await http.post(target + "/mcp", headers={**BASE_HEADERS, "mcp-session-id": real}, json=ping)
                assert reply.status_code == 200, reply.text


async def test_a_forward_without_a_valid_signature_is_refused() -> None:
    with anyio.fail_after(WAIT):
        async with cluster(server_spec("--era", "legacy")) as c, httpx.AsyncClient() as http:
            headers = {
                **BASE_HEADERS,
                owners.FORWARD_HEADER: f"v2;{int(time.time())};AAAA;{owners.body_digest(b'')};AAAA",
                owners.TARGET_HEADER: c.routings[0].me.key,
                owners.PRINCIPAL_HEADER: owners.encode_principal("admin"),
            }
            reply = await http.post(c.instances[0] + "/mcp", headers=headers, json=legacy_initialize())
    assert reply.status_code == 403
    assert "failed verification" in reply.json()["error"]["message"]


async def test_closing_a_forwarded_get_stream_ends_it_at_the_owner() -> None:
    with anyio.fail_after(WAIT):
        async with cluster(server_spec("--era", "legacy")) as c, httpx.AsyncClient() as http:
            owner, entry = c.instances[0] + "/mcp", c.instances[1] + "/mcp"
            session = await open_session(http, owner)
            async with http.stream("GET", entry, headers={**session, "accept": "text/event-stream"}) as stream:
                assert stream.status_code == 200
                assert c.apps[0].state.drain.in_flight == 1  # the owner serves the stream
            drain = c.apps[0].state.drain
            drain.begin()  # now wait_idle returns as soon as the owner's stream has ended
            assert await drain.wait_idle(WAIT / 2), "the owner's GET stream outlived the client's"


async def test_a_cancel_posted_to_another_instance_reaches_the_owners_child() -> None:
    with anyio.fail_after(WAIT):
        async with cluster(server_spec("--era", "legacy")) as c, httpx.AsyncClient(timeout=WAIT) as http:
            urls = [base + "/mcp" for base in c.instances]
            session = await open_session(http, urls[0])
            slow = call(7, "sleep", {"ms": 30_000, "progress": True})
            slow["params"]["_meta"] = {"progressToken": "p"}
            async with http.stream("POST", urls[1], headers=session, json=slow) as reply:
                events = reply.aiter_lines()
                async for line in events:
                    if line.startswith("data: {"):
                        assert '"notifications/progress"' in line  # the sleep has begun at the owner's child
                        break
                cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}}
                assert (await http.post(urls[2], headers=session, json=cancel)).status_code == 202
                rest = [line async for line in events if line.startswith("data: {")]
            assert rest == []  # a request its client cancelled gets no answer: the stream just ends
            ids = await http.post(urls[2], headers=session, json=call(8, "cancelled_ids", {}))
            assert ids.status_code == 200
            assert ids.json()["result"]["structuredContent"]["ids"], ids.json()


async def test_an_anonymous_session_forwarded_by_another_instance_is_its_clients_and_nobody_elses() -> None:
    # An anonymous session is tied to the address that opened it (issue #38 item 8). Forwards
    # come from the entry instance's address (127.0.0.1 here), so the entry instance names the
    # client's own address in the signed forward: the client on 127.0.0.2 keeps its session
    # through every instance, and a client on 127.0.0.3 holding the id gets 404 through each.
    owner_transport = httpx.AsyncHTTPTransport(local_address="127.0.0.2")
    other_transport = httpx.AsyncHTTPTransport(local_address="127.0.0.3")
    with anyio.fail_after(WAIT):
        async with (
            cluster(server_spec("--era", "legacy")) as c,
            httpx.AsyncClient(transport=owner_transport, timeout=WAIT) as mine,
            httpx.AsyncClient(transport=other_transport, timeout=WAIT) as other,
        ):
            urls = [base + "/mcp" for base in c.instances]
            session = await open_session(mine, urls[0])
            for n, url in enumerate(urls):
                echoed = await mine.post(url, headers=session, json=call(n, "echo", {"message": "mine"}))
                assert echoed.status_code == 200, echoed.text
                stolen = await other.post(url, headers=session, json=call(n, "echo", {"message": "theirs"}))
                assert stolen.status_code == 404, stolen.text
                assert (await other.get(url, headers=session)).status_code == 404
                assert (await other.delete(url, headers=session)).status_code == 404
            assert (await mine.delete(urls[2], headers=session)).status_code == 204


async def test_an_owner_gone_or_restarted_at_the_same_address_means_404_and_a_new_session_works() -> None:
    spec = server_spec("--era", "legacy")
    sock_a = loopback_socket()
    port = sock_a.getsockname()[1]
    base_a = f"http://127.0.0.1:{port}"
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    with anyio.fail_after(WAIT):
        async with AsyncExitStack() as outer, httpx.AsyncClient(timeout=WAIT) as http:
            routing_b = OwnerRouting("http://127.0.0.1:1", StateKeys.fixed(SECRET), max_body_bytes=MAX_BODY_BYTES)
            sock_b = loopback_socket()
            routing_b.me = owners.Owner(f"http://127.0.0.1:{sock_b.getsockname()[1]}", routing_b.me.boot)
            app_b = app_for(Router(ServerConfig("test", spec)), owner_routing=routing_b)
            url_b = await outer.enter_async_context(serving(app_b, sock_b)) + "/mcp"
            first = OwnerRouting(base_a, StateKeys.fixed(SECRET), max_body_bytes=MAX_BODY_BYTES)
            async with serving(app_for(Router(ServerConfig("test", spec)), owner_routing=first), sock_a):
                old = await open_session(http, base_a + "/mcp")
                assert (await http.post(url_b, headers=old, json=ping)).status_code == 200
            # A is gone: its session is unknown everywhere, at once (connection refused).
            gone = await http.post(url_b, headers=old, json=ping)
            assert gone.status_code == 404
            message = gone.json()["error"]["message"]
            assert message == (
                "unknown or ended session: the replica that owns this session is unreachable; initialize a new one"
            )
            # A restarts at the same address with new state: the old id is still 404, there and via B.
            again = loopback_socket_at(port)
            second = OwnerRouting(base_a, StateKeys.fixed(SECRET), max_body_bytes=MAX_BODY_BYTES)
            assert second.me.boot != first.me.boot
            async with serving(app_for(Router(ServerConfig("test", spec)), owner_routing=second), again):
                assert (await http.post(base_a + "/mcp", headers=old, json=ping)).status_code == 404
                assert (await http.post(url_b, headers=old, json=ping)).status_code == 404
                new = await open_session(http, url_b)  # re-initialize: works, and the new session roams
                assert (await http.post(base_a + "/mcp", headers=new, json=ping)).status_code == 200


def loopback_socket_at(port: int) -> Any:
    import socket

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    return sock


async def test_a_forwarded_request_carries_the_entry_instances_principal_and_never_the_token() -> None:
    tokens = TokenStore(["alice:token-of-alice-0123456789", "bob:token-of-bob-0123456789"])
    alice, bob = (
        {"authorization": "Bearer token-of-alice-0123456789"},
        {"authorization": "Bearer token-of-bob-0123456789"},
    )
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    with anyio.fail_after(WAIT):
        async with cluster(server_spec("--era", "legacy"), tokens=tokens) as c, httpx.AsyncClient() as http:
            owner, entry = c.instances[0] + "/mcp", c.instances[1] + "/mcp"
            init = await http.post(owner, headers={**BASE_HEADERS, **alice}, json=legacy_initialize())
            session = {**BASE_HEADERS, "mcp-session-id": init.headers["mcp-session-id"]}
            assert (await http.post(entry, headers={**session, **alice}, json=ping)).status_code == 200
            # Bob holding Alice's session id: forwarded as bob, so the owner does not know it.
            assert (await http.post(entry, headers={**session, **bob}, json=ping)).status_code == 404
            # No token: refused where it came in, never forwarded.
            assert (await http.post(entry, headers=session, json=ping)).status_code == 401
    forwarded = [headers for headers in c.seen if owners.FORWARD_HEADER in headers]
    assert len(forwarded) == 2
    assert all("authorization" not in headers for headers in forwarded)
    principals = [owners.decode_principal(headers[owners.PRINCIPAL_HEADER]) for headers in forwarded]
    assert principals == ["alice", "bob"]


@pytest.mark.parametrize("era", ["dual", "legacy"])
async def test_concurrent_legacy_and_modern_clients_each_get_their_own_answers_through_round_robin(era: str) -> None:
    clients, calls = 4, 5
    results: dict[str, list[str]] = {}

    async def client_run(name: str, mode: str, url: str) -> None:
        async with Client(url, mode=mode) as client:
            for n in range(calls):
                echoed = await client.call_tool("echo", {"message": f"{name}-{n}"})
                [content] = echoed.content
                assert isinstance(content, sdk.TextContent)
                results.setdefault(name, []).append(content.text)

    with anyio.fail_after(WAIT):
        async with cluster(server_spec("--era", era)) as c, anyio.create_task_group() as tg:
            for index in range(clients):
                tg.start_soon(client_run, f"legacy{index}", "legacy", c.url)
                tg.start_soon(client_run, f"modern{index}", "2026-07-28", c.url)
    assert results == {
        f"{kind}{index}": [f"{kind}{index}-{n}" for n in range(calls)]
        for kind in ("legacy", "modern")
        for index in range(clients)
    }
    assert 404 not in c.balancer.statuses()


async def test_advertise_url_from_the_settings_turns_owner_routing_on(tmp_path: Path) -> None:
    secret = tmp_path / "state-secret"
    secret.write_bytes(b"s" * 32)
    spec = server_spec("--era", "legacy")
    settings = Settings(
        servers=(ServerConfig("test", spec),),
        advertise_url="http://127.0.0.1:9/",
        state_secret_file=str(secret),
    )
    with anyio.fail_after(WAIT):
        async with serving(build_app(settings)) as base, httpx.AsyncClient() as http:
            status = (await http.get(f"{base}/status")).json()
            init = await http.post(f"{base}/mcp", headers=BASE_HEADERS, json=legacy_initialize())
    assert status["instance"]["advertise_url"] == "http://127.0.0.1:9"
    owner = owners.session_owner(init.headers["mcp-session-id"], [owners.IdKeys.derive(b"s" * 32, "session id")])
    assert owner.url == "http://127.0.0.1:9"
    assert owner.boot == status["instance"]["boot"]
