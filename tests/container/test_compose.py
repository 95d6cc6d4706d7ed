"""docker-compose.yml as shipped, up behind its authenticating nginx, driven through the proxy.

What the test changes, and why: the project is named with ``-p``; the gateway's image is the one
the tier built; the proxy's is the local nginx stand-in (through the file's own NGINX_IMAGE
variable); the gateway is told the host's CA bundle (NODE_EXTRA_CA_CERTS, this machine's
registry proxy); each container carries the test label. Everything else, the two replicas, the
read-only root with its cache volumes, the secrets, the proxy's fixed address and published
127.0.0.1:8080, the health-gated start, is the file as users get it, run by Debian's
docker-compose 1.29 (which refused the file's former top-level ``name:``).

The last test stops, kills and adds replicas under a client loop (issue #40), so it runs last.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import httpx
import pytest
from mcp import Client, types
from mcp.client.streamable_http import streamable_http_client
from mcp_types import TextContent

from tests.container.docker import IN_CI, LABEL, REGISTRY_TRUST, REPO, container_log, docker, events
from tests.gateway_server import BASE_HEADERS, MODERN, modern_call, modern_headers

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(600)]

PROJECT = "mcp-gateway-test"
PROXY = "http://127.0.0.1:8080"
ALICE = {"authorization": "Bearer demo-alice-change-me"}
UP_TIMEOUT = 400.0  # two cold npx starts (a download each) behind the health-gated proxy
CALL_DEADLINE = 60.0
CLIENTS = 6
CALLS_EACH = 4
FAILOVER_BUDGET = 5.0
"""Seconds a request may take while a replica goes away (issue #40): a request past it counts as
a failure ("timeout"), never as an answer."""
LOOPS = 2
"""Client loops calling at once through the proxy while replicas go and come."""
ANSWERS_PER_PHASE = 30
"""Answers the loops must get after each change (a stop, a kill) before the next."""
HEALTHY_TIMEOUT = 120.0
"""Seconds for a restarted or added replica to turn healthy (a warm npx start, health checks 10 s apart)."""


class Stack(list[str]):
    """The gateway replicas' container ids as the stack came up, and its docker-compose."""

    def __init__(self, replicas: list[str], files: list[Path], env: dict[str, str]) -> None:
        super().__init__(replicas)
        self.files = files
        self.env = env

    def compose(self, *args: str, timeout: float = UP_TIMEOUT) -> str:
        return compose(self.files, *args, env=self.env, timeout=timeout)


def compose(files: list[Path], *args: str, env: dict[str, str], timeout: float = UP_TIMEOUT) -> str:
    command = ["docker-compose", "-p", PROJECT, "--project-directory", str(REPO)]
    for f in files:
        command += ["-f", str(f)]
    done = subprocess.run(
        [*command, *args], capture_output=True, text=True, timeout=timeout, env={**os.environ, **env}, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"docker-compose {' '.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return done.stdout


@pytest.fixture(scope="module")
def stack(image: str, standins: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The stack up (gateway healthy, proxy started); yields the gateway replicas' container ids."""
    if shutil.which("docker-compose") is None:
        if IN_CI:
            pytest.fail("CI: docker-compose is missing (scripts/ci-docker.sh engine installs it)")
        pytest.skip("docker-compose is missing (scripts/ci-docker.sh engine installs Debian's)")
    scratch = tmp_path_factory.mktemp("compose")
    shipped = (REPO / "docker-compose.yml").read_text()
    as_shipped = scratch / "docker-compose.yml"
    as_shipped.write_text(shipped)  # beside the test's own file; paths resolve from --project-directory
    test_env = scratch / "test-environment.yml"
    labels = {"labels": [LABEL]}
    test_env.write_text(
        json.dumps(
            {
                "services": {
                    "gateway": {"image": image, "environment": REGISTRY_TRUST, **labels},
                    "proxy": labels,
                }
            }
        )
    )
    files = [as_shipped, test_env]
    env = {"NGINX_IMAGE": standins["NGINX_IMAGE"]}
    compose(files, "down", "--remove-orphans", env=env)  # what an interrupted run left
    try:
        compose(files, "up", "-d", "--no-build", env=env)
        replicas = compose(files, "ps", "-q", "gateway", env=env).split()
        yield Stack(replicas, files, env)
    except BaseException:
        print(compose(files, "logs", "--no-color", "--tail", "40", env=env, timeout=60))
        raise
    finally:
        # The cache volumes stay: a later run's npx starts warm.
        compose(files, "down", "--remove-orphans", env=env, timeout=120)


@contextlib.asynccontextmanager
async def client_through_proxy(mode: str, **callbacks: object) -> AsyncIterator[Client]:
    """The SDK client with alice's token on every request (its transport does not close the http client)."""
    async with httpx.AsyncClient(headers=ALICE, timeout=httpx.Timeout(30, read=300)) as http:
        transport = streamable_http_client(f"{PROXY}/mcp", http_client=http)
        async with Client(transport, mode=mode, **callbacks) as client:  # type: ignore[arg-type]
            yield client


async def test_the_proxy_refuses_requests_without_a_listed_token(stack: list[str]) -> None:
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    async with httpx.AsyncClient(timeout=30) as http:
        missing = await http.post(f"{PROXY}/mcp", headers=BASE_HEADERS, json=initialize)
        wrong = await http.post(
            f"{PROXY}/mcp", headers={**BASE_HEADERS, "authorization": "Bearer nope"}, json=initialize
        )
        status = await http.get(f"{PROXY}/status", headers=ALICE)
        healthz = await http.get(f"{PROXY}/healthz")
    assert (missing.status_code, wrong.status_code) == (401, 401)
    assert missing.headers["www-authenticate"].startswith("Bearer")
    assert status.status_code == 404  # the gateway's operator pages stay inside the network
    assert healthz.status_code == 200


@pytest.mark.parametrize("mode", ["legacy", MODERN])
async def test_the_sdk_client_with_a_token_lists_calls_and_answers_an_elicitation_through_the_proxy(
    stack: list[str], mode: str
) -> None:
    """In a legacy session the server's elicitation request travels on the call's SSE stream and
    the call waits for the answer: it completes only if nginx passes the event through at once."""
    asked: list[str] = []

    async def on_elicitation(context: object, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append("elicitation")
        return types.ElicitResult(action="accept", content={"name": "Ada Lovelace", "check": True})

    with anyio.fail_after(CALL_DEADLINE):
        async with client_through_proxy(mode, elicitation_callback=on_elicitation) as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            echoed = await client.call_tool("echo", {"message": "through nginx"})
            elicited = await client.call_tool("trigger-elicitation-request", {})
    assert {"echo", "trigger-elicitation-request"} <= names
    assert echoed.content == [TextContent(type="text", text="Echo: through nginx")]
    assert not elicited.is_error
    assert asked == ["elicitation"]


@pytest.mark.parametrize("mode", ["legacy", MODERN])
async def test_sse_progress_is_not_buffered_by_the_proxy(stack: list[str], mode: str) -> None:
    """A 120 s operation with a progress event every second: the first event reaches the client
    well inside the wait (a buffering proxy would hold it until the stream ends), then the
    client gives up the call."""
    first = anyio.Event()

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        first.set()

    async with client_through_proxy(mode) as client:
        await client.list_tools()
        async with anyio.create_task_group() as tg:
            tg.start_soon(
                lambda: client.call_tool(
                    "trigger-long-running-operation", {"duration": 120, "steps": 120}, progress_callback=on_progress
                )
            )
            with anyio.fail_after(CALL_DEADLINE):
                await first.wait()
            tg.cancel_scope.cancel()


async def test_two_replicas_behind_round_robin_answer_every_request_with_no_404(stack: list[str]) -> None:
    """Concurrent clients of both eras, several calls each, no affinity: every call is answered
    (a legacy session that reached the wrong replica unforwarded would be a 404), and each
    replica served tool calls."""
    assert len(stack) == 2, stack
    answers: dict[int, list[str]] = {}
    # Only this test's requests count (an earlier test's client may end its session while its
    # own cancel is still on the way: a 404 that is right).
    before = {replica: len(container_log(replica)) for replica in stack}

    async def one(index: int) -> None:
        got = []
        async with client_through_proxy("legacy" if index % 2 else MODERN) as client:
            for call in range(CALLS_EACH):
                result = await client.call_tool("echo", {"message": f"{index}.{call}"})
                [content] = result.content
                assert isinstance(content, TextContent)
                got.append(content.text)
        answers[index] = got

    with anyio.fail_after(CALL_DEADLINE * 2):
        async with anyio.create_task_group() as tg:
            for index in range(CLIENTS):
                tg.start_soon(one, index)
    assert answers == {i: [f"Echo: {i}.{c}" for c in range(CALLS_EACH)] for i in range(CLIENTS)}
    served = {}
    for replica in stack:
        lines = container_log(replica)[before[replica] :]
        records = [json.loads(line) for line in lines if line.startswith("{")]
        served[replica] = sum(r.get("rpc_method") == "tools/call" for r in records)
        assert not [r["message"] for r in records if r.get("status") == 404], replica
    assert all(served.values()), served


async def test_a_uvx_server_runs_in_the_read_only_gateway_service(stack: list[str]) -> None:
    """The service's volumes are all that uv writes: `uvx` fetches and starts a server in a
    replica as shipped (read-only root), which answers initialize on its stdin."""
    initialize = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "test", "version": "1"},
            },
        }
    )
    done = await anyio.to_thread.run_sync(
        lambda: subprocess.run(
            ["docker", "exec", "-i", stack[0], "uvx", "mcp-server-time@2026.10.19"],
            input=initialize + "\n",
            capture_output=True,
            text=True,
            timeout=UP_TIMEOUT,
            check=False,
        )
    )
    assert '"serverInfo"' in done.stdout, done.stderr[-2000:]


