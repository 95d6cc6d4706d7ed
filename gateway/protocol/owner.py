"""Which gateway instance owns a session or a parked call, and forwards between instances,
as pure functions (DESIGN "Scale-out: any replica, any request").

An **owner** is an instance's advertised URL (``--advertise-url``, where the other
instances reach it) plus a **boot id** minted at each start: an instance restarted at the
same address is a different owner, so nothing of its predecessor is mistaken for its own.

A **session id** names its owner and is integrity-protected with the replicas' shared
secret (``--state-secret-file``), so a forged owner is refused before anything is sent
anywhere::

    o1.<base64url(url)>.<boot>.<base64url(16 random bytes)>.<base64url(HMAC-SHA256(k_s, all before)[:16])>

Visible ASCII only, as the transport requires (L-TR §Session Management). Ids without the
``o1.`` prefix (minted without owner routing) name no owner. (MRTR ``requestState`` tokens
carry their owner in their own signed claims: ``gateway.protocol.requeststate``.)

A **forward** from one instance to the owner carries, in ``x-mcp-gateway-forward``::

    v1;<unix seconds>;<base64url(HMAC-SHA256(k_f, v1, seconds, method, path, principal, owner, sha256(body)))>

the owner it was sent to in ``x-mcp-gateway-owner`` (``Owner.key``), and the client's
principal in ``x-mcp-gateway-principal`` (base64url of UTF-8; absent for
none). The owner trusts that principal only when the signature verifies and the timestamp
is within ``FORWARD_MAX_SKEW`` of its clock (which bounds replay); the client's own
credentials never travel. ``k_s`` and ``k_f`` are derived from the secret, so a signature
of one kind is never valid as the other (nor as a ``requestState``).

Imports: standard library only. Randomness and the clock are passed in.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass
from typing import Final

SESSION_PREFIX: Final = "o1."
FORWARD_HEADER: Final = "x-mcp-gateway-forward"
PRINCIPAL_HEADER: Final = "x-mcp-gateway-principal"
TARGET_HEADER: Final = "x-mcp-gateway-owner"
FORWARD_VERSION: Final = "v1"
FORWARD_MAX_SKEW: Final = 30
"""Seconds a forward's timestamp may differ from the owner's clock: replicas' clocks agree to
well under this (NTP), and a captured forward cannot be replayed after it."""
SESSION_RANDOM_BYTES: Final = 16
"""128 random bits per session id: unguessable on their own, and the MAC covers them too."""
MAC_BYTES: Final = 16
"""A truncated HMAC-SHA256 (128 bits) on session ids keeps them short; forging one is still infeasible."""
MAX_SESSION_ID_CHARS: Final = 1024
"""Longest session id parsed: ours are about a hundred characters."""
MAX_PRINCIPAL_CHARS: Final = 1024


class OwnerError(ValueError):
    """A session id or forward that claims an owner but fails verification (``kind``:
    ``malformed``, ``forged``, ``stale`` for a forward outside the allowed clock skew)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


@dataclass(frozen=True, slots=True)
class Owner:
    url: str  # where the other instances reach it, without a trailing slash
    boot: str  # minted at each start: URL-safe characters, no dot

    @property
    def key(self) -> str:
        """The one string that names this owner (in signatures and ``requestState`` claims)."""
        return f"{self.url}#{self.boot}"

    @classmethod
    def from_key(cls, key: str) -> Owner:
        url, sep, boot = key.rpartition("#")
        if not sep or not url or not boot:
            raise OwnerError("malformed", "the owner is not URL#BOOT")
        return cls(url, boot)

    def same_address(self, other: Owner) -> bool:
        return self.url == other.url


def derive_key(secret: bytes, purpose: str) -> bytes:
    """One key per purpose from the shared secret (session ids, forwards)."""
    return hmac.new(secret, b"mcp-stdio-gateway " + purpose.encode("ascii"), hashlib.sha256).digest()


def mint_session_id(owner: Owner, key: bytes, random: bytes) -> str:
    body = f"{SESSION_PREFIX}{_b64(owner.url.encode('utf-8'))}.{owner.boot}.{_b64(random)}"
    return f"{body}.{_b64(_mac(key, body))}"


