"""Waiting for a file to change, on Linux's inotify: an event, not a polling loop.

A test child's ``--record FILE`` appends every line it reads from stdin, so "the child has read
the request" is a change of that file. ``wait_until(path, predicate)`` checks ``predicate()``,
then sleeps until the kernel reports a write to (or the creation of) ``path``, and checks again.
Callers bound it with ``anyio.fail_after``.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
from collections.abc import Callable
from pathlib import Path

import anyio

IN_MODIFY, IN_CLOSE_WRITE, IN_CREATE, IN_MOVED_TO = 0x2, 0x8, 0x100, 0x80
IN_NONBLOCK, IN_CLOEXEC = os.O_NONBLOCK, os.O_CLOEXEC

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


async def wait_until(path: Path, predicate: Callable[[], bool]) -> None:
    """Until ``predicate()`` holds, re-checked whenever ``path`` is written (or created)."""
    fd = _libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "inotify_init1")
    try:
        # The directory is watched, so the file may not exist yet.
        mask = IN_MODIFY | IN_CLOSE_WRITE | IN_CREATE | IN_MOVED_TO
        if _libc.inotify_add_watch(fd, str(path.parent).encode(), mask) < 0:
            raise OSError(ctypes.get_errno(), "inotify_add_watch")
        while not predicate():
            await anyio.wait_readable(fd)
            with contextlib.suppress(BlockingIOError):
                os.read(fd, 64 * 1024)  # the events themselves do not matter: the predicate decides
    finally:
        os.close(fd)
