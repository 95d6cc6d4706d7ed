"""One exchange between an HTTP request and a child.

``Relay.exchange(request, client)`` is an async iterator of typed events
(``gateway.relay.events``), each carrying a JSON-RPC message for the client in the client's
era: request-scoped notifications (``Progress``, ``Notification``) and questions for a
legacy client (``Ask``) as the child sends them, then exactly one ``Final``, the response
carrying the client's id with its exact JSON type. Notifications read from the child at once
come as one ``Batch`` (the HTTP edge writes them in one send).
Closing the iterator early (the HTTP client went away) leaves the child exchange, which
sends ``notifications/cancelled`` with the child-side id.

Failures of the child (``ChildError``) become the ``Final`` response as JSON-RPC errors.
Two outcomes are raised before anything is yielded, so the HTTP edge can still answer
with their status: ``GatewayUnavailableError`` (503, 429) and ``Rejected`` (a 400 from the
``Mcp-Param-*`` check, which needs the child's tool schemas and so cannot run in the pure
ingress ladder, or from a ``requestState`` that fails verification).

**The sequence** is written down in ``gateway.relay.steps``, in order: the steps before a
child (the task store's ``tasks/*``, a parked call's retry, the parked-questions quota, a
client's roots), the lease, the steps on the child (local answers, the ``Mcp-Param-*``
check, a call that becomes a task), the child exchange, the child's notifications and
questions (``gateway.relay.asks``: legacy asks, MRTR rounds) and the steps on its reply (era
translation among them). ``Relay.exchange`` and ``Relay.run`` are the loops that run them.

**A modern child's ``input_required``** for a *legacy* client (digest §7.6 D): each
``inputRequests`` entry goes to the client on this request's stream as a JSON-RPC request
with a gateway id (as a child's question does, ``gateway.relay.asks``); the client's POSTed
results (within the input timeout) go back to the child in a retry — a new child request
with the original params, ``inputResponses`` under the same keys and the child's
``requestState`` unchanged — until the result is complete (at most ``MAX_INPUT_ROUNDS``
rounds). A session that did not declare what is asked, or does not answer in time, gets a
gateway error (-31006, -31007).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Coroutine, Mapping
from contextlib import aclosing
from typing import Any, Final

import anyio

from gateway.errors import ChildError, GatewayUnavailableError
from gateway.protocol import attribution, bridge, inputs
from gateway.protocol.jsonrpc import Request
from gateway.protocol.versions import LEGACY, MODERN
from gateway.relay import asks, events
from gateway.relay.catalog import ToolCatalog
from gateway.relay.client import ClientContext
from gateway.relay.events import Emitted
from gateway.relay.input_rounds import MAX_INPUT_ROUNDS as MAX_INPUT_ROUNDS
from gateway.relay.listens import Listens
from gateway.relay.rejected import Rejected as Rejected
from gateway.relay.router import Router
from gateway.relay.session_subscriptions import SessionSubscriptions
from gateway.relay.shared_settings import SharedSettings
from gateway.relay.spans import timed
from gateway.relay.steps import PLANS, open_call, plan_for, start_over
from gateway.relay.suspensions import Call, Holdings, Suspensions
from gateway.relay.tasks import TaskStore
from gateway.relay.translate import response as response
from gateway.relay.turn import Admission, Collaborators, Emissions, Leased, Running, Turn
from gateway.stdio.pool import PoolLease


class Answered:
    """``Relay.begin``'s common shape: the client's final message, and the call's holdings
    (its lease and child exchange), left by ``aclose`` once the answer is written: the child
    is given back after the client has its answer, as a closed exchange gives it back."""

    __slots__ = ("_on", "final")

    def __init__(self, final: events.Final, on: Leased) -> None:
        self.final = final
        self._on: Leased | None = on

    async def aclose(self) -> None:
        """Leave the holdings (once; later calls do nothing)."""
        on, self._on = self._on, None
        if on is None:
            return
        try:
            on.stack.close()
        finally:
            if on.child_span is not None:
                on.child_span.end()


Begun = Answered | events.Final | Emissions
"""What ``Relay.begin`` gives (see there)."""


async def _events_of(begun: Begun) -> Emissions:
    """What ``Relay.begin`` gave, as events: a ``Final`` alone (``Answered``'s holdings left
    after it), or the exchange's own."""
    if isinstance(begun, Answered):
        try:
            yield begun.final
        finally:
            await begun.aclose()
    elif isinstance(begun, events.Final):
        yield begun
    else:
        async with aclosing(begun):
            async for message in begun:
                yield message


UNASKING_HANDSHAKE: Final = frozenset({"server/discover", "ping"})
"""Requests any child answers alike, whatever its client's capabilities: the usual pool serves
them (no child is started for a capability set only to answer them)."""


