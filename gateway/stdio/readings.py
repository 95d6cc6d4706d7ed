"""What the rest of the gateway reads of a running child (``gateway.stdio.child``): its
handshake's ``ChildInfo``, pid, load and questions, the counters metrics fold in, the stderr tail
and stdout noise errors quote, and its death. ``StdioChild`` is a ``ChildReadings``; the state
read here is the child's (its session machine, stdin writer, stderr tail, exit event).
"""

from __future__ import annotations

from collections.abc import Sequence

import anyio

from gateway.errors import ChildError
from gateway.protocol.attribution import ToolLearning
from gateway.protocol.childsession import ChildSession
from gateway.protocol.handshake import ChildInfo
from gateway.protocol.versions import Era
from gateway.stdio import process
from gateway.stdio.backend import ChildProcess
from gateway.stdio.exchange import Exchange
from gateway.stdio.questions import Questions
from gateway.stdio.writer import LineWriter


class ChildReadings:
    """The read side of ``StdioChild``: properties over the state its ``__init__`` sets."""

    bytes_in: int
    cpu_us: int
    questions: Questions
    _info: ChildInfo | None
    _proc: ChildProcess
    _session: ChildSession[Exchange]
    _stdin: LineWriter
    _stderr: process.StderrTail
    _exited: anyio.Event

    @property
    def info(self) -> ChildInfo | None:
        return self._info

    @info.setter
    def info(self, info: ChildInfo | None) -> None:
        self._info = info
        self._session.legacy = self.is_legacy

    @property
    def pid(self) -> int:
        return self._proc.pid

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
        if seconds is not None:
            self.cpu_us = max(self.cpu_us, round(seconds * 1_000_000))

    @property
    def stdin_queued(self) -> int:
        """Bytes waiting for its stdin behind the write in progress (at most ``max_stdin_queue_bytes``)."""
        return self._stdin.queued

    @property
    def stdin_waiting_since(self) -> float | None:
        """Since when (``time.monotonic``) a write to its stdin has waited for the pipe; None when
        none waits (the dispatcher routes around a child whose write waits long)."""
        return self._stdin.waiting_since

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
