"""A legacy child asking the client something — sampling, elicitation, roots — through the gateway.

The test server's ``ask_client`` tool sends the requests it is given to its client (the
gateway) and returns every answer it got, so each test reads, in the tool's result, exactly
what reached the child. The child here is legacy-only (``--era legacy``), as such requests
are a legacy feature; clients are raw httpx (for the wire shapes) and the official SDK.

- A **legacy** client gets the question on its request's SSE stream under a gateway id
  (``g-N``) and POSTs the answer (202), which the child receives under its own id.
- A **modern** client gets an MRTR round: ``input_required`` + a signed ``requestState``;
  its retry answers the parked call, whose progress and result come on the retry.
- The gateway answers what no client can: unattributable questions, undeclared ones, and
  those left unanswered past ``input_timeout``.
- A **modern** child (``--era modern``, tool ``needs_input``) answers ``input_required``
  instead; a legacy client gets each ``inputRequests`` entry on its request's stream, and
  the gateway retries the child with the answers until the result is complete.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import orjson
import pytest
from mcp import Client
from mcp import types as sdk

from gateway.errors import CODE_INPUT_TIMEOUT, CODE_NO_CLIENT_INPUT
from gateway.http.auth import TokenStore
from gateway.protocol.jsonrpc import INVALID_PARAMS, MISSING_CLIENT_CAPABILITY
from gateway.protocol.requeststate import StateClaims, encode_state, params_digest
from gateway.relay import asks
from gateway.relay.exchange import MAX_INPUT_ROUNDS
from gateway.relay.server_config import Isolation, RootsKeying
from gateway.relay.statekeys import StateKeys
from gateway.stdio.spec import ChildSpec
from tests.conftest import server_spec
from tests.gateway_server import BASE_HEADERS, MODERN, modern_call, modern_headers, parse_sse, running_gateway
from tests.logrecords import Records, recording
from tests.schemas import validate

pytestmark = pytest.mark.anyio

CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
SAMPLING = {
    "method": "sampling/createMessage",
    "params": {"messages": [{"role": "user", "content": {"type": "text", "text": "say hi"}}], "maxTokens": 5},
}
ELICITATION = {
    "method": "elicitation/create",
    "params": {
        "message": "Your name?",
        "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
    },
}
ROOTS = {"method": "roots/list"}
SAMPLED = {"role": "assistant", "content": {"type": "text", "text": "hi there"}, "model": "test-model"}
ELICITED = {"action": "accept", "content": {"name": "Ada"}}
CLIENT_ROOTS = {"roots": [{"uri": "file:///client/project", "name": "project"}]}
CONFIGURED_ROOTS = ({"uri": "file:///srv/data", "name": "data"},)
ALL = {"sampling": {}, "elicitation": {}, "roots": {}}
SECRET = b"a test secret of 32 bytes, or so"
WAIT = 20.0


def legacy_child(**options: Any) -> ChildSpec:
    return server_spec("--era", "legacy", **options)


def answers(final: dict[str, Any]) -> list[dict[str, Any]]:
    assert "result" in final, final
    found: list[dict[str, Any]] = final["result"]["structuredContent"]["answers"]
    return found


def messages(reply: httpx.Response) -> list[dict[str, Any]]:
    if reply.headers["content-type"].startswith("text/event-stream"):
        return parse_sse(reply.text)
    return [reply.json()]


async def sse(reply: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """The messages of a streamed SSE response, as they arrive."""
    data: list[str] = []
    async for line in reply.aiter_lines():
        if line.startswith("data:"):
            data.append(line[5:].lstrip())
        elif not line and data:
            if any(data):  # a priming event (an id, empty data) carries no message
                yield orjson.loads("\n".join(data))
            data = []


# -- legacy clients -----------------------------------------------------------------------


async def open_session(
    http: httpx.AsyncClient, url: str, capabilities: dict[str, Any], version: str = "2025-11-25"
) -> dict[str, str]:
    init = await http.post(
        url,
        headers=BASE_HEADERS,
        json={
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {"protocolVersion": version, "capabilities": capabilities, "clientInfo": {"name": "t"}},
        },
    )
    assert init.status_code == 200, init.text
    headers = {**BASE_HEADERS, "mcp-session-id": init.headers["mcp-session-id"]}
    initialized = await http.post(url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert initialized.status_code == 202
    return headers


def legacy_ask(request_id: Any, requests: list[dict[str, Any]], **arguments: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": "ask_client", "arguments": {"requests": requests, **arguments}},
    }


async def test_a_legacy_client_gets_each_question_on_its_requests_stream_and_its_posted_answer_reaches_the_child() -> (
    None
):
    with anyio.fail_after(WAIT):
        async with running_gateway(legacy_child(), roots_learn_wait=0) as url, httpx.AsyncClient(timeout=WAIT) as http:
            headers = await open_session(http, url, {"sampling": {}, "roots": {}})
            async with http.stream("POST", url, headers=headers, json=legacy_ask(7, [SAMPLING, ROOTS])) as reply:
                assert reply.headers["content-type"].startswith("text/event-stream")
                stream = sse(reply)
                # The child's questions, in its order, each on this request's stream: the server
                # keeps no roots (it fetches none outside a call), so its roots/list during the
                # call is this client's to answer, as its sampling is (issue #36).
                first = await anext(stream)
                assert first == {"jsonrpc": "2.0", "id": "g-1", **SAMPLING}
                validate(first, "CreateMessageRequest", "2025-11-25")
                refusal = {"code": -1, "message": "no sampling for you", "data": {"why": "test"}}
                posted = await http.post(url, headers=headers, json={"jsonrpc": "2.0", "id": "g-1", "error": refusal})
                assert posted.status_code == 202
                second = await anext(stream)
                assert second == {"jsonrpc": "2.0", "id": "g-2", "method": "roots/list"}  # ids never reused
                validate(second, "ListRootsRequest", "2025-11-25")
                posted = await http.post(
                    url, headers=headers, json={"jsonrpc": "2.0", "id": "g-2", "result": CLIENT_ROOTS}
                )
                assert posted.status_code == 202
                final = await anext(stream)
    assert final["id"] == 7
    # The client's error, code and data kept; the child's roots/list answered with its answer.
    assert answers(final) == [{"error": refusal}, {"result": CLIENT_ROOTS}]


async def test_a_question_the_child_withdraws_is_cancelled_at_the_legacy_client_on_the_same_stream(
    tmp_path: Path,
) -> None:
    """The child gives up waiting and withdraws its question (``notifications/cancelled``, as a
    TypeScript SDK server does): the client is told, under the id it got, before the call's
    answer; its answer after that reaches nobody, and the child never reads one."""
    record = tmp_path / "stdin.jsonl"
    with anyio.fail_after(WAIT):
        async with (
            running_gateway(server_spec("--era", "legacy", "--record", str(record))) as url,
            httpx.AsyncClient(timeout=WAIT) as http,
        ):
            headers = await open_session(http, url, {"elicitation": {}})
            body = legacy_ask(7, [ELICITATION], timeout_ms=300, cancel_on_timeout=True)
            async with http.stream("POST", url, headers=headers, json=body) as reply:
                stream = sse(reply)
                asked = await anext(stream)
                assert asked["id"] == "g-1"
                withdrawn = await anext(stream)  # nobody answers: the child gives up
                final = await anext(stream)
            late = await http.post(url, headers=headers, json={"jsonrpc": "2.0", "id": "g-1", "result": ELICITED})
    assert withdrawn["method"] == "notifications/cancelled"
    assert withdrawn["params"]["requestId"] == "g-1"
    assert withdrawn["params"]["reason"] == "no reply within 0.3 s"
    validate(withdrawn, "CancelledNotification", "2025-11-25")
    assert final["id"] == 7
    assert "TimeoutError" in answers(final)[0]["error"]["message"]
    assert late.status_code < 500
    lines = [orjson.loads(line) for line in record.read_bytes().splitlines() if line.strip()]
    assert [line for line in lines if "method" not in line] == []  # no answer ever reached the child


async def test_a_legacy_client_is_asked_only_for_what_it_declared_and_the_gateway_answers_the_rest() -> None:
    with anyio.fail_after(WAIT):
        async with (
            running_gateway(legacy_child(roots=CONFIGURED_ROOTS)) as url,
            httpx.AsyncClient(timeout=WAIT) as http,
        ):
            headers = await open_session(http, url, {})
            reply = await http.post(url, headers=headers, json=legacy_ask(1, [SAMPLING, ELICITATION, ROOTS]))
    assert reply.headers["content-type"] == "application/json"  # nothing went to the client
    sampled, elicited, rooted = answers(reply.json())
    assert sampled["error"]["code"] == CODE_NO_CLIENT_INPUT
    assert "did not declare the sampling capability" in sampled["error"]["message"]
    # The client is there but cannot be asked: a clear error, never a made-up "decline".
    assert elicited["error"]["code"] == CODE_NO_CLIENT_INPUT
    assert "did not declare the elicitation.form capability" in elicited["error"]["message"]
    assert rooted == {"result": {"roots": list(CONFIGURED_ROOTS)}}


async def test_a_question_the_legacy_client_leaves_unanswered_ends_with_a_timeout_error_at_the_child() -> None:
    with anyio.fail_after(WAIT):
        async with (
            running_gateway(legacy_child(input_timeout=0.5), pool_size=1) as url,  # as above: its child
            httpx.AsyncClient(timeout=WAIT) as http,
        ):
            headers = await open_session(http, url, {"elicitation": {}})
            async with http.stream("POST", url, headers=headers, json=legacy_ask(1, [ELICITATION])) as reply:
                stream = sse(reply)
                assert (await anext(stream))["id"] == "g-1"
                final = await anext(stream)  # no answer: the gateway's bound ends the wait
            late = await http.post(url, headers=headers, json={"jsonrpc": "2.0", "id": "g-1", "result": ELICITED})
    [timed_out] = answers(final)
    assert timed_out["error"]["code"] == CODE_INPUT_TIMEOUT
    assert "within 0.5 s" in timed_out["error"]["message"]
    assert late.status_code == 202  # accepted, and dropped: nobody waits for it now


# -- unattributable questions: the GET stream of the one session a child serves ---------------


def legacy_tool(request_id: Any, tool: str, **arguments: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }


async def legacy_result(http: httpx.AsyncClient, url: str, headers: dict[str, str], message: dict[str, Any]) -> Any:
    reply = await http.post(url, headers=headers, json=message)
    [final] = [m for m in messages(reply) if m.get("id") == message["id"]]
    assert "result" in final, final
    return final["result"]


async def test_an_unprompted_question_goes_to_the_get_stream_of_the_session_whose_own_child_asks() -> None:
    # A server known to keep no roots: a session that declares roots is not asked for them on
    # its first call's stream first (tests/integration/test_session_roots.py: one that keeps them).
    with anyio.fail_after(WAIT):
        async with (
            running_gateway(legacy_child(), isolation=Isolation.SESSION, roots_keying=RootsKeying.NEVER) as url,
            httpx.AsyncClient(timeout=WAIT) as http,
        ):
            headers = await open_session(http, url, {"roots": {}})
            async with http.stream("GET", url, headers={**headers, "accept": "text/event-stream"}) as get:
                assert get.status_code == 200
                stream = sse(get)
                # The tool replies first, then asks: no request of the client is in flight.
                said = await legacy_result(http, url, headers, legacy_tool(1, "ask_later", method="roots/list"))
                assert said["content"][0]["text"] == "will ask"
                question = await anext(stream)
                assert question == {"jsonrpc": "2.0", "id": "g-1", "method": "roots/list"}
                validate(question, "ListRootsRequest", "2025-11-25")
                posted = await http.post(
                    url, headers=headers, json={"jsonrpc": "2.0", "id": "g-1", "result": CLIENT_ROOTS}
                )
                assert posted.status_code == 202
                got = await legacy_result(http, url, headers, legacy_tool(2, "answers_later", count=1))
    assert got["structuredContent"]["answers"] == [{"result": CLIENT_ROOTS}]  # the client's answer reached the child


async def test_an_unprompted_question_on_a_child_shared_by_two_sessions_is_answered_by_the_gateway() -> None:
    with anyio.fail_after(WAIT):
        async with running_gateway(legacy_child()) as url, httpx.AsyncClient(timeout=WAIT) as http:
            alice = await open_session(http, url, {"sampling": {}})
            bob = await open_session(http, url, {"sampling": {}})
            async with (
                http.stream("GET", url, headers={**alice, "accept": "text/event-stream"}) as alice_get,
                http.stream("GET", url, headers={**bob, "accept": "text/event-stream"}) as bob_get,
            ):
                later = legacy_tool(1, "ask_later", method=SAMPLING["method"], params=SAMPLING["params"])
                await legacy_result(http, url, alice, later)
                got = await legacy_result(http, url, alice, legacy_tool(2, "answers_later", count=1))
                # Then a list_changed, which every session of the pool gets: had the question gone
                # to a GET stream, it would come first there.
                await legacy_result(http, url, bob, legacy_tool(3, "add_tool", name="extra"))
                firsts = [await anext(sse(alice_get)), await anext(sse(bob_get))]
    [answer] = got["structuredContent"]["answers"]
    assert answer["error"]["code"] == CODE_NO_CLIENT_INPUT  # the gateway's refusal: no completion is made up
    assert "no client request is in flight" in answer["error"]["message"]
    assert firsts == [{"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}] * 2


async def test_an_unprompted_question_the_session_did_not_declare_is_answered_by_the_gateway() -> None:
    with anyio.fail_after(WAIT):
        async with (
            running_gateway(legacy_child(roots=CONFIGURED_ROOTS), isolation=Isolation.SESSION) as url,
            httpx.AsyncClient(timeout=WAIT) as http,
        ):
            headers = await open_session(http, url, {"sampling": {}})
            async with http.stream("GET", url, headers={**headers, "accept": "text/event-stream"}) as get:
                await legacy_result(http, url, headers, legacy_tool(1, "ask_later", method="roots/list"))
                got = await legacy_result(http, url, headers, legacy_tool(2, "answers_later", count=1))
                await legacy_result(http, url, headers, legacy_tool(3, "add_tool", name="extra"))
                first = await anext(sse(get))
    assert got["structuredContent"]["answers"] == [{"result": {"roots": list(CONFIGURED_ROOTS)}}]
    assert first == {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}


async def test_an_unprompted_question_the_session_leaves_unanswered_ends_with_a_timeout_error_at_the_child() -> None:
    with anyio.fail_after(WAIT):
        async with (
            running_gateway(legacy_child(input_timeout=0.5), isolation=Isolation.SESSION) as url,
            httpx.AsyncClient(timeout=WAIT) as http,
        ):
            headers = await open_session(http, url, {"elicitation": {}})
            async with http.stream("GET", url, headers={**headers, "accept": "text/event-stream"}) as get:
                await legacy_result(http, url, headers, legacy_tool(1, "ask_later", **ELICITATION))
                assert (await anext(sse(get)))["id"] == "g-1"
                got = await legacy_result(http, url, headers, legacy_tool(2, "answers_later", count=1))
    [timed_out] = got["structuredContent"]["answers"]
    assert timed_out["error"]["code"] == CODE_INPUT_TIMEOUT


# -- the official SDK, in each mode ---------------------------------------------------------


async def on_sampling(context: Any, params: sdk.CreateMessageRequestParams) -> sdk.CreateMessageResult:
    assert isinstance(params.messages[0].content, sdk.TextContent)
    text = f"sampled: {params.messages[0].content.text}"
    return sdk.CreateMessageResult(role="assistant", content=sdk.TextContent(type="text", text=text), model="m")


async def on_elicitation(context: Any, params: sdk.ElicitRequestParams) -> sdk.ElicitResult:
    return sdk.ElicitResult(action="accept", content={"name": f"answer to {params.message}"})


async def on_roots(context: Any) -> sdk.ListRootsResult:
    return sdk.ListRootsResult(roots=[sdk.Root(uri="file:///client/project", name="project")])


@pytest.mark.parametrize("how", ["sequential", "together"])
@pytest.mark.parametrize("mode", ["legacy", "auto", MODERN])
async def test_the_sdk_clients_callbacks_answer_sampling_elicitation_and_roots_in_every_mode(
    mode: str, how: str
) -> None:
    with anyio.fail_after(WAIT):
        async with (
            running_gateway(legacy_child(), roots_learn_wait=0) as url,
            Client(
                url,
                mode=mode,
                sampling_callback=on_sampling,
                elicitation_callback=on_elicitation,
                list_roots_callback=on_roots,
            ) as client,
        ):
            result = await client.call_tool(
                "ask_client", {"requests": [SAMPLING, ELICITATION, ROOTS], "together": how == "together"}
            )
    assert result.structured_content == {
        "answers": [
            {"result": {"role": "assistant", "content": {"type": "text", "text": "sampled: say hi"}, "model": "m"}},
            {"result": {"action": "accept", "content": {"name": "answer to Your name?"}}},
            {"result": CLIENT_ROOTS},
        ]
    }


# -- modern clients: MRTR -----------------------------------------------------------------


def modern_ask(
    request_id: Any, requests: list[dict[str, Any]], capabilities: dict[str, Any], **meta: Any
) -> dict[str, Any]:
    return modern_call(request_id, "ask_client", {"requests": requests}, **{CAPABILITIES_KEY: capabilities, **meta})


def retry_of(
    call: dict[str, Any], request_id: Any, state: str, responses: dict[str, Any], **meta: Any
) -> dict[str, Any]:
    params = call["params"]
    return {
        **call,
        "id": request_id,
        "params": {
            **params,
            "_meta": {**params["_meta"], **meta},
            "inputResponses": responses,
            "requestState": state,
        },
    }


async def post(http: httpx.AsyncClient, url: str, body: dict[str, Any], **headers: str) -> httpx.Response:
    return await http.post(url, headers={**modern_headers("tools/call", "ask_client"), **headers}, json=body)


async def test_a_modern_client_gets_input_required_and_its_retry_resumes_the_same_call_on_the_retrys_stream() -> None:
    call = modern_ask(1, [SAMPLING], {"sampling": {}}, progressToken="first")
    call["params"]["arguments"]["progress"] = True
    with anyio.fail_after(WAIT):
        async with running_gateway(legacy_child()) as url, httpx.AsyncClient(timeout=WAIT) as http:
            first = messages(await post(http, url, call))
            state = first[-1]["result"]["requestState"]
            retried = await post(http, url, retry_of(call, 2, state, {"k1": SAMPLED}, progressToken="retry"))
    progress, ended = first
    assert progress["params"] == {"progressToken": "first", "progress": 1, "total": 2, "message": "asking"}
    validate(ended["result"], "InputRequiredResult")
    assert ended == {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {
            "resultType": "input_required",
            "inputRequests": {"k1": SAMPLING},
            "requestState": state,
        },
    }
    assert retried.status_code == 200
    progress, final = messages(retried)
    # The same call went on (no second "asking"): its progress and result come under the retry's token and id.
    assert progress["params"] == {"progressToken": "retry", "progress": 2, "total": 2, "message": "answered"}
    assert final["id"] == 2
    assert final["result"]["resultType"] == "complete"
    assert answers(final) == [{"result": SAMPLED}]


async def test_questions_read_together_make_one_round_and_an_input_left_out_is_asked_for_again() -> None:
    call = modern_ask(1, [SAMPLING, ELICITATION], {"sampling": {}, "elicitation": {}})
    call["params"]["arguments"]["together"] = True
    with anyio.fail_after(WAIT):
        async with running_gateway(legacy_child()) as url, httpx.AsyncClient(timeout=WAIT) as http:
            [round_one] = messages(await post(http, url, call))
            asked = round_one["result"]["inputRequests"]
            assert asked == {"k1": SAMPLING, "k2": ELICITATION}
            [round_two] = messages(
                await post(http, url, retry_of(call, 2, round_one["result"]["requestState"], {"k1": SAMPLED}))
            )
            assert round_two["result"]["inputRequests"] == {"k2": asked["k2"]}  # only what is still missing
            state = round_two["result"]["requestState"]
            assert state != round_one["result"]["requestState"]
            [final] = messages(await post(http, url, retry_of(call, 3, state, {"k2": ELICITED})))
    assert final["id"] == 3
    assert answers(final) == [{"result": SAMPLED}, {"result": ELICITED}]


async def test_three_questions_asked_at_once_from_threads_reach_a_modern_client_in_one_round(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A legacy child asks two elicitations and a sampling concurrently (a thread each, so
    the gateway may read them apart): one ``InputRequiredResult`` carries all three, and one
    retry answering them completes the call (issue #23). The window is widened here so that
    a loaded machine's thread scheduling cannot split the round (measured spread: docs).
    (Not roots: a shared child's ``roots/list`` is answered by the gateway with its pool's
    roots, test_roots_keying.)"""
    monkeypatch.setattr(asks, "ASK_GATHER_WINDOW", 0.5)
    second = {"method": "elicitation/create", "params": {**ELICITATION["params"], "message": "Your city?"}}
    asked_for = [ELICITATION, SAMPLING, second]
    call = modern_ask(1, asked_for, {"sampling": {}, "elicitation": {}})
    call["params"]["arguments"]["parallel"] = True
    given = {"elicitation/create": ELICITED, "sampling/createMessage": SAMPLED}
    with anyio.fail_after(WAIT):
        async with running_gateway(legacy_child()) as url, httpx.AsyncClient(timeout=WAIT) as http:
            [round_one] = messages(await post(http, url, call))
            validate(round_one, "JSONRPCResultResponse")
            validate(round_one["result"], "InputRequiredResult")
            asked = round_one["result"]["inputRequests"]
            assert sorted(entry["method"] for entry in asked.values()) == sorted(r["method"] for r in asked_for)
            responses = {key: given[entry["method"]] for key, entry in asked.items()}
            retry = retry_of(call, 2, round_one["result"]["requestState"], responses)
            [final] = messages(await post(http, url, retry))
    validate(final, "JSONRPCResultResponse")
    assert final["id"] == 2
    assert final["result"]["resultType"] == "complete"
    assert answers(final) == [{"result": ELICITED}, {"result": SAMPLED}, {"result": ELICITED}]


