"""One JWT access token against one key and one expectation: pure, no I/O, the clock passed in.

The rules (RFC 9068, RFC 8725 and the MCP authorization spec's "token audience binding"):

1. The token is at most ``MAX_TOKEN_CHARS`` long and has a JOSE header naming an
   **asymmetric** algorithm (``ASYMMETRIC_ALGORITHMS``). ``none`` and every HMAC algorithm are
   refused before any key is looked at, so a token "signed" with the issuer's *public* key as
   an HMAC secret can never verify.
2. The key comes from the issuer's key set, chosen by ``kid``. It must fit the token's
   algorithm: a key that names its own ``alg`` must name the token's, and the key type must be
   the algorithm's (PyJWT builds the key for that algorithm or refuses). RSA keys shorter
   than 2048 bits are refused.
3. The signature (PyJWT, over ``cryptography``), then ``iss`` equal to the configured issuer
   and ``aud`` naming this resource (one of ``audiences``).
4. ``exp`` is required; ``exp`` and ``nbf`` are checked against ``now`` with ``CLOCK_LEEWAY``.
5. The principal claim (default ``sub``) is a non-empty string (or integer) of at most
   ``MAX_PRINCIPAL_CHARS``.
6. Every required scope is granted (``scope``, space-separated, RFC 9068; or ``scp``, a list,
   as some issuers send it); otherwise 403 ``insufficient_scope``.

Every failure is a ``Refused`` value carrying its HTTP status and RFC 6750 error code; the
functions here never raise on client input.
"""

from __future__ import annotations

import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeGuard

import jwt

from gateway.oauth.policy import DEFAULT_PRINCIPAL_CLAIM as DEFAULT_PRINCIPAL_CLAIM
from gateway.oauth.policy import OAuthPolicy as OAuthPolicy
from gateway.oauth.policy import check_url as check_url

ASYMMETRIC_ALGORITHMS: Final = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
"""The only algorithms accepted: signatures an issuer makes with a private key it never shares."""
CLOCK_LEEWAY: Final = 60.0
"""Seconds of clock difference between the issuer and us tolerated on ``exp`` and ``nbf``."""
MAX_TOKEN_CHARS: Final = 16_384
"""A longer bearer token is refused before it is parsed (real access tokens are a few KiB)."""
MAX_PRINCIPAL_CHARS: Final = 256
"""The principal names pools, limits and log lines; a longer claim value is refused."""
MAX_SCOPES: Final = 256
"""Scopes read from one token at most (the rest are ignored): bounds the work per request."""

INVALID_TOKEN: Final = "invalid_token"
INSUFFICIENT_SCOPE: Final = "insufficient_scope"


@dataclass(frozen=True)
class Expectation:
    """What a token must say to be accepted for one protected resource."""

    issuer: str
    audiences: tuple[str, ...]
    scopes: tuple[str, ...] = ()
    principal_claim: str = DEFAULT_PRINCIPAL_CLAIM


@dataclass(frozen=True)
class TokenHeader:
    alg: str
    kid: str | None


@dataclass(frozen=True)
class Accepted:
    principal: str
    scopes: frozenset[str]
    claims: Mapping[str, Any] = field(repr=False)


@dataclass(frozen=True)
class Refused:
    """A refusal: 401 ``invalid_token`` or 403 ``insufficient_scope`` (``scope``: what is needed)."""

    status: int
    error: str
    description: str
    scope: str | None = None


def invalid(description: str) -> Refused:
    return Refused(401, INVALID_TOKEN, description)


def read_header(token: str) -> TokenHeader | Refused:
    """Rung 1: the token's unverified JOSE header, refused unless its algorithm is asymmetric."""
    if len(token) > MAX_TOKEN_CHARS:
        return invalid(f"the token is longer than {MAX_TOKEN_CHARS} characters")
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError:
        return invalid("the token is not a JWT")
    alg = header.get("alg")
    if not isinstance(alg, str) or alg not in ASYMMETRIC_ALGORITHMS:
        return invalid(f"algorithm {str(alg)[:20]!r} is not accepted (only {', '.join(sorted(ASYMMETRIC_ALGORITHMS))})")
    kid = header.get("kid")
    if kid is not None and not isinstance(kid, str):
        return invalid("the token's kid is not a string")
    return TokenHeader(alg, kid)


