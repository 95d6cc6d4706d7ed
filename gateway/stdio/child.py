"""One stdio MCP child: the anyio pump around the sans-IO correlator.

``open_child(spec)`` starts the child through its ``ChildBackend`` (a real process unless
told otherwise, ``gateway.stdio.backend``), starts the stdout and stderr pumps, runs the era
probe and handshake, and yields a ready ``StdioChild``; leaving the context stops the child
with the spec's ladder (``ChildProcess.stop``). Requests go through ``child.exchange(...)``:

    async with child.exchange("tools/call", params, timeout=30) as ex:
        async for note in ex:          # request-scoped notifications (progress), client token restored
            ...
        reply = ex.reply()             # Result | ErrorReply, or raises a ChildError

Guarantees:

- every exchange ends exactly once: with the child's reply, with ``ChildTimeoutError``
  (the child is sent ``notifications/cancelled`` with the child-side id), or with
  ``ChildExitedError`` naming the exit code or signal and quoting the stderr tail;
- leaving an exchange early (the HTTP client went away) sends ``notifications/cancelled``
  once, and the late reply is dropped;
- a line that is not JSON-RPC is logged and dropped; a malformed reply ends its request
  with ``ChildProtocolError``; an over-long line ends the request it answers (if its id
  can be read) and is never buffered whole (``framing``);
- a request from the child that only a client can answer (sampling, elicitation, roots) is
  **attributed** by the rules of ``gateway.protocol.attribution``: to the one exchange in
  flight that may ask (opened with ``asks=True`` for a method that may ask) as it is read;
  with several, it is held until one of them is left (the others ended), and only when
  none is left is it answered by the gateway. An attributed question arrives in that
  exchange's stream as a ``ChildAsk``, whose answer (or, after ``spec.input_timeout``, an
  error) goes back to the child under the child's own id. While a question is open or
  held, ``open_questions`` says so (the pool then gives the child no other exchange that
  may ask), and ``on_change`` is called when that ends. Every other child request goes to
  ``on_request`` (which may send it to the one client the child serves, or return None),
  else to the gateway's local answers (``gateway.protocol.inputs.local_answer``), and
  notifications that belong to no request go to ``on_notification`` as they are read;
- a request to a child that could not start or has died fails at once, never hangs.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager, suppress
from typing import Any, Final

import anyio
import orjson
from anyio.abc import TaskGroup

from gateway.errors import (
    CODE_NO_CLIENT_INPUT,
    ChildError,
    ChildExitedError,
    ChildProtocolError,
    ChildTimeoutError,
)
from gateway.protocol import attribution, jsonrpc, loglevels
from gateway.protocol.correlation import ChildRequest, Correlator, Late, ProgressFor, ReplyFor, Unsolicited
from gateway.protocol.framing import LineFramer, OversizedLine, sniff_id
from gateway.protocol.handshake import ChildInfo
from gateway.protocol.jsonrpc import JsonObject, Notification, Reply, Result
from gateway.protocol.versions import Era
from gateway.stdio import process
from gateway.stdio.ask import ChildAsk
from gateway.stdio.backend import PROCESS_BACKEND, ChildBackend, ChildProcess
from gateway.stdio.inbox import Inbox, progress_key
from gateway.stdio.questions import Questions, RequestHandler
from gateway.stdio.spec import ChildSpec

log = logging.getLogger("gateway.child")

READ_CHUNK: Final = 256 * 1024
STDERR_DRAIN_GRACE: Final = 1.0
"""Seconds to let stderr finish after the child exits, so the error quotes its last words."""
NOISE_LINES: Final = 5

NotificationHandler = Callable[[Notification], None]
ChangeHandler = Callable[[], None]
CANCELLED = "notifications/cancelled"
TOOLS_LIST_CHANGED = "notifications/tools/list_changed"


ExchangeItem = Notification | ChildAsk


class Exchange:
    """One request in flight: notifications (and attributed asks) as they arrive, then exactly one outcome."""

    def __init__(
        self,
        child: StdioChild,
        method: str,
        timeout: float | None,
        cancellable: bool,
        accepts_asks: bool = False,
        log_level: str | None = None,
        tool: str | None = None,
    ) -> None:
        self.child = child
        self.method = method
        self.tool = tool  # what attribution rule 5 learns about (None: not learned)
        self.questioned = False  # a question came while this exchange was one of its candidates
        self.cancellable = cancellable
        self.accepts_asks = accepts_asks
        self.log_level = log_level  # the client's minimum for notifications/message; None: it wants none
        self.child_id = 0
        self._timeout = timeout
        self._deadline: float | None = None
        # Never blocks the pump that serves every client of the child: past a bound, progress
        # for a token is coalesced (latest value kept); nothing else is dropped (``inbox``).
        self._inbox: Inbox[ExchangeItem] = Inbox()
        self._reply: Reply | None = None
        self._error: ChildError | None = None
        self._asks: list[ChildAsk] = []

    @property
    def is_done(self) -> bool:
        return self._reply is not None or self._error is not None

    def reply(self) -> Reply:
        if self._error is not None:
            raise self._error
        if self._reply is None:
            raise RuntimeError("exchange has no reply yet")  # a bug in the caller
        return self._reply

    @property
    def dropped_notifications(self) -> int:
        return self._inbox.backlog.dropped

    def _deliver(self, note: Notification) -> None:
        self._inbox.put(note, progress_key(note.method, note.params))

    def _offer_ask(self, ask: ChildAsk) -> bool:
        """Queue an attributed ask for the reader; False if it cannot be (then the child answers)."""
        if self.is_done or not self.accepts_asks or not self._inbox.put(ask):
            return False
        self._asks.append(ask)
        return True

    @property
    def may_ask(self) -> bool:
        """Whether a question from the child may be this exchange's (attribution rule 1)."""
        return self.accepts_asks and not self.is_done and attribution.may_ask(self.method)

    def _finish(self, reply: Reply | None = None, error: ChildError | None = None) -> None:
        if self.is_done:
            return
        self._reply, self._error = reply, error
        self._inbox.close()
        for ask in self._asks:  # nobody will read them now
            ask.answer_error(CODE_NO_CLIENT_INPUT, f"the request ({self.method}) ended before the client answered")
        if self.tool is not None and not self.questioned and isinstance(reply, Result) and self.child.is_legacy:
            self.child.questions.note_quiet(self.tool)  # it could have asked, and did not (rule 5)
        self.child.questions.exchange_ended()

    def ready(self) -> list[ExchangeItem]:
        """What is queued already, without waiting (so simultaneous asks make one round)."""
        items: list[ExchangeItem] = []
        while True:
            try:
                items.append(self._inbox.get_nowait())
            except (anyio.WouldBlock, anyio.EndOfStream):
                return items

    def __aiter__(self) -> Exchange:
        return self

    async def __anext__(self) -> ExchangeItem:
        if self._deadline is None:  # the common case: no cancel scope to enter and leave
            try:
                return await self._inbox.get()
            except anyio.EndOfStream:
                raise StopAsyncIteration from None
        with anyio.move_on_after(self._deadline - anyio.current_time()):
            try:
                return await self._inbox.get()
            except anyio.EndOfStream:
                raise StopAsyncIteration from None
        await self.child._expire(self)
        raise self.reply_error()

    def reply_error(self) -> ChildError:
        assert self._error is not None
        return self._error