async def test_tampered_expired_replayed_and_mismatched_request_state_are_each_refused_with_a_clear_error() -> None:
    call = modern_ask(1, [ELICITATION], {"elicitation": {}})
    with anyio.fail_after(WAIT):
        async with (
            running_gateway(legacy_child(), state_keys=StateKeys.fixed(SECRET)) as url,
            httpx.AsyncClient(timeout=WAIT) as http,
        ):
            [ended] = messages(await post(http, url, call))
            state: str = ended["result"]["requestState"]

            async def refused(body: dict[str, Any]) -> dict[str, Any]:
                reply = await post(http, url, body)
                assert reply.status_code == 400, reply.text
                error: dict[str, Any] = reply.json()["error"]
                assert reply.json()["id"] == body["id"]
                assert error["code"] == INVALID_PARAMS
                return error

            prefix, claims, signature = state.split(".")
            tampered = f"{prefix}.{claims[:-2]}{'A' if claims[-2] != 'A' else 'B'}{claims[-1]}.{signature}"
            error = await refused(retry_of(call, 2, tampered, {"k1": ELICITED}))
            assert error["data"] == {"requestState": "tampered"}
            assert "failed verification" in error["message"]

            expired_claims = StateClaims(
                "some-id", "", "test", "tools/call", params_digest(call["params"]), expires_at=time.time() - 1
            )
            error = await refused(retry_of(call, 3, encode_state(expired_claims, SECRET), {"k1": ELICITED}))
            assert error["data"] == {"requestState": "expired"}
            assert "expired" in error["message"]

            other = retry_of(call, 4, state, {"k1": ELICITED})
            other["params"]["arguments"] = {"requests": [ELICITATION], "progress": True}
            error = await refused(other)
            assert error["data"] == {"requestState": "mismatch"}
            assert "params differ" in error["message"]

            good = retry_of(call, 5, state, {"k1": ELICITED})
            [final] = messages(await post(http, url, good))  # the refusals did not use the state up
            assert answers(final) == [{"result": ELICITED}]

            error = await refused({**good, "id": 6})
            assert error["data"] == {"requestState": "replayed"}
            assert "already used" in error["message"]


