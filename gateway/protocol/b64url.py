"""base64url without padding (RFC 4648 §5), as the gateway's tokens spell their parts: session
ids, ``requestState``, forwards between replicas, principals on a forward.

``decode`` is strict, and the same on every Python: a character outside the base64url
alphabet (``+``, ``/``, ``=``, whitespace, anything not ASCII) or a second spelling of the
same bytes (stray trailing bits) is a ``ValueError``. The standard library's decoder is
lenient about both: it reads ``/`` and ``+`` as if they were ``_`` and ``-``, and Python 3.15
warns (``FutureWarning``) that it will discard them instead; a token a client altered so
must fail here, as the same token on every version, never decode to the same bytes.

Imports: standard library only.
"""

from __future__ import annotations

import base64
import re
from typing import Final

_ALPHABET: Final = re.compile(r"[A-Za-z0-9_-]*")


def encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def decode(text: str) -> bytes:
    """The bytes ``text`` spells, the one way ``encode`` spells them; else ``ValueError``."""
    if not _ALPHABET.fullmatch(text) or len(text) % 4 == 1:
        raise ValueError("not base64url")
    decoded = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if encode(decoded) != text:  # one spelling per value: base64 tolerates stray trailing bits
        raise ValueError("not base64url")
    return decoded
