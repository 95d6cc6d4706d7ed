"""URL-mode elicitation across the eras, with real children (``tests/servers/testserver.py``).

- A 2025-11-25 server that needs its user at a URL ends the call with error -32042 (tool
  ``url_required``, until the test "completes" the flow by making a grant file). A modern
  client never sees -32042: it gets the gateway's own ``input_required`` round, each URL an
  ``elicitation/create`` of mode ``url``; its retry (the user accepted) sends the call to the
  server again, without the round's ``inputResponses`` and ``requestState``. A declined URL
  ends the call without sending it again; a client that did not declare ``elicitation.url``
  gets -32021. A legacy client gets the server's -32042 as it is.
- A modern server's URL elicitation (tool ``needs_url``) reaches a legacy client with an
  ``elicitationId``, as 2025-11-25 requires.

Clients: raw httpx (wire shapes, validated against the schemas) and the official SDK.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import httpx
import orjson
import pytest
from mcp import Client, MCPError
from mcp import types as sdk

from gateway.errors import CODE_NO_CLIENT_INPUT
from gateway.protocol import tasks as task_rules
from gateway.protocol.jsonrpc import MISSING_CLIENT_CAPABILITY, URL_ELICITATION_REQUIRED
from gateway.protocol.urlelicitation import MAX_URL_ELICITATIONS
from gateway.relay.router import Router
from gateway.relay.server_config import RootsKeying, ServerConfig
from gateway.stdio.pool import PoolSettings
from gateway.stdio.spec import ChildSpec
from tests.conftest import server_spec
from tests.gateway_server import MODERN, MODERN_META, app_for, modern_call, modern_headers, running_gateway, serving
from tests.integration.test_client_requests import legacy_tool, messages, open_session, sse
from tests.schemas import validate

pytestmark = pytest.mark.anyio

CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
URL_CAPABLE = {"elicitation": {"form": {}, "url": {}}}
ACCEPTED = {"action": "accept"}
CLIENT_ROOTS = {"roots": [{"uri": "file:///client/project", "name": "project"}]}
WAIT = 20.0


def child(era: str, record: Path | None = None) -> ChildSpec:
    flags = ("--record", str(record)) if record is not None else ()
    return server_spec("--era", era, *flags)


def connect(request_id: Any, account: str, grants: Path, capabilities: Any = URL_CAPABLE, **arguments: Any) -> Any:
    arguments = {"account": account, "grant_dir": str(grants), **arguments}
    return modern_call(request_id, "url_required", arguments, **{CAPABILITIES_KEY: capabilities})


def retry_of(call: dict[str, Any], request_id: Any, result: dict[str, Any], responses: dict[str, Any]) -> Any:
    params = {**call["params"], "inputResponses": responses, "requestState": result["requestState"]}
    return {**call, "id": request_id, "params": params}


async def post(http: httpx.AsyncClient, url: str, body: dict[str, Any]) -> dict[str, Any]:
    reply = await http.post(url, headers=modern_headers("tools/call", body["params"]["name"]), json=body)
    [message] = messages(reply)
    message["status"] = reply.status_code
    return message


def child_calls(record: Path, account: str) -> list[dict[str, Any]]:
    lines = [orjson.loads(line) for line in record.read_bytes().splitlines() if line.strip()]
    return [
        line
        for line in lines
        if line.get("method") == "tools/call" and line["params"].get("arguments", {}).get("account") == account
    ]


@pytest.mark.parametrize("era", ["legacy", "modern", "dual"])
async def test_each_modern_client_gets_its_own_url_round_and_its_retry_sends_the_call_again(
    era: str, tmp_path: Path
) -> None:
    """Three clients at once on one shared child (a modern child that emits -32042 too, as the
    SDK's servers do): each round carries that client's URLs only, and each retry reaches the
    server as the original call, once the user's grant exists."""
    record, grants = tmp_path / "stdin.jsonl", tmp_path / "grants"
    grants.mkdir()
    accounts = ["ada", "bob", "cy"]
    finals: dict[str, dict[str, Any]] = {}
    with anyio.fail_after(WAIT):
        async with running_gateway(child(era, record), pool_size=1) as url, httpx.AsyncClient(timeout=WAIT) as http:

            async def client(n: int, account: str) -> None:
                call = connect(n, account, grants, urls=2)
                first = await post(http, url, call)
                assert first["status"] == 200, first
                result = first["result"]
                validate({k: v for k, v in first.items() if k != "status"}, "JSONRPCResultResponse")
                validate(result, "InputRequiredResult")
                assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "testserver"
                assert result["inputRequests"] == {
                    f"url-{k}": {
                        "method": "elicitation/create",
                        "params": {
                            "mode": "url",
                            "message": f"Sign in as {account} ({k})",
                            "url": f"https://auth.example/grant/{account}/{k}",
                        },
                    }
                    for k in (1, 2)
                }
                (grants / account).touch()  # the user signed in, out of band
                final = await post(
                    http, url, retry_of(call, f"{n}-retry", result, {"url-1": ACCEPTED, "url-2": ACCEPTED})
                )
                finals[account] = final

            async with anyio.create_task_group() as tg:
                for n, account in enumerate(accounts):
                    tg.start_soon(client, n, account)
    for account in accounts:
        final = finals[account]
        assert final["result"]["structuredContent"] == {"account": account}, final
        calls = child_calls(record, account)
        assert len(calls) == 2  # the first call, then the same call again: nothing else
        assert calls[0]["params"]["arguments"] == calls[1]["params"]["arguments"]
        assert not {"inputResponses", "requestState"} & calls[1]["params"].keys()


async def test_a_declined_url_ends_the_call_and_the_server_is_not_called_again(tmp_path: Path) -> None:
    record = tmp_path / "stdin.jsonl"
    with anyio.fail_after(WAIT):
        async with running_gateway(child("legacy", record)) as url, httpx.AsyncClient(timeout=WAIT) as http:
            call = connect(1, "ada", tmp_path)
            first = await post(http, url, call)
            second = await post(http, url, retry_of(call, 2, first["result"], {"url-1": {"action": "decline"}}))
    assert second["status"] == 200
    error = second["error"]
    assert error["code"] == CODE_NO_CLIENT_INPUT
    assert "did not complete the server's URL elicitation (decline)" in error["message"]
    assert error["data"]["action"] == "decline"
    validate({k: v for k, v in second.items() if k != "status"}, "JSONRPCErrorResponse")
    assert len(child_calls(record, "ada")) == 1


async def test_a_client_without_url_elicitation_gets_32021_naming_it(tmp_path: Path) -> None:
    with anyio.fail_after(WAIT):
        async with running_gateway(child("legacy")) as url, httpx.AsyncClient(timeout=WAIT) as http:
            form_only = await post(http, url, connect(1, "ada", tmp_path, capabilities={"elicitation": {}}))
            nothing = await post(http, url, connect(2, "ada", tmp_path, capabilities={}))
    for reply in (form_only, nothing):
        assert reply["status"] == 400
        assert reply["error"]["code"] == MISSING_CLIENT_CAPABILITY
        assert reply["error"]["data"] == {"requiredCapabilities": {"elicitation": {"url": {}}}}
        assert "'ada must sign in first'" in reply["error"]["message"]


async def test_more_urls_than_a_round_takes_end_the_call_with_a_clear_error(tmp_path: Path) -> None:
    with anyio.fail_after(WAIT):
        async with running_gateway(child("legacy")) as url, httpx.AsyncClient(timeout=WAIT) as http:
            reply = await post(http, url, connect(1, "ada", tmp_path, urls=MAX_URL_ELICITATIONS + 1))
    error = reply["error"]
    assert error["code"] == CODE_NO_CLIENT_INPUT, reply
    assert "without URL elicitations the gateway can pass on" in error["message"]
    assert "elicitations" not in error["data"]


async def test_a_tampered_url_round_retry_is_refused(tmp_path: Path) -> None:
    with anyio.fail_after(WAIT):
        async with running_gateway(child("legacy")) as url, httpx.AsyncClient(timeout=WAIT) as http:
            call = connect(1, "ada", tmp_path)
            first = await post(http, url, call)
            other = connect(2, "bob", tmp_path)  # another account's call with ada's round
            refused = await post(http, url, retry_of(other, 2, first["result"], {"url-1": ACCEPTED}))
    assert refused["status"] == 400
    assert refused["error"]["data"] == {"requestState": "mismatch"}


@pytest.mark.parametrize("keying", [RootsKeying.ALWAYS, RootsKeying.NEVER])
async def test_where_calls_run_on_the_clients_roots_the_url_round_asks_for_them_too(
    keying: RootsKeying, tmp_path: Path
) -> None:
    """A client that declares roots, on a server that keeps them: its call ran on children
    given its roots (the gateway's roots round first), so its URL round asks for them again
    and the retry runs there at once, not after a roots round more. Where the server keeps
    none, the URL round asks the URLs only."""
    capabilities = {**URL_CAPABLE, "roots": {}}
    with anyio.fail_after(WAIT):
        async with (
            running_gateway(child("legacy"), roots_keying=keying, roots_learn_wait=0) as url,
            httpx.AsyncClient(timeout=WAIT) as http,
        ):
            call = connect(1, "ada", tmp_path, capabilities=capabilities)
            first = await post(http, url, call)
            if keying is RootsKeying.ALWAYS:  # the gateway's roots round, then the server's -32042
                assert list(first["result"]["inputRequests"]) == ["roots"]
                first = await post(http, url, retry_of(call, 2, first["result"], {"roots": CLIENT_ROOTS}))
                assert list(first["result"]["inputRequests"]) == ["url-1", "roots"]
            else:
                assert list(first["result"]["inputRequests"]) == ["url-1"]
            (tmp_path / "ada").touch()
            final = await post(
                http, url, retry_of(call, 3, first["result"], {"url-1": ACCEPTED, "roots": CLIENT_ROOTS})
            )
    assert final["result"]["structuredContent"] == {"account": "ada"}, final


async def test_a_task_shows_the_url_round_and_its_update_sends_the_call_again(tmp_path: Path) -> None:
    """A call that became a task (the Tasks extension): the server's -32042 is the task's
    input_required, its inputRequests the URLs; ``tasks/update`` with the user's accept sends
    the call to the server again, and the task completes with its result."""
    server = ServerConfig("test", child("legacy"), PoolSettings(max_size=1), task_tools=("url_required",))
    meta = {**MODERN_META, CAPABILITIES_KEY: {**URL_CAPABLE, "extensions": {task_rules.EXTENSION: {}}}}
    app = app_for(Router(server))

    async def until(task_id: str, status: str) -> None:
        store = app.state.task_stores["test"]  # made at start-up
        while store.status(task_id) != status:
            await store.changed()

    with anyio.fail_after(WAIT):
        async with serving(app) as base, httpx.AsyncClient(timeout=WAIT) as http:
            url = f"{base}/mcp"
            arguments = {"account": "ada", "grant_dir": str(tmp_path)}
            call = {"name": "url_required", "arguments": arguments, "_meta": meta}
            body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call}
            made = (await http.post(url, headers=modern_headers("tools/call", "url_required"), json=body)).json()
            task_id = made["result"]["taskId"]
            await until(task_id, task_rules.INPUT_REQUIRED)
            params = {"taskId": task_id, "_meta": meta}
            get = {"jsonrpc": "2.0", "id": 2, "method": task_rules.GET, "params": params}
            asked = (await http.post(url, headers=modern_headers(task_rules.GET, task_id), json=get)).json()["result"]
            [(key, request)] = asked["inputRequests"].items()  # under a task-level key
            assert request == {
                "method": "elicitation/create",
                "params": {"mode": "url", "message": "Sign in as ada (1)", "url": "https://auth.example/grant/ada/1"},
            }
            (tmp_path / "ada").touch()
            update = {
                **get,
                "id": 3,
                "method": task_rules.UPDATE,
                "params": {**params, "inputResponses": {key: ACCEPTED}},
            }
            assert (
                await http.post(url, headers=modern_headers(task_rules.UPDATE, task_id), json=update)
            ).status_code == 200
            await until(task_id, task_rules.COMPLETED)
            done = (await http.post(url, headers=modern_headers(task_rules.GET, task_id), json=get)).json()["result"]
    assert done["result"]["structuredContent"] == {"account": "ada"}, done


