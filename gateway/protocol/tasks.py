"""The Tasks extension (``io.modelcontextprotocol/tasks``, SEP-2663; digest §9), as pure rules.

The gateway is a Tasks *receiver* for every child: a modern client that declares the
extension on a ``tools/call`` may be answered with a task handle instead of the result; the
call runs on a child as an ordinary call and its outcome is kept for the task's TTL, so it
survives any proxy's request limit. This module holds what needs no I/O: negotiation, which
calls become tasks, a task's state and its wire shapes. ``gateway.relay.tasks`` runs them.

Rules:

1. **Negotiation is per request.** A request opts in with
   ``_meta["io.modelcontextprotocol/clientCapabilities"].extensions["io.modelcontextprotocol/tasks"]``.
   Without it, ``tasks/get``, ``tasks/update`` and ``tasks/cancel`` answer -32021 naming the
   extension, and no call becomes a task. ``server/discover`` advertises the extension under
   ``capabilities.extensions`` (never the 2025-11-25 ``capabilities.tasks`` slot).
2. **Creation is the gateway's decision** (server-directed): a ``tools/call`` becomes a task
   when the client opted in and the tool is task-suitable: the child marks it
   (``execution.taskSupport`` ``optional`` or ``required`` in a 2025-11-25 tool definition) or
   the operator names it (``TaskPolicy.tools``, shell-style patterns). A tool the child marks
   ``forbidden`` never becomes a task. Calls still running after some time are *not* turned
   into tasks: the handle must be the answer to the request, and once a stream has carried
   progress for it the answer is already under way (see docs/bridging.md "Tasks").
3. **States**: ``working`` → ``input_required`` ⇄ ``working`` → one terminal state
   (``completed``, ``failed``, ``cancelled``); a terminal state never changes. A tool that ran
   and reported an error (``isError``) is ``completed``; ``failed`` is for a JSON-RPC error
   (the child's, a crash, a timeout), inlined as ``error``. Every change sets ``lastUpdatedAt``.
4. **Questions** (``inputRequests``) carry task-level keys (``q1``, ``q2``, …) unique over the
   task's lifetime (the extension forbids reusing a key); each maps to the key of the MRTR
   round the relay runs underneath. ``tasks/update`` answers only outstanding keys; others are
   ignored. The round goes on once every outstanding key is answered.
5. **Kept for the TTL** (``ttlMs``, from creation). A task that ends after its TTL is kept
   ``MIN_KEEP_AFTER_END`` seconds more (its ``ttlMs`` grows to say so), so a result is never
   dropped before a client could read it once. The outcome is kept **as its serialized
   bytes** (``Task.outcome``, inlined on the wire as an ``orjson.Fragment``), so what the
   bounds count (``Task.size``) is what the store holds, not an estimate of it.
6. **Owned**: a task belongs to its owner and server; for anyone else it does not exist
   (-32602, as for an unknown id). The owner is the request's client key: the principal, or
   for an anonymous client its peer address (``anonymous@ADDRESS``, as every other limit).
   With owner routing the id names the owning instance (``mint_task_id``), sealed and signed
   like a session id (with keys of its own), so any replica can forward ``tasks/*`` to it
   and no client reads the address.
8. **Status notifications** (``notifications/tasks``): a ``subscriptions/listen`` that asks for
   ``notifications.taskIds`` and nothing else is the gateway's own listen: it acknowledges the
   ids it holds for that principal and sends each listed task's ``DetailedTask`` whenever it
   changes. A listen that asks for tasks *and* other notifications is served as before, with
   ``taskIds`` left out (an acknowledgement without them: the server agreed to none).
7. **Pass-through**: a modern child that advertises the extension keeps it. Its calls are
   never emulated: the child is told the client's extension, and when it answers with a task
   handle the gateway hands out a task id of its own (as in rule 6) that maps to the child and
   the child's id; ``tasks/*`` go to that child with the child's id, and the answers come back
   with the gateway's. The gateway keeps the mapping only, never the child's results.
   A legacy child with 2025-11-25 tasks runs its task-marked tools as its own tasks, bridged
   to a task of the gateway's (``gateway.protocol.taskbridge``).

Imports: standard library, orjson and ``gateway.protocol`` only. The clock is passed in.
"""

from __future__ import annotations

import base64
import fnmatch
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

import orjson

from gateway.protocol import owner as owners
from gateway.protocol.jsonrpc import INVALID_PARAMS, MISSING_CLIENT_CAPABILITY, JsonObject, error_object
from gateway.protocol.owner import IdKeys, Owner, OwnerError

