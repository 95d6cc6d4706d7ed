"""The container's properties: a non-root user, a read-only root filesystem with only the documented
writable mounts, a HEALTHCHECK that turns healthy, `docker stop` draining in-flight calls to an exit
0 before the grace runs out, and no zombie or orphan left in the container after children crash."""

from __future__ import annotations

import json
import threading

import anyio
import pytest
from mcp import Client, MCPError
from mcp_types import TextContent

from tests.container.docker import IMAGE, READ_ONLY_MOUNTS, REPO, docker, events, running
from tests.gateway_server import MODERN

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(600), pytest.mark.usefixtures("image")]

APP_UID = 10001
CALL_DEADLINE = 60.0
STOP_GRACE = 30  # docs/deployment.md: longer than MCP_GATEWAY_DRAIN_TIMEOUT (20) plus ~5 s for children
TEST_SERVER = REPO / "tests" / "servers" / "testserver.py"

WRITE_PROBE = """
import json, os, sys
found = {}
for path in sys.argv[1:]:
    try:
        with open(os.path.join(path, ".write-probe"), "w") as fh:
            fh.write("x")
        os.remove(os.path.join(path, ".write-probe"))
        found[path] = True
    except OSError:
        found[path] = False
print(json.dumps(found))
"""
PROBED = [
    "/",
    "/etc",
    "/usr/local/bin",
    "/usr/local/lib/node_modules/npm",
    "/opt/venv",
    "/opt/venv/lib",
    "/var",
    "/var/tmp",
    "/root",
    "/run",
    "/tmp",
    "/home/gateway",
]
WRITABLE = {"/tmp", "/home/gateway"}  # npm and uv make their caches under /home/gateway (test_image.py)


async def test_the_gateway_runs_as_the_non_root_user_on_a_read_only_root_with_only_the_documented_mounts() -> None:
    with running(docker_options=READ_ONLY_MOUNTS) as gateway:
        await anyio.to_thread.run_sync(gateway.wait_ready)
        info = gateway.inspect()
        statuses = gateway.exec("sh", "-c", "cat /proc/[0-9]*/status | grep '^Uid:'")
        writable = json.loads(gateway.exec("python", "-c", WRITE_PROBE, *PROBED))
    assert info["Config"]["User"] == f"{APP_UID}:{APP_UID}"
    assert info["HostConfig"]["ReadonlyRootfs"] is True
    assert set(info["HostConfig"]["Tmpfs"]) == {"/tmp", "/home/gateway"}
    # Every process (tini, the gateway, the demo child, the probe) has real and effective uid 10001.
    assert {tuple(line.split()[1:3]) for line in statuses.splitlines()} == {(str(APP_UID), str(APP_UID))}
    assert {path for path, ok in writable.items() if ok} == WRITABLE


async def test_the_image_healthcheck_turns_healthy() -> None:
    """The image's own HEALTHCHECK command; only its timing is shortened (Docker 20.10 runs the
    first probe one interval, 30 s, after the start)."""
    [image] = json.loads(docker("image", "inspect", IMAGE))
    assert "/healthz" in " ".join(image["Config"]["Healthcheck"]["Test"])
    timing = ("--health-interval", "1s", "--health-start-period", "0s")
    with running(docker_options=(*READ_ONLY_MOUNTS, *timing)) as gateway:
        watcher = events(gateway.id, "event=health_status", since=gateway.inspect()["Created"])
        try:
            line = await anyio.to_thread.run_sync(_first_line, watcher, 60.0)
        finally:
            watcher.kill()
            watcher.communicate()
    assert json.loads(line)["status"] == "health_status: healthy", line


def _first_line(process: object, timeout: float) -> str:
    """The first stdout line of a Popen, or TimeoutError after ``timeout`` s."""
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(process.stdout.readline()), daemon=True)  # type: ignore[attr-defined]
    reader.start()
    reader.join(timeout)
    if not got or not got[0]:
        raise TimeoutError(f"no docker event in {timeout} s")
    return got[0]


