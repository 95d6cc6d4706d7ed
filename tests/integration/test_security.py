"""Security defaults and options against a live gateway: Origin/Host, tokens, proxies, CORS, limits.

A principal's concurrency limit (429): tests/component/test_operations.py."""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx
import pytest

from gateway.http.auth import TokenStore, parse_tokens
from gateway.relay.server_config import Isolation
from tests.conftest import server_spec
from tests.gateway_server import OPERATOR, modern_call, modern_headers, operator_tokens, running_gateway

pytestmark = pytest.mark.anyio

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdef"


def tool_call(tool: str, args: dict[str, object] | None = None) -> tuple[dict[str, str], dict[str, object]]:
    return modern_headers("tools/call", tool), modern_call(1, tool, args or {})


async def test_a_cross_origin_request_from_a_foreign_page_is_refused() -> None:
    with anyio.fail_after(20):
        async with running_gateway(server_spec()) as url, httpx.AsyncClient() as http:
            headers, body = tool_call("echo", {"message": "x"})
            foreign = await http.post(url, headers={**headers, "origin": "http://evil.example"}, json=body)
            assert foreign.status_code == 403
            assert "error" in foreign.json()
            assert "id" not in foreign.json()
            local = await http.post(url, headers={**headers, "origin": "http://localhost:3000"}, json=body)
            assert local.status_code == 200


async def test_a_rebound_host_name_is_refused_on_a_loopback_gateway() -> None:
    with anyio.fail_after(20):
        async with running_gateway(server_spec()) as url, httpx.AsyncClient() as http:
            headers, body = tool_call("echo", {"message": "x"})
            rebound = await http.post(url, headers={**headers, "host": "attacker.example"}, json=body)
            assert rebound.status_code == 403
            allowed = await http.post(url, headers={**headers, "host": "localhost:1234"}, json=body)
            assert allowed.status_code == 200


async def test_a_malformed_host_is_400_and_a_host_with_a_user_part_never_passes_as_loopback() -> None:
    with anyio.fail_after(20):
        async with running_gateway(server_spec()) as url, httpx.AsyncClient() as http:
            headers, body = tool_call("echo", {"message": "x"})
            for bad in ("localhost:80@evil.com", "localhost:99999", "local host", "localhost:", "127.0.0.1/x"):
                refused = await http.post(url, headers={**headers, "host": bad}, json=body)
                assert refused.status_code == 400, bad
                assert "malformed Host" in refused.json()["error"]["message"]
            for origin in ("http://localhost:80@evil.com", "http://127.0.0.1/path", "http://localhost:80@127.0.0.1"):
                refused = await http.post(url, headers={**headers, "origin": origin}, json=body)
                assert refused.status_code == 403, origin
            assert (await http.post(url, headers={**headers, "host": "[::1]:8000"}, json=body)).status_code == 200