async def test_a_legacy_client_gets_the_servers_32042_as_it_is(tmp_path: Path) -> None:
    with anyio.fail_after(WAIT):
        async with running_gateway(child("legacy")) as url, httpx.AsyncClient(timeout=WAIT) as http:
            headers = await open_session(http, url, URL_CAPABLE)
            body = {
                "jsonrpc": "2.0",
                "id": 5,
                "method": "tools/call",
                "params": {"name": "url_required", "arguments": {"account": "ada", "grant_dir": str(tmp_path)}},
            }
            [reply] = messages(await http.post(url, headers=headers, json=body))
    assert reply["error"]["code"] == URL_ELICITATION_REQUIRED
    assert reply["error"]["data"]["elicitations"][0]["elicitationId"] == "ada-1"
    validate(reply, "URLElicitationRequiredError", "2025-11-25")


@pytest.mark.parametrize("declared", [{"elicitation": {}}, {}])
async def test_a_legacy_client_that_did_not_declare_url_elicitation_gets_31006_not_32042(
    declared: dict[str, Any], tmp_path: Path
) -> None:
    with anyio.fail_after(WAIT):
        async with running_gateway(child("legacy")) as url, httpx.AsyncClient(timeout=WAIT) as http:
            headers = await open_session(http, url, declared)
            body = legacy_tool(5, "url_required", account="ada", grant_dir=str(tmp_path))
            [reply] = messages(await http.post(url, headers=headers, json=body))
    error = reply["error"]
    assert error["code"] == CODE_NO_CLIENT_INPUT
    assert "did not declare elicitation.url" in error["message"]
    assert error["data"]["requiredCapabilities"] == {"elicitation": {"url": {}}}
    assert error["data"]["elicitations"][0]["elicitationId"] == "ada-1"
    validate(reply, "JSONRPCErrorResponse", "2025-11-25")


