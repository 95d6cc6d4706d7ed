"""What to run as a child, validated before anything is spawned.

``ChildSpec`` is frozen: command, arguments, environment overlay, cwd and the limits of
the stdio edge. ``child_environment`` builds the exact environment the child gets
(inherit and overlay by default; a key set to ``None`` removes the variable;
``inherit_env=False`` gives exactly the overlay). ``check_spec`` refuses NUL bytes and
malformed environment names up front, because ``execve`` would fail on them later with a
less helpful message (or, for ``=`` in a name, silently set a different variable).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from gateway.errors import ChildStartError
from gateway.protocol.framing import DEFAULT_MAX_LINE_BYTES
from gateway.stdio.writer import MAX_STDIN_QUEUE_BYTES, STDIN_STALL_TIMEOUT

STDIN_CLOSE_GRACE: Final = 2.0
"""Seconds a child gets to exit on its own after stdin closes (stdio §Shutdown)."""
SIGTERM_GRACE: Final = 2.0
"""Seconds between SIGTERM and SIGKILL of the child's process group."""
PROBE_TIMEOUT: Final = 30.0
"""Seconds to wait for the ``server/discover`` probe. Generous: ``npx``/``uvx`` install the
package before the server reads its first line, and a too-short probe would wrongly decide
"legacy" for a modern server on a cold start."""
REQUEST_TIMEOUT: Final = 3600.0
"""A request's hard time bound by default (legacy clients never cancel by
disconnecting, so without one a hung child would hold a slot for ever)."""
HANDSHAKE_TIMEOUT: Final = 60.0
"""Seconds to wait for a legacy child's ``initialize`` reply."""
INPUT_TIMEOUT: Final = 300.0
"""Seconds a child's question to the client (sampling, elicitation, roots) may wait for the
answer, or for a modern client's MRTR retry. Generous: a person may be answering."""
ROUND_TIMEOUT: Final = 60.0
"""Seconds a modern client's call is held for its MRTR retry (never longer than the input
timeout). The client is gone between rounds, and nothing tells a round that will be retried
from one that will not, while the held call keeps its child and counts against its client's
parked cap; a client that answers later gets ``expired`` and sends the call again. A minute
is what clients built on the TypeScript SDK give a whole call by default (60 s)."""
BRIDGED_CAPABILITIES: Final[Mapping[str, Mapping[str, object]]] = {"sampling": {}, "elicitation": {}, "roots": {}}
"""What a legacy child is told by default: every client capability the gateway can bridge to
a client (sampling, form elicitation, roots). A client that lacks one gets the child's question
refused with a clear error (legacy) or -32021 (modern)."""
PROBE_FIRST: Final = "probe"
"""Handshake: ``server/discover`` first; ``initialize`` only when the child is not modern."""
INITIALIZE_FIRST: Final = "initialize"
"""Handshake: ``initialize`` first; ``server/discover`` only when the child refuses it. For
children that serve legacy clients of a server that speaks both eras: a dual child then
serves the legacy way, so its tools that ask (sampling, elicitation) keep a back-channel."""
STDERR_TAIL_LINES: Final = 20
STDERR_LINE_CHARS: Final = 500
"""A stderr line is cut here, in the tail and in the log."""
STDERR_LOG_RATE: Final = 10.0
"""Stderr lines a second each child may put in the log (``--child-stderr-log``), after a burst
of ``STDERR_LOG_BURST``: a server's start-up banner and its warnings pass whole, a child that
logs in a loop cannot flood the gateway's log (or its log shipper); what it writes faster is
dropped from the log (the tail still keeps it) and counted in a record of its own."""
STDERR_LOG_BURST: Final = 100
"""Stderr lines a child may log at once before ``STDERR_LOG_RATE`` applies."""


