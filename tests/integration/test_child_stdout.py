"""A child's stdout, a pipe of the gateway's own: read by the event loop, closed with the child.

The gateway holds the read end (``gateway.stdio.process.spawn``); these check that it is not
left open, whether the child was read or never got as far, and that a reply read in the
loop's callback arrives.
"""

from __future__ import annotations

import os

import anyio
import pytest

from gateway.stdio.backend import PROCESS_BACKEND, OsProcess
from gateway.stdio.launch import open_child
from tests.conftest import server_spec

pytestmark = pytest.mark.anyio


def open_descriptors() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


async def test_a_child_stopped_before_its_stdout_was_read_leaves_no_descriptor_open() -> None:
    before = open_descriptors()
    with anyio.fail_after(30):
        child = await PROCESS_BACKEND.open(server_spec())
        assert isinstance(child, OsProcess)
        assert open_descriptors() - before, "the child's pipes are open while it runs"
        await child.stop()
    await anyio.wait_all_tasks_blocked()
    assert open_descriptors() <= before


async def test_a_child_read_to_its_end_leaves_no_descriptor_open() -> None:
    before = open_descriptors()
    with anyio.fail_after(30):
        async with open_child(server_spec()) as child:
            reply = await child.request("ping", None)
            assert reply.result == {}  # type: ignore[union-attr]
    await anyio.wait_all_tasks_blocked()
    assert open_descriptors() <= before