async def test_a_modern_childs_32042_reaches_a_legacy_session_as_2025_11_25_has_it(tmp_path: Path) -> None:
    """A modern child that emits -32042 anyway (the SDK's may), without elicitation ids: a
    legacy session that declared URL elicitation gets it with an id for each, a session that
    did not gets -31006, as for a legacy child's."""
    with anyio.fail_after(WAIT):
        async with running_gateway(child("modern")) as url, httpx.AsyncClient(timeout=WAIT) as http:
            declared = await open_session(http, url, URL_CAPABLE)
            undeclared = await open_session(http, url, {"elicitation": {}})
            body = legacy_tool(5, "url_required", account="ada", grant_dir=str(tmp_path), no_ids=True, urls=2)
            [passed] = messages(await http.post(url, headers=declared, json=body))
            [refused] = messages(await http.post(url, headers=undeclared, json=body))
    assert passed["error"]["code"] == URL_ELICITATION_REQUIRED
    ids = [entry["elicitationId"] for entry in passed["error"]["data"]["elicitations"]]
    assert len(set(ids)) == 2
    assert all(isinstance(eid, str) and len(eid) == 16 for eid in ids)
    validate(passed, "URLElicitationRequiredError", "2025-11-25")
    assert refused["error"]["code"] == CODE_NO_CLIENT_INPUT


