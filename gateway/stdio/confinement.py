"""What a child cannot reach of its gateway: the gateway's memory and environment, and its secret files.

Children run as the gateway's user (a second uid would need ``CAP_SETUID``, which the image,
compose stack and chart drop), so ordinary file modes and ``/proc`` permissions would let any
child with a shell read everything the gateway can. Three Linux mechanisms close that, none
of which needs a privilege:

- **The gateway is not dumpable** (``make_undumpable``, ``PR_SET_DUMPABLE`` 0, at start): the
  kernel then owns ``/proc/PID/environ``, ``mem``, ``fd/``, ``maps`` … by root and refuses them
  (and ``ptrace``) to other processes of the same user. A child is dumpable again after its
  ``execve``, so the gateway still reads its children's ``/proc/PID/stat``.
- **Children never inherit the gateway's own settings**: ``spec.child_environment`` drops every
  ``MCP_GATEWAY_*`` variable (tokens among them) unless a server maps one explicitly.
- **Secret files are hidden with Landlock** (Linux 5.13+, unprivileged): the launcher
  (``process.LAUNCHER``) runs ``HIDE_FILES`` in the child before its ``execv``. Landlock can only
  *allow* (reading files is denied except beneath the rules), so it allows reading beneath
  every entry of each directory on the way to a secret file, except the entries that lead to
  one: the file itself and its directories stay unreadable, everything else stays as it was.
  The domain is inherited by whatever the child starts and cannot be left; it also keeps the
  child from ``ptrace`` and ``/proc/PID/environ`` of any process outside it (the gateway, the
  container's init). The gateway itself is not confined, so it still re-reads its token files.
  The cost, documented in ``docs/security.md``: an entry created *after* the child started,
  directly in a directory on the way to a secret (not beneath one of its entries), is unreadable
  to that child, and the child runs with ``no_new_privs`` (set-uid programs do not elevate).

``landlock_abi`` says whether the kernel and the seccomp profile allow Landlock; the gateway
logs at start what children can and cannot read (``describe``). Imports only the standard
library.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Final

PR_SET_DUMPABLE: Final = 4
SYS_LANDLOCK_CREATE_RULESET: Final = 444
"""The same number on every architecture Linux added Landlock for (x86-64, arm64, …)."""
LANDLOCK_CREATE_RULESET_VERSION: Final = 1


def make_undumpable() -> bool:
    """``PR_SET_DUMPABLE`` 0 for this process: its ``/proc/PID/*`` becomes root's, unreadable to
    same-user processes (children). False where that is not Linux."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0)
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        return False


def landlock_abi() -> int:
    """The Landlock ABI version this process may use; 0 when the kernel lacks it or a seccomp
    profile refuses it (then ``HIDE_FILES`` hides nothing)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        version = libc.syscall(
            ctypes.c_long(SYS_LANDLOCK_CREATE_RULESET),
            None,
            ctypes.c_long(0),
            ctypes.c_long(LANDLOCK_CREATE_RULESET_VERSION),
        )
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        return 0
    return max(int(version), 0)


def describe(hidden: Sequence[str], undumpable: bool) -> tuple[str, bool]:
    """The start-up line that says what children cannot read, and whether it is a warning
    (something the operator asked to protect is not protected here)."""
    parts = []
    if undumpable:
        parts.append("children cannot read this process's environment or memory (not dumpable)")
    else:
        parts.append("children of this user can read this process's environment and memory (no PR_SET_DUMPABLE here)")
    if not hidden:
        return "; ".join(parts), not undumpable
    files = ", ".join(hidden)
    if landlock_abi() >= 1:
        parts.append(f"children cannot read {files} (Landlock)")
        return "; ".join(parts), not undumpable
    parts.append(
        f"children CAN READ {files}: Landlock (Linux 5.13+) is not available here (an old kernel, "
        "or a seccomp profile that refuses its system calls); see docs/security.md"
    )
    return "; ".join(parts), True


HIDE_FILES: Final = """\
def hide_files(paths):
    import ctypes, struct
    libc = ctypes.CDLL(None, use_errno=True)
    long = ctypes.c_long
    READ_FILE = 1 << 2  # LANDLOCK_ACCESS_FS_READ_FILE: the only right handled, so all else is as before
    handled = struct.pack("=Q", READ_FILE)
    ruleset = libc.syscall(long(444), handled, long(len(handled)), long(0))
    if ruleset < 0:
        return  # no Landlock here: the gateway said so at start
    hidden, ancestors, walk = set(), set(), []
    for path in paths:
        real = os.path.realpath(path)
        try:
            found = os.stat(real)
        except OSError:
            continue
        hidden.add((found.st_dev, found.st_ino))
        parent = real
        while parent != "/":
            parent = os.path.dirname(parent)
            found = os.stat(parent)
            if (found.st_dev, found.st_ino) not in ancestors:
                ancestors.add((found.st_dev, found.st_ino))
                walk.append(parent)
    for directory in walk:
        for name in os.listdir(directory):
            try:
                fd = os.open(os.path.join(directory, name), os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # a dangling link leads nowhere
            try:
                found = os.fstat(fd)
                if (found.st_dev, found.st_ino) not in hidden | ancestors:
                    rule = struct.pack("=Qi", READ_FILE, fd)  # landlock_path_beneath_attr (packed)
                    libc.syscall(long(445), long(ruleset), long(1), rule, long(0))
            finally:
                os.close(fd)
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS: Landlock's condition for the unprivileged
    libc.syscall(long(446), long(ruleset), long(0))
    os.close(ruleset)
"""
"""Run by the launcher (``python -I -S``, standard library only) in the child before ``execv``:
``hide_files(paths)`` confines the process to reading everything but ``paths`` (module docstring)."""
