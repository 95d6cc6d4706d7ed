"""Hostile input at the edge (issue #13 rows 1, 6, 8, 9, 10, 13, and refusals in the access
log and metrics), against a real gateway on 127.0.0.1, bounded in time and count."""

from __future__ import annotations

import gc
import io
import logging
import tracemalloc
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import orjson
import pytest

from gateway.http.auth import TokenStore
from gateway.ops.logs import JsonFormatter, TextFormatter
from gateway.protocol.attribution import AskPolicy
from gateway.protocol.ingress import MAX_BATCH_MESSAGES, MAX_JSON_DEPTH
from gateway.protocol.jsonrpc import INVALID_PARAMS, INVALID_REQUEST
from gateway.relay.router import Router
from gateway.relay.server_config import ServerConfig
from gateway.stdio.pool import PoolSettings
from tests.conftest import server_spec
from tests.filewatch import wait_until
from tests.gateway_server import (
    BASE_HEADERS,
    MODERN_META,
    OPERATOR,
    app_for,
    legacy_initialize,
    modern_call,
    modern_headers,
    operator_tokens,
    running_gateway,
    serving,
)
from tests.integration.test_operations import metric
from tests.logrecords import recording

pytestmark = pytest.mark.anyio

WAIT = 60
METRICS_PAGE_LIMIT = 64 * 1024
ALICE = "alice-token-0123456789abcdef"


class AccessLog(logging.Handler):
    """Collects ``gateway.access`` records; ``wait_for`` waits (on an event) for a matching one."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []
        self._changed = anyio.Event()

    def emit(self, record: logging.LogRecord) -> None:  # called on the event loop, by the gateway
        self.records.append(record)
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_for(self, predicate: Callable[[logging.LogRecord], bool]) -> logging.LogRecord:
        while True:
            changed = self._changed
            for record in self.records:
                if predicate(record):
                    return record
            await changed.wait()


@asynccontextmanager
async def access_log() -> AsyncIterator[AccessLog]:
    logger = logging.getLogger("gateway.access")
    handler = AccessLog()
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


async def open_session(http: httpx.AsyncClient, url: str, version: str = "2025-11-25", **extra: str) -> dict[str, str]:
    init = await http.post(url, headers={**BASE_HEADERS, **extra}, json=legacy_initialize(version))
    assert init.status_code == 200, init.text
    return {**BASE_HEADERS, **extra, "mcp-session-id": init.headers["mcp-session-id"]}


def legacy_call(request_id: int, tool: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments or {}},
    }


def modern_note(method: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": method, "params": {"_meta": MODERN_META}}


def modern_request(request_id: int, method: str, **params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": {"_meta": MODERN_META, **params}}


async def served(http: httpx.AsyncClient, url: str, **headers: str) -> tuple[int, int]:
    """(requests served, requests in flight) over every child of the first server."""
    status = (await http.get(url.replace("/mcp", "/status"), headers=headers)).json()
    children = [c for pool in status["servers"][0]["pools"].values() for c in pool["children"]]
    return sum(c["served"] for c in children), sum(c["in_flight"] for c in children)


def started_sleep(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` (a ``sleep`` call) asking for a progress notification when the sleep begins."""
    params = body["params"]
    meta = {**params.get("_meta", {}), "progressToken": f"started-{body['id']}"}
    return {**body, "params": {**params, "arguments": {**params["arguments"], "progress": True}, "_meta": meta}}


async def sleep_running(
    http: httpx.AsyncClient,
    url: str,
    headers: dict[str, str],
    body: dict[str, Any],
    begun: list[Any],
    running: anyio.Event,
    count: int = 1,
) -> None:
    """POST the sleep ``body`` (made to report its start) and read its stream; once ``count``
    sleeps have begun at the child (their progress came), ``running`` is set."""
    async with http.stream("POST", url, headers=headers, json=started_sleep(body)) as reply:
        async for line in reply.aiter_lines():
            if line.startswith("data:") and '"notifications/progress"' in line:
                begun.append(body["id"])
                if len(begun) == count:
                    running.set()