async def raw_post(url: str, header_lines: list[str], body: bytes) -> tuple[int, dict[str, object]]:
    """POST with exactly these header lines (httpx refuses to send two Host headers)."""
    import orjson

    parts = httpx.URL(url)
    head = [f"POST {parts.raw_path.decode()} HTTP/1.1", *header_lines, f"content-length: {len(body)}"]
    head.append("connection: close")
    async with await anyio.connect_tcp("127.0.0.1", parts.port or 80) as stream:
        await stream.send(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        answer = b""
        try:
            while True:
                answer += await stream.receive()
        except anyio.EndOfStream:
            pass
    status_line, _, rest = answer.partition(b"\r\n")
    return int(status_line.split()[1]), orjson.loads(rest.partition(b"\r\n\r\n")[2])


async def test_a_repeated_origin_or_host_is_refused_whatever_the_copies_say() -> None:
    with anyio.fail_after(20):
        async with running_gateway(server_spec()) as url:
            headers, body = tool_call("echo", {"message": "x"})
            content = httpx.Request("POST", url, json=body).content
            base = [f"{k}: {v}" for k, v in headers.items()]
            host = f"host: {httpx.URL(url).netloc.decode()}"
            assert (await raw_post(url, [host, *base], content))[0] == 200
            for name, lines in (
                ("origin", [host, "origin: http://evil.example", "origin: http://localhost:3000"]),
                ("origin", [host, "origin: http://localhost:3000", "origin: http://localhost:3000"]),
                ("host", ["host: evil.example", host]),
                ("host", [host, host]),
            ):
                status, error = await raw_post(url, [*lines, *base], content)
                assert status == 400, lines
                assert f"more than one {name} header" in str(error["error"]), lines
                assert "id" not in error


async def test_with_static_tokens_the_oauth_discovery_paths_are_404_and_the_challenge_names_no_metadata() -> None:
    tokens = TokenStore([f"alice:{ALICE}"])
    with anyio.fail_after(20):
        async with running_gateway(server_spec(), tokens=tokens) as url, httpx.AsyncClient() as http:
            base = url.removesuffix("/mcp")
            for path in (
                "/.well-known/oauth-protected-resource",
                "/.well-known/oauth-protected-resource/mcp",
                "/.well-known/oauth-authorization-server",
                "/.well-known/oauth-authorization-server/mcp",
                "/.well-known/openid-configuration",
            ):
                reply = await http.get(base + path)
                assert reply.status_code == 404, path
                assert reply.json()["error"]["code"] == -32600
            # Where an SDK registers or logs in when it finds no metadata: no authorization server here.
            registration = await http.post(base + "/register", json={"redirect_uris": ["http://localhost/cb"]})
            assert registration.status_code == 404, registration.text
            for path in ("/authorize", "/token"):
                assert (await http.get(base + path)).status_code == 404, path
            refused = await http.post(url, headers=modern_headers("tools/list"), json=modern_call(1, "x"))
            assert refused.status_code == 401
            assert refused.headers["www-authenticate"].startswith("Bearer")
            assert "resource_metadata" not in refused.headers["www-authenticate"]


async def test_a_wrong_token_gets_401_and_never_reaches_a_child() -> None:
    tokens = TokenStore([f"alice:{ALICE}"])
    with anyio.fail_after(20):
        async with running_gateway(server_spec(), tokens=tokens) as url, httpx.AsyncClient() as http:
            headers, pid_body = tool_call("pid")
            good = {**headers, "authorization": f"Bearer {ALICE}"}
            before = (await http.post(url, headers=good, json=pid_body)).json()["result"]["content"][0]["text"]
            _, exit_body = tool_call("exit", {"code": 0})
            for bad in ({}, {"authorization": "Bearer wrong-token-0123456789"}, {"authorization": f"Basic {ALICE}"}):
                refused = await http.post(url, headers={**headers, **bad}, json=exit_body)
                assert refused.status_code == 401
                assert refused.headers["www-authenticate"].startswith("Bearer")
            after = (await http.post(url, headers=good, json=pid_body)).json()["result"]["content"][0]["text"]
            assert after == before  # the exit call never reached the child
            assert (await http.get(url.replace("/mcp", "/healthz"))).status_code == 200  # probes stay open
            # /status is the operator's: no MCP token opens it, and without an operator token nobody.
            for headers_tried in ({}, {"authorization": f"Bearer {ALICE}"}):
                closed = await http.get(url.replace("/mcp", "/status"), headers=headers_tried)
                assert closed.status_code == 403
                assert "--operator-token-file" in closed.json()["error"]["message"]


async def test_two_tokens_map_to_two_principals() -> None:
    tokens = TokenStore([f"alice:{ALICE}", f"bob:{BOB}"])
    with anyio.fail_after(20):
        async with (
            running_gateway(
                server_spec(), tokens=tokens, isolation=Isolation.PRINCIPAL, operator_tokens=operator_tokens()
            ) as url,
            httpx.AsyncClient() as http,
        ):
            headers, body = tool_call("pid")
            pids = {}
            for name, token in (("alice", ALICE), ("bob", BOB)):
                reply = await http.post(url, headers={**headers, "authorization": f"Bearer {token}"}, json=body)
                pids[name] = reply.json()["result"]["content"][0]["text"]
            assert pids["alice"] != pids["bob"]
            refused = await http.get(url.replace("/mcp", "/status"), headers={"authorization": f"Bearer {ALICE}"})
            assert refused.status_code == 401  # alice's token is for the MCP endpoint only
            status = await http.get(url.replace("/mcp", "/status"), headers=OPERATOR)
            labels = " ".join(status.json()["servers"][0]["pools"])
            assert "principal=alice" in labels
            assert "principal=bob" in labels
            assert ALICE not in status.text


async def test_the_identity_header_counts_only_from_a_trusted_proxy_and_fails_closed_without_it() -> None:
    """#39 item 8: with the header as the only authentication, a request without it from a
    trusted proxy, or with it from anyone else, gets 401 (``--principal-header-required
    auto``); ``no`` serves such a request as ``anonymous`` (the old behaviour, opted into)."""

    async def principal_pools(trusted: list[str], required: str, *, named: bool = True) -> tuple[int, str, str]:
        async with (
            running_gateway(
                server_spec(),
                isolation=Isolation.PRINCIPAL,
                principal_header="X-User",
                principal_header_required=required,
                trusted_proxies=trusted,
                operator_tokens=operator_tokens(),
            ) as url,
            httpx.AsyncClient() as http,
        ):
            headers, body = tool_call("pid")
            sent = {**headers, "x-user": "carol"} if named else headers
            reply = await http.post(url, headers=sent, json=body)
            status = await http.get(url.replace("/mcp", "/status"), headers=OPERATOR)
            message = reply.json()["error"]["message"] if reply.status_code != 200 else ""
            return reply.status_code, message, " ".join(status.json()["servers"][0]["pools"])

    with anyio.fail_after(60):
        code, _, pools = await principal_pools(["127.0.0.0/8"], "auto")
        assert code == 200
        assert "principal=carol" in pools
        code, message, pools = await principal_pools(["10.0.0.0/8"], "auto")  # from an untrusted peer
        assert code == 401
        assert "X-User is taken only from a trusted proxy" in message
        assert "127.0.0.1" in message
        assert pools == ""  # no child was started for it
        code, message, _ = await principal_pools(["127.0.0.0/8"], "auto", named=False)
        assert code == 401
        assert "no X-User header from the proxy" in message
        code, _, pools = await principal_pools(["10.0.0.0/8"], "no")
        assert code == 200
        assert "principal=anonymous" in pools


async def test_cors_preflight_reflects_mcp_param_headers_and_exposes_the_session_id() -> None:
    origin = "https://app.example"
    with anyio.fail_after(20):
        async with running_gateway(server_spec(), cors_origins=[origin]) as url, httpx.AsyncClient() as http:
            preflight = await http.options(
                url,
                headers={
                    "origin": origin,
                    "access-control-request-method": "POST",
                    "access-control-request-headers": "content-type, mcp-method, mcp-name, mcp-param-region",
                },
            )
            assert preflight.status_code == 204
            assert preflight.headers["access-control-allow-origin"] == origin
            assert "mcp-param-region" in preflight.headers["access-control-allow-headers"]
            refused = await http.options(
                url,
                headers={
                    "origin": origin,
                    "access-control-request-method": "POST",
                    "access-control-request-headers": "x-evil",
                },
            )
            assert refused.status_code == 403
            headers, body = tool_call("echo", {"message": "x"})
            actual = await http.post(url, headers={**headers, "origin": origin}, json=body)
            assert actual.status_code == 200
            assert actual.headers["access-control-allow-origin"] == origin
            assert "mcp-session-id" in actual.headers["access-control-expose-headers"]


async def test_oversized_mcp_headers_are_refused_before_decoding() -> None:
    with anyio.fail_after(20):
        async with running_gateway(server_spec()) as url, httpx.AsyncClient() as http:
            headers, body = tool_call("echo", {"message": "x"})
            huge = await http.post(url, headers={**headers, "mcp-name": "=?base64?" + "QUFB" * 4000 + "?="}, json=body)
            assert huge.status_code == 431


async def test_protected_resource_metadata_names_the_authorization_server() -> None:
    tokens = TokenStore([f"alice:{ALICE}"])
    with anyio.fail_after(20):
        async with (
            running_gateway(
                server_spec(),
                tokens=tokens,
                authorization_servers=["https://login.example"],
                public_url="https://mcp.example",
            ) as url,
            httpx.AsyncClient() as http,
        ):
            meta = await http.get(url.replace("/mcp", "/.well-known/oauth-protected-resource"))
            assert meta.json() == {
                "resource": "https://mcp.example/mcp",
                "authorization_servers": ["https://login.example"],
                "bearer_methods_supported": ["header"],
            }
            refused = await http.post(url, headers=modern_headers("tools/list"), json=modern_call(1, "x"))
            assert (
                'resource_metadata="https://mcp.example/.well-known/oauth-protected-resource"'
                in (refused.headers["www-authenticate"])
            )


def test_the_token_file_is_reread_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text(f"# team tokens\nalice:{ALICE}\n")
    store = TokenStore(path=str(path))
    assert store.principal_for(ALICE.encode(), now=0.0) == "alice"
    assert store.principal_for(BOB.encode(), now=0.5) is None
    path.write_text(f"bob:{BOB}\n")
    import os

    os.utime(path, (1, 1))  # a different mtime, whatever the clock's resolution
    assert store.principal_for(BOB.encode(), now=10.0) == "bob"
    assert store.principal_for(ALICE.encode(), now=11.0) is None


def test_a_removed_token_file_revokes_its_tokens(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text(f"alice:{ALICE}\n")
    store = TokenStore(path=str(path))
    assert store.principal_for(ALICE.encode(), now=0.0) == "alice"
    path.unlink()
    assert store.principal_for(ALICE.encode(), now=10.0) is None


def test_short_tokens_are_refused_and_unnamed_ones_get_a_hashed_principal() -> None:
    from gateway.errors import ConfigError

    with pytest.raises(ConfigError, match="at least 16"):
        parse_tokens(["short"], "--auth-token")
    (token,) = parse_tokens([ALICE], "--auth-token")
    assert token.principal.startswith("token-")
    assert ALICE not in token.principal
