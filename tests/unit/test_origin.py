"""``Host`` and ``Origin`` parsing (``gateway.http.origin``): strict, pure, no sockets."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.http.origin import OriginPolicy, host_name


@pytest.mark.parametrize(
    ("authority", "name"),
    [
        ("localhost", "localhost"),
        ("LocalHost:8000", "localhost"),
        ("127.0.0.1:65535", "127.0.0.1"),
        ("[::1]:8000", "[::1]"),
        ("gw.internal", "gw.internal"),
        ("localhost:80@evil.com", None),
        ("localhost:65536", None),
        ("localhost:", None),
        (":8000", None),
        ("", None),
        ("local host", None),
        ("127.0.0.1/x", None),
        ("user@localhost", None),
        ("[::1", None),
        ("localhost:8000:1", None),
    ],
)
def test_a_host_is_name_or_ip_literal_with_an_optional_port(authority: str, name: str | None) -> None:
    assert host_name(authority) == name


@given(st.text(max_size=40))
def test_no_authority_with_a_user_part_path_or_space_ever_parses(text: str) -> None:
    name = host_name(text)
    if any(c in text for c in "@/ \t?#\\"):
        assert name is None
    if name is not None:
        assert name in text.lower()


def test_a_repeated_or_malformed_header_is_refused_and_a_clean_request_passes() -> None:
    policy = OriginPolicy(loopback_only=True)
    clean = [(b"host", b"localhost:8000"), (b"origin", b"http://localhost:3000")]
    assert policy.refusal(dict(clean), clean) is None
    twice = [*clean, (b"origin", b"http://localhost:3000")]
    assert policy.refusal(dict(twice), twice).status_code == 400  # type: ignore[union-attr]
    odd = [(b"host", b"localhost:80@evil.com")]
    assert policy.refusal(dict(odd), odd).status_code == 400  # type: ignore[union-attr]
    sneaky = [(b"host", b"localhost"), (b"origin", b"http://localhost:80@evil.com")]
    assert policy.refusal(dict(sneaky), sneaky).status_code == 403  # type: ignore[union-attr]
    own = [(b"host", b"gw.example:8443"), (b"origin", b"https://gw.example:8443")]
    remote = OriginPolicy(loopback_only=False)
    assert remote.refusal(dict(own), own).status_code == 403  # type: ignore[union-attr]
    assert remote.refusal(dict(own), own, own_origin=True) is None  # the operator's login form
