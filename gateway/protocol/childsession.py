"""One stdio child's session as a state machine: events in, typed actions out, no I/O.

The stdio edge (``gateway.stdio.child``) owns the process and pumps this machine: it calls
``send`` for each request and writes the line it returns, feeds every framed stdout line to
``receive_line`` (over-long ones to ``receive_oversized``), sleeps until ``next_deadline``
and then calls ``tick(now)``, calls ``abandon`` when a caller leaves early, and ``exited``
when stdout has closed and the process is gone. Each call returns the actions to carry out,
in order. The owner of a request is opaque (``Generic``): the edge passes its exchange.

Rules (digest §4.1, §7.3, §8):

1. **Every request sent gets exactly one outcome**, ``Answered`` (the child's reply) or
   ``Failed`` (a ``ChildError``), and nothing for it after that. Ids and progress tokens
   are rewritten by ``gateway.protocol.correlation``; the table is a dict, O(1) per message.
2. **Deadlines.** A request's timeout (its own, else ``request_timeout``; ``None`` or
   ``inf``: none) is a deadline on the clock the edge passes in. ``tick(now)`` fails every
   request past its deadline with ``ChildTimeoutError`` and, unless it was sent with
   ``cancellable=False`` (the handshake), writes ``notifications/cancelled`` with the child
   id. Its late reply is dropped (``Late``).
3. **Abandon.** A caller that leaves before the outcome (its client went away) ends the
   request with ``ChildExitedError("request abandoned …")`` and, when cancellable, the child
   gets ``notifications/cancelled`` once. Abandoning an ended request does nothing. A request
   cancelled so (or by its timeout, rule 2) after it asked its client something lingers as
   its child's questions' candidate for a while (rule 5); one that never asked but is a held
   question's candidate lingers too, and its cancel is held back meanwhile, so that its
   child may still end it on its own and so prove the question is not its.
4. **What the child says, and to whom.** Each line is decoded and parsed once; the typed
   message is what is delivered (nothing downstream parses it again). A reply goes to its
   request; progress (and a listen's notifications) to its request with the client's token
   restored; a line that is not JSON is noise (counted, kept, logged); JSON that is not
   JSON-RPC fails the request whose id it carries (``ChildProtocolError``), else is noise;
   an over-long line fails the request whose id can be sniffed from it.
   ``notifications/message`` goes to the one request in flight (listens aside) when its
   client asked for that level, else it is logged. ``notifications/tools/list_changed``
   bumps ``tools_generation`` (the tool caches key on it). Every other notification is
   ``Broadcast`` to whoever listens to the child. A modern child sends list changes only on a
   listen that asked for them: those on the gateway's own listen (``gateway.stdio.changes``)
   are handed back here (``listened``) and take the same way.
5. **The child's questions** (sampling, elicitation, roots; ``childquestions``) are
   attributed by ``gateway.protocol.attribution``: to the one request in flight that may
   ask (``Ask``); held while several may, until one is left (``Ask``), none is
   (``Unattributed``), or ``input_timeout`` passes (``Unattributed``). A question whose
   ``_meta`` names a task (2025-11-25 related-task) goes to the ``tasks/result`` in flight
   for that task id (``Ask``), else it is ``Unattributed``. An ``Ask`` the edge
   cannot hand over comes back through ``ask_refused``; an answered one through
   ``ask_closed``. Every other child request, and every question nobody can carry, is
   ``Unattributed``: the edge answers it. The child's ``notifications/cancelled`` naming one
   of its open questions withdraws it (``Withdrawn``, or a held one dropped), and nothing
   answers it then. A request that asked and was then cancelled by the
   gateway lingers (``childquestions.ASKER_LINGERS``): a question only it may have asked is
   ``Unattributed``, never another request's. ``open_questions`` counts asks not closed,
   questions held and lingering askers; ``Changed`` says it may have dropped.
6. **Tool learning** (attribution rule 5, legacy children only): a request of a tool that
   ends with a result (not a tool error, ``isError``, nor a task handle) while no question was
   ever its candidate makes the tool quiet; a question marks its owner's tool (or all its
   candidates' when unresolved) asking.
7. **Exit.** ``exited`` builds the one ``ChildExitedError`` (exit code or signal; the stderr
   tail for the operator, and for clients when ``exposed``) and fails everything pending with
   it; held questions are dropped, and the exit is logged with its operator's reading
   (``event`` ``exit``, with ``exit_code``, ``signal`` and ``planned``; the stderr it quotes
   redacted): a warning, or information when the gateway stopped the child. After it,
   ``send`` raises that error and nothing is pending. ``faulted`` is the same end when the
   gateway's own code failed on the child (``childexit.fault_error``, a ``ChildFaultError``):
   the edge stops the process after it, and its exit then changes nothing.
8. **What the pool decides from.** Whenever the open questions, ``has_asked`` or whether the
   child lives change, the actions an event returns begin with ``ChildFacts`` (their values
   now): the pool's dispatcher keeps a copy of them for each child (``dispatchstate.Member``)
   and never reads the child itself. Death comes before the failures it causes, so a request
   failed by it finds its child dead when it gives its lease back.

Imports: standard library, orjson, ``gateway.protocol`` and ``gateway.errors`` only; no I/O,
no clock.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Callable, Sequence
from typing import Final, Generic, TypeVar

import orjson

from gateway.errors import ChildError, ChildExitedError, ChildProtocolError, ChildTimeoutError
from gateway.protocol import childexit, jsonrpc, loglevels, taskbridge
from gateway.protocol.attribution import ToolLearning
from gateway.protocol.childactions import (
    Answered,
    Broadcast,
    ChildAction,
    ChildFacts,
    Deliver,
    Failed,
    Log,
    Write,
)
from gateway.protocol.childquestions import ASKER_LINGERS, QuestionDesk
from gateway.protocol.childstate import Deadlines, Entry, Held, Lingering
from gateway.protocol.correlation import CANCELLED, ChildRequest, Correlator, ProgressFor, ReplyFor, Unsolicited
from gateway.protocol.framing import OversizedLine, sniff_id
from gateway.protocol.jsonrpc import ErrorReply, JsonObject, Notification, Reply, Result
from gateway.protocol.redaction import redact_text

OwnerT = TypeVar("OwnerT")

TOOLS_LIST_CHANGED: Final = "notifications/tools/list_changed"
NOISE_LINES: Final = 5
"""Non-JSON-RPC stdout lines kept (what ``inspect`` and start-up hints quote)."""
MAX_AUGMENTED_GONE: Final = 64
"""Task-augmented requests ended without their reply that are remembered, so that a task
handle the child sends late for one is cancelled; past it the oldest is forgotten (its task,
if the child makes one that late, runs to its end or its TTL)."""
NOISE_CHARS: Final = 200
"""Characters kept of each such line."""


class ChildSession(Generic[OwnerT]):
    def __init__(
        self,
        label: str,
        pid: int,
        *,
        input_timeout: float,
        request_timeout: float | None = None,
        max_line_bytes: int = 0,
        command: str = "",
        exposed: bool = False,
    ) -> None:
        self.label = label
        self.pid = pid
        self.input_timeout = input_timeout
        self.request_timeout = request_timeout
        self.max_line_bytes = max_line_bytes
        self.command = command
        self.exposed = exposed  # clients read its exit's stderr and command (``gateway.errors``)
        self.legacy = False  # spoken to in the legacy era: its tools are learned (rule 6)
        self.takes_tasks = False  # it declares 2025-11-25 task-augmented tools/call (``_note_augmented``)
        self.death: ChildExitedError | None = None
        self.tools_generation = 0
        self.non_json_lines = 0
        self.oversized_lines = 0
        self.cancels_sent = 0
        self.timeouts = 0
        self.noise: deque[str] = deque(maxlen=NOISE_LINES)
        self._correlator: Correlator[Entry[OwnerT]] = Correlator()
        self._deadlines: Deadlines[Entry[OwnerT] | Held[OwnerT] | Lingering[OwnerT]] = Deadlines()
        # Until then a log line goes to nobody (``_log``): a request was ended without its reply.
        self._logs_nobodys_until = -math.inf
        # Task-augmented requests ended without their reply (``MAX_AUGMENTED_GONE``): a handle
        # the child sends for one late is a task nobody will fetch, so it is cancelled.
        self._augmented_gone: deque[int] = deque(maxlen=MAX_AUGMENTED_GONE)
        self._questions = QuestionDesk(label, input_timeout, self._correlator.owners, self._deadlines, self._cancel)
        self._facts = (0, False, True)  # the last ``ChildFacts`` sent (rule 8): none open, not asked, alive

    @property
    def in_flight(self) -> int:
        return len(self._correlator.pending)  # (``len(self._correlator)`` without its ``__len__`` call)

    @property
    def working(self) -> int:
        """Requests in flight that the child owes an answer soon: not its open listens, which
        stay open and may say nothing for hours (the stall check reads this, and the stdin
        writer, which batches a request only beside others at work)."""
        correlator = self._correlator
        return len(correlator.pending) - correlator.listens

    def answer_alike(self, answered_alike: Callable[[str], bool]) -> None:
        """Questions of these methods are answered alike whoever asked: never held (rule 5)."""
        self._questions.answered_alike = answered_alike

    @property
    def open_questions(self) -> int:
        return self._questions.open

    def asks_open(self, method: str) -> bool:
        """A question of ``method`` waits for an answer (with a client, or held as ambiguous)."""
        return self._questions.is_open(method)

    @property
    def has_asked(self) -> bool:
        """A question came while a request that may ask was in flight."""
        return self._questions.has_asked

    @property
    def tools(self) -> ToolLearning | None:
        """The pool's learning of which tools ask (rule 6)."""
        return self._questions.tools

    @tools.setter
    def tools(self, tools: ToolLearning | None) -> None:
        self._questions.tools = tools

    # -- requests out ---------------------------------------------------------------------

    def send_line(
        self,
        method: str,
        params: JsonObject | None,
        owner: OwnerT,
        *,
        now: float,
        timeout: float | None = None,
        cancellable: bool = True,
        asks: bool = False,
        log_level: str | None = None,
        tool: str | None = None,
    ) -> tuple[int, bytes, float | None]:
        """Record a request (rule 1) and return its child id, its whole line for stdin and its
        deadline (None: none), so the edge can wake its timer when it is the earliest: a plain
        tuple, no record made for it (every request comes here). Raises the exit error after
        ``exited``."""
        if self.death is not None:
            raise self.death
        timeout = timeout if timeout is not None else self.request_timeout
        entry = Entry(owner, method, params, cancellable, asks, log_level, tool, timeout)
        params, pending = self._correlator.mint(method, params, entry)
        child_id = entry.child_id = pending.child_id
        if timeout is not None and math.isfinite(timeout):
            entry.deadline = now + timeout
            entry.due = self._deadlines.push(entry.deadline, entry)
        # ``jsonrpc.encode_line(Request(child_id, method, params))``, without the record
        message: JsonObject = {"jsonrpc": "2.0", "id": child_id, "method": method}
        if params is not None:
            message["params"] = params
        return child_id, orjson.dumps(message, option=orjson.OPT_APPEND_NEWLINE), entry.deadline

    def abandon(self, child_id: int, now: float) -> list[ChildAction[OwnerT]]:
        """The caller left (rule 3), at ``now``; nothing when the request has ended already."""
        pending = self._correlator.abandon(child_id)
        if pending is None:
            return []
        actions: list[ChildAction[OwnerT]] = []
        entry = pending.owner
        # A task-augmented call is ended with ``tasks/cancel`` once its handle comes, not this.
        augmented = self._note_augmented(entry)
        reason = "the client cancelled the request" if entry.cancellable and not augmented else None
        self._logs_nobodys_until = now + ASKER_LINGERS
        held_back = self._questions.abandoned(entry, now, actions, reason)  # before its end settles a held question
        self._end(entry, actions, error=ChildExitedError("request abandoned by the caller"))
        if reason is not None and not held_back:
            self._cancel(child_id, reason, actions)
        return self._noting(actions)

    # -- the clock ------------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        """When ``tick`` next has something to do; None: nothing is timed."""
        return self._deadlines.next()

    def tick(self, now: float) -> list[ChildAction[OwnerT]]:
        """Expire requests (rule 2) and held questions (rule 5) whose deadline is ``now`` or past."""
        actions: list[ChildAction[OwnerT]] = []
        while (item := self._deadlines.pop_due(now)) is not None:
            if isinstance(item, Entry):
                self._expire(item, now, actions)
            else:
                self._questions.expire(item, actions)
        return self._noting(actions)

    # -- lines in -------------------------------------------------------------------------

    def receive_line(self, line: bytes, now: float) -> list[ChildAction[OwnerT]]:
        """One framed stdout line: decoded and parsed once, then routed (rule 4)."""
        try:
            decoded = orjson.loads(line)  # ``jsonrpc.decode`` without its call: its ParseError is not read here
        except orjson.JSONDecodeError:
            text = line[:NOISE_CHARS].decode("utf-8", "replace")
            template = "child %s (pid %d) wrote a non-JSON line on stdout, dropped: %r"
            # Logged redacted, as its stderr lines are (``noise`` keeps it for /status as it came).
            return [self._noise(text, template, (self.label, self.pid, redact_text(text)))]
        actions: list[ChildAction[OwnerT]] = []
        # 2025-03-26 peers may batch on stdio; receivers must accept it.
        for obj in decoded if isinstance(decoded, list) else (decoded,):
            self._receive(obj, now, actions)
        return self._noting(actions)

    def receive_oversized(self, line: OversizedLine) -> list[ChildAction[OwnerT]]:
        """A line over ``max_line_bytes``: it fails the request whose id it carries, if any."""
        self.oversized_lines += 1
        child_id = sniff_id(line)
        limit = self.max_line_bytes
        actions: list[ChildAction[OwnerT]] = [
            Log(
                logging.WARNING,
                "child %s wrote a %d-byte line, over the %d-byte limit; dropped (id %r)",
                (self.label, line.size, limit, child_id),
            )
        ]
        error = ChildProtocolError(
            f"{self.label} replied with a {line.size}-byte message, over the gateway's line "
            f"limit of {limit} bytes (raise --max-line-bytes)",
            size=line.size,
            limit=limit,
        )
        self._fail_one(child_id, error, actions)
        return self._noting(actions)

    # -- questions handed out -------------------------------------------------------------

    def ask_refused(self, ask_id: int) -> list[ChildAction[OwnerT]]:
        """The owner could not take the ``Ask`` (its stream is full or gone): the edge answers."""
        return self._noting(self._questions.refused(ask_id))

    def ask_closed(self, ask_id: int) -> list[ChildAction[OwnerT]]:
        """The ``Ask`` was answered (by its client, locally, or on timeout) and written back."""
        return self._noting(self._questions.closed(ask_id))

    # -- the end --------------------------------------------------------------------------

    def exited(
        self, returncode: int | None, *, stderr_tail: Sequence[str] = (), stopping: bool = False
    ) -> list[ChildAction[OwnerT]]:
        """Stdout closed and the process is gone (rule 7)."""
        if self.death is not None:
            return []
        death = childexit.exit_error(
            self.label,
            self.pid,
            returncode,
            stderr_tail=stderr_tail,
            stopping=stopping,
            command=self.command,
            exposed=self.exposed,
        )
        actions = self._die(death)
        fields: dict[str, object] = {
            "event": "exit",
            "exit_code": death.data.get("exit_code"),
            "signal": death.data.get("signal"),
            "planned": stopping,  # the gateway stopped it (retired, idle, closing)
        }
        # The message quotes the stderr tail: redacted as the child's stderr lines are.
        actions.append(Log(logging.INFO if stopping else logging.WARNING, "%s", (redact_text(death.detailed),), fields))
        return self._noting(actions)

    def faulted(self, where: str) -> list[ChildAction[OwnerT]]:
        """The gateway's own code failed on this child, in its ``where`` (rule 7): the same end
        as an exit, with ``childexit.fault_error``. The edge logs the traceback."""
        if self.death is not None:
            return []
        death = childexit.fault_error(self.label, self.pid, where, command=self.command, exposed=self.exposed)
        return self._noting(self._die(death))

    def _die(self, death: ChildExitedError) -> list[ChildAction[OwnerT]]:
        self.death = death
        actions: list[ChildAction[OwnerT]] = []
        for pending in self._correlator.drain():
            pending.owner.settled = True
            actions.append(Failed(pending.owner.owner, death))
        self._questions.clear()
        self._deadlines.clear()
        return actions

    # -- internals ------------------------------------------------------------------------

    def _noting(self, actions: list[ChildAction[OwnerT]]) -> list[ChildAction[OwnerT]]:
        """``actions``, led by ``ChildFacts`` when the facts have changed since the last (rule 8)."""
        questions = self._questions
        facts = (questions.open, questions.has_asked, self.death is None)
        if facts != self._facts:
            self._facts = facts
            actions.insert(0, ChildFacts(*facts))
        return actions

    def _receive(self, obj: object, now: float, actions: list[ChildAction[OwnerT]]) -> None:
        try:
            message = jsonrpc.parse_message(obj)
        except jsonrpc.InvalidMessage as exc:
            if self._correlator.is_pending(exc.id):
                error = ChildProtocolError(f"{self.label} sent an invalid reply: {exc.reason}")
                self._fail_one(exc.id, error, actions)
                return
            # JSON but not JSON-RPC (a JSON log line, say): as much noise as a text line.
            text = orjson.dumps(obj)[:NOISE_CHARS].decode("utf-8", "replace")
            actions.append(self._noise(text, "child %s sent an invalid message, dropped: %s", (self.label, exc.reason)))
            return
        if isinstance(message, (Result, ErrorReply)):  # ``incoming``'s ``ReplyFor`` or ``Late``, without the record
            pending = self._correlator.take_reply(message)
            if pending is not None:
                self._end(pending.owner, actions, reply=message)
            else:
                if self._augmented_gone and message.id in self._augmented_gone:
                    self._late_handle(message, actions)
                actions.append(Log(logging.DEBUG, "child %s: dropped a late message %r", (self.label, message)))
                if self._questions.lingering:  # a cancelled asker's reply: it asks nothing more
                    self._questions.replied_late(message.id, actions)
            return
        routed = self._correlator.incoming(message)
        if isinstance(routed, ReplyFor):  # a listen the child ended with notifications/cancelled
            self._end(routed.pending.owner, actions, reply=routed.reply)
        elif isinstance(routed, ProgressFor):
            actions.append(Deliver(routed.pending.owner.owner, routed.notification))
        elif isinstance(routed, ChildRequest):
            self._questions.request(routed.request, now, actions)
        elif isinstance(routed, Unsolicited):
            self._unsolicited(routed.notification, actions, now)
        else:
            actions.append(Log(logging.DEBUG, "child %s: dropped a late message %r", (self.label, routed.message)))

    def _noise(self, text: str, template: str, args: tuple[object, ...]) -> Log:
        self.non_json_lines += 1
        self.noise.append(text)
        return Log(logging.WARNING, template, args, {"event": "stdout_dropped"})

    def listened(self, note: Notification, now: float) -> list[ChildAction[OwnerT]]:
        """A notification the child sent on the gateway's own listen, without its
        ``subscriptionId``: taken as if it came unsolicited (rule 4)."""
        actions: list[ChildAction[OwnerT]] = []
        self._unsolicited(note, actions, now)
        return actions

    def _unsolicited(self, note: Notification, actions: list[ChildAction[OwnerT]], now: float) -> None:
        if note.method == loglevels.LOG_MESSAGE:
            self._log(note, actions, now)
            return
        if note.method == CANCELLED and note.params:  # the child withdraws a question (rule 5)?
            reason = note.params.get("reason")
            reason = reason if isinstance(reason, str) else None
            if self._questions.withdrawn(note.params.get("requestId"), reason, actions):
                return
        if note.method == TOOLS_LIST_CHANGED:
            self.tools_generation += 1
        actions.append(Broadcast(note))

    def _log(self, note: Notification, actions: list[ChildAction[OwnerT]], now: float) -> None:
        """``notifications/message`` carries no request id (digest §8.2): like a question, it is
        the one request's in flight, and goes to it at or above its client's level. Not within
        ``ASKER_LINGERS`` of a request the gateway ended without its child's answer (rule 3, a
        timeout), nor while such a request lingers (rule 5): its tool may still be logging
        about its own client's work, and the one request in flight may be another client's."""
        params = note.params or {}
        level = params.get("level")
        # (A lingering call may outlast the window: its cancel held back, or it asks on.)
        quiet = now >= self._logs_nobodys_until and not self._questions.lingering
        pending = self._correlator.sole() if quiet else None
        entry = pending.owner if pending is not None else None
        if entry is not None and entry.log_level is not None and loglevels.at_least(level, entry.log_level):
            actions.append(Deliver(entry.owner, note))
            return
        logger = params.get("logger")
        where = f" [{logger}]" if isinstance(logger, str) else ""
        args = (self.label, self.pid, where, params.get("data"))
        actions.append(Log(loglevels.python_level(level), "child %s (pid %d) log%s: %s", args))

    def _end(
        self,
        entry: Entry[OwnerT],
        actions: list[ChildAction[OwnerT]],
        *,
        reply: Reply | None = None,
        error: ChildError | None = None,
    ) -> None:
        """The one outcome of a request already taken out of the correlator (rule 1)."""
        entry.settled = True
        if entry.due is not None:
            self._deadlines.settled_early(entry.due)  # the heap entry stays, empty, until popped or compacted
        if reply is not None:
            actions.append(Answered(entry.owner, reply))
        else:
            assert error is not None
            actions.append(Failed(entry.owner, error))
        # A result that is a tool's error (``isError``) teaches nothing: a child answers an
        # unknown name so too, and names come from clients (they would fill ``MAX_LEARNED_TOOLS``).
        # A child's task handle (2025-11-25 ``CreateTaskResult``) proves nothing: its task asks later.
        quiet = (
            self.legacy
            and isinstance(reply, Result)
            and reply.result.get("isError") is not True
            and "task" not in reply.result
        )
        if quiet or self._questions.held:  # else ``ended`` has nothing to do (a modern child's usual reply)
            self._questions.ended(entry, actions, quiet=quiet)

    def _expire(self, entry: Entry[OwnerT], now: float, actions: list[ChildAction[OwnerT]]) -> None:
        self._correlator.abandon(entry.child_id)
        self.timeouts += 1
        entry.deadline = None  # popped already: not stale
        error = ChildTimeoutError(
            f"{self.label} did not answer {entry.method} within {entry.timeout:g} s; the request was cancelled",
            timeout_seconds=entry.timeout,
            method=entry.method,
        )
        augmented = self._note_augmented(entry)
        reason = "timed out in the gateway" if entry.cancellable and not augmented else None
        self._logs_nobodys_until = now + ASKER_LINGERS
        held_back = self._questions.abandoned(entry, now, actions, reason)  # before its end settles a held question
        self._end(entry, actions, error=error)
        if reason is not None and not held_back:
            self._cancel(entry.child_id, reason, actions)

    def _fail_one(self, child_id: object, error: ChildError, actions: list[ChildAction[OwnerT]]) -> None:
        pending = self._correlator.abandon(child_id) if type(child_id) is int else None
        if pending is not None:
            self._end(pending.owner, actions, error=error)

    def _note_augmented(self, entry: Entry[OwnerT]) -> bool:
        """Whether ``entry``, ended without its reply, is a 2025-11-25 task-augmented call to a
        child that takes them (``takes_tasks``): its child is then sent no
        ``notifications/cancelled`` (which ends no task, and after which a compliant child
        sends no reply, so its handle would never come: the task would run on, nobody's); its
        handle, when it comes, gets ``tasks/cancel`` (``_late_handle``)."""
        params = entry.params
        if not self.takes_tasks or params is None or not isinstance(params.get("task"), dict):
            return False  # (a child that takes no tasks ignores ``task``: the call runs, and is cancelled)
        self._augmented_gone.append(entry.child_id)
        return True

    def _late_handle(self, reply: Result | ErrorReply, actions: list[ChildAction[OwnerT]]) -> None:
        """The child's late answer to a task-augmented request the gateway ended: if it is a
        task handle, that task is nobody's (its request's client left before the handle
        came): ``tasks/cancel`` for it."""
        self._augmented_gone.remove(reply.id)  # type: ignore[arg-type]  # (found in it: an int)
        task = taskbridge.child_task(reply.result) if isinstance(reply, Result) else None
        if task is None:
            return
        request = jsonrpc.Request(self._correlator.spare_id(), taskbridge.CANCEL, {"taskId": task["taskId"]})
        actions.append(Write(jsonrpc.encode_line(request)))
        template = "child %s made task %s for a request the gateway had ended; cancelled it (tasks/cancel)"
        actions.append(Log(logging.INFO, template, (self.label, task["taskId"])))

    def _cancel(self, child_id: int, reason: str, actions: list[ChildAction[OwnerT]]) -> None:
        # Never after ``exited``: nothing is pending then, so nothing is abandoned or expires.
        self.cancels_sent += 1
        note = Notification(CANCELLED, {"requestId": child_id, "reason": reason})
        actions.append(Write(jsonrpc.encode_line(note)))
