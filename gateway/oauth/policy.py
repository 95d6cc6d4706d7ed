"""How one server's endpoint checks OAuth access tokens (``--oauth-*``, config key ``oauth``),
as settings: the policy and its URL checks, with no JWT library loaded (``--help``, the
config file and ``call`` read it; ``gateway.oauth.validation`` checks tokens against it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from gateway.errors import ConfigError

DEFAULT_PRINCIPAL_CLAIM: Final = "sub"

LOOPBACK_HOSTS: Final = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})


def check_url(url: str, key: str) -> str:
    """An issuer or JWKS URL: https, or http on loopback only (a test issuer on this host)."""
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return url
    if parts.scheme == "http" and parts.hostname in LOOPBACK_HOSTS:
        return url
    raise ConfigError(key, f"{url!r} must be an https URL (http only on loopback)")


@dataclass(frozen=True)
class OAuthPolicy:
    """How one server's endpoint checks access tokens (flags ``--oauth-*``, config key ``oauth``).

    ``audience`` None: the endpoint's public URL (``--public-url`` + its path)."""

    issuer: str
    jwks_url: str | None = None
    audience: str | None = None
    scopes: tuple[str, ...] = ()
    principal_claim: str = DEFAULT_PRINCIPAL_CLAIM

    def __post_init__(self) -> None:
        check_url(self.issuer, "--oauth-issuer")
        if self.jwks_url is not None:
            check_url(self.jwks_url, "--oauth-jwks-url")
        if not self.principal_claim:
            raise ConfigError("--oauth-principal-claim", "must name a claim")
        if any(not scope or " " in scope for scope in self.scopes):
            raise ConfigError("--oauth-scope", "a scope is one non-empty word")
