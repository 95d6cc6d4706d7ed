"""A child with a shell cannot read the gateway's secrets (issue #39 item 7).

A real gateway process (``python -m gateway``) with a token file, an operator token file, a
state secret and an ``MCP_GATEWAY_*`` token in its environment runs the test server, whose
``shell`` tool runs ``sh -c`` as any server with a shell tool would; a client asks it to read
each of them. Children run as the gateway's user, so only the gateway's confinement
(``gateway.stdio.confinement``) stands in the way: a second file in the same directory, written
before the child started, stays readable, so a refusal is that mechanism and not a broken child.

When the tests run as root, the gateway is started as root *without capabilities*
(``SECBIT_NOROOT``): a same-user child with no privilege, as in the image, whose uid still
owns every file here (so only Landlock keeps it from them, as file modes would not).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from anyio.streams.text import TextReceiveStream

from gateway.stdio.confinement import landlock_abi
from tests.conftest import TEST_SERVER
from tests.gateway_server import modern_call, modern_headers, parse_sse

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux confinement"),
]

TOKEN = "client-token-0123456789abcdef"
NEW_TOKEN = "rotated-token-0123456789abcdef"
OPERATOR_TOKEN = "operator-token-0123456789abcdef"
ENV_TOKEN = "env-token-0123456789abcdef-secret"
SECRET = "state-secret-0123456789abcdef-0123456789"

GATEWAY_PID = "$(awk '{print $4}' /proc/$PPID/stat)"
"""The shell's parent is the server (the child); the server's parent is the gateway."""
CAPLESS = """\
import ctypes, os, sys
if os.getuid() == 0:  # SECBIT_NOROOT | SECBIT_NOROOT_LOCKED: uid 0 gets no capabilities at exec
    assert ctypes.CDLL(None, use_errno=True).prctl(28, 3, 0, 0, 0) == 0, ctypes.get_errno()
os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
"""
"""Runs the gateway as this user, with no capabilities even as root."""


def secret_flags(secrets: Path) -> list[str]:
    return [
        *("--auth-token-file", str(secrets / "tokens")),
        *("--operator-token-file", str(secrets / "operator")),
        *("--state-secret-file", str(secrets / "state-secret")),
    ]


@asynccontextmanager
async def gateway(*flags: str, **env: str) -> AsyncIterator[str]:
    """``python -m gateway FLAGS -- TEST_SERVER`` on port 0 with ``env`` added to its environment
    (capless, see the module docstring); yields /mcp's URL once it serves."""
    argv = ["-m", "gateway", "--port", "0", *flags, "--", sys.executable, str(TEST_SERVER)]
    found: list[str] = []
    started = anyio.Event()
    command = [sys.executable, "-c", CAPLESS, *argv]
    async with await anyio.open_process(command, env={**os.environ, **env}, stdout=subprocess.DEVNULL) as process:

        async def read() -> None:
            assert process.stderr is not None
            buffer = ""
            async for chunk in TextReceiveStream(process.stderr):
                buffer += chunk
                *lines, buffer = buffer.split("\n")
                found.extend(line.split("MCP endpoint:", 1)[1].strip() for line in lines if "MCP endpoint:" in line)
                if any("Application startup complete" in line for line in lines):
                    started.set()
            started.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            try:
                await started.wait()
                assert found, "the gateway did not start"
                yield found[0]
            finally:
                process.terminate()
                await process.wait()


async def shell(http: httpx.AsyncClient, url: str, command: str, token: str = TOKEN) -> dict[str, Any]:
    headers, body = modern_headers("tools/call", "shell"), modern_call(1, "shell", {"command": command})
    reply = await http.post(url, json=body, headers={**headers, "authorization": f"Bearer {token}"})
    assert reply.status_code == 200, reply.text
    message = parse_sse(reply.text)[-1] if reply.text.startswith(("event:", "data:", ":")) else reply.json()
    result: dict[str, Any] = message["result"]["structuredContent"]["shell"]
    return result


def refused(done: dict[str, Any]) -> bool:
    """The shell command failed, printed nothing, and said why: permission."""
    return done["status"] != 0 and done["stdout"] == "" and "Permission denied" in done["stderr"]


def write_secrets(secrets: Path) -> None:
    secrets.mkdir()
    (secrets / "tokens").write_text(f"client:{TOKEN}\n")
    (secrets / "operator").write_text(f"{OPERATOR_TOKEN}\n")
    (secrets / "state-secret").write_text(SECRET)
    (secrets / "neighbour").write_text("readable\n")  # no secret: stays readable to children


@pytest.mark.skipif(landlock_abi() < 1, reason="this kernel (or its seccomp profile) has no Landlock")
async def test_a_child_with_a_shell_reads_none_of_the_gateways_secrets(tmp_path: Path) -> None:
    secrets = tmp_path / "secrets"
    write_secrets(secrets)
    with anyio.fail_after(60):
        async with (
            gateway(*secret_flags(secrets), MCP_GATEWAY_OPERATOR_TOKEN=ENV_TOKEN) as url,
            httpx.AsyncClient(timeout=30) as http,
        ):
            environ = await shell(http, url, f"cat /proc/{GATEWAY_PID}/environ")
            proc = {
                name: await shell(http, url, f"{reader} /proc/{GATEWAY_PID}/{name}")
                for name, reader in (("mem", "head -c1"), ("maps", "cat"), ("fd/0", "readlink -v"), ("cwd", "ls"))
            }
            files = {
                name: await shell(http, url, f"cat {secrets / name}") for name in ("tokens", "operator", "state-secret")
            }
            neighbour = await shell(http, url, f"cat {secrets / 'neighbour'}")
            own = await shell(http, url, "env")
            # The gateway itself still re-reads its token file when it changes.
            (secrets / "tokens").write_text(f"client:{NEW_TOKEN}\n")
            while True:
                headers = {**modern_headers("tools/call", "echo"), "authorization": f"Bearer {NEW_TOKEN}"}
                probe = await http.post(url, json=modern_call(2, "echo", {"message": "hi"}), headers=headers)
                if probe.status_code == 200:
                    break
                await anyio.sleep(0.2)  # the token file is re-checked each RELOAD_INTERVAL (1 s)
    assert refused(environ)
    for name, read in proc.items():
        assert refused(read), name
    for name, read in files.items():
        assert refused(read), name
    assert neighbour == {"status": 0, "stdout": "readable\n", "stderr": ""}
    assert "PATH=" in own["stdout"]
    assert "MCP_GATEWAY_" not in own["stdout"], own["stdout"]
    everything = json.dumps([environ, proc, files, own])
    for secret in (TOKEN, OPERATOR_TOKEN, ENV_TOKEN, SECRET):
        assert secret not in everything


async def test_without_secret_files_a_child_still_cannot_read_the_gateways_environment() -> None:
    """Not dumpable alone, no Landlock needed: /proc/PPID/environ is root's and refused."""
    with anyio.fail_after(60):
        async with gateway(MCP_GATEWAY_AUTH_TOKEN=f"client:{TOKEN}") as url, httpx.AsyncClient(timeout=30) as http:
            environ = await shell(http, url, f"cat /proc/{GATEWAY_PID}/environ")
            own = await shell(http, url, "env")
    assert refused(environ)
    assert "PATH=" in own["stdout"]
    assert "MCP_GATEWAY_" not in own["stdout"], own["stdout"]
