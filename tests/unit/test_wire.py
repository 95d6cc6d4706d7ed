"""The edge's one decoder of request headers, ``wire.header_map``."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.http import wire

NAMES = st.sampled_from([b"host", b"Content-Type", b"content-type", b"MCP-Name", b"x-\xc0"]) | st.binary(max_size=80)
HEADERS = st.lists(st.tuples(NAMES, st.binary(max_size=20)), max_size=12)


def decoded(headers: list[tuple[bytes, bytes]]) -> dict[str, str]:
    """What ``header_map`` is: every name and value decoded as latin-1, names lower-cased."""
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in headers}


@given(HEADERS)
def test_header_map_decodes_names_and_values_as_latin_1_with_names_lower_cased(
    headers: list[tuple[bytes, bytes]],
) -> None:
    assert wire.header_map({"headers": headers}) == decoded(headers)
    assert wire.header_map({"headers": headers}) == decoded(headers)  # names kept the first time


def test_the_remembered_names_are_bounded_and_a_name_past_the_bound_is_still_decoded() -> None:
    many = [(b"x-made-up-%d" % i, b"v") for i in range(wire.MAX_REMEMBERED_NAMES + 10)]
    long = [(b"X-" + b"L" * wire.MAX_REMEMBERED_NAME_BYTES, b"v")]
    assert wire.header_map({"headers": many + long}) == decoded(many + long)
    assert len(wire._NAMES) <= wire.MAX_REMEMBERED_NAMES
    assert b"X-" + b"L" * wire.MAX_REMEMBERED_NAME_BYTES not in wire._NAMES
