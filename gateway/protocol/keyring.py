"""The replicas' keyring (``--state-secret-file``), as pure functions (issue #40).

Everything replicas must agree on derives from this keyring: MRTR ``requestState`` tokens and
their owner seal, session and task ids, the forwards between replicas (and the client key they
carry), and the operator's ``/ui`` cookies. One key per line lets an operator rotate it with
no restart and no replica refusing another's tokens (docs/deployment.md, "Rotating the state
secret"). The rules:

1. **One key per line.** Each line is stripped of surrounding whitespace; blank lines and
   lines starting with ``#`` are skipped. A key has at least ``MIN_KEY_BYTES`` bytes. A file
   that held one key on one line reads as before: that key.
2. **The first key is the current one**: everything new is signed, sealed or minted with it.
   The others are **previous** keys, still accepted when verifying or opening.
3. **A verifier tries the current key first, then each previous one in order** (``matching``),
   comparing every one in constant time with no early exit, so the time taken does not tell
   which key matched.
4. **At most ``MAX_STATE_KEYS`` keys**, none given twice: a longer file, or a repeated key
   (a pasting slip that hides a rotation step not taken), is refused whole.
5. **Keys are named only by fingerprint**: the first ``FINGERPRINT_CHARS`` hex digits of the
   key's SHA-256 (``printf %s KEY | sha256sum``), in logs, ``/status`` and metrics; never the
   key itself (``Keyring``'s ``repr`` shows fingerprints).
6. **One key per purpose** (``derive_key``): each use derives its own key from every key of
   the ring, so a signature of one kind never passes as another. ``Keyring.derived`` keeps
   what it derived, so a verification costs its HMACs and no derivation.

Imports: the standard library only.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

MIN_KEY_BYTES: Final = 16
"""A shorter key is refused: HMAC keys below 128 bits are guessable."""
MAX_STATE_KEYS: Final = 4
"""Keys one file may hold: the current one, the next one (while it reaches every replica), the
one before (while what it signed lives), and one spare. Every verification tries each key, so
the bound also bounds its cost; a longer file has lost track of its rotation."""
FINGERPRINT_CHARS: Final = 8
"""Hex digits of a key's SHA-256 that name it: enough to tell a handful of keys apart."""


class KeyringError(ValueError):
    """A key file that does not read as a keyring (``message`` names the line)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def fingerprint(key: bytes) -> str:
    """The name a key is known by (rule 5)."""
    return hashlib.sha256(key).hexdigest()[:FINGERPRINT_CHARS]


def derive_key(secret: bytes, purpose: str) -> bytes:
    """One key per purpose from a key of the ring (session ids, forwards, seals, cookies)."""
    return hmac.new(secret, b"mcp-stdio-gateway " + purpose.encode("ascii"), hashlib.sha256).digest()


@dataclass(frozen=True, eq=False)
class Keyring:
    """The keys in force, the current one first (rule 2). Immutable: a reload makes a new one."""

    keys: tuple[bytes, ...] = field(repr=False)
    _derived: dict[str, tuple[bytes, ...]] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.keys:
            raise KeyringError("holds no key")

    @property
    def current(self) -> bytes:
        return self.keys[0]

    @property
    def fingerprints(self) -> tuple[str, ...]:
        """Each key's fingerprint, the current one first."""
        return tuple(fingerprint(key) for key in self.keys)

    def derived(self, purpose: str) -> tuple[bytes, ...]:
        """``purpose``'s key from each key of the ring, the current one's first (rule 6)."""
        keys = self._derived.get(purpose)
        if keys is None:
            keys = self._derived[purpose] = tuple(derive_key(key, purpose) for key in self.keys)
        return keys

    def __repr__(self) -> str:
        return f"Keyring({', '.join(self.fingerprints)})"


def parse_keyring(data: bytes) -> Keyring:
    """The keyring a key file holds (rules 1 and 4); ``KeyringError`` names what is wrong."""
    keys: list[bytes] = []
    first_line: dict[bytes, int] = {}
    for number, raw in enumerate(data.splitlines(), 1):
        key = raw.strip()
        if not key or key.startswith(b"#"):
            continue
        if len(key) < MIN_KEY_BYTES:
            raise KeyringError(f"line {number}: a key needs at least {MIN_KEY_BYTES} bytes (it has {len(key)})")
        if key in first_line:
            raise KeyringError(f"line {number}: the key of line {first_line[key]} again")
        first_line[key] = number
        keys.append(key)
    if not keys:
        raise KeyringError(f"holds no key (one per line, at least {MIN_KEY_BYTES} bytes)")
    if len(keys) > MAX_STATE_KEYS:
        raise KeyringError(
            f"holds {len(keys)} keys; at most {MAX_STATE_KEYS} (the current one first, then the previous "
            "ones): drop the oldest"
        )
    return Keyring(tuple(keys))


def matching(given: bytes, expected: Sequence[bytes]) -> int | None:
    """The index of the first of ``expected`` (MACs under each key of a ring, the current one's
    first) that equals ``given``, or None; every one is compared (rule 3)."""
    found: int | None = None
    for index, mac in enumerate(expected):
        if hmac.compare_digest(given, mac) and found is None:
            found = index
    return found
