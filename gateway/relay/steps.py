"""The steps of one exchange, in order: which requests each is for, and what it does.

``Relay.exchange`` (``gateway.relay.exchange``) runs this sequence for a request. Each step
names the client eras and methods it is for (sorted once, at import, into a ``Plan`` per era
and method, so a request only meets the steps that can apply to it), a step on the child or
its reply the child eras too (the plan holds those by child era), and, where needed, a
predicate. A step's predicate and action take its collaborators (``Collaborators``) and what
its stretch works on (``gateway.relay.turn``): an ``Admission`` before the lease, a ``Leased``
on the child, the ``Running`` call on the reply. Its action lets the exchange go on (it noted
what it learned, or checked something: a refusal raises before anything is yielded) or answers
the client, which ends the exchange (all but ``roots_asked``).

Before a child (``BEFORE_CHILD``):

1. ``tasks``: a modern ``tasks/get``, ``tasks/update`` or ``tasks/cancel``: the task store
   answers it (a task of the gateway's, or a child's own; ``TaskStore.answer``).
2. ``no_tasks``: a legacy session's ``tasks/*`` (either revision's) or
   ``subscriptions/listen``: -32601, as the gateway declares no tasks to sessions; never sent
   to a child, whose tasks are every client's (``taskbridge`` rule 7).
3. ``retry``: a modern request whose ``requestState`` is one of the gateway's: a parked call's
   retry resumes that call (``asks.resume``: no lease, no new child exchange); the retry of
   the gateway's own round (roots, URL elicitation) starts its call now, with the roots it
   carries and without the round's ``inputResponses`` and ``requestState`` (a URL the user
   declined to visit ends it instead: -31006); a state that fails its checks is a 400.
4. ``quota``: a client whose calls hold too many unanswered questions
   (``--max-parked-per-principal``; not the roots round's retry): 429.
5. ``roots_round``: a modern ``tools/call``, ``prompts/get`` or ``resources/read`` of a client
   that declares roots, where its calls run on children given its roots set
   (``Router.keys_roots``; ``gateway.relay.client_roots``): the roots the round's retry
   carries, else the gateway's own MRTR round for them (``input_required``).
6. ``roots_asked``: the same for a legacy session: asked for its roots on this call's stream
   when it must be (``client_roots.needs_asking``), then the steps go on. Its
   ``resources/subscribe`` and ``resources/unsubscribe`` too: a subscription is made on the
   children its calls run on, so the ``resources/updated`` its own changes cause reach it.

Then the lease: ``router.pool_for`` → ``pool.lease`` → ``client.bind``. A modern call that
its client left parked before (the same method and params, no ``requestState``), sent again
while that client is at its cap of parked calls in the pool, first ends that oldest round
(``start_over``): the new call takes its slot instead of a 429. From here a child that
cannot start or keeps dying (``ChildError``) ends the exchange with its error (for a modern
``server/discover``: a discover result that names it, ``bridge.unavailable_discover``).

On the child (``ON_CHILD``):

7. ``discover``: a modern ``server/discover`` on a legacy child: the bridge answers it.
8. ``set_level``: a legacy ``logging/setLevel`` where children are shared: kept on the session
   (the HTTP edge did), answered ``{}``.
9. ``param_headers``: a modern ``tools/call`` over HTTP: its ``Mcp-Param-*`` headers against
   the tool's schema, and a tool hidden from HTTP clients (``Rejected``: 400). A tool already
   known to declare no header parameter and to be callable (most calls) skips it.
10. ``task_required``: a modern ``tools/call`` of a tool the child marks
   ``execution.taskSupport: "required"``, from a client that did not opt in to the Tasks
   extension (while tasks are on): 400, -32021 naming the extension in ``requiredCapabilities``.
11. ``child_task``: a modern ``tools/call`` that becomes a task on a legacy child with
    2025-11-25 tasks, of a tool it marks ``optional`` or ``required``
    (``gateway.protocol.taskbridge``): the call goes to the child task-augmented
    (``params.task``), and its handle is bridged on the reply (``bridge_task``).
12. ``task``: a modern ``tools/call`` that becomes a task (the client opted in, the tool allows
    it, the child keeps no tasks itself; ``TaskStore.wants``): given a progressToken, its
    child exchange opened and handed to the task store; the answer is the ``CreateTaskResult``.
    When the child's first sign (within ``--task-first-round``) is a question, the call runs
    on here instead: round 1 is answered synchronously, and its retry makes the task
    (``asks.as_task``).
13. ``legacy_task``: a legacy session's ``tools/call`` on a legacy child that keeps tasks, of
    a tool the child marks ``required``: sent to the child task-augmented (its tool list
    loaded first, once); ``task_to_end`` waits for the outcome.
14. ``subscriptions``: a legacy session's ``resources/subscribe`` / ``unsubscribe`` on a legacy
    child: counted with every other holder at that child, the child told only at the first
    and after the last (``gateway.relay.session_subscriptions``); answered by the gateway.

Then the child exchange (``open_call``: a shared child's settings made to fit this client,
the params for the child's era, ``child.exchange``; the ``Running`` call) and ``Relay.run``: the child's
notifications and questions (``gateway.relay.asks``), then its reply.

On the reply (``ON_REPLY``):

15. ``visible_tools``: a ``tools/list`` result: tools invalid over HTTP left out
    (``ToolCatalog.visible_tools``).
16. ``plain_tools``: a ``tools/list`` result for a legacy session: no tool's
    ``execution.taskSupport`` (``taskbridge.without_task_support``).
17. ``input_round``: a modern child's ``input_required``, for a legacy client: asked on the
    client's stream, the child retried with the answers (``gateway.relay.input_rounds``).
18. ``task_to_end``: a legacy child's ``CreateTaskResult`` for a legacy session's call: the
    child's ``tasks/result`` driven as the call, on its stream and lease (its questions to
    the session, its outcome the answer; the child's task cancelled if the client leaves
    first: ``task_bridge.run_to_end``).
19. ``translate``: the reply in the client's era, under its id (``translate.reply_for_client``).
20. ``url_round``: a child's -32042 (URL elicitation required) for a modern ``tools/call``,
    ``prompts/get`` or ``resources/read``: the gateway's own round (``input_required``, each
    URL an ``elicitation/create`` of mode ``url``, ``gateway.protocol.urlelicitation``); its
    retry sends the request again (``retry``), or ends it when the user declined. Without
    ``elicitation.url`` in the client's capabilities: -32021.
21. ``legacy_url``: a child's -32042 for a legacy session: passed through (a modern child's
    with an ``elicitationId`` for each), its elicitation ids kept on the session for their
    completion notifications; -31006 for a session that did not declare ``elicitation.url``.
22. ``bridge_task``: a legacy child's ``CreateTaskResult`` for a modern client that opted in:
    a task of the gateway's, whose run (with the lease) waits on the child's task
    (``TaskStore.bridge``, ``gateway.relay.task_bridge``); the answer is the gateway's handle.
23. ``discover_tasks``: a modern ``server/discover`` result: the Tasks extension advertised.
24. ``adopt_task``: a modern child's own task handle, for a modern client: under a gateway id.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import aclosing
from typing import Final

import anyio

from gateway.errors import ChildError, ClientThrottledError
from gateway.protocol import (
    bridge,
    inputs,
    jsonrpc,
    loglevels,
    requeststate,
    roots,
    subscriptions,
    taskbridge,
    urlelicitation,
    versions,
    xmcpheader,
)
from gateway.protocol import tasks as task_rules
from gateway.protocol.handshake import META_SERVER_INFO
from gateway.protocol.inputs import MRTR_METHODS, ROOTS_CAPABILITY
from gateway.protocol.jsonrpc import URL_ELICITATION_REQUIRED, ErrorReply, JsonObject, Result
from gateway.protocol.outcome import Rejection
from gateway.protocol.versions import Era
from gateway.relay import asks, client_roots, events, input_rounds, task_bridge, translate
from gateway.relay.catalog import Known
from gateway.relay.events import Emitted
from gateway.relay.rejected import Rejected
from gateway.relay.suspensions import ROOTS_ROUND, URL_ROUND, Call, Suspension, input_responses
from gateway.relay.translate import response
from gateway.relay.turn import Admission, Collaborators, Emissions, Leased, Plan, ReplyStep, Running, Step, Turn
from gateway.stdio.ask import ChildAsk
from gateway.stdio.child import ChildCall, StdioChild
from gateway.stdio.exchange import Exchange
from gateway.stdio.pool import Pool

log = logging.getLogger("gateway.mrtr")

INPUT_REQUIRED: Final = "input_required"
DISCOVER: Final = "server/discover"
MODERN: Final = frozenset({Era.MODERN})
LEGACY: Final = frozenset({Era.LEGACY})
BOTH: Final = frozenset(Era)


async def only(message: Emitted) -> AsyncGenerator[Emitted]:
    """An answer of one event."""
    yield message


# -- before a child -------------------------------------------------------------------------


async def answer_tasks(deps: Collaborators, at: Admission) -> Emissions:
    return only(events.Final(await deps.tasks.answer(at.turn.request, at.turn.client)))


async def refuse_legacy_tasks(deps: Collaborators, at: Admission) -> Emissions:
    request = at.turn.request
    return only(events.Final(response(request.id, error=taskbridge.legacy_refusal(request.method))))


def carries_gateway_state(deps: Collaborators, at: Admission) -> bool:
    state = (at.turn.request.params or {}).get("requestState")
    return state is not None and requeststate.is_gateway_state(state)  # (most requests carry none)


async def take_retry(deps: Collaborators, at: Admission) -> Emissions | None:
    turn, suspensions = at.turn, deps.suspensions
    request, client = turn.request, turn.client
    state = (request.params or {}).get("requestState")
    assert isinstance(state, str)
    checked = suspensions.check_round(state, request, client.principal)
    if isinstance(checked, Rejection):
        raise Rejected(checked)
    if checked is not None:  # the gateway's own round (roots, URL): its inputResponses and state are not the child's
        refused = urlelicitation.refusal(input_responses(request.params))
        if refused is not None:  # the user did not visit the server's URL: not sent again
            raise Rejected(Rejection(200, urlelicitation.declined_error(refused), request.id))
        # A roots round's retry goes on with the call admitted; a URL round's sends it anew, so
        # its client's quota applies (the token is not single-use: replays must not pass it by).
        at.round_retry = checked == ROOTS_ROUND
        at.round_roots = client_roots.from_retry(request)
        at.turn = turn.with_request(client_roots.without_round(request))
        return None
    taken = suspensions.take(state, request, client.principal)
    if isinstance(taken, Rejection):
        raise Rejected(taken)
    return asks.resume(deps, turn, taken)


def over_quota(deps: Collaborators, at: Admission) -> bool:
    quota = deps.suspensions.quota  # its parked calls count (not the round's retry)
    return not at.round_retry and quota is not None and quota.over_limit(at.turn.client.charged) is not None


async def refuse_over_quota(deps: Collaborators, at: Admission) -> None:
    quota = deps.suspensions.quota
    assert quota is not None
    over = quota.over_limit(at.turn.client.charged)
    assert over is not None
    raise ClientThrottledError(over, retry_after=1)


def declares_roots(deps: Collaborators, at: Admission) -> bool:
    """Whether the client declares roots (``Router.keys_roots`` asks the rest)."""
    return ROOTS_CAPABILITY in at.turn.client.capabilities


async def _keys_roots(deps: Collaborators, turn: Turn) -> bool:
    client = turn.client
    return await deps.router.keys_roots(
        client.principal, client.session_id, turn.headers or {}, client.era, client.capabilities
    )


async def roots_round(deps: Collaborators, at: Admission) -> Emissions | None:
    turn = at.turn
    if not await _keys_roots(deps, turn):
        return None
    found = at.round_roots
    if isinstance(found, Rejection):
        raise Rejected(found)
    if found is None:  # the gateway's own round first: the client's roots for this request
        await headers_before_round(deps, turn)
        timeout = deps.router.server.spec.input_timeout
        result = client_roots.round_result(turn.request, turn.client, deps.suspensions, timeout)
        return only(events.Final(response(turn.request.id, result=result)))
    at.roots = found
    return None


async def headers_before_round(deps: Collaborators, turn: Turn) -> None:
    """A ``tools/call``'s ``Mcp-Param-*`` headers checked before any round (issue #36): against
    the tool as a started child of the server lists it (the same tools whatever the pool)."""
    if turn.request.method != "tools/call" or turn.headers is None:
        return
    client = turn.client
    child = deps.router.started_child(client.principal, client.session_id, turn.headers)
    if child is not None:
        await _check_param_headers(deps, turn, child)


async def roots_asked(deps: Collaborators, at: Admission) -> Emissions | None:
    if not await _keys_roots(deps, at.turn):
        return None
    session = at.turn.client.session
    if client_roots.needs_asking(at.turn.client):
        return _ask_session(deps, at)
    at.roots = session.roots if session is not None else None
    return None


async def _ask_session(deps: Collaborators, at: Admission) -> AsyncGenerator[Emitted]:
    asking = client_roots.ask_session(at.turn.client, deps.router.server.spec.input_timeout)
    async with aclosing(asking):
        async for question in asking:
            yield events.Ask(question)
    session = at.turn.client.session
    at.roots = session.roots if session is not None else None


ROOTS_FOLLOWING: Final = MRTR_METHODS | subscriptions.SUBSCRIBE_METHODS
"""A legacy session's requests that run where its roots are (its subscriptions with its calls)."""

