"""One logical MCP connection over Streamable HTTP, for either era, with raw ``httpx``.

Contract:

* ``open_connection(url, mode, headers)`` yields an ``McpConnection`` whose ``info`` says
  the era and version in use; leaving the context ends a legacy session (``DELETE``,
  bounded and shielded, so Ctrl-C still ends it) and closes the HTTP client.
* Era detection (``Mode.AUTO``): a modern ``server/discover`` POST first; a
  ``DiscoverResult`` naming 2026-07-28, or a -32022 whose ``data.supported`` names it,
  means modern (the same decision as the gateway's child probe,
  ``gateway.protocol.handshake.classify_probe``); any other answer — another error, a
  4xx that is not JSON-RPC — means legacy: ``initialize`` (2025-11-25, no client
  capabilities), keep ``Mcp-Session-Id``, send ``notifications/initialized``. A refused
  connection is not an answer: until the server has answered once, a connection that nothing
  accepts (``wire.is_unreached``: refused, unanswered; not a name that does not resolve, nor
  TLS) is tried again every ``RECONNECT_DELAY``… ``MAX_RECONNECT_DELAY`` seconds until
  ``connect_timeout`` seconds from opening (a gateway started a moment before ``call`` is still
  binding its port), then fails asking whether the gateway runs there (``wire.not_listening``;
  each failed attempt is logged at DEBUG). Nor is a refusal of the probe itself: an
  HTTP 401 or 403, a 404 that is not a JSON-RPC "method not found" (a wrong path), or a
  gateway-local error (-31xxx: the gateway cannot start its server) is reported as it is,
  with a hint (``--header 'Authorization: Bearer …'``, "did you mean …/mcp?", the served
  endpoint closest to the path typed: ``gateway.tools.call.endpoints``), rather than
  blamed on an ``initialize`` that would fail the same way. A redirect to the same origin
  (``/mcp/`` → ``/mcp``) is followed once, before any session, and named in
  ``redirected_from``; any other redirect is reported with its ``Location``. ``Mode.MODERN`` and
  ``Mode.LEGACY`` skip the detection; their first answers get the same checks.
* ``capabilities`` are declared to the server (modern ``_meta``, legacy ``initialize``);
  ``on_request`` answers a legacy server's requests on a stream (``ping`` is answered
  without it; with none, anything else gets "method not found").
* ``request(method, params, meta=…, param_headers=…, on_notification=…)`` sends one
  request and returns its ``Result`` or ``ErrorReply``, HTTP 4xx error bodies included.
  Modern requests carry the full ``_meta`` and the mirrored headers (``MCP-Protocol-Version``,
  ``Mcp-Method``, ``Mcp-Name`` Base64-sentinel-encoded when not header-safe, and the
  ``Mcp-Param-*`` the caller computed); legacy ones carry the session id and the negotiated
  version. Answers may be JSON or SSE (``data:`` lines; comments, ``event:``, ``id:`` and
  empty priming events are skipped); notifications on the stream go to ``on_notification``
  as they arrive. A legacy server's request on the stream (``ping``, or one we have no
  capability for) is answered by POSTing the response.
* A legacy call's event stream that is cut before its reply (a proxy's timeout, a network
  drop, or a 2025-11-25 server closing a polling stream) is resumed: ``GET`` with the session
  and ``Last-Event-ID`` (the last event id seen), after the server's ``retry`` hint or
  ``RESUME_DELAY``, up to ``MAX_RESUMES`` times (L-TR §Resumability and Redelivery). A stream
  that carried no event id cannot be resumed: that fails as before. A refused resume
  (4xx) fails the call with the server's reason.
* Headers given by the user are sent last, so they win over the client's own: a way to
  test a server's refusals on purpose.
* A modern request whose connection is cut once made (a proxy's request limit: the
  server disconnected before or while answering) cannot be resumed (modern streams keep no
  events): it fails naming the ways out (``wire.cut_modern``): a tool the server runs as a
  task, which ``call`` polls through cuts, or ``--mode legacy``, whose streams it resumes.
* Every ``httpx`` failure, an answer that is not JSON-RPC, and a stream that ends before
  its reply raise ``ConnectionFailed``; nothing from ``httpx`` escapes this module.
"""