async def test_a_modern_servers_url_elicitation_reaches_a_legacy_client_with_an_elicitation_id() -> None:
    with anyio.fail_after(WAIT):
        async with running_gateway(child("modern")) as url, httpx.AsyncClient(timeout=WAIT) as http:
            headers = await open_session(http, url, URL_CAPABLE)
            body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "needs_url", "arguments": {}}}
            async with http.stream("POST", url, headers=headers, json=body) as reply:
                stream = sse(reply)
                asked = await anext(stream)
                validate(asked, "ElicitRequest", "2025-11-25")
                params = asked["params"]
                assert (params["mode"], params["url"]) == ("url", "https://auth.example/x")
                assert isinstance(params["elicitationId"], str)
                assert len(params["elicitationId"]) >= 12
                answer = {"jsonrpc": "2.0", "id": asked["id"], "result": ACCEPTED}
                assert (await http.post(url, headers=headers, json=answer)).status_code == 202
                final = await anext(stream)
    assert final["result"]["structuredContent"] == {"action": "accept"}


async def test_a_legacy_session_that_declared_form_elicitation_only_is_not_sent_a_url() -> None:
    with anyio.fail_after(WAIT):
        async with running_gateway(child("modern")) as url, httpx.AsyncClient(timeout=WAIT) as http:
            headers = await open_session(http, url, {"elicitation": {}})
            body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "needs_url", "arguments": {}}}
            [reply] = messages(await http.post(url, headers=headers, json=body))
    assert reply["error"]["code"] == CODE_NO_CLIENT_INPUT
    assert reply["error"]["data"]["requiredCapabilities"] == {"elicitation": {"url": {}}}


# -- the official SDK ---------------------------------------------------------------------


