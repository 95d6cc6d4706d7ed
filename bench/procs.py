"""The servers under test, each a separate process, so its RSS and CPU are its own.

``Service`` starts a command on a free 127.0.0.1 port, waits (bounded) until a health path
answers 200, reads the process's RSS and CPU time from ``/proc``, and stops it: SIGTERM,
then SIGKILL to its process group after a grace. Output goes to a log file, quoted when
the service fails to come up.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
SERVERS = BENCH / "servers"
PEERS = BENCH / ".peers"
READY_TIMEOUT = 60.0
"""Seconds a service may take to answer its health path (npm peers start slowly)."""
STOP_GRACE = 10.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


EPHEMERAL_PORTS = Path("/proc/sys/net/ipv4/ip_local_port_range")
PICKED_PORTS = 16_384
"""How many ports below the kernel's ephemeral range ``free_port`` picks from."""


def free_port() -> int:
    """A port free on 127.0.0.1 now, for a server that binds it itself (``--port``): picked at
    random below the kernel's ephemeral range (``EPHEMERAL_PORTS``), where neither a socket
    bound to port 0 nor an outgoing connection is ever given a port. So nothing else running
    meanwhile (a test on another pytest worker, another program's servers) takes it between
    this pick and the server's bind, as it could take a port the kernel picked."""
    try:
        first_ephemeral = int(EPHEMERAL_PORTS.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        first_ephemeral = 0  # not Linux: the kernel's own pick
    below = range(max(1024, first_ephemeral - PICKED_PORTS), first_ephemeral)
    for _ in range(100 if below else 0):
        port = secrets.choice(below)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue  # in use (or in TIME_WAIT): another
            return port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def echo_command(*flags: str, slow: bool = False) -> list[str]:
    script = SERVERS / ("slow.py" if slow else "echo.py")
    return [sys.executable, str(script), *flags]


@dataclass
class Service:
    name: str
    argv: list[str]
    port: int
    log_dir: Path
    health_path: str = "/readyz"
    mcp_path: str = "/mcp"
    cwd: Path = REPO
    env: dict[str, str] | None = None
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    started_at: float = 0.0

    @property
    def log_path(self) -> Path:
        return self.log_dir / (re.sub(r"[^A-Za-z0-9_.-]+", "-", self.name).strip("-") + ".log")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def pause(self) -> None:
        """Stop the whole process group (SIGSTOP): an idle server's timers, GC and helper
        processes then take no CPU from the server being measured."""
        self._signal_group(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal_group(signal.SIGCONT)

    def _signal_group(self, sig: signal.Signals) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)  # its own session (start_new_session): pgid = pid

    def start(self) -> Service:
        log = self.log_path.open("ab")
        log.write(f"$ {shlex.join(self.argv)}\n".encode())
        log.flush()
        self.started_at = time.perf_counter()
        self.proc = subprocess.Popen(
            self.argv,
            cwd=self.cwd,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        return self

    def wait_ready(self, timeout: float = READY_TIMEOUT, path: str | None = None) -> float:
        """Poll ``path`` (default: the health path) until it answers 200; return when, after start."""
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}")
            if http_get_status(self.port, path or self.health_path) == 200:
                return time.perf_counter() - self.started_at
            time.sleep(0.02)
        raise RuntimeError(f"{self.name} was not ready within {timeout:g} s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def rss_bytes(self) -> int:
        return rss_of(self.pid)

    def children_rss_bytes(self) -> int:
        return sum(rss_of(pid) for pid in descendants(self.pid))

    def cpu_seconds(self) -> float:
        return cpu_of(self.pid)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(STOP_GRACE)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(STOP_GRACE)

    def __enter__(self) -> Service:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def http_get_status(port: int, path: str) -> int:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
            sock.sendall(f"GET {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\nconnection: close\r\n\r\n".encode())
            head = sock.recv(64)
        return int(head.split(b" ", 2)[1])
    except (OSError, ValueError, IndexError):
        return 0


def rss_of(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as statm:
            return int(statm.read().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


def cpu_of(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    except (OSError, IndexError, ValueError):
        return 0.0


def children(pid: int) -> list[int]:
    """The direct children of ``pid`` (e.g. a ``--workers`` supervisor's workers)."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as listed:
                found += [int(k) for k in listed.read().split()]
        except OSError:
            continue
    return found


def descendants(pid: int) -> list[int]:
    found: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{parent}/task/{task}/children") as children:
                    kids = [int(k) for k in children.read().split()]
            except OSError:
                continue
            found += kids
            todo += kids
    return found


# -- the services -------------------------------------------------------------------------


GATEWAY_CHECKOUT: Path | None = None
"""Another checkout to run the gateway from (``--gateway-checkout``); None: this repository."""


ENGINES = ("uvicorn", "granian")
"""The HTTP engines the bench can serve the gateway with (``--engine``): uvicorn is the
gateway's own (``python -m gateway``); Granian runs the same app (``bench.granian_gateway``)."""
ENGINE = "uvicorn"
"""The engine ``gateway()`` starts (``--engine``)."""


GRANIAN_DIR = PEERS / "granian"
"""Where ``bench/install-peers.sh`` installs Granian (``bench.granian_gateway`` looks there first)."""


def engine_version(engine: str) -> str:
    path = [str(GRANIAN_DIR), *sys.path] if engine == "granian" else sys.path
    for found in metadata.distributions(name=engine, path=path):
        return f"{engine} {found.version}"
    return f"{engine} (not installed)"


def gateway(name: str, log_dir: Path, *flags: str, backend: list[str] | None = None) -> Service:
    port = free_port()
    module = "gateway" if ENGINE == "uvicorn" else "bench.granian_gateway"
    if module != "gateway" and "--workers" in flags:
        raise SystemExit(f"--engine {ENGINE}: --workers is the gateway's own supervisor (uvicorn only)")
    argv = [sys.executable, "-m", module, "--port", str(port), *flags, "--", *(backend or echo_command())]
    if GATEWAY_CHECKOUT is None:
        return Service(name, argv, port, log_dir)
    env = {**os.environ, "PYTHONPATH": f"{GATEWAY_CHECKOUT}{os.pathsep}{REPO}"}
    return Service(name, argv, port, log_dir, cwd=GATEWAY_CHECKOUT, env=env)


def noop(kind: str, log_dir: Path) -> Service:
    port = free_port()
    return Service(
        f"noop-{kind}", [sys.executable, "-m", "bench.noop", "--kind", kind, "--port", str(port)], port, log_dir
    )


def bridge(log_dir: Path, kind: str = "asgi") -> Service:
    """``bench/bridge.py`` in front of the echo server: a bare bridge (a yardstick), on uvicorn
    (``asgi``) or on a bare asyncio protocol (``protocol``)."""
    port = free_port()
    argv = [sys.executable, "-m", "bench.bridge", "--kind", kind, "--port", str(port), "--", *echo_command()]
    return Service("bridge" if kind == "asgi" else f"bridge-{kind}", argv, port, log_dir)


def supergateway_bin() -> Path | None:
    path = PEERS / "node_modules" / ".bin" / "supergateway"
    return path if path.exists() else None


def mcp_proxy_bin() -> Path | None:
    path = PEERS / "venv" / "bin" / "mcp-proxy"
    return path if path.exists() else None


def mcp_proxy_npm_bin() -> Path | None:
    path = PEERS / "node_modules" / ".bin" / "mcp-proxy"
    return path if path.exists() else None


def supergateway(log_dir: Path) -> Service | None:
    """supergateway, stateful: legacy sessions get a child each; 2026-07-28 requests a child each."""
    binary = supergateway_bin()
    if binary is None:
        return None
    port = free_port()
    argv = [
        str(binary),
        "--stdio",
        shlex.join(echo_command()),
        "--outputTransport",
        "streamableHttp",
        "--stateful",
        "--port",
        str(port),
        "--logLevel",
        "none",
        "--healthEndpoint",
        "/healthz",
    ]
    return Service("supergateway", argv, port, log_dir, health_path="/healthz")


MCP_PROXY_PY = "mcp-proxy (PyPI)"
MCP_PROXY_NPM = "mcp-proxy (npm)"


def mcp_proxy(log_dir: Path) -> Service | None:
    """sparfenyuk's mcp-proxy from PyPI (stateful): one stdio child shared by every session."""
    binary = mcp_proxy_bin()
    if binary is None:
        return None
    port = free_port()
    argv = [str(binary), "--host", "127.0.0.1", "--port", str(port), "--", *echo_command()]
    return Service(MCP_PROXY_PY, argv, port, log_dir, health_path="/status")


def mcp_proxy_npm(log_dir: Path) -> Service | None:
    """punkpeye's mcp-proxy from npm, with its default flags (stateful, both eras on /mcp)."""
    binary = mcp_proxy_npm_bin()
    if binary is None:
        return None
    port = free_port()
    argv = [str(binary), "--host", "127.0.0.1", "--port", str(port), "--", *echo_command()]
    return Service(MCP_PROXY_NPM, argv, port, log_dir, health_path="/ping")


CONTEXTFORGE = "ContextForge"
CONTEXTFORGE_SECRETS = (
    "JWT_SECRET_KEY",
    "AUTH_ENCRYPTION_SECRET",
    "BASIC_AUTH_PASSWORD",
    "PLATFORM_ADMIN_PASSWORD",
    "DEFAULT_USER_PASSWORD",
)
"""What ``python -m mcpgateway.scripts.init_secrets`` writes: ContextForge's settings refuse
to load with these unset, placeholder or weak, even for the stdio bridge that uses none of them."""


def contextforge_python() -> Path | None:
    path = PEERS / "contextforge" / "bin" / "python"
    return path if path.exists() else None


def contextforge(log_dir: Path) -> Service | None:
    """IBM ContextForge's stdio bridge (``mcpgateway.translate``), run as issue #42 ran it:
    one child shared by every client, each POST's body written to it as is, and the first
    line from the child with the same JSON-RPC id returned as the answer (1.1.0's
    ``translate.py``: its own ``POST /mcp`` route answers every POST, so ``--stateless`` and
    ``--jsonResponse`` change nothing for a call). Its settings demand fresh secrets,
    generated here per run; it runs in the log directory, so it reads no ``.env`` and
    writes nothing into the repository, and without this checkout's PYTHONPATH (its venv is
    another Python). ``--logLevel error``: no access-log line per call, the benefit of the
    doubt (supergateway runs with ``--logLevel none`` likewise)."""
    python = contextforge_python()
    if python is None:
        return None
    port = free_port()
    argv = [
        str(python),
        "-m",
        "mcpgateway.translate",
        "--stdio",
        shlex.join(echo_command()),
        "--expose-streamable-http",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--logLevel",
        "error",
    ]
    env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    env.update({name: secrets.token_urlsafe(32) for name in CONTEXTFORGE_SECRETS})
    return Service(CONTEXTFORGE, argv, port, log_dir, health_path="/healthz", cwd=log_dir, env=env)


PEER_SERVICES = {
    "supergateway": supergateway,
    MCP_PROXY_NPM: mcp_proxy_npm,
    MCP_PROXY_PY: mcp_proxy,
    CONTEXTFORGE: contextforge,
}
"""Every peer by its table name; each factory returns None when the peer is not installed."""


def _npm_version(package: str) -> str | None:
    manifest = PEERS / "node_modules" / package / "package.json"
    if not manifest.exists():
        return None
    return str(json.loads(manifest.read_text()).get("version", "?"))


def peer_versions() -> dict[str, str]:
    versions: dict[str, str] = {}
    if (version := _npm_version("supergateway")) is not None:
        versions["supergateway"] = version
    if (version := _npm_version("mcp-proxy")) is not None:
        versions[MCP_PROXY_NPM] = version
    for dist in (PEERS / "venv" / "lib").glob("python*/site-packages/mcp_proxy-*.dist-info"):
        versions[MCP_PROXY_PY] = dist.name.split("-")[1].removesuffix(".dist")
    for dist in (PEERS / "contextforge" / "lib").glob("python*/site-packages/mcp_contextforge_gateway-*.dist-info"):
        versions[CONTEXTFORGE] = dist.name.split("-")[1].removesuffix(".dist")
    return versions


def node_version() -> str:
    try:
        done = subprocess.run(["node", "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "not found"
    return done.stdout.strip().removeprefix("v") or "?"