BEFORE_CHILD: Final[tuple[Step[Admission], ...]] = (
    Step("tasks", MODERN, task_rules.METHODS, None, answer_tasks),
    Step("no_tasks", LEGACY, taskbridge.LEGACY_REFUSED, None, refuse_legacy_tasks),
    Step("retry", MODERN, None, carries_gateway_state, take_retry),
    Step("quota", BOTH, None, over_quota, refuse_over_quota),
    Step("roots_round", MODERN, MRTR_METHODS, declares_roots, roots_round),
    Step("roots_asked", LEGACY, ROOTS_FOLLOWING, declares_roots, roots_asked, ends=False),
)


# -- the lease ------------------------------------------------------------------------------


def start_over(deps: Collaborators, turn: Turn, pool: Pool) -> Suspension | None:
    """Before the lease: a modern call (``tools/call``, ``prompts/get``, ``resources/read``)
    with no ``requestState``, whose client is at its cap of parked calls in ``pool`` and left
    one of them parked for this same request, ends that round (the oldest): the caller waits
    until its call is closed (``Suspension.closed``), so the lease that follows finds its slot
    free (not a 429). Decided without waiting: most calls have nothing to wait for."""
    request, client, cap = turn.request, turn.client, pool.settings.max_parked_per_principal
    if (
        client.era is not versions.MODERN
        or request.method not in MRTR_METHODS
        or "requestState" in (request.params or {})
    ):
        return None
    if not cap or pool.dispatch.parked(client.charged) < cap:  # ``pool.parked``: one call less
        return None
    ended = deps.suspensions.supersede(client.charged, request, pool.children())
    if ended is not None:
        log.info("%s: %s sent again at its client's cap: its oldest round ended", pool.label, request.method)
    return ended


