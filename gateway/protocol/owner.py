"""Which gateway instance owns a session or a parked call, and forwards between instances,
as pure functions (DESIGN "Scale-out: any replica, any request").

An **owner** is an instance's advertised URL (``--advertise-url``, where the other
instances reach it) plus a **boot id** minted at each start: an instance restarted at the
same address is a different owner, so nothing of its predecessor is mistaken for its own.

**Owner references are opaque.** A session id, a task id or a ``requestState`` names its
owner, and a client holds it, so the owner is **sealed**: encrypted with a key derived from
the replicas' shared secret (``--state-secret-file``), readable by the replicas only. No
address, internal or not, reaches a client in an id or a refusal. The seal, with the standard
library only (it has no block cipher)::

    sealed(k, nonce, owner) = pad(owner.key) XOR keystream(k, nonce)
    keystream(k, nonce)     = HMAC-SHA256(k, nonce || be32(0)) || HMAC-SHA256(k, nonce || be32(1)) || …
    pad(key)                = be16(len(utf8(key))) || utf8(key) || zero bytes to a multiple of SEAL_BLOCK

HMAC-SHA256 is a pseudorandom function, so run in counter mode it is a stream cipher (as a
block cipher is in CTR mode): the sealed owner says nothing of the address as long as no
(key, nonce, counter) repeats. Each nonce is ``SEAL_NONCE_BYTES`` (128) fresh random bits, so a
repeat is as likely as two equal random session ids. Padding leaves only the address's length
rounded up to ``SEAL_BLOCK`` bytes. A stream cipher alone is malleable, so a sealed owner is
only ever read **inside a MAC that covers it** (encrypt-then-MAC): the session or task id's
own MAC below, or the ``requestState`` HMAC over its claims; both are checked before the
owner is unsealed. Each use has its own keys, derived from the secret by purpose
(``derive_key``): one seals, another signs (``IdKeys``), and neither is the ``requestState``
key or the forward key.

**Every key of the keyring verifies** (``gateway.protocol.keyring``: the file's first key is the
current one, the others previous): a verifier takes one key per key of the ring, the current
one's first (``id_keys``, ``Keyring.derived``), accepts what any of them signed, and opens a
sealed owner with the seal key of the key whose MAC matched. Minting, sealing and signing use
the current key only.

A **session id** names its owner, sealed, and is integrity-protected with the replicas'
shared secret, so a forged or altered owner is refused before anything is sent anywhere::

    o2.<base64url(R)>.<base64url(sealed(k_seal, R, owner))>.<base64url(HMAC-SHA256(k_mac, all before)[:16])>

R is 16 random bytes: both the id's unguessable part and the seal's nonce. Visible ASCII only,
as the transport requires (L-TR §Session Management). An ``o1.`` id (an earlier version's,
which carried the owner's URL in clear base64) is refused as ``outdated``: its client
initializes a new session. An id with neither prefix was minted without owner routing and
names no owner. (MRTR ``requestState`` tokens carry their sealed owner in their own signed
claims: ``gateway.protocol.requeststate``; a task id is ``t.`` + a session id minted with the
task id keys: ``gateway.protocol.tasks``.)

A **forward** from one instance to the owner carries, in ``x-mcp-gateway-forward``::

    v2;<unix seconds>;<nonce>;<hex sha256(body)>;<base64url(HMAC-SHA256(k_f, the fields below))>

over the version, the seconds, the nonce (16 random bytes, base64url), method, path,
principal, owner, the body's digest, the names listed in ``x-mcp-gateway-signed`` and every
value of every header so named (in the list's order, each name's values in the order sent).
The owner it was sent to is in ``x-mcp-gateway-owner`` (``Owner.key``), the client's principal
in ``x-mcp-gateway-principal`` (base64url of UTF-8; absent for none). Everything the
signature covers is in the headers, so the owner checks it **before it reads the body**
(``check_forward``); the body is then read and its digest compared. The owner acts only on
the headers the signature names (``Forward.headers``): a header added or altered on the way
(``Mcp-Session-Id``, a credential mapped to a child's environment) is refused or dropped,
never believed. The timestamp must be within ``FORWARD_MAX_SKEW`` of the owner's clock, and
a nonce the owner has seen within that time is refused (``SeenForwards``): a captured forward
cannot be replayed at all. The client's own credentials never travel. ``k_s`` and ``k_f`` are
derived from the secret, so a signature of one kind is never valid as the other (nor as a
``requestState``).

Imports: standard library and ``gateway.protocol`` only. Randomness and the clock are passed in.
"""