class Relay:
    def __init__(
        self,
        router: Router,
        *,
        suspensions: Suspensions,
        tasks: TaskStore,
        settings: SharedSettings,
        listens: Listens | None = None,
        session_subscriptions: SessionSubscriptions | None = None,
        gateway_version: str = "0",
    ) -> None:
        """Built by ``gateway.relay.service.open_service``, its collaborators with it."""
        self.router = router
        self.catalog = ToolCatalog(gateway_version)
        self.gateway_version = gateway_version
        self.suspensions = suspensions
        # Calls that became tasks, and tasks/* (the Tasks extension, served for every child).
        self.tasks = tasks
        # Per-client settings on shared legacy children (log level, roots).
        self.settings = settings
        # Emulated listens: they follow a modern client's calls to its roots pools' children.
        self.listens = listens
        # Legacy sessions' resources/subscribe on legacy children, counted with the listens'.
        self.session_subscriptions = session_subscriptions
        # What the steps work with, given to them directly (gateway.relay.steps).
        self.collaborators = Collaborators(
            router, suspensions, tasks, self.catalog, settings, self, session_subscriptions
        )

    def begin(
        self, request: Request, client: ClientContext, headers: Mapping[str, str] | None = None
    ) -> Coroutine[Any, Any, Begun]:
        """Run ``request`` on a child of the pool the router picks, through the steps of
        ``gateway.relay.steps`` (in order; its plan for the client's era and the method). The
        coroutine returned, awaited, gives ``Answered`` when the child answered with its reply
        alone and nothing went to the client before it (the common shape), a ``Final`` when
        the answer was known without the child's reply (nothing held any more), else the
        exchange's events, none read yet (``exchange`` gives the same as one iterator).

        Awaiting it raises ``GatewayUnavailableError`` and ``Rejected`` as ``exchange`` raises
        them before its first event. The common shape is a coroutine, not a generator: an async
        generator made, registered with the loop, resumed and closed (``GeneratorExit`` through
        the holdings) costs a call about 2 µs. Which step comes first is asked here (the
        predicates only read), so a call no step before the child takes starts at the child's
        part: one coroutine frame less on each of its resumptions."""
        plans = PLANS[client.era]
        admission = Admission(Turn(request, client, headers, plans.get(request.method) or plans[None]))
        for index, (when, _, _) in enumerate(admission.turn.plan.before_child):
            if when is None or when(self.collaborators, admission):
                return self._steps_from(admission, index, streamed=False, held=True)
        return self._on_child(admission, streamed=False)

    async def _steps_from(self, admission: Admission, index: int, *, streamed: bool, held: bool = False) -> Begun:
        """The steps before the child from ``index`` on (``held``: that one's predicate held
        already), then the child's part; the first step that answers ends this, its answer and
        what follows it given as events (``_after_answer``). ``streamed``: as ``_on_child``."""
        deps, stages = self.collaborators, admission.turn.plan.before_child
        for at in range(index, len(stages)):
            when, act, ends = stages[at]
            if (held and at == index) or when is None or when(deps, admission):
                answer = await act(deps, admission)
                if answer is not None:
                    return self._after_answer(admission, answer, ends, at + 1, streamed)
        return await self._on_child(admission, streamed=streamed)

    async def exchange(
        self, request: Request, client: ClientContext, headers: Mapping[str, str] | None = None
    ) -> AsyncGenerator[Emitted, None]:
        """``begin``'s outcome as one iterator of events (a ``Final`` last)."""
        async with aclosing(_events_of(await self.begin(request, client, headers))) as begun:
            async for message in begun:
                yield message

    async def _after_answer(
        self, admission: Admission, answer: Emissions, ends: bool, following: int, streamed: bool
    ) -> Emissions:
        """A step before the child answered (``answer``): its events, then (unless it ``ends``
        the exchange) the steps from ``following`` on, and the child's part. ``streamed``:
        something went to the client already (a legacy session's roots question)."""
        async with aclosing(answer):  # closed in this task
            async for message in answer:
                streamed = True
                yield message
        if ends:
            return
        rest = await self._steps_from(admission, following, streamed=streamed)
        async with aclosing(_events_of(rest)) as rest_events:
            async for message in rest_events:
                yield message

    async def _on_child(self, admission: Admission, *, streamed: bool) -> Begun:
        """The lease, the steps on the child, the child exchange: ``Answered`` for the child's
        reply alone (the holdings its), a ``Final`` known without it (the holdings left here),
        else the events to come (the holdings theirs: ``_handed``). ``streamed``: something
        went to the client already, so a refusal (503, 429) is its stream's last message
        rather than raised for the HTTP edge to answer."""
        deps, turn = self.collaborators, admission.turn
        request, client, headers = turn.request, turn.client, turn.headers
        session = client.session  # None: a modern client
        stack = Holdings()
        on: Leased | None = None
        handed = False
        try:
            session_id = session.id if session is not None else None  # ``client.session_id``
            # Legacy children are told exactly their client's capabilities (the pool key holds them).
            capabilities = None if request.method in UNASKING_HANDSHAKE else client.capabilities
            roots = admission.roots  # and a call's children hold its client's roots set only
            # The usual pool, there already, without ``pool_for``'s coroutine.
            pool = self.router.ready_pool(client.principal, session_id, headers or {}, client.era, capabilities, roots)
            if pool is None:
                pool = await self.router.pool_for(
                    client.principal,
                    session_id,
                    headers or {},
                    era=client.era,
                    capabilities=capabilities,
                    roots=roots,
                    charged=client.charged,
                )
            if roots is not None and session is not None:
                session.roots_pool = pool  # its subscriptions' updates come from here too
            tool = attribution.tool_key(request.method, request.params)  # the lease's and the child's
            ended = start_over(deps, turn, pool)  # a round its client left, sent again at its cap, ends
            if ended is not None:
                await ended.closed.wait()
            # The holdings own the lease and the child exchange, so that a parked MRTR call keeps both.
            # A request that may ask waits for a child where its questions can only be its own.
            # A modern client has no session, so no child it prefers (``affinity`` not called).
            prefer = client.affinity() if session is not None else None
            # ``pool.lease(...)`` spelled out: one call less per request.
            lease = PoolLease(pool, prefer, client.charged, request.method, tool)  # 503 / 429 propagate
            if client.span is None:
                child = lease.take_now()  # the common shape: a child with room, no wait (no frame)
                if child is None:
                    child = await stack.enter(lease)
                else:
                    stack.hold(lease)
            else:
                child = await timed(client.span.queue_wait(pool.label), stack.enter(lease))
            client.bind(child, pool)
            if admission.roots is not None and client.era is MODERN and self.listens is not None:
                # Before the call reaches the child: its client's listens subscribe there first.
                await self.listens.follow_call(self.router, client, headers or {}, pool, child)
            info = child.info
            assert info is not None
            on = Leased(turn, pool, tool, child, info, stack)
            for on_when, on_act, _ in turn.plan.on_child[info.era]:
                if on_when is None or on_when(deps, on):
                    answer = await on_act(deps, on)
                    if answer is not None:
                        handed = True
                        return self._handed(on, answer, streamed)
            running = await open_call(deps, on, turn)
            if not isinstance(running, Running):
                return running
            ex = running.ex
            # ``isinstance(await ex.first_sign(), Reply)``, without its coroutine frame.
            if await ex.wait() is None and ex.replied:
                # The common shape: the child's reply with nothing before it, so no run to
                # drive (no loop over the child's items): the steps on the reply at once.
                running.reply = ex.reply()
                answered = self._on_reply(running)
                if isinstance(answered, events.Final):
                    handed = True
                    return Answered(answered, on)
                driven = answered
            else:
                driven = self.run(running)
            handed = True
            return self._handed(on, driven, streamed)
        except GatewayUnavailableError as exc:
            if not streamed:
                raise  # answered by the HTTP edge: 503 or 429, with Retry-After
            return events.Final(response(request.id, error=exc.error_object()))  # issue #36
        except ChildError as exc:  # the command cannot start or keeps dying: fail at once, with the reason
            return self._child_failed(request, client, exc)
        finally:
            if not handed:
                try:
                    stack.close()
                finally:
                    if on is not None and on.child_span is not None:  # the answer ended before the child's reply
                        on.child_span.end()

    async def _handed(self, on: Leased, driven: Emissions, streamed: bool) -> Emissions:
        """The events of a call that streams (or parks): ``driven``'s, its holdings
        (``on.stack``: the lease and the child exchange) left when it ends or is closed."""
        request, client = on.turn.request, on.turn.client
        try:
            async with on.stack:
                try:
                    async for message in driven:
                        streamed = True
                        yield message
                finally:  # closed in this task: the lease and exchange are left here
                    await driven.aclose()
        except GatewayUnavailableError as exc:
            if not streamed:
                raise  # answered by the HTTP edge: 503 or 429, with Retry-After
            # The answer's stream is open already: the refusal is its last message (issue #36).
            yield events.Final(response(request.id, error=exc.error_object()))
        except ChildError as exc:
            yield self._child_failed(request, client, exc)
        finally:
            if on.child_span is not None:  # the answer ended before the child's reply
                on.child_span.end()

    def _child_failed(self, request: Request, client: ClientContext, exc: ChildError) -> events.Final:
        """The client's final message when the child cannot start or keeps dying."""
        if client.era is MODERN and request.method == "server/discover":
            # The probe succeeds and the next request carries the reason (bridge.unavailable_discover).
            about = {"name": self.router.server.name, "version": self.gateway_version}
            result = bridge.unavailable_discover(exc.error_object(), about)
            return events.Final(response(request.id, result=result))
        return events.Final(response(request.id, error=exc.error_object()))

    def drive(self, call: Call, request: Request, client: ClientContext) -> AsyncGenerator[Emitted]:
        """A call's events after its child exchange has begun (what a task's run consumes)."""
        return self.run(Running.on(call, Turn(request, client, None, plan_for(client.era, request.method))))

    def next_round(self, call: Call, request: Request, client: ClientContext, rounds: int) -> AsyncGenerator[Emitted]:
        """The child's retry with the client's answers (``input_rounds``), streamed as any call."""
        running = Running.on(call, Turn(request, client, None, plan_for(client.era, request.method)))
        running.rounds = rounds
        return self.run(running)

    def _gives_pool_roots(self, client: ClientContext) -> bool:
        """Whether a shared child's ``roots/list`` during a call gets its pool's roots: unless
        the server keeps none (``Router.roots_kept``) and the call's client declared roots,
        which is then asked like any question (exact per call, nothing kept)."""
        return self.router.pool_gives_roots or inputs.ROOTS_CAPABILITY not in client.capabilities

    async def run(self, call: Running) -> AsyncGenerator[Emitted]:
        """The child's notifications and questions, then its reply, for the call's client.

        Returns early, with the final message yielded, when the call is parked (MRTR) or
        refused (-32021); leaving then closes ``call.stack`` unless the call was parked."""
        turn, ex, child = call.turn, call.ex, call.child
        request, client = turn.request, turn.client
        try:
            async for item in ex:
                # What else is read already comes along: notifications in one Batch (one send
                # at the HTTP edge), asks read together as one round.
                notes, questions = asks.sort_items((item, *ex.ready()), request, call.resumed)
                waited = 0.0  # since the first question came: its own input timeout runs already
                if questions and client.era is MODERN and request.method in inputs.MRTR_METHODS:
                    # Questions sent together reach the modern client in one round, even when
                    # the child's writes are read apart (ASK_GATHER_WINDOW).
                    started = anyio.current_time()
                    more_notes, more_questions = asks.sort_items(await asks.stragglers(ex), request, call.resumed)
                    waited = anyio.current_time() - started
                    notes += more_notes
                    questions += more_questions
                if len(notes) == 1:
                    yield notes[0]
                elif notes:
                    yield events.Batch(tuple(notes))
                if child.spec.answers_roots and any(ask.method == inputs.ROOTS for ask in questions):
                    self.router.note_roots_question(child)  # its start-up fetch, maybe (learning)
                    if self._gives_pool_roots(client):
                        # A shared child of a server that keeps roots is given its pool's roots,
                        # never a client's; one that keeps none asks this call's client.
                        questions = [ask for ask in questions if not asks.answer_pool_roots(ask, child)]
                if not questions:
                    continue
                if client.era is LEGACY:
                    for ask in questions:
                        if ask.withdrawn:  # the child cancelled it: its client is told
                            if (told := asks.withdrawal(ask, client)) is not None:
                                yield told
                        elif (outgoing := asks.ask_legacy_client(ask, client, call)) is not None:
                            yield events.Ask(outgoing)
                    continue
                if any(ask.withdrawn for ask in questions):  # a modern client cannot be told
                    questions = [ask for ask in questions if not ask.withdrawn]
                    if not questions:
                        continue
                final = asks.ask_modern_client(
                    self.suspensions, questions, request, client, call, waited, task_at_retry=call.task_at_retry
                )
                if final is not None:
                    yield events.Final(final)
                    return
            call.reply = ex.reply()
        except ChildError as exc:
            if call.child_span is not None:
                call.child_span.end(exc, child_id=ex.child_id)
            yield events.Final(response(request.id, error=exc.error_object()))
            return
        answered = self._on_reply(call)
        if isinstance(answered, events.Final):
            yield answered
            return
        async with aclosing(answered):
            async for message in answered:
                yield message

    def _on_reply(self, call: Running) -> events.Final | Emissions:
        """The steps on the child's reply (``call.reply``, read): the client's final message,
        or the answer of the step that gives one."""
        if call.child_span is not None:
            call.child_span.end(reply=call.reply, child_id=call.ex.child_id)
        deps = self.collaborators
        for when, act in call.turn.plan.on_reply[call.info.era]:
            if when is None or when(deps, call):
                answer = act(deps, call)
                if answer is not None:
                    return answer
        assert call.final is not None
        return events.Final(call.final)
