"""The running pools of one server, by key: opened on demand, dropped when idle, one task group.

``RunningPools`` is what ``gateway.relay.router.Router`` keeps its pools in; the router decides
*which* key a request needs, this module runs the pool for it:

- ``running(prewarm)`` (the router's ``async with``) owns the task group every pool of the server runs
  in, beside the maintenance loop that drops idle pools; on leaving it every pool is stopped
  (children stop shielded, ``gateway.stdio.process``).
- ``open(key, spec)`` starts a pool's task with ``TaskGroup.start`` and returns the
  pool once it runs (``Pool.__aenter__`` is done inside that task, before
  ``task_status.started()``). When entering the pool fails, or the caller is cancelled first,
  the error reaches the caller and nothing of the pool is kept: no pool is ever returned, or
  left in ``by_key``, that did not run.
- ``get(key)`` is the pool for ``key``, waiting while another request opens it (None when
  there is none, or its opening failed: the caller opens one itself).
- A dedicated pool (a principal's, a session's) is dropped once it has been empty (no child,
  no waiter) for a maintenance tick; a session's pool when its session ends (``end_session``).
- **A pool is a failure domain**: a pool that fails once it runs (an unexpected exception in
  one of its tasks, ``gateway.stdio.pool``) is logged with its traceback and dropped here; its
  waiters got a 503, and the next request for its key opens a new one; the pre-warmed shared
  pool is opened again ``RESTART_PAUSE`` later without waiting for one. The idle-pool sweep
  runs again after a fault of its own (``boundary.keep_running``).

- **Counts outlive pools**: a pool's tally (``gateway.stdio.tally``) is folded into ``gone``,
  by pool kind, once the pool has ended (its children stopped, so its tally is final); until
  then it is counted among the running (``tallies``), also after it was dropped. So the
  server's counters per kind never fall when a pool goes.

Every pool hears through ``hooks`` (``gateway.stdio.member.PoolHooks``), one registry passed
to each pool opened: a listener added there hears every pool, also those opened before it came.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import replace

import anyio
from anyio.abc import TaskGroup, TaskStatus

from gateway.errors import GatewayError
from gateway.relay.poolkey import SESSION_PREFIX, SHARED_KEY, SHARED_LEGACY_KEY, PoolKey
from gateway.stdio.backend import ChildBackend
from gateway.stdio.boundary import RESTART_PAUSE, contained, keep_running
from gateway.stdio.budget import ChildBudget
from gateway.stdio.crashes import CrashLedger
from gateway.stdio.member import PoolHooks
from gateway.stdio.pool import MAINTENANCE_TICK, Pool, PoolSettings
from gateway.stdio.spec import ChildSpec
from gateway.stdio.tally import PoolTally

log = logging.getLogger("gateway.relay.router")


def pool_plan(key: PoolKey, spec: ChildSpec, settings: PoolSettings) -> tuple[ChildSpec, PoolSettings]:
    """The spec and settings of ``key``'s pool, from the server's: a dedicated pool starts empty
    and grows on demand (a principal or session that never comes back must not keep a child
    alive); a session's own has one child for the session's lifetime; a pool shared by clients,
    and a session's roots pool, answer their children's ``roots/list`` themselves, with the
    pool's roots (no client is asked for such a child's roots)."""
    if key not in (SHARED_KEY, SHARED_LEGACY_KEY):
        settings = replace(settings, min_size=0)
    if key.scope.startswith(SESSION_PREFIX):
        settings = replace(settings, max_size=1, asking_max=0)
    if not key.scope.startswith(SESSION_PREFIX) or key.roots:  # a session's roots pool: its set, given
        spec = replace(spec, answers_roots=True)
    return spec, settings


class RunningPools:
    def __init__(
        self,
        server: str,
        settings: PoolSettings,
        *,
        gateway_version: str,
        budget: ChildBudget | None,
        crashes: CrashLedger,
        backend: ChildBackend,
    ) -> None:
        self.server = server
        self._settings = settings  # the server's; each pool's follow from them (``pool_plan``)
        self.by_key: dict[PoolKey, Pool] = {}  # running, or being opened (``_opening``)
        # Bumped when a pool comes or goes and when a child of one has started: what is learnt
        # from the pools' children (``Router``'s eras) is looked for again only then.
        self.generation = 0
        self._gateway_version = gateway_version
        self._budget = budget
        self._crashes = crashes
        self._backend = backend
        self.hooks = PoolHooks()  # every pool's: who hears its children outside any request
        self.answered_alike: Callable[[str], bool] | None = None  # (``Router``: a keeping server's roots)
        self._stops: dict[PoolKey, anyio.Event] = {}
        self._opening: dict[PoolKey, anyio.Event] = {}  # set once the pool runs, or failed to
        # Every pool whose task runs (also one dropped and stopping its children), by its kind;
        # a pool leaves it for ``gone`` once it has ended (``_retire``).
        self._live: dict[Pool, str] = {}
        self.gone: dict[str, PoolTally] = {}  # by pool kind: what the pools that ended counted
        self._tg: TaskGroup | None = None  # while ``running``: the pools' task group
        self._prewarm: ChildSpec | None = None  # the shared pool's spec, when it is pre-warmed

    # -- lifecycle ------------------------------------------------------------------------

    @asynccontextmanager
    async def running(self, prewarm: ChildSpec | None = None) -> AsyncIterator[None]:
        """The pools' task group around the block, with the maintenance loop; the shared pool
        (``prewarm``, when given) runs before the block does. Leaving stops every pool."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            self._prewarm = prewarm
            try:
                if prewarm is not None:
                    await self.open(SHARED_KEY, prewarm)  # before traffic
                tg.start_soon(keep_running, self._drop_empty_pools, log, f"{self.server}'s idle-pool sweep")
                yield
            finally:
                self._tg = None
                for stop in self._stops.values():
                    stop.set()
                tg.cancel_scope.cancel()  # the maintenance loop; children stop shielded (process.stop)

    def ready(self, key: PoolKey) -> Pool | None:
        """The pool for ``key`` when it runs and no request is opening it (the usual case,
        answered without a coroutine); else None (``get`` waits for it, or there is none)."""
        pool = self.by_key.get(key)
        return pool if pool is not None and self._opening.get(key) is None else None

    async def get(self, key: PoolKey) -> Pool | None:
        """The pool for ``key``, once it runs; None: there is none (or its opening failed and
        no other request opens one now). The caller opens one then, with no await in between
        (another request would open a second)."""
        while (pool := self.by_key.get(key)) is not None:
            opening = self._opening.get(key)
            if opening is None:
                return pool
            await opening.wait()  # another request is opening it right now
            if self.by_key.get(key) is pool:
                return pool
            # That opening failed; another waiter may be opening the key's pool again: look again.
        return None

    async def open(self, key: PoolKey, spec: ChildSpec) -> Pool:
        """Open ``key``'s pool of children of ``spec`` (``pool_plan``) and return it running.
        Not for a key that has a pool (``get`` first). Raises what entering the pool raised,
        and nothing of the pool is kept then."""
        if self._tg is None:
            raise RuntimeError(f"{self.server}: no pool runs outside the router's `async with`")
        if key in self.by_key:
            raise RuntimeError(f"{key.label(self.server)}: a pool runs for this key already (``get`` it)")
        spec, settings = pool_plan(key, spec, self._settings)
        pool = Pool(
            spec,
            settings,
            gateway_version=self._gateway_version,
            label=key.label(self.server),
            budget=self._budget,
            crashes=self._crashes,
            backend=self._backend,
            on_started=self._bump,
            server=self.server,
            hooks=self.hooks,
        )
        pool.answered_alike = self.answered_alike
        if key.scope.startswith(SESSION_PREFIX):
            pool.session_id = key.scope.removeprefix(SESSION_PREFIX)
        self.by_key[key] = pool
        self._live[pool] = key.kind
        self._bump()
        stop = self._stops[key] = anyio.Event()
        opening = self._opening[key] = anyio.Event()
        try:
            await self._tg.start(self._run_pool, key, pool, stop)
        except BaseException:
            self._forget(key, pool)
            self._retire(pool)  # (done already if its task ran)
            raise
        finally:
            opening.set()
            if self._opening.get(key) is opening:
                del self._opening[key]
        log.info("pool opened: %s", pool.label, extra={"event": "pool_open", "server": self.server, "pool": pool.label})
        return pool

    async def _run_pool(self, key: PoolKey, pool: Pool, stop: anyio.Event, *, task_status: TaskStatus[None]) -> None:
        running = False
        try:
            async with pool:
                task_status.started()
                running = True
                await stop.wait()
        except Exception as exc:
            if not running:
                raise  # to the request that opened it (``open``)
            log.error(  # the pool's failure domain ends here: the router and its other pools run on
                "the gateway failed in pool %s: %r; it is dropped, and the next request opens a new one",
                pool.label,
                exc,
                exc_info=exc,
            )
            if key == SHARED_KEY and self._prewarm is not None and self._tg is not None:
                self._tg.start_soon(self._warm_again)
        finally:
            self._forget(key, pool)
            self._retire(pool)

    def _retire(self, pool: Pool) -> None:
        """``pool`` has ended: its final tally joins its kind's ``gone`` (once)."""
        kind = self._live.pop(pool, None)
        if kind is not None:
            self.gone.setdefault(kind, PoolTally()).add(pool.tally())

    def live_pools(self) -> list[Pool]:
        """Every pool whose task runs: those by key, and those dropped that are still stopping."""
        return list(self._live)

    def tallies(self) -> dict[str, PoolTally]:
        """What the server's pools have counted, by pool kind: the ended ones' and the running
        ones' (dropped or not). No count in it is ever less than at an earlier call."""
        totals: dict[str, PoolTally] = {}
        for kind, gone in self.gone.items():
            totals.setdefault(kind, PoolTally()).add(gone)
        for pool, kind in self._live.items():
            totals.setdefault(kind, PoolTally()).add(pool.tally())
        return totals

    async def _warm_again(self) -> None:
        """The pre-warmed shared pool failed and was dropped: open it again, ``RESTART_PAUSE``
        later (a pool that fails at once each time costs a log line a second), so the next
        request finds warm children as the first one did, unless a request opened it first."""
        await anyio.sleep(RESTART_PAUSE)
        spec = self._prewarm
        if spec is None or self._tg is None or SHARED_KEY in self.by_key:
            return
        with contained(log, f"{self.server}: opening the shared pool again", "the next request opens it"):
            try:
                await self.open(SHARED_KEY, spec)
            except GatewayError as exc:
                log.warning("%s: the shared pool could not be opened again: %s", self.server, exc.message)

    def _bump(self) -> None:
        self.generation += 1

    def _forget(self, key: PoolKey, pool: Pool) -> None:
        if self.by_key.get(key) is pool:
            del self.by_key[key]
            self._bump()
            self._stops.pop(key).set()

    def reclaim(self, wanted: Callable[[PoolKey], bool]) -> PoolKey | None:
        """Drop one unused pool whose key is ``wanted`` (its children stop), the one used least
        recently; the key dropped, or None when every such pool is in use."""
        unused = [
            (max((m.last_used for m in pool.members), default=0.0), key)
            for key, pool in self.by_key.items()
            if wanted(key) and key not in self._opening and pool.is_unused()
        ]
        if not unused:
            return None
        _, key = min(unused, key=lambda pair: pair[0])
        self._forget(key, self.by_key[key])
        return key

    def end_session(self, session_id: str) -> None:
        scope = SESSION_PREFIX + session_id
        for key in [k for k in self.by_key if k.scope == scope]:
            self._forget(key, self.by_key[key])

    async def _drop_empty_pools(self) -> None:
        while True:
            await anyio.sleep(MAINTENANCE_TICK)
            for key, pool in list(self.by_key.items()):
                # The legacy clients' pool of a server later found to speak one era stays: the
                # sessions it served hold its children (and it) for their subscriptions and asks.
                # New legacy sessions share the main pool; this one idles down to its minimum.
                if key not in (SHARED_KEY, SHARED_LEGACY_KEY) and key not in self._opening and pool.is_idle():
                    self._forget(key, pool)  # first, so no new request is handed a closing pool
