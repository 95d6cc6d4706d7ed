"""An emulated listen follows its client's calls to the children of its roots pools.

On a server that keeps roots, a modern call of a client that declares roots runs on a child
of a *roots pool*, given exactly that client's roots set (``gateway.relay.router``), while
its ``subscriptions/listen`` runs on the usual pool (a listen carries no roots and is no MRTR
request: there is no round to ask them in). A legacy server sends ``resources/updated`` only
for what its own process was subscribed to, so the update its client's own call causes
would come from a child where the listen holds no subscription. The rules:

1. **Who a listen is.** A listen that declares ``roots`` in its ``_meta`` clientCapabilities
   (as that client's calls do) is its *client key* (``http.limits.client_key``: the
   principal, or ``anonymous@ADDRESS``) and the *family* of its pools (the usual pool's key:
   isolation scope, credential fingerprint, era share, capabilities told; a roots pool's key
   is that plus a roots set). A listen that declares no roots follows nothing: its client's
   calls run on the usual pool, where it subscribes anyway.
2. **Where it follows.** Each modern call with roots of the same client key and family, on
   a child of a roots pool (``RootsFollowing.on_call``, before the call is sent, so the child
   holds the subscription before the change), makes each such open listen subscribe the
   URIs its own child accepted at that child too (``SubscriptionCounts``, shared with every
   listen: once per child and URI). A listen opened *after* such calls follows the children
   they ran on (remembered, ``MAX_CLIENTS_REMEMBERED``). A roots pool opened after the
   listen started is followed at its first call.
3. **What it gets from there.** Only ``resources/updated`` for its subscribed URIs, from the
   pools it follows (``Following.follows``), tagged with its own ``subscriptionId``; never a
   ``list_changed`` of a roots pool (its lists come from the usual pool). Its client is the
   one that presented that roots set, so it learns nothing a client without that set may
   not: another client's listen follows only its own client's pools. Clients sharing a
   client key (anonymous clients behind one address) are one client here, as for limits
   and cancels.
4. **Bounds.** At most ``MAX_FOLLOWED_CHILDREN`` children per listen; past it a further child
   is not followed (logged). A followed child that exits is forgotten (its subscriptions died
   with it; the listen goes on: its own child and lists are intact), and the client's next
   call there subscribes again on the new child.
5. **Release.** When the listen ends, every URI it holds at every followed child is released
   (``resources/unsubscribe`` when no listen holds it there any more); a subscription that
   completes after the listen ended is released at once.

Imports the subscription counts' type only (``gateway.relay.listens`` imports this module).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from gateway.relay.poolkey import PoolKey
from gateway.stdio.child import StdioChild
from gateway.stdio.pool import Pool

if TYPE_CHECKING:
    from gateway.relay.listens import SubscriptionCounts

log = logging.getLogger("gateway.relay.listens")

MAX_FOLLOWED_CHILDREN: Final = 16
"""Children of roots pools one listen holds subscriptions at. Its client's calls run on one
roots pool per roots set it uses (at most ``MAX_ROOTS_SETS``, 16, per server), usually on one
child each; a listen holding subscriptions at more would keep that many children's counts for
one client."""
MAX_CLIENTS_REMEMBERED: Final = 256
"""Client keys (with their pools' family) whose roots children are remembered, so that a
listen opened after its client's calls follows them; the least recently calling is forgotten
past it (its next call is followed again). Each remembers at most ``MAX_FOLLOWED_CHILDREN``."""

ClientKey = tuple[str, PoolKey]
"""A listen's or a call's client key (``http.limits.client_key``) and its pools' family (the
usual pool's key, without roots)."""


@dataclass(eq=False)
class Followed:
    """A child of a roots pool that a listen follows: the URIs it holds there."""

    pool: Pool
    uris: list[str] = field(default_factory=list)


@dataclass(eq=False)
class Following:
    """What one listen follows beyond its own pool (``Listen.following``)."""

    client: ClientKey
    uris: list[str] = field(default_factory=list)  # the listen's subscribed URIs (set at ``start``)
    children: dict[StdioChild, Followed] = field(default_factory=dict)
    ended: bool = False

    def follows(self, pool: Pool) -> bool:
        return any(followed.pool is pool for followed in self.children.values())


class RootsFollowing:
    """The listens that follow their clients' roots children, and those children (the module doc)."""

    def __init__(self, counts: SubscriptionCounts) -> None:
        self.counts = counts
        self._listening: dict[ClientKey, set[Following]] = {}
        self._remembered: OrderedDict[ClientKey, dict[StdioChild, Pool]] = OrderedDict()

    async def start(self, following: Following, uris: list[str]) -> None:
        """The listen subscribed ``uris`` on its own child: follow its client's roots children
        from now on, starting with those its calls ran on already."""
        following.uris = list(uris)
        if not uris:
            return
        self._listening.setdefault(following.client, set()).add(following)
        for child, pool in list(self._children_of(following.client).items()):
            await self._follow(following, pool, child)

    async def on_call(self, client: ClientKey, pool: Pool, child: StdioChild) -> None:
        """A call of ``client`` runs on ``child`` of the roots pool ``pool`` (before it is sent)."""
        children = self._children_of(client)
        children.pop(child, None)
        children[child] = pool
        while len(children) > MAX_FOLLOWED_CHILDREN:
            del children[next(iter(children))]
        self._remembered[client] = children
        self._remembered.move_to_end(client)
        while len(self._remembered) > MAX_CLIENTS_REMEMBERED:
            self._remembered.popitem(last=False)
        for following in list(self._listening.get(client, ())):
            await self._follow(following, pool, child)

    def _children_of(self, client: ClientKey) -> dict[StdioChild, Pool]:
        children = self._remembered.get(client, {})
        for child in [child for child in children if not child.is_alive()]:
            del children[child]
        return children

    async def _follow(self, following: Following, pool: Pool, child: StdioChild) -> None:
        if following.ended or child in following.children or not child.is_alive():
            return
        self._forget_dead(following)
        if len(following.children) >= MAX_FOLLOWED_CHILDREN:
            log.info(
                "a listen of %s follows %d children already (MAX_FOLLOWED_CHILDREN): not %s",
                following.client[0],
                MAX_FOLLOWED_CHILDREN,
                child.spec.label,
            )
            return
        followed = following.children[child] = Followed(pool)  # first: a concurrent call waits on none
        for uri in following.uris:
            if await self.counts.acquire(child, uri):
                if following.ended:  # the listen ended meanwhile: its release has run
                    await self.counts.release(child, uri)
                else:
                    followed.uris.append(uri)

    def _forget_dead(self, following: Following) -> None:
        """Children that exited hold no subscription any more: their counts go, nothing is sent."""
        for child in [child for child in following.children if not child.is_alive()]:
            for uri in following.children.pop(child).uris:
                self.counts.forget(child, uri)

    def on_pool_loss(self, pool: Pool) -> None:
        """A child of ``pool`` crashed, or the pool closed: forget the followed children that exited."""
        for listening in self._listening.values():
            for following in listening:
                if following.follows(pool):
                    self._forget_dead(following)

    async def end(self, following: Following) -> None:
        """The listen ended: release what it holds at every child it follows (call shielded)."""
        following.ended = True
        listening = self._listening.get(following.client)
        if listening is not None:
            listening.discard(following)
            if not listening:
                del self._listening[following.client]
        for child, followed in list(following.children.items()):
            for uri in followed.uris:
                await self.counts.release(child, uri)
        following.children.clear()
