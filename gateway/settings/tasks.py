"""Settings of the ``tasks`` section: which calls the gateway answers with a task handle
(the Tasks extension, ``gateway.protocol.tasks``), when, and how long it keeps them.

Declared as ``gateway.settings.declaration.Setting``; ``gateway.settings`` gathers them."""

from __future__ import annotations

from typing import Final

from gateway.protocol.tasks import DEFAULT_FIRST_ROUND, DEFAULT_TTL
from gateway.settings import convert
from gateway.settings.declaration import TASKS, Setting, rule

SETTINGS: Final[tuple[Setting, ...]] = (
    Setting(
        "--task-tool",
        convert=convert.strings,
        key="taskTools",
        target="server.task_tools",
        repeat=True,
        metavar="PATTERN",
        section=TASKS,
        help="calls of tools matching this shell-style pattern become tasks for clients that declare the "
        "Tasks extension (repeatable; tools the child marks execution.taskSupport do already)",
    ),
    Setting(
        "--task-ttl",
        key="taskTtl",
        target="server.task_ttl",
        kind=float,
        default=DEFAULT_TTL,
        metavar="SECONDS",
        section=TASKS,
        check=rule(lambda v: v >= 1, "must be at least 1 second"),
        help="keep a task and its result this long from its creation (default: %(default)s)",
    ),
    Setting(
        "--task-first-round",
        key="taskFirstRound",
        target="server.task_first_round",
        kind=float,
        default=DEFAULT_FIRST_ROUND,
        metavar="SECONDS",
        section=TASKS,
        check=rule(lambda v: 0 <= v <= 60, "must be between 0 and 60 seconds"),
        help="wait this long for the child's first sign before answering a call with a task handle: a "
        "question first is answered as a synchronous input_required round, and the task is made at its "
        "retry; 0 = the handle at once (default: %(default)s)",
    ),
)
