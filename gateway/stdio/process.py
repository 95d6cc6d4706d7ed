"""One OS process for a child: spawn, stderr tail, exit description, and the stop ladder.

- Spawned directly (argv, never a shell) in a **new session**, so it is the leader of its
  own process group: terminal signals do not reach it, and stopping signals the whole
  group (``npx`` forks ``node``; signalling only ``npx`` would orphan the server).
- **Through a launcher** (``LAUNCHER``, run as ``python -I -S -c``; no shell): before it
  ``execv``s the program (same pid, same session), it asks the kernel to SIGKILL it when the
  gateway process dies (Linux ``PR_SET_PDEATHSIG``; checked against the gateway's pid, so a
  gateway that died first is not missed), closes every descriptor but its three pipes, and
  restores the signals Python ignores (SIGPIPE, SIGXFSZ), makes the gateway's secret files
  unreadable (``spec.hidden_files``, ``confinement.HIDE_FILES``). An event loop's spawn may leave
  inheritable descriptors open in the child (uvloop ignores ``close_fds``): under
  ``--workers`` a child used to hold the listening socket and the supervisor's pipes. The
  program is found before the spawn (``find_program``, the child's ``PATH`` and ``cwd``),
  so a missing or non-executable one is still ``cannot start PROGRAM: REASON``. The limit:
  the kernel signals only the child itself, not what it started (``npx``'s ``node``); those
  see their stdin end (the gateway's pipe ends close with it) and servers exit on that, but
  one that ignores stdin EOF outlives a gateway killed with SIGKILL. A stopped or exiting
  gateway ends them itself (the stop ladder, ``sweep_descendants``).
- ``stop()`` follows the spec's order (stdio §Shutdown): close stdin, wait
  ``stdin_close_grace``, SIGTERM the group, wait ``sigterm_grace``, SIGKILL the group. It is
  idempotent, shielded from cancellation, safe on a dead child, and always reaps the
  process (no zombies); group members left behind by an exited leader are signalled too.
- **Descendants that left the group** (``setsid()``, a daemonizing helper) are found by
  ancestry: ``stop()`` notes every process below the child before it signals anything, and
  whichever of them still runs after the group is gone gets SIGTERM, ``sigterm_grace``,
  then SIGKILL, and is reaped (the gateway is a child subreaper, ``become_subreaper``, so
  orphans are re-parented to it). What a child orphaned before its stop (it crashed, or
  forked after the snapshot) is swept when the gateway exits: ``sweep_descendants`` ends
  every process below the gateway, with ``ORPHAN_TERM_GRACE``. Start times are compared,
  so a recycled pid is never signalled.
- ``StderrTail`` keeps the last N non-empty lines, each cut to a bound, while stderr is
  drained forever (a full stderr pipe would stall the child).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import signal
import sys
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

import anyio
from anyio.abc import Process

from gateway.errors import ChildStartError
from gateway.stdio import hints
from gateway.stdio.confinement import HIDE_FILES
from gateway.stdio.spec import ChildSpec, check_spec, child_environment

log = logging.getLogger("gateway.child")

_GROUP_POLL = 0.05
"""Seconds between checks that a process group has emptied (only while stopping)."""
ORPHAN_TERM_GRACE: Final = 2.0
"""Seconds the processes children left behind get after SIGTERM when the gateway exits,
before SIGKILL: as long as a child gets (the default ``sigterm_grace``)."""


@dataclass(frozen=True)
class ProcessEntry:
    pid: int
    state: str  # "R", "S", "Z" (zombie), …
    ppid: int
    pgid: int
    start: int  # clock ticks after boot: with the pid, names one process for its whole life


class StderrTail:
    """The last ``lines`` non-empty lines of a child's stderr, each cut at ``line_chars``;
    ``feed`` and ``close`` return the lines they completed (what the log is given)."""

    def __init__(self, lines: int, line_chars: int) -> None:
        self._lines: deque[str] = deque(maxlen=lines)
        self._line_chars = line_chars
        self._partial = bytearray()

    def feed(self, chunk: bytes) -> list[str]:
        self._partial += chunk
        *complete, rest = self._partial.split(b"\n")
        kept = [text for text in map(self._keep, complete) if text]
        # An endless line must not grow memory: keep only what the tail would show. Leading
        # whitespace is dropped first (``_keep`` strips it anyway), so indentation longer
        # than the bound cannot crowd out the text when the line arrives in pieces.
        self._partial = bytearray(rest.lstrip()[: self._line_chars * 4])
        return kept

    def close(self) -> list[str]:
        """The last line, when stderr ended without a newline."""
        if not self._partial:
            return []
        text = self._keep(bytes(self._partial))
        self._partial.clear()
        return [text] if text else []

    def _keep(self, raw: bytes | bytearray) -> str:
        text = raw.decode("utf-8", "replace").rstrip("\r").strip()[: self._line_chars]
        if text:
            self._lines.append(text)
        return text

    @property
    def lines(self) -> list[str]:
        return list(self._lines)


LAUNCHER: Final = (
    """\