class Loop:
    """Client loops of modern tools/call through the proxy, counting what comes back: the HTTP
    status, or ``timeout`` past ``FAILOVER_BUDGET``, or the error's name."""

    def __init__(self) -> None:
        self.outcomes: Counter[str] = Counter()
        self.slowest = 0.0
        self._changed = anyio.Event()

    @property
    def answered(self) -> int:
        return self.outcomes["200"]

    async def run(self, index: int) -> None:
        async with httpx.AsyncClient(headers=ALICE, timeout=FAILOVER_BUDGET) as http:
            call = 0
            while True:
                call += 1
                started = time.monotonic()
                try:
                    reply = await http.post(
                        f"{PROXY}/mcp",
                        headers=modern_headers("tools/call", "get-sum"),
                        json=modern_call(call, "get-sum", {"a": index, "b": call}),
                    )
                    outcome = str(reply.status_code)
                    if reply.status_code == 200:
                        text = reply.json()["result"]["content"][0]["text"]
                        assert str(index + call) in text, text
                except httpx.TimeoutException:
                    outcome = "timeout"
                except httpx.HTTPError as exc:
                    outcome = type(exc).__name__
                self.slowest = max(self.slowest, time.monotonic() - started)
                self.outcomes[outcome] += 1
                self._changed.set()
                self._changed = anyio.Event()

    async def answers(self, more: int) -> None:
        """Until ``more`` further requests were answered 200."""
        target = self.answered + more
        while self.answered < target:
            await self._changed.wait()


