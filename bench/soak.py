"""A soak: many clients of both eras doing what people do to a real gateway, every answer checked.

    python -m bench.soak [--seconds N] [--scenario NAME ...]

Each scenario starts a gateway (``python -m gateway``, uvloop, real children:
``tests/servers/testserver.py``) with a bearer token per kind of client, so that each kind is
its own principal, runs its clients concurrently for ``--seconds`` (default 30), stops the
gateway with SIGTERM while calls are in flight, and reports:

- ``hangups``: modern and legacy echo clients beside clients that hang up mid-body (raw
  sockets) and mid-stream (a countdown's progress), crash their child, and read a 2 MB reply
  slowly or stop reading it;
- ``deaf``: echo clients while a child stops reading its stdin (``deafen``) and another is
  killed (SIGKILL); legacy sessions deleted mid-call; streams resumed with ``Last-Event-ID``;
  legacy GET streams opened and dropped;
- ``dialogs``: modern clients on a legacy-only child answering or abandoning elicitation
  rounds (MRTR), legacy sessions answering theirs, echo clients that declare elicitation,
  modern clients whose server needs them at a URL first (-32042: the gateway's URL round,
  signed in, declined or walked away from);
- ``servers``: three servers from a config file, one failing to start; Tasks polled,
  abandoned, cancelled, and read by another principal; /readyz, /metrics scraped;
- ``keyed``: a legacy server that keeps roots and takes subscriptions, its legacy children told
  each client's own capabilities (``--capability-keying exact``): modern and legacy clients
  declaring roots sets (shared and their own, changed now and then), each call's child must
  hold exactly its client's set; clients without roots must meet none; legacy sessions
  subscribed to a resource each, having the child tell updates of theirs and of others', must
  hear only their own.

- ``domains``: four servers from a config file: a good one, whose modern and legacy echo
  clients must see nothing of the others' trouble; a hostile one whose clients freeze, stop
  (SIGSTOP), crash and kill its children, flood their stderr, write garbage and 8 MB replies;
  one that never answers its handshake; one that ignores SIGTERM and stdin's end. /readyz,
  /healthz and /metrics must answer 200 throughout.

- ``rolling``: two replicas with owner routing, each request sent to either (a balancer
  without affinity): modern echo and dialog (MRTR) clients, legacy sessions, Tasks; every few
  seconds one replica leaves the balancer, drains on SIGTERM (exit status 0) and starts again
  at its address (a rolling update). Sessions and parked calls of a replica that went are
  lost with a clear error; nothing may cross, go missing, or be cut.

``--gateway-arg`` adds an option to every scenario's gateway (``--gateway-arg=--workers
--gateway-arg=2`` runs them all on two workers).

A problem is anything a client of an MCP gateway must never see: another client's echo,
progress, question or task; a request with no final answer, or two; a worker stuck past the
end; a child left running after the gateway stopped, or an exit status other than 0; an
ERROR line in the gateway's log (but the broken server's own); a 5xx to a malformed request.
The exit status is 1 when any scenario had one. Issue #42's sessions found three defects with these clients (CHANGELOG,
Fixed): a 500 for a client gone mid-body, calls held an hour by a child that stopped
reading, and a cancelled call's question handed to another client; a later session's, with
two workers, a supervisor that died by a late signal, and ``domains`` a metrics page that
failed while a child was stalled.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import itertools
import json
import os
import random
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

from bench import procs
from bench.httpclient import LEGACY, MODERN, legacy_headers, modern_headers

CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
TASKS = "io.modelcontextprotocol/tasks"
TEST_SERVER = [sys.executable, "tests/servers/testserver.py"]
ELICIT = {
    "method": "elicitation/create",
    "params": {
        "mode": "form",
        "message": "Your name?",
        "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
    },
}
EXIT_GRACE = 2.0
"""Seconds a process seen below the gateway gets to exit after the gateway has exited."""
END_GRACE = 60.0
"""Seconds the workers get to finish after the end (and the gateway to drain) before they are stuck."""
PRE_STOP = 0.5
"""``rolling``: seconds between a replica's leaving the balancer and its SIGTERM (a preStop hook's)."""
ROLL_STOP_WAIT = 30.0
"""``rolling``: seconds a replica gets to drain and exit after SIGTERM (its drain budget is 20)."""


def meta(capabilities: dict[str, Any] | None = None, **more: Any) -> dict[str, Any]:
    return {"io.modelcontextprotocol/protocolVersion": MODERN, CAPABILITIES: capabilities or {}, **more}


def parse_sse(text: str) -> list[dict[str, Any]]:
    found = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        data = [line[5:].lstrip() for line in block.split("\n") if line.startswith("data:")]
        if any(data):
            found.append(json.loads("\n".join(data)))
    return found


def messages(reply: httpx.Response) -> list[dict[str, Any]]:
    if reply.headers.get("content-type", "").startswith("text/event-stream"):
        return parse_sse(reply.text)
    parsed = reply.json()
    return parsed if isinstance(parsed, list) else [parsed]


class Soak:
    """One scenario's gateway, clients, counts and problems."""

    def __init__(self, name: str, seconds: float, log_dir: Path, extra: list[str] | None = None) -> None:
        self.name, self.seconds, self.log_dir = name, seconds, log_dir
        self.extra = extra or []  # more of the gateway's options (``--gateway-arg``)
        self.counts: collections.Counter[str] = collections.Counter()
        self.problems: list[str] = []
        self.tokens: dict[str, str] = {}
        self.stop = asyncio.Event()
        self._base = ""
        self.port = 0
        self.http: httpx.AsyncClient | None = None
        self.sealed = False  # the gateway has read its tokens: no principal can be added
        self.routed: list[str] = []  # ``rolling``: the replicas a balancer sends new requests to
        self.task_server = "good"  # the server ``task_client`` calls

    @property
    def base(self) -> str:
        """The gateway's base URL; with replicas, one that takes new requests, picked per
        request as a balancer without affinity would."""
        return random.choice(self.routed) if self.routed else self._base

    @property
    def url(self) -> str:
        return f"{self.base}/mcp"

    async def post(self, url: str, **kwargs: Any) -> httpx.Response:
        """``POST url``; with replicas, a connection refused (a replica between its stop and its
        restart) is sent to another, as a balancer does (nothing of it reached the gateway)."""
        assert self.http is not None
        for _ in range(5):
            try:
                return await self.http.post(url, **kwargs)
            except httpx.ConnectError:
                if not self.routed:
                    raise
                self.counts["connection refused: sent to another replica"] += 1
                old = url.split("/", 3)
                url = f"{self.base}/{old[3]}" if len(old) > 3 else self.base
        return await self.http.post(url, **kwargs)

    def problem(self, text: str) -> None:
        self.problems.append(text)

    def token(self, who: str) -> str:
        if who not in self.tokens:
            if self.sealed:
                raise KeyError(f"{who} is no principal of this soak (each worker's name and number is)")
            self.tokens[who] = f"soak-{who}-{os.urandom(12).hex()}"
        return self.tokens[who]

    def headers(self, who: str, method: str = "tools/call", name: str | None = None) -> dict[str, str]:
        """A modern request's headers (``bench.httpclient.modern_headers``) as principal ``who``."""
        return {**modern_headers(method, name), "authorization": f"Bearer {self.token(who)}"}

    def final(self, found: list[dict[str, Any]], request_id: Any, who: str) -> dict[str, Any] | None:
        """The one final answer for ``request_id`` in ``found``; a problem when not exactly one.
        A refusal before the body is read (a drain's 503, a 429) has no id: the gateway never
        knew it (the 2026-07-28 schema has no null id)."""
        finals = [m for m in found if "result" in m or "error" in m]
        if len(finals) != 1 or finals[0].get("id", request_id if "error" in finals[0] else None) != request_id:
            self.problem(f"{who}: {len(finals)} final answers for id {request_id}: {json.dumps(finals)[:200]}")
            return None
        return finals[0]

    async def call(
        self, url: str, who: str, request_id: Any, tool: str, arguments: dict[str, Any], **more: Any
    ) -> tuple[httpx.Response, dict[str, Any] | None]:
        assert self.http is not None
        params: dict[str, Any] = {"name": tool, "arguments": arguments, "_meta": meta(), **more}
        body = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
        reply = await self.post(url, headers=self.headers(who, name=tool), json=body)
        if reply.status_code >= 500 and reply.status_code != 503:
            self.problem(f"{who}: {tool} answered {reply.status_code}: {reply.text[:200]}")
        return reply, self.final(messages(reply), request_id, f"{who} ({reply.status_code} {reply.text[:120]!r})")

    async def task_request(self, url: str, who: str, method: str, task_id: str, request_id: Any) -> dict[str, Any]:
        """``tasks/get`` or ``tasks/cancel`` of ``task_id`` as ``who``: its last message."""
        assert self.http is not None
        params = {"taskId": task_id, "_meta": meta({"extensions": {TASKS: {}}})}
        body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        return messages(await self.post(url, headers=self.headers(who, method, task_id), json=body))[-1]

    async def legacy_session(self, url: str, who: str, capabilities: dict[str, Any]) -> dict[str, str] | None:
        """A 2025-11-25 session of principal ``who``: its requests' headers
        (``bench.httpclient.legacy_headers``), or None when ``initialize`` was refused."""
        assert self.http is not None
        auth = {"authorization": f"Bearer {self.token(who)}"}
        params = {"protocolVersion": LEGACY, "capabilities": capabilities, "clientInfo": {"name": who, "version": "1"}}
        initialize = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}
        reply = await self.post(url, headers={**legacy_headers(None), **auth}, json=initialize)
        if reply.status_code != 200:
            self.counts[f"{who}: initialize {reply.status_code} {reply.text[:100]}"] += 1
            return None
        headers = {**legacy_headers(reply.headers["mcp-session-id"]), **auth}
        await self.post(url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        return headers

    async def sessions(
        self, url: str | None, who: str, capabilities: dict[str, Any], *, retry_after: float = 0.3
    ) -> AsyncIterator[dict[str, str]]:
        """Legacy sessions of ``who`` (``legacy_session``) at ``url`` (None: any replica, picked
        for each ``initialize``), one after another until the end;
        ``initialize`` again ``retry_after`` seconds after a refusal."""
        while not self.stop.is_set():
            headers = await self.legacy_session(url or self.url, who, capabilities)
            if headers is None:
                await asyncio.sleep(retry_after)
                continue
            yield headers

    async def run(
        self,
        argv: list[str],
        workers: list[tuple[Callable[[Soak, int], Awaitable[None]], int]],
        *,
        allowed_errors: tuple[str, ...] = (),
        replicas: int = 1,
        roll_every: float = 0.0,
    ) -> None:
        """The gateway (``replicas`` of them, with owner routing, the clients sending each request
        to any: ``base``), ``workers`` against it for ``seconds``, then SIGTERM and the checks.
        ``roll_every``: a replica is drained and started again (a rolling update) this often."""
        tokens = self.log_dir / f"{self.name}-tokens"
        for fn, count in workers:  # every kind of client its own principal
            self.token(fn.__name__)
            for n in range(count):
                self.token(f"{fn.__name__}{n}")
        tokens.write_text("".join(f"{who}:{token}\n" for who, token in self.tokens.items()))
        self.sealed = True
        secret = self.log_dir / f"{self.name}-state-secret"
        secret.write_text(os.urandom(32).hex() + "\n")
        ports: list[int] = []
        while len(ports) < replicas:
            if (port := procs.free_port()) not in ports:
                ports.append(port)
        self.port = ports[0]

        def gateway(port: int, generation: int = 0) -> procs.Service:
            routing = ["--advertise-url", f"http://127.0.0.1:{port}", "--state-secret-file", str(secret)]
            command = [sys.executable, "-m", "gateway", "--port", str(port), "--auth-token-file", str(tokens)]
            command += [*(routing if replicas > 1 else ()), *self.extra, *argv]
            name = f"soak-{self.name}" if replicas == 1 else f"soak-{self.name}-{port}-{generation}"
            return procs.Service(name, command, port, self.log_dir)

        live = [gateway(port) for port in ports]
        every = list(live)  # each process ever started: its exit status, log and children are checked
        for service in live:
            service.start()
        for service in live:
            service.wait_ready()
        self._base = f"http://127.0.0.1:{self.port}"
        self.routed = [f"http://127.0.0.1:{port}" for port in ports] if replicas > 1 else []
        children: dict[int, str] = {}  # every process seen below a gateway: its command line
        async with httpx.AsyncClient(timeout=90, limits=httpx.Limits(max_connections=200)) as self.http:

            async def worker(fn: Callable[[Soak, int], Awaitable[None]], n: int) -> None:
                try:
                    await fn(self, n)
                except Exception as exc:  # a client's own failure is a finding, not a crash of the soak
                    if self.stop.is_set() and isinstance(exc, (httpx.TransportError, ConnectionError)):
                        self.counts[f"after the end: {type(exc).__name__}"] += 1  # it stopped listening
                    else:
                        self.problem(f"{fn.__name__}{n}: {type(exc).__name__}: {exc}")

            tasks = [asyncio.create_task(worker(fn, n)) for fn, count in workers for n in range(count)]
            roller = asyncio.create_task(self._roll(live, every, gateway, roll_every, children)) if roll_every else None
            deadline = time.monotonic() + self.seconds
            while time.monotonic() < deadline:
                for service in live:
                    children.update(_commands(procs.descendants(service.pid), children))
                await asyncio.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
            self.stop.set()
            if roller is not None:
                await roller  # its replica back, or its problem noted
            for service in live:
                children.update(_commands(procs.descendants(service.pid), children))
                if service.proc is not None:
                    service.proc.send_signal(signal.SIGTERM)  # drain, calls in flight
            _, stuck = await asyncio.wait(tasks, timeout=END_GRACE)
            if stuck:
                self.problem(f"{len(stuck)} client(s) stuck {END_GRACE:g} s after the end")
                for task in stuck:
                    task.cancel()
        for service in live:
            service.stop()
        for service in every:
            code = service.proc.returncode if service.proc is not None else None
            if code != 0:  # SIGTERM, perhaps a second one (``stop``): a drain, then exit code 0
                self.problem(f"{service.name}: the gateway's exit status was {code}, not 0")
        left = [f"{pid} ({command})" for pid, command in sorted(children.items()) if _outlives(pid, EXIT_GRACE)]
        if left:
            self.problem(f"processes left running after the gateway stopped: {left}")
        for service in every:
            self._check_log(service, allowed_errors)

    async def _roll(
        self,
        live: list[procs.Service],
        every: list[procs.Service],
        gateway: Callable[[int, int], procs.Service],
        period: float,
        children: dict[int, str],
    ) -> None:
        """A rolling update, one replica at a time: taken out of the balancer, ``PRE_STOP`` for the
        requests already sent to it, SIGTERM (its drain; exit status 0 within ``ROLL_STOP_WAIT``),
        started again at its address (a new owner: another boot id), back in the balancer."""
        generation = 0
        while not self.stop.is_set():
            try:
                await asyncio.wait_for(self.stop.wait(), period)
                return
            except TimeoutError:
                pass
            index = random.randrange(len(live))
            old = live[index]
            base = f"http://127.0.0.1:{old.port}"
            self.routed.remove(base)
            await asyncio.sleep(PRE_STOP)
            children.update(_commands(procs.descendants(old.pid), children))
            assert old.proc is not None
            old.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(old.proc.wait, ROLL_STOP_WAIT)
            except subprocess.TimeoutExpired:
                self.problem(f"{old.name} did not exit within {ROLL_STOP_WAIT:g} s of SIGTERM")
                old.stop()
            generation += 1
            new = live[index] = gateway(old.port, generation)
            every.append(new)
            new.start()
            await asyncio.to_thread(new.wait_ready)
            self.routed.append(base)
            self.counts["replica rolled: drained, exited, started again"] += 1

    def _check_log(self, service: procs.Service, allowed_errors: tuple[str, ...]) -> None:
        """Every ERROR line of ``service``'s log is a problem, but those naming ``allowed_errors``."""
        lines = service.log_path.read_text(errors="replace").splitlines()
        for index, line in enumerate(lines):
            if " ERROR " in line and not any(allowed in line for allowed in allowed_errors):
                # A traceback's lines follow, up to the next record's (each starts with its year).
                after = list(itertools.takewhile(lambda more: not more[:2].isdigit(), lines[index + 1 :]))
                frames = [more.strip() for more in after if "gateway/" in more][-2:]
                told = " | ".join([*frames, after[-1].strip()] if after else [])
                self.problem(f"gateway log: {line[:300]}{' | ' + told[:600] if told else ''}")

    def report(self) -> list[str]:
        lines = [f"## {self.name}: " + ("no problem" if not self.problems else f"{len(self.problems)} problem(s)")]
        lines += [f"    {count:7d}  {what}" for what, count in sorted(self.counts.items())]
        lines += [f"  ! {problem}" for problem in self.problems[:30]]
        return lines


def outcome(final: dict[str, Any] | None) -> str:
    """A final answer in a word: ``result``, the error's code, or ``none``."""
    if final is None:
        return "none"
    return "result" if "result" in final else str(final["error"].get("code"))


def _commands(pids: list[int], known: dict[int, str]) -> dict[int, str]:
    """``pids`` with their command lines (read once per process)."""
    found = {}
    for pid in pids:
        if pid not in known:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                    found[pid] = cmdline.read().replace(b"\0", b" ").decode(errors="replace").strip()[:120]
            except OSError:
                found[pid] = "?"
    return found


def _outlives(pid: int, grace: float) -> bool:
    """``pid`` is still running ``grace`` seconds from now at the latest (a process that was
    told to go, multiprocessing's resource tracker once the supervisor has gone, takes a moment)."""
    try:
        fd = os.pidfd_open(pid)
    except (ProcessLookupError, OSError):
        return False
    try:
        select.select([fd], [], [], grace)  # readable once it has exited
    finally:
        os.close(fd)
    return _alive(pid)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][:1] != "Z"
    except (OSError, IndexError):
        return False