def verify(
    token: str, header: TokenHeader, jwk: Mapping[str, Any], expect: Expectation, *, now: float
) -> Accepted | Refused:
    """Rungs 2-6 for a token whose header passed ``read_header``, with the issuer's key ``jwk``."""
    if jwk.get("alg") not in (None, header.alg):
        return invalid(f"the issuer's key is for {jwk.get('alg')}, not {header.alg}")
    try:
        key = jwt.PyJWK(dict(jwk), algorithm=header.alg)
    except jwt.PyJWTError:
        return invalid(f"the issuer's key cannot verify {header.alg} signatures")
    try:
        claims = jwt.decode(
            token,
            key,
            algorithms=[header.alg],
            issuer=expect.issuer,
            audience=list(expect.audiences),
            # exp and nbf are checked below against the clock we are given.
            options={
                "require": ["iss", "aud", "exp"],
                "verify_exp": False,
                "verify_nbf": False,
                "verify_iat": False,
                "enforce_minimum_key_length": True,
            },
        )
    except jwt.InvalidSignatureError:
        return invalid("the signature does not verify")
    except jwt.InvalidIssuerError:
        return invalid(f"the token was not issued by {expect.issuer}")
    except jwt.InvalidAudienceError:
        return invalid(f"the token's audience is not this resource ({', '.join(expect.audiences)})")
    except jwt.MissingRequiredClaimError as exc:
        return invalid(f"the token has no {exc.claim} claim")
    except jwt.PyJWTError as exc:
        return invalid(f"the token cannot be verified: {exc}")
    return check_claims(claims, expect, now)


def check_claims(claims: Mapping[str, Any], expect: Expectation, now: float) -> Accepted | Refused:
    """Rungs 4-6, on claims whose signature, ``iss`` and ``aud`` were verified."""
    exp, nbf = claims.get("exp"), claims.get("nbf")
    if not _is_number(exp):
        return invalid("the token's exp is not a number")
    if now > exp + CLOCK_LEEWAY:
        return invalid("the token has expired")
    if nbf is not None and (not _is_number(nbf) or now + CLOCK_LEEWAY < nbf):
        return invalid("the token is not valid yet")
    principal = claims.get(expect.principal_claim)
    if isinstance(principal, int) and not isinstance(principal, bool):
        principal = str(principal)
    if not isinstance(principal, str) or not principal.strip() or len(principal) > MAX_PRINCIPAL_CHARS:
        return invalid(f"the token has no usable {expect.principal_claim} claim")
    granted = granted_scopes(claims)
    missing = [scope for scope in expect.scopes if scope not in granted]
    if missing:
        needed = " ".join(expect.scopes)
        return Refused(403, INSUFFICIENT_SCOPE, f"the token lacks the scope {' '.join(missing)}", needed)
    return Accepted(principal.strip(), granted, claims)


def granted_scopes(claims: Mapping[str, Any]) -> frozenset[str]:
    """``scope`` (space-separated string, RFC 9068) and ``scp`` (a list, or a string)."""
    found: list[str] = []
    for name in ("scope", "scp"):
        value = claims.get(name)
        if isinstance(value, str):
            found += value.split()
        elif isinstance(value, list):
            found += [item for item in value if isinstance(item, str)]
    return frozenset(found[:MAX_SCOPES])


def _is_number(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# RFC 6750 §3: quoted values allow %x20-21 / %x23-5B / %x5D-7E (no '"' and no '\').
_QUOTABLE: Final = frozenset(string.printable) - set('"\\\t\n\r\x0b\x0c')


def quote(value: str) -> str:
    return '"' + "".join(c for c in value if c in _QUOTABLE) + '"'


def challenge(
    *,
    resource_metadata: str | None,
    refused: Refused | None = None,
    scopes: Iterable[str] = (),
    realm: str | None = None,
) -> str:
    """A ``WWW-Authenticate: Bearer`` value (RFC 6750 §3, RFC 9728 §5.1).

    Without ``refused`` (no token was sent) it carries no error, as RFC 6750 asks."""
    params: list[tuple[str, str]] = []
    if realm:
        params.append(("realm", realm))
    if refused is not None:
        params += [("error", refused.error), ("error_description", refused.description)]
    scope = refused.scope if refused is not None and refused.scope else " ".join(scopes)
    if scope:
        params.append(("scope", scope))
    if resource_metadata:
        params.append(("resource_metadata", resource_metadata))
    return "Bearer " + ", ".join(f"{name}={quote(value)}" for name, value in params)