# --- Row 1: metric labels from a fixed set -------------------------------------------------------


@pytest.mark.timeout(WAIT * 3)  # 2,200 requests: on a busy machine this takes a while
async def test_thousands_of_unique_method_names_keep_metrics_under_64_kib_in_both_eras() -> None:
    # Notifications are accepted without a child round trip, so thousands stay cheap; some
    # requests take the path through the child too.
    notes, calls, workers = 1000, 100, 8
    with anyio.fail_after(WAIT * 2):
        async with running_gateway(server_spec()) as url, httpx.AsyncClient(timeout=WAIT) as http:
            session = await open_session(http, url)

            async def send(worker: int) -> None:
                for n in range(worker, notes, workers):
                    method = f"notifications/x-{n}"
                    modern = await http.post(url, headers=modern_headers(method), json=modern_note(method))
                    legacy = await http.post(url, headers=session, json={"jsonrpc": "2.0", "method": method})
                    assert (modern.status_code, legacy.status_code) == (202, 202)
                for n in range(worker, calls, workers):
                    method = f"x/unique-{n}"
                    modern = await http.post(url, headers=modern_headers(method), json=modern_request(n, method))
                    assert modern.json()["error"]["code"] == -32601  # the child's answer: not found
                    legacy = await http.post(url, headers=session, json={"jsonrpc": "2.0", "id": n, "method": method})
                    assert legacy.json()["error"]["code"] == -32601

            async with anyio.create_task_group() as tg:
                for worker in range(workers):
                    tg.start_soon(send, worker)
            page = await http.get(url.replace("/mcp", "/metrics"))
    assert len(page.content) < METRICS_PAGE_LIMIT
    assert "unique" not in page.text
    assert "notifications/x-" not in page.text
    for era in ("modern", "legacy"):
        assert metric(page.text, "mcp_gateway_requests_total", method="other", era=era, status="202") == notes
        assert metric(page.text, "mcp_gateway_requests_total", method="other", era=era, outcome="error") == calls


async def test_megabyte_method_names_are_not_kept_anywhere() -> None:
    count, size = 20, 2**20
    with anyio.fail_after(WAIT * 2):
        async with (
            access_log() as records,
            running_gateway(server_spec()) as url,
            httpx.AsyncClient(timeout=WAIT) as http,
        ):
            session = await open_session(http, url)

            async def send(n: int) -> None:
                body = orjson.dumps({"jsonrpc": "2.0", "id": n, "method": f"m{n}" + "x" * size})
                reply = await http.post(url, headers=session, content=body)
                assert reply.status_code == 200

            await send(-1)  # warm every buffer and cache on the way first
            gc.collect()
            tracemalloc.start()
            try:
                for n in range(count):
                    await send(n)
                await records.wait_for(lambda r: str(getattr(r, "rpc_method", "")).startswith(f"m{count - 1}"))
                gc.collect()
                retained, _ = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            page = await http.get(url.replace("/mcp", "/metrics"))
    assert retained < 4 * size  # 20 MiB of method names went through; none of them stayed
    assert len(page.content) < METRICS_PAGE_LIMIT
    assert all(len(r.getMessage()) < 1000 for r in records.records)  # the access line cuts the name


# --- Row 6: batches ------------------------------------------------------------------------------


