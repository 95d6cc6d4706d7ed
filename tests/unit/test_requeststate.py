"""The MRTR requestState codec: signed claims, verified in order (shape, signature, expiry)."""

from __future__ import annotations

import base64
import string

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.protocol.requeststate import (
    PREFIX,
    StateClaims,
    StateError,
    binding_problem,
    decode_state,
    encode_state,
    is_gateway_state,
    params_digest,
)

SECRET = b"k" * 32
NOW = 1_800_000_000.0
CLAIMS = StateClaims(
    state_id="abc",
    principal="alice",
    server="files",
    method="tools/call",
    digest=params_digest({"name": "t", "arguments": {"a": 1}}),
    expires_at=NOW + 60,
)


def test_a_token_decodes_to_the_claims_it_was_made_from() -> None:
    token = encode_state(CLAIMS, SECRET)
    assert is_gateway_state(token)
    assert token.startswith(PREFIX)
    assert decode_state(token, [SECRET], now=NOW) == CLAIMS


def test_every_single_character_change_is_refused() -> None:
    token = encode_state(CLAIMS, SECRET)
    alphabet = string.ascii_letters + string.digits + "-_."
    for index, char in enumerate(token):
        other = next(c for c in alphabet if c != char)
        with pytest.raises(StateError):
            decode_state(token[:index] + other + token[index + 1 :], [SECRET], now=NOW)


def test_claims_rewritten_under_the_old_signature_are_tampered() -> None:
    token = encode_state(CLAIMS, SECRET)
    _, _, signature = token.rpartition(".")
    forged_claims = {**CLAIMS.to_json(), "sub": "mallory"}
    forged = PREFIX + base64.urlsafe_b64encode(orjson.dumps(forged_claims)).rstrip(b"=").decode() + "." + signature
    with pytest.raises(StateError) as refused:
        decode_state(forged, [SECRET], now=NOW)
    assert refused.value.kind == "tampered"


def test_a_token_signed_with_another_secret_is_tampered() -> None:
    with pytest.raises(StateError) as refused:
        decode_state(encode_state(CLAIMS, b"x" * 32), [SECRET], now=NOW)
    assert refused.value.kind == "tampered"


def test_a_token_is_expired_at_its_expiry_and_good_just_before() -> None:
    token = encode_state(CLAIMS, SECRET)
    assert decode_state(token, [SECRET], now=CLAIMS.expires_at - 0.001) == CLAIMS
    with pytest.raises(StateError) as refused:
        decode_state(token, [SECRET], now=CLAIMS.expires_at)
    assert refused.value.kind == "expired"


@pytest.mark.parametrize("token", ["", "opaque-child-state", PREFIX, PREFIX + "abc", PREFIX + "a.b!c", "x" * 5000])
def test_foreign_or_broken_tokens_are_malformed(token: str) -> None:
    with pytest.raises(StateError) as refused:
        decode_state(token, [SECRET], now=NOW)
    assert refused.value.kind in ("malformed", "tampered")


def test_only_tokens_with_the_prefix_are_the_gateways() -> None:
    assert not is_gateway_state("a child's own state")
    assert not is_gateway_state(None)
    assert is_gateway_state(PREFIX + "anything")


def test_the_binding_names_the_first_mismatch() -> None:
    ok = {"principal": "alice", "server": "files", "method": "tools/call", "digest": CLAIMS.digest}
    assert binding_problem(CLAIMS, **ok) is None
    assert "another principal" in str(binding_problem(CLAIMS, **{**ok, "principal": "bob"}))
    assert "another server" in str(binding_problem(CLAIMS, **{**ok, "server": "web"}))
    assert "prompts/get" in str(binding_problem(CLAIMS, **{**ok, "method": "prompts/get"}))
    assert "params differ" in str(binding_problem(CLAIMS, **{**ok, "digest": params_digest({})}))


def test_the_digest_ignores_what_a_retry_may_change_and_nothing_else() -> None:
    original = {"name": "t", "arguments": {"a": 1, "b": [1, 2]}, "_meta": {"progressToken": 1}}
    retry = {
        "arguments": {"b": [1, 2], "a": 1},
        "name": "t",
        "_meta": {"progressToken": 2},
        "inputResponses": {"k1": {}},
        "requestState": "s",
    }
    assert params_digest(original) == params_digest(retry)
    assert params_digest(original) != params_digest({**original, "arguments": {"a": 2, "b": [1, 2]}})
    assert params_digest(None) == params_digest({})


@pytest.mark.parametrize(
    "token",
    [
        PREFIX + "é" + "." + "A" * 43,  # non-ASCII claims: used to reach the ASCII-only HMAC (500)
        encode_state(CLAIMS, SECRET).replace(".", ".\u00ff", 1),
        PREFIX + "claims.sïg",
        PREFIX + "\U0001f600",
    ],
)
def test_a_token_with_non_ascii_characters_is_malformed(token: str) -> None:
    with pytest.raises(StateError) as caught:
        decode_state(token, [SECRET], now=NOW)
    assert caught.value.kind == "malformed"


@given(st.text(max_size=300) | st.text(max_size=300).map(lambda tail: PREFIX + tail))
def test_any_text_decodes_or_raises_only_state_error(token: str) -> None:
    kind = None
    try:
        decode_state(token, [SECRET], now=NOW)
    except StateError as exc:
        kind = exc.kind
    assert kind in ("malformed", "tampered", "expired")


@given(st.integers(min_value=0, max_value=400), st.characters())
def test_a_valid_token_with_any_character_spliced_in_is_refused_as_state_error(at: int, char: str) -> None:
    token = encode_state(CLAIMS, SECRET)
    spliced = token[:at] + char + token[at:]
    with pytest.raises(StateError):
        decode_state(spliced, [SECRET], now=NOW)
