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
with their status: ``GatewayUnavailableError`` (503) and ``Rejected`` (a 400 from the
``Mcp-Param-*`` check, which needs the child's tool schemas and so cannot run in the pure
ingress ladder, or from a ``requestState`` that fails verification).

**A client's roots** come first: a ``tools/call``, ``prompts/get`` or ``resources/read`` of a
client that declares roots, on a legacy server's shared children, runs in the pool keyed by
its roots set (``gateway.relay.client_roots`` learns it: the gateway's own MRTR round for a
modern client, a ``roots/list`` on a legacy session's stream), and a shared child's
``roots/list`` is always answered by the gateway with its pool's roots (``_answer_roots``).

**Questions from the child** (sampling, elicitation; roots on a session's own child) that the
child attributed to this exchange (``gateway.stdio.child``) go to the client when it declared
the capability (``gateway.protocol.inputs``), else the gateway answers them itself:

- a *legacy* client gets each as a JSON-RPC request on this request's stream, with a
  gateway id (``g-N``, unique in its session); its POSTed response is handed to the child
  under the child's own id (``LegacySession.answer_ask``);
- a *modern* client gets an MRTR round: for ``tools/call``, ``prompts/get`` and
  ``resources/read``, the response ends with ``input_required`` and a signed
  ``requestState`` while the child call stays parked (``gateway.relay.suspensions``); the retry
  answers the child and the rest of the call is streamed on the retry, under its id. A
  sampling or elicitation request the client's ``clientCapabilities`` do not cover ends
  the call with -32021 (``requiredCapabilities``) and cancels it at the child.

**A modern child's ``input_required``** for a *legacy* client (digest §7.6 D): each
``inputRequests`` entry goes to the client on this request's stream as a JSON-RPC request
with a gateway id (as above); the client's POSTed results (within the input timeout) go
back to the child in a retry — a new child request with the original params,
``inputResponses`` under the same keys and the child's ``requestState`` unchanged — until
the result is complete (at most ``MAX_INPUT_ROUNDS`` rounds). A session that did not
declare what is asked, or does not answer in time, gets a gateway error (-31006, -31007).
"""

from __future__ import annotations

import math
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping
from contextlib import aclosing
from typing import Final

import anyio

from gateway.errors import ChildError, ClientThrottledError
from gateway.protocol import attribution, bridge, inputs, jsonrpc, loglevels, requeststate, subscriptions, xmcpheader
from gateway.protocol import tasks as task_rules
from gateway.protocol.jsonrpc import JsonObject, Request, Result
from gateway.protocol.outcome import Rejection
from gateway.protocol.roots import Roots
from gateway.protocol.versions import Era
from gateway.relay import client_roots, events, input_rounds, translate
from gateway.relay.catalog import ToolCatalog
from gateway.relay.client import ClientContext
from gateway.relay.events import Emitted
from gateway.relay.input_rounds import MAX_INPUT_ROUNDS as MAX_INPUT_ROUNDS
from gateway.relay.rejected import Rejected as Rejected
from gateway.relay.router import Router
from gateway.relay.shared_settings import SharedSettings
from gateway.relay.suspensions import Call, Holdings, Suspensions, input_responses
from gateway.relay.tasks import TaskStore
from gateway.relay.translate import response as response
from gateway.stdio.ask import ChildAsk
from gateway.stdio.child import StdioChild
from gateway.stdio.exchange import Exchange, ExchangeItem


async def _stragglers(ex: Exchange) -> list[ExchangeItem]:
    """What the child sends within ``ASK_GATHER_WINDOW`` of a question (more questions, most
    likely, written apart from it by a child that asks several at once); nothing is lost
    when the window closes mid-wait (the inbox keeps it for the next read)."""
    got: list[ExchangeItem] = []
    with anyio.move_on_after(ASK_GATHER_WINDOW):  # read at call time (a test widens it)
        while True:
            try:
                got.append(await ex.__anext__())
            except StopAsyncIteration:
                break
            got += ex.ready()
    return got


def _answer_roots(ask: ChildAsk, child: StdioChild) -> bool:
    """Answer a shared child's ``roots/list`` with its pool's roots (``Router``: the roots set
    of its pool's key, else the configured roots, else an error); False for other questions."""
    if ask.method != inputs.ROOTS:
        return False
    reason = "a shared child is given its pool's roots only" if child.spec.roots is not None else "no roots configured"
    ask.answer_locally(inputs.local_answer(ask.request, child.spec.roots, reason), reason)
    return True


INPUT_REQUIRED: Final = "input_required"
ASK_GATHER_WINDOW: Final = 0.010
"""Seconds a modern client's MRTR round waits, after a child's first question, for the others
the child sends with it: questions written at once (from threads, or one after another
without waiting) but read apart then go out in one ``InputRequiredResult``. Measured on the
shared 2-core test machine (docs/bridging.md): three questions a Python child sends from
three threads at once were read together in 4 of 20 runs, and otherwise within 0.2–4.1 ms
(median 0.8 ms) of the first; 10 ms covers that with room, and is all a round costs more. A
legacy client gets each question at once, without this wait."""
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

    async def exchange(
        self, request: Request, client: ClientContext, headers: Mapping[str, str] | None = None
    ) -> AsyncIterator[Emitted]:
        """Run ``request`` on a child of the pool the router picks; for modern clients the
        ``Mcp-Param-*`` headers are checked against the tool's schema first. A modern retry
        carrying the gateway's ``requestState`` resumes the call it names instead."""
        if client.era is Era.MODERN and request.method in task_rules.METHODS:
            yield events.Final(await self.tasks.answer(request, client))  # the gateway's, or a child's own
            return
        state = (request.params or {}).get("requestState")
        round_retry = False  # the retry of the gateway's own roots round (client_roots)
        if client.era is Era.MODERN and requeststate.is_gateway_state(state):
            assert isinstance(state, str)
            round_retry = self._round_retry(request, client, state)
            if not round_retry:
                resumed = self._resume(request, client, state)
                async with aclosing(resumed):  # closed in this task when this exchange is closed
                    async for message in resumed:
                        yield message
                return
        quota = self.suspensions.quota
        if not round_retry and quota is not None and (over := quota.over_limit(client.charged)) is not None:
            raise ClientThrottledError(over, retry_after=1)  # its parked calls count (not the retry's)
        try:
            roots: Roots | None = None  # the client's roots set, when its call runs on children given it
            if request.method in inputs.MRTR_METHODS and await self.router.keys_roots(
                client.principal, client.session_id, headers or {}, client.era, client.capabilities
            ):
                if client.era is Era.MODERN:
                    found = client_roots.from_retry(request) if round_retry else None
                    if isinstance(found, Rejection):
                        raise Rejected(found)
                    if found is None:  # the gateway's own round first: the client's roots for this request
                        expires = self.router.server.spec.input_timeout
                        result = client_roots.round_result(request, client, self.suspensions, expires)
                        yield events.Final(response(request.id, result=result))
                        return
                    roots = found
                else:
                    if client_roots.needs_asking(client):
                        asking = client_roots.ask_session(client, self.router.server.spec.input_timeout)
                        async with aclosing(asking):
                            async for question in asking:
                                yield events.Ask(question)
                    roots = client.session.roots if client.session is not None else None
            if round_retry:  # the round was the gateway's: its inputResponses and state are not the child's
                request = client_roots.without_round(request)
            pool = await self.router.pool_for(
                client.principal,
                client.session_id,
                headers or {},
                era=client.era,
                # Legacy children are told exactly their client's capabilities (the pool key holds them).
                capabilities=None if request.method in UNASKING_HANDSHAKE else client.capabilities,
                roots=roots,  # and a call's children hold its client's roots set only
            )
            tool = attribution.tool_key(request.method, request.params)  # the lease's and the child's
            # The holdings own the lease and the child exchange, so that a parked MRTR call keeps both.
            async with Holdings() as stack:
                # A request that may ask waits for a child where its questions can only be its own.
                child = await stack.enter(
                    pool.lease(  # 503 / 429 propagate
                        client.affinity(),
                        client.charged,
                        request.method,
                        tool,
                    )
                )
                client.bind(child, pool)
                # What follows runs on the child (one generator less per call than a helper's).
                info = child.info
                assert info is not None
                if client.era is Era.MODERN and info.era is Era.LEGACY and request.method == "server/discover":
                    yield events.Final(response(request.id, result=self._discovered(bridge.discover_result(info))))
                    return
                shared = info.era is Era.MODERN or self.settings is not None
                if client.era is Era.LEGACY and request.method == loglevels.SET_LEVEL and shared:
                    # Stored on the session (the HTTP edge did): a modern child gets it as logLevel
                    # with each request, a legacy one the most verbose of its sessions' (prepare).
                    if self.settings is not None:
                        await self.settings.prepare(child, client, request.method)
                    yield events.Final(response(request.id, result={}))
                    return
                as_task = False
                if headers is not None and client.era is Era.MODERN and request.method == "tools/call":
                    await self._check_param_headers(child, request, headers)  # a 400 propagates before any yield
                    as_task = not task_rules.child_serves(info.capabilities) and self.tasks.wants(
                        request, client, self.catalog.task_support(child, request.params)
                    )
                    if as_task:
                        request = self.tasks.with_progress(request)
                log_level = translate.log_level(request, client)
                if self.settings is not None:  # last before the request: what the child holds fits this client
                    await self.settings.prepare(child, client, request.method, log_level, pool)
                params = translate.params_for_child(request.params, client, info)
                try:
                    # The server's request timeout applies; the child's questions come to us (asks=True).
                    # A listen lives until the client leaves: no request timeout (math.inf, not None: the default).
                    timeout = math.inf if request.method == subscriptions.LISTEN else None
                    ex = await stack.enter(
                        child.exchange(
                            request.method, params, timeout=timeout, asks=True, log_level=log_level, tool=tool
                        )
                    )
                except ChildError as exc:
                    yield events.Final(response(request.id, error=exc.error_object()))
                    return
                if as_task:  # the call goes on in the task store, with the lease; the client gets the handle
                    yield events.Final(self.tasks.create(self, Call(child, ex, stack.pop_all()), request, client))
                    return
                driven = self._drive(Call(child, ex, stack), request, client, resumed=False)
                async with aclosing(driven):  # closed in this task: the lease and exchange are left here
                    async for message in driven:
                        yield message
        except ChildError as exc:  # the command cannot start or keeps dying: fail at once, with the reason
            if client.era is Era.MODERN and request.method == "server/discover":
                # The probe succeeds and the next request carries the reason (bridge.unavailable_discover).
                about = {"name": self.router.server.name, "version": self.gateway_version}
                result = bridge.unavailable_discover(exc.error_object(), about)
                yield events.Final(response(request.id, result=result))
                return
            yield events.Final(response(request.id, error=exc.error_object()))

    def drive(self, call: Call, request: Request, client: ClientContext) -> AsyncIterator[Emitted]:
        """A call's events after its child exchange has begun (what a task's run consumes)."""
        return self._drive(call, request, client, resumed=False)

    def _discovered(self, result: JsonObject) -> JsonObject:
        """A ``server/discover`` result as modern clients get it: with the Tasks extension."""
        return task_rules.advertise(result) if self.tasks.enabled else result

    async def _drive(
        self, call: Call, request: Request, client: ClientContext, *, resumed: bool, rounds: int = 0
    ) -> AsyncGenerator[Emitted]:
        """The child's notifications and questions, then its reply, for ``request``'s client.

        Returns early, with the final message yielded, when the call is parked (MRTR) or
        refused (-32021); leaving then closes ``call.stack`` unless the call was parked."""
        info = call.child.info
        assert info is not None
        try:
            async for item in call.ex:
                # What else is read already comes along: notifications in one Batch (one send
                # at the HTTP edge), asks read together as one round.
                notes, asks = self._sort((item, *call.ex.ready()), request, resumed)
                waited = 0.0  # since the first question came: its own input timeout runs already
                if asks and client.era is Era.MODERN and request.method in inputs.MRTR_METHODS:
                    # Questions sent together reach the modern client in one round, even when
                    # the child's writes are read apart (ASK_GATHER_WINDOW).
                    started = anyio.current_time()
                    more_notes, more_asks = self._sort(await _stragglers(call.ex), request, resumed)
                    waited = anyio.current_time() - started
                    notes += more_notes
                    asks += more_asks
                if len(notes) == 1:
                    yield notes[0]
                elif notes:
                    yield events.Batch(tuple(notes))
                if call.child.spec.answers_roots:  # a shared child is given its pool's roots, never a client's
                    asks = [ask for ask in asks if not _answer_roots(ask, call.child)]
                if not asks:
                    continue
                if client.era is Era.LEGACY:
                    for ask in asks:
                        if (outgoing := self._ask_legacy_client(ask, client, call)) is not None:
                            yield events.Ask(outgoing)
                    continue
                final = self._ask_modern_client(asks, request, client, call, waited)
                if final is not None:
                    yield events.Final(final)
                    return
            reply = call.ex.reply()
        except ChildError as exc:
            yield events.Final(response(request.id, error=exc.error_object()))
            return
        if request.method == "tools/list" and isinstance(reply, Result):
            reply = Result(reply.id, self.catalog.visible_tools(call.child, reply.result))
        if (
            client.era is Era.LEGACY
            and info.era is Era.MODERN
            and isinstance(reply, Result)
            and reply.result.get("resultType") == INPUT_REQUIRED
        ):
            # A modern child's input_required, for a legacy client: ask it, retry the child.
            round_ = input_rounds.input_round(self._next_round, call.child, request, client, reply.result, rounds)
            async with aclosing(round_):
                async for message in round_:
                    yield message
            return
        final = translate.reply_for_client(request, reply, client, info)
        result = final.get("result")
        if client.era is Era.MODERN and isinstance(result, dict):
            if request.method == "server/discover":
                final = {**final, "result": self._discovered(result)}
            elif info.era is Era.MODERN and task_rules.is_task_result(result):  # a child's own task
                final = {**final, "result": self.tasks.adopt(call.child, result, client)}
        yield events.Final(final)

    def _next_round(self, call: Call, request: Request, client: ClientContext, rounds: int) -> AsyncGenerator[Emitted]:
        """The child's retry with the client's answers (``input_rounds``), streamed as any call."""
        return self._drive(call, request, client, resumed=False, rounds=rounds)

    @staticmethod
    def _sort(
        items: Iterable[ExchangeItem], request: Request, resumed: bool
    ) -> tuple[list[events.Progress | events.Notification], list[ChildAsk]]:
        """The client's notifications and the child's questions among ``items``."""
        notes: list[events.Progress | events.Notification] = []
        asks: list[ChildAsk] = []
        for got in items:
            if isinstance(got, ChildAsk):
                asks.append(got)
            elif (note := translate.note_for_client(got, request, resumed)) is not None:
                notes.append(events.notification(note))
        return notes, asks

    # -- questions from the child ---------------------------------------------------------

    @staticmethod
    def _ask_legacy_client(ask: ChildAsk, client: ClientContext, call: Call) -> JsonObject | None:
        """The request to put on a legacy client's stream, or None when the gateway answered."""
        session = client.session
        if session is None or not client.accepts_requests:
            reason = "the client's request cannot carry a request back (a batch)"
        elif not inputs.is_declared(client.capabilities, ask.method, ask.params):
            reason = f"the client did not declare the {translate.capability_name(ask)} capability"
        else:
            gateway_id: str = session.track_ask(ask)
            return Request(gateway_id, ask.method, ask.params).to_dict()
        # A clear error, not a made-up answer: this client is there, it just cannot be asked.
        ask.answer_locally(inputs.local_answer(ask.request, call.child.spec.roots, reason, decline=False), reason)
        return None

    def _ask_modern_client(
        self, asks: list[ChildAsk], request: Request, client: ClientContext, call: Call, waited: float = 0.0
    ) -> JsonObject | None:
        """An MRTR round: the final message (``input_required`` or -32021), or None when the
        gateway answered every question itself and the call goes on."""
        roots = call.child.spec.roots
        forward: dict[str, ChildAsk] = {}
        missing: list[ChildAsk] = []
        for ask in asks:
            if request.method not in inputs.MRTR_METHODS:
                reason = f"{request.method} cannot return input_required to a 2026-07-28 client"
            elif inputs.is_declared(client.capabilities, ask.method, ask.params):
                forward[f"k{len(forward) + 1}"] = ask
                continue
            elif ask.method == inputs.ROOTS:  # roots have a local answer: never fail the call over them
                reason = "the request's clientCapabilities do not declare roots"
            else:
                missing.append(ask)
                continue
            ask.answer_locally(inputs.local_answer(ask.request, roots, reason), reason)
        if missing:
            # The caller returns after this final message: the call is cancelled at the child,
            # and its end answers every question still open.
            required = inputs.merge_capabilities(*(inputs.required_capability(a.method, a.params) for a in missing))
            return response(request.id, error=inputs.missing_capability_error(missing[0].method, required))
        if not forward:
            return None
        if not self.suspensions.can_park:
            for ask in forward.values():
                reason = "the gateway holds too many calls for input now"
                ask.answer_locally(inputs.local_answer(ask.request, roots, reason), reason)
            return None
        return self._park(call, forward, request, client, waited)

    def _park(
        self, call: Call, asks: dict[str, ChildAsk], request: Request, client: ClientContext, waited: float = 0.0
    ) -> JsonObject:
        """Hold the call for the retry, until the input timeout counted from the first
        question (``waited``: seconds since, spent gathering the others)."""
        parked = Call(call.child, call.ex, call.stack.pop_all())  # the lease and exchange now outlive this response
        timeout = max(call.child.spec.input_timeout - waited, 0.0)
        token = self.suspensions.park(parked, asks, request, client.principal, timeout, charged=client.charged)
        wanted = {key: inputs.input_request(ask.method, ask.params) for key, ask in asks.items()}
        return response(request.id, result=inputs.input_required_result(wanted, token))

    def _round_retry(self, request: Request, client: ClientContext, state: str) -> bool:
        """Whether ``state`` is the gateway's own roots round's (the call starts now), not a
        parked call's (it resumes); a round's state that fails its checks is a 400."""
        checked = self.suspensions.check_round(state, request, client.principal)
        if isinstance(checked, Rejection):
            raise Rejected(checked)
        return checked

    async def _resume(self, request: Request, client: ClientContext, state: str) -> AsyncGenerator[Emitted]:
        """A modern retry: answer the parked call's questions, then stream the rest of it."""
        taken = self.suspensions.take(state, request, client.principal)
        if isinstance(taken, Rejection):
            raise Rejected(taken)
        call = taken.call
        client.bind(call.child)
        async with call.stack:
            given = input_responses(request.params)
            unanswered: dict[str, ChildAsk] = {}
            for key, ask in taken.asks.items():
                if key in given:
                    ask.answer_result(given[key])
                elif not ask.is_answered:
                    unanswered[key] = ask
            if unanswered and self.suspensions.can_park:  # MRTR §Error Handling: ask again, no error
                yield events.Final(self._park(call, unanswered, request, client))
                return
            for ask in unanswered.values():
                reason = "the retry left it unanswered"
                ask.answer_locally(inputs.local_answer(ask.request, call.child.spec.roots, reason), reason)
            driven = self._drive(call, request, client, resumed=True)
            async with aclosing(driven):
                async for message in driven:
                    yield message

    # -- ordinary requests ----------------------------------------------------------------

    async def _check_param_headers(self, child: StdioChild, request: Request, headers: Mapping[str, str]) -> None:
        params = request.params or {}
        name = params.get("name")
        if not isinstance(name, str):
            return  # the child answers a call without a tool name
        header_params = await self.catalog.header_params(child, name)
        hidden = self.catalog.hidden_reason(child, name)
        if hidden is not None:  # not in the tools/list HTTP clients get, so not callable either
            error = jsonrpc.error_object(
                jsonrpc.INVALID_PARAMS, f"tool {name!r} is not available over HTTP: {hidden}", {"tool": name}
            )
            raise Rejected(Rejection(200, error, request.id))
        arguments = params.get("arguments")
        rejection = xmcpheader.check_param_headers(
            header_params, arguments if isinstance(arguments, dict) else None, headers, request_id=request.id
        )
        if rejection is not None:
            raise Rejected(rejection)