async def test_each_request_of_a_batch_counts_against_the_principals_in_flight_limit() -> None:
    with anyio.fail_after(WAIT):
        async with (
            running_gateway(server_spec(), max_requests_per_principal=4) as url,
            httpx.AsyncClient(timeout=WAIT) as http,
        ):
            session = await open_session(http, url, "2025-03-26")
            async with anyio.create_task_group() as tg:
                begun: list[Any] = []
                running = anyio.Event()
                sleep, sleep_call = modern_headers("tools/call", "sleep"), modern_call(1, "sleep", {"ms": 60_000})
                tg.start_soon(sleep_running, http, url, sleep, sleep_call, begun, running)
                await running.wait()
                before, _ = await served(http, url)
                too_many = await http.post(url, headers=session, json=[legacy_call(i, "pid") for i in range(4)])
                assert too_many.status_code == 429, too_many.text
                assert too_many.headers["retry-after"] == "1"
                assert "a batch of 4 requests" in too_many.json()["error"]["message"]
                assert (await served(http, url))[0] == before  # refused before any entry ran
                fits = await http.post(url, headers=session, json=[legacy_call(i, "pid") for i in range(3)])
                assert fits.status_code == 200
                assert sorted(answer["id"] for answer in fits.json()) == [0, 1, 2]
                tg.cancel_scope.cancel()  # the sleeping call: the disconnect cancels it at the child
            # Every slot came back: four more single requests fit at once.
            async with anyio.create_task_group() as tg:
                for i in range(4):
                    tg.start_soon(lambda i=i: http.post(url, headers=session, json=legacy_call(i, "pid")))
            fits_again = await http.post(url, headers=session, json=[legacy_call(i, "pid") for i in range(4)])
            assert fits_again.status_code == 200


async def test_legacy_calls_whose_clients_hung_up_still_count_until_they_end() -> None:
    # A legacy client's disconnect is not a cancellation: the call goes on at the child, and so
    # does its slot, or a client could pile up calls by hanging up.
    with anyio.fail_after(WAIT), recording("gateway.access") as access:
        async with (
            # Both calls share the session's child (the test server never asks here).
            running_gateway(
                server_spec(), pool=PoolSettings(child_asks=AskPolicy.NEVER), max_requests_per_principal=2
            ) as url,
            httpx.AsyncClient(timeout=WAIT) as http,
        ):
            session = await open_session(http, url)
            async with anyio.create_task_group() as tg:
                begun: list[Any] = []
                running = anyio.Event()
                for i in (1, 2):
                    sleep_call = legacy_call(i, "sleep", {"ms": 60_000})
                    tg.start_soon(sleep_running, http, url, session, sleep_call, begun, running, 2)
                await running.wait()  # both calls run at the child
                tg.cancel_scope.cancel()  # both clients hang up
            refused = await http.post(url, headers=session, json=legacy_call(3, "pid"))
            assert refused.status_code == 429
            assert (await served(http, url))[1] == 2  # both calls still run at the child
            # At its limit a client can still end its session, which cancels both calls.
            assert (await http.delete(url, headers=session)).status_code == 204
            # The slots come back as the cancelled exchanges finish (each then logs its access
            # line): then both fit at once again.
            await access.wait_for(lambda r: r.rpc_method == "tools/call" and r.status != 429, 2)  # type: ignore[attr-defined]
            assert (await served(http, url))[1] == 0
            batch_of_two = [legacy_call(i, "pid") for i in (5, 6)]
            init = await http.post(url, headers=BASE_HEADERS, json=legacy_initialize("2025-03-26"))
            assert init.status_code == 200, init.text
            session = {**BASE_HEADERS, "mcp-session-id": init.headers["mcp-session-id"]}
            fine = await http.post(url, headers=session, json=batch_of_two)
            assert fine.status_code == 200


async def test_a_batch_over_the_size_limit_is_refused_before_any_entry_runs() -> None:
    server = ServerConfig("test", server_spec(), max_batch_size=5)
    with anyio.fail_after(WAIT):
        async with serving(app_for(Router(server))) as base, httpx.AsyncClient(timeout=WAIT) as http:
            url = f"{base}/mcp"
            session = await open_session(http, url, "2025-03-26")
            await http.post(url, headers=session, json=legacy_call(0, "pid"))
            before, _ = await served(http, url)
            for size in (6, 1000):
                refused = await http.post(url, headers=session, json=[legacy_call(i, "pid") for i in range(size)])
                assert refused.status_code == 400
                assert refused.json()["error"]["code"] == INVALID_REQUEST
                assert refused.json()["error"]["message"] == (
                    f"a batch of {size} messages is too large: at most 5 are accepted"
                )
            assert (await served(http, url))[0] == before
            accepted = await http.post(url, headers=session, json=[legacy_call(i, "pid") for i in range(5)])
            assert len(accepted.json()) == 5
        async with running_gateway(server_spec()) as url, httpx.AsyncClient(timeout=WAIT) as http:
            session = await open_session(http, url, "2025-03-26")
            batch = [legacy_call(i, "pid") for i in range(MAX_BATCH_MESSAGES + 1)]
            assert (await http.post(url, headers=session, json=batch)).status_code == 400  # the default