async def test_a_retry_by_another_principal_is_refused_and_the_owner_can_still_retry() -> None:
    tokens = TokenStore(["alice:alice-token-0123456789", "bob:bob-token-0123456789ab"])
    alice = {"authorization": "Bearer alice-token-0123456789"}
    bob = {"authorization": "Bearer bob-token-0123456789ab"}
    call = modern_ask(1, [ROOTS], {"roots": {}})
    with anyio.fail_after(WAIT):
        async with (
            running_gateway(legacy_child(), tokens=tokens, roots_learn_wait=0) as url,
            httpx.AsyncClient(timeout=WAIT) as http,
        ):
            [ended] = messages(await post(http, url, call, **alice))  # the child's roots/list, as a round
            [(key, asked)] = ended["result"]["inputRequests"].items()
            assert asked["method"] == "roots/list"
            retry = retry_of(call, 2, ended["result"]["requestState"], {key: CLIENT_ROOTS})
            stolen = await post(http, url, retry, **bob)
            owned = await post(http, url, retry, **alice)
    assert stolen.status_code == 400
    assert "another principal" in stolen.json()["error"]["message"]
    assert answers(owned.json()) == [{"result": CLIENT_ROOTS}]


async def wait_for_a_cancellation(
    http: httpx.AsyncClient, url: str, records: Records, text: str, capabilities: dict[str, Any]
) -> list[Any]:
    """The child's cancelled request ids, asked once the gateway logged ``text`` (bounded): the
    record comes as the call is closed, which queues its cancel to the child ahead of the ask.
    ``capabilities``: the cancelled call's, so that a child told the same (its pool) answers."""
    with anyio.fail_after(WAIT):
        await records.wait_for_text(text)
        ids_call = modern_call("ids", "cancelled_ids", **{CAPABILITIES_KEY: capabilities})
        reply = await http.post(url, headers=modern_headers("tools/call", "cancelled_ids"), json=ids_call)
        ids: list[Any] = reply.json()["result"]["structuredContent"]["ids"]
        return ids


