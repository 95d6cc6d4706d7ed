"""Correlation of requests and replies on one child: id and progress-token rewriting.

Rules (digest §7.3):

- Every request sent to a child gets a **gateway-minted id** from a per-child counter that
  is never reused, so many clients can share the child even when they all use id ``1``,
  and legacy children never see an id twice in their session.
- A ``progressToken`` in the request's ``_meta`` is replaced by a child-side token (the
  child id itself: unique among active requests by construction). Progress notifications
  carrying it are handed back to the request's owner with the client's token restored.
- A reply is delivered once, to the owner of its id; the entry is then gone, so a reply
  that arrives after a timeout or cancellation (``abandon``) is reported as ``Late`` and
  dropped by the caller. Progress for an id no longer pending is dropped likewise.
- A notification whose ``_meta`` carries ``io.modelcontextprotocol/subscriptionId`` belongs
  to the ``subscriptions/listen`` with that child id (the ack, tagged ``list_changed``):
  it goes to that listen's owner like progress (``ProgressFor``), still carrying the
  child-side id, which the owner rewrites to its client's listen id (§7.3); one for a
  listen no longer pending is ``Late``.
- A child may end a listen with ``notifications/cancelled`` naming the listen's id instead
  of the graceful result (the cancellation page says it MUST, the subscriptions page that it
  SHOULD answer; digest §8.1): that ends the listen as the graceful result would, and is
  handed to its owner as that result (``ReplyFor``). A cancellation naming anything else is
  unsolicited.
- Everything else the child says is classified for the caller: requests from the child
  (``ChildRequest``) and notifications that belong to no request (``Unsolicited``).

The owner is opaque (``Generic``): the stdio edge passes its exchange object.
Imports: standard library and ``gateway.protocol`` only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from gateway.protocol.jsonrpc import (
    PROGRESS,
    ErrorReply,
    JsonId,
    JsonObject,
    Message,
    Notification,
    Reply,
    Request,
    Result,
)
from gateway.protocol.subscriptions import LISTEN, SUBSCRIPTION_ID_KEY

OwnerT = TypeVar("OwnerT")

CANCELLED = "notifications/cancelled"


# The outcomes are values, made for every line and never changed after, but not frozen: a frozen
# dataclass's __init__ sets each field through object.__setattr__ (``gateway.protocol.jsonrpc``).
@dataclass(slots=True)
class Pending(Generic[OwnerT]):
    child_id: int
    method: str
    owner: OwnerT
    client_token: JsonId | None  # the progressToken the client chose, restored on the way out


@dataclass(slots=True)
class ReplyFor(Generic[OwnerT]):
    pending: Pending[OwnerT]
    reply: Reply


@dataclass(slots=True)
class ProgressFor(Generic[OwnerT]):
    pending: Pending[OwnerT]
    notification: Notification  # with the client's token restored


@dataclass(slots=True)
class Late:
    """A reply or progress for an id that is not (or no longer) pending: drop it."""

    message: Message


@dataclass(slots=True)
class ChildRequest:
    request: Request


@dataclass(slots=True)
class Unsolicited:
    notification: Notification


Routed = ReplyFor[OwnerT] | ProgressFor[OwnerT] | Late | ChildRequest | Unsolicited


class Correlator(Generic[OwnerT]):
    """The pending table of one child. Synchronous; the stdio edge calls it under no lock
    because anyio runs one task at a time and no method here awaits."""

    def __init__(self) -> None:
        self._next_id = 1
        self.pending: dict[int, Pending[OwnerT]] = {}  # by child id (read, never changed, outside)
        self.listens = 0  # of them, open ``subscriptions/listen`` (kept with every change of ``pending``)

    def __len__(self) -> int:
        return len(self.pending)

    def outgoing(self, method: str, params: JsonObject | None, owner: OwnerT) -> tuple[Request, Pending[OwnerT]]:
        """Mint a child id, rewrite the progress token, and record the request as pending."""
        params, pending = self.mint(method, params, owner)
        return Request(pending.child_id, method, params), pending

    def mint(self, method: str, params: JsonObject | None, owner: OwnerT) -> tuple[JsonObject | None, Pending[OwnerT]]:
        """``outgoing`` without the ``Request``: the params as the child is to see them (the
        session writes the line from them, sparing a record and a ``to_dict`` per request)."""
        child_id = self._next_id
        self._next_id += 1
        client_token: JsonId | None = None
        meta = params.get("_meta") if params is not None else None
        if params is not None and isinstance(meta, dict) and "progressToken" in meta:
            client_token = meta["progressToken"]
            params = {**params, "_meta": {**meta, "progressToken": child_id}}
        pending = Pending(child_id, method, owner, client_token)
        self.pending[child_id] = pending
        if method == LISTEN:
            self.listens += 1
        return params, pending

    def spare_id(self) -> int:
        """A child id for a request nobody waits on (its reply will be ``Late``)."""
        child_id = self._next_id
        self._next_id += 1
        return child_id

    def abandon(self, child_id: int) -> Pending[OwnerT] | None:
        """Forget a request (timed out or cancelled); its late reply will be ``Late``."""
        pending = self.pending.pop(child_id, None)
        if pending is not None and pending.method == LISTEN:
            self.listens -= 1
        return pending

    def drain(self) -> list[Pending[OwnerT]]:
        """Forget every pending request (the child is gone) and return them to be failed."""
        pending = list(self.pending.values())
        self.pending.clear()
        self.listens = 0
        return pending

    def sole(self) -> Pending[OwnerT] | None:
        """The pending request when exactly one is in flight, else None (attribution of the
        child's own requests is certain only then: stdio carries no field that ties them).
        Open listens do not count: they never ask nor log (§1.5)."""
        found: Pending[OwnerT] | None = None
        for pending in self.pending.values():
            if pending.method == LISTEN:
                continue
            if found is not None:
                return None
            found = pending
        return found

    def owners(self) -> list[OwnerT]:
        """The owners of every request in flight, in the order they were sent."""
        return [pending.owner for pending in self.pending.values()]

    def is_pending(self, child_id: Any) -> bool:
        return type(child_id) is int and child_id in self.pending

    def take_reply(self, reply: Reply) -> Pending[OwnerT] | None:
        """The pending request ``reply`` answers, taken out (``incoming``'s ``ReplyFor`` without
        the record, for the session's usual line); None: it is ``Late``."""
        pending = self.pending.pop(reply.id, None) if type(reply.id) is int else None
        if pending is not None and pending.method == LISTEN:
            self.listens -= 1
        return pending

    def incoming(self, message: Message) -> Routed[OwnerT]:
        if isinstance(message, (Result, ErrorReply)):
            pending = self.take_reply(message)
            if pending is None:
                return Late(message)
            return ReplyFor(pending, message)
        if isinstance(message, Request):
            return ChildRequest(message)
        if message.method == PROGRESS:
            return self._progress(message)
        if message.method == CANCELLED and (ended := self._ended_listen(message)) is not None:
            return ended
        meta = message.params.get("_meta") if message.params else None
        if isinstance(meta, dict) and SUBSCRIPTION_ID_KEY in meta:
            listen = self.pending.get(meta[SUBSCRIPTION_ID_KEY]) if type(meta[SUBSCRIPTION_ID_KEY]) is int else None
            if listen is None or listen.method != LISTEN:
                return Late(message)
            return ProgressFor(listen, message)
        return Unsolicited(message)

    def _ended_listen(self, note: Notification) -> ReplyFor[OwnerT] | None:
        """The child ended a listen with ``notifications/cancelled``: its graceful result."""
        child_id = note.params.get("requestId") if note.params else None
        pending = self.pending.get(child_id) if type(child_id) is int else None
        if pending is None or pending.method != LISTEN:
            return None
        del self.pending[pending.child_id]
        self.listens -= 1
        result = {"resultType": "complete", "_meta": {SUBSCRIPTION_ID_KEY: pending.child_id}}
        return ReplyFor(pending, Result(pending.child_id, result))

    def _progress(self, note: Notification) -> ProgressFor[OwnerT] | Late:
        token = note.params.get("progressToken") if note.params else None
        pending = self.pending.get(token) if type(token) is int else None
        if pending is None or pending.client_token is None or note.params is None:
            return Late(note)
        restored = Notification(note.method, {**note.params, "progressToken": pending.client_token})
        return ProgressFor(pending, restored)