# --- Row 8: nesting ------------------------------------------------------------------------------


async def test_params_nested_deeper_than_the_limit_get_400_in_both_eras_and_the_gateway_goes_on() -> None:
    deep: Any = "bottom"
    for _ in range(300):  # deeper than orjson writes (~255): this used to end in a 500
        deep = [deep]
    with anyio.fail_after(WAIT):
        async with running_gateway(server_spec()) as url, httpx.AsyncClient(timeout=WAIT) as http:
            session = await open_session(http, url)
            modern = await http.post(
                url, headers=modern_headers("tools/call", "echo"), json=modern_call(7, "echo", {"message": deep})
            )
            legacy = await http.post(url, headers=session, json=legacy_call(8, "echo", {"message": deep}))
            for reply, request_id in ((modern, 7), (legacy, 8)):
                assert reply.status_code == 400, reply.text
                assert reply.json()["id"] == request_id
                assert reply.json()["error"]["code"] == INVALID_REQUEST
                assert reply.json()["error"]["message"] == f"the JSON is nested more than {MAX_JSON_DEPTH} levels deep"
            fine = await http.post(
                url, headers=modern_headers("tools/call", "echo"), json=modern_call(9, "echo", {"message": "ok"})
            )
            assert fine.json()["result"]["content"][0]["text"] == "ok"


# --- Row 9: requestState -------------------------------------------------------------------------


@pytest.mark.parametrize("state", ["mcpgw2.é.AAAA", "mcpgw2.eyJ9.\u00ff\u00ff", "mcpgw2.\U0001f600"])
async def test_a_request_state_with_non_ascii_characters_gets_400_malformed(state: str) -> None:
    # MRTR (and so requestState) exists only for modern clients; a legacy request's params go
    # to the child untouched.
    call = modern_call(3, "echo", {"message": "x"})
    call["params"] |= {"requestState": state, "inputResponses": {}}
    with anyio.fail_after(WAIT):
        async with running_gateway(server_spec()) as url, httpx.AsyncClient(timeout=WAIT) as http:
            reply = await http.post(url, headers=modern_headers("tools/call", "echo"), json=call)
    assert reply.status_code == 400, reply.text
    assert reply.json()["id"] == 3
    assert reply.json()["error"]["code"] == INVALID_PARAMS
    assert reply.json()["error"]["data"] == {"requestState": "malformed"}


# --- Row 10: log lines ---------------------------------------------------------------------------


async def test_control_characters_from_clients_cannot_forge_or_colour_log_lines() -> None:
    forged = "tools/list\n2026-12-01 00:00:00,000 INFO gateway.access: FORGED\r\x1b[2J"
    text, json_lines = io.StringIO(), io.StringIO()
    handlers = [logging.StreamHandler(text), logging.StreamHandler(json_lines)]
    handlers[0].setFormatter(TextFormatter("%(levelname)s %(name)s: %(message)s"))
    handlers[1].setFormatter(JsonFormatter())
    root = logging.getLogger()
    for handler in handlers:
        root.addHandler(handler)
    try:
        with anyio.fail_after(WAIT):
            async with (
                access_log() as records,
                running_gateway(server_spec()) as url,
                httpx.AsyncClient(timeout=WAIT) as http,
            ):
                session = await open_session(http, url)
                reply = await http.post(url, headers=session, json={"jsonrpc": "2.0", "id": 1, "method": forged})
                assert reply.json()["error"]["code"] == -32601
                await records.wait_for(lambda r: "FORGED" in str(getattr(r, "rpc_method", "")))
    finally:
        for handler in handlers:
            root.removeHandler(handler)
    for output in (text.getvalue(), json_lines.getvalue()):
        lines = output.splitlines()
        assert not any(line.startswith("2026-12-01") or "FORGED" in line.split(":", 1)[0] for line in lines)
        assert not any(c in output for c in "\r\x1b")
    assert any("tools/list\\x0a2026-12-01" in line for line in text.getvalue().splitlines())
    entries = [orjson.loads(line) for line in json_lines.getvalue().splitlines()]  # every line is one record
    assert any(entry.get("rpc_method", "").startswith("tools/list\\x0a2026-12-01") for entry in entries)


