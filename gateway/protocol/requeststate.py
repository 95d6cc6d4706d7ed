"""The gateway's MRTR ``requestState`` tokens, as pure functions (digest §1.4, §7.6 C).

When a legacy child asks a modern client for input, the gateway answers the client with
``input_required`` and a ``requestState`` that selects the child call it keeps suspended.
A client controls what it sends back, so the token is integrity-protected:

    mcpgw2.<base64url(JSON claims)>.<base64url(HMAC-SHA256(secret, "mcpgw2." + claims part))>

The claims bind a random state id (which suspended call), the principal, the server, an
expiry (wall-clock seconds, so replicas sharing the secret agree), the owning instance
when replicas route to each other, **sealed** (``gateway.protocol.owner.seal_owner_text``:
opaque to the client, read by the replicas only after this signature verified), the method
and a SHA-256 digest of the original params without ``_meta``, ``inputResponses`` and
``requestState`` (the parts of a retry that legitimately differ). ``decode_state`` checks
shape, signature and expiry, in that order; ``binding_problem`` checks the claims against
the retry. Every key of the keyring verifies (``gateway.protocol.keyring``): the current
one first, then the previous ones; ``StateClaims.signed_by`` says which, so the owner is
unsealed with that key's seal. Single use is the caller's job: the state id names one
suspended call, taken once. The claims are readable but for the owner (nothing in them is
the client's to hide from itself), and never trusted unsigned. A ``mcpgw1.`` token (an earlier version's, whose
owner claim was the owner's URL in clear) is still the gateway's, never a child's, and is
refused as ``malformed``.

Imports: standard library, orjson and ``gateway.protocol`` only. The clock is injected.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from gateway.protocol import b64url
from gateway.protocol.jsonrpc import JsonObject
from gateway.protocol.keyring import matching

PREFIX: Final = "mcpgw2."
"""Marks a token as the gateway's own; anything else is a child's and passes untouched."""
OUTDATED_PREFIXES: Final = ("mcpgw1.",)
"""An earlier version's tokens: the gateway's (never passed to a child), refused."""
MAX_TOKEN_CHARS: Final = 4096
"""Longest token decoded: ours are a few hundred characters."""
RETRY_ONLY_PARAMS: Final = ("_meta", "inputResponses", "requestState")


class StateError(ValueError):
    """The token cannot be used. ``kind`` is ``malformed``, ``tampered`` or ``expired``."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


@dataclass(frozen=True, slots=True)
class StateClaims:
    state_id: str
    principal: str
    server: str
    method: str
    digest: str
    expires_at: float  # seconds since the epoch
    owner: str = ""  # the instance holding the call, sealed (``owner.seal_owner_text``); "": no owner routing
    signed_by: int = field(default=0, compare=False)  # which key of the ring verified it (0: the current one)

    def to_json(self) -> JsonObject:
        claims: JsonObject = {
            "sid": self.state_id,
            "sub": self.principal,
            "srv": self.server,
            "m": self.method,
            "d": self.digest,
            "exp": self.expires_at,
        }
        if self.owner:
            claims["own"] = self.owner
        return claims


def is_gateway_state(value: object) -> bool:
    """A token of the gateway's, of this version or an earlier one."""
    return isinstance(value, str) and (value.startswith(PREFIX) or value.startswith(OUTDATED_PREFIXES))


def params_digest(params: JsonObject | None) -> str:
    """SHA-256 over the canonical JSON of the params a retry must repeat unchanged."""
    kept = {k: v for k, v in (params or {}).items() if k not in RETRY_ONLY_PARAMS}
    return hashlib.sha256(orjson.dumps(kept, option=orjson.OPT_SORT_KEYS)).hexdigest()


def encode_state(claims: StateClaims, secret: bytes) -> str:
    body = PREFIX + b64url.encode(orjson.dumps(claims.to_json(), option=orjson.OPT_SORT_KEYS))
    return body + "." + b64url.encode(_sign(secret, body))


def decode_state(token: str, keys: Sequence[bytes], *, now: float) -> StateClaims:
    """The claims of a token this gateway (or a replica sharing a key) minted with any of
    ``keys`` (a keyring's keys, the current one first)."""
    # Ours are ASCII (base64url and a prefix): anything else is malformed, checked before the
    # HMAC, which signs the ASCII encoding.
    if token.startswith(OUTDATED_PREFIXES):
        raise StateError(
            "malformed", "requestState was issued by an earlier version of the gateway; send the request again"
        )
    if not token.startswith(PREFIX) or len(token) > MAX_TOKEN_CHARS or not token.isascii():
        raise StateError("malformed", "requestState is not a token this gateway issued")
    body, dot, signature = token.rpartition(".")
    if not dot or not body.startswith(PREFIX):
        raise StateError("malformed", "requestState is not a token this gateway issued")
    try:
        given = b64url.decode(signature)
    except ValueError:
        raise StateError("malformed", "requestState has an unreadable signature") from None
    signer = matching(given, [_sign(key, body) for key in keys])
    if signer is None:
        raise StateError("tampered", "requestState failed verification (altered, or signed with another secret)")
    claims = _claims(body[len(PREFIX) :], signer)
    if now >= claims.expires_at:
        raise StateError("expired", "requestState has expired: the gateway no longer waits for this retry")
    return claims


def binding_problem(claims: StateClaims, *, principal: str, server: str, method: str, digest: str) -> str | None:
    """Why a verified token does not belong to this retry, or None."""
    if claims.principal != principal:
        return "requestState was issued to another principal"
    if claims.server != server:
        return "requestState was issued by another server of this gateway"
    if claims.method != method:
        return f"requestState was issued for {claims.method}, not {method}"
    if claims.digest != digest:
        return "the retry's params differ from the original request's (only _meta, inputResponses and requestState may)"
    return None


def _sign(secret: bytes, body: str) -> bytes:
    return hmac.new(secret, body.encode("ascii"), hashlib.sha256).digest()


def _claims(part: str, signed_by: int) -> StateClaims:
    # Only reached with a valid signature, so a failure here is a bug of ours or a leaked key.
    try:
        raw: Any = orjson.loads(b64url.decode(part))
        claims = StateClaims(
            state_id=_str(raw["sid"]),
            principal=_str(raw["sub"]),
            server=_str(raw["srv"]),
            method=_str(raw["m"]),
            digest=_str(raw["d"]),
            expires_at=float(raw["exp"]),
            owner=_str(raw.get("own", "")),
            signed_by=signed_by,
        )
    except (ValueError, KeyError, TypeError, orjson.JSONDecodeError):
        raise StateError("malformed", "requestState carries unreadable claims") from None
    return claims


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("expected a string")
    return value