async def test_docker_stop_drains_in_flight_calls_of_both_eras_and_exits_0_within_the_grace() -> None:
    """SIGTERM while a legacy and a modern call are mid-way: both finish with their real result,
    and the container exits 0 (a SIGKILL at the end of the grace would be 137)."""
    env = {"MCP_GATEWAY_DRAIN_TIMEOUT": "20"}
    with running(docker_options=READ_ONLY_MOUNTS, env=env) as gateway:
        await anyio.to_thread.run_sync(gateway.wait_ready)
        started = {mode: anyio.Event() for mode in ("legacy", MODERN)}
        results: dict[str, str] = {}

        async def call(mode: str) -> None:
            async def on_progress(value: float, total: float | None, message: str | None) -> None:
                started[mode].set()

            async with Client(gateway.url, mode=mode) as client:
                # Listed first: the SDK checks a result against the tool's output schema, and
                # would otherwise list the tools after the call, when the draining gateway
                # takes no new request.
                await client.list_tools()
                result = await client.call_tool(
                    "countdown", {"steps": 15, "interval_ms": 200}, progress_callback=on_progress
                )
            [content] = result.content
            assert isinstance(content, TextContent)
            results[mode] = content.text

        with anyio.fail_after(STOP_GRACE + CALL_DEADLINE):
            async with anyio.create_task_group() as tg:
                for mode in started:
                    tg.start_soon(call, mode)
                for event in started.values():
                    await event.wait()
                await anyio.to_thread.run_sync(lambda: docker("stop", "-t", str(STOP_GRACE), gateway.id))
        state = gateway.inspect()["State"]
        records = gateway.logs.records()
    assert state["ExitCode"] == 0, state
    assert set(results) == {"legacy", MODERN}
    assert results == {"legacy": "done after 15 steps", MODERN: "done after 15 steps"}
    assert any("drained: every request finished" in str(r.get("message")) for r in records), records[-10:]


async def test_after_children_crash_no_zombie_or_orphan_is_left_in_the_container() -> None:
    """A child forks a grandchild in its group and one in a session of its own (setsid), then
    crashes. The gateway restarts the child; the group's grandchild is ended and reaped, the
    setsid one is adopted by the gateway (its subreaper, under tini) and ended at `docker stop`."""
    mounts = (*READ_ONLY_MOUNTS, "-v", f"{TEST_SERVER}:/srv/testserver.py:ro")
    with running("--", "python", "/srv/testserver.py", docker_options=mounts) as gateway:
        await anyio.to_thread.run_sync(gateway.wait_ready)
        with anyio.fail_after(CALL_DEADLINE):
            async with Client(gateway.url, mode=MODERN) as client:
                in_group = (await client.call_tool("fork_grandchild", {})).structured_content
                detached = (await client.call_tool("spawn_detached", {})).structured_content
                with pytest.raises(MCPError, match="exited with code 3"):
                    await client.call_tool("crash", {})
        assert in_group
        assert detached
        await anyio.to_thread.run_sync(gateway.logs.wait_for_message, " ready: ", 60.0, 2)  # restarted
        after = {p["pid"]: p for p in gateway.processes()}
        [gateway_pid] = [pid for pid, p in after.items() if "mcp-stdio-gateway" in p["cmd"] and p["ppid"] == 1]
        assert not [p for p in after.values() if p["state"] == "Z"], after
        assert in_group["pid"] not in after, after[in_group["pid"]]
        assert after[detached["pid"]]["ppid"] == gateway_pid  # adopted, tracked, not tini's
        await anyio.to_thread.run_sync(lambda: docker("stop", "-t", str(STOP_GRACE), gateway.id))
        state = gateway.inspect()["State"]
        records = gateway.logs.records()
    assert state["ExitCode"] == 0, state
    assert any("outlived them" in str(r.get("message")) for r in records), records[-10:]