async def test_an_undeclared_capability_gets_32021_and_the_call_is_cancelled_at_the_child() -> None:
    with anyio.fail_after(WAIT), recording("gateway.access") as access:
        # One child: the call asked its client (and lingers, ``childquestions.ASKER_LINGERS``),
        # so the question about what it was told waits for that child rather than starting one.
        async with running_gateway(legacy_child(), pool_size=1) as url, httpx.AsyncClient(timeout=WAIT) as http:
            refused = await post(http, url, modern_ask(1, [ELICITATION], {"sampling": {}}))
            cancelled = await wait_for_a_cancellation(http, url, access, "code=-32021", {"sampling": {}})
    assert refused.status_code == 400
    assert refused.headers["content-type"] == "application/json"
    body = refused.json()
    validate(body, "JSONRPCErrorResponse")
    validate(body, "MissingRequiredClientCapabilityError")
    assert body["id"] == 1
    assert body["error"]["code"] == MISSING_CLIENT_CAPABILITY
    assert body["error"]["data"] == {"requiredCapabilities": {"elicitation": {"form": {}}}}
    assert len(cancelled) == 1


async def test_undeclared_roots_are_answered_by_the_gateway_rather_than_refused() -> None:
    with anyio.fail_after(WAIT):
        async with (
            running_gateway(legacy_child(roots=CONFIGURED_ROOTS)) as url,
            httpx.AsyncClient(timeout=WAIT) as http,
        ):
            reply = await post(http, url, modern_ask(1, [ROOTS], {}))
    assert reply.status_code == 200
    assert answers(reply.json()) == [{"result": {"roots": list(CONFIGURED_ROOTS)}}]


