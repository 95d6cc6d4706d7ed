"""RFC 9728 protected-resource metadata: where an MCP client learns which issuer to log in at.

``GET /.well-known/oauth-protected-resource`` describes the gateway (``resource`` is
``<base>/mcp`` with one server, ``<base>`` with several); ``GET
/.well-known/oauth-protected-resource/servers/NAME/mcp`` (and ``…/mcp``) describes one
endpoint, as RFC 9728 §3.1 places it for a resource with a path. An endpoint guarded by
OAuth names its issuer (and ``scopes_supported``); one without names the
``--oauth-authorization-server`` URLs. The 401 challenge of a ``/servers/NAME/mcp`` request
points at that endpoint's document, so a client asks its issuer for a token whose audience
is exactly that endpoint.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from starlette.types import Scope

from gateway.oauth.policy import OAuthPolicy

METADATA_PATH: Final = "/.well-known/oauth-protected-resource"


class ResourceMetadata:
    def __init__(
        self,
        endpoints: Mapping[str, OAuthPolicy | None],
        *,
        public_url: str | None,
        authorization_servers: Iterable[str] = (),
    ) -> None:
        self.endpoints = dict(endpoints)
        self.public_url = public_url.rstrip("/") if public_url else None
        self.extra = list(authorization_servers)
        self.single = "/mcp" in self.endpoints

    @property
    def enabled(self) -> bool:
        return bool(self.extra) or any(policy is not None for policy in self.endpoints.values())

    def base(self, scope: Scope) -> str:
        if self.public_url:
            return self.public_url
        host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), None)
        if host is None:
            server = scope.get("server") or ("localhost", None)
            host = f"{server[0]}:{server[1]}" if server[1] else str(server[0])
        return f"{scope.get('scheme', 'http')}://{host}"

    def url_for(self, path: str, scope: Scope) -> str:
        """The metadata URL a 401 at ``path`` points to."""
        suffix = path if path.startswith("/servers/") and path in self.endpoints else ""
        return f"{self.base(scope)}{METADATA_PATH}{suffix}"

    def document(self, path: str, scope: Scope) -> dict[str, Any] | None:
        """The metadata for endpoint ``path`` ("" for the gateway); None: no such endpoint."""
        base = self.base(scope)
        if path and path not in self.endpoints:
            return None
        if not path:
            path = "/mcp" if self.single else ""
        policies = [self.endpoints[path]] if path else list(self.endpoints.values())
        issuers = [policy.issuer for policy in policies if policy is not None]
        servers = list(dict.fromkeys(issuers if path and issuers else [*issuers, *self.extra]))
        document: dict[str, Any] = {
            "resource": f"{base}{path}",
            "authorization_servers": servers,
            "bearer_methods_supported": ["header"],
        }
        scopes = list(dict.fromkeys(scope for policy in policies if policy is not None for scope in policy.scopes))
        if scopes:
            document["scopes_supported"] = scopes
        return document
