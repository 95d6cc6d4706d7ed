"""Which policy guards which path, and the verdict for a token presented there.

Each MCP endpoint path (``/servers/NAME/mcp``, and ``/mcp`` for a single server) is guarded
by its server's ``OAuthPolicy``, or by none. Its expected audience is the policy's
``audience`` or, by default, the endpoint's public URL (``--public-url`` + the path), so a
token minted for another resource — another server behind this gateway included — is
refused. Other paths (``/status``) accept a token that some endpoint here would accept.

Issuers share one ``KeySet`` per (issuer, JWKS URL), so servers with the same authorization
server fetch its keys once. The gate is used inside ``async with`` (the app's lifespan), which
runs its key sets' fetches.

A token that passed is remembered (by its SHA-256, at most ``VERIFIED_CACHE_SIZE``, oldest
first out) with the key set's fetch count: the next request with it skips the parsing and the
signature (some 0.5 ms of PyJWT per token) and re-checks only ``exp``/``nbf``, the principal
and the scopes. Once the key set is due to be fetched again, or was (a withdrawn key), every
remembered token is verified again.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from types import TracebackType
from typing import Final

from gateway.errors import ConfigError
from gateway.oauth.keys import KeySet, Unavailable
from gateway.oauth.validation import (
    Accepted,
    Expectation,
    OAuthPolicy,
    Refused,
    check_claims,
    invalid,
    read_header,
    verify,
)

VERIFIED_CACHE_SIZE: Final = 4096
"""Tokens remembered as verified (32-byte digests plus their claims)."""

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
                raise ConfigError("--oauth-audience", "needs --public-url or --oauth-audience (the token's audience)")
            audience = policy.audience or f"{public_url.rstrip('/') if public_url else ''}{path}"
            where = (policy.issuer, policy.jwks_url)
            if where not in self.key_sets:
                self.key_sets[where] = key_set(policy.issuer, policy.jwks_url)
            expect = Expectation(policy.issuer, (audience,), policy.scopes, policy.principal_claim)
            self._guards[path] = Guard(expect, self.key_sets[where])
        self._all = list(dict.fromkeys(guard for guard in self._guards.values() if guard is not None))
        # (token digest, guard) → (key-set fetch count, the accepted claims)
        self._verified: OrderedDict[tuple[bytes, Guard], tuple[int, Accepted]] = OrderedDict()
        self._stack: AsyncExitStack | None = None

    async def __aenter__(self) -> OAuthGate:
        async with AsyncExitStack() as stack:  # a key set that fails to enter leaves the others
            for keys in self.key_sets.values():
                await stack.enter_async_context(keys)
            self._stack = stack.pop_all()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._stack is not None:
            stack, self._stack = self._stack, None
            await stack.aclose()

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
        guards = self.guards(path)
        digest = hashlib.sha256(token.encode()).digest()
        for guard in guards:
            remembered = self._verified.get((digest, guard))
            if remembered is not None and remembered[0] == guard.keys.fetches and not guard.keys.is_due():
                self._verified.move_to_end((digest, guard))
                return check_claims(remembered[1].claims, guard.expect, self.wall_clock())
        header = read_header(token)
        if isinstance(header, Refused):
            return header
        verdict: Accepted | Refused = invalid("no protected resource here accepts tokens")
        for guard in guards:
            jwk = await guard.keys.key_for(header.kid)
            if jwk is None:
                unknown = f"the issuer has no key {header.kid[:40]!r}" if header.kid else "the token names no kid"
                verdict = invalid(unknown)
                continue
            verdict = verify(token, header, jwk, guard.expect, now=self.wall_clock())
            if isinstance(verdict, Accepted):
                self._remember((digest, guard), guard.keys.fetches, verdict)
                return verdict
        return verdict

    def _remember(self, key: tuple[bytes, Guard], fetches: int, verdict: Accepted) -> None:
        self._verified[key] = (fetches, verdict)
        while len(self._verified) > VERIFIED_CACHE_SIZE:
            self._verified.popitem(last=False)
