"""Settings of the ``security`` and ``OAuth access tokens and TLS`` sections: who may call, and how much.

Declared as ``gateway.settings.declaration.Setting``; ``gateway.settings`` gathers them."""

from __future__ import annotations

from typing import Final

from gateway.http.edge_settings import MAX_REQUESTS_PER_PRINCIPAL, MAX_STREAMS_PER_PRINCIPAL
from gateway.oauth.policy import DEFAULT_PRINCIPAL_CLAIM
from gateway.protocol.ingress import MAX_BATCH_MESSAGES
from gateway.relay.server_config import MAX_SESSIONS_PER_PRINCIPAL
from gateway.settings import convert
from gateway.settings.declaration import AT_LEAST_ONE, OAUTH_TLS, SECURITY, Setting

SETTINGS: Final[tuple[Setting, ...]] = (
    Setting(
        "--max-requests-per-principal",
        field="max_requests_per_principal",
        check=AT_LEAST_ONE,
        kind=int,
        default=MAX_REQUESTS_PER_PRINCIPAL,
        metavar="N",
        section=SECURITY,
        help="requests at once per principal (an anonymous client: per peer address); then 429 (default: %(default)s)",
    ),
    Setting(
        "--max-streams-per-principal",
        field="max_streams_per_principal",
        check=AT_LEAST_ONE,
        kind=int,
        default=MAX_STREAMS_PER_PRINCIPAL,
        metavar="N",
        section=SECURITY,
        help="streams open at once per principal (an anonymous client: per peer address): legacy GET streams "
        "and subscriptions/listen; then 429 (default: %(default)s)",
    ),
    Setting(
        "--max-connections",
        field="max_connections",
        check=AT_LEAST_ONE,
        kind=int,
        default=None,
        metavar="N",
        section=SECURITY,
        help="connections the listener holds at once, from all clients; past it a new connection's request gets 503 "
        "with Retry-After and the connection is closed, and a descriptor is left for the children "
        "(default: half the open-file limit, 64 to 16384)",
    ),
    Setting(
        "--max-sessions-per-principal",
        key="maxSessionsPerPrincipal",
        target="server.max_sessions_per_principal",
        check=AT_LEAST_ONE,
        kind=int,
        default=MAX_SESSIONS_PER_PRINCIPAL,
        metavar="N",
        section=SECURITY,
        help="legacy sessions one principal (an anonymous client: per peer address) may hold per server; then 429 "
        "for its next initialize, and nobody else's session is ended (default: %(default)s)",
    ),
    Setting(
        "--max-batch-size",
        key="maxBatchSize",
        target="server.max_batch_size",
        check=AT_LEAST_ONE,
        kind=int,
        default=MAX_BATCH_MESSAGES,
        metavar="N",
        section=SECURITY,
        help="messages in one 2025-03-26 JSON-RPC batch; a larger batch gets 400 before any runs "
        "(default: %(default)s)",
    ),
    Setting(
        "--expose-child-errors",
        key="exposeChildErrors",
        target="spec.expose_errors",
        kind=bool,
        default=False,
        section=SECURITY,
        help="put a failing child's stderr, command, pid and start-up hints in the errors clients get; by default "
        "clients get what failed and how (exit code, signal, error kind) and only the log and /status carry the "
        "rest. For local development: in a shared pool the client that reads a child's stderr may not be the "
        "one that caused it",
    ),
    Setting(
        "--auth-token-file",
        field="auth_token_file",
        brief=True,
        metavar="FILE",
        section=SECURITY,
        help="bearer tokens, one per line, optionally NAME:TOKEN (NAME becomes the principal); re-read when it changes",
    ),
    Setting(
        "--auth-token",
        field="auth_tokens",
        repeat=True,
        metavar="[NAME:]TOKEN",
        section=SECURITY,
        help="a bearer token (repeatable; prefer the file or MCP_GATEWAY_AUTH_TOKEN)",
    ),
    Setting(
        "--operator-token-file",
        field="operator_token_file",
        metavar="FILE",
        section=SECURITY,
        help="tokens that open /status and /ui (Bearer, or the /ui login form's cookie), one per line; "
        "re-read when it changes. Without one, /status and /ui answer loopback peers only, and nobody "
        "once clients authenticate; MCP tokens never open them",
    ),
    Setting(
        "--operator-token",
        field="operator_tokens",
        repeat=True,
        metavar="TOKEN",
        section=SECURITY,
        help="an operator token (repeatable; prefer the file or MCP_GATEWAY_OPERATOR_TOKEN)",
    ),
    Setting(
        "--trusted-proxy",
        field="trusted_proxies",
        repeat=True,
        metavar="ADDRESS",
        section=SECURITY,
        help="accept --principal-header only from these client addresses or CIDRs (repeatable; none: loopback only)",
    ),
    Setting(
        "--cors-origin",
        field="cors_origins",
        repeat=True,
        metavar="ORIGIN",
        section=SECURITY,
        help="answer CORS for this browser origin ('*' for any; repeatable)",
    ),
    Setting(
        "--oauth-authorization-server",
        field="oauth_authorization_servers",
        repeat=True,
        metavar="URL",
        section=SECURITY,
        help="serve RFC 9728 protected-resource metadata naming this authorization server",
    ),
    Setting(
        "--public-url",
        field="public_url",
        metavar="URL",
        section=SECURITY,
        help="the gateway's external base URL (for the protected-resource metadata)",
    ),
    Setting(
        "--oauth-issuer",
        key="oauth.issuer",
        target="oauth.issuer",
        metavar="URL",
        section=OAUTH_TLS,
        help="accept JWT access tokens from this authorization server (checked against its published keys); "
        "static tokens keep working alongside",
    ),
    Setting(
        "--oauth-jwks-url",
        key="oauth.jwksUrl",
        target="oauth.jwks_url",
        metavar="URL",
        section=OAUTH_TLS,
        help="the issuer's JWKS (default: the jwks_uri of its RFC 8414 or OpenID Connect metadata)",
    ),
    Setting(
        "--oauth-audience",
        key="oauth.audience",
        target="oauth.audience",
        metavar="URL",
        section=OAUTH_TLS,
        help="the audience tokens must name (default: the endpoint's public URL, --public-url + its path)",
    ),
    Setting(
        "--oauth-scope",
        convert=convert.strings,
        key="oauth.scopes",
        target="oauth.scopes",
        repeat=True,
        metavar="SCOPE",
        section=OAUTH_TLS,
        help="a scope every token must grant, else 403 insufficient_scope (repeatable)",
    ),
    Setting(
        "--operator-scope",
        field="operator_scope",
        metavar="SCOPE",
        section=OAUTH_TLS,
        help="an access token (from --oauth-issuer, accepted by an endpoint here) that grants this scope "
        "also opens /status and /ui",
    ),
    Setting(
        "--oauth-principal-claim",
        key="oauth.principalClaim",
        target="oauth.principal_claim",
        default=DEFAULT_PRINCIPAL_CLAIM,
        metavar="NAME",
        section=OAUTH_TLS,
        help="the token claim that becomes the principal (default: %(default)s)",
    ),
    Setting(
        "--tls-cert-file",
        field="tls_cert_file",
        metavar="FILE",
        section=OAUTH_TLS,
        help="serve HTTPS with this PEM certificate chain; reloaded when it changes",
    ),
    Setting(
        "--tls-key-file",
        field="tls_key_file",
        metavar="FILE",
        section=OAUTH_TLS,
        help="the certificate's PEM private key; reloaded when it changes",
    ),
    Setting(
        "--tls-client-ca-file",
        field="tls_client_ca_file",
        metavar="FILE",
        section=OAUTH_TLS,
        help="require client certificates signed by this CA (mutual TLS); the subject becomes the principal",
    ),
)