from __future__ import annotations

import itertools
import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager, suppress
from enum import StrEnum
from typing import Final

import anyio
import httpx

from gateway import __version__
from gateway.protocol import handshake, jsonrpc, tasks, versions
from gateway.protocol import headers as h
from gateway.protocol.handshake import ChildInfo, HandshakeError
from gateway.protocol.jsonrpc import ErrorReply, JsonObject, Notification, Reply, Request, Result
from gateway.protocol.versions import Era
from gateway.tools.call import wire
from gateway.tools.call.errors import ConnectionFailed
from gateway.tools.call.refusals import SHOWN_BODY_CHARS, refusal, suggested_url
from gateway.tools.call.sse import sse_events

__all__ = ["McpConnection", "Mode", "open_connection", "refusal", "suggested_url"]

CONNECT_TIMEOUT: Final = 10.0
"""Seconds ``call`` keeps trying to connect before the server's first answer (``--connect-timeout``).
Reads are not bounded here: a tool may run for minutes before its first byte (the answer is
committed lazily), so ``--timeout`` bounds a call."""
RECONNECT_DELAY: Final = 0.1
"""Seconds before the first retry of a connection nothing accepted; doubled each time."""
MAX_RECONNECT_DELAY: Final = 1.0
"""Longest wait between two connection attempts: a gateway that starts is used within a second."""
CLOSE_TIMEOUT: Final = 5.0
"""Seconds the ``DELETE`` that ends a legacy session may take; it runs shielded."""
MAX_RESUMES: Final = 100
"""Times one legacy call's event stream is resumed after a cut: a 10-minute call behind a
proxy that cuts every response after 10 s needs 60."""
RESUME_DELAY: Final = 0.5
"""Seconds before a resume when the server sent no ``retry`` hint."""
MAX_RETRY_SECONDS: Final = 30.0
"""Longest ``retry`` hint honoured: a server asking for more gets this."""


log = logging.getLogger(__name__)

NotificationHandler = Callable[[Notification], None]
ServerRequestHandler = Callable[[Request], Awaitable[Reply]]


class Mode(StrEnum):
    AUTO = "auto"
    MODERN = "modern"
    LEGACY = "legacy"