from __future__ import annotations

import hashlib
import hmac
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from gateway.protocol import b64url
from gateway.protocol.keyring import Keyring, matching
from gateway.protocol.keyring import derive_key as derive_key

SESSION_PREFIX: Final = "o2."
OUTDATED_PREFIXES: Final = ("o1.",)
"""Owned ids of earlier versions (their owner's URL in clear base64): refused, never read."""
SEAL_NONCE_BYTES: Final = 16
"""Random bytes per seal: 128 bits, so a nonce (and so a keystream) never repeats in practice."""
SEAL_BLOCK: Final = 32
"""A sealed owner's length is a multiple of this: it tells the address's length only roughly."""
DIGEST_BYTES: Final = 32
"""One HMAC-SHA256 block of keystream."""
MAX_OWNER_KEY_BYTES: Final = 4096
"""Longest owner key sealed (``pad`` keeps its length in two bytes; a URL is far shorter)."""
FORWARD_HEADER: Final = "x-mcp-gateway-forward"
PRINCIPAL_HEADER: Final = "x-mcp-gateway-principal"
TARGET_HEADER: Final = "x-mcp-gateway-owner"
SIGNED_HEADER: Final = "x-mcp-gateway-signed"
CLIENT_HEADER: Final = "x-mcp-gateway-client"
"""The client key the entry instance counted the request for (its principal, or an anonymous
client's ``anonymous@ADDRESS``): a signed header of the forward, so the owner holds an
anonymous client's sessions and tasks by the client's address, not the entry instance's."""
FORWARD_VERSION: Final = "v2"
FORWARD_MAX_SKEW: Final = 30
"""Seconds a forward's timestamp may differ from the owner's clock: replicas' clocks agree to
well under this (NTP). Within it, the nonce memory (``SeenForwards``) refuses a replay."""
NONCE_BYTES: Final = 16
"""Random bytes naming one forward (the owner refuses a nonce it has seen)."""
FORWARD_REPLAY_MEMORY: Final = 65536
"""Nonces an owner remembers at most (each for ``FORWARD_MAX_SKEW`` seconds past its stamp,
about 100 bytes each): some 2,000 forwards a second into one instance. Past it, forwards are
refused busy (503) rather than a nonce forgotten early: only signed forwards are remembered,
so only a peer holding the secret can fill it."""
MAX_SIGNED_HEADERS: Final = 100
"""Header names one forward's signature may list: as many headers as a request may carry
(``gateway.http.limits.MAX_HEADERS``)."""
SESSION_RANDOM_BYTES: Final = 16
"""128 random bits per session id: unguessable on their own, and the MAC covers them too."""
MAC_BYTES: Final = 16
"""A truncated HMAC-SHA256 (128 bits) on session ids keeps them short; forging one is still infeasible."""
MAX_SESSION_ID_CHARS: Final = 1024
"""Longest session id parsed: ours are about a hundred characters."""
MAX_PRINCIPAL_CHARS: Final = 1024
SESSION_IDS: Final = "session id"
TASK_IDS: Final = "task id"
FORWARDS: Final = "forward"
STATE_OWNER_SEAL: Final = "requestState owner seal"
"""The purposes keys are derived for (``derive_key``): one per kind of id, the forwards, and the
seal of a ``requestState``'s owner (whose MAC is the ``requestState`` HMAC itself)."""