def _await_event(process: subprocess.Popen[str], wanted: str, timeout: float) -> None:
    """Read ``docker events`` lines until one whose status is ``wanted``; TimeoutError after ``timeout`` s."""
    found = threading.Event()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            if json.loads(line).get("status") == wanted:
                found.set()
                return

    threading.Thread(target=read, daemon=True).start()
    if not found.wait(timeout):
        raise TimeoutError(f"no {wanted!r} event in {timeout} s")


async def _healthy(container: str, since: str) -> None:
    watcher = events(container, "event=health_status", since=since)
    try:
        await anyio.to_thread.run_sync(_await_event, watcher, "health_status: healthy", HEALTHY_TIMEOUT)
    finally:
        watcher.kill()
        watcher.communicate()


def _served_calls(container: str) -> int:
    """tools/call requests in the replica's access log."""
    records = [json.loads(line) for line in container_log(container) if line.startswith("{")]
    return sum(record.get("rpc_method") == "tools/call" for record in records)


async def _docker(*args: str) -> str:
    return await anyio.to_thread.run_sync(lambda: docker(*args, timeout=UP_TIMEOUT))


async def test_clients_get_answers_while_replicas_are_stopped_killed_and_added(stack: Stack) -> None:
    """Issue #40: through the compose nginx, two client loops get an answer to every request,
    none after more than 5 s and none a 5xx, while one replica is stopped (it drains: 503s
    nginx retries elsewhere) and started again, while one is killed (nothing answers at its
    address until nginx's 2 s connect timeout) and comes back, and while a third is added and
    takes traffic, all without restarting nginx."""
    proxy = stack.compose("ps", "-q", "proxy").split()[0]
    proxy_started = await _docker("inspect", "--format", "{{.State.StartedAt}}", proxy)
    loop = Loop()
    first, second = stack[0], stack[1]
    with anyio.fail_after(UP_TIMEOUT * 2):
        async with anyio.create_task_group() as tg:
            for index in range(LOOPS):
                tg.start_soon(loop.run, index)
            await loop.answers(ANSWERS_PER_PHASE)

            since = str(int(time.time()))
            await _docker("stop", "-t", "30", first)  # SIGTERM: it drains, then exits
            await loop.answers(ANSWERS_PER_PHASE)
            await _docker("start", first)
            await _healthy(first, since)
            stopped = dict(loop.outcomes)

            since = str(int(time.time()))
            await _docker("kill", second)  # SIGKILL: no drain, its address goes dark
            await loop.answers(ANSWERS_PER_PHASE)
            if (await _docker("inspect", "--format", "{{.State.Running}}", second)).strip() != "true":
                await _docker("start", second)  # the restart policy did not bring it back
            await _healthy(second, since)
            killed = dict(loop.outcomes)

            since = str(int(time.time()))
            await anyio.to_thread.run_sync(
                lambda: stack.compose("up", "-d", "--no-recreate", "--no-deps", "--scale", "gateway=3", "gateway")
            )
            replicas = stack.compose("ps", "-q", "gateway").split()
            [added] = set(replicas) - {first, second}
            await _healthy(added, since)
            # The new replica is in Docker's DNS from its start; nginx asks again every 5 s.
            while not _served_calls(added):
                await loop.answers(LOOPS)
            tg.cancel_scope.cancel()
    print(f"\nafter the stop: {stopped}\nafter the kill: {killed}\nin all: {dict(loop.outcomes)}")
    print(f"slowest request: {loop.slowest:.2f} s")
    assert set(loop.outcomes) == {"200"}, loop.outcomes
    assert (await _docker("inspect", "--format", "{{.State.StartedAt}}", proxy)) == proxy_started