class McpConnection:
    def __init__(
        self,
        http: httpx.AsyncClient,
        url: str,
        extra_headers: Mapping[str, str] | None = None,
        *,
        capabilities: JsonObject | None = None,
        on_request: ServerRequestHandler | None = None,
        connect_timeout: float = CONNECT_TIMEOUT,
    ) -> None:
        self.url = url
        self.info: ChildInfo | None = None
        self.session_id: str | None = None
        self.redirected_from: str | None = None  # the URL typed, when the server redirected to ``url``
        self._http = http
        self._extra = dict(extra_headers or {})
        self._ids = itertools.count(1)
        self._capabilities = dict(capabilities or {})
        self._on_request = on_request
        self._connect_timeout = connect_timeout
        self._connect_deadline = anyio.current_time() + connect_timeout
        self._answered = False  # the server has answered once: a failed connection is no longer "not yet up"

    def __repr__(self) -> str:
        era = self.info.era.value if self.info else "unopened"
        return f"<McpConnection {self.url} {era} session={self.session_id is not None}>"

    @property
    def era(self) -> Era:
        return self._info().era

    def _info(self) -> ChildInfo:
        if self.info is None:
            raise RuntimeError("the connection is not open")  # a bug in the caller
        return self.info

    # -- opening and closing --------------------------------------------------------------

    async def open(self, mode: Mode) -> ChildInfo:
        """Detect or force the era; an opening answered with a redirect to the same origin
        (``/mcp/`` → ``/mcp``) is retried once at the new URL, named in ``redirected_from``."""
        try:
            return await self._open(mode)
        except wire.Redirect as redirect:
            self.redirected_from, self.url = self.url, redirect.url
            return await self._open(mode)

    async def _open(self, mode: Mode) -> ChildInfo:
        if mode is Mode.MODERN:
            self.info = ChildInfo(Era.MODERN, versions.LATEST_MODERN, supported_versions=versions.MODERN_VERSIONS)
            return self.info
        if mode is Mode.AUTO:
            answer = await self._discover()
            self._check_refusal(answer, handshake.DISCOVER)
            info = handshake.classify_probe(answer.reply)
            if info is not None:
                self.info = info
                return info
        self.info = await self._initialize()
        return self.info

    async def describe(self) -> None:
        """Learn the server's info when ``--mode modern`` skipped the probe: ``server/discover``
        as an ordinary request (a failure leaves the info as it was)."""
        if self.info is None or self.info.era is not Era.MODERN or self.info.raw:
            return
        reply = await self.request(handshake.DISCOVER)
        info = handshake.classify_probe(reply)
        if info is not None and info.version == self.info.version:
            self.info = info

    async def _discover(self) -> wire.ServerReply:
        request = Request(next(self._ids), handshake.DISCOVER, handshake.probe_params(__version__))
        headers = wire.modern_headers(request, versions.LATEST_MODERN, self._extra)
        return await self._post(request.to_dict(), headers, None)

    async def _initialize(self) -> ChildInfo:
        params = handshake.initialize_params(__version__, self._capabilities)
        request = Request(next(self._ids), handshake.INITIALIZE, params)
        answer = await self._post(request.to_dict(), wire.base_headers(self._extra), None)
        self._check_refusal(answer, handshake.INITIALIZE)
        if answer.reply is None:
            raise ConnectionFailed(self._not_mcp(answer, handshake.INITIALIZE))
        try:
            info = handshake.accept_initialize(answer.reply)
        except HandshakeError as exc:
            raise ConnectionFailed(f"{self.url} refused to open a legacy session: {exc}") from exc
        self.info = info
        self.session_id = answer.headers.get(h.MCP_SESSION_ID)
        await self._post(Notification(handshake.INITIALIZED).to_dict(), self._legacy_headers(), None)
        return info

    async def close(self) -> None:
        """End the legacy session, if any (a 405 means the server keeps none: fine)."""
        if self.session_id is None:
            return
        # On failure the session expires on its own: nothing useful to tell the user.
        with anyio.move_on_after(CLOSE_TIMEOUT, shield=True), suppress(httpx.HTTPError):
            await self._http.delete(self.url, headers=self._legacy_headers())
        self.session_id = None

    # -- requests -------------------------------------------------------------------------

    async def request(
        self,
        method: str,
        params: JsonObject | None = None,
        *,
        meta: JsonObject | None = None,
        param_headers: Mapping[str, str] | None = None,
        on_notification: NotificationHandler | None = None,
    ) -> Reply:
        """One request; a first answer that redirects to the same origin is followed once."""
        try:
            return await self._request(method, params, meta, param_headers, on_notification)
        except wire.Redirect as redirect:
            self.redirected_from, self.url = self.url, redirect.url
            return await self._request(method, params, meta, param_headers, on_notification)

    async def _request(
        self,
        method: str,
        params: JsonObject | None,
        meta: JsonObject | None,
        param_headers: Mapping[str, str] | None,
        on_notification: NotificationHandler | None,
    ) -> Reply:
        info = self._info()
        body_params = dict(params or {})
        if info.era is Era.MODERN:
            # The Tasks extension too: a long call may come back as a task, which ``call`` polls.
            modern = handshake.modern_meta(__version__, {**self._capabilities, "extensions": {tasks.EXTENSION: {}}})
            modern[handshake.META_PROTOCOL_VERSION] = info.version
            body_params["_meta"] = {**modern, **(meta or {})}
            request = Request(next(self._ids), method, body_params)
            headers = wire.merged(
                wire.modern_headers(request, info.version, self._extra), param_headers or {}, self._extra
            )
        else:
            if meta:
                body_params["_meta"] = dict(meta)
            request = Request(next(self._ids), method, body_params or None)
            headers = self._legacy_headers()
        answer = await self._post(request.to_dict(), headers, on_notification)
        self._check_refusal(answer, method)
        if answer.reply is None:
            raise ConnectionFailed(self._not_mcp(answer, method))
        return answer.reply

    def _check_refusal(self, answer: wire.ServerReply, method: str) -> None:
        """Raise ``ConnectionFailed`` when the endpoint refused us rather than the request."""
        target = wire.location(self.url, answer.status, answer.headers)
        unfollowed = self.redirected_from is None and self.session_id is None
        if target is not None and unfollowed and wire.same_origin(target, self.url):
            raise wire.Redirect(target)  # same origin only: the --header values (tokens) stay where they were sent
        problem = refusal(
            self.url,
            answer.status,
            answer.reply,
            answer.text,
            method=method,
            has_token=any(name.lower() == h.AUTHORIZATION for name in self._extra),
            in_session=self.session_id is not None,
            location=wire.location(self.url, answer.status, answer.headers),
        )
        if problem is not None:
            raise ConnectionFailed(problem)

    def _legacy_headers(self) -> httpx.Headers:
        return wire.legacy_headers(self._info().version, self.session_id, self._extra)

    # -- the wire -------------------------------------------------------------------------

    async def _post(
        self, payload: JsonObject, headers: Mapping[str, str], on_notification: NotificationHandler | None
    ) -> wire.ServerReply:
        """POST ``payload``; a connection nothing accepts is tried again until the connect
        deadline, as long as the server has never answered (module docstring)."""
        delay = RECONNECT_DELAY
        while True:
            try:
                answer = await self._post_once(payload, headers, on_notification)
            except httpx.HTTPError as exc:
                modern = self.info is not None and self.info.era is Era.MODERN
                if modern and wire.is_cut(exc):  # reached, then cut: no session stream to resume
                    raise ConnectionFailed(wire.cut_modern(self.url, str(payload.get("method")), exc)) from exc
                if self._answered or not wire.is_unreached(exc):
                    raise ConnectionFailed(f"cannot reach {self.url}: {wire.describe_http_error(exc)}") from exc
                left = self._connect_deadline - anyio.current_time()
                if left <= 0:
                    raise ConnectionFailed(wire.not_listening(self.url, self._connect_timeout, exc)) from exc
                log.debug("nothing accepts a connection at %s yet (%s); retrying in %g s", self.url, exc, delay)
                await anyio.sleep(min(delay, left))
                delay = min(delay * 2, MAX_RECONNECT_DELAY)
                continue
            self._answered = True
            return answer

    async def _post_once(
        self, payload: JsonObject, headers: Mapping[str, str], on_notification: NotificationHandler | None
    ) -> wire.ServerReply:
        # Before the first answer, one attempt may not outlast the connect deadline.
        left = max(self._connect_deadline - anyio.current_time(), RECONNECT_DELAY)
        timeout = httpx.USE_CLIENT_DEFAULT if self._answered else httpx.Timeout(None, connect=left)
        content = jsonrpc.encode(payload)
        async with self._http.stream("POST", self.url, content=content, headers=headers, timeout=timeout) as resp:
            kind = h.media_type(resp.headers.get(h.CONTENT_TYPE, ""))
            if kind == h.SSE_MEDIA_TYPE:
                cursor = wire.Cursor()
                try:
                    reply = await self._read_stream(resp, on_notification, cursor)
                except httpx.HTTPError:
                    if cursor.last_id is None or self.session_id is None:
                        raise  # nothing to resume from
                    reply = None
                if reply is None:
                    reply = await self._resume(str(payload["method"]), cursor, on_notification)
                return wire.ServerReply(resp.status_code, resp.headers, reply)
            body = await resp.aread()
        reply = wire.reply_from_json(body) if kind == h.JSON_MEDIA_TYPE else None
        return wire.ServerReply(
            resp.status_code, resp.headers, reply, body[:SHOWN_BODY_CHARS].decode("utf-8", "replace")
        )

    async def _resume(self, method: str, cursor: wire.Cursor, on_notification: NotificationHandler | None) -> Reply:
        """Resume a cut legacy stream (``GET`` + ``Last-Event-ID``) until its reply comes."""
        for _ in range(MAX_RESUMES):
            if cursor.last_id is None or self.session_id is None:
                break
            delay = RESUME_DELAY if cursor.retry_ms is None else min(cursor.retry_ms / 1000, MAX_RETRY_SECONDS)
            await anyio.sleep(delay)
            headers = wire.merged(self._legacy_headers(), {h.ACCEPT: h.SSE_MEDIA_TYPE, h.LAST_EVENT_ID: cursor.last_id})
            try:
                async with self._http.stream("GET", self.url, headers=headers) as resp:
                    if (
                        resp.status_code != 200
                        or h.media_type(resp.headers.get(h.CONTENT_TYPE, "")) != h.SSE_MEDIA_TYPE
                    ):
                        body = (await resp.aread())[:SHOWN_BODY_CHARS].decode("utf-8", "replace")
                        raise ConnectionFailed(
                            f"{self.url} refused to resume the event stream of {method} "
                            f"(HTTP {resp.status_code}): {' '.join(body.split())}"
                        )
                    reply = await self._read_stream(resp, on_notification, cursor)
            except httpx.HTTPError:
                continue  # cut again: resume again from the last id
            if reply is not None:
                return reply
        raise ConnectionFailed(f"{self.url} ended the event stream before answering {method}")

    async def _read_stream(
        self, resp: httpx.Response, on_notification: NotificationHandler | None, cursor: wire.Cursor | None = None
    ) -> Reply | None:
        async for event_id, retry_ms, data in sse_events(resp.aiter_lines()):
            if cursor is not None:
                cursor.last_id = event_id if event_id is not None else cursor.last_id
                cursor.retry_ms = retry_ms if retry_ms is not None else cursor.retry_ms
            if not data.strip():
                continue  # a priming event, or a retry hint: an id, no message
            try:
                message = jsonrpc.parse_message(jsonrpc.decode(data))
            except (jsonrpc.ParseError, jsonrpc.InvalidMessage) as exc:
                raise ConnectionFailed(f"{self.url} sent an event that is not a JSON-RPC message: {exc}") from exc
            if isinstance(message, (Result, ErrorReply)):
                return message  # the final response; leaving closes the stream
            if isinstance(message, Notification):
                if on_notification is not None:
                    on_notification(message)
            elif self.info is not None and self.info.era is Era.LEGACY:
                await self._answer_server_request(message)
            # A modern server must not send requests (MRTR replaced them): ignored.
        return None

    async def _answer_server_request(self, request: Request) -> None:
        """``ping`` is answered here; the rest by ``on_request`` (with none: "method not found")."""
        if request.method == "ping":
            reply: Reply = Result(request.id, {})
        elif self._on_request is not None:
            reply = await self._on_request(request)
        else:
            error = jsonrpc.error_object(jsonrpc.METHOD_NOT_FOUND, f"this client does not handle {request.method}")
            reply = ErrorReply(request.id, error)
        # On failure the server gets no answer, as if we had gone; the call's stream decides what follows.
        with suppress(httpx.HTTPError):
            await self._http.post(self.url, content=jsonrpc.encode(reply), headers=self._legacy_headers())

    def _not_mcp(self, answer: wire.ServerReply, method: str) -> str:
        body = " ".join(answer.text.split())
        shown = f": {body}" if body else ""
        return f"{self.url} did not answer {method} as an MCP server (HTTP {answer.status}){shown}"


@asynccontextmanager
async def open_connection(
    url: str,
    mode: Mode,
    extra_headers: Mapping[str, str] | None = None,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    verify: ssl.SSLContext | bool = True,
    capabilities: JsonObject | None = None,
    on_request: ServerRequestHandler | None = None,
    connect_timeout: float = CONNECT_TIMEOUT,
) -> AsyncIterator[McpConnection]:
    """Open (detect the era, start a legacy session) and always close. ``verify``: the TLS
    trust (``--cacert``), as httpx takes it; ``connect_timeout``: seconds to keep trying to
    connect before the first answer (``--connect-timeout``)."""
    timeout = httpx.Timeout(None, connect=CONNECT_TIMEOUT)
    async with httpx.AsyncClient(timeout=timeout, transport=transport, verify=verify) as http:
        connection = McpConnection(
            http, url, extra_headers, capabilities=capabilities, on_request=on_request, connect_timeout=connect_timeout
        )
        try:
            await connection.open(mode)
            yield connection
        finally:
            await connection.close()