class OwnerError(ValueError):
    """A session id or forward that claims an owner but fails verification (``kind``:
    ``malformed``, ``forged``, ``outdated`` for an earlier version's id, ``stale`` for a
    forward outside the allowed clock skew)."""

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


@dataclass(frozen=True, slots=True)
class IdKeys:
    """The keys of one kind of owned id: ``mac`` signs it, ``seal`` hides its owner."""

    mac: bytes
    seal: bytes

    @classmethod
    def derive(cls, secret: bytes, purpose: str) -> IdKeys:
        """``purpose``'s keys: its MAC key is ``derive_key(secret, purpose)`` as before sealing."""
        return cls(derive_key(secret, purpose), derive_key(secret, purpose + " owner seal"))


def id_keys(ring: Keyring, purpose: str) -> tuple[IdKeys, ...]:
    """``purpose``'s keys from every key of ``ring``, the current one's first (mint with that one)."""
    macs, seals = ring.derived(purpose), ring.derived(purpose + " owner seal")
    return tuple(IdKeys(mac, seal) for mac, seal in zip(macs, seals, strict=True))


def seal_owner(owner: Owner, key: bytes, nonce: bytes) -> bytes:
    """``owner`` sealed with ``key`` under ``nonce`` (module docstring); the caller MACs it."""
    plain = owner.key.encode("utf-8")
    if len(plain) > MAX_OWNER_KEY_BYTES:
        raise ValueError("the owner's key is too long to seal")
    padded = len(plain).to_bytes(2, "big") + plain
    padded += bytes(-len(padded) % SEAL_BLOCK)
    return _xor(padded, _keystream(key, nonce, len(padded)))


def unseal_owner(sealed: bytes, key: bytes, nonce: bytes) -> Owner:
    """The owner ``seal_owner`` sealed; ``OwnerError`` when it does not read as one (only a
    bug or a leaked key gets here: callers verify the MAC around it first)."""
    if not sealed or len(sealed) % SEAL_BLOCK:
        raise OwnerError("malformed", "the sealed owner is not whole")
    padded = _xor(sealed, _keystream(key, nonce, len(sealed)))
    size = int.from_bytes(padded[:2], "big")
    if size > len(padded) - 2 or any(padded[2 + size :]):
        raise OwnerError("malformed", "the sealed owner does not unseal")
    try:
        return Owner.from_key(padded[2 : 2 + size].decode("utf-8"))
    except UnicodeDecodeError:
        raise OwnerError("malformed", "the sealed owner does not unseal") from None


def seal_owner_text(owner: Owner, key: bytes, nonce: bytes) -> str:
    """``base64url(nonce || sealed)``: a sealed owner that carries its nonce (``requestState``)."""
    return b64url.encode(nonce + seal_owner(owner, key, nonce))


def unseal_owner_text(text: str, key: bytes) -> Owner:
    try:
        raw = b64url.decode(text)
    except ValueError:
        raise OwnerError("malformed", "the sealed owner is not base64url") from None
    return unseal_owner(raw[SEAL_NONCE_BYTES:], key, raw[:SEAL_NONCE_BYTES])


def mint_session_id(owner: Owner, keys: IdKeys, random: bytes) -> str:
    """A session id naming ``owner``, sealed; ``random`` (``SESSION_RANDOM_BYTES``) is also the seal's nonce."""
    body = f"{SESSION_PREFIX}{b64url.encode(random)}.{b64url.encode(seal_owner(owner, keys.seal, random))}"
    return f"{body}.{b64url.encode(_mac(keys.mac, body))}"


def is_owned_session_id(session_id: str) -> bool:
    """True for ids that claim an owner, of this version or an earlier one (cheap: a prefix check)."""
    return session_id.startswith(SESSION_PREFIX) or session_id.startswith(OUTDATED_PREFIXES)


