"""Owner identities in session ids and forwards (``gateway.protocol.owner``): pure, no sockets."""

from __future__ import annotations

import base64
import binascii

import orjson
import pytest

from gateway.protocol import b64url
from gateway.protocol import owner as owners
from gateway.protocol.owner import Owner, OwnerError
from gateway.protocol.requeststate import StateClaims, StateError, decode_state, encode_state, is_gateway_state
from gateway.relay.statekeys import StateKeys

SECRET = b"a shared secret of at least 16 bytes"
ME = Owner("http://10.0.0.7:8000", "b00tA")
OTHER = Owner("http://10.0.0.8:8000", "b00tB")
KEYS = owners.IdKeys.derive(SECRET, "session id")
FORWARD_KEY = owners.derive_key(SECRET, "forward")
RANDOM = bytes(range(16))
NOW = 1_800_000_000
SEAL_KEY = owners.derive_key(SECRET, "requestState owner seal")
ADDRESS_PIECES = (b"10.0.0.7", b":8000", b"http:", b"b00tA", "10.0.0.7".encode("utf-16-be"))
"""What an owner reference must never show a client, however its parts are decoded."""


def decoded_parts(reference: str) -> list[bytes]:
    """Every dot-separated part of ``reference``, as it is and base64url-decoded where it decodes."""
    parts = []
    for part in reference.split("."):
        parts.append(part.encode())
        for pad in ("", "=", "=="):
            try:
                parts.append(base64.urlsafe_b64decode(part + pad))
            except (ValueError, binascii.Error):
                continue
    return parts


def assert_no_address(reference: str) -> None:
    for part in decoded_parts(reference):
        for piece in ADDRESS_PIECES:
            assert piece not in part, (reference, part)


def test_a_session_id_names_its_owner_and_is_visible_ascii() -> None:
    session_id = owners.mint_session_id(ME, KEYS, RANDOM)
    assert session_id.startswith("o2.")
    assert owners.is_owned_session_id(session_id)
    assert all(0x21 <= ord(ch) <= 0x7E for ch in session_id)
    assert owners.session_owner(session_id, [KEYS]) == ME


def test_a_session_id_shows_no_address_nor_boot_only_the_replicas_can_read_them() -> None:
    session_id = owners.mint_session_id(ME, KEYS, RANDOM)
    assert_no_address(session_id)
    other = owners.IdKeys.derive(b"another secret, 16+ bytes", "session id")
    _, rand, sealed, _ = session_id.split(".")
    with pytest.raises(OwnerError):  # another secret's seal key does not read it
        owners.unseal_owner(b64url.decode(sealed), other.seal, b64url.decode(rand))


def test_the_same_owner_seals_differently_under_each_nonce() -> None:
    one = owners.seal_owner(ME, KEYS.seal, RANDOM)
    assert one != owners.seal_owner(ME, KEYS.seal, bytes(16))
    assert one != owners.seal_owner(ME, owners.derive_key(SECRET, "task id owner seal"), RANDOM)
    assert len(one) % owners.SEAL_BLOCK == 0
    assert len(one) == len(owners.seal_owner(Owner("http://10.0.0.77:8000", "b00tA"), KEYS.seal, RANDOM))


def test_a_sealed_owner_round_trips_as_text_with_its_nonce() -> None:
    text = owners.seal_owner_text(ME, KEYS.seal, RANDOM)
    assert_no_address(text)
    assert owners.unseal_owner_text(text, KEYS.seal) == ME
    for broken in ("!!", text[:-4], b64url.encode(bytes(16 + 32))):
        with pytest.raises(OwnerError):
            owners.unseal_owner_text(broken, KEYS.seal)


def test_distinct_random_parts_make_distinct_ids() -> None:
    assert owners.mint_session_id(ME, KEYS, RANDOM) != owners.mint_session_id(ME, KEYS, bytes(16))


def test_an_id_whose_owner_was_swapped_is_refused_as_forged() -> None:
    prefix, rand, _, mac = owners.mint_session_id(ME, KEYS, RANDOM).split(".")
    _, _, other_sealed, _ = owners.mint_session_id(OTHER, KEYS, RANDOM).split(".")
    swapped = ".".join([prefix, rand, other_sealed, mac])
    with pytest.raises(OwnerError) as caught:
        owners.session_owner(swapped, [KEYS])
    assert caught.value.kind == "forged"


def test_an_id_minted_with_another_secret_is_refused() -> None:
    foreign = owners.mint_session_id(ME, owners.IdKeys.derive(b"another secret, 16+ bytes", "session id"), RANDOM)
    with pytest.raises(OwnerError) as caught:
        owners.session_owner(foreign, [KEYS])
    assert caught.value.kind == "forged"


def test_an_earlier_versions_id_with_its_owner_in_clear_is_refused_as_outdated() -> None:
    earlier = f"o1.{b64url.encode(ME.url.encode())}.{ME.boot}.{b64url.encode(RANDOM)}.AAAA"
    assert owners.is_owned_session_id(earlier)
    with pytest.raises(OwnerError) as caught:
        owners.session_owner(earlier, [KEYS])
    assert caught.value.kind == "outdated"
    assert ME.url not in caught.value.message