EXTENSION: Final = "io.modelcontextprotocol/tasks"
GET: Final = "tasks/get"
UPDATE: Final = "tasks/update"
CANCEL: Final = "tasks/cancel"
METHODS: Final = frozenset({GET, UPDATE, CANCEL})
TASK_METHODS: Final = frozenset({"tools/call"})
"""Requests that may be answered with a task (the extension names only ``tools/call``)."""

WORKING: Final = "working"
INPUT_REQUIRED: Final = "input_required"
COMPLETED: Final = "completed"
FAILED: Final = "failed"
CANCELLED: Final = "cancelled"
TERMINAL: Final = frozenset({COMPLETED, FAILED, CANCELLED})

DEFAULT_TTL: Final = 3600.0
"""Seconds a task (and its result) is kept from its creation: an hour, enough for a client
that lost its connection to come back. ``--task-ttl`` changes it."""
DEFAULT_FIRST_ROUND: Final = 1.0
"""Seconds a call that may become a task waits for the child's first sign before its handle
is given: a question first (or a modern child's ``input_required``) is answered as a
synchronous MRTR round and the task is made at the round's retry (SEP-2663, MRTR
composition); anything else first, or nothing, and the task is made at once. A child's sign
ends the wait, so it costs only a silent child's call this long. ``--task-first-round``."""
MIN_KEEP_AFTER_END: Final = 60.0
"""Seconds a task that ends after its TTL is still kept, so its result can be read once."""
POLL_INTERVAL_MS: Final = 1000
"""The ``pollIntervalMs`` suggested to clients."""
MAX_TASKS_PER_PRINCIPAL: Final = 32
"""Live (unfinished) tasks one principal may have per server; past it, that principal's
further task-suitable calls are answered synchronously, as if tasks were not negotiated."""
MAX_TASKS: Final = 1024
"""Tasks (live or kept) one server's store holds at most; past it, calls run synchronously."""
MAX_HELD_TASKS_PER_PRINCIPAL: Final = 64
"""One principal's share of its server's store: tasks it holds there, running or kept. Past
it, that principal's further task-suitable calls run synchronously (nothing of its own or of
anyone else's is dropped for them), so one principal can fill at most 1/16 of ``MAX_TASKS``:
a flood of never-polled tasks switches Tasks off for its sender only."""
MAX_RESULT_BYTES: Final = 4 * 1024 * 1024
"""Largest serialized outcome kept for one task; a larger result fails the task with a clear
error (the result is not kept truncated)."""
MAX_BYTES_PER_PRINCIPAL: Final = 64 * 1024 * 1024
"""Kept outcomes of one principal per server, in serialized bytes; past it, that principal's
oldest ended tasks are dropped first (another principal's are never touched)."""
MAX_KEPT_BYTES: Final = 256 * 1024 * 1024
"""Kept outcomes of every task store of one gateway process, in serialized bytes (``KeptBytes``).
Past it, the oldest ended tasks of whoever holds the most bytes are dropped first, so a
principal that holds less than an even share never loses a result to another's."""
TASK_ID_PREFIX: Final = "t."
TASK_RANDOM_BYTES: Final = 16
MAX_TASK_ID_CHARS: Final = 1024


@dataclass(frozen=True, slots=True)
class TaskPolicy:
    """How one server serves tasks (``--task-tool``, ``--task-ttl``, ``--task-first-round``)."""

    tools: tuple[str, ...] = ()  # shell-style patterns of tool names that always become tasks
    ttl: float = DEFAULT_TTL
    first_round: float = DEFAULT_FIRST_ROUND  # seconds to wait for a question before the handle
    enabled: bool = True  # False: the extension is not advertised and never used

    def wants(self, tool: str, task_support: str | None) -> bool:
        """Rule 2: whether a call of ``tool`` becomes a task for a client that opted in."""
        if not self.enabled or task_support == "forbidden":
            return False
        if task_support in ("optional", "required"):
            return True
        return any(fnmatch.fnmatchcase(tool, pattern) for pattern in self.tools)


# -- negotiation ------------------------------------------------------------------------------


def opted_in(capabilities: Mapping[str, Any] | None) -> bool:
    """Rule 1: whether a request's client capabilities declare the extension."""
    extensions = capabilities.get("extensions") if capabilities else None
    return isinstance(extensions, dict) and isinstance(extensions.get(EXTENSION), dict)