# --- Row 13: readiness says little ---------------------------------------------------------------


async def test_readyz_names_a_failing_server_without_its_stderr_which_stays_on_the_operators_status() -> None:
    tokens = TokenStore([f"alice:{ALICE}"])
    auth = {"authorization": f"Bearer {ALICE}"}
    spec = server_spec("--stderr-lines", "2", "--exit-at-start", "4")
    with anyio.fail_after(WAIT), recording("gateway.pool") as failures:
        async with (
            running_gateway(spec, tokens=tokens, operator_tokens=operator_tokens()) as url,
            httpx.AsyncClient(timeout=WAIT) as http,
        ):
            status_url = url.replace("/mcp", "/status")
            await failures.wait_for(lambda r: "child failed to start" in r.getMessage() and "fatal" in r.getMessage())
            assert "fatal: configured to exit" in (await http.get(status_url, headers=OPERATOR)).text
            readiness = await http.get(url.replace("/mcp", "/readyz"))  # no token: probes stay open
            assert (await http.get(status_url)).status_code == 401
            assert (await http.get(status_url, headers=auth)).status_code == 401  # an MCP token is no operator's
    assert readiness.status_code == 503
    assert readiness.text in ("not ready: test starting\n", "not ready: test failing\n")


# --- Refusals, errors and cancellations in the access log and metrics ----------------------------


async def test_middleware_and_ladder_refusals_are_logged_and_counted() -> None:
    tokens = TokenStore([f"alice:{ALICE}"])
    auth = {"authorization": f"Bearer {ALICE}"}
    call = modern_call(1, "echo", {"message": "x"})
    echo = {**modern_headers("tools/call", "echo"), **auth}
    with anyio.fail_after(WAIT):
        async with (
            access_log() as records,
            running_gateway(
                server_spec(),
                tokens=tokens,
                max_requests_per_principal=1,
                max_body_bytes=1000,
                operator_tokens=operator_tokens(),
            ) as url,
            httpx.AsyncClient(timeout=WAIT) as http,
        ):
            expected = {
                401: await http.post(url, headers=modern_headers("tools/call", "echo"), json=call),
                403: await http.post(url, headers={**echo, "origin": "http://evil.example"}, json=call),
                431: await http.post(url, headers={**echo, **{f"x-h{i}": "v" for i in range(120)}}, json=call),
                413: await http.post(url, headers=echo, json=modern_call(1, "echo", {"message": "x" * 2000})),
                415: await http.post(url, headers={**echo, "content-type": "text/plain"}, json=call),
                406: await http.post(url, headers={**echo, "accept": "application/json"}, json=call),
                400: await http.post(url, headers=echo, content=b"{not json"),
            }
            async with anyio.create_task_group() as tg:
                sleep = {**modern_headers("tools/call", "sleep"), **auth}
                begun: list[Any] = []
                running = anyio.Event()
                tg.start_soon(sleep_running, http, url, sleep, modern_call(2, "sleep", {"ms": 60_000}), begun, running)
                await running.wait()
                expected[429] = await http.post(url, headers=echo, json=call)
                tg.cancel_scope.cancel()
            for status, reply in expected.items():
                assert reply.status_code == status, (status, reply.text)
                await records.wait_for(lambda r, status=status: getattr(r, "status", None) == status)
            page = (await http.get(url.replace("/mcp", "/metrics"))).text
    for status in expected:
        [line] = [r for r in records.records if getattr(r, "status", None) == status]
        assert getattr(line, "outcome", None) == "error"
        assert getattr(line, "code", None) in (INVALID_REQUEST, -32700)
        assert f"outcome=error code={line.code}" in line.getMessage()  # type: ignore[attr-defined]
        assert metric(page, "mcp_gateway_requests_total", server="test", status=str(status), outcome="error") == 1


