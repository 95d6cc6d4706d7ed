"""Which pool serves a request: isolation policies and per-request credentials.

A pool key is the isolation key plus a credential fingerprint:

| ``isolation`` | key                              | for |
|---------------|----------------------------------|-----|
| ``shared``    | none: one pool for every client  | stateless servers (the default) |
| ``principal`` | the authenticated principal      | servers holding a user's login or data |
| ``session``   | the legacy session (modern requests fall back to ``principal``) | stateful servers: browsers, REPLs |

With ``env_from_headers`` (request header → child environment variable, e.g. ``X-Api-Key`` →
``API_KEY``) the key also holds a SHA-256 fingerprint of the mapped values, so a child
never serves two different credentials; the values reach only that child's environment and
are never logged (logs name the fingerprint's first 12 hex digits).

**Era per client** (``dual_era``): a child that speaks both eras is handshaken once, and
serves every request in the era it was opened in. So that tools written the legacy way
(asking with ``sampling/createMessage``, ``elicitation/create`` mid-call) keep working for
legacy clients, ``per-client`` (the default) gives legacy clients children of their own,
opened with ``initialize`` (``INITIALIZE_FIRST``), and modern clients children opened with
``server/discover``: the pool key then carries ``era=legacy``. A server found to speak one era
only (its probed child is legacy, or its ``initialize``-first child refused ``initialize``) needs
no split, and from then on legacy clients share the usual pools (a legacy session moves with
them only off modern children, whose session state the gateway keeps: a probed legacy child
teaches nothing once legacy clients have legacy children of their own).
``modern`` keeps one pool for both (a dual child then speaks 2026-07-28 to every client, and
legacy clients are bridged). ``legacy`` opens every child
with ``initialize``: modern clients are then bridged (their questions become MRTR rounds), for
servers whose tools ask the legacy way and must ask modern clients too.

**Capabilities told** (``CapabilityKeying``). A legacy child is told client capabilities once,
at ``initialize``. By default (``shared``) every child is told the configured set, so one pool
serves every client; what stays exact is each question a child asks during a call, which goes
to that call's client and is checked against its declaration (``gateway.relay.asks``). With
``exact`` the children of a legacy server (and the legacy clients' share of a dual one) are
told what their client declared, within what the server is configured to declare
(``inputs.told_to_child``), and the pool key carries that set (``told``, e.g.
``elicitation,sampling``) unless it is the configured set itself. With ``isolation: session``
the session's own pool is told that session's set.

**Roots, where the server keeps them** (``RootsKeying``). A legacy child that fetches roots
outside any call keeps them (server-everything caches them; on server-filesystem they are its
access rights): the server is then learnt to keep roots (``_note_roots_fetch``; or configured),
and a ``tools/call``, ``prompts/get`` or ``resources/read`` of a client that declares roots runs
in a pool whose key holds exactly that client's roots set (``roots``, ``gateway.protocol.roots``;
``gateway.relay.client_roots`` learns the set first), unless the set is what the usual
children are given already (the configured roots, or an empty set). Every ``roots/list`` such a
shared child asks is answered by the gateway (``ChildSpec.answers_roots``) with its pool's
roots. A server that keeps none gets no roots keying and no round: its children's in-call
``roots/list`` goes to the call's client. At most ``MAX_ROOTS_SETS`` roots pools per server at
once; at the bound the least recently used unused one is dropped first, else 503. Under
``isolation: session`` a session that declares roots gets a roots pool of its own (scope
``session:ID``, one child, its set given): the child its session started with fetched roots
before the session could be asked and kept the configured ones. A session has one such pool
(its old set's goes once unused); they count against the sessions' bounds, not
``MAX_ROOTS_SETS``.

Pools other than the shared one are made on demand and dropped once they have been empty
(no child, no waiter) for a maintenance tick; their children stop after the pool's idle
timeout like any other. A session pool is stopped when its session ends.

All pools of a router share its ``CrashLedger`` (a principal whose requests keep crashing
this server's children gets 429, ``gateway.stdio.crashes``); all routers of the gateway
share one ``ChildBudget`` (the global child cap, ``gateway.stdio.budget``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import replace
from typing import Any, Final

import anyio
import orjson

from gateway.errors import ClientThrottledError, GatewayError, GatewayUnavailableError
from gateway.protocol import inputs
from gateway.protocol.jsonrpc import Reply, Request
from gateway.protocol.roots import Roots, roots_key
from gateway.protocol.versions import LEGACY, MODERN, Era
from gateway.relay.poolkey import (
    SESSION_PREFIX,
    SHARED_KEY,
    SHARED_LEGACY_KEY,
    PoolKey,
    credential_env,
    fingerprint,
)
from gateway.relay.pools import RunningPools
from gateway.relay.readiness import ServerReadiness, ServerState
from gateway.relay.server_config import CapabilityKeying, DualEra, Isolation, RootsKeying, ServerConfig
from gateway.stdio.backend import PROCESS_BACKEND, ChildBackend
from gateway.stdio.budget import ChildBudget
from gateway.stdio.child import StdioChild
from gateway.stdio.crashes import CrashLedger
from gateway.stdio.pool import (
    MAINTENANCE_TICK,
    LossListener,
    ParkedReleaser,
    Pool,
    PoolLease,
    PoolListener,
    PoolRequestHandler,
)
from gateway.stdio.spec import INITIALIZE_FIRST, PROBE_FIRST
from gateway.stdio.tally import PoolTally

log = logging.getLogger("gateway.relay.router")

MAX_TOLD_SETS: Final = 256
"""Distinct capability declarations whose told set a router remembers (clients choose what they
declare); past it the set is worked out for each request (a few tens of µs)."""
MAX_TOLD_MEMO_BYTES: Final = 16_384
"""The longest declaration (compact JSON) whose told set is remembered: a modern client's
``clientCapabilities`` come with each request, unchecked in size but for the body's bound, and
``MAX_TOLD_SETS`` of them are kept for the process's life. A longer one is worked out each time."""
MAX_ROOTS_SETS: Final = 16
"""Distinct client roots sets one server runs children for at once (a pool each, growing to
``--pool-max``, each child ~68 MiB for the npm servers): clients choose their roots, so a stream
of new sets must not start a child each without bound. At it, a call that needs a new set first
stops the children of the set used least recently that nothing uses now (no request, no waiter,
no open question); only when all 16 are in use does it get 503 + ``Retry-After``."""
MAX_ROOTS_SETS_PER_PRINCIPAL: Final = 4
"""Roots sets of ``MAX_ROOTS_SETS`` one client (its charge key: a principal, or an anonymous
client's address) may have calls running or waiting in when its call needs a set with no
children yet: past it that call gets 429 (-31008), so that one client holding many long calls
with a new set each cannot take every set and leave the others 503. A set already running is
joined whoever holds it."""
ANONYMOUS: Final = "anonymous"
"""The principal of requests that carry no identity (no token, no trusted identity header)."""
_SHARED, _SESSION = Isolation.SHARED, Isolation.SESSION  # read per request: module names (versions.MODERN)