def child_serves(capabilities: Mapping[str, Any]) -> bool:
    """Whether a (modern) child advertises the extension itself: its tasks pass through (rule 7)."""
    extensions = capabilities.get("extensions")
    return isinstance(extensions, dict) and isinstance(extensions.get(EXTENSION), dict)


def is_task_result(result: object) -> bool:
    """A child's ``CreateTaskResult`` (``resultType: "task"`` with a task id)."""
    return isinstance(result, dict) and result.get("resultType") == "task" and isinstance(result.get("taskId"), str)


def without_extension(capabilities: JsonObject) -> JsonObject:
    """Client capabilities as a child gets them: the gateway serves tasks itself, so a child
    never learns the client could take a task handle (it would hand out ids the gateway
    cannot route)."""
    extensions = capabilities.get("extensions")
    if not isinstance(extensions, dict) or EXTENSION not in extensions:
        return capabilities
    kept = {name: value for name, value in extensions.items() if name != EXTENSION}
    rest = {key: value for key, value in capabilities.items() if key != "extensions"}
    return {**rest, "extensions": kept} if kept else rest


def advertise(result: JsonObject) -> JsonObject:
    """A ``server/discover`` result with the extension under ``capabilities.extensions``."""
    capabilities = result.get("capabilities")
    capabilities = dict(capabilities) if isinstance(capabilities, dict) else {}
    capabilities.pop("tasks", None)  # the 2025-11-25 slot: modern peers must not use it
    extensions = capabilities.get("extensions")
    capabilities["extensions"] = {**(extensions if isinstance(extensions, dict) else {}), EXTENSION: {}}
    return {**result, "capabilities": capabilities}


STATUS_NOTIFICATION: Final = "notifications/tasks"
MAX_LISTENED_TASKS: Final = 256
"""Task ids one listen may ask for; more are left out of its acknowledgement."""


def listen_task_ids(params: Mapping[str, Any] | None) -> list[str] | None:
    """The ``notifications.taskIds`` a ``subscriptions/listen`` asks for (None: not asked)."""
    notifications = (params or {}).get("notifications")
    ids = notifications.get("taskIds") if isinstance(notifications, dict) else None
    if not isinstance(ids, list):
        return None
    return [task_id for task_id in ids if isinstance(task_id, str)][:MAX_LISTENED_TASKS]


def listens_only_for_tasks(params: Mapping[str, Any] | None) -> bool:
    """Rule 8: a listen that asks for task status and nothing else."""
    notifications = (params or {}).get("notifications")
    if not isinstance(notifications, dict):
        return False
    others = {key: value for key, value in notifications.items() if key != "taskIds"}
    return not any(value not in (False, None, [], {}) for value in others.values())


def without_task_ids(params: JsonObject) -> JsonObject:
    """A listen's params without ``notifications.taskIds`` (served by the child or the emulation)."""
    notifications = params.get("notifications")
    if not isinstance(notifications, dict) or "taskIds" not in notifications:
        return params
    return {**params, "notifications": {k: v for k, v in notifications.items() if k != "taskIds"}}


def status_params(task: Task) -> JsonObject:
    """A ``notifications/tasks``' params: the task as ``tasks/get`` would show it now."""
    return {key: value for key, value in task.detailed().items() if key != "resultType"}


def missing_extension_error(method: str) -> JsonObject:
    return error_object(
        MISSING_CLIENT_CAPABILITY,
        f"{method} needs the {EXTENSION} extension: declare it in this request's _meta clientCapabilities.extensions",
        {"requiredCapabilities": {"extensions": {EXTENSION: {}}}},
    )


def not_found_error(task_id: object) -> JsonObject:
    return error_object(
        INVALID_PARAMS,
        f"no task {task_id!r} here: unknown, expired, or another client's",
        {"taskId": task_id} if isinstance(task_id, str) else None,
    )


def params_error(method: str, problem: str) -> JsonObject:
    return error_object(INVALID_PARAMS, f"{method}: {problem}")


# -- ids ------------------------------------------------------------------------------------------


def mint_task_id(owner: Owner | None, keys: IdKeys | None, random: bytes) -> str:
    """A task id; with owner routing it names the owning instance (rule 6), sealed and signed
    with ``keys`` (derived for task ids, so a session id never passes as a task id)."""
    if owner is None or keys is None:
        return TASK_ID_PREFIX + base64.urlsafe_b64encode(random).rstrip(b"=").decode("ascii")
    return TASK_ID_PREFIX + owners.mint_session_id(owner, keys, random)


