"""Docker helpers for the container tier: the engine, the image built once, containers and their logs.

Every container and compose project a test starts carries the label ``mcp-gateway-test`` and is
removed when the test ends (``scripts/ci-docker.sh engine`` also removes leftovers of an
interrupted run). Containers driven from the host use ``--network host`` and bind 127.0.0.1, so
test traffic stays on loopback. Waits follow the container's log stream (``docker logs -f``) or
its events (``docker events``): nothing sleeps, every wait has a bound.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.procs import free_port

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
"""In CI (.ci/run sets CI=true) a missing engine or a failed build fails the tier; elsewhere it skips."""
REPO = Path(__file__).resolve().parents[2]
CI_DOCKER = REPO / "scripts" / "ci-docker.sh"
IMAGE = "mcp-stdio-gateway:container-test"
LABEL = "mcp-gateway-test"
HOST_CA = "/etc/ssl/certs/ca-certificates.crt"
# Test-environment settings, not ones for users: this machine reaches the package registries
# through a proxy whose CA only the host's bundle has (copied into the stand-in bases). Node and
# uv keep their own CA lists, so they are told to use that bundle.
REGISTRY_TRUST = {"NODE_EXTRA_CA_CERTS": HOST_CA, "SSL_CERT_FILE": HOST_CA}
ENGINE_CHECK_TIMEOUT = 20.0
"""Seconds for ``docker info`` to answer before the engine counts as absent."""
BUILD_TIMEOUT = 600.0
"""Seconds for the image build (about 30 s on an idle 2-core machine; pip and apt download)."""
COMMAND_TIMEOUT = 120.0
"""Seconds for one docker command (run, exec, stop, inspect, compose) to finish."""
LOG_LINES_KEPT = 5000
"""Lines of a container's log kept for waits and failure reports (the rest are dropped)."""
# The writable paths docs/deployment.md documents for --read-only (Docker section).
HOME_TMPFS = "/home/gateway:uid=10001,gid=10001,exec"
READ_ONLY_MOUNTS = ("--read-only", "--tmpfs", "/tmp", "--tmpfs", HOME_TMPFS)


def docker(*args: str, timeout: float = COMMAND_TIMEOUT, check: bool = True, **env: str) -> str:
    """Run ``docker ARGS``; its stdout. Raises with stderr on failure when ``check``."""
    done = subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout, env={**os.environ, **env}, check=False
    )
    if check and done.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args)} exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    return done.stdout


def container_log(container: str) -> list[str]:
    """Everything the container wrote, stdout and stderr interleaved as Docker stored them."""
    done = subprocess.run(
        ["docker", "logs", container],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=COMMAND_TIMEOUT,
        check=True,
    )
    return done.stdout.splitlines()


def engine_answers() -> bool:
    try:
        subprocess.run(["docker", "info"], capture_output=True, timeout=ENGINE_CHECK_TIMEOUT, check=True)
    except (OSError, subprocess.SubprocessError):
        return False
    return True