class Router:
    def __init__(
        self,
        server: ServerConfig,
        *,
        gateway_version: str = "0",
        on_notification: PoolListener | None = None,
        children: ChildBudget | None = None,
        backend: ChildBackend = PROCESS_BACKEND,
    ) -> None:
        """``children``: the gateway's global child cap, shared by every router (None: no cap).
        ``backend``: how every pool of this server starts its children (real processes by default)."""
        if server.dual_era is DualEra.LEGACY:
            server = replace(server, spec=replace(server.spec, handshake=INITIALIZE_FIRST))
        self.server = server
        self.children = children
        self.crashes = CrashLedger()
        self.backend = backend
        self._pools = RunningPools(
            server.name,
            server.pool,
            gateway_version=gateway_version,
            budget=children,
            crashes=self.crashes,
            backend=backend,
        )
        self.pools = self._pools.by_key  # running (or opening) pools by key: read by status and metrics
        if on_notification is not None:
            self._pools.hooks.add_listener(on_notification)
        self._running: AbstractAsyncContextManager[None] | None = None
        self.single_era = server.dual_era is not DualEra.PER_CLIENT  # no legacy partition needed
        self._probed_era: Era | None = None  # the era of the server's first probed child, once one is up
        self._eras_looked_at = -1  # the pools' generation when _learn_eras last looked
        self._told_sets: dict[bytes, tuple[str, dict[str, object] | None]] = {}  # declaration → what is told
        # Whether this server keeps roots between calls (RootsKeying): None until learnt.
        self.roots_kept: bool | None = {RootsKeying.ALWAYS: True, RootsKeying.NEVER: False}.get(server.roots_keying)
        self._roots_fetched = anyio.Event()  # a child fetched roots outside any call
        self._pools.hooks.add_request_handler(self._note_roots_fetch)
        self._pools.answered_alike = self._answered_alike
        self._started_once = False  # a child of this server started or failed to start (is_first_start)
        self._roots_opening: dict[str, int] = {}  # roots pools being opened, by the charge key they are for

    def add_listener(self, listener: PoolListener) -> None:
        self._pools.hooks.add_listener(listener)

    def add_loss_listener(self, listener: LossListener) -> None:
        """``listener(pool)`` when a child of a pool crashes or the pool closes (``PoolHooks.add_loss_listener``)."""
        self._pools.hooks.add_loss_listener(listener)

    def add_request_handler(self, handler: PoolRequestHandler) -> None:
        """``handler(pool, request)`` for a child's unattributable requests (``PoolHooks.add_request_handler``)."""
        self._pools.hooks.add_request_handler(handler)

    def add_parked_releaser(self, releaser: ParkedReleaser) -> None:
        """``releaser(pool, principal)`` ends a parked call for a waiting asker (``PoolHooks.add_parked_releaser``)."""
        self._pools.hooks.add_parked_releaser(releaser)

    async def __aenter__(self) -> Router:
        """Run this server's pools (``RunningPools.running``: one task group, entered in its
        ``async with``); the shared pool pre-warms its children before traffic."""
        prewarm = self.server.isolation is Isolation.SHARED and not self.server.env_from_headers
        running = self._pools.running(self.server.spec if prewarm else None)
        await running.__aenter__()  # raises (nothing kept) when the shared pool cannot be opened
        self._running = running
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        running, self._running = self._running, None
        assert running is not None
        await running.__aexit__(*exc_info)

    def key_for(
        self,
        principal: str | None,
        session_id: str | None,
        headers: Mapping[str, str],
        era: Era = MODERN,
        capabilities: Mapping[str, object] | None = None,
        roots: Roots | None = None,
    ) -> PoolKey:
        """The pool for this client. ``capabilities`` (the client's: a session's, or a modern
        request's ``clientCapabilities``) are part of it when the pool's children are legacy
        (``told_for``): children told different capabilities never serve the same client;
        ``roots`` (the client's roots set, for a call ``keys_roots``) too: its children are
        given that set only."""
        return self._refine(self._scope_key(principal, session_id, headers), era, capabilities, roots)

    def _scope_key(self, principal: str | None, session_id: str | None, headers: Mapping[str, str]) -> PoolKey:
        """The isolation scope and credentials of ``key_for`` (no era, no capabilities)."""
        isolation, mapping = self.server.isolation, self.server.env_from_headers
        if isolation is _SHARED:
            if not mapping:
                return SHARED_KEY  # the usual key: no string or tuple made per request
            scope = "shared"
        elif isolation is _SESSION and session_id is not None:
            scope = SESSION_PREFIX + session_id
        else:  # principal, or a session's request without a session
            scope = f"principal:{principal or ANONYMOUS}"
        return PoolKey(scope, fingerprint(credential_env(mapping, headers)) if mapping else "")

    def _refine(
        self, key: PoolKey, era: Era, capabilities: Mapping[str, object] | None, roots: Roots | None = None
    ) -> PoolKey:
        """``key`` with the client's era share, the capabilities its children are told and
        the roots set they are given."""
        if era is LEGACY:
            self._learn_eras()
        if era is LEGACY and not self.single_era:
            key = SHARED_LEGACY_KEY if key is SHARED_KEY else PoolKey(key.scope, key.fingerprint, "legacy")
        if capabilities is None or not self._tells_capabilities(key):
            return key
        # A session's own pool is told its session's capabilities (``pool_for``), so its key
        # holds none; it is given its session's roots set as a shared pool is (``keys_roots``).
        own = key.scope.startswith(SESSION_PREFIX)
        if own and roots is None:
            return key
        told, told_set = self._told(capabilities) if self._exact or own else ("", None)
        given = roots_key(roots) if roots is not None and self._gives_roots(roots, told_set) else ""
        told = "" if own else told
        return key._replace(told=told, roots=given) if told or given else key

    @property
    def _exact(self) -> bool:
        """Whether children are told each client's own capability set (``CapabilityKeying``)."""
        return self.server.capability_keying is CapabilityKeying.EXACT

    def _gives_roots(self, roots: Roots, told: Mapping[str, object] | None) -> bool:
        """Whether a client with ``roots`` needs children given that set: they are told roots,
        and the set is not what the usual children are given already (the configured roots, or
        none for an empty set)."""
        configured = self.server.spec.roots
        if roots == (configured or ()):
            return False
        return self._tells_roots(told)

    def _tells_roots(self, told: Mapping[str, object] | None) -> bool:
        """Whether children told ``told`` (None: the configured set) are told roots."""
        return "roots" in (self.server.spec.declared_capabilities if told is None else told)

    def may_key_roots(self, capabilities: Mapping[str, object]) -> bool:
        """``keys_roots``'s first test, which needs no child: the client declared roots, and the
        server is not known to keep none."""
        return "roots" in capabilities and self.roots_kept is not False

    async def keys_roots(
        self,
        principal: str | None,
        session_id: str | None,
        headers: Mapping[str, str],
        era: Era,
        capabilities: Mapping[str, object],
    ) -> bool:
        """Whether a call of this client runs on children given its own roots set (so the
        caller must learn the set first, and pass it to ``pool_for``): its children are legacy
        and told roots, because the client declared them, and the server keeps roots between
        calls (``RootsKeying``; ``_keeps_roots``). A session's own pool too (``isolation:
        session``): the child it starts with fetches its roots before the session could be
        asked (no call, no GET stream yet) and kept the configured ones."""
        if not self.may_key_roots(capabilities):
            return False
        base = self._scope_key(principal, session_id, headers)
        main = self.pools.get(base)
        if main is not None:
            await main.wait_started()  # whether the server is legacy is known once a child is up
        key = self._refine(base, era, capabilities)
        if not self._tells_capabilities(key) and self._probed_era is None and not self._probes_nothing:
            # No child of this server is up to say its era (a pool made on demand: principal or
            # session isolation, mapped credentials): this call's own child is started first.
            told = capabilities if base.scope.startswith(SESSION_PREFIX) else None  # its pool is told them
            await self._start_first_child(principal, session_id, headers, era, told)
            key = self._refine(base, era, capabilities)
        if not self._tells_capabilities(key):
            return False
        own = key.scope.startswith(SESSION_PREFIX) or self._exact  # told the client's own set
        if not self._tells_roots(self._told(capabilities)[1] if own else None):
            return False
        return await self._keeps_roots(main)

    @property
    def _probes_nothing(self) -> bool:
        """Every child is opened with ``initialize``: no probe tells the server's era."""
        return self.server.spec.handshake == INITIALIZE_FIRST

    async def _start_first_child(
        self,
        principal: str | None,
        session_id: str | None,
        headers: Mapping[str, str],
        era: Era,
        capabilities: Mapping[str, object] | None,
    ) -> None:
        """A child of this client's usual pool up (started now if none is), so that the server's
        era is known: the call that waits here would start it anyway, and then leases it. A child
        that cannot start is left for that lease to report. ``capabilities``: a session's, told
        to its own pool's child should this open that pool."""
        try:
            pool = await self.pool_for(principal, session_id, headers, era=era, capabilities=capabilities)
            async with PoolLease(pool, None, principal or ANONYMOUS, None, None):
                pass
        except GatewayError:  # unavailable, throttled, failing to start: the call's own lease says so
            return

    async def _keeps_roots(self, main: Pool | None) -> bool:
        """Whether this server keeps roots: configured, learnt, or learnt now by waiting out what
        is left of ``--roots-learn-wait`` since its first child came up (once per server). With no
        child up to learn from, a client's roots set gets children of its own (the safe side)."""
        if self.roots_kept is not None:
            return self.roots_kept
        started = [member.started_at for member in main.members if member.is_live] if main is not None else []
        if not started:
            return True
        left = min(started) + self.server.roots_learn_wait - time.monotonic()
        if left > 0:
            with anyio.move_on_after(left):
                await self._roots_fetched.wait()
        if self.roots_kept is None:
            if main is not None and any(
                m.is_live and m.child is not None and m.child.asks_open(inputs.ROOTS) for m in main.members
            ):
                # A roots/list of a child is still open (held as ambiguous, or with a client): it
                # may be its start-up fetch, met by calls in flight. Undecided: keyed for now.
                # Any other open question (a client's abandoned elicitation) says nothing of roots.
                return True
            self.roots_kept = False
            log.info(
                "%s: its children fetch no roots outside a call (they keep none): every client shares them, "
                "and a roots/list asked during a call goes to that call's client",
                self.server.name,
            )
        return self.roots_kept

    async def _note_roots_fetch(self, pool: Pool, request: Request) -> Reply | None:
        """A child's ``roots/list`` outside any call: the server keeps roots (``auto``). A
        shared child's, or a session's own child's (which goes to its session, or is answered)."""
        if request.method == inputs.ROOTS and (pool.spec.answers_roots or pool.session_id is not None):
            self._learn_keeps_roots("outside a call")
        return None

    @property
    def pool_gives_roots(self) -> bool:
        """A shared child's ``roots/list`` gets its pool's roots whoever asked, unless the server
        is known to keep no roots (then a call's own client is asked, when it declared roots)."""
        return self.roots_kept is not False

    def _answered_alike(self, method: str) -> bool:
        return method == inputs.ROOTS and self.pool_gives_roots

    def note_roots_question(self, child: StdioChild) -> None:
        """A shared child asked ``roots/list`` during a call. Within ``--roots-learn-wait`` of its
        start that may be its start-up fetch, attributed to a call that happened to be in flight
        (a client without roots calling at once): it is taken as keeping roots, the safe side (a
        server that reads roots in its first calls only is keyed needlessly, never shared wrongly)."""
        if not child.spec.answers_roots or self.roots_kept is not None:
            return
        now, window = time.monotonic(), self.server.roots_learn_wait
        for pool in self.pools.values():
            for member in pool.members:
                if member.child is child and now - member.started_at < window:
                    self._learn_keeps_roots("right after it started, while a call was in flight")
                    return

    def _learn_keeps_roots(self, when: str) -> None:
        if self.server.roots_keying is not RootsKeying.AUTO or self.roots_kept:
            return
        self.roots_kept = True
        self._roots_fetched.set()
        log.info(
            "%s: its children fetch roots %s (they keep them): each client roots set gets children of its own",
            self.server.name,
            when,
        )

    def told_for(self, capabilities: Mapping[str, object]) -> dict[str, object] | None:
        """What a legacy child serving a client of ``capabilities`` is told at ``initialize``
        (``inputs.told_to_child`` within what the server is configured to declare, configured
        roots always); None when that is the configured set itself (the usual pools)."""
        return self._told(capabilities)[1]

    def _told(self, capabilities: Mapping[str, object]) -> tuple[str, dict[str, object] | None]:
        """``told_for`` and its ``capability_key`` ("" for the configured set), remembered per
        distinct declaration (at most ``MAX_TOLD_SETS``, each at most ``MAX_TOLD_MEMO_BYTES``:
        declarations come from clients)."""
        try:
            memo = orjson.dumps(capabilities, option=orjson.OPT_SORT_KEYS)
        except TypeError:  # not JSON (never from the wire): not remembered
            memo = None
        known = self._told_sets.get(memo) if memo is not None else None
        if known is not None:
            return known
        spec = self.server.spec
        narrowed = replace(spec, client_capabilities=inputs.told_to_child(spec.declared_capabilities, capabilities))
        declared = narrowed.declared_capabilities
        told = None if declared == spec.declared_capabilities else declared
        found = ("" if told is None else inputs.capability_key(told), told)
        if memo is not None and len(self._told_sets) < MAX_TOLD_SETS and len(memo) <= MAX_TOLD_MEMO_BYTES:
            self._told_sets[memo] = found
        return found

    def _tells_capabilities(self, key: PoolKey) -> bool:
        """Whether the children of ``key``'s pool are told client capabilities: they are opened
        with ``initialize`` (the legacy clients' share, ``--dual-era legacy``), or the server
        turned out to speak the legacy era only (its first probed child, once known)."""
        if key.era or self.server.spec.handshake == INITIALIZE_FIRST:
            return True
        if self._probed_era is None:
            self._probed_era = next(
                (
                    child.info.era
                    for pool in self.pools.values()
                    for child in pool.children()
                    if child.info is not None and child.spec.handshake == PROBE_FIRST
                ),
                None,
            )
        return self._probed_era is LEGACY

    def _learn_eras(self) -> None:
        """A probed child that is legacy, or an ``initialize``-first child that is modern, shows
        that the server speaks one era only: legacy clients need no children of their own."""
        if self.single_era or self._eras_looked_at == self._pools.generation:
            return  # (no child started, no pool came or went, since it last looked)
        self._eras_looked_at = self._pools.generation
        # Legacy sessions already on legacy children of their own keep them (their state is there).
        split_already = any(key.era for key in self.pools)
        for pool in self.pools.values():
            for child in pool.children():
                if child.info is None:
                    continue
                probed_legacy = child.spec.handshake == PROBE_FIRST and child.info.era is LEGACY and not split_already
                refused_initialize = child.spec.handshake == INITIALIZE_FIRST and child.info.era is MODERN
                if probed_legacy or refused_initialize:
                    self.single_era = True
                    log.info("%s speaks one era only: legacy clients share its children", self.server.name)
                    return

    def _base(
        self,
        principal: str | None,
        session_id: str | None,
        headers: Mapping[str, str],
        era: Era,
        capabilities: Mapping[str, object] | None,
    ) -> tuple[PoolKey, Pool | None]:
        """``key_for``'s scope key, and its pool when a call must first wait for it to start:
        whether this server speaks one era only (or is legacy, so that children are told
        capabilities) is known once its first child is up."""
        base = self._scope_key(principal, session_id, headers)
        main = self.pools.get(base)
        # ``main.is_starting()``, asked of its dispatcher directly: one call less per request.
        if main is not None and (era is LEGACY or capabilities is not None) and main.dispatch.may_start():
            return base, main
        return base, None

    def _key(self, base: PoolKey, era: Era, capabilities: Mapping[str, object] | None, roots: Roots | None) -> PoolKey:
        # A modern client of a server whose probed child is modern: its children are told no
        # capabilities (``_tells_capabilities`` is False for good), so ``_refine`` keeps ``base``.
        return base if era is MODERN and self._probed_era is MODERN else self._refine(base, era, capabilities, roots)

    def ready_pool(
        self,
        principal: str | None,
        session_id: str | None,
        headers: Mapping[str, str],
        era: Era = MODERN,
        capabilities: Mapping[str, object] | None = None,
        roots: Roots | None = None,
    ) -> Pool | None:
        """``pool_for``'s pool when it is there with nothing to wait for (the usual request:
        answered without a coroutine); else None, and ``pool_for`` waits, or opens it."""
        base, starting = self._base(principal, session_id, headers, era, capabilities)
        return None if starting is not None else self._pools.ready(self._key(base, era, capabilities, roots))

    async def pool_for(
        self,
        principal: str | None,
        session_id: str | None,
        headers: Mapping[str, str],
        *,
        era: Era = MODERN,
        capabilities: Mapping[str, object] | None = None,
        roots: Roots | None = None,
        charged: str = ANONYMOUS,
    ) -> Pool:
        """The pool for a client of ``era``; ``capabilities`` (a legacy session's, or a modern
        request's ``clientCapabilities``) are what its legacy children are told they may ask
        for: a session's own pool's (``isolation: session``), or a pool of children told
        exactly that set (``key_for``); ``roots``, the client's roots set, is what they are
        given (at most ``MAX_ROOTS_SETS`` sets at once, else 503; a new set only while the
        client charged as ``charged`` uses fewer than ``MAX_ROOTS_SETS_PER_PRINCIPAL``, else 429)."""
        base, starting = self._base(principal, session_id, headers, era, capabilities)
        if starting is not None:
            await starting.wait_started()
        key = self._key(base, era, capabilities, roots)
        pool = self._pools.ready(key)  # the usual case: there, without a wait
        if pool is None:
            pool = await self._pools.get(key)  # waits while another request opens it
        if pool is not None:
            return pool
        own = key.scope.startswith(SESSION_PREFIX)  # a session's roots pool: its sessions bound them
        if key.roots and own:  # the set it had before, unused now, goes (a session has one)
            while self._pools.reclaim(lambda k: k.scope == key.scope and bool(k.roots)) is not None:
                pass
        elif key.roots:
            self._check_roots_share(charged)  # before any other client's idle set is stopped for it
        if key.roots and not own and _shared_roots_sets(self.pools) >= MAX_ROOTS_SETS:
            reclaimed = self._pools.reclaim(_shared_roots)  # an idle set's children stop first
            if reclaimed is not None:
                log.info("%s: stopped the idle children of %s for another roots set", self.server.name, reclaimed.roots)
        if key.roots and not own and _shared_roots_sets(self.pools) >= MAX_ROOTS_SETS:
            raise GatewayUnavailableError(
                f"{self.server.name}: {MAX_ROOTS_SETS} distinct client roots sets have calls running now "
                "(MAX_ROOTS_SETS); a call with another set waits until one of them is done",
                retry_after=max(1, int(MAINTENANCE_TICK)),
            )
        env = credential_env(self.server.env_from_headers, headers)
        spec = self.server.spec
        if env:
            spec = replace(spec, env={**spec.env, **env})
        if key.era:
            spec = replace(spec, handshake=INITIALIZE_FIRST)
        if key.scope.startswith(SESSION_PREFIX) and capabilities is not None:
            spec = replace(spec, client_capabilities=inputs.told_to_child(spec.declared_capabilities, capabilities))
        elif key.told and capabilities is not None:
            spec = replace(spec, client_capabilities=self.told_for(capabilities))
        if key.roots and roots is not None:
            spec = replace(spec, roots=roots)  # the gateway answers its children's roots/list with these only
        if not key.roots:
            return await self._pools.open(key, spec)  # what entering it raised propagates
        opening = self._roots_opening
        opening[charged] = opening.get(charged, 0) + 1  # counted until its call holds a lease there
        try:
            return await self._pools.open(key, spec)
        finally:
            opening[charged] -= 1
            if not opening[charged]:
                del opening[charged]

    def _check_roots_share(self, charged: str) -> None:
        """``charged``'s call needs a roots set with no children yet: 429 when that client
        already has calls running or waiting in ``MAX_ROOTS_SETS_PER_PRINCIPAL`` sets (or
        sets being opened for it)."""
        held = self._roots_opening.get(charged, 0)
        held += sum(1 for key, pool in self.pools.items() if _shared_roots(key) and pool.used_by(charged))
        if held >= MAX_ROOTS_SETS_PER_PRINCIPAL:
            raise ClientThrottledError(
                f"{self.server.name}: this client has calls running in {held} client roots sets "
                f"(at most {MAX_ROOTS_SETS_PER_PRINCIPAL} per client, MAX_ROOTS_SETS_PER_PRINCIPAL); "
                "a call with another set waits until one of them is done",
                retry_after=max(1, int(MAINTENANCE_TICK)),
            )

    def started_child(
        self, principal: str | None, session_id: str | None, headers: Mapping[str, str]
    ) -> StdioChild | None:
        """A started child of the pool this client's requests use before any keying (the usual
        one: what the server offers is learnt from it before a round), or None."""
        main = self.pools.get(self._scope_key(principal, session_id, headers))
        children = main.children() if main is not None else []
        return children[0] if children else None

    def end_session(self, session_id: str) -> None:
        self._pools.end_session(session_id)

    def tallies(self) -> dict[str, PoolTally]:
        """What this server's pools have counted, by pool kind, the pools gone included: for
        metrics, whose counters must never fall when an idle pool is dropped."""
        return self._pools.tallies()

    def live_pools(self) -> list[Pool]:
        """Every pool of this server whose children may run: ``pools``, and those dropped that
        are still stopping theirs."""
        return self._pools.live_pools()

    # -- health -------------------------------------------------------------------------

    def is_ready(self) -> bool:
        shared = self.pools.get(SHARED_KEY)
        if shared is not None and self.server.pool.min_size > 0:
            return shared.is_ready()
        return not any(pool.failing for pool in self.pools.values())

    def state(self) -> ServerState:
        """``ready``, ``starting`` or ``failing`` (``gateway.relay.readiness``)."""
        if self.is_ready():
            return ServerState.READY
        if any(pool.failing for pool in self.pools.values()):
            return ServerState.FAILING
        return ServerState.STARTING

    def is_first_start(self) -> bool:
        """No child of this server has started or failed to start yet (readiness rule 3).
        Latched: once a start has ended either way, never again (a pool that has gone takes
        its start times with it)."""
        if not self._started_once:
            self._started_once = any(
                pool.starts.count or pool.last_error is not None or pool.failing for pool in self.pools.values()
            )
        return not self._started_once

    def readiness(self, *, required: bool) -> ServerReadiness:
        """This server as the replica's readiness rule sees it (``required``: rule 1)."""
        state = self.state()
        return ServerReadiness(
            self.server.name, state, required, first_start=state is ServerState.STARTING and self.is_first_start()
        )

    def status(self) -> dict[str, Any]:
        return {
            "name": self.server.name,
            "command": [self.server.spec.command, *self.server.spec.args],
            "isolation": self.server.isolation.value,
            "ready": self.is_ready(),
            "state": self.state().value,
            "throttled_for_crashes": self.crashes.throttled,  # requests refused with 429
            "pools": {pool.label: pool.status() for pool in self.pools.values()},
        }


def _shared_roots(key: PoolKey) -> bool:
    """A roots set's pool that clients share (``MAX_ROOTS_SETS``), not a session's own."""
    return bool(key.roots) and not key.scope.startswith(SESSION_PREFIX)


def _shared_roots_sets(pools: Mapping[PoolKey, Pool]) -> int:
    return sum(1 for key in pools if _shared_roots(key))