async def test_the_sdk_client_in_modern_mode_completes_a_url_round_with_its_callback(tmp_path: Path) -> None:
    shown: list[tuple[str, str]] = []

    async def on_elicitation(context: Any, params: sdk.ElicitRequestParams) -> sdk.ElicitResult:
        assert isinstance(params, sdk.ElicitRequestURLParams)
        shown.append((params.message, params.url))
        (tmp_path / "ada").touch()  # the user signed in
        return sdk.ElicitResult(action="accept")

    with anyio.fail_after(WAIT):
        async with (
            running_gateway(child("legacy")) as url,
            Client(url, mode=MODERN, elicitation_callback=on_elicitation) as client,
        ):
            result = await client.call_tool("url_required", {"account": "ada", "grant_dir": str(tmp_path)})
    assert shown == [("Sign in as ada (1)", "https://auth.example/grant/ada/1")]
    assert result.structured_content == {"account": "ada"}


async def test_the_sdk_client_in_legacy_mode_gets_url_elicitation_required(tmp_path: Path) -> None:
    async def on_elicitation(context: Any, params: sdk.ElicitRequestParams) -> sdk.ElicitResult:
        raise AssertionError("a legacy client is not asked: the call ends with -32042")

    with anyio.fail_after(WAIT):
        async with (
            running_gateway(child("legacy")) as url,
            Client(url, mode="legacy", elicitation_callback=on_elicitation) as client,
        ):
            with pytest.raises(MCPError) as raised:
                await client.call_tool("url_required", {"account": "ada", "grant_dir": str(tmp_path)})
    assert raised.value.error.code == URL_ELICITATION_REQUIRED


async def test_a_url_elicitations_completion_reaches_only_the_session_it_was_given_to(tmp_path: Path) -> None:
    """Two legacy sessions on one child, each with its GET stream open. Ada's call gets the
    server's -32042 (id ``ada-1``) and later a URL question mid-call (id ``q-1``); the child's
    ``notifications/elicitation/complete`` for each (sent here through the test server's
    ``notify`` tool, by the other session even) reaches Ada's GET stream only. A list change
    after them reaches both: the first thing Bob's stream carries."""
    url_question = {
        "method": "elicitation/create",
        "params": {"mode": "url", "elicitationId": "q-1", "url": "https://auth.example/q", "message": "Sign in"},
    }

    def complete(eid: str) -> dict[str, Any]:
        return {"method": "notifications/elicitation/complete", "params": {"elicitationId": eid}}

    with anyio.fail_after(WAIT):
        async with running_gateway(child("legacy"), pool_size=1) as url, httpx.AsyncClient(timeout=WAIT) as http:
            ada = await open_session(http, url, URL_CAPABLE)
            bob = await open_session(http, url, URL_CAPABLE)
            get = {"accept": "text/event-stream"}
            async with (
                http.stream("GET", url, headers={**ada, **get}) as ada_get,
                http.stream("GET", url, headers={**bob, **get}) as bob_get,
            ):
                ada_stream, bob_stream = sse(ada_get), sse(bob_get)
                [refused] = messages(
                    await http.post(
                        url, headers=ada, json=legacy_tool(1, "url_required", account="ada", grant_dir=str(tmp_path))
                    )
                )
                assert refused["error"]["code"] == URL_ELICITATION_REQUIRED
                async with http.stream(
                    "POST", url, headers=ada, json=legacy_tool(2, "ask_client", requests=[url_question])
                ) as asking:
                    question_stream = sse(asking)
                    asked = await anext(question_stream)
                    validate(asked, "ElicitRequest", "2025-11-25")
                    answer = {"jsonrpc": "2.0", "id": asked["id"], "result": ACCEPTED}
                    assert (await http.post(url, headers=ada, json=answer)).status_code == 202
                    await anext(question_stream)  # the call's answer
                for n, eid in enumerate(("ada-1", "q-1"), 3):
                    notified = await http.post(url, headers=bob, json=legacy_tool(n, "notify", **complete(eid)))
                    assert notified.status_code == 200
                changed = legacy_tool(5, "notify", method="notifications/tools/list_changed")
                assert (await http.post(url, headers=bob, json=changed)).status_code == 200
                ada_got = [await anext(ada_stream) for _ in range(3)]
                bob_first = await anext(bob_stream)
    assert [m["method"] for m in ada_got] == [
        "notifications/elicitation/complete",
        "notifications/elicitation/complete",
        "notifications/tools/list_changed",
    ]
    assert [m["params"]["elicitationId"] for m in ada_got[:2]] == ["ada-1", "q-1"]
    for message in ada_got[:2]:
        validate(message, "ElicitationCompleteNotification", "2025-11-25")
    assert bob_first["method"] == "notifications/tools/list_changed"