def is_owned_session_id(session_id: str) -> bool:
    """True for ids that name an owner (cheap: a prefix check)."""
    return session_id.startswith(SESSION_PREFIX)


def session_owner(session_id: str, key: bytes) -> Owner:
    """The owner a session id names, verified; ``OwnerError`` when it cannot be trusted."""
    if not is_owned_session_id(session_id) or len(session_id) > MAX_SESSION_ID_CHARS:
        raise OwnerError("malformed", "the session id names no gateway instance")
    body, _, mac = session_id.rpartition(".")
    parts = body[len(SESSION_PREFIX) :].split(".")
    if len(parts) != 3:
        raise OwnerError("malformed", "the session id names no gateway instance")
    try:
        given = _unb64(mac)
    except ValueError:
        raise OwnerError("malformed", "the session id has an unreadable signature") from None
    if not hmac.compare_digest(given, _mac(key, body)):
        raise OwnerError("forged", "the session id failed verification (altered, or minted with another secret)")
    try:
        url = _unb64(parts[0]).decode("utf-8")
    except (ValueError, UnicodeDecodeError):  # pragma: no cover - signed by us, so readable
        raise OwnerError("malformed", "the session id names an unreadable owner") from None
    return Owner(url, parts[1])


def body_digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def sign_forward(
    key: bytes, *, now: int, method: str, path: str, principal: str | None, owner: Owner, digest: str
) -> str:
    """The ``x-mcp-gateway-forward`` value for a request forwarded to ``owner``."""
    return f"{FORWARD_VERSION};{now};{_b64(_forward_mac(key, now, method, path, principal, owner, digest))}"


def check_forward(
    value: str, key: bytes, *, now: float, method: str, path: str, principal: str | None, owner: Owner, digest: str
) -> None:
    """Raise ``OwnerError`` unless ``value`` signs exactly this request, sent to ``owner``, recently."""
    version, _, rest = value.partition(";")
    stamp, _, mac = rest.partition(";")
    if version != FORWARD_VERSION or not stamp.isdigit() or len(stamp) > 12:
        raise OwnerError("malformed", f"{FORWARD_HEADER} is not v1;SECONDS;SIGNATURE")
    try:
        given = _unb64(mac)
    except ValueError:
        raise OwnerError("malformed", f"{FORWARD_HEADER} has an unreadable signature") from None
    expected = _forward_mac(key, int(stamp), method, path, principal, owner, digest)
    if not hmac.compare_digest(given, expected):
        raise OwnerError(
            "forged", "the forwarded request failed verification (another secret, or not for this instance)"
        )
    if abs(now - int(stamp)) > FORWARD_MAX_SKEW:
        raise OwnerError("stale", f"the forwarded request is more than {FORWARD_MAX_SKEW} s old (or clocks disagree)")


def encode_principal(principal: str) -> str:
    return _b64(principal.encode("utf-8"))


def decode_principal(value: str) -> str:
    if len(value) > MAX_PRINCIPAL_CHARS * 2:
        raise OwnerError("malformed", f"{PRINCIPAL_HEADER} is too long")
    try:
        return _unb64(value).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        raise OwnerError("malformed", f"{PRINCIPAL_HEADER} is not base64url of UTF-8") from None


def _forward_mac(
    key: bytes, now: int, method: str, path: str, principal: str | None, owner: Owner, digest: str
) -> bytes:
    who = "-" if principal is None else "p:" + principal
    fields = [FORWARD_VERSION, str(now), method, path, who, owner.key, digest]
    return hmac.new(key, "\n".join(fields).encode("utf-8"), hashlib.sha256).digest()


def _mac(key: bytes, body: str) -> bytes:
    return hmac.new(key, body.encode("ascii"), hashlib.sha256).digest()[:MAC_BYTES]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    if not text.isascii() or "=" in text:
        raise ValueError("not base64url")
    try:
        decoded = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError) as exc:
        raise ValueError("not base64url") from exc
    if _b64(decoded) != text:  # one spelling per value: base64 tolerates stray trailing bits
        raise ValueError("not base64url")
    return decoded
