"""base64url as the gateway's tokens spell it (``gateway.protocol.b64url``): strict, one
spelling per value, the same on every Python."""

from __future__ import annotations

import os
import warnings

import pytest

from gateway.protocol import b64url
from gateway.protocol.requeststate import StateClaims, StateError, decode_state, encode_state

KEY = b"k" * 32


def test_every_length_round_trips_without_padding() -> None:
    for size in range(40):
        data = os.urandom(size)
        text = b64url.encode(data)
        assert "=" not in text
        assert b64url.decode(text) == data


@pytest.mark.parametrize(
    "text",
    [
        "ab/c",  # standard base64's characters: the library reads them as _ and -, or (3.15) warns
        "ab+c",
        "abc=",  # padding: never ours
        "ab c",
        "abcé",
        "abcde",  # a length no encoding has
        "AB",  # stray trailing bits: "AA" is the one spelling of b"\0"
    ],
)
def test_anything_but_the_one_spelling_is_refused_without_a_warning(text: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Python 3.15 warns on "/" and "+" in the library's decoder
        with pytest.raises(ValueError, match="not base64url"):
            b64url.decode(text)


def test_a_request_state_whose_signature_is_spelled_with_standard_characters_is_malformed() -> None:
    """The same signature bytes in standard base64's alphabet: refused before the HMAC, the
    same way on every Python (3.15 warned, and will read them otherwise)."""
    claims = StateClaims("id", "alice", "srv", "tools/call", "d" * 64, expires_at=100.0)
    token = encode_state(claims, KEY)
    body, _, signature = token.rpartition(".")
    while "_" not in signature and "-" not in signature:  # a signature that has one to swap
        claims = StateClaims(claims.state_id + "x", "alice", "srv", "tools/call", "d" * 64, expires_at=100.0)
        token = encode_state(claims, KEY)
        body, _, signature = token.rpartition(".")
    assert decode_state(token, [KEY], now=0).state_id == claims.state_id
    altered = f"{body}.{signature.replace('_', '/').replace('-', '+')}"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(StateError) as caught:
            decode_state(altered, [KEY], now=0)
    assert caught.value.kind == "malformed"