class StdioChild:
    def __init__(
        self,
        spec: ChildSpec,
        proc: ChildProcess,
        tg: TaskGroup,
        on_request: RequestHandler | None = None,
        on_notification: NotificationHandler | None = None,
        on_change: ChangeHandler | None = None,
    ) -> None:
        self.spec = spec
        self.info: ChildInfo | None = None
        # Counters for metrics, folded into the pool's totals when the child exits.
        self.non_json_lines = 0
        self.oversized_lines = 0
        self.cancels_sent = 0
        self.timeouts = 0
        self.bytes_in = 0
        self.bytes_out = 0
        self.stdout_noise: deque[str] = deque(maxlen=NOISE_LINES)
        self.last_output = anyio.current_time()  # when stdout last said anything (stall detection)
        self.tools_generation = 0  # bumped by notifications/tools/list_changed (tool caches key on it)
        self._proc = proc
        self._tg = tg
        self._on_notification = on_notification
        self._correlator: Correlator[Exchange] = Correlator()
        self.questions = Questions(spec, tg, self._correlator.owners, self._write, on_request, on_change)
        self._stderr = process.StderrTail(spec.stderr_tail_lines, spec.stderr_line_chars)
        self._stderr_done = anyio.Event()
        self._stdout_done = anyio.Event()
        self._death: ChildError | None = None
        self._exited = anyio.Event()
        self._stopping = False

    def start_soon(self, func: Callable[..., Coroutine[Any, Any, None]], *args: Any) -> None:
        """Run ``func(*args)`` in the child's task group: it ends with the child at the latest."""
        self._tg.start_soon(func, *args)

    def __repr__(self) -> str:
        state = "dead" if self._death else "alive"
        return f"<StdioChild {self.spec.label} pid={self.pid} {state} in_flight={self.in_flight}>"

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def in_flight(self) -> int:
        return len(self._correlator)

    @property
    def stderr_tail(self) -> list[str]:
        return self._stderr.lines

    def counters(self) -> dict[str, int]:
        return {
            "non_json_lines": self.non_json_lines,
            "oversized_lines": self.oversized_lines,
            "cancels_sent": self.cancels_sent,
            "timeouts": self.timeouts,
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "questions_to_clients": self.questions.to_clients,
            "questions_answered_by_gateway": self.questions.answered_by_gateway,
        }

    @property
    def awaiting_input(self) -> int:
        """Child requests waiting for a client's answer (the child's silence is then no stall)."""
        return self.questions.awaiting_input

    @property
    def has_asked(self) -> bool:
        return self.questions.has_asked

    @property
    def open_questions(self) -> int:
        return self.questions.open

    @property
    def is_legacy(self) -> bool:
        """Spoken to in the legacy era: its questions are requests on stdio (a modern child's
        MRTR ``input_required`` needs no attribution, so it teaches rule 5 nothing)."""
        return self.info is not None and self.info.era is Era.LEGACY

    def is_alive(self) -> bool:
        return self._death is None

    @property
    def death(self) -> ChildError | None:
        return self._death

    async def wait_exited(self) -> ChildError:
        await self._exited.wait()
        assert self._death is not None
        return self._death

    # -- requests -------------------------------------------------------------------

    @asynccontextmanager
    async def exchange(
        self,
        method: str,
        params: JsonObject | None,
        *,
        timeout: float | None = None,
        cancellable: bool = True,
        asks: bool = False,
        log_level: str | None = None,
    ) -> AsyncIterator[Exchange]:
        """``asks=True``: the caller reads ``ChildAsk`` items too, and answers them.
        ``log_level``: the child's ``notifications/message`` at or above it that can be
        attributed to this exchange (``_on_log``) arrive in its stream."""
        if self._death is not None:
            raise self._death
        timeout = timeout if timeout is not None else self.spec.request_timeout
        tool = attribution.tool_key(method, params) if asks else None
        ex = Exchange(self, method, timeout, cancellable, asks, log_level, tool)
        request, pending = self._correlator.outgoing(method, params, ex)
        ex.child_id = pending.child_id
        if ex._timeout is not None:
            ex._deadline = anyio.current_time() + ex._timeout
        try:
            await self._write(request.to_dict())
            yield ex
        finally:
            ex._inbox.close_reader()
            if not ex.is_done:
                # The caller left before the outcome (client gone, cancelled): forget the id so the
                # late reply is dropped, and tell the child to stop working on it.
                self._correlator.abandon(ex.child_id)
                ex._finish(error=ChildExitedError("request abandoned by the caller"))
                if ex.cancellable and self._death is None:
                    with anyio.CancelScope(shield=True):
                        await self._send_cancel(ex.child_id, "the client cancelled the request")

    async def request(self, method: str, params: JsonObject | None, *, timeout: float | None = None) -> Reply:
        """Send a request and wait for its outcome, ignoring its notifications."""
        async with self.exchange(method, params, timeout=timeout) as ex:
            async for _ in ex:
                pass
            return ex.reply()

    async def notify(self, method: str, params: JsonObject | None = None) -> None:
        if self._death is not None:
            raise self._death
        await self._write(Notification(method, params).to_dict())

    async def _expire(self, ex: Exchange) -> None:
        """The exchange's deadline passed: cancel at the child and fail the caller."""
        self.timeouts += 1
        self._correlator.abandon(ex.child_id)
        ex._finish(
            error=ChildTimeoutError(
                f"{self.spec.label} did not answer {ex.method} within {ex._timeout:g} s; the request was cancelled",
                timeout_seconds=ex._timeout,
                method=ex.method,
            )
        )
        if self._death is None and ex.cancellable:
            await self._send_cancel(ex.child_id, "timed out in the gateway")

    async def _send_cancel(self, child_id: int, reason: str) -> None:
        self.cancels_sent += 1
        with suppress(ChildError):
            await self._write(Notification(CANCELLED, {"requestId": child_id, "reason": reason}).to_dict())

    async def _write(self, payload: JsonObject) -> None:
        line = jsonrpc.encode(payload) + b"\n"
        stdin = self._proc.stdin
        assert stdin is not None
        try:
            # No lock: the stream writes the whole line synchronously before it awaits the
            # drain, so lines never interleave, and concurrent drains are fine (Python ≥ 3.10).
            await stdin.send(line)
            self.bytes_out += len(line)
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            await self._exited_or_timeout()
            raise self._death or ChildExitedError(f"{self.spec.label} stopped reading its stdin") from exc

    async def _exited_or_timeout(self) -> None:
        with anyio.move_on_after(self.spec.stdin_close_grace + STDERR_DRAIN_GRACE):
            await self._exited.wait()

    # -- pumps ----------------------------------------------------------------------

    async def pump_stdout(self) -> None:
        assert self._proc.stdout is not None
        framer = LineFramer(self.spec.max_line_bytes)
        try:
            while True:
                try:
                    chunk = await self._proc.stdout.receive(READ_CHUNK)
                except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                    break
                self.last_output = anyio.current_time()
                self.bytes_in += len(chunk)
                for item in framer.feed(chunk):
                    if isinstance(item, OversizedLine):
                        self._on_oversized(item)
                    else:
                        self._on_line(item)
        finally:
            self._stdout_done.set()
            with anyio.CancelScope(shield=True):
                await self._on_stdout_closed()

    async def watch_exit(self) -> None:
        """When the process exits, make sure stdout ends too: a grandchild that inherited the
        pipes (``npx`` → ``node``, or a server's helper) would otherwise hold it open, and the
        requests in flight would never be failed."""
        await self._proc.wait()
        with anyio.move_on_after(STDERR_DRAIN_GRACE):
            await self._stdout_done.wait()
        if not self._stdout_done.is_set():
            log.warning("child %s (pid %d) exited but its process group holds stdout open", self.spec.label, self.pid)
            await self._proc.clear_group()

    async def pump_stderr(self) -> None:
        assert self._proc.stderr is not None
        try:
            while True:
                try:
                    chunk = await self._proc.stderr.receive(READ_CHUNK)
                except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                    break
                self._stderr.feed(chunk)
        finally:
            self._stderr.close()
            self._stderr_done.set()

    def _on_line(self, line: bytes) -> None:
        try:
            decoded = jsonrpc.decode(line)
        except jsonrpc.ParseError:
            text = line[:200].decode("utf-8", "replace")
            self._count_noise(text)
            log.warning(
                "child %s (pid %d) wrote a non-JSON line on stdout, dropped: %r", self.spec.label, self.pid, text
            )
            return
        # 2025-03-26 peers may batch on stdio; receivers must accept it.
        for obj in decoded if isinstance(decoded, list) else (decoded,):
            self._on_message(obj)

    def _count_noise(self, text: str) -> None:
        """A stdout line that is not JSON-RPC: counted and kept (what ``inspect`` reports)."""
        self.non_json_lines += 1
        self.stdout_noise.append(text)

    def _on_message(self, obj: object) -> None:
        try:
            message = jsonrpc.parse_message(obj)
        except jsonrpc.InvalidMessage as exc:
            self._fail_one(exc.id, ChildProtocolError(f"{self.spec.label} sent an invalid reply: {exc.reason}"))
            if exc.id is None or not self._correlator.is_pending(exc.id):
                # JSON but not JSON-RPC (a JSON log line, say): as much noise as a text line.
                self._count_noise(orjson.dumps(obj)[:200].decode("utf-8", "replace"))
                log.warning("child %s sent an invalid message, dropped: %s", self.spec.label, exc.reason)
            return
        routed = self._correlator.incoming(message)
        if isinstance(routed, ReplyFor):
            routed.pending.owner._finish(reply=routed.reply)
        elif isinstance(routed, ProgressFor):
            routed.pending.owner._deliver(routed.notification)
        elif isinstance(routed, ChildRequest):
            self.questions.on_request(routed.request)
        elif isinstance(routed, Unsolicited):
            if routed.notification.method == loglevels.LOG_MESSAGE:
                self._on_log(routed.notification)
                return
            if routed.notification.method == TOOLS_LIST_CHANGED:
                self.tools_generation += 1
            if self._on_notification is not None:
                self._on_notification(routed.notification)
        elif isinstance(routed, Late):
            log.debug("child %s: dropped a late message %r", self.spec.label, routed.message)

    def _on_log(self, note: Notification) -> None:
        """``notifications/message`` carries no request id (digest §8.2): it goes to the one
        exchange in flight, as for the child's questions, when that exchange's client asked
        for logs at or below its level; otherwise the gateway logs it and drops it."""
        params = note.params or {}
        level = params.get("level")
        pending = self._correlator.sole()
        owner = pending.owner if pending is not None else None
        if owner is not None and owner.log_level is not None and loglevels.at_least(level, owner.log_level):
            owner._deliver(note)
            return
        logger = params.get("logger")
        log.log(
            loglevels.python_level(level),
            "child %s (pid %d) log%s: %s",
            self.spec.label,
            self.pid,
            f" [{logger}]" if isinstance(logger, str) else "",
            params.get("data"),
        )

    def _fail_one(self, child_id: object, error: ChildError) -> None:
        if type(child_id) is int and self._correlator.is_pending(child_id):
            pending = self._correlator.abandon(child_id)
            assert pending is not None
            pending.owner._finish(error=error)

    def _on_oversized(self, line: OversizedLine) -> None:
        self.oversized_lines += 1
        limit = self.spec.max_line_bytes
        child_id = sniff_id(line)
        log.warning(
            "child %s wrote a %d-byte line, over the %d-byte limit; dropped (id %r)",
            self.spec.label,
            line.size,
            limit,
            child_id,
        )
        self._fail_one(
            child_id,
            ChildProtocolError(
                f"{self.spec.label} replied with a {line.size}-byte message, over the gateway's line "
                f"limit of {limit} bytes (raise --max-line-bytes)",
                size=line.size,
                limit=limit,
            ),
        )

    async def _on_stdout_closed(self) -> None:
        if self._proc.returncode is None:
            with anyio.move_on_after(self.spec.stdin_close_grace):
                await self._proc.wait()
        if self._proc.returncode is None:  # stdout closed but the process lives on: it is useless now
            await self._proc.stop()
        with anyio.move_on_after(STDERR_DRAIN_GRACE):
            await self._stderr_done.wait()
        self._death = self._exit_error()
        for pending in self._correlator.drain():
            pending.owner._finish(error=self._death)
        if not self._stopping:
            log.warning("%s", self._death.message)
        self._exited.set()

    def _exit_error(self) -> ChildExitedError:
        how, code, signame = process.describe_exit(self._proc.returncode)
        tail = self.stderr_tail
        message = f"{self.spec.label} (pid {self.pid}) {how}"
        if self._stopping:
            message += " after the gateway stopped it"
        if tail:
            message += "; stderr: " + " | ".join(tail[-3:])
        return ChildExitedError(
            message, exit_code=code, signal=signame, pid=self.pid, stderr=tail or None, command=self.spec.command
        )

    async def stop(self) -> None:
        """Stop the child (idempotent, shielded) and wait until the pumps have finished."""
        self._stopping = True
        await self._proc.stop()
        with anyio.CancelScope(shield=True):
            await self._exited.wait()