# -- on the child ---------------------------------------------------------------------------


async def answer_discover(deps: Collaborators, on: Leased) -> Emissions:
    result = bridge.discover_result(on.info)
    if deps.tasks.enabled:  # as modern clients get it: with the Tasks extension
        result = task_rules.advertise(result)
    return only(events.Final(response(on.turn.request.id, result=result)))


def always(deps: Collaborators, on: Leased) -> bool:
    return True


async def answer_set_level(deps: Collaborators, on: Leased) -> Emissions:
    # Stored on the session (the HTTP edge did): a modern child gets it as logLevel with each
    # request, a legacy one the most verbose of its sessions' (prepare).
    turn = on.turn
    if (fitting := deps.settings.prepare(on.child, turn.client, turn.request.method)) is not None:
        await fitting
    return only(events.Final(response(turn.request.id, result={})))


def params_to_check(deps: Collaborators, on: Leased) -> bool:
    """Over HTTP, unless the tool is known to declare no header parameter and to be callable
    (its child's list is loaded: the usual call), when there is nothing to check: then no
    coroutine is made for the check. A call without a tool name is the child's to answer."""
    turn = on.turn
    if turn.headers is None:
        return False
    name = (turn.request.params or {}).get("name")
    if not isinstance(name, str):
        return False
    known = on.known = deps.catalog.known(on.child, name)  # (the steps after it read it there)
    return known is None or bool(known[0]) or known[1] is not None


