"""Who may read ``/status`` and ``/ui``: the operator, never merely an MCP client.

``/status`` and ``/ui`` show every server's command line, its children's pids and stderr
tails, the principals' pool labels and the recent warnings and errors. An MCP endpoint's
token (or OAuth token) says nothing about who may read that, so they have their own
credential (``OperatorAccess.refusal``, run by ``gateway.http.edge``):

- **Operator tokens** (``--operator-token-file FILE``, one per line as for
  ``--auth-token-file``, re-read when it changes; or ``--operator-token TOKEN``): a request
  with ``Authorization: Bearer <operator token>``, or with the operator cookie below, may
  read them; any other gets 401 (for ``/ui``: the login page). MCP clients' tokens never
  count here, and an operator token is no MCP token.
- **An operator scope** (``--operator-scope SCOPE``, with ``--oauth-issuer``): an OAuth
  access token that an endpoint here accepts *and* that grants that scope opens them too
  (one without it: 403 ``insufficient_scope``).
- **The login form** (a browser cannot send a bearer header): ``/ui`` without a credential
  answers a one-field form that POSTs the token to ``/ui/login``. A token that matches
  (compared with ``hmac.compare_digest``, every token, no early exit) gets a 303 to ``/ui``
  and the cookie ``mcp_gateway_operator``: ``HttpOnly`` (no script reads it),
  ``SameSite=Strict`` (no other site's page sends it), ``Secure`` over HTTPS, set twice,
  with ``Path=/ui`` and ``Path=/status``, for ``COOKIE_SECONDS``. Its value is no token: an
  expiry and an HMAC (a key derived from the current key of ``--state-secret-file``, so
  replicas and workers accept each other's, and checked with every key of that keyring, so a
  rotation keeps logins; or a random key per process) over that expiry and the token's
  digest, so removing the token from the file ends its cookies. The form is CSRF-safe: the
  edge refuses a POST whose ``Origin`` is not this very host (403), the cookie never leaves
  the site, and the pages it opens only read.
- **Without an operator token**, nobody is an operator by credential: when MCP clients
  authenticate (tokens, OAuth, client certificates or a principal header), ``/status`` and
  ``/ui`` answer 403 naming ``--operator-token-file``; when they do not (the default, on
  127.0.0.1), they answer loopback peers only (127.0.0.0/8, ::1) and 403 to any other
  address, so a gateway bound to ``0.0.0.0`` without tokens does not show its children's
  command lines and stderr to the network.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import time
from collections.abc import Callable, Mapping
from html import escape
from typing import Final
from urllib.parse import parse_qs

import anyio
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, Response
from starlette.types import ASGIApp, Receive, Scope

from gateway.errors import CODE_UNAVAILABLE
from gateway.http.auth import LOGIN_PATH, REALM, RETRY_AFTER, TokenStore
from gateway.http.edge_settings import BODY_TIMEOUT
from gateway.http.endpoint import read_body
from gateway.http.wire import error_response
from gateway.oauth.gate import OAuthGate, Unavailable
from gateway.oauth.validation import Accepted, Refused, challenge
from gateway.protocol.jsonrpc import error_object
from gateway.protocol.keyring import matching
from gateway.relay.statekeys import StateKeys

COOKIE_NAME: Final = "mcp_gateway_operator"
COOKIE_SECONDS: Final = 12 * 3600
"""How long a login lasts: a working day; then the form again."""
COOKIE_PATHS: Final = ("/ui", "/status")
MAX_LOGIN_BODY_BYTES: Final = 4096
"""Largest login form read (one token field)."""
MAX_COOKIE_CHARS: Final = 128
"""Longest operator cookie value read (ours are about 60 characters)."""
COOKIE_KEYS: Final = "operator cookie"
"""The purpose cookie keys are derived for from each key of the state keyring."""
OPERATOR_REALM: Final = f"{REALM} operator"
LOGIN_SECURITY_POLICY: Final = (
    "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'"
)


def _is_loopback(scope: Scope) -> bool:
    client = scope.get("client")
    if not client:
        return False
    try:
        return ipaddress.ip_address(client[0]).is_loopback
    except ValueError:
        return False


def _cookie(headers: Mapping[bytes, bytes]) -> str | None:
    for part in headers.get(b"cookie", b"").decode("latin-1").split(";"):
        name, sep, value = part.strip().partition("=")
        if sep and name == COOKIE_NAME and len(value) <= MAX_COOKIE_CHARS:
            return value
    return None


def login_page(problem: str | None = None) -> str:
    note = f'<p class="bad">{escape(problem)}</p>' if problem else ""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>mcp-stdio-gateway: operator login</title>'
        "<style>body{font:14px/1.4 system-ui,sans-serif;margin:2em}.bad{color:#a40e26}"
        "input{font:inherit;padding:.3em;width:28em}</style></head><body>"
        "<h1>mcp-stdio-gateway</h1><p>/ui and /status need the operator token (--operator-token-file).</p>"
        f'{note}<form method="post" action="ui/login"><label>operator token '
        '<input type="password" name="token" autocomplete="current-password" autofocus required></label> '
        '<button type="submit">sign in</button></form></body></html>'
    )


class OperatorAccess:
    """The operator's credential for ``/status`` and ``/ui`` (see the module docstring)."""

    def __init__(
        self,
        tokens: TokenStore,
        *,
        keys: StateKeys,
        clients_authenticate: bool,
        oauth: OAuthGate | None = None,
        scope: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``keys``: the state keyring cookies are signed (its current key) and checked (every
        key) with; ``oauth`` and ``scope``: access tokens granting ``scope`` are operators' too."""
        self.tokens = tokens
        self.oauth = oauth if scope is not None else None
        self.scope = scope
        self.keys = keys
        self.clients_authenticate = clients_authenticate
        self.clock = clock

    @property
    def configured(self) -> bool:
        """Some operator credential is configured (tokens or a scope)."""
        return self.tokens.enabled or self.oauth is not None

    async def refusal(self, scope: Scope, headers: Mapping[bytes, bytes]) -> ASGIApp | None:
        """None when the request may read ``/status`` or ``/ui`` (or post the login form), else
        its answer: 401 (the login page for ``/ui``), 403, or 503 (the issuer's keys)."""
        if scope["path"] == LOGIN_PATH:
            return None if self.tokens.enabled else self._forbidden("no --operator-token-file is configured")
        if not self.configured:
            if self.clients_authenticate:
                return self._forbidden(
                    "needs the operator token (--operator-token-file): MCP clients' tokens do not open it"
                )
            if _is_loopback(scope):
                return None
            return self._forbidden("answers loopback peers only unless --operator-token-file is configured")
        authorization = headers.get(b"authorization", b"")
        scheme, _, presented = authorization.partition(b" ")
        if scheme.lower() == b"bearer" and presented.strip():
            presented = presented.strip()
            if self.tokens.enabled and self.tokens.principal_for(presented, time.monotonic()) is not None:
                return None
            if self.oauth is not None:
                return await self._by_scope(scope, presented.decode("latin-1"))
        else:
            cookie = _cookie(headers)
            if cookie is not None and self._cookie_ok(cookie):
                return None
        why = "invalid operator token" if authorization else "the operator token is needed"
        if scope["path"] == "/ui":
            return self._login_page(401, None if not authorization else why)
        challenge = f'Bearer realm="{OPERATOR_REALM}"'
        return error_response(
            401, error_object(-32600, f"unauthorized: {why}"), headers={"www-authenticate": challenge}
        )

    async def _by_scope(self, scope: Scope, token: str) -> ASGIApp | None:
        """An access token an endpoint here accepts, granting the operator scope: None; else the refusal."""
        assert self.oauth is not None
        assert self.scope is not None
        try:
            verdict: Accepted | Refused = await self.oauth.check(token, scope["path"])
        except Unavailable as exc:
            return error_response(503, error_object(CODE_UNAVAILABLE, str(exc)), retry_after=RETRY_AFTER)
        if isinstance(verdict, Accepted) and self.scope in verdict.scopes:
            return None
        if isinstance(verdict, Accepted):
            verdict = Refused(403, "insufficient_scope", f"the token lacks the operator scope {self.scope}", self.scope)
        value = challenge(resource_metadata=None, refused=verdict, realm=OPERATOR_REALM)
        status = verdict.status
        message = f"{'forbidden' if status == 403 else 'unauthorized'}: {verdict.description}"
        return error_response(status, error_object(-32600, message), headers={"www-authenticate": value})

    def _forbidden(self, why: str) -> ASGIApp:
        return error_response(403, error_object(-32600, f"/status and /ui: {why}"))

    @staticmethod
    def _login_page(status: int, problem: str | None) -> Response:
        headers = {"content-security-policy": LOGIN_SECURITY_POLICY, "cache-control": "no-store"}
        return HTMLResponse(login_page(problem), status_code=status, headers=headers)

    def mint_cookie(self, secret: bytes, now: float) -> str:
        expiry = int(now) + COOKIE_SECONDS
        key = self.keys.ring.derived(COOKIE_KEYS)[0]
        return f"{expiry}.{_mac(key, expiry, secret)}"

    def _cookie_ok(self, value: str) -> bool:
        stamp, _, mac = value.partition(".")
        if not stamp.isdigit() or len(stamp) > 12 or int(stamp) <= self.clock():
            return False
        keys = self.keys.ring.derived(COOKIE_KEYS)
        expected = [
            _mac(key, int(stamp), token.secret).encode()
            for token in self.tokens.current(time.monotonic())
            for key in keys
        ]
        return matching(mac.encode(), expected) is not None  # every token and key, no early exit

    async def login(self, request: Request) -> Response:
        """``POST /ui/login``: the form's token for the cookie (303 to ``/ui``), or the form again (401)."""
        return await self._login(request.scope, request.receive)

    async def _login(self, scope: Scope, receive: Receive) -> Response:
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        if headers.get("content-type", "").split(";")[0].strip() != "application/x-www-form-urlencoded":
            return error_response(415, error_object(-32600, "the login form posts application/x-www-form-urlencoded"))
        body: bytes | None = b""
        try:
            with anyio.move_on_after(BODY_TIMEOUT) as reading:
                body = await read_body(headers, receive, MAX_LOGIN_BODY_BYTES)
        except ClientDisconnect:
            return Response(status_code=400)
        if reading.cancelled_caught or body is None:
            return error_response(400, error_object(-32600, "the login form did not arrive whole"))
        fields = parse_qs(body.decode("latin-1"), max_num_fields=4)
        presented = (fields.get("token") or [""])[0].strip().encode("latin-1")
        secret = self._secret_of(presented)
        if secret is None:
            return self._login_page(401, "that is not an operator token")
        value = self.mint_cookie(secret, self.clock())
        secure = "; Secure" if scope.get("scheme") == "https" else ""
        root = str(scope.get("root_path", ""))
        response = Response(status_code=303, headers={"location": f"{root}/ui", "cache-control": "no-store"})
        for path in COOKIE_PATHS:
            cookie = f"{COOKIE_NAME}={value}; Path={root}{path}; Max-Age={COOKIE_SECONDS}; HttpOnly; SameSite=Strict"
            response.raw_headers.append((b"set-cookie", (cookie + secure).encode("latin-1")))
        return response

    def _secret_of(self, presented: bytes) -> bytes | None:
        if not presented:
            return None
        found: bytes | None = None
        for token in self.tokens.current(time.monotonic()):  # every token, no early exit
            if hmac.compare_digest(presented, token.secret) and found is None:
                found = token.secret
        return found


def _mac(key: bytes, expiry: int, secret: bytes) -> str:
    """A cookie's HMAC: over its expiry and the digest of the token that logged in."""
    digest = hashlib.sha256(secret).hexdigest()
    return hmac.new(key, f"{expiry}.{digest}".encode(), hashlib.sha256).hexdigest()