# -- clients ------------------------------------------------------------------------------


async def echo(
    soak: Soak, n: int, *, tools: tuple[str, ...] = ("echo",), elicit: bool = False, who: str | None = None
) -> None:
    """Modern echo calls: each answer must be this call's own message."""
    who = who or f"echo{n}"
    request_id = 0
    while not soak.stop.is_set():
        request_id += 1
        tool = random.choice(tools)
        message = f"echo{n}-{request_id}-" + "x" * random.randint(0, 2000)
        arguments = {"message": message} if tool == "echo" else {"text": f"noise {message}"}
        more = {"_meta": meta({"elicitation": {}})} if elicit else {}
        _, final = await soak.call(soak.url, who, request_id, tool, arguments, **more)
        if final is None or "error" in final:
            soak.counts[f"echo: error {final['error']['code'] if final else None}"] += 1
            continue
        if final["result"].get("resultType") == "input_required":
            soak.problem(f"{who} was asked a question it never caused: {json.dumps(final)[:200]}")
        elif tool == "echo" and final["result"]["content"][0]["text"] != message:
            soak.problem(f"{who} got another answer: {final['result']['content'][0]['text'][:60]}")
        soak.counts[f"{tool}: answered right"] += 1


async def legacy_echo(soak: Soak, n: int, *, url: str | None = None, who: str | None = None) -> None:
    """Legacy sessions' echo calls (to ``url``, else to any replica per request: ``Soak.url``);
    a session its replica ended (503 while it drains, 404 once it is gone) is replaced."""
    who = who or f"legacy_echo{n}"
    async for headers in soak.sessions(url, who, {}, retry_after=0.2):
        assert soak.http is not None
        for request_id in range(1, random.randint(2, 30)):
            if soak.stop.is_set():
                break
            target = url or soak.url
            message = f"legacy{n}-{request_id}-{headers['mcp-session-id'][:8]}"
            body = {
                "jsonrpc": "2.0",
                "id": request_id,
                "method": "tools/call",
                "params": {"name": "echo", "arguments": {"message": message}},
            }
            reply = await soak.post(target, headers=headers, json=body)
            final = soak.final(messages(reply), request_id, who)
            if reply.status_code in (404, 503):  # its session ended with its replica: a new one
                soak.counts[f"legacy echo: {reply.status_code}, a new session"] += 1
                break
            if final is not None and "result" in final:
                if final["result"]["content"][0]["text"] != message:
                    soak.problem(f"{who} got another answer")
                soak.counts["legacy echo: answered right"] += 1
        else:
            if random.random() < 0.5:
                await soak.http.delete(url or soak.url, headers=headers)


