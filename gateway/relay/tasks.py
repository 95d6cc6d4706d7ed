"""The gateway's task store: calls that became tasks run here, and ``tasks/*`` is answered here.

``gateway.protocol.tasks`` holds the rules (negotiation, which calls become tasks, a task's
states and wire shapes); this module runs them:

- ``Relay.exchange`` asks ``wants`` once it holds a child for a modern ``tools/call``; when
  the call becomes a task, it opens the child exchange as usual and hands it (with the pool
  lease) to ``create``, which answers the HTTP request with the ``CreateTaskResult`` at once.
  The call goes on in a task of the service's task group (``task_group``, given by
  ``gateway.relay.service``), outside any HTTP request, so no proxy limit can cut it.
- The run drives the exchange as the relay does for any modern call (``Relay.drive``):
  progress becomes the task's ``statusMessage``; a question of the child (or a modern
  child's ``input_required``) parks the call for an MRTR round exactly as for a client that
  retries, and the task shows the round's ``inputRequests`` (under task-level keys) until
  ``tasks/update`` answers every one; the run then retries with the answers
  (``Relay.exchange`` with ``inputResponses`` and the round's ``requestState``). Unanswered
  within the server's ``--input-timeout``: the task fails (-31007), and the parked call ends
  at the child as for any abandoned retry (the run: ``gateway.relay.task_run``).
- ``tasks/cancel`` cancels the run: the child exchange is left, which sends
  ``notifications/cancelled``; a parked round is taken and closed at once.
- **Pass-through** (rule 7): a modern child that serves the extension itself keeps its tasks;
  ``adopt`` gives its task handle a gateway id, and ``tasks/*`` for that id are sent to the
  same child with the child's id (``PASS_THROUGH_TIMEOUT``). Only the mapping is kept; a child
  that has since stopped makes the task "not found".
- **Bridged** (``gateway.protocol.taskbridge``): a legacy child with 2025-11-25 tasks runs a
  task-marked tool as its own task; ``bridge`` makes the gateway's task for it and the run in
  ``gateway.relay.task_bridge`` fetches its outcome, relays its questions and cancels it.
- **Owners** are client keys (``ClientContext.charged``): the principal, or for an anonymous
  client its peer address, so anonymous clients on two addresses neither share a running cap
  nor push out each other's results.
- Outcomes are kept for the TTL, as serialized bytes. Before a task is made: at most
  ``MAX_TASKS_PER_PRINCIPAL`` running and ``MAX_HELD_TASKS_PER_PRINCIPAL`` held (running or
  kept) per owner, ``MAX_TASKS`` in the store; at its share an owner's oldest ended task that
  was read gives way, else the call is answered synchronously, as the extension allows
  (nobody else's task is touched). Once a task ends: ``MAX_RESULT_BYTES`` for its outcome,
  ``MAX_BYTES_PER_PRINCIPAL`` per owner (its own oldest ended tasks are dropped), and
  ``MAX_KEPT_BYTES`` over every store of the process (``KeptOutcomes``: the oldest ended tasks
  of whoever holds the most bytes are dropped). A child's own task (``adopt``) is always
  mapped (the child made it): at its owner's share that owner's oldest mapping gives way, with
  the store full the oldest of whoever holds the most, each kept at most the server's TTL.
- **The drain** (``drain``: ``gateway.http.drain.Drain``) waits for the gateway's own tasks
  within its budget: a running task counts as work in flight, and one that ends while the
  gateway drains counts on until its client has read the outcome (a ``tasks/get`` of the ended
  task) or cancelled it, at most ``DRAIN_READ_GRACE`` seconds (a client that polls comes within
  its poll interval; an abandoned task must not hold the drain to its budget). A task that
  ended before the drain is not waited for (nobody may come for it). A child's own task
  (pass-through) is the child's: not counted.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Final, Protocol

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectSendStream

from gateway.errors import GATEWAY_NAME, ChildError
from gateway.protocol import taskbridge
from gateway.protocol import tasks as rules
from gateway.protocol.jsonrpc import METHOD_NOT_FOUND, ErrorReply, JsonObject, Request, error_object
from gateway.protocol.owner import IdKeys, Owner
from gateway.protocol.tasks import KeptBytes, Task, TaskPolicy
from gateway.protocol.throttle import LineThrottle
from gateway.relay import task_bridge, task_run
from gateway.relay.client import ClientContext
from gateway.relay.suspensions import Call
from gateway.relay.task_run import Run as _Run
from gateway.relay.translate import response
from gateway.stdio.boundary import RESTART_PAUSE, contained
from gateway.stdio.child import StdioChild

if TYPE_CHECKING:
    from gateway.relay.exchange import Relay

log = logging.getLogger("gateway.tasks")

PASS_THROUGH_TIMEOUT: Final = 30.0
"""Seconds a child that keeps its own tasks has to answer a ``tasks/*`` request."""
TASK_PROGRESS_PREFIX: Final = "gateway-task:"
"""The progressToken the gateway gives a task's call when the client gave none: the child's
progress then reaches the task's ``statusMessage``."""
SYNCHRONOUS_NOTES_RATE: Final = 1.0
SYNCHRONOUS_NOTES_BURST: Final = 5
"""The warnings that a call runs synchronously (a principal at its task bounds) a store logs:
5 at once, then one a second, the rest counted into the next one. A principal calling on at
its bounds (a soak's made 425 in 40 s) would otherwise fill the log, and its queue
(``MAX_LOG_QUEUE_LINES``), with one line each, crowding out everyone else's."""
_monotonic = time.monotonic  # the notes' clock (a test stops it)
DRAIN_READ_GRACE: Final = 5.0
"""Seconds a drain waits, at most, for the client of a task that ended during the drain to read
its outcome: five of the poll intervals the gateway suggests (``rules.POLL_INTERVAL_MS``)."""


@dataclass
class _Passed:
    """A child's own task (rule 7): where ``tasks/*`` for it go."""

    principal: str
    child: StdioChild
    child_task_id: str
    expires_at: float
    ttl_ms: int  # the mapping's life, from creation: what the client is told, at most


class DrainHold(Protocol):
    """What a drain (``gateway.http.drain.Drain``) offers the work it waits for."""

    draining: bool

    def hold(self) -> Callable[[], None]: ...


class KeptOutcomes:
    """Every task store of one gateway process, under one bound on kept outcome bytes
    (``MAX_KEPT_BYTES``). Past it, the oldest ended tasks of whoever holds the most bytes, in
    whichever store, are dropped until the process is within its bound again."""

    def __init__(self, limit: int | None = None) -> None:
        self.bytes = KeptBytes(limit if limit is not None else rules.MAX_KEPT_BYTES)
        self.stores: list[TaskStore] = []

    def shed(self) -> None:
        while self.bytes.over_by() > 0 and (principal := self.bytes.largest()) is not None:
            oldest = [(found, store) for store in self.stores if (found := store.oldest_ended(principal)) is not None]
            if not oldest:
                return  # only running tasks: nothing kept to drop (cannot happen: bytes are kept outcomes)
            (_, task_id), store = min(oldest, key=lambda entry: entry[0])
            store.drop_early(task_id, "the process's kept task outcomes are over their bound")


class TaskStore:
    def __init__(
        self,
        server: str,
        policy: TaskPolicy | None = None,
        *,
        task_group: TaskGroup,
        owner: Owner | None = None,
        keys: Callable[[], IdKeys] | None = None,
        clock: Callable[[], float] = time.time,
        outcomes: KeptOutcomes | None = None,
        drain: DrainHold | None = None,
    ) -> None:
        """``task_group`` runs the tasks (the service's: they end with it); ``outcomes``: the
        process's stores and their byte bound (None: this store alone); ``drain``: what waits
        for the tasks at a drain (module docstring; None: nothing does)."""
        self.server = server
        self.policy = policy if policy is not None else TaskPolicy()
        self.task_group = task_group
        self._owner = owner
        self._keys = keys  # the current keys to seal and sign the owner in task ids (``gateway.protocol.tasks`` rule 6)
        self._clock = clock
        self._runs: dict[str, _Run] = {}  # in creation order: the oldest first
        self._passed: dict[str, _Passed] = {}  # children's own tasks, in creation order
        self._live: dict[str, int] = {}  # owner → unfinished tasks
        self._held: Counter[str] = Counter()  # owner → tasks in ``_runs`` (running or kept)
        self._kept: dict[str, int] = {}  # owner → bytes of kept outcomes
        self.outcomes = outcomes if outcomes is not None else KeptOutcomes()
        self._drain = drain
        self.outcomes.stores.append(self)
        self._next_expiry = float("inf")
        self._change = anyio.Event()  # set (and replaced) whenever a task changes
        self._watchers: dict[str, set[MemoryObjectSendStream[Task]]] = {}  # task id → listens (rule 8)
        self._synchronous_notes = LineThrottle(SYNCHRONOUS_NOTES_RATE, SYNCHRONOUS_NOTES_BURST, _monotonic())

    def __len__(self) -> int:
        return len(self._runs) + len(self._passed)

    def _id_keys(self) -> IdKeys | None:
        """The keys a new task id is minted with (the ring's current key's), or None: no owner routing."""
        return self._keys() if self._keys is not None else None

    @property
    def enabled(self) -> bool:
        return self.policy.enabled

    def now(self) -> float:
        return self._clock()

    def live(self) -> int:
        return sum(self._live.values())

    def held(self, owner: str) -> int:
        """Tasks ``owner`` (a client key) holds here, running or kept."""
        return self._held[owner]

    def kept_bytes(self, owner: str | None = None) -> int:
        """Serialized bytes of the outcomes kept here (of ``owner`` only, when given)."""
        return self._kept.get(owner, 0) if owner is not None else sum(self._kept.values())

    def status(self, task_id: str) -> str | None:
        """A task's status (None: not held here, or a child's own task), for tests."""
        run = self._runs.get(task_id)
        return run.task.status if run is not None else None

    def holds(self, task_id: str) -> bool:
        """Whether ``task_id`` names a task here, the gateway's or a child's own (while the
        gateway drains, only ``tasks/*`` for such a task is let in; whose it is is checked as always)."""
        return task_id in self._runs or task_id in self._passed

    def passes_through(self, task_id: str) -> bool:
        """Whether ``task_id`` is a child's own task that the gateway only routes."""
        return task_id in self._passed

    async def changed(self) -> None:
        """Return at the next change of any task (what a status notification would follow)."""
        await self._change.wait()

    def touch(self, task: Task | None = None) -> None:
        self._change.set()
        self._change = anyio.Event()
        if task is None:
            return
        for stream in self._watchers.get(task.task_id, ()):
            with suppress(anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError):
                stream.send_nowait(task)  # a listener too slow for this one still sees the next

    def watch(self, task_ids: list[str], client: ClientContext, send: MemoryObjectSendStream[Task]) -> list[str]:
        """Rule 8: send changes of the listed tasks this client holds to ``send``; return
        the ids agreed (the acknowledgement's). ``unwatch`` ends it."""
        agreed = [
            task_id
            for task_id in dict.fromkeys(task_ids)
            if (run := self._runs.get(task_id)) is not None and run.task.principal == _owner_of(client)
        ]
        for task_id in agreed:
            self._watchers.setdefault(task_id, set()).add(send)
        return agreed

    def unwatch(self, task_ids: list[str], send: MemoryObjectSendStream[Task]) -> None:
        for task_id in task_ids:
            watchers = self._watchers.get(task_id)
            if watchers is not None:
                watchers.discard(send)
                if not watchers:
                    del self._watchers[task_id]

    def snapshot(self, task_id: str) -> Task | None:
        run = self._runs.get(task_id)
        return run.task if run is not None else None

    # -- creation ---------------------------------------------------------------------------

    def wants(self, request: Request, client: ClientContext, task_support: str | None) -> bool:
        """Whether this call becomes a task (rule 2), within the bounds."""
        if request.method not in rules.TASK_METHODS:
            return False
        name = (request.params or {}).get("name")
        if not isinstance(name, str) or not rules.opted_in(client.capabilities):
            return False
        if not self.policy.wants(name, task_support):
            return False
        self._sweep(self._clock())
        principal = _owner_of(client)
        if self._held[principal] >= rules.MAX_HELD_TASKS_PER_PRINCIPAL:
            self._give_way(principal)
        running = self._live.get(principal, 0)
        if (
            running >= rules.MAX_TASKS_PER_PRINCIPAL
            or self._held[principal] >= rules.MAX_HELD_TASKS_PER_PRINCIPAL
            or len(self._runs) >= rules.MAX_TASKS
        ):
            left_out = self._synchronous_notes.admit(_monotonic())
            if left_out is not None:  # else counted into the next one (``SYNCHRONOUS_NOTES_RATE``)
                log.warning(
                    "%s: %s runs synchronously: %s has %d tasks running (at most %d) and holds %d (at most %d); "
                    "the store holds %d (at most %d)%s",
                    self.server,
                    name,
                    principal,
                    running,
                    rules.MAX_TASKS_PER_PRINCIPAL,
                    self._held[principal],
                    rules.MAX_HELD_TASKS_PER_PRINCIPAL,
                    len(self._runs),
                    rules.MAX_TASKS,
                    f" ({left_out} more calls ran synchronously since the last such line, not logged)"
                    if left_out
                    else "",
                )
            return False
        return True

    def _give_way(self, principal: str) -> None:
        """At its share, an owner's oldest ended task whose outcome it has read makes room
        (rule 5 promised one read, and it had it); one it has not read is never dropped here."""
        for task_id, run in self._runs.items():
            if run.task.principal == principal and run.task.is_terminal and run.task.delivered:
                self.drop_early(task_id, "its owner is at its share of the store and has read it")
                return

    @staticmethod
    def with_progress(request: Request) -> Request:
        """The call as a task runs it: with a progressToken of the gateway's when it had none."""
        params = dict(request.params or {})
        meta = params.get("_meta")
        meta = dict(meta) if isinstance(meta, dict) else {}
        if "progressToken" in meta:
            return request
        meta["progressToken"] = f"{TASK_PROGRESS_PREFIX}{secrets.token_urlsafe(8)}"
        params["_meta"] = meta
        return Request(request.id, request.method, params)

    def create(self, relay: Relay, call: Call, request: Request, client: ClientContext) -> JsonObject:
        """Make the task, start its run, and return the ``CreateTaskResult`` response."""
        run = self._new_run(request, client)
        self.task_group.start_soon(self._run, partial(task_run.run_task, self, relay, run, call), run)
        log.info("%s: %s runs as task %s…", self.server, (request.params or {}).get("name"), run.task.task_id[:14])
        return response(request.id, result=run.task.created_result())

    def bridge(self, call: Call, request: Request, client: ClientContext, child_task: JsonObject) -> JsonObject:
        """A legacy child's own task (``child_task``, from its ``CreateTaskResult``) behind a
        task of the gateway's: start the bridged run; the ``CreateTaskResult`` response."""
        run = self._new_run(request, client)
        run.child, run.child_task_id = call.child, str(child_task["taskId"])
        _, message = taskbridge.child_status(child_task)
        if message is not None:
            run.task.note(message, run.task.created)
        self.task_group.start_soon(self._run, partial(task_bridge.run_bridged, self, run, call), run)
        name = (request.params or {}).get("name")
        log.info("%s: %s runs as the child's task, bridged to task %s…", self.server, name, run.task.task_id[:14])
        return response(request.id, result=run.task.created_result())

    def _new_run(self, request: Request, client: ClientContext) -> _Run:
        now = self._clock()
        task_id = rules.mint_task_id(self._owner, self._id_keys(), secrets.token_bytes(rules.TASK_RANDOM_BYTES))
        task = Task(task_id, _owner_of(client), self.server, now, self.policy.ttl)
        run = _Run(task, request, client)
        if self._drain is not None:
            run.release = self._drain.hold()  # the drain waits for it (module docstring)
        self._runs[task_id] = run
        self._live[task.principal] = self._live.get(task.principal, 0) + 1
        self._held[task.principal] += 1
        self._next_expiry = min(self._next_expiry, task.expires_at())
        return run

    def adopt(self, child: StdioChild, result: JsonObject, client: ClientContext) -> JsonObject:
        """A child's own task handle, under a gateway id that routes back to it (rule 7)."""
        now = self._clock()
        self._sweep(now)
        # The child made the task already: its handle is always given, and room is made among
        # the mappings: first at this principal's share, from its own oldest; then, with the
        # store full, from the oldest of whoever holds the most, so a principal holding less
        # than that never loses one to another (``MAX_HELD_TASKS_PER_PRINCIPAL``, ``MAX_TASKS``).
        principal = _owner_of(client)
        held = Counter(passed.principal for passed in self._passed.values())
        if held[principal] >= rules.MAX_HELD_TASKS_PER_PRINCIPAL:
            self._drop_oldest_passed(principal)
        elif len(self) >= rules.MAX_TASKS and held:
            most = max(held.values())  # (ties: the oldest mapping among them)
            self._drop_oldest_passed(next(p.principal for p in self._passed.values() if held[p.principal] == most))
        task_id = rules.mint_task_id(self._owner, self._id_keys(), secrets.token_bytes(rules.TASK_RANDOM_BYTES))
        ttl = result.get("ttlMs")
        # Kept as the child says, but not past the server's own task TTL: a child's word is no
        # bound on what the gateway holds.
        keep = min(ttl / 1000, self.policy.ttl) if isinstance(ttl, int) and ttl > 0 else self.policy.ttl
        passed = _Passed(_owner_of(client), child, str(result["taskId"]), now + keep, int(keep * 1000))
        self._passed[task_id] = passed
        self._next_expiry = min(self._next_expiry, now + keep)
        return _told_ttl({**result, "taskId": task_id}, passed)

    def _drop_oldest_passed(self, principal: str) -> None:
        oldest = next(key for key, passed in self._passed.items() if passed.principal == principal)
        del self._passed[oldest]

    async def _run(self, running: Callable[[], Awaitable[None]], run: _Run) -> None:
        """``running`` (the gateway's own run of ``run``, or a bridged one), then: only the task
        is kept for the TTL, not the call's arguments (up to a body). The task's failure domain:
        a run fails its task on a fault of its own (``task_run``, ``task_bridge``); one that
        escapes that (in its error handling or clean-up) stops here, and the task fails."""
        task = run.task

        def fail_the_task(exc: Exception) -> None:
            if not task.is_terminal:
                task.fail(error_object(-31000, "the gateway failed to run the task"), self.now())
                self.ended(task)

        with contained(log, f"{self.server}: the run of task {task.task_id[:14]}…", "that task fails", fail_the_task):
            await running()
        run.request = Request(run.request.id, run.request.method, None)

    # -- tasks/* ----------------------------------------------------------------------------

    async def answer(self, request: Request, client: ClientContext) -> JsonObject:
        """The response to a modern client's ``tasks/get``, ``tasks/update`` or ``tasks/cancel``."""
        if not self.enabled:
            return response(request.id, error=error_object(METHOD_NOT_FOUND, f"{request.method}: tasks are off here"))
        if not rules.opted_in(client.capabilities):
            return response(request.id, error=rules.missing_extension_error(request.method))
        task_id = rules.task_id_of(request.params)
        if task_id is None:
            return response(request.id, error=rules.params_error(request.method, "taskId (a string) is required"))
        now = self._clock()
        self._sweep(now)
        passed = self._passed.get(task_id)
        if passed is not None and passed.principal == _owner_of(client):
            return await self._pass(passed, task_id, request)
        run = self._runs.get(task_id)
        if run is None or run.task.principal != _owner_of(client):
            return response(request.id, error=rules.not_found_error(task_id))
        task = run.task
        if request.method == rules.GET:
            task.delivered = task.delivered or task.is_terminal
            if task.delivered:
                run.let_go()  # its client has the outcome: a drain need not wait for it
            if run.child_task_id is not None:  # a bridged task: the child's latest status message
                await task_bridge.refresh(self, run)
            return response(request.id, result=task.detailed())
        if request.method == rules.UPDATE:
            given = (request.params or {}).get("inputResponses")
            if not isinstance(given, dict):
                problem = "inputResponses must be an object"
                return response(request.id, error=rules.params_error(request.method, problem))
            answers = task.take_answers(given, now)
            if answers is not None:
                run.answers = answers
                run.answered.set()
                self.touch(task)
            return response(request.id, result={"resultType": "complete"})
        if not task.is_terminal:  # tasks/cancel; idempotent on an ended task
            task.cancel(now)
            self.ended(task)
            if run.scope is not None:
                run.scope.cancel()
            log.info("%s: task %s… cancelled by the client", self.server, task_id[:14])
        run.let_go()  # its client knows how it ended
        return response(request.id, result={"resultType": "complete"})

    async def _pass(self, passed: _Passed, task_id: str, request: Request) -> JsonObject:
        """``tasks/*`` for a child's own task: sent to that child under its id, answered under ours."""
        if not passed.child.is_alive():
            self._passed.pop(task_id, None)
            return response(request.id, error=rules.not_found_error(task_id))
        params = {**(request.params or {}), "taskId": passed.child_task_id}
        try:
            reply = await passed.child.request(request.method, params, timeout=PASS_THROUGH_TIMEOUT)
        except ChildError as exc:
            return response(request.id, error=exc.error_object())
        if isinstance(reply, ErrorReply):
            return response(request.id, error=reply.error)
        result = dict(reply.result)
        if "taskId" in result:
            result["taskId"] = task_id
        return response(request.id, result=_told_ttl(result, passed))

    def settle(self, task: Task, final: JsonObject) -> None:
        """The call's final message is the task's outcome, kept serialized (what is counted)."""
        if task.is_terminal:  # cancelled meanwhile: it ended (and was counted) then
            return
        now = self._clock()
        error, result = final.get("error"), final.get("result")
        if isinstance(error, dict):
            status, outcome = rules.FAILED, rules.serialized(error)
        elif isinstance(result, dict):
            status, outcome = rules.COMPLETED, rules.serialized_result(result)
        else:
            status, outcome = rules.FAILED, rules.serialized(error_object(-31000, "the call ended without an outcome"))
        if len(outcome) > rules.MAX_RESULT_BYTES:
            too_big = error_object(
                -31000,
                f"the task's outcome is {len(outcome)} bytes, over the {rules.MAX_RESULT_BYTES}-byte limit of "
                "what the gateway keeps for a task",
                {"source": GATEWAY_NAME, "bytes": len(outcome)},
            )
            status, outcome = rules.FAILED, rules.serialized(too_big)
        task.keep(status, outcome, now)
        self.ended(task)
        log.info("%s: task %s… %s", self.server, task.task_id[:14], task.status)

    # -- bookkeeping ------------------------------------------------------------------------

    def ended(self, task: Task) -> None:
        """A task reached its terminal state: it no longer counts as live; its outcome is kept."""
        self._live[task.principal] = count = self._live.get(task.principal, 1) - 1
        if count <= 0:
            self._live.pop(task.principal, None)
        self._kept[task.principal] = kept = self._kept.get(task.principal, 0) + task.size
        self.outcomes.bytes.add(task.principal, task.size)
        self._next_expiry = min(self._next_expiry, task.expires_at())
        if kept > rules.MAX_BYTES_PER_PRINCIPAL:
            self._shed(task.principal)
        self.outcomes.shed()
        self.touch(task)
        run = self._runs.get(task.task_id)
        if run is None or run.release is None:
            return
        if self._drain is None or not self._drain.draining:
            run.let_go()  # ended before a drain: nothing waits for its outcome to be read
        else:
            self.task_group.start_soon(self._read_grace, run)

    @staticmethod
    async def _read_grace(run: _Run) -> None:
        """A task ended during the drain: the drain waits for its client to read it at most
        ``DRAIN_READ_GRACE`` seconds (read at call time: a test lengthens it)."""
        await anyio.sleep(DRAIN_READ_GRACE)
        run.let_go()

    def _shed(self, principal: str) -> None:
        """Drop this principal's oldest ended tasks until its kept bytes fit (rule: nobody else's)."""
        for task_id, run in list(self._runs.items()):
            if self._kept.get(principal, 0) <= rules.MAX_BYTES_PER_PRINCIPAL:
                return
            if run.task.principal == principal and run.task.is_terminal:
                self.drop_early(task_id, "its owner's results are over the bound")

    def oldest_ended(self, principal: str) -> tuple[float, str] | None:
        """``(ended at, task id)`` of this owner's oldest ended task here, or None."""
        ended = [
            (when, task_id)
            for task_id, run in self._runs.items()
            if run.task.principal == principal and (when := run.task.ended) is not None
        ]
        return min(ended) if ended else None

    def drop_early(self, task_id: str, why: str) -> None:
        """Drop an ended task before its TTL (a bound needed its room)."""
        run = self._runs.get(task_id)
        if run is not None and run.task.is_terminal:
            self._drop(task_id, run.task)
            log.info("%s: task %s… dropped early: %s", self.server, task_id[:14], why)

    def _sweep(self, now: float) -> None:
        """``_purge`` when one is due, in its own failure domain: it runs in whichever request
        comes then, and a fault of its own is not that request's (nor every later one's). It is
        logged, what it had not reached stays kept, and the next sweep is due ``RESTART_PAUSE``
        later."""
        if now < self._next_expiry:
            return

        def again(exc: Exception) -> None:
            self._next_expiry = min(self._next_expiry, now + RESTART_PAUSE)

        with contained(log, f"{self.server}: the task store's sweep", f"it runs again in {RESTART_PAUSE:g} s", again):
            self._purge(now)

    def _purge(self, now: float) -> None:
        """Drop ended tasks past their TTL (a still-running task is never dropped), and
        children's own tasks past theirs."""
        self._next_expiry = float("inf")
        for task_id, passed in list(self._passed.items()):
            if passed.expires_at <= now:
                del self._passed[task_id]
            else:
                self._next_expiry = min(self._next_expiry, passed.expires_at)
        for task_id, run in list(self._runs.items()):
            expires = run.task.expires_at()
            if run.task.is_terminal and expires <= now:
                self._drop(task_id, run.task)
            else:
                self._next_expiry = min(self._next_expiry, expires)

    def _drop(self, task_id: str, task: Task) -> None:
        self._runs.pop(task_id).let_go()
        self._held[task.principal] -= 1
        if self._held[task.principal] <= 0:
            del self._held[task.principal]
        self._kept[task.principal] = kept = self._kept.get(task.principal, 0) - task.size
        if kept <= 0:
            self._kept.pop(task.principal, None)
        self.outcomes.bytes.remove(task.principal, task.size)


def _told_ttl(result: JsonObject, passed: _Passed) -> JsonObject:
    """A child's task result as its client gets it: a ``ttlMs`` no longer than the gateway keeps
    the task's mapping (past it the task is "not found" here, whatever the child keeps)."""
    ttl = result.get("ttlMs")
    if isinstance(ttl, int) and ttl > passed.ttl_ms:
        result["ttlMs"] = passed.ttl_ms
    return result


def _owner_of(client: ClientContext) -> str:
    """Whose task it is: the client key (the principal, or an anonymous client's address)."""
    return client.charged
