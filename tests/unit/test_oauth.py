"""The pure token checks (gateway.oauth.validation), the key set's caching rules
(gateway.oauth.keys, with a fake fetch and a fake clock) and the OAuth settings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from gateway.cli import parse_settings
from gateway.errors import ConfigError
from gateway.oauth import keys as keys_module
from gateway.oauth.keys import KeySet, Unavailable, discovery_urls, usable_keys
from gateway.oauth.validation import (
    CLOCK_LEEWAY,
    MAX_PRINCIPAL_CHARS,
    Accepted,
    Expectation,
    OAuthPolicy,
    Refused,
    TokenHeader,
    challenge,
    read_header,
    verify,
)

ISSUER = "https://login.example"
AUDIENCE = "https://mcp.example/mcp"
NOW = 1_800_000_000.0
RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())


def public_jwk(key: Any, **extra: Any) -> dict[str, Any]:
    algorithm = jwt.algorithms.RSAAlgorithm if isinstance(key, rsa.RSAPrivateKey) else jwt.algorithms.ECAlgorithm
    return {**json.loads(algorithm.to_jwk(key.public_key())), "kid": "k1", **extra}


def mint(key: Any = RSA_KEY, alg: str = "RS256", **claims: Any) -> str:
    body = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "exp": NOW + 300, "scope": "read write", **claims}
    return jwt.encode({k: v for k, v in body.items() if v is not None}, key, algorithm=alg, headers={"kid": "k1"})


def check(token: str, jwk: dict[str, Any] | None = None, now: float = NOW, **expect: Any) -> Accepted | Refused:
    header = read_header(token)
    assert isinstance(header, TokenHeader), header
    return verify(token, header, jwk or public_jwk(RSA_KEY), Expectation(ISSUER, (AUDIENCE,), **expect), now=now)


def refusal(verdict: Accepted | Refused) -> str:
    assert isinstance(verdict, Refused), verdict
    assert (verdict.status, verdict.error) == (401, "invalid_token")
    return verdict.description


def test_a_good_token_gives_its_sub_and_scopes() -> None:
    verdict = check(mint())
    assert isinstance(verdict, Accepted)
    assert verdict.principal == "alice"
    assert verdict.scopes == {"read", "write"}


@pytest.mark.parametrize("alg", ["none", "HS256", "HS512", None, 7])
def test_only_asymmetric_algorithms_are_read(alg: object) -> None:
    header = jwt.utils.base64url_encode(json.dumps({"alg": alg}).encode()).decode()
    assert "is not accepted" in refusal(read_header(f"{header}.e30.sig"))


def test_garbage_and_oversized_tokens_are_refused_before_parsing() -> None:
    assert "not a JWT" in refusal(read_header("not-a-token"))
    assert "longer than" in refusal(read_header("a" * 20_000))


def test_the_audience_must_name_this_resource_exactly() -> None:
    assert "audience" in refusal(check(mint(aud="https://mcp.example/servers/other/mcp")))
    assert "audience" in refusal(check(mint(aud="https://mcp.example")))
    assert "aud" in refusal(check(mint(aud=None)))
    assert isinstance(check(mint(aud=["https://other.example", AUDIENCE])), Accepted)


def test_the_issuer_must_match() -> None:
    assert "not issued by" in refusal(check(mint(iss="https://evil.example")))
    assert "iss" in refusal(check(mint(iss=None)))


def test_expiry_and_not_before_allow_the_leeway_and_no_more() -> None:
    exp = NOW + 300
    assert isinstance(check(mint(), now=exp + CLOCK_LEEWAY), Accepted)
    assert "expired" in refusal(check(mint(), now=exp + CLOCK_LEEWAY + 1))
    assert "exp" in refusal(check(mint(exp=None)))
    assert isinstance(check(mint(nbf=NOW + CLOCK_LEEWAY)), Accepted)
    assert "not valid yet" in refusal(check(mint(nbf=NOW + CLOCK_LEEWAY + 1)))


def test_the_principal_claim_must_be_usable() -> None:
    verdict = check(mint(email="alice@example"), principal_claim="email")
    assert isinstance(verdict, Accepted)
    assert verdict.principal == "alice@example"
    assert "Subject must be a string" in refusal(check(mint(sub=42)))  # RFC 7519: sub is a StringOrURI
    numeric = check(mint(uid=42), principal_claim="uid")
    assert isinstance(numeric, Accepted)
    assert numeric.principal == "42"
    assert "sub" in refusal(check(mint(sub=None)))
    assert "sub" in refusal(check(mint(sub="   ")))
    assert "sub" in refusal(check(mint(sub="x" * (MAX_PRINCIPAL_CHARS + 1))))


def test_missing_scopes_are_403_insufficient_scope_naming_every_needed_scope() -> None:
    verdict = check(mint(scope="read"), scopes=("read", "admin"))
    assert isinstance(verdict, Refused)
    assert (verdict.status, verdict.error, verdict.scope) == (403, "insufficient_scope", "read admin")
    assert "admin" in verdict.description
    assert isinstance(check(mint(scope=None, scp=["admin", "read"]), scopes=("read", "admin")), Accepted)
    assert isinstance(check(mint(scope=None, scp="admin read"), scopes=("admin",)), Accepted)


def test_a_signature_by_another_key_does_not_verify() -> None:
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    assert "signature" in refusal(check(mint(key=other)))


def test_the_key_must_fit_the_tokens_algorithm() -> None:
    assert "is for RS384" in refusal(check(mint(), public_jwk(RSA_KEY, alg="RS384")))
    assert "cannot verify" in refusal(check(mint(EC_KEY, "ES256"), public_jwk(RSA_KEY)))
    assert "cannot verify" in refusal(check(mint(), public_jwk(EC_KEY)))
    assert isinstance(check(mint(EC_KEY, "ES256"), public_jwk(EC_KEY)), Accepted)
    assert isinstance(check(mint(alg="PS256")), Accepted)  # an RSA key without alg serves RS and PS


def test_short_rsa_keys_are_refused() -> None:
    weak = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    with pytest.warns(jwt.warnings.InsecureKeyLengthWarning):  # PyJWT warns when signing with it
        token = mint(weak)
    assert "cannot be verified" in refusal(check(token, public_jwk(weak)))


def test_the_key_set_keeps_only_asymmetric_signature_keys() -> None:
    document = {
        "keys": [
            {"kty": "oct", "k": "c2VjcmV0", "kid": "shared"},
            {**public_jwk(RSA_KEY), "kid": "enc", "use": "enc"},
            {**public_jwk(RSA_KEY), "kid": "sig", "use": "sig"},
            {**public_jwk(EC_KEY)},
            "junk",
        ]
    }
    assert sorted(usable_keys(document)) == ["k1", "sig"]
    with pytest.raises(ValueError, match="no keys list"):
        usable_keys({"keys": "nope"})


def test_discovery_tries_rfc_8414_then_openid_connect() -> None:
    assert discovery_urls("https://login.example") == [
        "https://login.example/.well-known/oauth-authorization-server",
        "https://login.example/.well-known/openid-configuration",
    ]
    assert discovery_urls("https://login.example/tenant/1/") == [
        "https://login.example/.well-known/oauth-authorization-server/tenant/1",
        "https://login.example/tenant/1/.well-known/openid-configuration",
        "https://login.example/.well-known/openid-configuration/tenant/1",
    ]


def test_the_challenge_follows_rfc_6750() -> None:
    meta = "https://mcp.example/.well-known/oauth-protected-resource"
    assert challenge(resource_metadata=meta) == f'Bearer resource_metadata="{meta}"'
    refused = Refused(403, "insufficient_scope", 'needs "admin"\r\n', "read admin")
    assert challenge(resource_metadata=None, refused=refused, scopes=("other",), realm="gw") == (
        'Bearer realm="gw", error="insufficient_scope", error_description="needs admin", scope="read admin"'
    )


@pytest.mark.parametrize(
    ("issuer", "ok"),
    [("https://login.example", True), ("http://127.0.0.1:9000", True), ("http://login.example", False), ("x", False)],
)
def test_issuers_must_be_https_except_on_loopback(issuer: str, ok: bool) -> None:
    if ok:
        OAuthPolicy(issuer)
    else:
        with pytest.raises(ConfigError, match="https"):
            OAuthPolicy(issuer)


def test_oauth_flags_and_a_servers_oauth_key_make_its_policy(tmp_path: Path) -> None:
    settings = parse_settings(["--oauth-issuer", ISSUER, "--oauth-scope", "mcp", "--", "srv"])
    assert settings.servers[0].oauth == OAuthPolicy(ISSUER, scopes=("mcp",))
    env = {"MCP_GATEWAY_OAUTH_ISSUER": ISSUER, "MCP_GATEWAY_OAUTH_PRINCIPAL_CLAIM": "email"}
    assert parse_settings(["--", "srv"], env).servers[0].oauth == OAuthPolicy(ISSUER, principal_claim="email")
    config = tmp_path / "servers.json"
    config.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "files": {"command": "a", "oauth": {"scopes": ["files"], "audience": "api://files"}},
                    "plain": {"command": "b"},
                }
            }
        )
    )
    files, plain = parse_settings(["--oauth-issuer", ISSUER, "--config", str(config)]).servers
    assert files.oauth == OAuthPolicy(ISSUER, audience="api://files", scopes=("files",))
    assert plain.oauth == OAuthPolicy(ISSUER)
    with pytest.raises(ConfigError, match=r"mcpServers\.files\.oauth\.issuer"):
        parse_settings(["--config", str(config)])
    with pytest.raises(ConfigError, match="--oauth-scope"):
        parse_settings(["--oauth-scope", "mcp", "--", "srv"])


class FakeIssuer:
    """``fetch_json`` stand-in: metadata and a JWKS from memory, counting fetches."""

    def __init__(self) -> None:
        self.jwks: Any = {"keys": [public_jwk(RSA_KEY)]}
        self.fetched: list[str] = []
        self.gate: anyio.Event | None = None

    async def fetch(self, url: str) -> Any:
        self.fetched.append(url)
        if self.gate is not None:
            await self.gate.wait()
        if url.endswith("/.well-known/oauth-authorization-server"):
            return {"issuer": "https://other.example", "jwks_uri": "https://wrong.example/jwks"}
        if url.endswith("/.well-known/openid-configuration"):
            return {"issuer": ISSUER, "jwks_uri": f"{ISSUER}/jwks"}
        if isinstance(self.jwks, Exception):
            raise self.jwks
        return self.jwks


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeIssuer:
    issuer = FakeIssuer()
    monkeypatch.setattr(keys_module, "fetch_json", issuer.fetch)
    return issuer


async def settled(keys: KeySet) -> None:
    """Let a background fetch the key set started run to its end."""
    await anyio.wait_all_tasks_blocked()


@pytest.mark.anyio
async def test_keys_are_discovered_cached_and_refreshed_once_per_interval_for_unknown_kids(fake: FakeIssuer) -> None:
    clock = Clock()
    async with KeySet(ISSUER, clock=clock, refresh_interval=30, max_age=3600) as keys:
        assert await keys.key_for("k1") is not None
        # RFC 8414 metadata naming another issuer is skipped; OpenID Connect's is used.
        assert fake.fetched == [
            f"{ISSUER}/.well-known/oauth-authorization-server",
            f"{ISSUER}/.well-known/openid-configuration",
            f"{ISSUER}/jwks",
        ]
        assert await keys.key_for(None) is not None  # no kid, one key: that key
        assert await keys.key_for("nope") is None
        assert await keys.key_for("nope") is None
        assert keys.fetches == 2  # one refresh for the unknown kid, none for the second
        clock.now = 30
        assert await keys.key_for("nope") is None
        assert keys.fetches == 3
        clock.now = 3700
        assert await keys.key_for("k1") is not None  # aged out: served, and refreshed behind
        await settled(keys)
        assert keys.fetches == 4
        assert fake.fetched.count(f"{ISSUER}/.well-known/openid-configuration") == 1  # discovered once


@pytest.mark.anyio
async def test_concurrent_requests_share_one_fetch(fake: FakeIssuer) -> None:
    fake.gate = anyio.Event()
    found: list[object] = []
    async with KeySet(ISSUER, f"{ISSUER}/jwks", clock=Clock()) as keys:

        async def ask() -> None:
            found.append(await keys.key_for("k1"))

        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                for _ in range(5):
                    tg.start_soon(ask)
                await anyio.wait_all_tasks_blocked()
                fake.gate.set()
    assert fake.fetched == [f"{ISSUER}/jwks"]
    assert all(key is not None for key in found)


@pytest.mark.anyio
async def test_a_cold_fetch_is_waited_for_once_even_by_requests_that_arrive_while_it_runs(fake: FakeIssuer) -> None:
    """#24.14: a request that came while the first fetch ran used to wait for it, then fetch
    (and wait) again. Every waiter waits for the one fetch; a failed one answers them all."""
    fake.gate = anyio.Event()
    fake.jwks = ValueError("HTTP 500")
    outcomes: list[str] = []
    async with KeySet(ISSUER, f"{ISSUER}/jwks", clock=Clock()) as keys:

        async def ask() -> None:
            try:
                await keys.key_for("k1")
                outcomes.append("key")
            except Unavailable:
                outcomes.append("unavailable")

        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(ask)
                await anyio.wait_all_tasks_blocked()  # the first fetch is under way
                for _ in range(4):
                    tg.start_soon(ask)
                await anyio.wait_all_tasks_blocked()
                fake.gate.set()
    assert outcomes == ["unavailable"] * 5
    assert fake.fetched == [f"{ISSUER}/jwks"]  # one fetch, one wait


@pytest.mark.anyio
async def test_held_keys_keep_serving_while_a_refresh_hangs_after_a_failed_one(fake: FakeIssuer) -> None:
    """#24.5: an unknown kid's refresh failed, which marked the fresh keys due, so every later
    request waited on the next refresh (which hung). Held keys serve while refreshes run or fail."""
    clock = Clock()
    async with KeySet(ISSUER, f"{ISSUER}/jwks", clock=clock, refresh_interval=30, max_age=3600) as keys:
        assert await keys.key_for("k1") is not None
        clock.now = 30
        fake.jwks = ValueError("HTTP 500")
        assert await keys.key_for("made-up") is None  # its refresh failed
        clock.now = 30 + keys_module.RETRY_INTERVAL + 1
        fake.gate = anyio.Event()  # the issuer now hangs
        with anyio.fail_after(5):
            for _ in range(20):
                assert await keys.key_for("k1") is not None  # never waits on the issuer
        clock.now = 3700  # past its age: a refresh starts behind, and hangs; the keys still serve
        with anyio.fail_after(5):
            for _ in range(20):
                assert await keys.key_for("k1") is not None
        assert keys.attempts == 3
        fake.jwks = {"keys": [public_jwk(RSA_KEY)]}
        fake.gate.set()
        await settled(keys)
        assert keys.fetches == 2


@pytest.mark.anyio
async def test_a_failing_issuer_is_unavailable_until_it_answers_and_held_keys_survive_failures(
    fake: FakeIssuer,
) -> None:
    clock = Clock()
    async with KeySet(ISSUER, f"{ISSUER}/jwks", clock=clock, max_age=100, max_stale=1000) as keys:
        fake.jwks = ValueError("HTTP 500")
        with pytest.raises(Unavailable):
            await keys.key_for("k1")
        with pytest.raises(Unavailable):
            await keys.key_for("k1")
        assert len(fake.fetched) == 1  # not asked again before the retry interval
        clock.now = keys_module.RETRY_INTERVAL
        fake.jwks = {"keys": [public_jwk(RSA_KEY)]}
        assert await keys.key_for("k1") is not None
        clock.now = 200
        fake.jwks = ValueError("HTTP 500")
        assert await keys.key_for("k1") is not None  # the held keys stay in use
        await settled(keys)
        clock.now = keys_module.RETRY_INTERVAL + 100 + 1000  # past their age and the staleness allowed
        with pytest.raises(Unavailable):
            await keys.key_for("k1")  # dropped: a cold start, and the issuer still fails


@pytest.mark.anyio
async def test_a_verified_token_is_remembered_until_it_expires_or_the_keys_change(
    fake: FakeIssuer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gateway.oauth import gate as gate_module
    from gateway.oauth.gate import OAuthGate

    verified: list[str] = []
    real_verify = gate_module.verify

    def counting_verify(*args: Any, **kwargs: Any) -> Accepted | Refused:
        verified.append(args[0])
        return real_verify(*args, **kwargs)

    monkeypatch.setattr(gate_module, "verify", counting_verify)
    wall = Clock()
    wall.now = NOW
    clock = Clock()
    gate = OAuthGate(
        {"/mcp": OAuthPolicy(ISSUER, jwks_url=f"{ISSUER}/jwks")},
        public_url="https://mcp.example",
        wall_clock=wall,
        key_set=lambda issuer, url: KeySet(issuer, url, clock=clock, max_age=100),
    )
    token = mint()
    async with gate:
        for _ in range(3):
            assert isinstance(await gate.check(token, "/mcp"), Accepted)
        assert len(verified) == 1
        wall.now = NOW + 300 + CLOCK_LEEWAY + 1
        assert "expired" in refusal(await gate.check(token, "/mcp"))  # from the cache, still checked
        wall.now = NOW
        clock.now = 200  # the key set is due again: the token is verified again
        assert isinstance(await gate.check(token, "/mcp"), Accepted)
        assert len(verified) == 2
