"""Shared fixtures: the anyio backend, the test server's command line, a child reaper, and how
many xdist workers a run starts."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from gateway.stdio.process import become_subreaper
from gateway.stdio.spec import ChildSpec

# Property tests judge what the code does, never how fast: no per-example deadline (200 ms by
# default: a busy machine can exceed it, and the rerun then reports "Flaky") and no "too slow"
# health check. Every @settings in the suite inherits this profile for what it leaves out.
settings.register_profile("gateway", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("gateway")

TESTS = Path(__file__).resolve().parent
TEST_SERVER = TESTS / "servers" / "testserver.py"


MACHINE_WIDE = pytest.mark.xdist_group("machine-wide")
"""For tests that use what the machine has one of, so that no two of them run at once (xdist
gives a group to one worker, in turn; ``--dist loadgroup``): the Docker engine (the container
tier builds one image, labels its containers, and compose publishes 127.0.0.1:8080) and servers
that bind a port picked for them (``bench.procs.free_port``, below the range the kernel hands
out, so the tests beside them never take it; two pickers in turn never race each other)."""

MAX_WORKERS = 8
"""Workers for ``-n auto`` (pyproject's addopts) at most: past a few, a run is as long as its
longest group (the machine-wide one: the container tier and the bench's servers, about 3.5 min),
and more only start more children at once."""

WORKERS_PER_CORE = 2
"""Workers for ``-n auto`` per usable core. Most of the suite waits on child processes,
sockets and timeouts: with one worker per core, a full run on 2 cores kept them busy about half
the time (52 % over 520 s); with two per core, 81 % over 326 s."""


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """How many xdist workers ``-n auto`` starts: none when every argument names a test
    (``pytest FILE::TEST`` runs in process and starts at once); otherwise ``WORKERS_PER_CORE``
    per usable core, at most ``MAX_WORKERS``. ``PYTEST_XDIST_AUTO_NUM_WORKERS`` still overrides
    it (xdist reads it)."""
    if "PYTEST_XDIST_AUTO_NUM_WORKERS" in os.environ:
        return None
    if config.args and all("::" in arg for arg in config.args):
        return 0
    return min(WORKERS_PER_CORE * len(os.sched_getaffinity(0)), MAX_WORKERS)


@pytest.fixture(scope="session", autouse=True)
def _adopt_orphans() -> None:
    # Grandchildren that a test child leaves behind are re-parented to us, so the gateway's
    # stop ladder can reap them: the sandbox's PID 1 does not.
    become_subreaper()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def server_spec(*flags: str, **options: object) -> ChildSpec:
    """A ChildSpec running tests/servers/testserver.py with FLAGS; short graces by default."""
    options.setdefault("stdin_close_grace", 1.0)
    options.setdefault("sigterm_grace", 1.0)
    options.setdefault("probe_timeout", 5.0)
    options.setdefault("handshake_timeout", 5.0)
    return ChildSpec(sys.executable, (str(TEST_SERVER), *flags), **options)  # type: ignore[arg-type]


def call_params(era_is_modern: bool, name: str, arguments: dict[str, object] | None = None, **meta: object) -> dict:
    """``tools/call`` params for a child of the given era (modern children need ``_meta``)."""
    from gateway.protocol.handshake import modern_meta

    params: dict[str, object] = {"name": name, "arguments": arguments or {}}
    full_meta: dict[str, object] = dict(meta)
    if era_is_modern:
        full_meta.update(modern_meta("test"))
    if full_meta:
        params["_meta"] = full_meta
    return params


def server_processes() -> list[tuple[int, str]]:
    """(pid, state) of every test-server process descending from this one (the gateway runs here)."""
    marker = str(TEST_SERVER).encode()
    found = []
    stack = [os.getpid()]
    while stack:
        pid = stack.pop()
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{pid}/task/{task}/children") as fh:
                    stack.extend(int(child) for child in fh.read().split())
            except OSError:
                continue
        if pid == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                is_server = marker in fh.read()
            with open(f"/proc/{pid}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        if is_server:
            found.append((pid, stat[stat.rfind(b")") + 2 :].split()[0].decode()))
    return found