def task_owner(task_id: str, keys: Sequence[IdKeys]) -> Owner | None:
    """The owner a task id names, verified with any of ``keys`` (a ring's, the current one's
    first); None for an id that names none. ``OwnerError`` when it claims an owner but fails
    verification."""
    if not task_id.startswith(TASK_ID_PREFIX) or len(task_id) > MAX_TASK_ID_CHARS:
        return None
    inner = task_id[len(TASK_ID_PREFIX) :]
    if not owners.is_owned_session_id(inner):
        return None
    return owners.session_owner(inner, keys)


# -- a task ---------------------------------------------------------------------------------------


def iso(seconds: float) -> str:
    """ISO 8601 in UTC with milliseconds (``2026-12-03T12:00:00.123Z``)."""
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class Task:
    """One task's state (rules 3–5). ``now`` is wall-clock seconds, passed in."""

    task_id: str
    principal: str
    server: str
    created: float
    ttl: float
    status: str = WORKING
    updated: float = 0.0
    status_message: str | None = None
    outcome: bytes | None = None  # the kept result (completed) or error (failed), serialized
    ended: float | None = None
    questions: dict[str, JsonObject] = field(default_factory=dict)  # task key → input request
    round_keys: dict[str, str] = field(default_factory=dict)  # task key → the MRTR round's key
    answers: dict[str, JsonObject] = field(default_factory=dict)  # task key → response, this round
    asked: int = 0  # task keys issued so far
    delivered: bool = False  # its outcome was read (tasks/get on the ended task) at least once

    def __post_init__(self) -> None:
        self.updated = self.updated or self.created

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL

    @property
    def size(self) -> int:
        """Bytes of the kept outcome, as stored."""
        return len(self.outcome) if self.outcome is not None else 0

    def expires_at(self) -> float:
        """When the task may be dropped (rule 5)."""
        deadline = self.created + self.ttl
        if self.ended is not None:
            deadline = max(deadline, self.ended + MIN_KEEP_AFTER_END)
        return deadline

    def ttl_ms(self) -> int:
        return round((self.expires_at() - self.created) * 1000)

    # -- transitions --------------------------------------------------------------------------

    def ask(self, round_requests: Mapping[str, JsonObject], now: float) -> None:
        """The call needs input: ``round_requests`` (keyed by the MRTR round) get task keys."""
        if self.is_terminal:
            return
        self.questions, self.round_keys, self.answers = {}, {}, {}
        for round_key, request in round_requests.items():
            self.asked += 1
            key = f"q{self.asked}"
            self.questions[key] = request
            self.round_keys[key] = round_key
        self.status, self.updated, self.status_message = INPUT_REQUIRED, now, None

    def take_answers(self, given: Mapping[str, object], now: float) -> dict[str, JsonObject] | None:
        """Record the outstanding answers among ``given`` (others ignored, rule 4). Returns the
        round's answers keyed by the MRTR round once every question is answered, else None."""
        if self.status != INPUT_REQUIRED:
            return None
        for key, value in given.items():
            if key in self.questions and key not in self.answers and isinstance(value, dict):
                self.answers[key] = value
        if len(self.answers) < len(self.questions):
            return None
        answers = {self.round_keys[key]: value for key, value in self.answers.items()}
        self.questions, self.round_keys, self.answers = {}, {}, {}
        self.status, self.updated = WORKING, now
        return answers

    def withdraw(self, now: float) -> None:
        """The round's questions ended without the client's answers (a bridged child gave up
        on them): ``working`` again; their keys are never reused (rule 4)."""
        if self.status == INPUT_REQUIRED:
            self.questions, self.round_keys, self.answers = {}, {}, {}
            self.status, self.updated = WORKING, now

    def note(self, message: str, now: float) -> None:
        """A progress message from the child, shown as ``statusMessage`` while working."""
        if self.status == WORKING:
            self.status_message, self.updated = message, now

    def complete(self, result: JsonObject, now: float) -> None:
        self.keep(COMPLETED, serialized_result(result), now)

    def fail(self, error: JsonObject, now: float) -> None:
        self.keep(FAILED, serialized(error), now)

    def keep(self, status: str, outcome: bytes, now: float) -> None:
        """End as ``status`` (``completed``: ``outcome`` is the serialized result; ``failed``:
        the serialized error), once."""
        if not self.is_terminal:
            self.outcome = outcome
            self._end(status, now)

    def cancel(self, now: float) -> None:
        if not self.is_terminal:
            self.status_message = "cancelled by the client"
            self._end(CANCELLED, now)

    def _end(self, status: str, now: float) -> None:
        self.questions, self.round_keys, self.answers = {}, {}, {}
        self.status, self.updated, self.ended = status, now, now

    # -- wire -----------------------------------------------------------------------------------

    def fields(self) -> JsonObject:
        """The ``Task`` fields (without status-specific payload)."""
        fields: JsonObject = {
            "taskId": self.task_id,
            "status": self.status,
            "createdAt": iso(self.created),
            "lastUpdatedAt": iso(self.updated),
            "ttlMs": self.ttl_ms(),
            "pollIntervalMs": POLL_INTERVAL_MS,
        }
        if self.status_message is not None:
            fields["statusMessage"] = self.status_message
        return fields

    def created_result(self) -> JsonObject:
        """The flat ``CreateTaskResult`` answering the call (no result, error or requestState)."""
        return {"resultType": "task", **self.fields()}

    def detailed(self) -> JsonObject:
        """The ``DetailedTask``, as ``tasks/get`` answers it (``resultType: complete``)."""
        detailed: JsonObject = {"resultType": "complete", **self.fields()}
        if self.status == INPUT_REQUIRED:
            detailed["inputRequests"] = {k: v for k, v in self.questions.items() if k not in self.answers}
        elif self.status == COMPLETED and self.outcome is not None:
            detailed["result"] = orjson.Fragment(self.outcome)  # written as kept, never parsed again
        elif self.status == FAILED and self.outcome is not None:
            detailed["error"] = orjson.Fragment(self.outcome)
        return detailed


