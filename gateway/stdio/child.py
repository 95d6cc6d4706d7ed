"""One stdio MCP child: the anyio pump around the sans-IO session machine.

``open_child(spec)`` (``gateway.stdio.launch``) starts the child through its ``ChildBackend``,
starts these pumps, runs the handshake and yields a ready ``StdioChild``. Requests go through ``child.exchange(...)``:

    async with child.exchange("tools/call", params, timeout=30) as ex:
        async for note in ex:          # request-scoped notifications (progress), client token restored
            ...
        reply = ex.reply()             # Result | ErrorReply, or raises a ChildError

Every decision is the machine's (``gateway.protocol.childsession``, rules at its top): which
exchange a line belongs to, deadlines, cancel-on-abandon, the attribution of the child's
questions and logs, tool learning, the exit error. This module only moves bytes and time:

- ``pump_stdout``: stdout → ``LineFramer`` → ``ChildSession.receive_line`` → actions, in the
  event loop's read callback (``pump_actions`` carries out those that need a task:
  ``gateway.stdio.carried``);
- ``pump_stdin``: the ``LineWriter`` (``gateway.stdio.writer``) writes the lines queued behind
  a write in progress, whole and in order; a child that stops reading its stdin is stopped,
  so its requests fail;
- ``pump_deadlines``: a ``DeadlineTimer`` (``gateway.stdio.timer``) sleeps until the machine's
  ``next_deadline`` and feeds the clock to ``tick``;
- ``pump_stderr`` and ``watch_exit``: the stderr tail, and a group that holds stdout open;
- ``_apply``: carries out the actions (an exchange's notification or outcome, a line for
  stdin, a question for a client or for the gateway, a broadcast, a log line), and keeps the
  byte counters; the other counters are the machine's.

An ``Exchange`` is one request's side of it: a queue of notifications and ``ChildAsk`` items
that never blocks the pump (``inbox``), then exactly one outcome. A request to a child that
could not start or has died fails at once, never hangs.

**A child is a failure domain** (``gateway.stdio.boundary``): an unexpected exception in any
of its pumps, its action task (and so the listeners it calls) or a task it starts is logged
with its traceback, fails the child's pending requests with a ``ChildFaultError`` (the
machine's ``faulted``), and stops the child (the stop ladder); the pool counts the exit as a
gateway fault and restarts it after its backoff. Nothing of it reaches the pool's task group.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from contextlib import AbstractContextManager, suppress
from typing import Final, NoReturn

import anyio
from anyio.abc import TaskGroup

from gateway.errors import ChildError, ChildExitedError, GatewayUnavailableError
from gateway.protocol import jsonrpc
from gateway.protocol.attribution import ToolLearning
from gateway.protocol.childactions import (
    Answered,
    Ask,
    Broadcast,
    Changed,
    ChildAction,
    ChildFacts,
    Deliver,
    Failed,
    Log,
    Timed,
    Unattributed,
    Withdrawn,
    Write,
)
from gateway.protocol.childsession import ChildSession
from gateway.protocol.dispatchstate import ChildProfile, Reading
from gateway.protocol.framing import LineFramer, OversizedLine
from gateway.protocol.handshake import ChildInfo
from gateway.protocol.jsonrpc import JsonObject, Notification, Reply
from gateway.protocol.versions import Era
from gateway.stdio import process, usage
from gateway.stdio.backend import ChildProcess
from gateway.stdio.boundary import Guarded, contained
from gateway.stdio.carried import Carried
from gateway.stdio.exchange import Exchange, ExchangeItem
from gateway.stdio.questions import Questions, RequestHandler
from gateway.stdio.spec import ChildSpec
from gateway.stdio.stderrlog import StderrLog
from gateway.stdio.timer import DeadlineTimer
from gateway.stdio.writer import BrokenPipe, LineWriter, StdinFull, StdinStalled

__all__ = ["ChangeHandler", "Exchange", "ExchangeItem", "FactsHandler", "NotificationHandler", "StdioChild"]

log = logging.getLogger("gateway.child")

READ_CHUNK: Final = 256 * 1024
STDERR_DRAIN_GRACE: Final = 1.0
"""Seconds to let stderr finish after the child exits, so the error quotes its last words."""
FAULT_THEN: Final = "its requests fail, it is stopped and then restarted"

NotificationHandler = Callable[[Notification], None]
ChangeHandler = Callable[[], None]
FactsHandler = Callable[[ChildFacts], None]
"""Told the child's ``ChildFacts`` whenever they change, where they change (from any context:
it must only copy them)."""


class StdioChild:
    """A running child (the module doc): its pumps, its exchanges, and what the rest of the
    gateway reads of it (its handshake's ``ChildInfo``, pid, load and questions, the counters
    metrics fold in, the stderr tail and stdout noise errors quote, and its death)."""

    def __init__(
        self,
        spec: ChildSpec,
        proc: ChildProcess,
        tg: TaskGroup,
        on_request: RequestHandler | None = None,
        on_notification: NotificationHandler | None = None,
        on_change: ChangeHandler | None = None,
        *,
        on_facts: FactsHandler | None = None,
        server: str | None = None,
        pool: str | None = None,
    ) -> None:
        """``on_change``: its questions may have dropped; ``on_facts``: what its pool decides
        from changed (``ChildFacts``); ``server``, ``pool``: what its log records name it by
        (``log_fields``); by default its spec's label."""
        self.spec = spec
        self.pid: Final = proc.pid  # read once: the relay notes it for every call (``ClientContext.bind``)
        server = server or spec.label
        self.log_fields: dict[str, object] = {"server": server, "pool": pool or server, "pid": proc.pid}
        # What it was told at initialize it may ask (read-only here; the spec makes a copy per read).
        self.declared_capabilities: Mapping[str, object] = spec.declared_capabilities
        self.bytes_in = 0
        self.cpu_us = 0  # the most CPU time its process group was read at (``note_cpu``)
        self.last_output = time.monotonic()  # when stdout last said anything (stall detection)
        self._info: ChildInfo | None = None
        self._proc = proc
        self._tg = tg
        self._on_notification = on_notification
        self._on_change = on_change
        self._on_facts = on_facts
        self._session: ChildSession[Exchange] = ChildSession(
            spec.label,
            proc.pid,
            input_timeout=spec.input_timeout,
            request_timeout=spec.request_timeout,
            max_line_bytes=spec.max_line_bytes,
            command=spec.command,
            exposed=spec.expose_errors,
        )
        assert proc.stdin is not None
        self._stdin = LineWriter(proc.stdin, spec.max_stdin_queue_bytes, spec.stdin_stall_timeout)
        self._faulted = False  # the gateway failed on this child: it is being stopped
        what = f"a task of child {spec.label} (pid {proc.pid})"
        self._tasks = Guarded(tg, log, what, FAULT_THEN, self._fault_in("task"))
        self.questions = Questions(spec, self._tasks, self._write_line, on_request, self._ask_closed)
        self._stderr = process.StderrTail(spec.stderr_tail_lines, spec.stderr_line_chars)
        self._stderr_log = StderrLog(spec.label, self.log_fields, time.monotonic()) if spec.stderr_log else None
        self._stderr_done = anyio.Event()
        self._stdout_done = anyio.Event()
        self._exited = anyio.Event()
        self._stopping = False
        self._timer = DeadlineTimer(self._session.next_deadline, self._tick)
        self.answer_alike = self._session.answer_alike  # set by its pool (``Pool.answered_alike``)
        self._carried = Carried(self._apply)

    def heard(self, note: Notification) -> None:
        """A notification the child sent on the gateway's own listen (``gateway.stdio.changes``),
        its ``subscriptionId`` removed: it goes where an unsolicited one goes (a tools list
        change also makes the tool caches list again)."""
        self._apply(self._session.listened(note, time.monotonic()))

    def start_soon(self, func: Callable[[], Coroutine[object, object, None]]) -> None:
        """Run ``func()`` in the child's task group: it ends with the child at the latest (and a
        failure in it is the child's: it is stopped)."""
        self._tasks.start_soon(func)

    def __repr__(self) -> str:
        state = "dead" if self.death else "alive"
        return f"<StdioChild {self.spec.label} pid={self.pid} {state} in_flight={self.in_flight}>"

    # -- requests -------------------------------------------------------------------

    # -- what the rest of the gateway reads of it ---------------------------------------

    @property
    def info(self) -> ChildInfo | None:
        return self._info

    @info.setter
    def info(self, info: ChildInfo | None) -> None:
        self._info = info
        self._session.legacy = self.is_legacy
        # (2025-11-25 tasks: a modern child that declares them too is not sent ``task``.)
        self._session.takes_tasks = info is not None and self.is_legacy and info.takes_tasks

    @property
    def in_flight(self) -> int:
        return self._session.in_flight

    @property
    def stderr_tail(self) -> list[str]:
        return self._stderr.lines

    @property
    def stdout_noise(self) -> Sequence[str]:
        """The last stdout lines that were not JSON-RPC (what ``inspect`` and hints quote)."""
        return self._session.noise

    @property
    def non_json_lines(self) -> int:
        return self._session.non_json_lines

    @property
    def oversized_lines(self) -> int:
        return self._session.oversized_lines

    @property
    def tools_generation(self) -> int:
        """Bumped by ``notifications/tools/list_changed`` (tool caches key on it)."""
        return self._session.tools_generation

    @property
    def tools(self) -> ToolLearning | None:
        """The pool's learning of which tools ask (attribution rule 5)."""
        return self._session.tools

    @tools.setter
    def tools(self, tools: ToolLearning | None) -> None:
        self._session.tools = tools

    def counters(self) -> dict[str, int]:
        """For metrics, folded into the pool's totals when the child exits."""
        session = self._session
        return {
            "non_json_lines": session.non_json_lines,
            "oversized_lines": session.oversized_lines,
            "cancels_sent": session.cancels_sent,
            "timeouts": session.timeouts,
            "bytes_in": self.bytes_in,
            "bytes_out": self._stdin.written,
            "cpu_us": self.cpu_us,
            "questions_to_clients": self.questions.to_clients,
            "questions_answered_by_gateway": self.questions.answered_by_gateway,
        }

    def note_cpu(self, seconds: float | None) -> None:
        """The CPU time its process group was read at (``gateway.stdio.usage``; None: not read):
        the highest reading is kept, so what metrics count never falls."""
        self.cpu_us = usage.highest_cpu_us(self.cpu_us, seconds)

    @property
    def stdin_queued(self) -> int:
        """Bytes waiting for its stdin behind the write in progress (at most ``max_stdin_queue_bytes``)."""
        return self._stdin.queued

    @property
    def awaiting_input(self) -> int:
        """Child requests waiting for a client's answer (the child's silence is then no stall)."""
        return self.questions.awaiting_input

    @property
    def has_asked(self) -> bool:
        return self._session.has_asked

    @property
    def open_questions(self) -> int:
        """Questions handed to a client and not answered, plus those held as ambiguous."""
        return self._session.open_questions

    def asks_open(self, method: str) -> bool:
        """A question of ``method`` is among ``open_questions``."""
        return self._session.asks_open(method)

    @property
    def is_legacy(self) -> bool:
        """Spoken to in the legacy era: its questions are requests on stdio (a modern child's
        MRTR ``input_required`` needs no attribution, so it teaches rule 5 nothing)."""
        return self._info is not None and self._info.era is Era.LEGACY

    def is_alive(self) -> bool:
        return self._session.death is None

    @property
    def death(self) -> ChildError | None:
        return self._session.death

    async def wait_exited(self) -> ChildError:
        await self._exited.wait()
        assert self._session.death is not None
        return self._session.death

    # -- what its pool's dispatcher is told (``gateway.protocol.dispatchstate``) ---------------

    def profile(self) -> ChildProfile:
        """What it is, from its start on (``Dispatcher.started``)."""
        return ChildProfile(self.pid, self.is_legacy, self.declared_capabilities)

    def facts(self) -> ChildFacts:
        """Its facts now; afterwards each change is told as it happens (``on_facts``)."""
        session = self._session
        return ChildFacts(session.open_questions, session.has_asked, session.death is None)

    def reading(self, now: float) -> Reading:
        """Its counters at ``now`` (``time.monotonic``), for a maintenance tick
        (``Dispatcher.maintain``). Its stdin is looked at then (``LineWriter.stalled_since``):
        since when it has taken nothing while something waited for it, which breaks its writer,
        and so stops it, past the stdin stall timeout (silent on stdout as long, when what
        waits is in the pipe)."""
        last_output = self.last_output
        session = self._session
        return Reading(session.working, self.awaiting_input, last_output, self._stdin.stalled_since(now, last_output))

    # -- exchanges ------------------------------------------------------------------------

    def exchange(
        self,
        method: str,
        params: JsonObject | None,
        *,
        timeout: float | None = None,
        cancellable: bool = True,
        asks: bool = False,
        log_level: str | None = None,
        tool: str | None = None,
    ) -> ChildCall:
        """One request, as ``async with child.exchange(...) as ex``: sent on entry (raising the
        exit error of a dead child); left early (client gone, cancelled), the machine forgets
        the id, so the late reply is dropped, and the child is told to stop working on it.

        ``asks=True``: the caller reads ``ChildAsk`` items too, and answers them.
        ``log_level``: the child's ``notifications/message`` at or above it that can be
        attributed to this exchange arrive in its stream. ``tool``: the caller's
        ``attribution.tool_key`` for the request, if it has it (else computed when needed)."""
        return ChildCall(self, method, params, timeout, cancellable, asks, log_level, tool)

    def _begin(self, call: ChildCall) -> Exchange | Coroutine[object, object, Exchange]:
        """Enter ``call``: its exchange, the request recorded and its line written or queued;
        else (the pipe is busy, or broken) a coroutine to await for it (``_written``)."""
        ex = call.ex = Exchange(call.method)
        child_id, line, deadline = self._session.send_line(
            call.method,
            call.params,
            ex,
            now=time.monotonic(),
            timeout=call.timeout,
            cancellable=call.cancellable,
            asks=call.asks,
            log_level=call.log_level,
            tool=call.tool,
        )  # raises the exit error of a dead child
        ex.child_id = child_id
        self._timer.note(deadline)
        # The line is written now, or queued behind a write in progress (``LineWriter``): its
        # ticket while queued. 503 when what waits for the child's stdin is at its bound. With
        # other requests in flight on the child it is queued for the writer's next write, so
        # the requests one loop turn starts cost the child one system call and one wake-up.
        try:
            if self._session.working > 1:  # (an open listen is no work a write could join)
                ex.stdin_ticket = self._stdin.queue(line)
            elif not self._stdin.write_now(line):
                return self._written(ex, line)
        except StdinFull as exc:  # the line was never queued
            self._close(ex, unsent=True)
            raise self._stdin_full(exc) from None
        except BrokenPipe:
            return self._broken(ex)
        except BaseException:
            self._close(ex)
            raise
        return ex

    async def _written(self, ex: Exchange, line: bytes) -> Exchange:
        """``_begin``'s end when the pipe is busy: ``line`` sent once the pipe takes it."""
        try:
            ex.stdin_ticket = await self._stdin.send(line)
        except StdinFull as exc:  # the line was never queued
            self._close(ex, unsent=True)
            raise self._stdin_full(exc) from None
        except BrokenPipe:
            await self._broken(ex)
        except BaseException:
            self._close(ex)
            raise
        return ex

    async def _broken(self, ex: Exchange) -> NoReturn:
        """``_begin``'s end when the pipe broke: the child's exit error, once it has exited."""
        try:
            await self._exited_or_timeout()
            error = self._stdin_error()
        finally:
            self._close(ex)
        raise error from None

    def _stdin_full(self, exc: StdinFull) -> GatewayUnavailableError:
        return GatewayUnavailableError(
            f"{self.spec.label} is not reading its stdin fast enough: {exc}; retry later",
            retry_after=5,
            stdin_queued_bytes=exc.queued,
            max_stdin_queue_bytes=exc.limit,
        )

    def _close(self, ex: Exchange, *, unsent: bool = False) -> None:
        # A line still queued for a child that has not read it is dropped with its request,
        # and the child, which never saw the request, is sent no cancel for it.
        ticket = ex.stdin_ticket  # None: written at once (the common case)
        withdrawn = (ticket is not None and self._stdin.withdraw(ticket)) or unsent
        ex.leave()
        if not ex.is_done:
            actions = self._session.abandon(ex.child_id, time.monotonic())
            self._apply([a for a in actions if not isinstance(a, Write)] if withdrawn else actions)

    async def request(
        self, method: str, params: JsonObject | None, *, timeout: float | None = None, cancellable: bool = True
    ) -> Reply:
        """Send a request and wait for its outcome, ignoring its notifications."""
        async with self.exchange(method, params, timeout=timeout, cancellable=cancellable) as ex:
            async for _ in ex:
                pass
            return ex.reply()

    async def notify(self, method: str, params: JsonObject | None = None) -> None:
        if self._session.death is not None:
            raise self._session.death
        self._write_line(jsonrpc.encode_line(Notification(method, params)))

    def _write_line(self, line: bytes) -> None:
        try:
            self._stdin.put(line)
        except BrokenPipe:
            raise self._stdin_error() from None

    def _stdin_error(self) -> ChildError:
        if self._session.death is not None:
            return self._session.death
        stalled = self._stdin.broken
        why = f" ({stalled})" if isinstance(stalled, StdinStalled) else ""
        return ChildExitedError(f"{self.spec.label} stopped reading its stdin{why}")

    def _ask_closed(self, ask_id: int) -> None:
        self._apply(self._session.ask_closed(ask_id))

    async def _exited_or_timeout(self) -> None:
        with anyio.move_on_after(self.spec.stdin_close_grace + STDERR_DRAIN_GRACE):
            await self._exited.wait()

    # -- the machine's actions ------------------------------------------------------------

    def _apply(self, actions: Sequence[ChildAction[Exchange]]) -> None:
        for action in actions:
            if isinstance(action, Answered):
                action.owner.finish(reply=action.reply)
            elif isinstance(action, Deliver):
                action.owner.deliver(action.notification)
            elif isinstance(action, Failed):
                action.owner.finish(error=action.error)
            elif isinstance(action, Write):
                with suppress(ChildError):  # a cancel for a child that is gone: nothing to stop
                    self._write_line(action.line)
            elif isinstance(action, Ask):
                if not self.questions.ask(action.ask_id, action.request, action.owner.offer_ask):
                    self._apply(self._session.ask_refused(action.ask_id))
            elif isinstance(action, Unattributed):
                self.questions.answer(action.request, action.reason)
            elif isinstance(action, Withdrawn):
                self.questions.withdraw(action.ask_id, action.reason)
            elif isinstance(action, Broadcast):
                if self._on_notification is not None:
                    self._on_notification(action.notification)
            elif isinstance(action, Log):
                fields = self.log_fields if action.fields is None else {**self.log_fields, **action.fields}
                log.log(action.level, action.template, *action.args, extra=fields)
            elif isinstance(action, ChildFacts):
                if self._on_facts is not None:
                    self._on_facts(action)
            elif isinstance(action, Changed):
                if self._on_change is not None:
                    self._on_change()
            elif isinstance(action, Timed):
                self._timer.note(action.at)

    # -- pumps ----------------------------------------------------------------------

    async def pump_stdout(self) -> None:
        framer = LineFramer(self.spec.max_line_bytes)
        session = self._session

        take = self._carried.take

        def deliver(chunk: bytes) -> None:  # in the loop's read callback (gateway.stdio.carried)
            now = self.last_output = time.monotonic()
            self.bytes_in += len(chunk)
            for item in framer.feed(chunk):
                if isinstance(item, OversizedLine):
                    take(session.receive_oversized(item))
                else:
                    take(session.receive_line(item, now))

        try:
            with self._domain("stdout pump"):
                await self._proc.read_stdout(deliver)
                if not self._faulted:
                    self._carried.flush()  # what the action task had not reached comes before the end
        finally:
            self._stdout_done.set()
            with anyio.CancelScope(shield=True):
                with self._domain("exit handling"):
                    await self._on_stdout_closed()
                self._exited.set()

    async def pump_actions(self) -> None:
        """Carries out the actions a read callback cannot (``gateway.stdio.carried``)."""
        with self._domain("action task"):
            await self._carried.run()

    async def pump_stdin(self) -> None:
        """Write queued lines until a write fails; a child that stops reading its stdin while it
        lives on can answer nothing more, so it is stopped (its requests then fail)."""
        with self._domain("stdin pump"):
            await self._pump_stdin()

    async def _pump_stdin(self) -> None:
        await self._stdin.run()
        if isinstance(self._stdin.broken, StdinStalled):  # alive, but its stdin stays full: recycle it now
            if not self._stopping:
                log.warning(
                    "child %s (pid %d) stopped reading its stdin: %s; stopping it",
                    self.spec.label,
                    self.pid,
                    self._stdin.broken,
                    extra={**self.log_fields, "event": "stdin_stalled"},
                )
                await self._proc.stop()
            return
        await self._exited_or_timeout()
        if not self._exited.is_set() and not self._stopping:
            log.warning(
                "child %s (pid %d) stopped reading its stdin; stopping it",
                self.spec.label,
                self.pid,
                extra={**self.log_fields, "event": "stdin_closed"},
            )
            await self._proc.stop()

    async def pump_deadlines(self) -> None:
        """Sleep until the machine's next deadline (or an earlier one is set), then tick."""
        with self._domain("deadline pump"):
            await self._timer.run()

    def _tick(self, now: float) -> None:
        self._apply(self._session.tick(now))

    async def watch_exit(self) -> None:
        """When the process exits, make sure stdout ends too: a grandchild that inherited the
        pipes (``npx`` → ``node``, or a server's helper) would otherwise hold it open, and the
        requests in flight would never be failed."""
        with self._domain("exit watch"):
            await self._watch_exit()

    async def _watch_exit(self) -> None:
        await self._proc.wait()
        with anyio.move_on_after(STDERR_DRAIN_GRACE):
            await self._stdout_done.wait()
        if not self._stdout_done.is_set():
            log.warning(
                "child %s (pid %d) exited but its process group holds stdout open",
                self.spec.label,
                self.pid,
                extra={**self.log_fields, "event": "stdout_held"},
            )
            await self._proc.clear_group()

    async def pump_stderr(self) -> None:
        """Drain stderr into the tail, and each line into the log (``gateway.stdio.stderrlog``)."""
        assert self._proc.stderr is not None
        stderr_log = self._stderr_log
        try:
            with self._domain("stderr pump"):
                while True:
                    try:
                        chunk = await self._proc.stderr.receive(READ_CHUNK)
                    except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                        break
                    lines = self._stderr.feed(chunk)
                    if stderr_log is not None:
                        stderr_log.lines(lines, time.monotonic())
        finally:
            last = self._stderr.close()
            if stderr_log is not None:
                with self._domain("stderr pump"):
                    stderr_log.lines(last, time.monotonic())
                    stderr_log.close()
            self._stderr_done.set()

    async def _on_stdout_closed(self) -> None:
        if self._proc.returncode is None:
            self.note_cpu(usage.read_process(self.pid))  # its last reading, while it may still be read
            with anyio.move_on_after(self.spec.stdin_close_grace):
                await self._proc.wait()
        if self._proc.returncode is None:  # stdout closed but the process lives on: it is useless now
            await self._proc.stop()
        with anyio.move_on_after(STDERR_DRAIN_GRACE):
            await self._stderr_done.wait()
        self._apply(self._session.exited(self._proc.returncode, stderr_tail=self.stderr_tail, stopping=self._stopping))

    # -- the failure domain ---------------------------------------------------------------

    def _domain(self, where: str) -> AbstractContextManager[None]:
        """A boundary around one of the child's tasks (the module doc, ``gateway.stdio.boundary``)."""
        what = f"the {where} of child {self.spec.label} (pid {self.pid})"
        return contained(log, what, FAULT_THEN, self._fault_in(where))

    def _fault_in(self, where: str) -> Callable[[Exception], None]:
        return lambda exc: self._fault(where)

    def _fault(self, where: str) -> None:
        """The gateway failed in the child's ``where``: its requests fail now (a ``ChildFaultError``),
        and it is stopped; its exit is then a gateway fault for the pool. Once."""
        if self._faulted:
            return
        self._faulted = True
        self._tg.start_soon(self._proc.stop)  # the stop ladder, shielded; stdout then ends
        self._apply(self._session.faulted(where))

    async def stop(self) -> None:
        """Stop the child (idempotent, shielded) and wait until the pumps have finished."""
        self._stopping = True
        await self._proc.stop()
        with anyio.CancelScope(shield=True):
            await self._exited.wait()