async def test_a_call_whose_retry_never_comes_is_cancelled_at_the_child_and_its_state_refused() -> None:
    call = modern_ask(1, [SAMPLING], {"sampling": {}})
    with anyio.fail_after(WAIT), recording("gateway.mrtr") as parked:
        async with (
            running_gateway(legacy_child(input_timeout=0.5), pool_size=1) as url,  # as above: its child
            httpx.AsyncClient(timeout=WAIT) as http,
        ):
            [ended] = messages(await post(http, url, call))
            cancelled = await wait_for_a_cancellation(http, url, parked, "no retry came within", {"sampling": {}})
            late = await post(http, url, retry_of(call, 2, ended["result"]["requestState"], {"k1": SAMPLED}))
    assert len(cancelled) == 1
    assert late.status_code == 400
    assert late.json()["error"]["data"]["requestState"] in ("expired", "unknown")


async def test_a_round_is_held_for_its_retry_no_longer_than_the_round_timeout() -> None:
    # --round-timeout (0.5 s here) bounds a client's parked round below --input-timeout (30 s):
    # then the call is cancelled at the child, and its retry is refused.
    call = modern_ask(1, [SAMPLING], {"sampling": {}})
    with anyio.fail_after(WAIT), recording("gateway.mrtr") as parked:
        spec = legacy_child(input_timeout=30, round_timeout=0.5)
        async with running_gateway(spec, pool_size=1) as url, httpx.AsyncClient(timeout=WAIT) as http:
            [ended] = messages(await post(http, url, call))
            held = await parked.wait_for_text("parked for the client's input")
            cancelled = await wait_for_a_cancellation(http, url, parked, "no retry came within", {"sampling": {}})
            late = await post(http, url, retry_of(call, 2, ended["result"]["requestState"], {"k1": SAMPLED}))
    assert 0 < float(held.getMessage().rsplit("up to ", 1)[1].removesuffix(" s")) <= 0.5
    assert len(cancelled) == 1
    assert late.status_code == 400
    assert late.json()["error"]["data"]["requestState"] in ("expired", "unknown")