@pytest.mark.parametrize(
    "session_id",
    ["plain-random-id", "o2.", "o2.a.b", "o2.a.b.c.d.e", "o2.aHR0cA.boot.!!", "o2." + "a" * 2000, "o1.a.b"],
)
def test_malformed_owned_ids_are_refused_without_raising_anything_else(session_id: str) -> None:
    with pytest.raises(OwnerError) as caught:
        owners.session_owner(session_id, [KEYS])
    assert caught.value.kind in ("malformed", "forged", "outdated")


def test_the_session_keys_the_task_keys_and_the_forward_key_all_differ() -> None:
    tasks = owners.IdKeys.derive(SECRET, "task id")
    assert len({KEYS.mac, KEYS.seal, tasks.mac, tasks.seal, FORWARD_KEY}) == 5
    assert KEYS.mac == owners.derive_key(SECRET, "session id")  # the MAC key is the one before sealing


def test_an_owner_key_round_trips_and_names_the_boot() -> None:
    assert Owner.from_key(ME.key) == ME
    assert ME.same_address(Owner(ME.url, "other-boot"))
    assert Owner(ME.url, "other-boot") != ME
    with pytest.raises(OwnerError):
        Owner.from_key("no-boot-here")


HEADERS = [
    ("content-type", "application/json"),
    ("mcp-session-id", "o1.session-a"),
    ("x-api-key", "key-mapped-to-the-child"),
    ("accept", "application/json"),
    ("accept", "text/event-stream"),
]
NONCE = bytes(range(16))


def sign(headers: list[tuple[str, str]] = HEADERS, **changes: object) -> str:
    fields: dict[str, object] = {
        "now": NOW,
        "nonce": NONCE,
        "method": "POST",
        "path": "/mcp",
        "principal": "alice",
        "owner": ME,
        "digest": owners.body_digest(b"{}"),
        "headers": headers,
    }
    fields.update(changes)
    return owners.sign_forward(FORWARD_KEY, **fields)  # type: ignore[arg-type]


def check(value: str, received: list[tuple[str, str]] = HEADERS, **changes: object) -> owners.Forward:
    fields: dict[str, object] = {
        "now": NOW + 1,
        "method": "POST",
        "path": "/mcp",
        "principal": "alice",
        "owner": ME,
        "names": owners.signed_names(HEADERS),
        "received": received,
    }
    fields.update(changes)
    return owners.check_forward(value, [FORWARD_KEY], **fields)  # type: ignore[arg-type]


def test_a_forward_verifies_for_exactly_the_request_it_signs_and_keeps_only_signed_headers() -> None:
    added = [("x-envoy-added", "by a mesh"), *HEADERS, ("x-forwarded-for", "10.0.0.1")]
    forward = check(sign(), received=added)
    assert forward.headers == HEADERS  # what a hop added is not acted on
    assert forward.nonce == b64url.encode(NONCE)
    assert owners.body_matches(forward, b"{}")
    assert not owners.body_matches(forward, b'{"altered": true}')


@pytest.mark.parametrize(
    "changes",
    [
        {"method": "DELETE"},
        {"path": "/servers/other/mcp"},
        {"principal": "mallory"},
        {"principal": None},
        {"owner": OTHER},
        {"owner": Owner(ME.url, "restarted")},
        {"names": "content-type,accept"},
    ],
)
def test_a_forward_altered_in_any_signed_field_is_refused(changes: dict[str, object]) -> None:
    with pytest.raises(OwnerError) as caught:
        check(sign(), **changes)
    assert caught.value.kind == "forged"


@pytest.mark.parametrize(
    "received",
    [
        [(k, "o1.session-b" if k == "mcp-session-id" else v) for k, v in HEADERS],  # another session
        [(k, "stolen" if k == "x-api-key" else v) for k, v in HEADERS],  # another mapped credential
        [h for h in HEADERS if h[0] != "mcp-session-id"],  # a signed header dropped
        [*HEADERS, ("mcp-session-id", "o1.session-b")],  # a signed header repeated
        [HEADERS[0], HEADERS[1], HEADERS[2], HEADERS[4], HEADERS[3]],  # one name's values reordered
    ],
)
def test_a_forward_whose_signed_headers_changed_on_the_way_is_refused(received: list[tuple[str, str]]) -> None:
    with pytest.raises(OwnerError) as caught:
        check(sign(), received=received)
    assert caught.value.kind == "forged"


def test_a_forward_outside_the_allowed_skew_is_refused_as_stale() -> None:
    with pytest.raises(OwnerError) as caught:
        check(sign(), now=NOW + owners.FORWARD_MAX_SKEW + 1)
    assert caught.value.kind == "stale"
    with pytest.raises(OwnerError):
        check(sign(), now=NOW - owners.FORWARD_MAX_SKEW - 1)


