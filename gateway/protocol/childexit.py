"""How a child ended, in words: the exit description and the error every pending request gets.

``describe_exit`` reads a process's return code (negative: killed by that signal, the
asyncio convention); ``exit_error`` builds the ``ChildExitedError`` that fails every request
still in flight on the child, quoting the last lines of its stderr. Pure: the stdio edge
passes in the return code, the stderr tail, and whether the gateway stopped the child itself.
``fault_error`` is the error when the gateway's own code failed on the child (its failure
domain, ``gateway.stdio.boundary``): the child is stopped for it, not by its own doing.
``start_exit_error`` is the ``ChildStartError`` of a child that exited during its handshake.

Each error has two readings (``gateway.errors``): what any client may read (which server,
how it ended: ``demo exited with code 3``) and the operator's, which adds the pid, the
stderr tail, the command and a hint. ``exposed`` (the server's ``--expose-child-errors``)
lets clients read the second.

Imports: standard library and ``gateway.errors`` only.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from typing import Final

from gateway.errors import ChildExitedError, ChildFaultError, ChildStartError

STDERR_QUOTED_LINES: Final = 3
"""Lines of the stderr tail quoted in the message (all of them go in ``data.stderr``)."""


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


def exit_error(
    label: str,
    pid: int,
    returncode: int | None,
    *,
    stderr_tail: Sequence[str],
    stopping: bool,
    command: str,
    exposed: bool = False,
) -> ChildExitedError:
    """The error for the requests a child left in flight when it exited (or closed stdout)."""
    how, code, signame = describe_exit(returncode)
    tail = list(stderr_tail)
    after = " after the gateway stopped it" if stopping else ""
    detailed = f"{label} (pid {pid}) {how}{after}"
    if tail:
        detailed += "; stderr: " + " | ".join(tail[-STDERR_QUOTED_LINES:])
    return ChildExitedError(
        f"{label} {how}{after}",
        detailed=detailed,
        private={"pid": pid, "stderr": tail or None, "command": command},
        exposed=exposed,
        exit_code=code,
        signal=signame,
    )


def start_exit_error(
    label: str, command: str, death: ChildExitedError, hint: str | None, *, exposed: bool = False
) -> ChildStartError:
    """A child that exited (``death``) during its handshake: ``cannot start …`` for every
    request that waited for it; the hint (``gateway.stdio.hints``) is the operator's, like the
    stderr it is drawn from."""
    operator, _, stderr = death.detailed.partition("; stderr: ")
    detailed = f"cannot start {command}: {operator} during start-up"
    if stderr:
        detailed += f"; stderr: {stderr}"
    if hint:
        detailed += f"; hint: {hint}"
    return ChildStartError(
        f"cannot start {label}: {death.message} during start-up",
        detailed=detailed,
        private={**death.private, "hint": hint},
        exposed=exposed,
        **death.data,
    )


def fault_error(label: str, pid: int, where: str, *, command: str, exposed: bool = False) -> ChildFaultError:
    """The error for the requests in flight on a child the gateway failed on (``where``: which
    of its tasks). The traceback goes to the log only: what failed inside is not the client's."""
    restarted = f"was stopped: the gateway hit an internal error on this child (in its {where}); it is restarted"
    return ChildFaultError(
        f"{label} {restarted}",
        detailed=f"{label} (pid {pid}) {restarted}",
        private={"pid": pid, "command": command},
        exposed=exposed,
        gateway_fault=where,
    )
