"""OAuth resource-server mode against a stand-in authorization server on loopback.

The issuer (tests/oauth_issuer.py) serves RFC 8414 metadata and a JWKS of keys the test
minted; the gateway discovers the JWKS from the metadata, checks each token's signature,
issuer, audience (this endpoint's public URL), lifetime and scopes, and makes ``sub`` the
principal. Refusals are checked for their status and ``WWW-Authenticate`` challenge.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.http.auth import TokenStore
from gateway.oauth import keys as keys_module
from gateway.oauth.gate import OAuthGate
from gateway.oauth.keys import KeySet
from gateway.oauth.validation import OAuthPolicy
from gateway.relay.router import Router
from gateway.relay.server_config import Isolation, ServerConfig
from tests.conftest import server_spec
from tests.gateway_server import (
    BASE_HEADERS,
    OPERATOR,
    app_for,
    legacy_initialize,
    modern_call,
    modern_headers,
    operator_tokens,
    serving,
)
from tests.oauth_issuer import Issuer, new_key, running_issuer

pytestmark = pytest.mark.anyio

TEST_BOUND = 55.0
"""Every test's whole run (pytest-timeout's backstop is 60 s)."""
HTTP_TIMEOUT = TEST_BOUND
"""Per request: only the test's bound. A child's first start on a busy machine can take tens
of seconds, and a shorter per-request timeout would fail a test that is merely slow."""

PUBLIC = "https://mcp.example"
AUDIENCE = f"{PUBLIC}/mcp"
STATIC = "static-token-0123456789abcdef"


@asynccontextmanager
async def oauth_gateway(
    issuer: Issuer, *, scopes: tuple[str, ...] = (), isolation: Isolation = Isolation.SHARED, **options: Any
) -> AsyncIterator[str]:
    """A single-server gateway whose endpoint takes tokens from ``issuer``; yields its base URL."""
    policy = OAuthPolicy(issuer=issuer.url, scopes=scopes)
    server = ServerConfig("test", server_spec(), isolation=isolation, oauth=policy)
    async with serving(app_for(Router(server), public_url=PUBLIC, **options)) as base:
        yield base


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


async def call_pid(http: httpx.AsyncClient, base: str, token: str) -> httpx.Response:
    return await http.post(f"{base}/mcp", headers={**modern_headers("tools/call", "pid"), **bearer(token)},
                           json=modern_call(1, "pid"))  # fmt: skip


def pid_of(reply: httpx.Response) -> str:
    assert reply.status_code == 200, reply.text
    return str(reply.json()["result"]["content"][0]["text"])


def challenge_of(reply: httpx.Response) -> str:
    return reply.headers["www-authenticate"]


async def test_a_valid_token_is_accepted_and_its_sub_becomes_the_principal() -> None:
    with anyio.fail_after(TEST_BOUND):
        async with (
            running_issuer() as issuer,
            oauth_gateway(issuer, isolation=Isolation.PRINCIPAL, operator_tokens=operator_tokens()) as base,
            httpx.AsyncClient(timeout=HTTP_TIMEOUT) as http,
        ):
            token = issuer.token(AUDIENCE, sub="alice@example")
            pid_of(await call_pid(http, base, token))
            assert (await http.get(f"{base}/status", headers=bearer(token))).status_code == 401  # no operator's
            status = await http.get(f"{base}/status", headers=OPERATOR)
            assert status.status_code == 200
            assert "principal=alice@example" in " ".join(status.json()["servers"][0]["pools"])
            assert issuer.metadata_fetches == 1  # the JWKS URL came from the RFC 8414 metadata
            assert issuer.jwks_fetches == 1
            pid_of(await call_pid(http, base, token))
            assert issuer.jwks_fetches == 1  # cached


async def test_each_bad_token_gets_401_invalid_token_with_the_resource_metadata() -> None:
    impostor = new_key()
    with anyio.fail_after(TEST_BOUND):
        async with (
            running_issuer() as issuer,
            oauth_gateway(issuer) as base,
            httpx.AsyncClient(timeout=HTTP_TIMEOUT) as http,
        ):
            long_ago = int(time.time()) - 3600
            bad = {
                "wrong audience": issuer.token(f"{PUBLIC}/servers/other/mcp"),
                "wrong issuer": issuer.token(AUDIENCE, iss="https://evil.example"),
                "expired": issuer.token(AUDIENCE, iat=long_ago - 600, exp=long_ago),
                "bad signature": issuer.token(AUDIENCE, key=impostor),
                "alg none": issuer.unsigned_token(AUDIENCE),
                "HMAC with the public key": issuer.hmac_public_key_token(AUDIENCE),
                "not a JWT": "x" * 40,
            }
            for what, token in bad.items():
                refused = await call_pid(http, base, token)
                assert refused.status_code == 401, what
                challenge = challenge_of(refused)
                assert challenge.startswith("Bearer "), what
                assert 'error="invalid_token"' in challenge, what
                assert f'resource_metadata="{PUBLIC}/.well-known/oauth-protected-resource"' in challenge, what
                assert refused.json()["error"]["message"].startswith("unauthorized: "), what
            missing = await http.post(f"{base}/mcp", headers=modern_headers("tools/list"), json=modern_call(1, "x"))
            assert missing.status_code == 401
            assert "error=" not in challenge_of(missing)  # no credentials: no error code (RFC 6750 §3.1)
            assert "resource_metadata=" in challenge_of(missing)
            pid_of(await call_pid(http, base, issuer.token(AUDIENCE)))  # and a good one still passes


async def test_an_unknown_kid_is_refused_after_exactly_one_refresh() -> None:
    with anyio.fail_after(TEST_BOUND):
        async with (
            running_issuer() as issuer,
            oauth_gateway(issuer) as base,
            httpx.AsyncClient(timeout=HTTP_TIMEOUT) as http,
        ):
            pid_of(await call_pid(http, base, issuer.token(AUDIENCE)))
            assert issuer.jwks_fetches == 1
            stranger = issuer.token(AUDIENCE, kid="key-unknown", key=new_key())
            refused = await call_pid(http, base, stranger)
            assert refused.status_code == 401
            assert 'error="invalid_token"' in challenge_of(refused)
            assert "key-unknown" in refused.json()["error"]["message"]
            assert issuer.jwks_fetches == 2  # one refresh, in case the issuer had rotated
            for _ in range(3):  # more made-up kids within the interval cost the issuer nothing
                assert (await call_pid(http, base, stranger)).status_code == 401
            assert issuer.jwks_fetches == 2


async def test_key_rotation_on_the_issuer_is_picked_up() -> None:
    with anyio.fail_after(TEST_BOUND):
        async with (
            running_issuer() as issuer,
            oauth_gateway(issuer) as base,
            httpx.AsyncClient(timeout=HTTP_TIMEOUT) as http,
        ):
            old = issuer.token(AUDIENCE)
            pid_of(await call_pid(http, base, old))
            issuer.rotate("key-2")
            pid_of(await call_pid(http, base, issuer.token(AUDIENCE)))
            assert issuer.jwks_fetches == 2
            # The refreshed set no longer holds key-1: tokens it signed stop working.
            assert (await call_pid(http, base, old)).status_code == 401


async def test_a_missing_scope_gets_403_insufficient_scope_naming_the_scope() -> None:
    with anyio.fail_after(TEST_BOUND):
        async with (
            running_issuer() as issuer,
            oauth_gateway(issuer, scopes=("mcp:tools", "mcp:read")) as base,
            httpx.AsyncClient(timeout=HTTP_TIMEOUT) as http,
        ):
            refused = await call_pid(http, base, issuer.token(AUDIENCE, scope="mcp:read"))
            assert refused.status_code == 403
            challenge = challenge_of(refused)
            assert 'error="insufficient_scope"' in challenge
            assert 'scope="mcp:tools mcp:read"' in challenge
            assert "resource_metadata=" in challenge
            assert "mcp:tools" in refused.json()["error"]["message"]
            granted = issuer.token(AUDIENCE, scope=None, scp=["mcp:read", "mcp:tools"])  # scp as a list
            pid_of(await call_pid(http, base, granted))
            missing = await http.post(f"{base}/mcp", headers=modern_headers("tools/list"), json=modern_call(1, "x"))
            assert 'scope="mcp:tools mcp:read"' in challenge_of(missing)  # the 401 says what to ask for
            meta = (await http.get(f"{base}/.well-known/oauth-protected-resource")).json()
            assert meta["authorization_servers"] == [issuer.url]
            assert meta["scopes_supported"] == ["mcp:tools", "mcp:read"]
            assert meta["resource"] == AUDIENCE


async def test_static_tokens_keep_working_alongside_oauth() -> None:
    tokens = TokenStore([f"ci-bot:{STATIC}"])
    with anyio.fail_after(TEST_BOUND):
        async with (
            running_issuer() as issuer,
            oauth_gateway(
                issuer, tokens=tokens, isolation=Isolation.PRINCIPAL, operator_tokens=operator_tokens()
            ) as base,
            httpx.AsyncClient(timeout=HTTP_TIMEOUT) as http,
        ):
            static_pid = pid_of(await call_pid(http, base, STATIC))
            oauth_pid = pid_of(await call_pid(http, base, issuer.token(AUDIENCE)))
            assert static_pid != oauth_pid
            pools = " ".join((await http.get(f"{base}/status", headers=OPERATOR)).json()["servers"][0]["pools"])
            assert "principal=ci-bot" in pools
            assert "principal=alice" in pools
            assert (await call_pid(http, base, "wrong-static-token-0123456789")).status_code == 401


async def test_an_unreachable_key_set_gets_503_with_retry_after() -> None:
    with anyio.fail_after(TEST_BOUND):
        async with (
            running_issuer() as issuer,
            oauth_gateway(issuer) as base,
            httpx.AsyncClient(timeout=HTTP_TIMEOUT) as http,
        ):
            issuer.failing = True
            refused = await call_pid(http, base, issuer.token(AUDIENCE))
            assert refused.status_code == 503
            assert refused.headers["retry-after"] == "5"
            assert issuer.url in refused.json()["error"]["message"]


async def test_an_oversized_key_set_is_not_read(caplog: pytest.LogCaptureFixture) -> None:
    from gateway.oauth.keys import MAX_DOCUMENT_BYTES

    with anyio.fail_after(TEST_BOUND):
        async with (
            running_issuer() as issuer,
            oauth_gateway(issuer) as base,
            httpx.AsyncClient(timeout=HTTP_TIMEOUT) as http,
        ):
            issuer.padding = MAX_DOCUMENT_BYTES
            refused = await call_pid(http, base, issuer.token(AUDIENCE))
            assert refused.status_code == 503
            assert issuer.jwks_fetches == 1
    assert f"larger than {MAX_DOCUMENT_BYTES} bytes" in caplog.text


@pytest.mark.timeout(2 * TEST_BOUND + 10)
async def test_concurrent_clients_with_different_subs_get_their_own_children_and_sessions() -> None:
    subs = ["alice", "bob"]
    with anyio.fail_after(2 * TEST_BOUND):
        async with (
            running_issuer() as issuer,
            oauth_gateway(issuer, isolation=Isolation.PRINCIPAL) as base,
            httpx.AsyncClient(timeout=HTTP_TIMEOUT) as http,
        ):
            tokens = {sub: issuer.token(AUDIENCE, sub=sub) for sub in subs}
            pids: dict[str, set[str]] = {sub: set() for sub in subs}

            async def client(sub: str) -> None:
                for _ in range(2):
                    pids[sub].add(pid_of(await call_pid(http, base, tokens[sub])))

            async with anyio.create_task_group() as tg:
                for sub in subs:
                    for _ in range(2):
                        tg.start_soon(client, sub)
            assert all(len(found) == 1 for found in pids.values()), pids
            assert len(set().union(*pids.values())) == len(subs)  # one child per principal, none shared
            # A legacy session belongs to the principal that opened it.
            init = await http.post(f"{base}/mcp", headers={**BASE_HEADERS, **bearer(tokens["alice"])},
                                   json=legacy_initialize())  # fmt: skip
            assert init.status_code == 200, init.text
            session = init.headers["mcp-session-id"]
            stolen = await http.post(
                f"{base}/mcp",
                headers={
                    **BASE_HEADERS,
                    "mcp-session-id": session,
                    "mcp-protocol-version": "2025-11-25",
                    **bearer(tokens["bob"]),
                },
                json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
            )
            assert stolen.status_code == 404


async def test_each_server_of_many_has_its_own_audience_and_metadata() -> None:
    with anyio.fail_after(TEST_BOUND):
        async with running_issuer() as issuer:
            policy = OAuthPolicy(issuer=issuer.url)
            servers = [ServerConfig(name, server_spec(), oauth=policy) for name in ("files", "time")]
            app = app_for([Router(s) for s in servers], public_url=PUBLIC)
            async with serving(app) as base, httpx.AsyncClient(timeout=HTTP_TIMEOUT) as http:
                files = f"{PUBLIC}/servers/files/mcp"
                headers = modern_headers("tools/call", "pid")
                url = f"{base}/servers/files/mcp"
                good = issuer.token(files)
                pid_of(await http.post(url, headers={**headers, **bearer(good)}, json=modern_call(1, "pid")))
                other = issuer.token(f"{PUBLIC}/servers/time/mcp")
                refused = await http.post(url, headers={**headers, **bearer(other)}, json=modern_call(1, "pid"))
                assert refused.status_code == 401
                metadata_url = f"{PUBLIC}/.well-known/oauth-protected-resource/servers/files/mcp"
                assert f'resource_metadata="{metadata_url}"' in challenge_of(refused)
                meta = await http.get(f"{base}/.well-known/oauth-protected-resource/servers/files/mcp")
                assert meta.json()["resource"] == files
                assert meta.json()["authorization_servers"] == [issuer.url]
                unknown = await http.get(f"{base}/.well-known/oauth-protected-resource/servers/nope/mcp")
                assert unknown.status_code == 404
                # /status is the operator's: no endpoint's token opens it (#24.11), and none is configured.
                assert (await http.get(f"{base}/status", headers=bearer(issuer.token(files)))).status_code == 403
                assert (await http.get(f"{base}/status")).status_code == 403


@pytest.mark.timeout(2 * TEST_BOUND + 10)
async def test_the_sdk_client_connects_with_an_access_token() -> None:
    with anyio.fail_after(2 * TEST_BOUND):
        async with running_issuer() as issuer, oauth_gateway(issuer) as base:
            http = httpx2.AsyncClient(headers=bearer(issuer.token(AUDIENCE)), timeout=HTTP_TIMEOUT)
            async with http, Client(streamable_http_client(f"{base}/mcp", http_client=http)) as client:
                echoed = await client.call_tool("echo", {"message": "with a token"})
                assert echoed.is_error is not True


async def test_an_unknown_kid_during_an_issuer_outage_stalls_no_other_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """#24.5: a token naming an unknown key made a refresh that failed; that marked the fresh keys
    due, so every later request waited on the next refresh, which hung. Now only the request
    naming the unknown key waits; every other request is served with the held keys."""
    monkeypatch.setattr(keys_module, "RETRY_INTERVAL", 0.0)  # a failed refresh may be retried at once
    monkeypatch.setattr(keys_module, "FETCH_TIMEOUT", 10 * TEST_BOUND)  # a hang outlasts the test
    clients = 5
    with anyio.fail_after(TEST_BOUND):
        async with running_issuer() as issuer, httpx.AsyncClient(timeout=HTTP_TIMEOUT) as http:
            policy = OAuthPolicy(issuer=issuer.url)
            gate = OAuthGate(
                {"/mcp": policy, "/servers/test/mcp": policy},
                public_url=PUBLIC,
                key_set=lambda url, jwks: KeySet(url, jwks, refresh_interval=0),  # every unknown kid refreshes
            )
            server = ServerConfig("test", server_spec(), oauth=policy)
            async with serving(app_for(Router(server), public_url=PUBLIC, oauth=gate)) as base:
                good = issuer.token(AUDIENCE)
                pid_of(await call_pid(http, base, good))
                stranger = issuer.token(AUDIENCE, kid="not-published", key=new_key())
                issuer.failing = True
                assert (await call_pid(http, base, stranger)).status_code == 401  # its refresh failed
                issuer.failing = False
                issuer.hang()
                stalled: list[httpx.Response] = []
                async with anyio.create_task_group() as tg:

                    async def unknown() -> None:
                        stalled.append(await call_pid(http, base, stranger))

                    tg.start_soon(unknown)
                    await issuer.hung.wait()  # its refresh has reached the issuer, which answers nothing
                    answers = []

                    async def known() -> None:
                        answers.append(await call_pid(http, base, good))

                    async with anyio.create_task_group() as clients_group:
                        for _ in range(clients):
                            clients_group.start_soon(known)
                    assert [reply.status_code for reply in answers] == [200] * clients
                    assert stalled == []  # the stranger's request is still waiting on the issuer
                    issuer.release()
                [refused] = stalled
                assert refused.status_code == 401


async def test_an_access_token_with_the_operator_scope_opens_status_and_one_without_it_does_not() -> None:
    """#24.11: an OAuth-only deployment's operator credential is a scope, not any accepted token."""
    with anyio.fail_after(TEST_BOUND):
        async with (
            running_issuer() as issuer,
            oauth_gateway(issuer, scopes=("mcp",), operator_scope="gateway:operator") as base,
            httpx.AsyncClient(timeout=HTTP_TIMEOUT) as http,
        ):
            operator = issuer.token(AUDIENCE, scope="mcp gateway:operator")
            user = issuer.token(AUDIENCE, scope="mcp")
            pid_of(await call_pid(http, base, user))
            pid_of(await call_pid(http, base, operator))  # an operator may call the tools too
            for path in ("/status", "/ui"):
                assert (await http.get(f"{base}{path}", headers=bearer(operator))).status_code == 200, path
                refused = await http.get(f"{base}{path}", headers=bearer(user))
                assert refused.status_code == 403, path
                assert 'error="insufficient_scope"' in challenge_of(refused)
                assert 'scope="gateway:operator"' in challenge_of(refused)
                assert "resource_metadata" not in challenge_of(refused)
            forged = issuer.token(AUDIENCE, scope="mcp gateway:operator", key=new_key())
            assert (await http.get(f"{base}/status", headers=bearer(forged))).status_code == 401


def test_an_operator_scope_without_oauth_stops_the_gateway_at_start() -> None:
    from gateway.errors import ConfigError

    with pytest.raises(ConfigError, match="--operator-scope"):
        app_for(Router(ServerConfig("test", server_spec())), operator_scope="gateway:operator")
