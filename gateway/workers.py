"""``--workers N``: N gateway processes on one listening socket, one machine.

The supervisor (the process started by the user) binds the socket, then starts N workers
(``multiprocessing`` spawn: a fresh interpreter each, no inherited event loop or threads).
Each worker accepts on the shared socket, so the kernel spreads connections across them,
and each runs its own pools and children. A worker also listens on its own loopback port,
its advertise address: a legacy session or parked MRTR call is owned by the worker that
made it, and a request for it that another worker accepted is forwarded there
(``gateway.http.forward``), as between replicas. The workers share the
``--state-secret-file`` keyring (each reads it, and re-reads it when it changes), or a random
key the supervisor makes for this run. A worker's
body is ``gateway.server.worker_main``, which the server passes to ``supervise``: this module
does not import the server (no import cycle), and ``enter_worker`` is what every worker does first.

Signals: the workers are in their own process group, so a terminal's Ctrl-C reaches only
the supervisor, which sends each worker one SIGTERM per signal it gets: the first drains
every worker (``--drain-timeout``), a second stops them at once. A worker that dies on its
own is started again at once (its sessions are lost: 404, and the clients re-initialize),
or after ``WORKER_RESTART_DELAY`` when it died within ``WORKER_QUICK_EXIT`` of its start;
after ``WORKER_CRASH_LOOP`` failed starts in a row the supervisor stops the rest and exits 1.
Its death is seen at once because no child holds a worker's descriptors: children start
through ``gateway.stdio.process.LAUNCHER``, which closes all but their three pipes (a child
that held the end of the pipe ``multiprocessing`` watches kept a dead worker from being
seen, and one that held the listening socket accepted the gateway's connections), and which
makes the kernel SIGKILL them when their worker dies. It exits 0 once every worker has exited after a signal.
Each worker's ``/status`` and ``/metrics`` say which worker answered (``instance``), and
each line it logs names it (``worker N`` in text, a ``worker`` field in JSON).
"""

from __future__ import annotations

import logging
import logging.handlers
import multiprocessing
import os
import secrets
import signal
import socket
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import Final

from gateway.config import Settings
from gateway.ops import logs
from gateway.stdio.process import become_subreaper, hold_late_signals

log = logging.getLogger("gateway.workers")

WORKER_RESTART_DELAY: Final = 1.0
"""Seconds before a worker that died on its own soon after its start is started again (no
tight crash loop); one that had been running is started again at once."""
WORKER_QUICK_EXIT: Final = 10.0
"""A worker that exits on its own within this many seconds of its start failed to start."""
WORKER_CRASH_LOOP: Final = 5
"""Failed starts in a row after which the supervisor gives up: stops the rest and exits 1."""
SECRET_BYTES: Final = 32
PDEATHSIG: Final = 1  # prctl PR_SET_PDEATHSIG


WorkerMain = Callable[[Settings, socket.socket, bytes | None, int, int, Sequence[socket.socket]], None]
"""A worker's body: settings, the shared socket, the shared random key (None: the workers read
``--state-secret-file``), its index, the count, the
ops listener's shared sockets. A module-level function, so that ``multiprocessing`` spawn can name it."""


def supervise(
    settings: Settings, sock: socket.socket, target: WorkerMain, ops_sockets: Sequence[socket.socket] = ()
) -> int:
    """Run ``settings.workers`` workers (``target``) on ``sock`` (and the ops listener's
    ``ops_sockets``, shared the same way) until a signal has stopped them all."""
    # The file is read here too, so a bad one stops the supervisor before any worker starts.
    secret = None if settings.state_keys() is not None else secrets.token_bytes(SECRET_BYTES)
    context = multiprocessing.get_context("spawn")
    count = settings.workers
    workers: dict[int, BaseProcess] = {}
    started: dict[int, float] = {}
    signals = 0
    failed_starts = 0

    def start(index: int) -> None:
        process = context.Process(
            target=target,
            args=(settings, sock, secret, index, count, list(ops_sockets)),
            name=f"gateway-worker-{index + 1}",
        )
        process.start()
        workers[index] = process
        started[index] = time.monotonic()
        log.info("worker %d of %d: pid %s", index + 1, count, process.pid)

    def stop_all() -> None:
        for process in workers.values():
            if process.pid is not None and process.exitcode is None:
                os.kill(process.pid, signal.SIGTERM)

    def on_signal(sig: int, frame: FrameType | None) -> None:
        nonlocal signals
        signals += 1
        log.info("received %s: %s %d worker(s)", signal.Signals(sig).name, _verb(signals), len(workers))
        stop_all()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        for index in range(count):
            start(index)
        while workers:
            sentinels = {process.sentinel: index for index, process in workers.items()}
            for ready in wait(list(sentinels), timeout=None):
                index = sentinels[ready]  # type: ignore[index]
                process = workers.pop(index)
                process.join()
                if signals:
                    log.info("worker %d exited (%s)", index + 1, process.exitcode)
                    continue
                quick = time.monotonic() - started[index] < WORKER_QUICK_EXIT
                failed_starts = failed_starts + 1 if quick else 0
                if failed_starts >= WORKER_CRASH_LOOP:
                    log.error(
                        "workers failed to start %d times in a row; stopping (see the errors above)", failed_starts
                    )
                    signals += 1
                    stop_all()
                    continue
                delay = WORKER_RESTART_DELAY if quick else 0.0
                log.warning(
                    "worker %d exited on its own (%s); starting it again %s",
                    index + 1,
                    process.exitcode,
                    f"in {delay:g} s" if delay else "now",
                )
                if delay:
                    wait([], timeout=delay)
                if not signals:
                    start(index)
    finally:
        if signals:  # stopping for good: a later signal must not cut the supervisor's last steps
            hold_late_signals()  # straight from ``on_signal``: no moment with the default action
        else:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    return 1 if failed_starts >= WORKER_CRASH_LOOP else 0


def _verb(signals: int) -> str:
    return "draining" if signals == 1 else "stopping"


def enter_worker(settings: Settings, number: int) -> logging.handlers.QueueListener:
    """What a worker process does first: its own process group, death with the supervisor,
    logs that name it, and the subreaper role for its children's orphans. Returns the log
    listener to stop on exit. (The worker itself is ``gateway.server.worker_main``, passed to
    ``supervise``: this module does not import the server.)"""
    os.setpgid(0, 0)  # terminal signals go to the supervisor, which passes on exactly one SIGTERM
    _die_with_parent()
    listener = logs.configure(settings.log_level, settings.log_format)
    _tag_logs(listener, number, settings.log_format)
    become_subreaper()
    return listener


class _WorkerTag(logging.Filter):
    def __init__(self, number: int) -> None:
        super().__init__()
        self.number = number

    def filter(self, record: logging.LogRecord) -> bool:
        record.worker = self.number  # a field of its own in JSON logs
        return True


def _tag_logs(listener: logging.handlers.QueueListener, number: int, fmt: str) -> None:
    """Every line this worker logs says which worker it is."""
    for handler in logging.getLogger().handlers:
        handler.addFilter(_WorkerTag(number))
    if fmt == "text":
        for handler in listener.handlers:
            handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s worker %(worker)s %(name)s: %(message)s"))


def _die_with_parent() -> None:
    """SIGTERM this worker if the supervisor dies without stopping it (Linux), so a killed
    supervisor leaves no worker holding the port."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass
