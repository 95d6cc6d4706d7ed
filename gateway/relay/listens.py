"""Emulated ``subscriptions/listen`` for modern clients in front of a legacy child.

A legacy child has no listen; it sends ``list_changed`` unsolicited to whoever holds its
stdio. ``open_listen`` leases a child of the client's pool to learn which era serves it:
a modern child's own listen is forwarded like any request, a legacy child's is emulated
here. ``Listens`` keeps the open listens; ``Unsolicited.on_notification``
(``gateway.relay.unsolicited``) offers every unsolicited notification of a pool to the
listens of that pool, and each takes only the types it was granted, tagged with its own
``subscriptionId`` (``gateway.protocol.subscriptions``).

``resourceSubscriptions`` (when the child advertises ``resources.subscribe``): before the
acknowledgement, ``resources/subscribe`` goes to the child that answered the listen for
each URI that no other listener on that child holds (``SubscriptionCounts``); the
acknowledgement lists the URIs the child accepted. When the stream ends, each URI is
released, and ``resources/unsubscribe`` goes to the child when none holds it any more.

A listen is dropped (its stream ends *without* the graceful result, so the client
reconnects and lists again) when a child of the pool crashes or the pool closes
(``Listens.on_pool_loss``), or when the child holding its resource subscriptions exits for
any reason (``Listen.watch_child``): the restarted child's lists may differ, and it would
not say so; its subscriptions are gone. The HTTP stream is ``gateway.http.listen``.

On a server that keeps roots, a listen that declares roots also follows its client's calls to
the children of its roots pools, and takes their ``resources/updated`` for its URIs
(``gateway.relay.listen_roots``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Final

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from gateway.errors import ChildError
from gateway.protocol import inputs, subscriptions
from gateway.protocol.ingress import CLIENT_CAPABILITIES_KEY
from gateway.protocol.jsonrpc import INVALID_PARAMS, JsonId, JsonObject, Notification, Request, Result, error_object
from gateway.protocol.outcome import Rejection
from gateway.protocol.versions import Era
from gateway.relay.client import ClientContext
from gateway.relay.listen_roots import ClientKey, Following, RootsFollowing
from gateway.relay.router import ANONYMOUS, Router
from gateway.stdio.child import StdioChild
from gateway.stdio.pool import Pool

log = logging.getLogger("gateway.relay.listens")

LISTEN_BUFFER: Final = 64
"""Notifications queued for a slow listener; past that, more are dropped (a ``list_changed``
already queued makes the client list again anyway)."""


@dataclass(eq=False)
class Listen:
    id: JsonId
    pool: Pool
    granted: JsonObject
    child: StdioChild | None = None  # where resource subscriptions are made
    wanted_uris: list[str] = field(default_factory=list)  # requested, to subscribe at the child
    uris: list[str] = field(default_factory=list)  # subscribed: resources/updated for these comes
    following: Following | None = None  # its client's roots children, when it declares roots
    methods: frozenset[str] = field(init=False)
    _send: MemoryObjectSendStream[JsonObject] = field(init=False)
    receive: MemoryObjectReceiveStream[JsonObject] = field(init=False)

    def __post_init__(self) -> None:
        self.methods = subscriptions.wanted_methods(self.granted)
        self._send, self.receive = anyio.create_memory_object_stream[JsonObject](LISTEN_BUFFER)

    def offer(self, notification: Notification) -> None:
        if notification.method == subscriptions.RESOURCES_UPDATED:
            if not subscriptions.covers(self.uris, (notification.params or {}).get("uri")):
                return
        elif notification.method not in self.methods:
            return
        try:
            self._send.send_nowait(subscriptions.tagged(notification.method, notification.params, self.id))
        except anyio.WouldBlock:
            log.debug("listen %r: slow reader, dropped %s", self.id, notification.method)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass

    def drop(self) -> None:
        """End the stream without the graceful result (the client should reconnect)."""
        self._send.close()

    @property
    def holds_subscriptions(self) -> bool:
        """Whether the child took any of its resource subscriptions (``Listens.subscribe``)."""
        return self.child is not None and bool(self.uris)

    async def watch_child(self) -> None:
        """Drop the listen when the child holding its resource subscriptions exits: they die
        with it (even a planned retirement). Returns at once when it holds none."""
        if self.child is None or not self.uris:
            return
        await self.child.wait_exited()
        self.drop()


async def open_listen(
    router: Router, request: Request, principal: str | None, headers: Mapping[str, str], owner: str | None = None
) -> Listen | Rejection | None:
    """The emulated listen for ``request`` when a legacy child serves the client; None when a
    modern child does (forward it: the relay rewrites ``subscriptionId`` both ways); a
    ``Rejection`` (400) without ``params.notifications`` or with more than
    ``subscriptions.MAX_LISTEN_URIS``
    resource URIs, before any child is asked. ``GatewayError`` when no child can be had."""
    problem = subscriptions.listen_problem(request.params)
    if problem is not None:
        return Rejection(400, error_object(INVALID_PARAMS, problem), request.id)
    # The pool whose children its client's calls run on (told the same capabilities): their
    # list_changed is what this listener's lists are made of.
    meta = (request.params or {}).get("_meta")
    declared = meta.get(CLIENT_CAPABILITIES_KEY) if isinstance(meta, dict) else None
    capabilities = declared if isinstance(declared, dict) else {}
    pool = await router.pool_for(principal, None, headers, capabilities=capabilities)
    async with pool.lease(principal=owner or principal or ANONYMOUS) as child:  # which era serves it, what it can do
        info = child.info
    assert info is not None
    if info.era is Era.MODERN:
        return None
    following = None
    if inputs.ROOTS_CAPABILITY in capabilities:  # its calls may run on roots pools: it follows them
        family = router.key_for(principal, None, headers, capabilities=capabilities)
        following = Following((owner or principal or ANONYMOUS, family))
    requested = (request.params or {})["notifications"]  # a dict (listen_problem)
    return Listen(
        request.id,
        pool,
        subscriptions.honoured(requested, info.capabilities),
        child,
        subscriptions.requested_uris(requested, info.capabilities),
        following=following,
    )


SUBSCRIBE_TIMEOUT: Final = 10.0
"""Seconds a child has to answer ``resources/subscribe`` or ``unsubscribe``; a child that does
not is taken as refusing (the listen is acknowledged without that URI)."""


class SubscriptionCounts:
    """``resources/subscribe`` at a child once per URI, however many hold it (listens, the
    roots children they follow, legacy sessions: ``gateway.relay.session_subscriptions``);
    ``resources/unsubscribe`` when the last lets go.

    No lock is held across the child's answer: the count is decided synchronously, and the
    one request in flight per (child, URI) is single-flight (``_busy``): a holder of the same
    URI on the same child waits for it and then counts on its outcome; every other child and
    URI goes on meanwhile, so one stuck child delays only its own subscriptions, for at most
    ``SUBSCRIBE_TIMEOUT``."""

    def __init__(self) -> None:
        self._counts: dict[tuple[StdioChild, str], int] = {}
        self._busy: dict[tuple[StdioChild, str], anyio.Event] = {}  # a (un)subscribe in flight at the child

    async def _settled(self, key: tuple[StdioChild, str]) -> None:
        while (busy := self._busy.get(key)) is not None:
            await busy.wait()

    async def acquire(self, child: StdioChild, uri: str) -> bool:
        """True if the child is subscribed to ``uri`` for this holder (it refused, or died: False)."""
        return await self.subscribe(child, uri) is None

    async def subscribe(self, child: StdioChild, uri: str) -> JsonObject | None:
        """Hold ``uri`` at ``child``: None when it is subscribed for this holder, else the error
        object that says why not (the child's own refusal, or the gateway's when it died)."""
        key = (child, uri)
        await self._settled(key)
        if self._counts.get(key, 0) > 0:
            self._counts[key] += 1
            return None
        done = self._busy[key] = anyio.Event()
        try:
            try:
                reply = await child.request(subscriptions.SUBSCRIBE, {"uri": uri}, timeout=SUBSCRIBE_TIMEOUT)
            except ChildError as exc:
                return exc.error_object()
            if not isinstance(reply, Result):
                log.info("child %s refused resources/subscribe for %r: %s", child.spec.label, uri, reply.to_dict())
                return reply.error
            self._counts[key] = 1
            return None
        finally:
            del self._busy[key]
            done.set()

    async def release(self, child: StdioChild, uri: str) -> None:
        key = (child, uri)
        await self._settled(key)
        count = self._counts.get(key, 0) - 1
        if count > 0:
            self._counts[key] = count
            return
        self._counts.pop(key, None)
        if not child.is_alive():
            return
        done = self._busy[key] = anyio.Event()  # a new holder subscribes after this, not before
        try:
            with suppress(ChildError):
                await child.request(subscriptions.UNSUBSCRIBE, {"uri": uri}, timeout=SUBSCRIBE_TIMEOUT)
        finally:
            del self._busy[key]
            done.set()

    def __len__(self) -> int:
        """How many (child, URI) subscriptions are held now."""
        return len(self._counts)

    def forget(self, child: StdioChild, uri: str) -> None:
        """A holder of ``uri`` at a child that exited lets go: nothing to tell the child."""
        key = (child, uri)
        count = self._counts.get(key, 0) - 1
        if count > 0:
            self._counts[key] = count
        else:
            self._counts.pop(key, None)


class Listens:
    def __init__(self) -> None:
        self.open: set[Listen] = set()
        self.counts = SubscriptionCounts()
        self.roots = RootsFollowing(self.counts)

    def offer(self, pool: Pool, notification: Notification) -> None:
        updated = notification.method == subscriptions.RESOURCES_UPDATED
        for listen in list(self.open):
            if listen.pool is pool:
                listen.offer(notification)
            elif updated and listen.following is not None and listen.following.follows(pool):
                listen.offer(notification)  # from a child its client's calls run on

    async def follow_call(
        self, router: Router, client: ClientContext, headers: Mapping[str, str], pool: Pool, child: StdioChild
    ) -> None:
        """A modern call with roots runs on ``child`` of ``pool`` (before it is sent): when that
        is a roots pool, its client's listens follow it there (``gateway.relay.listen_roots``)."""
        family = router.key_for(client.principal, None, headers, capabilities=client.capabilities)
        if router.pools.get(family) is pool:
            return  # the usual pool: its listens are there already
        who: ClientKey = (client.charged, family)
        await self.roots.on_call(who, pool, child)

    def on_pool_loss(self, pool: Pool) -> None:
        self.roots.on_pool_loss(pool)
        for listen in list(self.open):
            if listen.pool is pool:
                log.info("listen %r ended: a child of its pool exited; the client should reconnect", listen.id)
                listen.drop()

    async def subscribe(self, listen: Listen) -> None:
        """Before the acknowledgement: subscribe at the child to each URI the listen wants; the
        acknowledgement grants those the child took."""
        if listen.child is None:
            return
        for uri in listen.wanted_uris:
            if await self.counts.acquire(listen.child, uri):
                listen.uris.append(uri)
        if listen.uris:
            listen.granted[subscriptions.RESOURCE_SUBSCRIPTIONS] = list(listen.uris)
        if listen.following is not None:
            await self.roots.start(listen.following, listen.uris)

    async def release(self, listen: Listen) -> None:
        """After the stream: let go of the listen's URIs, at its child and at every child it
        follows (shielded: the stream may be cancelled)."""
        with anyio.CancelScope(shield=True):
            if listen.following is not None:
                await self.roots.end(listen.following)
            if listen.child is None:
                return
            for uri in listen.uris:
                await self.counts.release(listen.child, uri)
