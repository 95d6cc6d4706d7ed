"""The replicas' keyring (``gateway.protocol.keyring``): one key per line, the first signs,
every one verifies; a removed key verifies nothing (issue #40). Pure, no sockets."""

from __future__ import annotations

import hashlib

import pytest

from gateway.protocol import owner as owners
from gateway.protocol import tasks as rules
from gateway.protocol.keyring import (
    MAX_STATE_KEYS,
    MIN_KEY_BYTES,
    Keyring,
    KeyringError,
    derive_key,
    fingerprint,
    matching,
    parse_keyring,
)
from gateway.protocol.owner import Owner, OwnerError
from gateway.protocol.requeststate import StateClaims, StateError, decode_state, encode_state

OLD = b"the old key, 16 bytes or more"
NEW = b"the new key, 16 bytes or more"
GONE = b"a key removed long ago, 16+ bytes"
ME = Owner("http://10.0.0.7:8000", "b00tA")
NOW = 1_800_000_000
RANDOM = bytes(range(16))


def ring(*keys: bytes) -> Keyring:
    return Keyring(keys)


# -- parsing -------------------------------------------------------------------------------------


def test_a_file_of_one_key_on_one_line_reads_as_that_key_as_before() -> None:
    assert parse_keyring(b"  0123456789abcdef0123456789abcdef \r\n").keys == (b"0123456789abcdef0123456789abcdef",)


def test_the_first_key_is_current_and_blank_lines_and_comments_are_skipped() -> None:
    parsed = parse_keyring(b"# rotated 2026-05-01\n\n" + NEW + b"\n  # the one before\n" + OLD + b"\n\n")
    assert parsed.keys == (NEW, OLD)
    assert parsed.current == NEW


def test_a_short_key_is_refused_with_its_line() -> None:
    with pytest.raises(KeyringError, match=f"line 3: a key needs at least {MIN_KEY_BYTES} bytes \\(it has 5\\)"):
        parse_keyring(NEW + b"\n\nshort\n")


def test_more_keys_than_the_bound_are_refused() -> None:
    keys = [bytes([65 + n]) * MIN_KEY_BYTES for n in range(MAX_STATE_KEYS + 1)]
    assert len(parse_keyring(b"\n".join(keys[:MAX_STATE_KEYS])).keys) == MAX_STATE_KEYS
    with pytest.raises(KeyringError, match=f"holds {MAX_STATE_KEYS + 1} keys; at most {MAX_STATE_KEYS}"):
        parse_keyring(b"\n".join(keys))


def test_a_key_given_twice_or_no_key_at_all_is_refused() -> None:
    with pytest.raises(KeyringError, match="line 3: the key of line 1 again"):
        parse_keyring(NEW + b"\n" + OLD + b"\n" + NEW)
    for empty in (b"", b"\n\n", b"# only a comment\n"):
        with pytest.raises(KeyringError, match="holds no key"):
            parse_keyring(empty)


def test_keys_are_named_by_fingerprint_and_never_shown() -> None:
    parsed = ring(NEW, OLD)
    assert parsed.fingerprints == (hashlib.sha256(NEW).hexdigest()[:8], fingerprint(OLD))
    assert repr(parsed) == f"Keyring({fingerprint(NEW)}, {fingerprint(OLD)})"
    assert NEW.decode() not in repr(parsed)
    assert NEW.decode() not in str(parsed)


def test_each_purpose_derives_one_key_per_key_of_the_ring_current_first() -> None:
    parsed = ring(NEW, OLD)
    assert parsed.derived("forward") == (derive_key(NEW, "forward"), derive_key(OLD, "forward"))
    assert parsed.derived("forward") is parsed.derived("forward")  # derived once per ring
    assert derive_key(NEW, "forward") != derive_key(NEW, "session id")


def test_matching_names_the_first_key_that_signed_and_none_for_no_key() -> None:
    assert matching(b"b", [b"a", b"b", b"b"]) == 1
    assert matching(b"c", [b"a", b"b"]) is None
    assert matching(b"a", []) is None


# -- every kind of token: signed with the current key, verified with any, refused once removed ---


def test_a_session_id_minted_with_the_old_key_is_verified_while_the_old_key_is_in_the_ring() -> None:
    minted = owners.mint_session_id(ME, owners.id_keys(ring(OLD), owners.SESSION_IDS)[0], RANDOM)
    for holding in (ring(OLD, NEW), ring(NEW, OLD), ring(NEW, GONE, OLD)):
        assert owners.session_owner(minted, owners.id_keys(holding, owners.SESSION_IDS)) == ME
    with pytest.raises(OwnerError) as caught:
        owners.session_owner(minted, owners.id_keys(ring(NEW), owners.SESSION_IDS))
    assert caught.value.kind == "forged"


def test_new_ids_are_minted_with_the_current_key_only() -> None:
    minted = owners.mint_session_id(ME, owners.id_keys(ring(NEW, OLD), owners.SESSION_IDS)[0], RANDOM)
    assert owners.session_owner(minted, owners.id_keys(ring(NEW), owners.SESSION_IDS)) == ME
    with pytest.raises(OwnerError):
        owners.session_owner(minted, owners.id_keys(ring(OLD), owners.SESSION_IDS))


def test_a_task_id_minted_with_the_old_key_names_its_owner_until_the_key_is_removed() -> None:
    task_id = rules.mint_task_id(ME, owners.id_keys(ring(OLD), owners.TASK_IDS)[0], RANDOM)
    assert rules.check_owner(task_id, owners.id_keys(ring(NEW, OLD), owners.TASK_IDS)) == ME
    assert rules.check_owner(task_id, owners.id_keys(ring(NEW), owners.TASK_IDS)) is None  # "not found"


def test_a_request_state_signed_with_a_previous_key_says_which_and_its_owner_unseals() -> None:
    old = ring(OLD)
    sealed = owners.seal_owner_text(ME, old.derived(owners.STATE_OWNER_SEAL)[0], RANDOM)
    claims = StateClaims("sid", "alice", "files", "tools/call", "d" * 64, NOW + 60, owner=sealed)
    token = encode_state(claims, old.current)
    both = ring(NEW, OLD)
    verified = decode_state(token, both.keys, now=NOW)
    assert verified == claims
    assert verified.signed_by == 1
    assert owners.unseal_owner_text(verified.owner, both.derived(owners.STATE_OWNER_SEAL)[1]) == ME
    assert decode_state(encode_state(claims, NEW), both.keys, now=NOW).signed_by == 0
    with pytest.raises(StateError) as caught:
        decode_state(token, ring(NEW).keys, now=NOW)
    assert caught.value.kind == "tampered"


def test_a_forward_signed_with_a_previous_key_is_accepted_until_the_key_is_removed() -> None:
    request = {"method": "POST", "path": "/mcp", "principal": "alice", "owner": ME}
    digest = owners.body_digest(b"")
    value = owners.sign_forward(ring(OLD).derived(owners.FORWARDS)[0], now=NOW, nonce=RANDOM, digest=digest, **request)  # type: ignore[arg-type]
    forward = owners.check_forward(value, ring(NEW, OLD).derived(owners.FORWARDS), now=NOW, **request)  # type: ignore[arg-type]
    assert forward.digest == digest
    with pytest.raises(OwnerError) as caught:
        owners.check_forward(value, ring(NEW).derived(owners.FORWARDS), now=NOW, **request)  # type: ignore[arg-type]
    assert caught.value.kind == "forged"
