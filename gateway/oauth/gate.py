"""Which policy guards which path, and the verdict for a token presented there.

Each MCP endpoint path (``/servers/NAME/mcp``, and ``/mcp`` for a single server) is guarded
by its server's ``OAuthPolicy``, or by none. Its expected audience is the policy's
``audience`` or, by default, the endpoint's public URL (``--public-url`` + the path), so a
token minted for another resource — another server behind this gateway included — is
refused. Other paths (``/status``) accept a token that some endpoint here would accept.

Issuers share one ``KeySet`` per (issuer, JWKS URL), so servers with the same authorization
server fetch its keys once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gateway.errors import ConfigError
from gateway.oauth.keys import KeySet, Unavailable
from gateway.oauth.validation import (
    Accepted,
    Expectation,
    OAuthPolicy,
    Refused,
    invalid,
    read_header,
    verify,
)

__all__ = ["OAuthGate", "Unavailable"]


@dataclass(frozen=True)
class Guard:
    expect: Expectation
    keys: KeySet


class OAuthGate:
    def __init__(
        self,
        endpoints: Mapping[str, OAuthPolicy | None],
        *,
        public_url: str | None,
        wall_clock: Callable[[], float] = time.time,
        key_set: Callable[[str, str | None], KeySet] = KeySet,
    ) -> None:
        """``endpoints``: every MCP endpoint path and its policy (None: not guarded by OAuth)."""
        self.wall_clock = wall_clock
        self.key_sets: dict[tuple[str, str | None], KeySet] = {}
        self._guards: dict[str, Guard | None] = {}
        for path, policy in endpoints.items():
            if policy is None:
                self._guards[path] = None
                continue
            if policy.audience is None and not public_url:
                raise ConfigError("oauth_audience", "needs --public-url or --oauth-audience (the token's audience)")
            audience = policy.audience or f"{public_url.rstrip('/') if public_url else ''}{path}"
            where = (policy.issuer, policy.jwks_url)
            if where not in self.key_sets:
                self.key_sets[where] = key_set(policy.issuer, policy.jwks_url)
            expect = Expectation(policy.issuer, (audience,), policy.scopes, policy.principal_claim)
            self._guards[path] = Guard(expect, self.key_sets[where])
        self._all = list(dict.fromkeys(guard for guard in self._guards.values() if guard is not None))

    @property
    def enabled(self) -> bool:
        return bool(self._all)

    def guards(self, path: str) -> list[Guard]:
        if path in self._guards:
            guard = self._guards[path]
            return [guard] if guard is not None else []
        return self._all

    def protects(self, path: str) -> bool:
        return bool(self.guards(path))

    def scopes(self, path: str) -> tuple[str, ...]:
        guards = self.guards(path)
        return guards[0].expect.scopes if len(guards) == 1 else ()

    async def check(self, token: str, path: str) -> Accepted | Refused:
        """The verdict for ``token`` at ``path``; raises ``Unavailable`` when no keys can be had."""
        header = read_header(token)
        if isinstance(header, Refused):
            return header
        verdict: Accepted | Refused = invalid("no protected resource here accepts tokens")
        for guard in self.guards(path):
            jwk = await guard.keys.key_for(header.kid)
            if jwk is None:
                unknown = f"the issuer has no key {header.kid[:40]!r}" if header.kid else "the token names no kid"
                verdict = invalid(unknown)
                continue
            verdict = verify(token, header, jwk, guard.expect, now=self.wall_clock())
            if isinstance(verdict, Accepted):
                return verdict
        return verdict
