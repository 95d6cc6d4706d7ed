"""A client's roots, learned before its call is given a child (issue #23).

A shared legacy child is never asked to fetch a client's roots from that client: children are
keyed by the roots set they are given (``gateway.relay.router``), and the gateway answers their
``roots/list`` with that set. So before a ``tools/call``, ``prompts/get`` or ``resources/read``
of a client that declares roots (when ``Router.keys_roots``), the gateway needs the client's
set:

- **modern** (2026-07-28): a request's roots are the request's own, and a modern request
  cannot be asked anything once it runs. So the gateway answers the call first with its own
  ``InputRequiredResult`` (``inputRequests`` ``{"roots": roots/list}``, a ``requestState`` of
  the gateway's, ``Suspensions.mint_round``), before any child is chosen; the retry carries the
  roots under ``inputResponses.roots`` and that ``requestState`` (``from_retry``). One round
  trip more per such call; nothing is cached between requests (a modern request's roots are
  per request, and a cache could only be exact by asking again).
- **legacy** (a session): its roots are what it last answered to ``roots/list``. The first call
  that needs them (and the first after the session's ``notifications/roots/list_changed``)
  asks the session itself on the call's stream (``ask_session``), as a child would; the
  session's answer is kept on the session. A session that cannot be asked (a batch), does not
  answer within the input timeout or answers with an error gets no roots pool: its call runs on
  children given the configured roots (or none), never another client's.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator
from typing import Final

import anyio

from gateway.errors import CODE_INPUT_TIMEOUT
from gateway.protocol import inputs, roots
from gateway.protocol.jsonrpc import INVALID_PARAMS, JsonObject, Request, Result
from gateway.protocol.outcome import Rejection, reject
from gateway.protocol.roots import ROOTS_INPUT_KEY, Roots
from gateway.relay.client import ClientContext
from gateway.relay.suspensions import Suspensions
from gateway.stdio.ask import ChildAsk

log = logging.getLogger("gateway.relay.roots")

ROUND_PARAMS: Final = ("inputResponses", "requestState")
"""What the retry of the gateway's own round carries for the gateway only: never sent on."""


def round_result(request: Request, client: ClientContext, suspensions: Suspensions, timeout: float) -> JsonObject:
    """The gateway's own ``InputRequiredResult`` asking a modern client for its roots."""
    token = suspensions.mint_round(request, client.principal, timeout)
    wanted = {ROOTS_INPUT_KEY: roots.roots_request()}
    return inputs.input_required_result(wanted, token)


def from_retry(request: Request) -> Roots | Rejection | None:
    """The roots a retry of the gateway's round gives (None: not answered, ask again)."""
    given = (request.params or {}).get("inputResponses")
    answer = given.get(ROOTS_INPUT_KEY) if isinstance(given, dict) else None
    if answer is None:
        return None
    found = roots.roots_of_answer(answer)
    if isinstance(found, str):
        return reject(400, INVALID_PARAMS, f"inputResponses.{ROOTS_INPUT_KEY}: {found}", id=request.id)
    return found


def without_round(request: Request) -> Request:
    """``request`` as its child gets it: without the round's ``inputResponses`` and ``requestState``."""
    params = {k: v for k, v in (request.params or {}).items() if k not in ROUND_PARAMS}
    return Request(request.id, request.method, params)


async def ask_session(client: ClientContext, timeout: float) -> AsyncGenerator[JsonObject, None]:
    """Ask a legacy session for its roots on this call's stream (the iterator yields the
    request for the client); afterwards ``client.session.roots`` holds the answer, or stays
    None when none usable came within ``timeout``."""
    session = client.session
    assert session is not None
    ask = ChildAsk(Request("roots", inputs.ROOTS, None))  # the gateway's own question: no child waits
    yield Request(session.track_ask(ask), ask.method, ask.params).to_dict()
    with anyio.move_on_after(timeout):
        await ask.wait()
    ask.answer_error(CODE_INPUT_TIMEOUT, f"the client did not answer roots/list within {timeout:g} s")
    reply = ask.reply
    found = roots.roots_of_answer(reply.result) if isinstance(reply, Result) else "the client answered an error"
    if isinstance(found, str):
        log.info("legacy session %s…: no roots learned (%s): its call runs without them", session.id[:8], found)
        return
    session.roots = found


def needs_asking(client: ClientContext) -> bool:
    """Whether a legacy session's roots must be asked for before its call (see the module doc)."""
    return client.session is not None and client.session.roots is None and client.accepts_requests
