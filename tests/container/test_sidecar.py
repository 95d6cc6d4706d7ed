"""The chart's sidecar shape as a pod runs it, from the chart's own rendering (values-sidecar.yaml):
the application container and the gateway container share one network namespace
(``--network container:APP``), the app reaches the gateway on 127.0.0.1, nothing outside the pod
does. The gateway container gets what the rendered spec gives it: args, env, the read-only root,
no capabilities, the uid, emptyDir volumes (tmpfs here), the Secret's files, the shared
/workspace, and its exec probes run inside it.

The rendering is scripts/check-deploy.sh's (.deploy-tools/rendered/values-sidecar.yaml), which
.ci/run runs before the tests."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from tests.container.docker import IMAGE, IN_CI, LABEL, REGISTRY_TRUST, REPO, LogFollower, docker

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(600), pytest.mark.usefixtures("image")]

RENDERED = REPO / ".deploy-tools" / "rendered" / "values-sidecar.yaml"
START = 240.0  # a cold npx downloads server-filesystem first
APP_CLIENT = """
import json, os, urllib.request
url = os.environ["MCP_SERVER_URL"]
meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "agent", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}}
body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "list_allowed_directories", "arguments": {}, "_meta": meta}}
request = urllib.request.Request(url, json.dumps(body).encode(), {
    "content-type": "application/json", "accept": "application/json, text/event-stream",
    "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "list_allowed_directories"})
with urllib.request.urlopen(request, timeout=30) as reply:
    print(json.dumps({"status": reply.status, "body": reply.read().decode()}))
"""


def rendered() -> list[dict[str, Any]]:
    if not RENDERED.exists():
        if IN_CI:
            pytest.fail(f"{RENDERED} is missing: .ci/run runs scripts/check-deploy.sh first")
        pytest.skip(f"{RENDERED} is missing: run scripts/check-deploy.sh (it renders the chart)")
    return [doc for doc in yaml.safe_load_all(RENDERED.read_text()) if doc]


def gateway_run_options(
    pod: dict[str, Any], secret: dict[str, Any], secrets_dir: Path, shared: dict[str, str]
) -> tuple[list[str], list[str]]:
    """``docker run`` options and arguments for the rendered gateway container. An emptyDir that
    the app mounts too is the named volume ``shared[NAME]``; the others are the gateway's tmpfs."""
    [gateway] = [c for c in pod["initContainers"] if c["name"] == "gateway"]
    assert gateway["restartPolicy"] == "Always"  # a native sidecar
    security = gateway["securityContext"]
    options = ["--user", f"{pod['securityContext']['runAsUser']}:{pod['securityContext']['runAsGroup']}"]
    if security["readOnlyRootFilesystem"]:
        options.append("--read-only")
    options += [f"--cap-drop={cap}" for cap in security["capabilities"]["drop"]]
    if not security["allowPrivilegeEscalation"]:
        options += ["--security-opt", "no-new-privileges:true"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    group = pod["securityContext"]["fsGroup"]
    for mount in gateway["volumeMounts"]:
        volume = volumes[mount["name"]]
        if mount["name"] in shared:
            options += ["-v", f"{shared[mount['name']]}:{mount['mountPath']}"]
        elif "emptyDir" in volume:
            options += ["--tmpfs", f"{mount['mountPath']}:uid={group},gid={group},exec"]
        elif "secret" in volume:
            for key, value in secret["data"].items():
                (secrets_dir / key).write_bytes(base64.b64decode(value))
                (secrets_dir / key).chmod(0o644)
            options += ["-v", f"{secrets_dir}:{mount['mountPath']}:ro"]
    for variable in gateway["env"]:
        options += ["-e", f"{variable['name']}={variable['value']}"]
    return options, gateway["args"]


async def test_the_app_reaches_the_sidecar_gateway_on_loopback_and_nothing_outside_the_pod_does(
    tmp_path: Path, standins: dict[str, str]
) -> None:
    docs = rendered()
    [deployment] = [d for d in docs if d["kind"] == "Deployment"]
    [secret] = [d for d in docs if d["kind"] == "Secret"]
    pod = deployment["spec"]["template"]["spec"]
    [app_spec] = pod["containers"]
    secrets_dir = tmp_path / "secrets"
    secrets_dir.mkdir()
    # The pod's emptyDirs that both containers mount (/workspace): named volumes here.
    shared = {m["name"]: f"mcp-gateway-test-{m['name']}-{os.getpid()}" for m in app_spec.get("volumeMounts", [])}
    options, args = gateway_run_options(pod, secret, secrets_dir, shared)
    app_mounts = [f"--volume={shared[m['name']]}:{m['mountPath']}" for m in app_spec.get("volumeMounts", [])]
    app_env = [f"{v['name']}={v['value']}" for v in app_spec["env"]]
    # The app stand-in: the tier's Python base (the application image is yours), read-only too.
    base = standins["PYTHON_IMAGE"]
    app = docker(
        "run",
        "-d",
        "--label",
        LABEL,
        "--read-only",
        *app_mounts,
        *[item for e in app_env for item in ("-e", e)],
        base,
        "sleep",
        "infinity",
    ).strip()
    gateway = None
    follower = None
    try:
        trust = [item for name, value in REGISTRY_TRUST.items() for item in ("-e", f"{name}={value}")]
        gateway = docker(
            "run", "-d", "--label", LABEL, f"--network=container:{app}", *options, *trust, IMAGE, *args
        ).strip()
        follower = LogFollower(gateway)
        await anyio.to_thread.run_sync(follower.wait_for_message, " ready: ", START)
        [init] = [c for c in pod["initContainers"] if c["name"] == "gateway"]
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            docker("exec", gateway, *init[probe]["exec"]["command"])  # exit 0, or this raises
        answer = json.loads(docker("exec", app, "python3", "-c", APP_CLIENT))
        [app_info] = json.loads(docker("inspect", app))
        [address] = [n["IPAddress"] for n in app_info["NetworkSettings"]["Networks"].values()]
        # From another container: the gateway's port is closed on the pod's address, while a
        # port the app opens on all addresses there answers (so the refusal is not a network fault).
        # The probe waits (bounded) for that server to bind: a foreign process gives no event.
        docker("exec", "-d", app, "python3", "-m", "http.server", "8001", "--bind", "0.0.0.0")
        probe = (
            "import socket, time\n"
            "def ex(port):\n"
            "    s = socket.socket(); s.settimeout(10); return s.connect_ex((ADDRESS, port))\n"
            "deadline = time.monotonic() + 30\n"
            "while ex(8001) != 0 and time.monotonic() < deadline: time.sleep(0.1)\n"
            "print(ex(8001), ex(8000))\n"
        ).replace("ADDRESS", repr(address))
        outside = docker("run", "--rm", "--label", LABEL, base, "python3", "-c", probe)
    finally:
        if follower:
            follower.close()
        for container in (gateway, app):
            if container:
                docker("rm", "-f", container, check=False)
        for volume in shared.values():
            docker("volume", "rm", "-f", volume, check=False)
    assert answer["status"] == 200
    result = json.loads(answer["body"])["result"]
    assert "/workspace" in result["content"][0]["text"], result
    app_port, gateway_port = outside.split()
    assert app_port == "0"  # the app's own server answers on the pod's address
    assert gateway_port != "0"  # the gateway does not: it is bound to loopback only