import os, signal, sys
parent, hidden = int(sys.argv[1]), int(sys.argv[2])
paths, program, argv = sys.argv[3 : 3 + hidden], sys.argv[3 + hidden], sys.argv[4 + hidden :]
"""
    + HIDE_FILES
    + """\
try:
    import ctypes
    ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
except Exception:
    pass
if os.getppid() != parent:  # the gateway died before the kernel was told
    os._exit(137)
try:
    fds = [int(fd) for fd in os.listdir("/proc/self/fd")]
except OSError:
    fds = range(3, 65536)
for fd in fds:
    if fd > 2:
        try:
            os.close(fd)
        except OSError:
            pass
for name in ("SIGPIPE", "SIGXFSZ"):
    if hasattr(signal, name):
        signal.signal(getattr(signal, name), signal.SIG_DFL)
if paths:
    try:
        hide_files(paths)
    except OSError as exc:  # never run a child that could read what it must not
        os.write(2, ("cannot start %s: cannot hide the gateway's secret files: %s\\n" % (argv[0], exc)).encode())
        os._exit(126)
try:
    os.execv(program, argv)
except OSError as exc:
    os.write(2, ("cannot start %s: %s\\n" % (argv[0], exc.strerror)).encode())
    os._exit(127)
"""
)
"""What every child runs first, as ``python -I -S -c LAUNCHER GATEWAY_PID N HIDDEN… PROGRAM ARGV…``:
the parent-death signal, no inherited descriptors, default signals, the N ``HIDDEN`` files made
unreadable (``confinement.HIDE_FILES``), then ``execv`` (module docstring)."""


def find_program(spec: ChildSpec, env: Mapping[str, str]) -> str:
    """The file ``execvp`` would run for ``spec.command`` in the child (its ``PATH``, its
    ``cwd``), or the ``OSError`` it would fail with."""
    command = spec.command

    def placed(path: str) -> str:
        return path if os.path.isabs(path) or spec.cwd is None else os.path.join(spec.cwd, path)

    if os.sep in command:
        candidates = [placed(command)]
    else:
        search = env.get("PATH", os.defpath)
        candidates = [placed(os.path.join(folder or ".", command)) for folder in search.split(os.pathsep)]
    denied = False
    for candidate in candidates:
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
        denied = denied or os.path.exists(candidate)
    if denied:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), command)
    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), command)


async def spawn(spec: ChildSpec) -> tuple[Process, int]:
    """Start the process, or raise ``ChildStartError('cannot start PROGRAM: REASON')``; the
    process and the read end of its stdout, a pipe of the gateway's own (not inheritable, so
    no other child holds it), which the caller reads and closes (``gateway.stdio.backend``)."""
    check_spec(spec)
    env = child_environment(spec)
    try:
        if spec.cwd is not None and not os.path.isdir(spec.cwd):  # noqa: ASYNC240 - one stat before a spawn
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), spec.cwd)
        program = find_program(spec, env)
        hidden = [str(len(spec.hidden_files)), *spec.hidden_files]
        argv = [sys.executable, "-I", "-S", "-c", LAUNCHER, str(os.getpid()), *hidden, program, *spec.argv]
        stdout_read, stdout_write = os.pipe()
        try:
            proc = await anyio.open_process(argv, env=env, cwd=spec.cwd, start_new_session=True, stdout=stdout_write)
        except BaseException:
            os.close(stdout_read)
            raise
        finally:
            os.close(stdout_write)  # the child's end: only the child holds it now
        return proc, stdout_read
    except OSError as exc:
        reason = exc.strerror or str(exc)
        public = exc.strerror or "the operating system refused it"  # str(exc) may name a path
        hint = None
        if spec.cwd is not None and not os.path.isdir(spec.cwd):  # noqa: ASYNC240 - error path only
            public = "its working directory does not exist or is not a directory"
            reason = f"working directory {spec.cwd} does not exist or is not a directory"
        elif isinstance(exc, FileNotFoundError):
            hint = hints.missing_program(spec.command)
        raise ChildStartError(
            f"cannot start {spec.label}: {public}",
            detailed=f"cannot start {spec.command}: {reason}" + (f" ({hint})" if hint else ""),
            private={"command": spec.command, "hint": hint},
            exposed=spec.expose_errors,
        ) from exc


def _signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to the group; False if the group no longer exists."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - a foreign process reused the group id
        return False
    return True


def processes() -> list[ProcessEntry]:
    """Every process of the machine, read from /proc (Linux; elsewhere an empty list)."""
    entries: list[ProcessEntry] = []
    try:
        names = os.listdir("/proc")
    except OSError:  # pragma: no cover - not Linux
        return entries
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        # Fields after the command name (which may hold spaces and parentheses), from field 3.
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 19:
            entries.append(ProcessEntry(int(name), fields[0].decode(), int(fields[1]), int(fields[2]), int(fields[19])))
    return entries


def _group_members(pgid: int) -> list[tuple[int, str, int]]:
    """(pid, state, ppid) of every process in the group."""
    if not os.path.isdir("/proc"):  # pragma: no cover - not Linux
        return [(pgid, "R", 0)] if _signal_group(pgid, 0) else []
    return [(p.pid, p.state, p.ppid) for p in processes() if p.pgid == pgid]


def descendants(root: int) -> dict[int, int]:
    """pid → start time of every process below ``root``: its children, theirs, and so on."""
    below: dict[int, list[ProcessEntry]] = {}
    for entry in processes():
        below.setdefault(entry.ppid, []).append(entry)
    found: dict[int, int] = {}
    stack = [root]
    while stack:
        for entry in below.get(stack.pop(), []):
            if entry.pid not in found and entry.pid != root:
                found[entry.pid] = entry.start
                stack.append(entry.pid)
    return found


def _still_running(noted: dict[int, int]) -> dict[int, int]:
    """The noted processes that still run (same pid and start time, not a zombie)."""
    return {p.pid: p.start for p in processes() if noted.get(p.pid) == p.start and p.state != "Z"}


def _signal_each(pids: dict[int, int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _reap(noted: dict[int, int]) -> None:
    """Collect the noted processes that ended as our zombies (re-parented to the subreaper)."""
    me = os.getpid()
    for entry in processes():
        if noted.get(entry.pid) == entry.start and entry.state == "Z" and entry.ppid == me:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(entry.pid, os.WNOHANG)


async def end_processes(noted: dict[int, int], grace: float, label: str) -> None:
    """SIGTERM the noted processes that still run, wait ``grace``, SIGKILL the rest, reap."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        left = _still_running(noted)
        if not left:
            break
        log.warning(
            "child %s left %d process(es) outside its group (pids %s); sending %s",
            label,
            len(left),
            sorted(left),
            signal.Signals(sig).name,
        )
        _signal_each(left, sig)
        with anyio.move_on_after(grace):
            while _still_running(left):  # noqa: ASYNC110 - no event exists for foreign processes
                await anyio.sleep(_GROUP_POLL)
    _reap(noted)