async def hang_up_mid_body(soak: Soak, n: int) -> None:
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"message": "x"}, "_meta": meta()},
        }
    ).encode()
    head = "".join(f"{k}: {v}\r\n" for k, v in soak.headers(f"hang_up_mid_body{n}", name="echo").items())
    request = f"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\n{head}content-length: {len(body)}\r\n\r\n".encode() + body
    while not soak.stop.is_set():
        _, writer = await asyncio.open_connection("127.0.0.1", soak.port)
        writer.write(request[: random.randint(0, len(request) - 1)])
        await writer.drain()
        await asyncio.sleep(random.random() * 0.05)
        writer.close()
        soak.counts["hung up mid-request"] += 1
        await asyncio.sleep(0.01)


async def hang_up_mid_stream(soak: Soak, n: int) -> None:
    request_id = 0
    while not soak.stop.is_set():
        request_id += 1
        params = {"name": "countdown", "arguments": {"steps": 50, "interval_ms": 100}, "_meta": meta(progressToken=n)}
        body = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
        headers = soak.headers(f"hang_up_mid_stream{n}", name="countdown")
        async with (
            httpx.AsyncClient(timeout=30) as own,  # its own connection, closed mid-stream
            own.stream("POST", soak.url, headers=headers, json=body) as reply,
        ):
            async for chunk in reply.aiter_bytes():
                if b"progress" in chunk and random.random() < 0.7:
                    break
        soak.counts["hung up mid-stream"] += 1