async def test_a_question_a_cancelled_call_asks_later_never_reaches_another_clients_call(tmp_path: Path) -> None:
    """A tool that does not stop at the cancel: its client left a round unanswered, the round
    timed out and the call was cancelled at the child, and the tool, its first question
    refused, asked its second. Another client's call of a quiet tool was in flight on the same
    child, and was given that question as its own (a soak saw it: the other client got a
    round asking for the first client's input). The cancelled call lingers as the question's
    candidate now (``childquestions.ASKER_LINGERS``): the question is held while the other
    call runs, the other call ends with its own result, and then the gateway answers it."""
    asks_twice = modern_ask(1, [ELICITATION, ELICITATION], {"elicitation": {}})  # one after the other
    gate = tmp_path / "gate"
    with anyio.fail_after(WAIT), recording("gateway") as records:
        spec = legacy_child(input_timeout=30, round_timeout=0.5)
        async with (
            running_gateway(spec, pool_size=1, roots_learn_wait=0) as url,
            httpx.AsyncClient(timeout=WAIT) as http,
        ):

            async def wait_gate(request_id: int, path: Path) -> httpx.Response:
                call = modern_call(request_id, "wait_gate", {"gate": str(path)}, **{CAPABILITIES_KEY: ALL})
                return await http.post(url, headers=modern_headers("tools/call", "wait_gate"), json=call)

            (tmp_path / "open").touch()
            assert (await wait_gate(10, tmp_path / "open")).json()["result"]["structuredContent"]["gate"]
            await records.wait_for_text("wait_gate asked nothing; it now shares children")
            [first_round] = messages(await post(http, url, asks_twice))
            assert first_round["result"]["resultType"] == "input_required"  # its client never answers
            others: list[httpx.Response] = []
            came = anyio.Event()
            async with anyio.create_task_group() as tg:

                async def other_client() -> None:  # a quiet call, in flight when the question comes
                    others.append(await wait_gate(11, gate))
                    came.set()

                async def question_held() -> None:
                    await records.wait_for_text("held until only one is left")
                    came.set()

                tg.start_soon(other_client)
                tg.start_soon(question_held)
                await came.wait()  # the question was held, or went to the other call as its round
                assert not others, others[0].text  # the other call was not given the question
                gate.touch()
            await records.wait_for_text("a request that may have asked it was cancelled")  # held: maybe its
    [other] = others
    assert other.status_code == 200, other.text
    assert other.json()["result"]["structuredContent"]["gate"] == str(gate)
    assert "inputRequests" not in other.text


async def test_a_held_question_goes_to_its_asker_when_the_other_candidates_client_left_and_its_tool_ended(
    tmp_path: Path,
) -> None:
    """One child: a quiet tool's call of one client is in flight when another client's dialog
    asks, so the question is held (it may be either's). The quiet call's client hangs up. Its
    tool never asked, so the gateway holds its cancel back a moment (``ASKER_LINGERS``); the
    tool passes its gate and answers on its own meanwhile, which proves the question was not
    its: the dialog's client gets its round. Before, the cancel went at once and the gateway
    declined the dialog's question (a soak saw it when a task's countdown beside a dialog was
    cancelled by its client)."""
    gate = tmp_path / "gate"
    dialog = modern_ask(1, [ELICITATION], {"elicitation": {}})
    with anyio.fail_after(WAIT), recording("gateway") as records:
        async with (
            running_gateway(legacy_child(input_timeout=30), pool_size=1, roots_learn_wait=0) as url,
            httpx.AsyncClient(timeout=WAIT) as http,
        ):

            def wait_gate(request_id: int, path: Path) -> dict[str, Any]:
                return modern_call(
                    request_id, "wait_gate", {"gate": str(path)}, progressToken=request_id, **{CAPABILITIES_KEY: ALL}
                )

            opened = await http.post(
                url, headers=modern_headers("tools/call", "wait_gate"), json=wait_gate(10, tmp_path)
            )
            assert messages(opened)[-1]["result"]["structuredContent"]["gate"] == str(tmp_path)  # a dir: open
            await records.wait_for_text("wait_gate asked nothing; it now shares children")
            at_the_gate, hang_up = anyio.Event(), anyio.Event()
            rounds: list[httpx.Response] = []

            async def quiet_client() -> None:  # its own connection, closed mid-stream
                async with (
                    httpx.AsyncClient(timeout=WAIT) as own,
                    own.stream(
                        "POST", url, headers=modern_headers("tools/call", "wait_gate"), json=wait_gate(11, gate)
                    ) as reply,
                ):
                    async for chunk in reply.aiter_bytes():  # (leaving the loop would hang up)
                        if b"waiting at the gate" in chunk:
                            at_the_gate.set()
                            await hang_up.wait()
                            return

            async def dialog_client() -> None:
                rounds.append(await post(http, url, dialog))

            async with anyio.create_task_group() as tg:
                tg.start_soon(quiet_client)
                await at_the_gate.wait()  # the quiet call is in flight on the child
                tg.start_soon(dialog_client)
                await records.wait_for_text("held until only one is left")  # the dialog's, or the quiet call's
                hang_up.set()
                await records.wait_for_text("outcome=cancelled")  # the gateway has ended the quiet call
                gate.touch()  # its tool passes the gate and answers on its own
            [first] = messages(rounds[0])
            assert first["result"].get("resultType") == "input_required", first
            [(key, asked)] = first["result"]["inputRequests"].items()
            assert asked["params"]["message"] == "Your name?"
            state = first["result"]["requestState"]
            final = messages(await post(http, url, retry_of(dialog, 2, state, {key: ELICITED})))[-1]
    assert answers(final) == [{"result": ELICITED}]
    assert not any("may have asked it was cancelled" in record.getMessage() for record in records.records)