class LogFollower:
    """``docker logs -f`` of one container in a thread: lines kept (bounded), waits on a condition."""

    def __init__(self, container: str) -> None:
        self.lines: list[str] = []
        self.ended = False
        self._changed = threading.Condition()
        self._process = subprocess.Popen(
            ["docker", "logs", "-f", container],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                del self.lines[:-LOG_LINES_KEPT]
                self._changed.notify_all()
        with self._changed:
            self.ended = True
            self._changed.notify_all()

    def records(self) -> list[dict[str, Any]]:
        """The JSON log records seen so far (MCP_GATEWAY_LOG_FORMAT=json, the image's default)."""
        found = []
        with self._changed:
            lines = list(self.lines)
        for line in lines:
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if isinstance(record, dict):
                    found.append(record)
        return found

    def wait_for(self, predicate: Callable[[str], bool], timeout: float, what: str) -> str:
        """The first line (from the start) for which ``predicate`` holds; raises after ``timeout`` s."""
        seen = 0

        def found() -> str | None:
            nonlocal seen
            for line in self.lines[seen:]:
                if predicate(line):
                    return line
            seen = len(self.lines)
            return None

        with self._changed:
            line = None
            if not self._changed.wait_for(lambda: (line := found()) is not None or self.ended, timeout):
                raise TimeoutError(f"no log line {what} in {timeout} s; last lines:\n" + "\n".join(self.lines[-30:]))
            line = found()
            if line is None:
                raise RuntimeError(f"the log ended without a line {what}; last lines:\n" + "\n".join(self.lines[-30:]))
            return line

    def wait_for_message(self, fragment: str, timeout: float, count: int = 1) -> None:
        """Wait until ``count`` JSON records' messages contain ``fragment``."""

        def enough(_: str) -> bool:
            return sum(fragment in str(r.get("message", "")) for r in self.records()) >= count

        self.wait_for(enough, timeout, f"x{count} with {fragment!r}")

    def close(self) -> None:
        self._process.kill()
        self._process.wait()
        self._thread.join(timeout=5)
        if self._process.stdout is not None:
            self._process.stdout.close()


@dataclass
class Container:
    """A running container of the test image, on the host network, with its log followed."""

    id: str
    port: int
    logs: LogFollower
    keep: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def inspect(self) -> dict[str, Any]:
        [info] = json.loads(docker("inspect", self.id))
        return dict(info)

    def exec(self, *command: str, check: bool = True, user: str | None = None) -> str:
        return docker("exec", *(("--user", user) if user else ()), self.id, *command, check=check)

    def wait_ready(self, timeout: float = 180.0) -> None:
        """Every child ready: the gateway logs "child … ready" once per child it started."""
        self.logs.wait_for_message(" ready: ", timeout)

    def processes(self) -> list[dict[str, Any]]:
        """pid, ppid, state and command line of every process in the container (its own pid namespace)."""
        return json.loads(self.exec("python", "-c", PROCESS_LIST))  # type: ignore[no-any-return]


PROCESS_LIST = """
import json, os
found = []
for name in os.listdir("/proc"):
    if not name.isdigit():
        continue
    try:
        stat = open(f"/proc/{name}/stat", "rb").read()
        cmdline = open(f"/proc/{name}/cmdline", "rb").read().replace(b"\\0", b" ").decode().strip()
    except OSError:
        continue
    fields = stat[stat.rfind(b")") + 2 :].split()
    if int(name) != os.getpid():
        found.append({"pid": int(name), "state": fields[0].decode(), "ppid": int(fields[1]), "cmd": cmdline})
print(json.dumps(found))
"""


@contextlib.contextmanager
def running(
    *arguments: str,
    docker_options: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    port: int | None = None,
    network: str = "host",
) -> Iterator[Container]:
    """``docker run -d`` the test image with ``arguments`` (after the image name), then remove it.

    On the host network the gateway binds 127.0.0.1:PORT (a free port); elsewhere it keeps the
    image's 0.0.0.0:8000."""
    port = port or (free_port() if network == "host" else 8000)
    settings = {**REGISTRY_TRUST, **(env or {})}
    if network == "host":
        settings.setdefault("MCP_GATEWAY_HOST", "127.0.0.1")
        settings.setdefault("MCP_GATEWAY_PORT", str(port))
    options = [f"--network={network}", "--label", LABEL, *docker_options]
    for name, value in settings.items():
        options += ["-e", f"{name}={value}"]
    container = docker("run", "-d", *options, IMAGE, *arguments).strip()
    follower = LogFollower(container)
    try:
        yield Container(container, port, follower)
    finally:
        follower.close()
        docker("rm", "-f", "-v", container, check=False)


def events(container: str, *filters: str, since: str) -> subprocess.Popen[str]:
    """``docker events`` for one container, as JSON lines, from ``since`` (a timestamp: the
    events before the call are replayed, so none is missed); kill it when done."""
    options = ["--since", since, "--filter", f"container={container}"]
    for f in filters:
        options += ["--filter", f]
    return subprocess.Popen(["docker", "events", "--format", "{{json .}}", *options], stdout=subprocess.PIPE, text=True)
