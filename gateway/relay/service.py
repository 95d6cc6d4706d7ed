"""The composition root of the relay: every server's relay built whole, in one task group.

``open_service(routers, …)`` is an async context manager; inside it the gateway serves. It
runs each server's ``Router`` (its pools), opens the one task group the relay's own tasks run
in, builds per server everything an exchange needs with every collaborator passed in, and
yields a finished ``Service``: a ``Served`` record per server, which the HTTP edge
(``gateway.http.app``) turns into its endpoints. Nothing is assigned into these objects
afterwards.

Per server, in this order (each needs the ones before it):

- ``SessionStore`` (legacy sessions; ending one ends its own pool, ``Router.end_session``);
- ``SharedSettings`` (per-client settings on shared legacy children), ``Listens`` (emulated
  ``subscriptions/listen``) and ``Unsolicited`` (what the children send unasked), attached to
  the router *before* it runs, so its first children are heard from their first line;
- then, inside the task group: ``Suspensions`` (parked MRTR calls: their keepers),
  ``TaskStore`` (calls that became tasks: their runs), ``SessionListens`` (a legacy session's
  subscriptions on a modern child: the child listens), ``SessionSubscriptions`` (a legacy
  session's on a legacy child, counted with the listens'), and the ``Relay`` over them all.

Who owns which task group (each entered in ``async with`` by its owner):

- **each router's** (``RunningPools.running``, entered here through the router's ``async
  with``): its pools, each with a group of its own for its children, and the idle-pool
  sweep. Closed last: every child stops, shielded.
- **the service's** (``open_service``): parked calls' keepers (``Suspensions``), task runs
  (``TaskStore``), session listens (``SessionListens``), the release of an ended session's
  subscriptions (``SessionSubscriptions``) and ``end_sessions_when``'s watch.
  Closed once every session has ended (``SessionStore.end_all``), before the routers'.

So at shutdown the sessions end first, then the service's tasks are cancelled (a parked call
closes its child exchange and lease while its pool still runs), then the pools stop.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field

import anyio
from anyio.abc import TaskGroup

from gateway.protocol.eventlog import RESUME_WINDOW
from gateway.relay.exchange import Relay
from gateway.relay.listens import Listens
from gateway.relay.owner import OwnerRouting
from gateway.relay.router import Router
from gateway.relay.session_listen import SessionListens
from gateway.relay.session_subscriptions import SessionSubscriptions
from gateway.relay.sessions import SessionStore
from gateway.relay.shared_settings import SharedSettings
from gateway.relay.statekeys import StateKeys
from gateway.relay.suspensions import FAIR_SHARE_REASON, ParkedQuota, Suspensions
from gateway.relay.tasks import DrainHold, KeptOutcomes, TaskStore
from gateway.relay.unsolicited import Unsolicited
from gateway.stdio.boundary import contained

log = logging.getLogger("gateway.relay.service")


@dataclass(frozen=True, eq=False)
class Served:
    """One server as the HTTP edge serves it, built whole by ``open_service``."""

    router: Router
    relay: Relay  # with its suspensions, tasks and shared settings
    sessions: SessionStore
    listens: Listens
    session_listens: SessionListens

    @property
    def name(self) -> str:
        return self.router.server.name


@dataclass(frozen=True, eq=False)
class Service:
    """Every server's ``Served``, in the routers' order."""

    served: tuple[Served, ...]
    by_name: dict[str, Served] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_name", {served.name: served for served in self.served})

    def end_all_sessions(self) -> None:
        """End every legacy session: their GET streams close; their requests in flight end with an error."""
        for served in self.served:
            served.sessions.end_all()


@dataclass(frozen=True)
class _Parts:
    """What a server's relay needs that runs no task: made before its router runs."""

    router: Router
    sessions: SessionStore
    settings: SharedSettings
    listens: Listens