# -- a modern child's input_required, for legacy clients ------------------------------------

NAME_ELICITATION = {
    "method": "elicitation/create",
    "params": {
        "mode": "form",
        "message": "Your name?",
        "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
    },
}


def modern_child(*flags: str, **options: Any) -> ChildSpec:
    return server_spec("--era", "modern", *flags, **options)


def needs_input(request_id: Any, **arguments: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": "needs_input", "arguments": arguments},
    }


def elicited(name: str) -> dict[str, Any]:
    return {"action": "accept", "content": {"name": name}}


async def test_a_modern_childs_input_required_reaches_a_legacy_client_as_a_request_and_its_answer_completes() -> None:
    with anyio.fail_after(WAIT):
        async with running_gateway(modern_child()) as url, httpx.AsyncClient(timeout=WAIT) as http:
            headers = await open_session(http, url, {"elicitation": {}})
            async with http.stream("POST", url, headers=headers, json=needs_input(7)) as reply:
                assert reply.headers["content-type"].startswith("text/event-stream")
                stream = sse(reply)
                asked = await anext(stream)
                assert asked == {"jsonrpc": "2.0", "id": "g-1", **NAME_ELICITATION}
                validate(asked, "ElicitRequest", "2025-11-25")
                posted = await http.post(
                    url, headers=headers, json={"jsonrpc": "2.0", "id": "g-1", "result": elicited("Ada")}
                )
                assert posted.status_code == 202
                final = await anext(stream)
    assert final["id"] == 7
    result = final["result"]
    assert result["content"] == [{"type": "text", "text": "hello Ada"}]
    assert result["structuredContent"] == {"name": "Ada", "rounds": 1}
    assert not {"resultType", "inputRequests", "requestState"} & result.keys()  # modern-only fields stripped
    validate(final, "JSONRPCResponse", "2025-11-25")


async def test_each_input_round_retries_the_child_with_a_new_id_the_answers_and_its_request_state_unchanged(
    tmp_path: Any,
) -> None:
    record = tmp_path / "stdin.jsonl"
    with anyio.fail_after(WAIT):
        async with (
            running_gateway(modern_child("--record", str(record))) as url,
            httpx.AsyncClient(timeout=WAIT) as http,
        ):
            headers = await open_session(http, url, {"elicitation": {}})
            async with http.stream("POST", url, headers=headers, json=needs_input("r", rounds=3)) as reply:
                stream = sse(reply)
                for expected_id in ("g-1", "g-2", "g-3"):  # one request per round, ids never reused
                    asked = await anext(stream)
                    assert (asked["id"], asked["method"]) == (expected_id, "elicitation/create"), asked
                    answer = {"jsonrpc": "2.0", "id": expected_id, "result": elicited("Ada")}
                    assert (await http.post(url, headers=headers, json=answer)).status_code == 202
                final = await anext(stream)
    assert final == {
        "jsonrpc": "2.0",
        "id": "r",
        "result": {
            "content": [{"type": "text", "text": "hello Ada"}],
            "structuredContent": {"name": "Ada", "rounds": 3},
        },
    }
    lines = [orjson.loads(line) for line in record.read_bytes().splitlines() if line.strip()]
    calls = [line for line in lines if line.get("method") == "tools/call"]
    assert len({call["id"] for call in calls}) == 4  # the first call and three retries, each a new child id
    assert [call["params"].get("requestState") for call in calls] == [None, "opaque-123", "round-2-Ada", "round-3-Ada"]
    assert [call["params"].get("inputResponses") for call in calls] == [
        None,
        {"name": elicited("Ada")},
        {"again-2": elicited("Ada")},
        {"again-3": elicited("Ada")},
    ]
    assert all(call["params"]["arguments"] == {"rounds": 3} for call in calls)  # the original params kept


async def test_a_legacy_session_without_the_capability_gets_a_clear_error_and_nothing_is_left_waiting() -> None:
    with anyio.fail_after(WAIT):
        async with running_gateway(modern_child()) as url, httpx.AsyncClient(timeout=WAIT) as http:
            headers = await open_session(http, url, {"sampling": {}})
            reply = await http.post(url, headers=headers, json=needs_input(1))
            again = await http.post(url, headers=headers, json=needs_input(2))  # the child is free
    assert reply.headers["content-type"] == "application/json"  # nothing was sent to the client
    error = reply.json()["error"]
    assert error["code"] == CODE_NO_CLIENT_INPUT
    assert "did not declare the elicitation.form capability at initialize" in error["message"]
    assert error["data"]["requiredCapabilities"] == {"elicitation": {"form": {}}}
    assert again.json()["error"]["code"] == CODE_NO_CLIENT_INPUT


async def test_roots_the_session_did_not_declare_are_answered_from_the_configured_roots() -> None:
    with anyio.fail_after(WAIT):
        async with (
            running_gateway(modern_child(roots=CONFIGURED_ROOTS)) as url,
            httpx.AsyncClient(timeout=WAIT) as http,
        ):
            headers = await open_session(http, url, {"elicitation": {}})
            async with http.stream("POST", url, headers=headers, json=needs_input(1, roots=True)) as reply:
                stream = sse(reply)
                asked = await anext(stream)  # only the elicitation: the gateway answers roots itself
                assert (asked["id"], asked["method"]) == ("g-1", "elicitation/create")
                await http.post(url, headers=headers, json={"jsonrpc": "2.0", "id": "g-1", "result": elicited("Ada")})
                final = await anext(stream)
    assert final["result"]["structuredContent"] == {"name": "Ada", "rounds": 1, "roots": list(CONFIGURED_ROOTS)}