def sweep_descendants(grace: float = ORPHAN_TERM_GRACE) -> int:
    """At the gateway's exit, after every child stopped: end every process still below us
    (orphans re-parented to the subreaper), SIGTERM then SIGKILL after ``grace``; reap them.
    Returns how many there were. Synchronous: the event loop is gone by then."""
    noted = descendants(os.getpid())
    for sig in (signal.SIGTERM, signal.SIGKILL):
        left = _still_running(noted)
        if not left:
            break
        log.warning(
            "%d process(es) started by children outlived them (pids %s); sending %s",
            len(left),
            sorted(left),
            signal.Signals(sig).name,
        )
        _signal_each(left, sig)
        deadline = time.monotonic() + grace
        while _still_running(left) and time.monotonic() < deadline:
            time.sleep(_GROUP_POLL)
    _reap(noted)
    return len(noted)


def hold_late_signals() -> None:
    """The gateway is stopping for good (its server and its children have stopped): from now
    on SIGTERM and SIGINT are ignored, so that a signal that comes late (an operator's second or
    third, a supervisor's) cannot cut the sweep of orphans (``sweep_descendants``) or the last
    log lines, nor end the process by that signal instead of its exit code. Ignored, not
    handled or blocked: Python puts the default action back for a signal it handles while it
    finalizes (an ignored one it leaves), and a signal blocked in the main thread is delivered
    to another. SIGKILL still ends it. Main thread only; never undone: the process exits, and
    starts no process after it."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)


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
        # Noted before any signal: once the child is gone, what it started is re-parented
        # and no longer found below it.
        noted = descendants(process.pid) if process.returncode is None else {}
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
        await end_processes(noted, spec.sigterm_grace, spec.label)
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
