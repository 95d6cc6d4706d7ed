"""What a child has not read of its stdin, as the kernel counts it (``PipeWriter.unread``).

The stall watch (``LineWriter.stalled_since``) looks at it once a maintenance tick: a request
of a few hundred bytes fits in the pipe, so a child that stopped reading shows only there.
Each event loop spawns children its own way, and each is counted its own way: asyncio's with
a pipe (FIONREAD: bytes), uvloop's (libuv) with a socket pair (TIOCOUTQ: the memory of the
writes not read whole). Both are tested with a real child that reads one line when told.
"""

from __future__ import annotations

import sys
from typing import Any

import anyio
import pytest

from gateway.stdio.backend import PipeWriter

pytestmark = pytest.mark.anyio

# Reads one line, says so on stdout, and then reads nothing more (alive, like a hung server).
READS_ONE_LINE = "import sys, time; sys.stdin.readline(); print('read', flush=True); time.sleep(60)"


@pytest.fixture(
    params=[
        pytest.param(("asyncio", {"use_uvloop": False}), id="asyncio-pipe"),
        pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop-socketpair"),
    ]
)
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return request.param


async def test_what_the_child_has_not_read_is_counted_until_it_reads_it() -> None:
    with anyio.fail_after(20):
        process = await anyio.open_process([sys.executable, "-c", READS_ONE_LINE])
        try:
            assert process.stdin is not None
            assert process.stdout is not None
            stdin = PipeWriter.over(process.stdin)
            assert stdin.unread() == 0  # nothing written
            await stdin.send(b'{"first": "line"}\n')
            said = b""
            while not said.endswith(b"\n"):  # its one line on stdout, however the pipe hands it over
                said += await process.stdout.receive()
            assert said.endswith(b"read\n"), said  # it read the line whole
            assert stdin.unread() == 0
            await stdin.send(b'{"second": "line"}\n')  # never read
            held = stdin.unread()
            assert held is not None
            assert held > 0
            assert stdin.unread() == held  # nothing read, nothing written: the count stays
            await stdin.send(b'{"third": "line"}\n')
            more = stdin.unread()
            assert more is not None
            assert more > held
        finally:
            process.kill()
            await process.wait()
        await stdin.aclose()
        assert stdin.unread() is None  # closed: the descriptor may be another file's now