@asynccontextmanager
async def open_child(
    spec: ChildSpec,
    *,
    gateway_version: str = "0",
    on_request: RequestHandler | None = None,
    on_notification: NotificationHandler | None = None,
    on_change: ChangeHandler | None = None,
    backend: ChildBackend = PROCESS_BACKEND,
) -> AsyncIterator[StdioChild]:
    """Start (``backend``: a real process by default), handshake, yield a ready child; stop
    it on exit. Raises ``ChildStartError``."""
    from gateway.stdio.handshake import run_handshake  # local: handshake imports this module

    proc = await backend.open(spec)
    # Exceptions are carried out of the task group by hand: anyio would wrap them in an
    # ExceptionGroup, and callers should catch ChildStartError (or their own errors) plainly.
    failure: Exception | None = None
    async with anyio.create_task_group() as tg:
        child = StdioChild(spec, proc, tg, on_request, on_notification, on_change)
        tg.start_soon(child.pump_stdout)
        tg.start_soon(child.pump_stderr)
        tg.start_soon(child.watch_exit)
        try:
            child.info = await run_handshake(child, gateway_version)
        except Exception as exc:
            failure = exc
        if failure is None:
            log.info(
                "child %s (pid %d) ready: %s era, protocol %s",
                spec.label,
                child.pid,
                child.info.era.value if child.info else "?",
                child.info.version if child.info else "?",
            )
            try:
                yield child
            except Exception as exc:
                failure = exc
            finally:
                await child.stop()
                tg.cancel_scope.cancel()
        else:
            await child.stop()
            tg.cancel_scope.cancel()
    if failure is not None:
        raise failure