async def progress(soak: Soak, n: int) -> None:
    request_id = 0
    while not soak.stop.is_set():
        request_id += 1
        tag = f"progress{n}-{request_id}"
        arguments = {"count": random.randint(1, 200), "tag": tag}
        reply, final = await soak.call(
            soak.url, f"progress{n}", request_id, "progress_burst", arguments, _meta=meta(progressToken=tag)
        )
        for message in messages(reply):
            if message.get("method") == "notifications/progress" and message["params"]["progressToken"] != tag:
                soak.problem(f"progress{n} got another call's progress: {message['params']['progressToken']}")
        if final is not None and "result" in final:
            if final["result"]["content"][0]["text"] != tag:
                soak.problem(f"progress{n} got another result")
            soak.counts["progress stream: answered right"] += 1


async def crash(soak: Soak, n: int) -> None:
    while not soak.stop.is_set():
        await asyncio.sleep(random.uniform(0.5, 2.0))
        _, final = await soak.call(soak.url, f"crash{n}", 1, "crash", {})
        soak.counts[f"crash: {outcome(final)}"] += 1


async def slow_reader(soak: Soak, n: int) -> None:
    params = {"name": "big", "arguments": {"bytes": 2_000_000}, "_meta": meta()}
    body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}
    while not soak.stop.is_set():
        try:
            async with httpx.AsyncClient(timeout=60) as own:
                headers = soak.headers(f"slow_reader{n}", name="big")
                async with own.stream("POST", soak.url, headers=headers, json=body) as reply:
                    async for _ in reply.aiter_bytes(16384):
                        await asyncio.sleep(0.01)
                        if random.random() < 0.02:
                            break  # stops reading, then leaves
            soak.counts["slow reader"] += 1
        except httpx.HTTPError as exc:
            soak.counts[f"slow reader: {type(exc).__name__}"] += 1


async def deafen(soak: Soak, n: int) -> None:
    while not soak.stop.is_set():
        await asyncio.sleep(random.uniform(3, 8))
        await soak.call(soak.url, f"deafen{n}", 1, "deafen", {})
        soak.counts["a child stopped reading its stdin"] += 1


async def kill_child(soak: Soak, n: int) -> None:
    while not soak.stop.is_set():
        await asyncio.sleep(random.uniform(2, 5))
        _, final = await soak.call(soak.url, f"kill_child{n}", 1, "kill_self", {"signal": 9})
        soak.counts[f"child killed: {outcome(final)}"] += 1