async def test_gateway_errors_and_cancellations_are_not_counted_as_plain_200s(tmp_path: Path) -> None:
    record = tmp_path / "stdin.jsonl"

    async def child_has_read(request_count: int) -> None:
        """Until the child has read ``request_count`` sleep calls (its stdin record, watched)."""

        def read() -> bool:
            lines = record.read_text().splitlines() if record.exists() else []
            return sum('"name": "sleep"' in line or '"name":"sleep"' in line for line in lines) >= request_count

        await wait_until(record, read)

    with anyio.fail_after(WAIT):
        async with (
            access_log() as records,
            running_gateway(server_spec("--record", str(record))) as url,
            httpx.AsyncClient(timeout=WAIT) as http,
        ):
            # Modern: the client leaves before the answer (the child is told to cancel).
            async with anyio.create_task_group() as tg:
                tg.start_soon(
                    lambda: http.post(
                        url, headers=modern_headers("tools/call", "sleep"), json=modern_call(2, "sleep", {"ms": 60_000})
                    )
                )
                await child_has_read(1)  # in flight at the child
                tg.cancel_scope.cancel()
            left = await records.wait_for(lambda r: getattr(r, "outcome", None) == "cancelled")
            assert (await served(http, url))[1] == 0  # its lease was given back before its access line
            # Legacy: a POSTed notifications/cancelled ends the request with no answer at all
            # (2025-11-25: a cancelled request is not answered): the stream just ends.
            session = await open_session(http, url)
            cancelled: dict[str, Any] = {}

            async def legacy_sleep() -> None:
                reply = await http.post(url, headers=session, json=legacy_call(5, "sleep", {"ms": 60_000}))
                cancelled.update(status=reply.status_code, body=reply.text)

            async with anyio.create_task_group() as tg:
                tg.start_soon(legacy_sleep)
                await child_has_read(2)  # in flight at the child
                note = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 5}}
                assert (await http.post(url, headers=session, json=note)).status_code == 202
            assert cancelled["status"] == 200
            assert "data:" not in cancelled["body"]
            legacy_line = await records.wait_for(
                lambda r: getattr(r, "era", None) == "legacy" and getattr(r, "outcome", None) == "cancelled"
            )
            # Modern, last (the pool then restarts it): a child that dies mid-call answers -31001 with 200.
            died = await http.post(
                url, headers=modern_headers("tools/call", "exit"), json=modern_call(1, "exit", {"code": 3})
            )
            assert died.status_code == 200
            assert died.json()["error"]["code"] == -31001
            await records.wait_for(lambda r: getattr(r, "code", None) == -31001)
            page = (await http.get(url.replace("/mcp", "/metrics"))).text
    died_line = next(r for r in records.records if getattr(r, "code", None) == -31001)
    assert (died_line.status, died_line.outcome) == (200, "error")  # type: ignore[attr-defined]
    assert "outcome=error code=-31001" in died_line.getMessage()
    assert (left.status, left.code) == (499, None)  # type: ignore[attr-defined]
    assert (legacy_line.status, legacy_line.code) == (200, None)  # type: ignore[attr-defined]  # no answer, no code
    labels = {"server": "test", "method": "tools/call"}
    assert metric(page, "mcp_gateway_requests_total", **labels, era="modern", status="200", outcome="error") == 1
    assert metric(page, "mcp_gateway_requests_total", **labels, era="modern", status="499", outcome="cancelled") == 1
    assert metric(page, "mcp_gateway_requests_total", **labels, era="legacy", status="200", outcome="cancelled") == 1
    assert metric(page, "mcp_gateway_requests_total", **labels, status="200", outcome="ok") == 0