class ChildCall:
    """``StdioChild.exchange``: a plain async context manager (one is made per request; a
    generator-based one costs about four times as much to enter and leave)."""

    __slots__ = ("asks", "cancellable", "child", "ex", "log_level", "method", "params", "timeout", "tool")

    def __init__(
        self,
        child: StdioChild,
        method: str,
        params: JsonObject | None,
        timeout: float | None,
        cancellable: bool,
        asks: bool,
        log_level: str | None,
        tool: str | None,
    ) -> None:
        self.child = child
        self.method = method
        self.params = params
        self.timeout = timeout
        self.cancellable = cancellable
        self.asks = asks
        self.log_level = log_level
        self.tool = tool
        self.ex: Exchange | None = None

    def enter_now(self) -> Exchange | Coroutine[object, object, Exchange]:
        """Entered at once (the usual request: its line written or queued, no wait): the
        exchange; else a coroutine to await for it (``__aenter__`` without a coroutine of
        its own for the usual request)."""
        return self.child._begin(self)

    async def __aenter__(self) -> Exchange:
        entered = self.child._begin(self)
        return entered if isinstance(entered, Exchange) else await entered

    def leave(self) -> None:
        """``__aexit__`` without a coroutine (it never awaits)."""
        assert self.ex is not None
        self.child._close(self.ex)

    async def __aexit__(self, *exc_info: object) -> None:
        self.leave()
