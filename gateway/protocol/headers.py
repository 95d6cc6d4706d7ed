"""HTTP header names and header-value codecs for the MCP Streamable HTTP edge.

Contract:

* Header names are defined here once, lower-case: the HTTP edge lower-cases incoming
  names, so every lookup in ``gateway.protocol`` is ``headers.get(MCP_METHOD)``.
* ``decode_header_value`` / ``encode_header_value`` implement the Base64 sentinel
  ``=?base64?<base64(UTF-8)>?=`` of the 2026-07-28 Streamable HTTP transport (digest §2.2)
  used by ``Mcp-Name`` and ``Mcp-Param-*``. ``decode_header_value(encode_header_value(s))
  == s`` for every string ``s`` that UTF-8 can encode.
* ``has_invalid_header_chars`` says whether a received value holds bytes no header value
  may carry (CR, LF, NUL, other controls except HTAB, DEL, non-ASCII); ``is_plain`` whether
  a value is one of the usual ones, valid and meaning itself, without decoding it.
* ``accepts`` and ``media_type`` read ``Accept`` and ``Content-Type``.

Pure: standard library only, no I/O.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
from typing import Final

# --- Header names (lower-case; HTTP field names are case-insensitive) ---------------------

ACCEPT: Final = "accept"
CONTENT_TYPE: Final = "content-type"
ORIGIN: Final = "origin"
AUTHORIZATION: Final = "authorization"
ALLOW: Final = "allow"
MCP_PROTOCOL_VERSION: Final = "mcp-protocol-version"
MCP_METHOD: Final = "mcp-method"
MCP_NAME: Final = "mcp-name"
MCP_SESSION_ID: Final = "mcp-session-id"
LAST_EVENT_ID: Final = "last-event-id"
MCP_PARAM_PREFIX: Final = "mcp-param-"

# --- Media types ----------------------------------------------------------------------------

JSON_MEDIA_TYPE: Final = "application/json"
SSE_MEDIA_TYPE: Final = "text/event-stream"

# --- Base64 sentinel ------------------------------------------------------------------------

SENTINEL_PREFIX: Final = "=?base64?"
SENTINEL_SUFFIX: Final = "?="

# HTTP optional whitespace (RFC 9110 §5.6.3) is SP and HTAB only; str.strip() would also
# eat CR, LF and Unicode spaces, which must instead be reported as invalid.
_OWS: Final = " \t"

# Plain-safe value: visible ASCII plus SP/HTAB (digest §2.2). Edge whitespace is checked apart.
_PLAIN_SAFE: Final = re.compile(r"[\t\x20-\x7e]*")


class HeaderValueError(ValueError):
    """A Base64-sentinel header value whose payload is not canonical base64 of UTF-8."""


def _is_sentinel(value: str) -> bool:
    # The length check stops "=?base64?=" from matching with the prefix's "?" reused as
    # the suffix's first character.
    return (
        len(value) >= len(SENTINEL_PREFIX) + len(SENTINEL_SUFFIX)
        and value.startswith(SENTINEL_PREFIX)
        and value.endswith(SENTINEL_SUFFIX)
    )


def decode_header_value(raw: str) -> str:
    """The value a client meant: sentinel payloads decoded, anything else literal.

    Surrounding SP/HTAB is trimmed first. A value without both exact, lower-case markers
    is literal (``=?BASE64?…?=`` and ``=?base64?abc`` come back unchanged). Raises
    ``HeaderValueError`` when the payload is not standard base64 with correct padding
    (non-canonical encodings with non-zero trailing bits included: no encoder emits them,
    so accepting them would only widen what an intermediary and the gateway may read
    differently) or when the bytes are not UTF-8.
    """
    value = raw.strip(_OWS)
    if not _is_sentinel(value):
        return value
    payload = value[len(SENTINEL_PREFIX) : -len(SENTINEL_SUFFIX)]
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise HeaderValueError(f"bad base64 in sentinel value: {exc}") from exc
    if base64.b64encode(data).decode("ascii") != payload:
        raise HeaderValueError("non-canonical base64 in sentinel value")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HeaderValueError("sentinel value is not UTF-8") from exc


def encode_header_value(value: str) -> str:
    """``value`` as it may travel in a header: plain when safe, else the Base64 sentinel.

    Plain-safe means visible ASCII plus SP/HTAB, no leading or trailing whitespace, and
    not itself shaped like a sentinel (else the receiver would try to decode it).
    """
    if _PLAIN_SAFE.fullmatch(value) and value == value.strip(_OWS) and not _is_sentinel(value):
        return value
    payload = base64.b64encode(value.encode("utf-8")).decode("ascii")
    return f"{SENTINEL_PREFIX}{payload}{SENTINEL_SUFFIX}"


def has_invalid_header_chars(value: str) -> bool:
    """True if ``value`` holds a character no header value may carry.

    ASGI servers hand header bytes over as latin-1, so a raw non-ASCII byte shows up as a
    character above U+007F. HTAB is the only control character allowed (RFC 9110 §5.5).
    """
    if value.isascii() and value.isprintable():  # the usual value, all of it U+0020..U+007E:
        return False  # two string scans instead of a regular expression's match (three per call)
    return _PLAIN_SAFE.fullmatch(value) is None


def is_plain(value: str) -> bool:
    """True when ``value`` travels as it is: only U+0020..U+007E, no whitespace at either edge,
    not starting like a sentinel. Such a value is valid (``has_invalid_header_chars`` is False) and
    means itself (``decode_header_value`` returns it unchanged); a value this says False for may
    still be both (a sentinel, say), and only the full checks tell."""
    return (
        value.isascii() and value.isprintable() and value.strip(_OWS) == value and not value.startswith(SENTINEL_PREFIX)
    )


# --- Accept and Content-Type ----------------------------------------------------------------


def media_type(content_type: str) -> str:
    """The bare, lower-cased media type of a ``Content-Type`` value (parameters dropped)."""
    return content_type.split(";", 1)[0].strip(_OWS).lower()


MAX_REMEMBERED_ACCEPT: Final = 32
"""Distinct ``Accept`` values whose parse (and whose JSON-and-SSE answer) is kept: clients send
one or two values, on every POST; past it the least recently used goes, so a client that varies
its value costs only the parse."""


@functools.lru_cache(maxsize=MAX_REMEMBERED_ACCEPT)
def _parse_accept(accept: str) -> tuple[tuple[str, str, float], ...]:
    """``(type, subtype, q)`` for each well-formed media range; malformed ranges are skipped."""
    return _parse_ranges(accept)


def _parse_ranges(accept: str) -> tuple[tuple[str, str, float], ...]:
    ranges: list[tuple[str, str, float]] = []
    for item in accept.split(","):
        head, *params = item.split(";")
        kind, slash, subtype = head.strip(_OWS).lower().partition("/")
        if not slash or not kind or not subtype or (kind == "*" and subtype != "*"):
            continue
        q = 1.0
        for param in params:
            name, _, raw = param.strip(_OWS).partition("=")
            if name.strip(_OWS).lower() == "q":
                q = _qvalue(raw.strip(_OWS))
        if q >= 0:
            ranges.append((kind, subtype, q))
    return tuple(ranges)


# RFC 9110 §12.4.2: qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] )
_QVALUE: Final = re.compile(r"0(\.[0-9]{0,3})?|1(\.0{0,3})?")


def _qvalue(raw: str) -> float:
    """The weight, or -1 for a malformed one (the range is then ignored, not trusted)."""
    return float(raw) if _QVALUE.fullmatch(raw) else -1.0


@functools.lru_cache(maxsize=MAX_REMEMBERED_ACCEPT)
def accepts_json_and_sse(accept: str) -> bool:
    """``accepts(accept, JSON) and accepts(accept, SSE)``, what every POST must say; the answer
    for a value is kept (``MAX_REMEMBERED_ACCEPT`` values, as for the parse)."""
    return accepts(accept, JSON_MEDIA_TYPE) and accepts(accept, SSE_MEDIA_TYPE)


def accepts(accept: str | None, wanted: str) -> bool:
    """Whether an ``Accept`` value admits the media type ``wanted`` (``type/subtype``).

    The most specific matching range decides (RFC 9110 §12.5.1), so
    ``application/json, */*;q=0`` admits JSON but not SSE. ``q=0`` means "not acceptable".
    A missing header admits nothing: MCP clients MUST send ``Accept`` on every POST.
    """
    if accept is None:
        return False
    kind, _, subtype = wanted.lower().partition("/")
    best_specificity = -1
    best_q = 0.0
    for range_kind, range_subtype, q in _parse_accept(accept):
        if range_kind == kind and range_subtype == subtype:
            specificity = 2
        elif range_kind == kind and range_subtype == "*":
            specificity = 1
        elif range_kind == "*":
            specificity = 0
        else:
            continue
        # Among equally specific ranges (a repeated type) the highest weight wins.
        if specificity > best_specificity or (specificity == best_specificity and q > best_q):
            best_specificity, best_q = specificity, q
    return best_q > 0