async def delete_mid_call(soak: Soak, n: int) -> None:
    assert soak.http is not None
    async for headers in soak.sessions(soak.url, f"delete_mid_call{n}", {}):
        params = {"name": "countdown", "arguments": {"steps": 40, "interval_ms": 50}, "_meta": {"progressToken": 5}}
        body = {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": params}
        async with soak.http.stream("POST", soak.url, headers=headers, json=body) as reply:
            streamed = reply.headers.get("content-type", "").startswith("text/event-stream")
            text, deleted = "", False
            async for chunk in reply.aiter_text():
                text += chunk
                if streamed and not deleted and "progress" in text:
                    deleted = True
                    await soak.http.delete(soak.url, headers=headers)
        found = parse_sse(text) if streamed else [json.loads(text)]
        final = soak.final(found, 5, f"delete_mid_call{n} ({text[-300:]!r})")
        soak.counts[f"deleted mid-call: {outcome(final)}"] += 1


async def resume(soak: Soak, n: int) -> None:
    assert soak.http is not None
    async for headers in soak.sessions(soak.url, f"resume{n}", {}):
        params = {"name": "countdown", "arguments": {"steps": 10, "interval_ms": 30}, "_meta": {"progressToken": "r"}}
        body = {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": params}
        last, text = None, ""
        async with soak.http.stream("POST", soak.url, headers=headers, json=body) as reply:
            async for chunk in reply.aiter_text():
                text += chunk
                for block in text.replace("\r\n", "\n").split("\n\n")[:-1]:
                    for line in block.split("\n"):
                        if line.startswith("id:"):
                            last = line[3:].strip()
                if "progress" in text and random.random() < 0.5:
                    break  # the connection drops: resume
        complete = text.replace("\r\n", "\n").rsplit("\n\n", 1)[0]
        if any("id" in m and "method" not in m for m in parse_sse(complete)):
            soak.counts["resume: not needed"] += 1
        elif last is not None:
            resumed = await soak.http.get(soak.url, headers={**headers, "last-event-id": last})
            finals = [m for m in parse_sse(resumed.text) if "id" in m and "method" not in m]
            if resumed.status_code == 200 and len(finals) != 1:
                soak.problem(f"resume{n}: {len(finals)} final answers after resuming")
            soak.counts[f"resumed: {resumed.status_code}"] += 1
        await soak.http.delete(soak.url, headers=headers)


async def get_stream(soak: Soak, n: int) -> None:
    assert soak.http is not None
    async for headers in soak.sessions(soak.url, f"get_stream{n}", {}):
        get_headers = {k: v for k, v in headers.items() if k != "content-type"}
        async with soak.http.stream("GET", soak.url, headers=get_headers) as reply:
            soak.counts[f"GET stream: {reply.status_code}"] += 1
            try:
                async with asyncio.timeout(random.uniform(0.1, 2)):
                    async for _ in reply.aiter_bytes():
                        pass
            except TimeoutError:
                pass
        if random.random() < 0.5:
            await soak.http.delete(soak.url, headers=headers)


async def dialog(soak: Soak, n: int) -> None:
    """A modern client answering (80 %) or abandoning elicitation rounds, its own name in each."""
    who, request_id = f"dialog{n % 3}", 0
    while not soak.stop.is_set():
        request_id += 1
        name = f"name-{n}-{request_id}"
        arguments = {"requests": [ELICIT] * random.randint(1, 2), "parallel": random.random() < 0.5}
        more: dict[str, Any] = {"_meta": meta({"elicitation": {}})}
        _, final = await soak.call(soak.url, who, request_id, "ask_client", arguments, **more)
        rounds = 0
        while final is not None and "result" in final and final["result"].get("resultType") == "input_required":
            if random.random() < 0.2:
                soak.counts["dialog: abandoned"] += 1
                break
            rounds += 1
            result = final["result"]
            answers = {key: {"action": "accept", "content": {"name": name}} for key in result["inputRequests"]}
            request_id += 1
            retry = {**more, "inputResponses": answers, "requestState": result["requestState"]}
            _, final = await soak.call(soak.url, who, request_id, "ask_client", arguments, **retry)
        else:
            if final is not None and "result" in final:
                if rounds and name not in json.dumps(final["result"]):
                    soak.problem(f"dialog{n}: its answers lack its own name: {json.dumps(final)[:200]}")
                if not rounds and '"decline"' in json.dumps(final["result"]):
                    # Its question was held beside another client's call on the child (a tool
                    # learned quiet), which was cancelled: the question may have been that
                    # call's, so the gateway answered it (docs/bridging.md, rule 1).
                    soak.counts["dialog: declined by the gateway (another candidate was cancelled)"] += 1
                else:
                    soak.counts[f"dialog: done after {rounds} round(s)"] += 1
            elif final is not None:
                soak.counts[f"dialog: error {final['error']['code']} {final['error']['message'][:100]}"] += 1


async def url_dialog(soak: Soak, n: int) -> None:
    """A modern client whose server needs its user at a URL first (-32042, the gateway's own
    round): it signs in (70 %), declines (15 %) or walks away (15 %), its own account in each."""
    who, request_id = f"url_dialog{n}", 0
    grants = soak.log_dir / f"{soak.name}-grants"
    grants.mkdir(exist_ok=True)
    more: dict[str, Any] = {"_meta": meta({"elicitation": {"url": {}}})}
    while not soak.stop.is_set():
        request_id += 1
        account = f"u{n}-{request_id}"
        arguments = {"account": account, "grant_dir": str(grants)}
        _, final = await soak.call(soak.url, who, request_id, "url_required", arguments, **more)
        if final is None or "result" not in final or final["result"].get("resultType") != "input_required":
            soak.counts[f"url dialog: first answer {outcome(final)}"] += 1
            continue
        result = final["result"]
        urls = [entry["params"]["url"] for entry in result["inputRequests"].values()]
        if any(f"/{account}/" not in url for url in urls):
            soak.problem(f"{who}: a URL round that is not its own: {urls}")
        choice = random.random()
        if choice < 0.15:
            soak.counts["url dialog: walked away"] += 1
            continue
        action = "decline" if choice < 0.3 else "accept"
        if action == "accept":
            (grants / account).touch()  # the user signed in
        answers = {key: {"action": action} for key in result["inputRequests"]}
        request_id += 1
        retry = {**more, "inputResponses": answers, "requestState": result["requestState"]}
        _, final = await soak.call(soak.url, who, request_id, "url_required", arguments, **retry)
        text = json.dumps(final)
        if action == "accept" and final is not None and "result" in final:
            if f"connected as {account}" not in text:
                soak.problem(f"{who}: its retry answered another account: {text[:200]}")
            else:
                soak.counts["url dialog: signed in"] += 1
        elif action == "decline" and final is not None and "error" in final and '"action": "decline"' in text:
            soak.counts["url dialog: declined, not sent again"] += 1
        else:
            soak.counts[f"url dialog: {action} answered {outcome(final)}"] += 1


async def legacy_streamed(
    soak: Soak, headers: dict[str, str], body: dict[str, Any], answer: dict[str, Any]
) -> tuple[int, dict[str, Any] | None, list[str]]:
    """A legacy session's request, its stream read as it comes: each request of the server on it
    answered (POSTed) with the result ``answer``. Its HTTP status, its final answer (None
    when none came), and the methods it was asked, in order."""
    assert soak.http is not None
    final, asked = None, []
    async with soak.http.stream("POST", soak.url, headers=headers, json=body) as reply:
        if not reply.headers.get("content-type", "").startswith("text/event-stream"):
            found = messages(httpx.Response(reply.status_code, headers=reply.headers, content=await reply.aread()))
            return reply.status_code, found[-1] if found else None, asked
        text = ""
        async for chunk in reply.aiter_text():
            text += chunk
            if not text.endswith("\r\n\r\n"):
                continue
            for message in parse_sse(text):
                if "method" in message and "id" in message:
                    asked.append(message["method"])
                    reply_body = {"jsonrpc": "2.0", "id": message["id"], "result": answer}
                    await soak.http.post(soak.url, headers=headers, json=reply_body)
                elif "id" in message and "method" not in message:
                    final = message
            text = ""
    return reply.status_code, final, asked


async def legacy_dialog(soak: Soak, n: int) -> None:
    assert soak.http is not None
    async for headers in soak.sessions(soak.url, f"legacy_dialog{n}", {"elicitation": {}}):
        for request_id in range(1, 5):
            name = f"L{n}-{request_id}"
            params = {"name": "ask_client", "arguments": {"requests": [ELICIT]}}
            body = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
            accept = {"action": "accept", "content": {"name": name}}
            status, final, _ = await legacy_streamed(soak, headers, body, accept)
            if status != 200:
                soak.counts[f"legacy dialog: {status}"] += 1
            elif final is None:
                soak.problem(f"legacy_dialog{n}: no final answer")
            elif "error" in final:
                soak.counts[f"legacy dialog: error {outcome(final)}"] += 1
            elif name not in json.dumps(final):
                soak.problem(f"legacy_dialog{n}: its answer lacks its own name: {json.dumps(final)[:200]}")
            else:
                soak.counts["legacy dialog: answered right"] += 1
        await soak.http.delete(soak.url, headers=headers)


STOLEN: list[tuple[str, str]] = []


async def task_client(soak: Soak, n: int) -> None:
    who, request_id = f"task_client{n}", 0
    with_tasks = meta({"extensions": {TASKS: {}}})

    def url() -> str:  # any replica, per request
        return f"{soak.base}/servers/{soak.task_server}/mcp"

    while not soak.stop.is_set():
        request_id += 1
        steps = random.randint(1, 6)
        arguments = {"steps": steps, "interval_ms": 50}
        _, final = await soak.call(url(), who, request_id, "countdown", arguments, _meta=with_tasks)
        result = final.get("result", {}) if final else {}
        if result.get("resultType") != "task":
            soak.counts[f"task: answered {result.get('resultType')}"] += 1
            continue
        task_id = result["taskId"]
        STOLEN.append((who, task_id))
        mode = random.choice(["poll", "poll", "poll", "abandon", "cancel"])
        if mode == "cancel":
            request_id += 1
            await soak.task_request(url(), who, "tasks/cancel", task_id, request_id)
        if mode != "poll":
            soak.counts[f"task: {mode}ed"] += 1
            continue
        for _ in range(400):
            request_id += 1
            got = await soak.task_request(url(), who, "tasks/get", task_id, request_id)
            status = got.get("result", {}).get("status")
            if status is None:
                soak.counts[f"task: tasks/get {outcome(got)}"] += 1
                break
            if status in ("completed", "failed", "cancelled"):
                if status == "completed" and f"done after {steps} steps" not in json.dumps(got["result"]):
                    soak.problem(f"{who}: another task's result: {json.dumps(got)[:200]}")
                soak.counts[f"task: {status}"] += 1
                break
            await asyncio.sleep(0.05)
        else:
            soak.problem(f"{who}: task {task_id} never ended")


async def task_thief(soak: Soak, n: int) -> None:
    url = f"{soak.base}/servers/good/mcp"
    assert soak.http is not None
    while not soak.stop.is_set():
        await asyncio.sleep(0.05)
        if not STOLEN:
            continue
        owner, task_id = random.choice(STOLEN)
        got = await soak.task_request(url, "task_thief", "tasks/get", task_id, 1)
        if "result" in got:
            soak.problem(f"task_thief read {owner}'s task {task_id}")
        soak.counts[f"another principal's task: {outcome(got)}"] += 1


async def broken_server(soak: Soak, n: int) -> None:
    url = f"{soak.base}/servers/broken/mcp"
    while not soak.stop.is_set():
        reply, final = await soak.call(url, f"broken_server{n}", 1, "echo", {"message": "x"})
        soak.counts[f"broken server: {reply.status_code} {outcome(final)}"] += 1
        await asyncio.sleep(0.1)


async def legacy_server(soak: Soak, n: int) -> None:
    await legacy_echo(soak, n, url=f"{soak.base}/servers/legacy/mcp", who=f"legacy_server{n}")


async def scrape(soak: Soak, n: int) -> None:
    assert soak.http is not None
    while not soak.stop.is_set():
        for path in ("/readyz", "/healthz", "/metrics"):
            reply = await soak.http.get(soak.base + path)
            if reply.status_code != 200 and not soak.stop.is_set():  # one broken server leaves the replica ready
                soak.problem(f"{path} answered {reply.status_code}")
            soak.counts[f"GET {path}: {reply.status_code}"] += 1
        await asyncio.sleep(0.1)


async def echo_asking(soak: Soak, n: int) -> None:
    await echo(soak, n, elicit=True, who=f"echo_asking{n}")


async def echo_and_noise(soak: Soak, n: int) -> None:
    await echo(soak, n, tools=("echo", "echo", "noise"), who=f"echo_and_noise{n}")


SHARED_ROOTS = [[{"uri": f"file:///soak/shared/{k}", "name": f"shared{k}"}] for k in range(3)]
"""Roots sets several clients declare (so they share a set's children); each also has its own."""


def roots_of(who: str, k: int) -> list[dict[str, Any]]:
    return random.choice(SHARED_ROOTS) if random.random() < 0.6 else [{"uri": f"file:///soak/{who}/{k % 4}"}]


def held_roots(soak: Soak, who: str, final: dict[str, Any] | None, expected: Any) -> None:
    """``final`` of a ``cached_roots`` call: the roots its child holds must be ``expected``."""
    if final is None:
        return
    if "error" in final:
        soak.counts[f"cached_roots: error {outcome(final)} {final['error']['message'][:90]}"] += 1
        return
    held = final["result"].get("structuredContent", {}).get("roots")
    if held != expected:
        soak.problem(f"{who}: its call's child holds roots {json.dumps(held)[:160]}, not {json.dumps(expected)[:160]}")
    else:
        soak.counts["cached_roots: its own roots"] += 1


async def roots_modern(soak: Soak, n: int) -> None:
    """Modern calls declaring roots (and some other capability): the gateway's roots round
    answered with a set, the call's child must hold exactly that set."""
    who, request_id = f"roots_modern{n}", 0
    while not soak.stop.is_set():
        request_id += 1
        roots = roots_of(who, request_id)
        declared = {"roots": {}, **random.choice([{}, {"sampling": {}}, {"elicitation": {}}])}
        more: dict[str, Any] = {"_meta": meta(declared)}
        _, final = await soak.call(soak.url, who, request_id, "cached_roots", {}, **more)
        if final is not None and final.get("result", {}).get("resultType") == "input_required":
            result = final["result"]
            if set(result["inputRequests"]) != {"roots"}:
                soak.problem(f"{who} was asked what it never caused: {json.dumps(result)[:200]}")
                continue
            request_id += 1
            retry = {**more, "inputResponses": {"roots": {"roots": roots}}, "requestState": result["requestState"]}
            _, final = await soak.call(soak.url, who, request_id, "cached_roots", {}, **retry)
        elif final is not None and "result" in final:
            soak.problem(f"{who}: no roots round for a call declaring roots: {json.dumps(final)[:200]}")
            continue
        held_roots(soak, who, final, roots)


async def roots_legacy(soak: Soak, n: int) -> None:
    """Legacy sessions declaring roots: asked on a call's stream, answered with the session's set,
    which changes now and then (``notifications/roots/list_changed``)."""
    who = f"roots_legacy{n}"
    async for headers in soak.sessions(soak.url, who, {"roots": {"listChanged": True}}):
        assert soak.http is not None
        roots = roots_of(who, 0)
        for request_id in range(1, random.randint(2, 16)):
            if soak.stop.is_set():
                break
            if random.random() < 0.2:
                roots = roots_of(who, request_id)
                changed = {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}
                await soak.http.post(soak.url, headers=headers, json=changed)
            body = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {"name": "cached_roots"}}
            answered = {"roots": roots}
            status, final, asked = await legacy_streamed(soak, headers, body, answered)
            if any(method != "roots/list" for method in asked):
                soak.problem(f"{who} was asked {asked}, never caused")
            if status != 200:
                soak.counts[f"roots legacy: {status}"] += 1
                continue
            held_roots(soak, who, soak.final([final] if final else [], request_id, who), roots)
        if random.random() < 0.5:
            await soak.http.delete(soak.url, headers=headers)


async def rootless(soak: Soak, n: int) -> None:
    """Clients declaring no roots: their calls' children hold none (no roots are configured),
    never another client's."""
    who, request_id = f"rootless{n}", 0
    while not soak.stop.is_set():
        request_id += 1
        _, final = await soak.call(soak.url, who, request_id, "cached_roots", {})
        held_roots(soak, who, final, [])


async def subscriber(soak: Soak, n: int) -> None:
    """A legacy session subscribed to its own resource, its GET stream open, having the child
    tell updates of its own resource and of others' (``notify``): it must hear only its own."""
    who, mine = f"subscriber{n}", f"file:///soak/sub/{n}"
    async for headers in soak.sessions(soak.url, who, {}):
        assert soak.http is not None
        body = {"jsonrpc": "2.0", "id": 1, "method": "resources/subscribe", "params": {"uri": mine}}
        await soak.http.post(soak.url, headers=headers, json=body)
        heard: list[str] = []

        async def listen(get_headers: dict[str, str], heard: list[str]) -> None:
            assert soak.http is not None
            async with soak.http.stream("GET", soak.url, headers=get_headers) as reply:
                text = ""
                async for chunk in reply.aiter_text():
                    text += chunk
                    if text.endswith("\r\n\r\n"):
                        heard.extend(str(m.get("params", {}).get("uri")) for m in parse_sse(text) if "method" in m)
                        text = ""

        get_headers = {k: v for k, v in headers.items() if k != "content-type"}
        listening = asyncio.create_task(listen(get_headers, heard))
        for request_id in range(2, random.randint(4, 20)):
            if soak.stop.is_set():
                break
            uri = mine if random.random() < 0.5 else f"file:///soak/sub/{random.randint(0, 9)}"
            arguments = {"method": "notifications/resources/updated", "params": {"uri": uri}}
            call = {
                "jsonrpc": "2.0",
                "id": request_id,
                "method": "tools/call",
                "params": {"name": "notify", "arguments": arguments},
            }
            reply = await soak.http.post(soak.url, headers=headers, json=call)
            soak.final(messages(reply), request_id, who)
            soak.counts["subscriber: updates told"] += 1
        await soak.http.delete(soak.url, headers=headers)  # ends the GET stream
        try:
            await asyncio.wait_for(listening, 10)
        except TimeoutError:
            soak.problem(f"{who}: its GET stream outlived its session by 10 s")
        others = [uri for uri in heard if uri != mine]
        if others:
            soak.problem(f"{who} heard updates it never subscribed to: {others[:3]}")
        soak.counts["subscriber: updates heard"] += len(heard)


HOSTILE_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("freeze", {}),  # holds its stdout for good: nothing more is answered by that child
    ("big", {"bytes": 8_000_000}),
    ("stderr", {"lines": [f"flood line {n} " + "y" * 200 for n in range(2_000)]}),
    ("noise", {"text": "not json {{{"}),
    ("kill_self", {"signal": int(signal.SIGSTOP)}),  # stopped: it reads and writes nothing
    ("malformed_error", {}),
    ("exit", {"code": 3, "stderr": "hostile exit"}),
    ("crash", {}),
]


