"""Which pool a request goes to, as a value: ``PoolKey`` (``gateway.relay.router`` makes them).

A key is the isolation scope (shared, a principal, a legacy session), a fingerprint of the
credentials mapped from headers into the child's environment, the era share (the legacy
clients' children of a dual server), the capabilities its legacy children are told
(``gateway.protocol.inputs.capability_key``) and the roots set they are given
(``gateway.protocol.roots.roots_key``: every ``roots/list`` of such a child is answered with
that set, so they hold no other). Pure values; imports only the standard library.

A key is a ``NamedTuple``: every request looks its pool up by one (``Router.pool_for``), and a
tuple's hash and equality run in C, where a frozen dataclass's run as Python methods (with its
five fields, a few thousand instructions of a call: bench.instructions).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Final, NamedTuple


class PoolKey(NamedTuple):
    scope: str  # "shared", "principal:NAME" or "session:ID"
    fingerprint: str = ""
    era: str = ""  # "legacy": children opened with initialize, for legacy clients of a dual server
    told: str = ""  # the client capabilities its legacy children are told (inputs.capability_key); "": the configured
    roots: str = ""  # the roots set its children are given (roots.roots_key); "": the configured roots, or none

    @property
    def kind(self) -> str:
        """``shared``, ``principal`` or ``session``: what metrics label a pool by (a label per
        principal or session would grow without bound, and name identities on an open page)."""
        return self.scope.partition(":")[0]

    def label(self, server: str) -> str:
        parts = [server]
        if self.scope != "shared":
            kind, _, value = self.scope.partition(":")
            parts.append(f"{kind}={value[:8] + '…' if kind == 'session' else value}")
        if self.fingerprint:
            parts.append(f"credentials={self.fingerprint[:12]}")
        if self.era:
            parts.append(f"era={self.era}")
        if self.told:
            parts.append(f"capabilities={self.told}")
        if self.roots:
            parts.append(f"roots={self.roots}")
        return " ".join(parts)


SESSION_PREFIX: Final = "session:"
"""A session's own pool's key scope starts with this (``isolation: session``)."""
SHARED_KEY: Final = PoolKey("shared")
SHARED_LEGACY_KEY: Final = PoolKey("shared", era="legacy")
"""The legacy clients' share of a dual server's children: kept warm like the shared pool once
a legacy client has come (it is not known to be needed before)."""


def credential_env(mapping: Mapping[str, str], headers: Mapping[str, str]) -> dict[str, str]:
    """The child environment overlay that the request's headers give."""
    return {env: headers[header] for header, env in mapping.items() if header in headers}


def fingerprint(env: Mapping[str, str]) -> str:
    if not env:
        return ""
    digest = hashlib.sha256()
    for name in sorted(env):
        digest.update(name.encode() + b"\x00" + env[name].encode() + b"\x00")
    return digest.hexdigest()