async def check_param_headers(deps: Collaborators, on: Leased) -> None:
    on.known = await _check_param_headers(deps, on.turn, on.child)


async def _check_param_headers(deps: Collaborators, turn: Turn, child: StdioChild) -> Known | None:
    """``turn``'s ``Mcp-Param-*`` headers against the tool's schema as ``child`` lists it; the
    tool as the list has it (None: the call names no tool)."""
    request, headers, catalog = turn.request, turn.headers, deps.catalog
    assert headers is not None
    params = request.params or {}
    name = params.get("name")
    if not isinstance(name, str):
        return None  # the child answers a call without a tool name
    known = catalog.known(child, name)  # the usual case: the child's tools are listed already
    if known is None:
        header_params = await catalog.header_params(child, name)
        known = header_params, catalog.hidden_reason(child, name), catalog.task_support(child, params)
    header_params, hidden, _ = known
    if hidden is not None:  # not in the tools/list HTTP clients get, so not callable either
        error = jsonrpc.error_object(
            jsonrpc.INVALID_PARAMS, f"tool {name!r} is not available over HTTP: {hidden}", {"tool": name}
        )
        raise Rejected(Rejection(200, error, request.id))
    if not header_params:  # most tools declare none
        return known
    arguments = params.get("arguments")
    rejection = xmcpheader.check_param_headers(
        header_params, arguments if isinstance(arguments, dict) else None, headers, request_id=request.id
    )
    if rejection is not None:
        raise Rejected(rejection)
    return known