async def hostile(soak: Soak, n: int) -> None:
    """Calls that make their child misbehave, on a server of their own."""
    url = f"{soak.base}/servers/hostile/mcp"
    request_id = 0
    while not soak.stop.is_set():
        request_id += 1
        tool, arguments = random.choice(HOSTILE_CALLS)
        try:
            reply, final = await asyncio.wait_for(soak.call(url, f"hostile{n}", request_id, tool, arguments), 20)
        except TimeoutError:  # a frozen or stopped child's call: the client gives up, as people do
            soak.counts[f"hostile {tool}: gave up after 20 s"] += 1
            continue
        soak.counts[f"hostile {tool}: {reply.status_code} {outcome(final)}"] += 1


async def never_ready(soak: Soak, n: int) -> None:
    """Calls to servers whose child never answers, or cannot be stopped but by SIGKILL."""
    for name in ("silent", "sticky"):
        if soak.stop.is_set():
            return
        url = f"{soak.base}/servers/{name}/mcp"
        reply, final = await soak.call(url, f"never_ready{n}", 1, "echo", {"message": "x"})
        soak.counts[f"{name} server: {reply.status_code} {outcome(final)}"] += 1


async def good_echo(soak: Soak, n: int) -> None:
    """Echo clients of the good server: none of the others' trouble may reach them."""
    who, request_id = f"good_echo{n}", 0
    url = f"{soak.base}/servers/good/mcp"
    while not soak.stop.is_set():
        request_id += 1
        message = f"good{n}-{request_id}"
        _, final = await soak.call(url, who, request_id, "echo", {"message": message})
        if final is None:
            continue
        if "error" in final:
            if not soak.stop.is_set():
                soak.problem(f"{who}: the good server answered {json.dumps(final)[:200]}")
            continue
        if final["result"]["content"][0]["text"] != message:
            soak.problem(f"{who} got another answer")
        soak.counts["good server: echo answered right"] += 1


