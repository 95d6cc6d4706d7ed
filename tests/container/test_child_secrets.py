"""In the image, a child with a shell cannot read the gateway's secrets (issue #39 item 7): not the
token files, not the state secret, not the gateway's or tini's environment, though it runs as the
gateway's user and the files are mounted as compose mounts them (readable by that user). The
start-up line says Landlock holds, so Docker's default seccomp profile allows it."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import httpx
import pytest

from tests.container.docker import READ_ONLY_MOUNTS, REPO, running
from tests.integration.test_child_secrets import ENV_TOKEN, GATEWAY_PID, OPERATOR_TOKEN, SECRET, TOKEN, refused, shell

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(600), pytest.mark.usefixtures("image")]

TEST_SERVER = REPO / "tests" / "servers" / "testserver.py"
SECRETS = "/run/secrets"
FILES = {"tokens": f"client:{TOKEN}\n", "operator_token": f"{OPERATOR_TOKEN}\n", "state_secret": SECRET}


async def test_a_child_with_a_shell_reads_no_token_file_state_secret_or_gateway_environment(tmp_path: Path) -> None:
    secrets = tmp_path / "secrets"
    secrets.mkdir(mode=0o755)
    secrets.chmod(0o755)  # as a compose secret: a bind mount the gateway's user can read
    for name, text in FILES.items():
        (secrets / name).write_text(text)
        (secrets / name).chmod(0o644)
    mounts = (
        *READ_ONLY_MOUNTS,
        *("-v", f"{TEST_SERVER}:/srv/testserver.py:ro"),
        *("-v", f"{secrets}:{SECRETS}:ro"),
    )
    env = {
        "MCP_GATEWAY_AUTH_TOKEN_FILE": f"{SECRETS}/tokens",
        "MCP_GATEWAY_OPERATOR_TOKEN_FILE": f"{SECRETS}/operator_token",
        "MCP_GATEWAY_STATE_SECRET_FILE": f"{SECRETS}/state_secret",
        "MCP_GATEWAY_OPERATOR_TOKEN": ENV_TOKEN,  # in tini's and the gateway's environment
    }
    with running("--", "python", "/srv/testserver.py", docker_options=mounts, env=env) as gateway:
        await anyio.to_thread.run_sync(gateway.wait_ready)
        with anyio.fail_after(120):
            async with httpx.AsyncClient(timeout=60) as http:
                environs = {
                    "tini": await shell(http, gateway.url, "cat /proc/1/environ"),
                    "gateway": await shell(http, gateway.url, f"cat /proc/{GATEWAY_PID}/environ"),
                }
                files = {name: await shell(http, gateway.url, f"cat {SECRETS}/{name}") for name in FILES}
                own = await shell(http, gateway.url, "env")
                ordinary = await shell(http, gateway.url, "cat /etc/hostname")
        records = gateway.logs.records()
    for name, read in {**environs, **files}.items():
        assert refused(read), (name, read)
    assert "MCP_GATEWAY_" not in own["stdout"], own["stdout"]
    assert ordinary["status"] == 0
    everything = json.dumps([environs, files, own])
    for secret in (TOKEN, OPERATOR_TOKEN, ENV_TOKEN, SECRET):
        assert secret not in everything
    [said] = [str(r["message"]) for r in records if "children cannot read" in str(r.get("message"))]
    assert said.endswith("(Landlock)"), said
    assert "not dumpable" in said