def session_owner(session_id: str, keys: Sequence[IdKeys]) -> Owner:
    """The owner a session id names, verified with any of ``keys`` (a ring's, the current one's
    first) and unsealed with the one that verified; ``OwnerError`` when it cannot be trusted."""
    if session_id.startswith(OUTDATED_PREFIXES):
        raise OwnerError("outdated", "the session id was minted by an earlier version of the gateway")
    if not session_id.startswith(SESSION_PREFIX) or len(session_id) > MAX_SESSION_ID_CHARS:
        raise OwnerError("malformed", "the session id names no gateway instance")
    body, _, mac = session_id.rpartition(".")
    parts = body[len(SESSION_PREFIX) :].split(".")
    if len(parts) != 2:
        raise OwnerError("malformed", "the session id names no gateway instance")
    try:
        given = b64url.decode(mac)
    except ValueError:
        raise OwnerError("malformed", "the session id has an unreadable signature") from None
    signer = matching(given, [_mac(key.mac, body) for key in keys])
    if signer is None:
        raise OwnerError("forged", "the session id failed verification (altered, or minted with another secret)")
    try:
        nonce, sealed = b64url.decode(parts[0]), b64url.decode(parts[1])
    except ValueError:  # pragma: no cover - signed by us, so readable
        raise OwnerError("malformed", "the session id names an unreadable owner") from None
    return unseal_owner(sealed, keys[signer].seal, nonce)


def body_digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


@dataclass(frozen=True, slots=True)
class Forward:
    """A forward whose signature verified: what the owner acts on."""

    stamp: int
    nonce: str
    digest: str  # the body's, checked once the body is in
    headers: list[tuple[str, str]]  # the signed headers only, as received


def signed_names(headers: Sequence[tuple[str, str]]) -> str:
    """The ``x-mcp-gateway-signed`` value for forwarding ``headers`` (each name once, lower case)."""
    return ",".join(dict.fromkeys(name.lower() for name, _ in headers))


def sign_forward(
    key: bytes,
    *,
    now: int,
    nonce: bytes,
    method: str,
    path: str,
    principal: str | None,
    owner: Owner,
    digest: str,
    headers: Sequence[tuple[str, str]] = (),
) -> str:
    """The ``x-mcp-gateway-forward`` value for a request forwarded to ``owner`` with ``headers``
    (sent with ``signed_names(headers)`` in ``x-mcp-gateway-signed``)."""
    names = signed_names(headers)
    covered = _covered(names.split(",") if names else [], headers)
    token = b64url.encode(nonce)
    mac = _forward_mac(key, now, token, method, path, principal, owner, digest, names, covered)
    return f"{FORWARD_VERSION};{now};{token};{digest};{b64url.encode(mac)}"


def check_forward(
    value: str,
    keys: Sequence[bytes],
    *,
    now: float,
    method: str,
    path: str,
    principal: str | None,
    owner: Owner,
    names: str = "",
    received: Sequence[tuple[str, str]] = (),
) -> Forward:
    """The forward ``value`` signs, when it signs exactly this request (``received``: its headers,
    ``names``: its ``x-mcp-gateway-signed``), sent to ``owner``, recently, with any of ``keys``
    (a ring's forward keys, the current one's first); else ``OwnerError``."""
    parts = value.split(";")
    if len(parts) != 5 or parts[0] != FORWARD_VERSION or not parts[1].isdigit() or len(parts[1]) > 12:
        raise OwnerError("malformed", f"{FORWARD_HEADER} is not v2;SECONDS;NONCE;DIGEST;SIGNATURE")
    _, stamp, token, digest, mac = parts
    listed = names.split(",") if names else []
    if len(listed) > MAX_SIGNED_HEADERS:
        raise OwnerError("malformed", f"{SIGNED_HEADER} lists more than {MAX_SIGNED_HEADERS} headers")
    try:
        given = b64url.decode(mac)
    except ValueError:
        raise OwnerError("malformed", f"{FORWARD_HEADER} has an unreadable signature") from None
    covered = _covered(listed, received)
    expected = [
        _forward_mac(key, int(stamp), token, method, path, principal, owner, digest, names, covered) for key in keys
    ]
    if matching(given, expected) is None:
        raise OwnerError(
            "forged", "the forwarded request failed verification (another secret, or not for this instance)"
        )
    if abs(now - int(stamp)) > FORWARD_MAX_SKEW:
        raise OwnerError("stale", f"the forwarded request is more than {FORWARD_MAX_SKEW} s old (or clocks disagree)")
    return Forward(int(stamp), token, digest, covered)