@dataclass(frozen=True, slots=True)
class ChildSpec:
    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str | None] = field(default_factory=dict)
    inherit_env: bool = True
    cwd: str | None = None
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    max_stdin_queue_bytes: int = MAX_STDIN_QUEUE_BYTES  # what may wait for its stdin (``writer``)
    stdin_stall_timeout: float = STDIN_STALL_TIMEOUT  # a write to its stdin taken by nobody this long: stopped
    stderr_tail_lines: int = STDERR_TAIL_LINES
    stderr_line_chars: int = STDERR_LINE_CHARS
    stderr_log: bool = True  # each stderr line a log record too (``gateway.stdio.stderrlog``)
    stdin_close_grace: float = STDIN_CLOSE_GRACE
    sigterm_grace: float = SIGTERM_GRACE
    probe_timeout: float = PROBE_TIMEOUT
    handshake_timeout: float = HANDSHAKE_TIMEOUT
    request_timeout: float | None = REQUEST_TIMEOUT  # None: no bound (the command line's 0)
    client_capabilities: Mapping[str, object] | None = None  # None: BRIDGED_CAPABILITIES; {}: none
    roots: tuple[Mapping[str, object], ...] | None = None  # answers the child's roots/list when no client can
    answers_roots: bool = False  # every roots/list is answered with ``roots``, never a client's (set by the router)
    input_timeout: float = INPUT_TIMEOUT
    round_timeout: float = ROUND_TIMEOUT  # a parked MRTR round (not a task's): at most input_timeout
    name: str = ""
    handshake: str = PROBE_FIRST  # or INITIALIZE_FIRST
    expose_errors: bool = False  # clients read its stderr, command and hints in errors (``gateway.errors``)
    hidden_files: tuple[str, ...] = ()  # the gateway's secret files, unreadable to it (``confinement``)

    @property
    def argv(self) -> list[str]:
        return [self.command, *self.args]

    @property
    def declared_capabilities(self) -> dict[str, object]:
        """What a legacy child is told at ``initialize``: the configured client capabilities
        (by default ``BRIDGED_CAPABILITIES``), plus ``roots`` when roots are configured (the
        gateway can then always answer)."""
        configured = BRIDGED_CAPABILITIES if self.client_capabilities is None else self.client_capabilities
        capabilities = {
            name: dict(value) if isinstance(value, Mapping) else value for name, value in configured.items()
        }
        if self.roots is not None:
            capabilities.setdefault("roots", {})
        return capabilities

    @property
    def label(self) -> str:
        """How logs and errors name this child: the configured name or the program's file name
        (never its directory or arguments, so a client may read it)."""
        return self.name or os.path.basename(self.command)


def check_spec(spec: ChildSpec) -> None:
    """Raise ``ChildStartError`` for what ``execve`` cannot take. The client reads which part
    is wrong; the operator also reads the program and the variable's name."""
    program = spec.command or "(empty command)"

    def refused(problem: str, detail: str | None = None) -> ChildStartError:
        return ChildStartError(
            f"cannot start {spec.label or program}: {problem}",
            detailed=f"cannot start {program}: {detail or problem}",
            private={"command": spec.command},
            exposed=spec.expose_errors,
        )

    if not spec.command:
        raise refused("no command given")
    for index, arg in enumerate(spec.argv):
        if "\x00" in arg:
            raise refused(f"{'the command' if index == 0 else f'argument {index}'} contains a NUL byte")
    for key, value in spec.env.items():
        if not key or "=" in key or "\x00" in key:
            raise refused(
                "an environment name is empty or contains '=' or NUL",
                f"environment name {key!r} is empty or contains '=' or NUL",
            )
        if value is not None and "\x00" in value:
            raise refused(
                "an environment variable contains a NUL byte", f"environment variable {key} contains a NUL byte"
            )
    if spec.cwd is not None and "\x00" in spec.cwd:
        raise refused("cwd contains a NUL byte")


GATEWAY_ENV_PREFIX: Final = "MCP_GATEWAY_"
"""The gateway's own settings (tokens among them) are never inherited by children."""


def child_environment(spec: ChildSpec, base: Mapping[str, str] | None = None) -> dict[str, str]:
    inherited = os.environ if base is None else base
    env = {k: v for k, v in inherited.items() if not k.startswith(GATEWAY_ENV_PREFIX)} if spec.inherit_env else {}
    for key, value in spec.env.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env