def _task_support(deps: Collaborators, on: Leased) -> str | None:
    """The called tool's ``execution.taskSupport`` (``ToolCatalog.task_support``): as the
    ``param_headers`` step found it (every call over HTTP that names a tool), else the catalog's."""
    known = on.known
    return known[2] if known is not None else deps.catalog.task_support(on.child, on.turn.request.params)


def runs_only_as_task(deps: Collaborators, on: Leased) -> bool:
    turn = on.turn
    return (
        turn.headers is not None  # the tool list is loaded (param_headers)
        and deps.tasks.policy.enabled  # (``TaskStore.enabled``, without the property's call)
        # The tool first: most are not ``required``, and ``becomes_task`` asks ``opted_in`` next.
        # (``_task_support``, spelled out for the usual call: the tool as ``param_headers`` found it.)
        and (known[2] if (known := on.known) is not None else _task_support(deps, on)) == "required"
        and not task_rules.opted_in(turn.client.capabilities)
    )


async def refuse_untasked(deps: Collaborators, on: Leased) -> None:
    request = on.turn.request
    name = (request.params or {}).get("name")
    raise Rejected(Rejection(400, taskbridge.required_error(str(name)), request.id))


def child_takes_task(deps: Collaborators, on: Leased) -> bool:
    turn = on.turn
    if not (turn.headers is not None and task_rules.opted_in(turn.client.capabilities) and on.info.takes_tasks):
        return False
    support = _task_support(deps, on)
    return support in taskbridge.TASK_SUPPORT and deps.tasks.wants(turn.request, turn.client, support)


async def ask_child_for_task(deps: Collaborators, on: Leased) -> None:
    """The call goes to the child task-augmented (``open_call``); its handle is bridged on the
    reply. The client's request stays as it is (a round's retry is checked against it)."""
    on.bridged = True


def child_keeps_tasks(deps: Collaborators, on: Leased) -> bool:
    return on.info.takes_tasks


async def task_if_required(deps: Collaborators, on: Leased) -> None:
    """A legacy session's call of a tool its child runs only as a task goes to the child
    task-augmented (``open_call``); the ``task_to_end`` reply step waits for its outcome."""
    params = on.turn.request.params
    name = params.get("name") if params else None
    if isinstance(name, str):
        await deps.catalog.header_params(on.child, name)  # the child's tool list, loaded once
        support = deps.catalog.task_support(on.child, params)
        if support == "required":
            on.bridged = True
        elif params is not None and "task" in params:
            # The session's own ``task`` (it was declared no tasks, so the gateway ignores it,
            # as a receiver without tasks must): kept for a tool that takes one (the handle is
            # waited for), else dropped, so that the call runs, and is cancelled, as any call.
            on.bridged = True if support in taskbridge.TASK_SUPPORT else None


def becomes_task(deps: Collaborators, on: Leased) -> bool:
    turn = on.turn
    return (
        turn.headers is not None
        and not on.bridged
        # A client that does not opt in (most calls) is told apart before the tool is looked up.
        and task_rules.opted_in(turn.client.capabilities)
        and not on.info.serves_tasks
        and deps.tasks.wants(turn.request, turn.client, _task_support(deps, on))
    )


async def start_task(deps: Collaborators, on: Leased) -> Emissions:
    turn = on.turn.with_request(deps.tasks.with_progress(on.turn.request))
    running = await open_call(deps, on, turn)
    if not isinstance(running, Running):
        return only(running)
    if await asks_first(running.ex, deps.tasks.policy.first_round):
        # Round 1 is answered here, synchronously, before any task exists (SEP-2663, MRTR
        # composition): the round's retry makes the task (``asks.as_task``).
        running.task_at_retry = True
        return deps.relay.run(running)
    # The call goes on in the task store, with the lease; the client gets the handle.
    call = Call(running.child, running.ex, running.stack.pop_all(), runs_as_task=True)
    return only(events.Final(deps.tasks.create(deps.relay, call, turn.request, turn.client)))