async def test_a_session_that_declared_roots_is_asked_for_them_in_the_same_round() -> None:
    with anyio.fail_after(WAIT):
        async with (
            running_gateway(modern_child(roots=CONFIGURED_ROOTS)) as url,
            httpx.AsyncClient(timeout=WAIT) as http,
        ):
            headers = await open_session(http, url, {"elicitation": {}, "roots": {}})
            async with http.stream("POST", url, headers=headers, json=needs_input(1, roots=True)) as reply:
                stream = sse(reply)
                first, second = await anext(stream), await anext(stream)
                assert {first["method"], second["method"]} == {"elicitation/create", "roots/list"}
                for asked in (second, first):  # answered in any order
                    result = CLIENT_ROOTS if asked["method"] == "roots/list" else elicited("Ada")
                    answer = {"jsonrpc": "2.0", "id": asked["id"], "result": result}
                    assert (await http.post(url, headers=headers, json=answer)).status_code == 202
                final = await anext(stream)
    assert final["result"]["structuredContent"]["roots"] == CLIENT_ROOTS["roots"]


async def test_a_request_cancelled_while_its_client_is_asked_ends_and_a_late_answer_is_dropped() -> None:
    with anyio.fail_after(WAIT):
        async with running_gateway(modern_child()) as url, httpx.AsyncClient(timeout=WAIT) as http:
            headers = await open_session(http, url, {"elicitation": {}})
            async with http.stream("POST", url, headers=headers, json=needs_input(5)) as reply:
                stream = sse(reply)
                assert (await anext(stream))["id"] == "g-1"
                cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 5}}
                assert (await http.post(url, headers=headers, json=cancel)).status_code == 202
                with pytest.raises(StopAsyncIteration):  # a cancelled request is not answered
                    await anext(stream)
            late = await http.post(url, headers=headers, json={"jsonrpc": "2.0", "id": "g-1", "result": ELICITED})
            async with http.stream("POST", url, headers=headers, json=needs_input(6)) as reply:
                stream = sse(reply)
                assert (await anext(stream))["id"] == "g-2"  # the session and child serve on
                await http.post(url, headers=headers, json={"jsonrpc": "2.0", "id": "g-2", "result": elicited("Ada")})
                after = await anext(stream)
    assert late.status_code == 202
    assert after["result"]["content"] == [{"type": "text", "text": "hello Ada"}]


async def test_a_batched_request_cannot_carry_input_requests_and_gets_a_clear_error() -> None:
    with anyio.fail_after(WAIT):
        async with running_gateway(modern_child()) as url, httpx.AsyncClient(timeout=WAIT) as http:
            headers = await open_session(http, url, {"elicitation": {}}, "2025-03-26")
            reply = await http.post(url, headers=headers, json=[needs_input(1)])
    [answer] = reply.json()
    assert answer["error"]["code"] == CODE_NO_CLIENT_INPUT
    assert "a batch" in answer["error"]["message"]


async def test_an_input_request_the_legacy_client_never_answers_ends_the_request_with_a_timeout_error() -> None:
    with anyio.fail_after(WAIT):
        async with (
            running_gateway(modern_child(input_timeout=0.5)) as url,
            httpx.AsyncClient(timeout=WAIT) as http,
        ):
            headers = await open_session(http, url, {"elicitation": {}})
            async with http.stream("POST", url, headers=headers, json=needs_input(1)) as reply:
                stream = sse(reply)
                assert (await anext(stream))["id"] == "g-1"
                final = await anext(stream)  # no answer: the gateway's bound ends the wait
            late = await http.post(url, headers=headers, json={"jsonrpc": "2.0", "id": "g-1", "result": ELICITED})
    assert final["id"] == 1
    assert final["error"]["code"] == CODE_INPUT_TIMEOUT
    assert "did not answer elicitation/create within 0.5 s" in final["error"]["message"]
    assert late.status_code == 202  # accepted, and dropped: nobody waits for it now


async def test_a_client_error_for_an_input_request_ends_the_request_quoting_it() -> None:
    refusal = {"code": -1, "message": "the user closed the dialog"}
    with anyio.fail_after(WAIT):
        async with running_gateway(modern_child()) as url, httpx.AsyncClient(timeout=WAIT) as http:
            headers = await open_session(http, url, {"elicitation": {}})
            async with http.stream("POST", url, headers=headers, json=needs_input(1)) as reply:
                stream = sse(reply)
                assert (await anext(stream))["id"] == "g-1"
                await http.post(url, headers=headers, json={"jsonrpc": "2.0", "id": "g-1", "error": refusal})
                final = await anext(stream)
    assert final["error"]["code"] == CODE_NO_CLIENT_INPUT
    assert "the user closed the dialog" in final["error"]["message"]
    assert final["error"]["data"]["clientError"] == refusal


async def test_a_modern_child_that_keeps_asking_is_cut_off_after_the_round_limit() -> None:
    with anyio.fail_after(WAIT):
        async with running_gateway(modern_child()) as url, httpx.AsyncClient(timeout=WAIT) as http:
            headers = await open_session(http, url, {"elicitation": {}})
            async with http.stream(
                "POST", url, headers=headers, json=needs_input(1, rounds=MAX_INPUT_ROUNDS + 1)
            ) as reply:
                stream = sse(reply)
                while "method" in (message := await anext(stream)):
                    answer = {"jsonrpc": "2.0", "id": message["id"], "result": elicited("Ada")}
                    assert (await http.post(url, headers=headers, json=answer)).status_code == 202
    assert message["id"] == 1
    assert f"after {MAX_INPUT_ROUNDS} rounds" in message["error"]["message"]


async def test_the_sdk_client_in_legacy_mode_answers_a_modern_childs_input_required_with_its_callback() -> None:
    asked: list[str] = []

    async def ada(context: Any, params: sdk.ElicitRequestParams) -> sdk.ElicitResult:
        asked.append(params.message)
        return sdk.ElicitResult(action="accept", content={"name": "Ada"})

    with anyio.fail_after(WAIT):
        async with (
            running_gateway(modern_child()) as url,
            Client(url, mode="legacy", elicitation_callback=ada) as client,
        ):
            result = await client.call_tool("needs_input", {"rounds": 2})
    assert result.structured_content == {"name": "Ada", "rounds": 2}
    assert asked == ["Your name?", "Your name again (2)?"]