@pytest.mark.parametrize(
    "value",
    ["", "v1;1;AAAA", "v2;1;AAAA", "v2;x;n;d;AAAA", "v2;1;n;d;!!", "v2;1234567890123;n;d;AAAA", "v2;1;n;d;AAAA;x"],
)
def test_a_malformed_forward_header_is_refused(value: str) -> None:
    with pytest.raises(OwnerError) as caught:
        check(value)
    assert caught.value.kind == "malformed"


def test_a_forward_listing_too_many_headers_is_refused() -> None:
    names = ",".join(f"x-{n}" for n in range(owners.MAX_SIGNED_HEADERS + 1))
    with pytest.raises(OwnerError) as caught:
        check(sign(), names=names)
    assert caught.value.kind == "malformed"


def test_a_nonce_is_accepted_once_remembered_while_its_stamp_is_fresh_and_boundedly() -> None:
    seen = owners.SeenForwards(capacity=3)
    first = check(sign())
    seen.admit(first, NOW + 1)
    with pytest.raises(OwnerError) as caught:
        seen.admit(first, NOW + 2)
    assert caught.value.kind == "replayed"
    others = [check(sign(nonce=bytes([n]) * 16)) for n in (1, 2, 3)]
    seen.admit(others[0], NOW + 2)
    seen.admit(others[1], NOW + 2)
    with pytest.raises(OwnerError) as caught:
        seen.admit(others[2], NOW + 2)  # full of fresh nonces: refused, none forgotten early
    assert caught.value.kind == "busy"
    assert len(seen) == 3
    # Once the stamps are past the skew (check_forward refuses them as stale), they are forgotten.
    seen.admit(others[2], NOW + owners.FORWARD_MAX_SKEW + 1)
    assert len(seen) == 1


def test_a_principal_travels_as_base64url_of_utf8() -> None:
    assert owners.decode_principal(owners.encode_principal("Zoë <z@example.org>")) == "Zoë <z@example.org>"
    with pytest.raises(OwnerError):
        owners.decode_principal("not base64!")


def test_a_request_state_carries_its_owner_sealed_and_a_token_without_one_still_reads() -> None:
    sealed = owners.seal_owner_text(ME, SEAL_KEY, RANDOM)
    claims = StateClaims("sid", "alice", "files", "tools/call", "d" * 64, NOW + 60, owner=sealed)
    token = encode_state(claims, SECRET)
    assert token.startswith("mcpgw2.")
    assert_no_address(token)
    payload = orjson.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
    assert_no_address(payload["own"])
    assert owners.unseal_owner_text(decode_state(token, [SECRET], now=NOW).owner, SEAL_KEY) == ME
    unowned = StateClaims("sid", "alice", "files", "tools/call", "d" * 64, NOW + 60)
    token = encode_state(unowned, SECRET)
    assert "own" not in unowned.to_json()
    assert decode_state(token, [SECRET], now=NOW).owner == ""


def test_an_earlier_versions_request_state_is_still_the_gateways_and_refused() -> None:
    earlier = "mcpgw1." + b64url.encode(orjson.dumps({"own": ME.key})) + ".AAAA"
    assert is_gateway_state(earlier)
    with pytest.raises(StateError) as caught:
        decode_state(earlier, [SECRET], now=NOW)
    assert caught.value.kind == "malformed"
    assert ME.url not in caught.value.message


def test_the_routing_seals_itself_afresh_for_each_request_state() -> None:
    from gateway.relay import owner as forward

    routing = forward.OwnerRouting("http://10.0.0.7:8000", StateKeys.fixed(SECRET), max_body_bytes=1024)
    ring = routing.keys.ring
    one, two = routing.sealed_me(ring), routing.sealed_me(ring)
    assert one != two
    assert_no_address(one)
    assert owners.unseal_owner_text(one, SEAL_KEY) == owners.unseal_owner_text(two, SEAL_KEY) == routing.me


def test_an_unreachable_owner_is_remembered_briefly_and_boundedly() -> None:
    from gateway.relay import owner as forward

    routing = forward.OwnerRouting("http://10.0.0.7:8000", StateKeys.fixed(SECRET), max_body_bytes=1024)
    assert not routing.is_gone(OTHER, 100.0)
    routing.note_gone(OTHER, 100.0)
    assert routing.is_gone(OTHER, 100.0 + forward.GONE_MEMORY_SECONDS - 1)
    assert not routing.is_gone(Owner(OTHER.url, "another-boot"), 101.0)  # a restarted owner is another
    assert not routing.is_gone(OTHER, 100.0 + forward.GONE_MEMORY_SECONDS)  # forgotten: tried again
    for n in range(forward.GONE_MEMORY_MAX + 5):
        routing.note_gone(Owner(f"http://10.1.0.{n}:8000", "b"), 200.0)
    assert len(routing._gone) == forward.GONE_MEMORY_MAX
    assert not routing.is_gone(Owner("http://10.1.0.0:8000", "b"), 201.0)  # the oldest went first