async def asks_first(ex: Exchange, wait: float) -> bool:
    """Whether the child's first sign for a call, within ``wait`` seconds, is a question (or a
    modern child's ``input_required``): then its first answer is a round, not a task. No
    wait (0): never."""
    if wait <= 0:
        return False
    with anyio.move_on_after(wait):
        first = await ex.first_sign()
        if isinstance(first, ChildAsk):
            return True
        return isinstance(first, Result) and first.result.get("resultType") == INPUT_REQUIRED
    return False


async def hold_subscription(deps: Collaborators, leased: Leased) -> Emissions | None:
    session, held = leased.turn.client.session, deps.session_subscriptions
    if session is None or held is None:
        return None  # forwarded as it is
    return only(events.Final(await held.handle(session, leased.turn.request, leased.child, leased.pool)))


ON_CHILD: Final[tuple[Step[Leased], ...]] = (
    Step("discover", MODERN, frozenset({DISCOVER}), None, answer_discover, child_eras=LEGACY),
    Step("set_level", LEGACY, frozenset({loglevels.SET_LEVEL}), always, answer_set_level),
    Step("param_headers", MODERN, frozenset({"tools/call"}), params_to_check, check_param_headers),
    Step("task_required", MODERN, task_rules.TASK_METHODS, runs_only_as_task, refuse_untasked),
    Step("child_task", MODERN, task_rules.TASK_METHODS, child_takes_task, ask_child_for_task, child_eras=LEGACY),
    Step("task", MODERN, task_rules.TASK_METHODS, becomes_task, start_task),
    Step("legacy_task", LEGACY, task_rules.TASK_METHODS, child_keeps_tasks, task_if_required, child_eras=LEGACY),
    Step("subscriptions", LEGACY, subscriptions.SUBSCRIBE_METHODS, None, hold_subscription, child_eras=LEGACY),
)


async def open_call(deps: Collaborators, on: Leased, turn: Turn) -> Running | events.Final:
    """Begin the child exchange of ``turn`` (``on.turn``, or its request replaced), held by
    ``on.stack``: the call as ``Relay.run`` drives it, or the error, as the client's final
    message, when the child cannot take it."""
    request, client, child, info = turn.request, turn.client, on.child, on.info
    log_level = translate.log_level(request, client)
    # Last before the request, on a legacy child: what the child holds fits this client.
    if info.era is versions.LEGACY and (
        fitting := deps.settings.prepare(child, client, request.method, log_level, on.pool)
    ):
        await fitting
    params = translate.params_for_child(request.params, client, info)
    if on.bridged:
        params = taskbridge.task_params(params, deps.tasks.policy.ttl)
    elif on.bridged is None and params is not None:
        params = {key: value for key, value in params.items() if key != "task"}
    span = None
    if client.span is not None:  # traced: the child's _meta names the gateway's span, not the client's
        on.child_span = span = client.span.child_exchange(request.method, request.params, child)
        params = bridge.own_trace(params, span.carrier())
    # The server's request timeout applies; the child's questions come to us (asks=True).
    # A listen lives until the client leaves: no request timeout (math.inf, not None: the default).
    timeout = math.inf if request.method == subscriptions.LISTEN else None
    try:
        # ``child.exchange(..., asks=True, ...)`` spelled out: one call less per request.
        call = ChildCall(child, request.method, params, timeout, True, True, log_level, on.tool)
        # ``on.stack.enter(call)`` without a coroutine: the usual request is entered at once.
        ex = call.enter_now()
        if not isinstance(ex, Exchange):
            ex = await ex
        on.stack.hold(call)
    except ChildError as exc:
        if span is not None:
            span.end(exc)
        return events.Final(response(request.id, error=exc.error_object()))
    return Running(turn, child, info, ex, on.stack, child_span=span)


# -- on the reply ---------------------------------------------------------------------------


def replied_result(deps: Collaborators, call: Running) -> bool:
    return isinstance(call.reply, Result)


def show_visible_tools(deps: Collaborators, call: Running) -> None:
    reply = call.reply
    assert isinstance(reply, Result)
    call.reply = Result(reply.id, deps.catalog.visible_tools(call.child, reply.result))