async def good_legacy(soak: Soak, n: int) -> None:
    await legacy_echo(soak, n, url=f"{soak.base}/servers/good/mcp", who=f"good_legacy{n}")


# -- scenarios ------------------------------------------------------------------------------


async def hangups(soak: Soak) -> None:
    workers = [
        (echo_and_noise, 6), (legacy_echo, 4), (progress, 3), (hang_up_mid_stream, 3),
        (hang_up_mid_body, 2), (crash, 1), (slow_reader, 2),
    ]  # fmt: skip
    await soak.run(["--pool-max", "4", "--", *TEST_SERVER], workers)


async def deaf(soak: Soak) -> None:
    workers = [(deafen, 1), (kill_child, 1), (echo, 4), (delete_mid_call, 2), (resume, 2), (get_stream, 2)]
    await soak.run(["--pool-max", "4", "--stdin-stall-timeout", "5", "--", *TEST_SERVER, "--deafen-tool"], workers)


async def dialogs(soak: Soak) -> None:
    workers = [(dialog, 6), (legacy_dialog, 2), (echo_asking, 2), (url_dialog, 2)]
    await soak.run(["--pool-max", "4", "--round-timeout", "5", "--", *TEST_SERVER, "--era", "legacy"], workers)


async def servers(soak: Soak) -> None:
    config = {
        "mcpServers": {
            "good": {"command": TEST_SERVER[0], "args": TEST_SERVER[1:], "taskTools": ["countdown"]},
            "legacy": {"command": TEST_SERVER[0], "args": [*TEST_SERVER[1:], "--era", "legacy"]},
            "broken": {"command": TEST_SERVER[0], "args": [*TEST_SERVER[1:], "--exit-at-start", "3"]},
        }
    }
    path = soak.log_dir / "servers.json"
    path.write_text(json.dumps(config))
    workers = [(task_client, 4), (task_thief, 1), (broken_server, 1), (legacy_server, 3), (scrape, 1)]
    await soak.run(["--config", str(path)], workers, allowed_errors=("broken: failing after",))