def body_matches(forward: Forward, body: bytes) -> bool:
    return hmac.compare_digest(body_digest(body), forward.digest)


class SeenForwards:
    """The nonces of the forwards this owner accepted lately: each is remembered until its stamp
    is past ``FORWARD_MAX_SKEW`` (then ``check_forward`` refuses it as stale anyway), at most
    ``capacity`` at once. The clock is passed in (wall seconds, as the stamps)."""

    def __init__(self, capacity: int = FORWARD_REPLAY_MEMORY) -> None:
        self.capacity = capacity
        self._until: OrderedDict[str, float] = OrderedDict()  # nonce → when it may be forgotten

    def __len__(self) -> int:
        return len(self._until)

    def admit(self, forward: Forward, now: float) -> None:
        """Remember ``forward``; ``OwnerError`` ``replayed`` for a nonce seen before, ``busy``
        when ``capacity`` nonces are still remembered."""
        while self._until and next(iter(self._until.values())) < now:
            self._until.popitem(last=False)  # stamps arrive about in order: the oldest go first
        if forward.nonce in self._until:
            raise OwnerError("replayed", "the forwarded request was received before (a replay)")
        if len(self._until) >= self.capacity:
            raise OwnerError("busy", f"{self.capacity} forwarded requests arrived within {FORWARD_MAX_SKEW} s")
        self._until[forward.nonce] = forward.stamp + FORWARD_MAX_SKEW


def encode_principal(principal: str) -> str:
    return b64url.encode(principal.encode("utf-8"))


def decode_principal(value: str) -> str:
    if len(value) > MAX_PRINCIPAL_CHARS * 2:
        raise OwnerError("malformed", f"{PRINCIPAL_HEADER} is too long")
    try:
        return b64url.decode(value).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        raise OwnerError("malformed", f"{PRINCIPAL_HEADER} is not base64url of UTF-8") from None


def _covered(names: Sequence[str], received: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """The headers of ``received`` that ``names`` lists: by the list's order, each name's values
    in the order received (the canonical order both ends sign in)."""
    wanted = {name: index for index, name in enumerate(names)}
    found = []
    for order, (name, value) in enumerate(received):
        index = wanted.get(name.lower())
        if index is not None:
            found.append((index, order, name.lower(), value))
    found.sort()
    return [(name, value) for _, _, name, value in found]


def _forward_mac(
    key: bytes,
    now: int,
    nonce: str,
    method: str,
    path: str,
    principal: str | None,
    owner: Owner,
    digest: str,
    names: str,
    covered: Sequence[tuple[str, str]],
) -> bytes:
    who = "-" if principal is None else "p:" + principal
    fields = [FORWARD_VERSION, str(now), nonce, method, path, who, owner.key, digest, names]
    fields += [f"{name}:{value}" for name, value in covered]
    return hmac.new(key, "\n".join(fields).encode("utf-8"), hashlib.sha256).digest()


def _keystream(key: bytes, nonce: bytes, length: int) -> bytes:
    """HMAC-SHA256 in counter mode: ``length`` bytes of ``key``'s keystream for ``nonce``."""
    blocks = -(-length // DIGEST_BYTES)
    return b"".join(hmac.new(key, nonce + n.to_bytes(4, "big"), hashlib.sha256).digest() for n in range(blocks))[
        :length
    ]


def _xor(data: bytes, stream: bytes) -> bytes:
    return (int.from_bytes(data, "big") ^ int.from_bytes(stream, "big")).to_bytes(len(data), "big")


def _mac(key: bytes, body: str) -> bytes:
    return hmac.new(key, body.encode("ascii"), hashlib.sha256).digest()[:MAC_BYTES]
