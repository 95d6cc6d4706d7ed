"""Owner routing: any replica answers any request (DESIGN "Scale-out: any replica, any request").

A legacy session and an MRTR call parked on a legacy child live in one process. With
``--advertise-url`` (and the replicas' shared ``--state-secret-file``), session ids, task ids
and ``requestState`` tokens name the instance that holds them, sealed so that only the
replicas can read it (``gateway.protocol.owner``), and:

- ``RouteToOwner`` (around each MCP endpoint, after authentication) looks at the
  ``Mcp-Session-Id`` header, or at a POST's ``requestState`` when the body carries one of
  ours. Owned here → the endpoint, as always. Owned elsewhere → the request is forwarded to
  the owner over HTTP: the body as read, the response streamed back as it comes (SSE
  included), and a client disconnect closes the forward, so the owner sees the disconnect
  and cancels at the child as it would for a direct client. A forged owner → 404 (session)
  or the endpoint's own refusal (token). An owner that cannot be reached within
  ``FORWARD_CONNECT_TIMEOUT``, or that restarted at the same address (another boot id) →
  404 for a session (the spec's signal to re-initialize), a 400 ``requestState: lost``
  error for a parked call. A connection that fails after it was made (a dying owner, a
  stale keep-alive) is settled by ``/healthz`` on a new connection: no answer → gone as
  above; an answer → 502, and the client retries. An owner that accepted the forward but
  has not begun its answer after ``FORWARD_ANSWER_CHECK`` seconds is asked the same (and
  again every as long): a live owner busy with a long call is waited for, one that stopped
  answering is gone as above. An unreachable owner is remembered for
  ``GONE_MEMORY_SECONDS``, so only the first request waits. A request that was itself
  forwarded is never forwarded again. Whatever body it reads, it reads as the endpoint
  does: within the endpoint's body timeout (408 after), up to ``--max-body-bytes`` (413).
- ``AcceptForwards`` (``gateway.http.forward_accept``; outermost but for the header limits)
  lets a forward in only when its ``x-mcp-gateway-forward`` signature verifies
  (``gateway.protocol.owner``: HMAC under the current key of the shared keyring, checked
  with every key of it, over method, path, principal,
  target owner, a nonce, the body's digest,
  every forwarded header and a timestamp within ``FORWARD_MAX_SKEW``). All of that is
  checked **before a byte of the body is read**, so a request that merely carries the
  header costs nothing (403); a nonce seen before is a replay (403); then the body is read
  (408 / 413 as above) and must match the signed digest (403). The owner acts on the
  signed headers only (the others are dropped). The principal the forward names is the
  request's principal, and the edge checks the entry instance already made (Origin,
  authentication, per-principal limits) are not repeated (``gateway.http.edge`` skips
  them). The client's credentials (``Authorization``, cookies) are never forwarded, unless
  the server maps that header to its children's environment (``envFromHeaders``); then the
  signature covers them too.

Nothing here runs without ``--advertise-url``: the single-instance path is unchanged.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Iterable
from typing import Any, Final

import anyio
import httpx
import orjson
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.errors import CODE_UNAVAILABLE, GatewayUnavailableError
from gateway.http.edge_settings import BODY_TIMEOUT
from gateway.http.forward_accept import header, read_whole_body, replay, target
from gateway.http.limits import client_key
from gateway.http.observe import note_request
from gateway.http.wire import error_response, gateway_error_response
from gateway.protocol import owner as owners
from gateway.protocol import requeststate, tasks
from gateway.protocol.headers import MCP_METHOD, MCP_NAME, MCP_SESSION_ID
from gateway.protocol.jsonrpc import INVALID_PARAMS, INVALID_REQUEST, error_object
from gateway.protocol.owner import Owner, OwnerError
from gateway.relay.owner import FORWARD_MAX_CONNECTIONS, OwnerRouting

log = logging.getLogger("gateway.forward")

FORWARD_POOL_RETRY_AFTER: Final = 1
"""Retry-After of the 503 when every forwarding connection (``FORWARD_MAX_CONNECTIONS``) is
busy, and of the 502 when an owner that was reached failed before answering."""
HOP_BY_HOP: Final = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
NOT_FORWARDED: Final = HOP_BY_HOP | {
    "host",
    "content-length",
    "expect",  # the body is read already: no 100 Continue between instances
    "authorization",  # the client's credentials stay at the edge that checked them
    "cookie",
    owners.FORWARD_HEADER,
    owners.PRINCIPAL_HEADER,
    owners.TARGET_HEADER,
    owners.SIGNED_HEADER,
    owners.CLIENT_HEADER,  # only the entry instance names the client (below), never the client itself
}
NOT_RETURNED: Final = HOP_BY_HOP | {"date", "server"}  # the entry instance's server writes its own
SESSION_HEADER: Final = MCP_SESSION_ID.encode("ascii")
MCP_METHOD_HEADER: Final = MCP_METHOD.encode("ascii")
MCP_NAME_HEADER: Final = MCP_NAME.encode("ascii")
TOKEN_MARK: Final = requeststate.PREFIX.encode("ascii")
HEALTH_PATH: Final = "/healthz"


class RouteToOwner:
    def __init__(
        self,
        app: ASGIApp,
        *,
        routing: OwnerRouting,
        env_headers: Iterable[str] = (),
        body_timeout: float = BODY_TIMEOUT,
    ) -> None:
        self.app = app
        self.routing = routing
        self.body_timeout = body_timeout
        # Headers the server maps to its children's environment travel even when they would
        # not (Authorization): the owner's children need them as much as ours would.
        self.not_forwarded = NOT_FORWARDED - {header.lower() for header in env_headers}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        session_id = header(scope, SESSION_HEADER)
        if session_id is not None:
            await self._session(session_id, scope, receive, send)
        elif scope["method"] == "POST":
            await self._maybe_parked(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def _session(self, session_id: str, scope: Scope, receive: Receive, send: Send) -> None:
        if not owners.is_owned_session_id(session_id):
            await self.app(scope, receive, send)  # not minted with owner routing: the endpoint's 404
            return
        try:
            owner = self.routing.session_owner(session_id)
        except OwnerError as exc:
            log.warning("refused a session id: %s", exc.message)
            await _session_gone(f"unknown session ({exc.message}): initialize a new one")(scope, receive, send)
            return
        if owner == self.routing.me:
            await self.app(scope, receive, send)
            return
        gone = _session_gone(
            "unknown or ended session: the replica that owns this session is unreachable; initialize a new one"
        )
        if scope.get("gateway.forwarded") or owner.same_address(self.routing.me):
            await gone(scope, receive, send)  # restarted here, or a loop: never forward twice
            return
        body = await read_whole_body(scope, receive, self.routing.max_body_bytes, self.body_timeout)
        if body is None:
            return  # the client left before its body was in
        if not isinstance(body, bytes):
            await body(scope, receive, send)  # 408 or 413, as the endpoint would answer
            return
        await self._forward(owner, body, scope, receive, send, gone)

    async def _maybe_parked(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await read_whole_body(scope, receive, self.routing.max_body_bytes, self.body_timeout)
        if body is None:
            return  # the client left before its body was in
        if not isinstance(body, bytes):
            await body(scope, receive, send)  # 408 or 413, as the endpoint would answer
            return
        owner, request_id = self._parked_owner(body) if TOKEN_MARK in body else (None, None)
        lost: ASGIApp | None = None
        if owner is None:
            owner = self._task_owner(scope)  # tasks/*: the task id is in Mcp-Name (ext-tasks §Routing Headers)
            if owner is not None:
                lost = _task_lost(_request_id(body))
        if owner is None or owner == self.routing.me:
            await self.app(scope, replay(body, receive), send)
            return
        lost = lost or _parked_lost(request_id)
        if scope.get("gateway.forwarded") or owner.same_address(self.routing.me):
            await lost(scope, receive, send)
            return
        await self._forward(owner, body, scope, receive, send, lost)

    def _task_owner(self, scope: Scope) -> Owner | None:
        """The owner a ``tasks/*`` request's task id names (None: not a task request, an id that
        names no owner, or one that fails verification — the endpoint answers those)."""
        if header(scope, MCP_METHOD_HEADER) not in tasks.METHODS:
            return None
        task_id = header(scope, MCP_NAME_HEADER)
        return tasks.check_owner(task_id, self.routing.task_keys()) if task_id else None

    def _parked_owner(self, body: bytes) -> tuple[Owner | None, Any]:
        """The owner a modern retry's verified ``requestState`` names (None: not ours, or no
        owner, or invalid — the endpoint answers those)."""
        try:
            message = orjson.loads(body)
        except orjson.JSONDecodeError:
            return None, None
        params = message.get("params") if isinstance(message, dict) else None
        token = params.get("requestState") if isinstance(params, dict) else None
        if not isinstance(token, str) or not requeststate.is_gateway_state(token):
            return None, None
        try:
            return self.routing.state_owner(token, now=time.time()), message.get("id")
        except (requeststate.StateError, OwnerError):
            return None, None

    async def _is_alive(self, owner: Owner) -> bool:
        """Whether ``owner``'s address answers ``/healthz`` on a new connection (signed as a
        forward, so no edge check of the owner's stands in the way)."""
        signature = owners.sign_forward(
            self.routing.forward_key(),
            now=int(time.time()),
            nonce=secrets.token_bytes(owners.NONCE_BYTES),
            method="GET",
            path=HEALTH_PATH,
            principal=None,
            owner=owner,
            digest=owners.body_digest(b""),
        )
        headers = {owners.FORWARD_HEADER: signature, owners.TARGET_HEADER: owner.key}
        try:
            async with httpx.AsyncClient(timeout=self.routing.connect_timeout, trust_env=False) as probe:
                reply = await probe.get(owner.url + HEALTH_PATH, headers=headers)
        except httpx.HTTPError:
            return False
        return reply.status_code == 200

    async def _forward(
        self, owner: Owner, body: bytes, scope: Scope, receive: Receive, send: Send, gone: ASGIApp
    ) -> None:
        fields = scope.setdefault("gateway.log", {})
        fields["forwarded_to"] = owner.url
        _note_forwarded(fields, body)  # the access line's MCP method (not the HTTP verb), id and name
        if self.routing.is_gone(owner, time.monotonic()):
            await gone(scope, receive, send)
            return
        path = target(scope)
        principal = scope.get("gateway.principal")
        principal = principal if isinstance(principal, str) else None
        forwarded = [
            (name, value.decode("latin-1"))
            for key, value in scope["headers"]
            if (name := key.decode("latin-1")) not in self.not_forwarded
        ]
        forwarded.append((owners.CLIENT_HEADER, client_key(scope)))  # signed with the rest
        signature = owners.sign_forward(
            self.routing.forward_key(),
            now=int(time.time()),
            nonce=secrets.token_bytes(owners.NONCE_BYTES),
            method=scope["method"],
            path=path,
            principal=principal,
            owner=owner,
            digest=owners.body_digest(body),
            headers=forwarded,
        )
        headers = [
            *forwarded,
            (owners.FORWARD_HEADER, signature),
            (owners.TARGET_HEADER, owner.key),
            (owners.SIGNED_HEADER, owners.signed_names(forwarded)),
        ]
        if principal is not None:
            headers.append((owners.PRINCIPAL_HEADER, owners.encode_principal(principal)))
        client = self.routing.client
        request = client.build_request(
            scope["method"],
            owner.url + path,
            headers=[(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers],
            content=body,
        )
        try:
            upstream = await self._answer_of(owner, request)
        except httpx.PoolTimeout:  # ours, not the owner's: the client may retry
            log.warning("every forwarding connection is busy (%d)", FORWARD_MAX_CONNECTIONS)
            busy = GatewayUnavailableError(
                "this gateway instance is busy forwarding; retry", retry_after=FORWARD_POOL_RETRY_AFTER
            )
            await gateway_error_response(busy)(scope, receive, send)
            return
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            log.warning("owner %s cannot be reached (%s)", owner.url, type(exc).__name__)
            self.routing.note_gone(owner, time.monotonic())
            await gone(scope, receive, send)
            return
        except httpx.HTTPError as exc:  # reached, then the connection failed: gone, or a hiccup?
            log.warning("forward to %s failed: %s", owner.url, exc)
            if not await self._is_alive(owner):
                self.routing.note_gone(owner, time.monotonic())
                await gone(scope, receive, send)
                return
            # It lives, so the session may too: the client retries rather than starting over.
            failed = error_object(CODE_UNAVAILABLE, "the replica that owns this request failed to answer; retry")
            await error_response(502, failed, retry_after=FORWARD_POOL_RETRY_AFTER)(scope, receive, send)
            return
        if upstream is None:  # accepted, then no answer, and its /healthz does not answer either
            log.warning("owner %s stopped answering", owner.url)
            self.routing.note_gone(owner, time.monotonic())
            await gone(scope, receive, send)
            return
        try:
            await _stream_back(upstream, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                await upstream.aclose()

    async def _answer_of(self, owner: Owner, request: httpx.Request) -> httpx.Response | None:
        """The owner's response (its head; the body streams after), or None when it has not
        begun one and no longer answers ``/healthz``: every ``answer_check`` seconds without a
        head, its liveness is asked on a new connection. The forward's own errors are raised."""
        outcome: list[httpx.Response | Exception] = []
        async with anyio.create_task_group() as tg:

            async def sending() -> None:
                try:
                    outcome.append(await self.routing.client.send(request, stream=True))
                except Exception as exc:  # raised again below, outside the task group
                    outcome.append(exc)
                tg.cancel_scope.cancel()

            tg.start_soon(sending)
            while await self._still_alive(owner):
                pass
            tg.cancel_scope.cancel()  # gone: the forward is abandoned
        if not outcome:
            return None
        if isinstance(outcome[0], Exception):
            raise outcome[0]
        return outcome[0]

    async def _still_alive(self, owner: Owner) -> bool:
        await anyio.sleep(self.routing.answer_check)  # a period between liveness checks, not an ordering wait
        return await self._is_alive(owner)


async def _stream_back(upstream: httpx.Response, receive: Receive, send: Send) -> None:
    """The owner's response to the client as it comes; a client disconnect ends the forward."""
    headers = [(k, v) for k, v in upstream.headers.raw if k.decode("latin-1").lower() not in NOT_RETURNED]
    await send({"type": "http.response.start", "status": upstream.status_code, "headers": headers})
    async with anyio.create_task_group() as tg:

        async def watch_client() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            tg.cancel_scope.cancel()  # closing the forward is the owner's disconnect: it cancels

        tg.start_soon(watch_client)
        try:
            async for chunk in upstream.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except httpx.HTTPError as exc:  # the owner died mid-response: the stream ends here
            log.warning("forwarded response ended early: %s", exc)
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        tg.cancel_scope.cancel()


def _session_gone(message: str) -> ASGIApp:
    # L-TR §Session Management: 404 tells the client to initialize a new session.
    return error_response(404, error_object(INVALID_REQUEST, message))


def _request_id(body: bytes) -> Any:
    try:
        message = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return message.get("id") if isinstance(message, dict) else None


def _task_lost(request_id: Any) -> ASGIApp:
    """A task whose owner is gone is a task not found (-32602), saying why."""
    message = (
        "the replica that owns this task is unreachable (stopped or restarted): the task is lost; call the tool again"
    )
    valid_id = request_id if type(request_id) in (int, str) else None
    return error_response(200, error_object(INVALID_PARAMS, message, {"task": "lost"}), valid_id)


def _parked_lost(request_id: Any) -> ASGIApp:
    message = (
        "the replica that owns this requestState's call is unreachable (stopped or restarted): the call is lost; "
        "send the request again without requestState"
    )
    valid_id = request_id if type(request_id) in (int, str) else None
    return error_response(400, error_object(INVALID_PARAMS, message, {"requestState": "lost"}), valid_id)


def _note_forwarded(fields: dict[str, Any], body: bytes) -> None:
    """A forwarded request's JSON-RPC method, and its id and name (``observe.note_request``),
    for the access line where it came in (nothing for a response, a batch, or not JSON)."""
    try:
        message = orjson.loads(body)
    except orjson.JSONDecodeError:
        message = None
    method = message.get("method") if isinstance(message, dict) else None
    fields.setdefault("method", method if isinstance(method, str) else None)
    if isinstance(message, dict) and isinstance(method, str) and "id" in message:
        note_request(fields, message["id"], message.get("params"))