def hide_task_support(deps: Collaborators, call: Running) -> None:
    reply = call.reply
    assert isinstance(reply, Result)
    call.reply = Result(reply.id, taskbridge.without_task_support(reply.result))


def made_task_for_session(deps: Collaborators, call: Running) -> bool:
    # The call's own reply, not the ``tasks/result`` that ``task_to_end`` waits in.
    reply = call.reply
    return (
        type(reply) is Result
        and "task" in reply.result  # (most results are not a handle: no call past this)
        and call.ex.method in task_rules.TASK_METHODS
        and taskbridge.child_task(reply.result) is not None
    )


def _childs_task(call: Running) -> JsonObject:
    """The child's task in its reply, which a step's predicate found to be a handle."""
    reply = call.reply
    assert isinstance(reply, Result)
    child_task = taskbridge.child_task(reply.result)
    assert child_task is not None
    return child_task


def task_to_end(deps: Collaborators, call: Running) -> Emissions:
    return task_bridge.run_to_end(deps.relay, call, _childs_task(call)["taskId"])


def wants_input(deps: Collaborators, call: Running) -> bool:
    reply = call.reply
    return isinstance(reply, Result) and reply.result.get("resultType") == INPUT_REQUIRED


def input_round(deps: Collaborators, call: Running) -> Emissions:
    reply = call.reply
    assert isinstance(reply, Result)
    turn = call.turn
    return input_rounds.input_round(
        deps.relay.next_round, call.child, turn.request, turn.client, reply.result, call.rounds
    )


def translate_reply(deps: Collaborators, call: Running) -> None:
    assert call.reply is not None
    call.final = translate.reply_for_client(call.turn.request, call.reply, call.turn.client, call.info)


def url_required(deps: Collaborators, call: Running) -> bool:
    reply = call.reply
    return type(reply) is ErrorReply and reply.error.get("code") == URL_ELICITATION_REQUIRED


def url_round(deps: Collaborators, call: Running) -> None:
    """A child's -32042 (URL elicitation required), for a modern client: the gateway's own
    round asking the client to have its user visit each URL; its retry sends the request to
    the server again (``take_retry``). ``translate`` made it -31006 already: that stands when
    the error carries no usable URL."""
    reply = call.reply
    assert isinstance(reply, ErrorReply)
    turn = call.turn
    request, client = turn.request, turn.client
    found = urlelicitation.elicitations(reply.error)
    if found is None:
        return
    if not urlelicitation.declares_url(client.capabilities):
        call.final = response(request.id, error=urlelicitation.missing_capability_error(reply.error))
        return
    wanted = urlelicitation.round_requests(found)
    if deps.router.may_key_roots(client.capabilities):
        # Its retry may run on children given the client's roots: asked now, not in a round more.
        wanted[roots.ROOTS_INPUT_KEY] = roots.roots_request()
    timeout = deps.router.server.spec.input_timeout
    token = deps.suspensions.mint_round(request, client.principal, timeout, kind=URL_ROUND)
    result = inputs.input_required_result(wanted, token)
    if call.info.server_info:  # the server's, as on its own results (basic/index §_meta: SHOULD)
        result["_meta"] = {META_SERVER_INFO: call.info.server_info}
    call.final = response(request.id, result=result)
    log.info("%s: %s needs its user at %d URL(s): asked in a round", call.child.spec.name, request.method, len(found))


def url_for_legacy(deps: Collaborators, call: Running) -> None:
    """A legacy child's -32042 for a legacy session: passed through as it is, its ids kept so
    that the child's ``notifications/elicitation/complete`` reaches the session; -31006 for a
    session that did not declare ``elicitation.url`` (``urlelicitation.undeclared_error``)."""
    reply, client = call.reply, call.turn.client
    assert isinstance(reply, ErrorReply)
    if not urlelicitation.declares_url(client.capabilities):
        call.final = response(call.turn.request.id, error=urlelicitation.undeclared_error(reply.error))
        return
    error = reply.error
    if call.info.era is Era.MODERN:  # a modern child's (it must not, but the SDK's may): ids added
        error = urlelicitation.with_legacy_ids(error, input_rounds.new_elicitation_id)
        call.final = response(call.turn.request.id, error=error)
    if client.session is not None:
        client.session.url_elicitations.extend(urlelicitation.error_ids(error))


def _result(call: Running) -> object:
    assert call.final is not None
    return call.final.get("result")