def _attached(router: Router, routing: OwnerRouting | None, resume_window: float) -> _Parts:
    sessions = SessionStore(
        on_end=router.end_session,
        max_per_principal=router.server.max_sessions_per_principal,
        mint_id=routing.mint_session_id if routing else None,
        resume_window=resume_window,
    )
    settings = SharedSettings(sessions.on_child)
    listens = Listens()
    Unsolicited(sessions, listens, settings).attach(router)  # GET streams, listens, roots/list
    return _Parts(router, sessions, settings, listens)


def _served(
    parts: _Parts,
    tg: TaskGroup,
    *,
    gateway_version: str,
    state_keys: StateKeys | None,
    routing: OwnerRouting | None,
    quota: ParkedQuota | None,
    replicas: bool,
    outcomes: KeptOutcomes,
    drain: DrainHold | None,
) -> Served:
    server = parts.router.server
    suspensions = Suspensions(
        server.name,
        state_keys,
        task_group=tg,
        quota=quota,
        seal_owner=routing.sealed_me if routing else None,
        replicas=replicas,
    )
    # Dispatch rule 5's fair share: a principal's abandoned questions give way to another's asker.
    parts.router.add_parked_releaser(
        lambda pool, principal: suspensions.release_oldest(principal, pool.children(), FAIR_SHARE_REASON)
    )
    tasks = TaskStore(
        server.name,
        server.task_policy(),
        task_group=tg,
        owner=routing.me if routing else None,
        keys=routing.task_id_keys if routing else None,
        outcomes=outcomes,
        drain=drain,
    )
    relay = Relay(
        parts.router,
        suspensions=suspensions,
        tasks=tasks,
        settings=parts.settings,
        listens=parts.listens,
        # Legacy sessions' subscriptions on legacy children, in the listens' counts.
        session_subscriptions=SessionSubscriptions(parts.listens.counts, tg),
        gateway_version=gateway_version,
    )
    return Served(parts.router, relay, parts.sessions, parts.listens, SessionListens(tg))


@asynccontextmanager
async def open_service(
    routers: Sequence[Router],
    *,
    gateway_version: str,
    state_keys: StateKeys | None = None,
    routing: OwnerRouting | None = None,
    quota: ParkedQuota | None = None,
    resume_window: float = RESUME_WINDOW,
    end_sessions_when: anyio.Event | None = None,
    replicas: bool = False,
    drain: DrainHold | None = None,
) -> AsyncIterator[Service]:
    """The service over ``routers`` while the block runs (the routers are run here: not
    entered before). ``state_keys`` sign MRTR ``requestState`` (None: a random key);
    ``routing``: sessions, parked calls and tasks name this instance (its keys win);
    ``quota``: parked calls count as their principal's requests in flight;
    ``resume_window``: how long a legacy session's SSE stream is kept for a resume;
    ``end_sessions_when``: every session ends once it is set (the drain's last step);
    ``replicas``: other processes may serve the endpoints (owner routing implies it);
    ``drain``: what waits for the tasks at a drain (``gateway.relay.tasks``)."""
    if routing is not None:
        state_keys = routing.keys
    parts = [_attached(router, routing, resume_window) for router in routers]
    outcomes = KeptOutcomes()  # one bound on kept task outcomes over every server's store
    async with AsyncExitStack() as stack:
        for router in routers:  # their task groups close after (outside) the service's
            await stack.enter_async_context(router)
        async with anyio.create_task_group() as tg:
            service = Service(
                tuple(
                    _served(
                        part,
                        tg,
                        gateway_version=gateway_version,
                        state_keys=state_keys,
                        routing=routing,
                        quota=quota,
                        replicas=replicas or routing is not None,
                        outcomes=outcomes,
                        drain=drain,
                    )
                    for part in parts
                )
            )
            if end_sessions_when is not None:
                tg.start_soon(_end_sessions_when, end_sessions_when, service)
            try:
                yield service
            finally:
                service.end_all_sessions()
                tg.cancel_scope.cancel()


async def _end_sessions_when(event: anyio.Event, service: Service) -> None:
    with contained(log, "the watch that ends the sessions at the drain's end", "they end with the service"):
        await event.wait()
        service.end_all_sessions()
