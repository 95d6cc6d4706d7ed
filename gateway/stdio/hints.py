"""What to try when a child will not start: plain-words hints added to start errors.

Pure functions of what the gateway saw (the command, its exit, its stdout noise and stderr
tail). A hint is drawn from the child's output and names its program, so it is the operator's
(``gateway.errors``): the log has it, and ``inspect``, which runs the child itself; an HTTP
client reads it only when the server's ``--expose-child-errors`` is on.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Final

PACKAGE_RUNNERS: Final = frozenset({"npx", "uvx", "bunx", "pnpx", "pipx"})
NPX_NO_YES: Final = "npx canceled due to missing packages and no YES option"
"""What npm prints when ``npx`` without ``-y`` would have to ask before installing."""


def _program(command: str) -> str:
    return os.path.basename(command)


def missing_program(command: str) -> str:
    program = _program(command)
    hint = f"is {program} installed and on the gateway's PATH? It is run directly, never through a shell"
    if program in ("npx", "node", "npm"):
        hint += "; npx comes with Node.js"
    elif program == "uvx":
        hint += "; uvx comes with uv (pip install uv)"
    return hint


def start_failure(
    command: str,
    *,
    timed_out: bool,
    exit_code: int | None = None,
    stdout_noise: Sequence[str] = (),
    stderr_tail: Sequence[str] = (),
) -> str | None:
    """The most likely fix for a child that exited or stayed silent during its handshake."""
    program = _program(command)
    if any(NPX_NO_YES in line for line in stderr_tail):
        return (
            "npx asks before installing a package, and a child cannot answer: "
            "put -y after npx (npx -y PACKAGE) so it installs without asking"
        )
    if stdout_noise:
        return (
            f"this server printed {stdout_noise[0][:80]!r} on stdout; MCP stdio servers must write only "
            "JSON-RPC there (the gateway drops such lines) — look for a quiet or stdio option"
        )
    if timed_out and program in PACKAGE_RUNNERS:
        return (
            f"{program} may still be installing the package: raise --startup-timeout and --probe-timeout, "
            "or install it ahead of time (pre-warm with --pool-min)"
        )
    if timed_out:
        return "the server never answered its handshake; check that it speaks MCP over stdio (not HTTP or SSE)"
    if exit_code == 127:
        return "the child could not find a program it runs (exit code 127); check its PATH and dependencies"
    if any("ERR_MODULE_NOT_FOUND" in line or "Cannot find module" in line for line in stderr_tail):
        return "Node.js could not find a module: check the package name and version"
    if any("command not found" in line or "No such file" in line for line in stderr_tail):
        return "something the server runs is missing; its stderr above says what"
    return None