RELATED_TASK_META: Final = "io.modelcontextprotocol/related-task"


def serialized(value: object) -> bytes:
    """``value`` serialized as a task keeps it: in a bytes object of exactly its length.
    ``orjson.dumps`` returns its growing buffer, up to about twice the length (measured: 2.0 MB
    held for a 1.25 MB result), so the bytes counted would not be the bytes held."""
    return bytes(memoryview(orjson.dumps(value)))


def serialized_result(result: JsonObject) -> bytes:
    """A result as a completed task keeps it: serialized, without related-task ``_meta``."""
    return serialized(without_related_meta(result))


def without_related_meta(obj: JsonObject) -> JsonObject:
    """A result or params without a related-task entry in its ``_meta`` (an emptied ``_meta``
    dropped)."""
    return {k: v for k, v in obj.items() if k != "_meta"} | _meta_of(obj)


def _meta_of(result: JsonObject) -> JsonObject:
    """A result's ``_meta`` without any related-task entry (the inlined result carries none)."""
    meta = result.get("_meta")
    if not isinstance(meta, dict):
        return {}
    kept = {k: v for k, v in meta.items() if k != RELATED_TASK_META}
    return {"_meta": kept} if kept else {}


def without_related_task(message: JsonObject) -> JsonObject:
    """A response whose result names no related task in its ``_meta`` (a legacy session's
    answer to a call that the child ran as its task: the session made none)."""
    result = message.get("result")
    meta = result.get("_meta") if isinstance(result, dict) else None
    if not isinstance(meta, dict) or RELATED_TASK_META not in meta:
        return message
    assert isinstance(result, dict)
    return {**message, "result": without_related_meta(result)}


def task_id_of(params: JsonObject | None) -> str | None:
    task_id = (params or {}).get("taskId")
    return task_id if isinstance(task_id, str) and task_id else None


def check_owner(task_id: str, keys: Sequence[IdKeys]) -> Owner | None:
    """``task_owner`` that treats an id failing verification as naming no owner here (the
    store then answers "not found", as for any id it does not hold)."""
    try:
        return task_owner(task_id, keys)
    except OwnerError:
        return None


# -- kept bytes, process-wide -----------------------------------------------------------------


@dataclass
class KeptBytes:
    """The serialized bytes of kept task outcomes in one gateway process, per principal and in
    all (every server's store counts into one). Pure bookkeeping: the stores drop what
    ``over_by`` says is too much."""

    limit: int = MAX_KEPT_BYTES
    used: int = 0
    by_principal: Counter[str] = field(default_factory=Counter)

    def add(self, principal: str, size: int) -> None:
        self.used += size
        self.by_principal[principal] += size

    def remove(self, principal: str, size: int) -> None:
        self.used -= size
        self.by_principal[principal] -= size
        if self.by_principal[principal] <= 0:
            del self.by_principal[principal]

    def over_by(self) -> int:
        return self.used - self.limit

    def largest(self) -> str | None:
        """Whose outcomes give way first when the process is over its bound: whoever holds
        the most (max-min fairness: a principal under an even share is never the one)."""
        return max(self.by_principal, key=self.by_principal.__getitem__) if self.by_principal else None