def _with_result(call: Running, result: JsonObject) -> None:
    assert call.final is not None
    call.final = {**call.final, "result": result}


def tasks_served(deps: Collaborators, call: Running) -> bool:
    return deps.tasks.enabled and isinstance(_result(call), dict)


def advertise_tasks(deps: Collaborators, call: Running) -> None:
    result = _result(call)
    assert isinstance(result, dict)
    _with_result(call, task_rules.advertise(result))


def child_task(deps: Collaborators, call: Running) -> bool:
    # A discover result is never adopted (discover_tasks has it).
    if call.turn.request.method == DISCOVER:
        return False
    final = call.final  # (``_result`` spelled out: every modern child's reply asks this)
    assert final is not None
    return task_rules.is_task_result(final.get("result"))


def adopt_task(deps: Collaborators, call: Running) -> None:
    result = _result(call)
    assert isinstance(result, dict)
    _with_result(call, deps.tasks.adopt(call.child, result, call.turn.client))


def child_made_task(deps: Collaborators, call: Running) -> bool:
    # The retry of a round the child asked before its handle is bridged too (not a ``bridged`` call).
    reply = call.reply
    return (
        isinstance(reply, Result)
        and task_rules.opted_in(call.turn.client.capabilities)
        and taskbridge.child_task(reply.result) is not None
    )


def bridge_task(deps: Collaborators, call: Running) -> None:
    child_task = _childs_task(call)
    # The task's run goes on in the task store, with the lease; the client gets the handle.
    handed = Call(call.child, call.ex, call.stack.pop_all(), runs_as_task=True)
    call.final = deps.tasks.bridge(handed, call.turn.request, call.turn.client, child_task)


ON_REPLY: Final = (
    ReplyStep("visible_tools", BOTH, frozenset({"tools/list"}), replied_result, show_visible_tools),
    ReplyStep("plain_tools", LEGACY, frozenset({"tools/list"}), replied_result, hide_task_support),
    ReplyStep("input_round", LEGACY, None, wants_input, input_round, child_eras=MODERN),
    ReplyStep("task_to_end", LEGACY, task_rules.TASK_METHODS, made_task_for_session, task_to_end, child_eras=LEGACY),
    ReplyStep("translate", BOTH, None, None, translate_reply),
    ReplyStep("url_round", MODERN, MRTR_METHODS, url_required, url_round),
    ReplyStep("legacy_url", LEGACY, MRTR_METHODS, url_required, url_for_legacy),
    ReplyStep("bridge_task", MODERN, task_rules.TASK_METHODS, child_made_task, bridge_task, child_eras=LEGACY),
    ReplyStep("discover_tasks", MODERN, frozenset({DISCOVER}), tasks_served, advertise_tasks),
    ReplyStep("adopt_task", MODERN, None, child_task, adopt_task, child_eras=MODERN),
)


# -- plans ----------------------------------------------------------------------------------


def _fits(step: Step[Admission] | Step[Leased] | ReplyStep, era: Era, method: str | None) -> bool:
    return era in step.eras and (step.methods is None or method in step.methods)


def _on(step: Step[Leased] | ReplyStep, child: Era) -> bool:
    return step.child_eras is None or child in step.child_eras


def _plan(era: Era, method: str | None) -> Plan:
    return Plan(
        tuple((step.when, step.act, step.ends) for step in BEFORE_CHILD if _fits(step, era, method)),
        {
            child: tuple((s.when, s.act, s.ends) for s in ON_CHILD if _fits(s, era, method) and _on(s, child))
            for child in Era
        },
        {child: tuple((s.when, s.act) for s in ON_REPLY if _fits(s, era, method) and _on(s, child)) for child in Era},
    )


def _plans(steps: Sequence[Step[Admission] | Step[Leased] | ReplyStep]) -> Mapping[Era, Mapping[str | None, Plan]]:
    """Each era's plans: one per method a step names, and (under None) one for every other method."""
    named = {method for step in steps for method in step.methods or ()}
    return {era: {method: _plan(era, method) for method in (*sorted(named), None)} for era in Era}


STEPS: Final[tuple[Step[Admission] | Step[Leased] | ReplyStep, ...]] = (*BEFORE_CHILD, *ON_CHILD, *ON_REPLY)
PLANS: Final = _plans(STEPS)


def plan_for(era: Era, method: str) -> Plan:
    """The steps for a request of ``method`` from a client of ``era``."""
    plans = PLANS[era]
    return plans.get(method) or plans[None]
