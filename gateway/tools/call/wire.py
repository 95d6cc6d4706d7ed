"""What ``call``'s MCP connection (``gateway.tools.call.connection``) sends and reads on the
wire, apart from the connection's state: each era's request headers (the user's ``--header``
values last, so they win), an answer as the connection keeps it (``ServerReply``; ``Cursor``: where a
legacy call's event stream stands), a JSON body's reply, redirects, and ``httpx`` errors in
words: ``is_unreached`` tells a connection nothing accepted (worth trying again while a gateway
starts) from every other failure, and ``not_listening`` asks whether the gateway is running.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

import httpx

from gateway.protocol import headers as h
from gateway.protocol import jsonrpc
from gateway.protocol.ingress import NAME_PARAMS
from gateway.protocol.jsonrpc import ErrorReply, Reply, Request, Result
from gateway.tools.call.refusals import REDIRECTS

ACCEPT: Final = f"{h.JSON_MEDIA_TYPE}, {h.SSE_MEDIA_TYPE}"


@dataclass(slots=True)
class Cursor:
    """Where a legacy call's event stream stands: the last event id seen, the last retry hint."""

    last_id: str | None = None
    retry_ms: int | None = None


@dataclass(frozen=True, slots=True)
class ServerReply:
    status: int
    headers: httpx.Headers
    reply: Reply | None
    text: str = ""


def base_headers(extra: Mapping[str, str]) -> httpx.Headers:
    base = {h.CONTENT_TYPE: h.JSON_MEDIA_TYPE, h.ACCEPT: ACCEPT}
    return merged(base, extra)


def modern_headers(request: Request, version: str, extra: Mapping[str, str]) -> httpx.Headers:
    """A modern request's headers: the version and the mirrored ``Mcp-Method`` and ``Mcp-Name``
    (Base64-sentinel-encoded when not header-safe); ``extra`` (the user's) last."""
    headers = {
        h.CONTENT_TYPE: h.JSON_MEDIA_TYPE,
        h.ACCEPT: ACCEPT,
        h.MCP_PROTOCOL_VERSION: version,
        h.MCP_METHOD: request.method,
    }
    name_key = NAME_PARAMS.get(request.method)
    name = (request.params or {}).get(name_key) if name_key else None
    if isinstance(name, str):
        headers[h.MCP_NAME] = h.encode_header_value(name)
    return merged(headers, extra)


def legacy_headers(version: str, session_id: str | None, extra: Mapping[str, str]) -> httpx.Headers:
    """A legacy message's headers: the negotiated version and the session, if any."""
    headers = {h.CONTENT_TYPE: h.JSON_MEDIA_TYPE, h.ACCEPT: ACCEPT, h.MCP_PROTOCOL_VERSION: version}
    if session_id is not None:
        headers[h.MCP_SESSION_ID] = session_id
    return merged(headers, extra)


class Redirect(Exception):
    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.url = url


def location(url: str, status: int, headers: httpx.Headers) -> str | None:
    """Where a redirect points, as an absolute URL; None for any other answer."""
    location = headers.get("location") if status in REDIRECTS else None
    return str(httpx.URL(url).join(location)) if location else None


def same_origin(one: str, other: str) -> bool:
    a, b = httpx.URL(one), httpx.URL(other)
    return (a.scheme, a.host, a.port) == (b.scheme, b.host, b.port)


def merged(*layers: Mapping[str, str]) -> httpx.Headers:
    """Later layers replace earlier ones, whatever the case of the names."""
    merged = httpx.Headers()
    for layer in layers:
        merged.update(layer)
    return merged


def reply_from_json(body: bytes) -> Reply | None:
    try:
        message = jsonrpc.parse_message(jsonrpc.decode(body))
    except (jsonrpc.ParseError, jsonrpc.InvalidMessage):
        return None
    return message if isinstance(message, (Result, ErrorReply)) else None


def describe_http_error(exc: httpx.HTTPError) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return "timed out connecting"
    if "CERTIFICATE_VERIFY_FAILED" in str(exc):
        return f"{exc}; to trust this server's certificate, pass --cacert FILE (or set SSL_CERT_FILE)"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def is_unreached(exc: httpx.HTTPError) -> bool:
    """True when no connection was made because nothing accepted it (refused, reset or
    unanswered): a gateway that is still starting will. A name that does not resolve or a
    TLS handshake that fails will not change by waiting, nor will any later error."""
    if not isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
        return False
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, (ssl.SSLError, socket.gaierror)):
            return False
        cause = cause.__cause__ or cause.__context__
    return True


def is_cut(exc: httpx.HTTPError) -> bool:
    """True when a connection was made and then cut before the answer was whole: the server
    (or a proxy) disconnected, or the read broke. Not a connection that was never made."""
    return isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError))


def cut_modern(url: str, method: str, exc: httpx.HTTPError) -> str:
    """The message when a modern request's connection was cut: what happened, and the ways out."""
    way_out = (
        "a modern answer cannot be resumed after a cut. A tool the server runs as a task survives it "
        "(call polls the task: the gateway makes a task of a tool its server marks "
        "execution.taskSupport, or that the operator names with --task-tool NAME); or retry with "
        "--mode legacy, whose streams call resumes after a cut"
        if method == "tools/call"
        else "a modern answer cannot be resumed after a cut; retry, or use --mode legacy, whose streams call "
        "resumes after a cut"
    )
    return (
        f"the connection to {url} was cut before the answer to {method} came ({describe_http_error(exc)}). "
        f"A proxy in between may limit how long a request may last: {way_out}"
    )


def not_listening(url: str, seconds: float, exc: httpx.HTTPError) -> str:
    """The message when nothing accepted a connection to ``url`` for ``seconds``."""
    parsed = httpx.URL(url)
    port = f" --port {parsed.port}" if parsed.port is not None else ""
    return (
        f"cannot reach {url}: nothing accepted a connection for {seconds:g} s ({describe_http_error(exc)}). "
        f"Is the gateway running at that URL? Start one with: mcp-stdio-gateway{port} -- SERVER-COMMAND "
        "(or wait longer with --connect-timeout S)"
    )
