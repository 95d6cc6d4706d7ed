"""One OS process for a child: spawn, stderr tail, exit description, and the stop ladder.

- Spawned directly (argv, never a shell) in a **new session**, so it is the leader of its
  own process group: terminal signals do not reach it, and stopping signals the whole
  group (``npx`` forks ``node``; signalling only ``npx`` would orphan the server).
- ``stop()`` follows the spec's order (stdio §Shutdown): close stdin, wait
  ``stdin_close_grace``, SIGTERM the group, wait ``sigterm_grace``, SIGKILL the group. It is
  idempotent, shielded from cancellation, safe on a dead child, and always reaps the
  process (no zombies); group members left behind by an exited leader are signalled too.
- ``StderrTail`` keeps the last N non-empty lines, each cut to a bound, while stderr is
  drained forever (a full stderr pipe would stall the child).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from collections import deque

import anyio
from anyio.abc import Process

from gateway.errors import ChildStartError
from gateway.stdio import hints
from gateway.stdio.spec import ChildSpec, check_spec, child_environment

log = logging.getLogger("gateway.child")

_GROUP_POLL = 0.05
"""Seconds between checks that a process group has emptied (only while stopping)."""


class StderrTail:
    def __init__(self, lines: int, line_chars: int) -> None:
        self._lines: deque[str] = deque(maxlen=lines)
        self._line_chars = line_chars
        self._partial = bytearray()

    def feed(self, chunk: bytes) -> None:
        self._partial += chunk
        *complete, rest = self._partial.split(b"\n")
        for raw in complete:
            self._keep(raw)
        # An endless line must not grow memory: keep only what the tail would show. Leading
        # whitespace is dropped first (``_keep`` strips it anyway), so indentation longer
        # than the bound cannot crowd out the text when the line arrives in pieces.
        self._partial = bytearray(rest.lstrip()[: self._line_chars * 4])

    def close(self) -> None:
        if self._partial:
            self._keep(bytes(self._partial))
            self._partial.clear()

    def _keep(self, raw: bytes | bytearray) -> None:
        text = raw.decode("utf-8", "replace").rstrip("\r").strip()
        if text:
            self._lines.append(text[: self._line_chars])

    @property
    def lines(self) -> list[str]:
        return list(self._lines)


def describe_exit(returncode: int | None) -> tuple[str, int | None, str | None]:
    """('exited with code 3' | 'was killed by SIGKILL', code, signal name)."""
    if returncode is None:
        return "closed its stdout", None, None
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by {name}", None, name
    return f"exited with code {returncode}", returncode, None


async def spawn(spec: ChildSpec) -> Process:
    """Start the process or raise ``ChildStartError('cannot start PROGRAM: REASON')``."""
    check_spec(spec)
    try:
        return await anyio.open_process(
            spec.argv,
            env=child_environment(spec),
            cwd=spec.cwd,
            start_new_session=True,
        )
    except OSError as exc:
        reason = exc.strerror or str(exc)
        hint = None
        if spec.cwd is not None and not os.path.isdir(spec.cwd):  # noqa: ASYNC240 - error path only
            reason = f"working directory {spec.cwd} does not exist or is not a directory"
        elif isinstance(exc, FileNotFoundError):
            hint = hints.missing_program(spec.command)
        message = f"cannot start {spec.command}: {reason}" + (f" ({hint})" if hint else "")
        raise ChildStartError(message, command=spec.command, hint=hint) from exc


def _signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to the group; False if the group no longer exists."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - a foreign process reused the group id
        return False
    return True


def _group_members(pgid: int) -> list[tuple[int, str, int]]:
    """(pid, state, ppid) of every process in the group, read from /proc (Linux)."""
    members: list[tuple[int, str, int]] = []
    try:
        entries = os.listdir("/proc")
    except OSError:  # pragma: no cover - not Linux
        return [(pgid, "R", 0)] if _signal_group(pgid, 0) else []
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        # Fields after the command name (which may hold spaces and parentheses).
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 2 and int(fields[2]) == pgid:
            members.append((int(name), fields[0].decode(), int(fields[1])))
    return members


def _group_alive(pgid: int) -> bool:
    """True while a member of the group is running (zombies do not count)."""
    return any(state != "Z" for _, state, _ in _group_members(pgid))


def become_subreaper() -> bool:
    """Adopt orphaned descendants (Linux ``PR_SET_CHILD_SUBREAPER``), so that what a child
    leaves behind is reaped by us even where PID 1 does not reap (some container inits)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(36, 1, 0, 0, 0) == 0)  # 36 = PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        return False


def _reap_group_zombies(pgid: int) -> None:
    me = os.getpid()
    for pid, state, ppid in _group_members(pgid):
        if state == "Z" and ppid == me:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)


async def stop(process: Process, spec: ChildSpec) -> int | None:
    """Run the stop ladder and return the exit code. Shielded: always completes."""
    pgid = process.pid  # leader of its own session, so its pid is the group id
    with anyio.CancelScope(shield=True):
        if process.stdin is not None:
            with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                await process.stdin.aclose()
        if process.returncode is None:
            with anyio.move_on_after(spec.stdin_close_grace):
                await process.wait()
        if process.returncode is None:
            log.info("child %s (pid %d) ignored stdin close; sending SIGTERM", spec.label, process.pid)
            _signal_group(pgid, signal.SIGTERM)
            with anyio.move_on_after(spec.sigterm_grace):
                await process.wait()
        if process.returncode is None:
            log.warning("child %s (pid %d) ignored SIGTERM; sending SIGKILL", spec.label, process.pid)
            _signal_group(pgid, signal.SIGKILL)
            await process.wait()
        await clear_group(pgid, spec)
    return process.returncode


async def clear_group(pgid: int, spec: ChildSpec) -> None:
    """Terminate what the leader left behind in its group (e.g. node after npx exits)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not _group_alive(pgid):
            break
        if sig is signal.SIGKILL:
            log.warning("child %s: killing processes left in its group %d", spec.label, pgid)
        _signal_group(pgid, sig)
        with anyio.move_on_after(spec.sigterm_grace):
            while _group_alive(pgid):  # noqa: ASYNC110 - no event exists for foreign processes
                await anyio.sleep(_GROUP_POLL)
    _reap_group_zombies(pgid)