async def keyed(soak: Soak) -> None:
    workers = [(roots_modern, 4), (roots_legacy, 3), (rootless, 2), (subscriber, 3), (echo, 2)]
    server = [*TEST_SERVER, "--era", "legacy", "--cache-roots", "--subscribe"]
    await soak.run(["--pool-max", "3", "--capability-keying", "exact", "--", *server], workers)


async def domains(soak: Soak) -> None:
    command, args = TEST_SERVER[0], TEST_SERVER[1:]
    config = {
        "mcpServers": {
            "good": {"command": command, "args": args},
            "hostile": {"command": command, "args": args, "pool": {"max": 3}},
            "silent": {"command": command, "args": [*args, "--silent"], "probeTimeout": 2, "startupTimeout": 2},
            "sticky": {"command": command, "args": [*args, "--ignore-stdin-eof", "--ignore-sigterm"]},
        }
    }
    path = soak.log_dir / "domains.json"
    path.write_text(json.dumps(config))
    workers = [(good_echo, 4), (good_legacy, 2), (hostile, 4), (never_ready, 1), (scrape, 1)]
    allowed = ("silent", "hostile")  # their own failures, logged as such
    await soak.run(["--config", str(path), "--stall-timeout", "5"], workers, allowed_errors=allowed)


async def rolling(soak: Soak) -> None:
    soak.task_server = "default"  # the one server, named so by the command line
    workers = [(echo, 3), (dialog, 4), (legacy_echo, 3), (task_client, 3)]
    server = ["--task-tool", "countdown", "--", *TEST_SERVER, "--era", "legacy"]
    every = max(1.0, min(5.0, soak.seconds / 3))
    await soak.run(["--pool-max", "4", "--round-timeout", "5", *server], workers, replicas=2, roll_every=every)


SCENARIOS: dict[str, Callable[[Soak], Awaitable[None]]] = {
    "hangups": hangups,
    "deaf": deaf,
    "dialogs": dialogs,
    "servers": servers,
    "keyed": keyed,
    "domains": domains,
    "rolling": rolling,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="how long each scenario's clients run")
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS), help="only these (repeatable)")
    parser.add_argument(
        "--gateway-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="one more option for every scenario's gateway, e.g. --gateway-arg=--workers --gateway-arg=2 (repeatable)",
    )
    args = parser.parse_args(argv)
    lines: list[str] = []
    failed = False
    with tempfile.TemporaryDirectory(prefix="soak-") as directory:
        for name in args.scenario or list(SCENARIOS):
            soak = Soak(name, args.seconds, Path(directory), args.gateway_arg)
            STOLEN.clear()
            asyncio.run(SCENARIOS[name](soak))
            report = soak.report()
            print("\n".join(report), flush=True)
            lines += report
            failed = failed or bool(soak.problems)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
